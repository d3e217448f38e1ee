"""Profile of the normalize stage's Python side: what a Python worker runs, one process, no Spark tasks.

::

    python -m bench.profile_parse [--events 50000] [--formats dbz,canal] [--top 15] [--out DIR] [--date D]
                                  [--per-record] [--py-spy]

Renders the hour as :mod:`bench.run` does (the same cache), then for each format feeds every
message, as Arrow batches of the raw table (:data:`cdclake.lake.RAW_SCHEMA`, 10,000 records per
batch as Spark hands them over), to :func:`cdclake.normalize.parse_batches`: the whole job of
normalize's Python worker (the columnar fast path, the per-record parser for what it leaves,
the checks, the Arrow batch of bronze, quarantine and control rows). ``--per-record`` feeds the
records one by one to :func:`cdclake.normalize.classify` instead (the per-record parser alone).
Each format runs twice: once timed, once under ``cProfile``, or with ``--py-spy`` sampled by
py-spy (in the lock; no instrumentation, so the shares are not distorted by the
profiler's cost per call): the run's own time per function (the innermost frame, native code
included) and the time per step of the worker. Prints records/s and change rows/s on one core and
the profile, and writes them to ``<out>/<date>-parse-profile.txt``. Comparing records/s with the
normalize stage's figure of ``make bench`` (two cores, through Spark) tells how much of normalize
is the Python worker and how much Spark's transfer and the bronze writes.
"""
from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import gc
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Optional

from bench import data as bdata
from bench.run import ALL_FORMATS, BENCH_DIR, MEASURED_START

#: Records per Arrow batch, as Spark hands them to a Python worker (``spark.sql.execution.arrow.maxRecordsPerBatch``).
BATCH_RECORDS = 10_000
#: The worker's steps (functions of :mod:`cdclake.normalize.rows` and the fast path) whose
#: samples ``--py-spy`` counts, each with the samples of everything it calls.
STEPS = ("batch_records", "fast_rows", "envelope_payloads", "convert_images", "staged_row", "classify_records",
         "tagged_batch")


def load_format(tag: str, cache: Path):
    """``(parser, rows)``: the format's parser as the bench's pipeline builds it and the cached
    messages of ``tag`` as :class:`cdclake.normalize.RawRow` of topic ``bench.<tag>``."""
    import json

    from cdclake.formats import get_parser
    from cdclake.normalize import RawRow, kafka_record
    from cdclake.record import SchemaAwareParser

    wf = bdata.wire_formats()[tag]
    opts = json.loads(json.dumps(wf.options))
    options = dict(opts.get("options") or {})
    for k in ("primary_key", "primary_keys"):
        if k in opts:
            options[k] = opts[k]
    parser = get_parser(wf.format, options)
    hour = MEASURED_START.replace(tzinfo=None)
    offsets: dict[int, int] = {}
    rows = []
    for part, ts, key, value in bdata.read_messages(cache / f"{tag}.bin"):
        off = offsets[part] = offsets.get(part, -1) + 1
        rows.append(RawRow(f"bench.{tag}", part, off, ts, hour, key, value, []))
    if isinstance(parser, SchemaAwareParser):
        # what normalize's register_schemas does first: the table definitions of the hour's
        # metadata messages (Qlik Replicate), given to the parser (not timed)
        entries = {}
        for r in rows:
            for e in parser.schema_entries(kafka_record(r)):
                entries.setdefault(e.schema_id, e)
        parser = parser.with_schemas(list(entries.values()))
    return parser, rows


def raw_batches(rows: list, schema) -> list:
    """``rows`` as Arrow record batches of the raw table's Arrow ``schema``, :data:`BATCH_RECORDS` each."""
    import pyarrow as pa

    out = []
    for i in range(0, len(rows), BATCH_RECORDS):
        chunk = rows[i:i + BATCH_RECORDS]
        cols = {n: [getattr(r, n) for r in chunk] for n in schema.names}
        out.append(pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema))
    return out


def run_worker(parser, rows: list, batches: Optional[list], tagged_schema) -> dict[str, int]:
    """One pass of the worker's job over the format's records; returns rows per kind
    (``change``, ``quarantine``, ``control``) and ``fast``, the records the fast path read."""
    from cdclake.normalize import classify, parse_batches

    kinds: dict[str, int] = {}
    if batches is None:
        for kind, _ in classify(parser, rows):
            kinds[kind] = kinds.get(kind, 0) + 1
        return kinds
    import pyarrow.compute as pc

    for out in parse_batches({rows[0].kafka_topic: parser}, tagged_schema, batches):
        for count in pc.value_counts(out.column("_kind")).to_pylist():
            kinds[count["values"]] = kinds.get(count["values"], 0) + count["counts"]
        kinds["fast"] = kinds.get("fast", 0) + pc.sum(pc.and_(out.column("_first"), out.column("_fast"))).as_py()
    return kinds


def sampled(call, top: int) -> str:
    """Run ``call()`` while py-spy samples this process; the samples per step of the worker
    (:data:`STEPS`) and the ``top`` functions with the most own time (innermost frame)."""
    import collections
    import os
    import shutil
    import signal
    import subprocess
    import tempfile

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out = Path(tempfile.mkdtemp(prefix="parse-pyspy-")) / "stacks.txt"
    proc = subprocess.Popen([spy, "record", "--pid", str(os.getpid()), "--rate", "250", "--format", "raw",
                             "--nonblocking", "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(2)  # py-spy attaches
    call()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if not out.exists():
        return f"py-spy wrote no samples: {err.decode(errors='replace').strip()[-500:]}"
    own, steps, total = collections.Counter(), collections.Counter(), 0
    for line in out.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f for f in stack.split(";") if not f.startswith("process ")]
        if not frames or not any(f.startswith("run_worker ") for f in frames):
            continue
        n = int(count)
        total += n
        own[frames[-1].rsplit(":", 1)[0] + ")"] += n
        for name in {f.split(" ", 1)[0] for f in frames} & set(STEPS):
            steps[name] += n
    if not total:
        return "py-spy sampled nothing of the worker's job"
    lines = [f"py-spy: {total} samples of the worker's job (250 per second)", "", "by step (each with what it calls):"]
    lines += [f"  {100 * steps[s] / total:5.1f} %  {s}" for s in STEPS if steps[s]]
    lines += ["", "own time (innermost Python frame: a call into native code, e.g. msgspec or pyarrow, counts as its caller's):"]
    lines += [f"  {100 * n / total:5.1f} %  {f}" for f, n in own.most_common(top)]
    return "\n".join(lines)


def profile_format(tag: str, cache: Path, top: int, schemas: Optional[tuple] = None,
                   py_spy: bool = False) -> tuple[dict, str]:
    """Time and profile the worker's job over the cached messages of ``tag``: with ``schemas``
    (the Arrow schemas of the raw table and of :data:`cdclake.normalize.rows.TAGGED_SCHEMA`)
    :func:`cdclake.normalize.parse_batches` on Arrow batches, else ``classify`` record by
    record; the profile by cProfile, or by py-spy with ``py_spy``. Returns (figures, report text)."""
    parser, rows = load_format(tag, cache)
    batches = raw_batches(rows, schemas[0]) if schemas else None
    tagged = schemas[1] if schemas else None
    # the hour's records held here are not in a worker's heap: keep them out of the collections
    # Python starts between batches (a worker holds one batch)
    gc.collect()
    gc.freeze()
    t0 = time.perf_counter()
    kinds = run_worker(parser, rows, batches, tagged)
    wall = time.perf_counter() - t0
    if py_spy:
        body = sampled(lambda: run_worker(parser, rows, batches, tagged), top)
    else:
        prof = cProfile.Profile()
        prof.enable()
        run_worker(parser, rows, batches, tagged)
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).strip_dirs().sort_stats("tottime").print_stats(top)
        body = text.getvalue()
        body = body[body.index("ncalls"):] if "ncalls" in body else body
    gc.unfreeze()
    figures = {"format": parser.format_name,
               "records": len(rows), "change_rows": kinds.get("change", 0), "quarantined": kinds.get("quarantine", 0),
               "control": kinds.get("control", 0), "fast_path_records": kinds.get("fast"), "wall_s": round(wall, 2),
               "records_per_s": round(len(rows) / wall), "change_rows_per_s": round(kinds.get("change", 0) / wall)}
    return figures, body


def arrow_schemas() -> tuple:
    """The Arrow schemas of the raw table and of the worker's output, as normalize makes them on its driver."""
    from cdclake.lake import RAW_SCHEMA, arrow_schema
    from cdclake.normalize import tagged_arrow_schema

    return arrow_schema(RAW_SCHEMA), tagged_arrow_schema()


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_parse", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--formats", default="dbz,canal")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--top", type=int, default=15, help="functions listed per format")
    p.add_argument("--out", default=str(BENCH_DIR / "results"))
    p.add_argument("--date", default=None)
    p.add_argument("--per-record", action="store_true", help="classify record by record instead of the worker's batches")
    p.add_argument("--py-spy", action="store_true", help="sample with py-spy instead of cProfile")
    args = p.parse_args(argv)
    tags = [t.strip() for t in args.formats.split(",") if t.strip()]
    unknown = [t for t in tags if t not in ALL_FORMATS]
    if unknown:
        p.error(f"unknown format tag(s) {unknown}; known: {','.join(ALL_FORMATS)}")
    summary = bdata.render(args.events, args.seed, MEASURED_START, tags, "fast", 1)
    cache = Path(summary["cache"])
    schemas = None if args.per_record else arrow_schemas()
    job = "classify, record by record" if args.per_record else "parse_batches, the worker's Arrow batches"
    lines = [f"# parse profile, {args.events} row changes, {job}, one process, Python {sys.version.split()[0]}"]
    for tag in tags:
        figures, body = profile_format(tag, cache, args.top, schemas, args.py_spy)
        head = (f"{tag} ({figures['format']}): {figures['records']} records -> {figures['change_rows']} change rows in "
                f"{figures['wall_s']} s: {figures['records_per_s']:,} records/s, {figures['change_rows_per_s']:,} "
                f"change rows/s on one core"
                + ("" if figures["fast_path_records"] is None else f", {figures['fast_path_records']:,} records by the fast path"))
        print(head, flush=True)
        lines += ["", head, "", body.rstrip()]
    out = Path(args.out) / f"{args.date or dt.date.today().isoformat()}-parse-profile.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"profile written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
