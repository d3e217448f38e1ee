"""Profile of the normalize stage's Python side: the parsers alone, one process, no Spark.

::

    python -m bench.profile_parse [--events 50000] [--formats dbz,canal] [--top 15] [--out DIR] [--date D]

Renders the hour as :mod:`bench.run` does (the same cache), then for each format feeds every
message to :func:`cdclake.normalize.classify` (parse, checks and the bronze row tuple: everything
normalize runs in a Python worker per record) twice: once timed, once under ``cProfile``. Prints
records/s and change rows/s on one core and the functions with the most own time, and writes them
to ``<out>/<date>-parse-profile.txt``. Comparing records/s with the normalize stage's figure of
``make bench`` (two cores, through Spark) tells how much of normalize is the parsers and how much
Spark's row transfer and the bronze writes.
"""
from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Optional

from bench import data as bdata
from bench.run import ALL_FORMATS, BENCH_DIR, MEASURED_START

def profile_format(tag: str, cache: Path, top: int) -> tuple[dict, str]:
    """Time and profile ``classify`` over the cached messages of ``tag``; return (figures, report text)."""
    import json

    from cdclake.normalize import RawRow, classify, kafka_record
    from cdclake.formats import get_parser
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
    t0 = time.perf_counter()
    kinds: dict[str, int] = {}
    for kind, _ in classify(parser, rows):
        kinds[kind] = kinds.get(kind, 0) + 1
    wall = time.perf_counter() - t0
    prof = cProfile.Profile()
    prof.enable()
    for _ in classify(parser, rows):
        pass
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).strip_dirs().sort_stats("tottime").print_stats(top)
    figures = {"format": wf.format, "records": len(rows), "change_rows": kinds.get("change", 0),
               "quarantined": kinds.get("quarantine", 0), "control": kinds.get("control", 0), "wall_s": round(wall, 2),
               "records_per_s": round(len(rows) / wall), "change_rows_per_s": round(kinds.get("change", 0) / wall)}
    body = text.getvalue()
    body = body[body.index("ncalls"):] if "ncalls" in body else body
    return figures, body


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile_parse", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--formats", default="dbz,canal")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--top", type=int, default=15, help="functions listed per format")
    p.add_argument("--out", default=str(BENCH_DIR / "results"))
    p.add_argument("--date", default=None)
    args = p.parse_args(argv)
    tags = [t.strip() for t in args.formats.split(",") if t.strip()]
    unknown = [t for t in tags if t not in ALL_FORMATS]
    if unknown:
        p.error(f"unknown format tag(s) {unknown}; known: {','.join(ALL_FORMATS)}")
    summary = bdata.render(args.events, args.seed, MEASURED_START, tags, "fast", 1)
    cache = Path(summary["cache"])
    lines = [f"# parse profile, {args.events} row changes, one process, Python {sys.version.split()[0]}"]
    for tag in tags:
        figures, body = profile_format(tag, cache, args.top)
        head = (f"{tag} ({figures['format']}): {figures['records']} records -> {figures['change_rows']} change rows in "
                f"{figures['wall_s']} s: {figures['records_per_s']:,} records/s, {figures['change_rows_per_s']:,} "
                f"change rows/s on one core")
        print(head, flush=True)
        lines += ["", head, "", body.rstrip()]
    out = Path(args.out) / f"{args.date or dt.date.today().isoformat()}-parse-profile.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"profile written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
