"""Benchmark input: one simulated hour rendered in every wire format, cached on disk, produced to Kafka.

Run as a separate process by :mod:`bench.run` (so that generation never counts in the measured
process's memory)::

    python -m bench.data render  --events N --seed S --start ISO --formats dbz,canal,... [--source fast|sim]
    python -m bench.data produce --bootstrap HOST:PORT --topic T --file F.bin

``render`` builds the history (:class:`bench.source.FastSource`, or the library's own
:class:`cdclake.sim.SimulatedSource` for the small warm-up hour), renders it with the renderers of
:data:`cdclake.sim.wire.WIRE_FORMATS` (two formats at a time, one per core) and writes, under
``bench/.data/cache/<key>/`` (``key`` = size, seed, start and a hash of the simulator's source):

- ``<tag>.bin``: the messages in production order, each a ``<iqii`` header (partition,
  timestamp ms, key length, value length; -1 for None) followed by the key and value bytes;
- ``<tag>.json``: message count, bytes, messages per partition;
- ``summary.json``: the history's shape (transactions, row changes, distinct keys, ops);
- ``expected/<table>.jsonl``: the source's final state, one row per line, every value in the
  canonical text form of :mod:`cdclake.types` (``null`` for NULL);
- ``changes/<table>.parquet``: the hour's net change per key (one row per key the hour touched:
  ``_op`` ``upsert`` with the final row, typed as in silver, or ``delete`` with only the key set):
  what silver's collapse yields for this hour merged into empty tables;
- ``dbz-payload/part-*.parquet`` (when asked for with the ``dbz-payload`` tag): the Debezium
  rendering without the Connect schema envelope, one ``value`` per message (tombstones left out),
  in four files, for the ``from_json`` reference.

With ``--export DIR`` it also writes the Debezium JSON and Canal JSON message values per source
table (``DIR/<format>/<table>.jsonl``, one message per line, production order; tombstones left
out, Canal's DDL messages in ``DIR/canal-json/_ddl.jsonl``) and copies the expected state and the
changes to ``DIR/expected/`` and ``DIR/changes/``: the input of the peers (see ``bench/README.md``).

A cached rendering is reused as long as the key matches; ``rm -rf bench/.data`` clears it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import hashlib
import json
import multiprocessing as mp
import shutil
import struct
import sys
import time
from pathlib import Path
from typing import Iterator, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DATA_DIR = BENCH_DIR / ".data"
HEADER = struct.Struct("<iqii")
EXPORTED = {"dbz": "debezium-json", "canal": "canal-json"}
#: Pseudo-format: the Debezium rendering without the schema envelope, for the ``from_json`` reference.
PAYLOAD_TAG = "dbz-payload"
PAYLOAD_FILE = "dbz-payload"  # a directory of Parquet files (so that Spark reads it with several tasks)

# set in the parent before forking the renderers (shared copy-on-write)
_HISTORY: list = []
_TABLES: dict = {}


def wire_formats() -> dict:
    """``{tag: WireFormat}`` in the library's order."""
    from cdclake.sim.wire import WIRE_FORMATS

    return {wf.tag: wf for wf in WIRE_FORMATS}


def source_hash() -> str:
    """Hash of the code that decides the rendered bytes (simulator, renderers, type texts, bench source)."""
    h = hashlib.sha256()
    files = sorted((REPO_ROOT / "jobs" / "cdclake" / "sim").glob("*.py")) + [
        REPO_ROOT / "jobs" / "cdclake" / "types.py", REPO_ROOT / "jobs" / "cdclake" / "formats" / "dts" / "schema.py",
        BENCH_DIR / "source.py", BENCH_DIR / "data.py"]
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def cache_dir(events: int, seed: int, start: dt.datetime, source: str) -> Path:
    return DATA_DIR / "cache" / f"{source}-{events}-s{seed}-{start:%Y%m%dT%H}-{source_hash()}"


def make_source(events: int, seed: int, start: dt.datetime, source: str):
    """The one-hour simulated source: ``fast`` (:class:`bench.source.FastSource`) or ``sim`` (the library's)."""
    if source == "fast":
        from bench.source import history_for_events

        return history_for_events(events, start, seed)
    from cdclake.sim import SimulatedSource

    return SimulatedSource(seed=seed, start=start, hours=1, tx_per_hour=max(20, round(events / 2.85)))


# ---------------------------------------------------------------------------------------------
# message files


def write_messages(path: Path, messages) -> dict:
    """Write messages to ``path`` (see module docstring); return counts and bytes."""
    per_part: dict[int, int] = {}
    value_bytes = key_bytes = values = 0
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb", buffering=8 << 20) as f:
        for m in messages:
            k, v = m.key, m.value
            f.write(HEADER.pack(m.partition, m.timestamp_ms, -1 if k is None else len(k), -1 if v is None else len(v)))
            if k is not None:
                f.write(k)
                key_bytes += len(k)
            if v is not None:
                f.write(v)
                value_bytes += len(v)
                values += 1
            per_part[m.partition] = per_part.get(m.partition, 0) + 1
    tmp.replace(path)
    n = sum(per_part.values())
    return {"messages": n, "values": values, "tombstones": n - values, "value_bytes": value_bytes,
            "key_bytes": key_bytes, "mean_value_bytes": round(value_bytes / values, 1) if values else 0,
            "per_partition": {str(p): c for p, c in sorted(per_part.items())}}


def read_messages(path: Path) -> Iterator[tuple[int, int, Optional[bytes], Optional[bytes]]]:
    """``(partition, timestamp_ms, key, value)`` of every message in a file of :func:`write_messages`."""
    with open(path, "rb", buffering=8 << 20) as f:
        while True:
            head = f.read(HEADER.size)
            if not head:
                return
            part, ts, klen, vlen = HEADER.unpack(head)
            key = f.read(klen) if klen >= 0 else None
            value = f.read(vlen) if vlen >= 0 else None
            yield part, ts, key, value


def _export_tables(tag: str, messages, history, out: Path) -> dict:
    """Per source table JSONL of message values (see module docstring); returns lines per file."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.jsonl"):
        old.unlink()
    tables = [ch.table for tx in history for ch in tx.changes]
    files: dict[str, object] = {}
    counts: dict[str, int] = {}
    i = 0
    try:
        for m in messages:
            if m.rows:
                name, i = tables[i], i + m.rows
            elif m.value is not None:
                name = "_ddl"
            else:
                continue  # Kafka tombstone: no value to write
            if m.value is None:
                continue
            f = files.get(name)
            if f is None:
                f = files[name] = open(out / f"{name}.jsonl", "wb", buffering=4 << 20)
            f.write(m.value)
            f.write(b"\n")
            counts[name] = counts.get(name, 0) + 1
    finally:
        for f in files.values():
            f.close()
    return counts


def _render_payload(target: Path) -> dict:
    """The Debezium messages without the Connect schema envelope (values only), as Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cdclake.sim import debezium_json

    t0 = time.monotonic()
    values = [m.value for m in debezium_json(_HISTORY, _TABLES, with_schema=False) if m.value is not None]
    tmp = target / "dbz-payload.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    parts = 4
    step = -(-len(values) // parts)
    for i in range(parts):
        chunk = values[i * step:(i + 1) * step]
        pq.write_table(pa.table({"value": pa.array(chunk, pa.binary())}), tmp / f"part-{i}.parquet",
                       row_group_size=50_000)
    dest = target / PAYLOAD_FILE
    if dest.exists():
        shutil.rmtree(dest)
    tmp.replace(dest)
    info = {"format": "debezium-json (no schema envelope)", "messages": len(values),
            "value_bytes": sum(map(len, values)), "render_s": round(time.monotonic() - t0, 1)}
    info["mean_value_bytes"] = round(info["value_bytes"] / max(1, len(values)), 1)
    return info


def _render_one(args: tuple) -> tuple[str, dict]:
    tag, target, export_dir = args
    if tag == PAYLOAD_TAG:
        info = _render_payload(target)
        (target / f"{tag}.json").write_text(json.dumps(info, indent=1))
        return tag, info
    t0 = time.monotonic()
    wf = wire_formats()[tag]
    messages = wf.messages(_HISTORY, _TABLES)
    rendered = time.monotonic() - t0
    info = write_messages(target / f"{tag}.bin", messages)
    info.update(format=wf.format, partitions=wf.partitions, render_s=round(rendered, 1),
                rows=sum(m.rows for m in messages))
    if export_dir is not None and tag in EXPORTED:
        info["exported"] = _export_tables(tag, messages, _HISTORY, export_dir / EXPORTED[tag])
    (target / f"{tag}.json").write_text(json.dumps(info, indent=1))
    return tag, info


def _write_expected(src, out: Path) -> dict:
    from cdclake.types import to_text

    out.mkdir(parents=True, exist_ok=True)
    state = src.final_state()
    rows = {}
    for name, table in src.tables.items():
        types = {c.name: c.ctype for c in table.columns}
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for key in sorted(state[name]):
                row = state[name][key]
                f.write(json.dumps({c: to_text(row[c], types[c]) for c in table.column_names}, ensure_ascii=False))
                f.write("\n")
        rows[name] = len(state[name])
    return rows


def _arrow_type(ctype: str):
    import pyarrow as pa

    from cdclake.types import decimal_precision_scale

    ps = decimal_precision_scale(ctype)
    if ps:
        return pa.decimal128(*ps)
    return {"bigint": pa.int64(), "int": pa.int32(), "smallint": pa.int16(), "double": pa.float64(),
            "float": pa.float32(), "boolean": pa.bool_(), "binary": pa.binary(), "date": pa.date32(),
            "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_ntz": pa.timestamp("us")}.get(ctype, pa.string())


def _write_changes(src, history, out: Path) -> dict:
    """The net change per key of the hour, per table, as Parquet (see module docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    state = src.final_state()
    counts = {}
    for name, table in src.tables.items():
        touched = sorted({ch.key for tx in history for ch in tx.changes if ch.table == name})
        final = state[name]
        cols = {c.name: [] for c in table.columns}
        ops = []
        for key in touched:
            row = final.get(key)
            if row is None:
                row = dict(zip(table.primary_key, key))
            for c in table.columns:
                v = row.get(c.name)
                if isinstance(v, dt.datetime) and v.tzinfo is None:
                    v = v.replace(tzinfo=dt.timezone.utc)  # naive UTC in the simulator
                cols[c.name].append(v)
            ops.append("upsert" if key in final else "delete")
        arrays = {c.name: pa.array(cols[c.name], _arrow_type(c.ctype)) for c in table.columns}
        arrays["_op"] = pa.array(ops, pa.string())
        pq.write_table(pa.table(arrays), out / f"{name}.parquet")
        counts[name] = {"upserts": ops.count("upsert"), "deletes": ops.count("delete")}
    return counts


def render(events: int, seed: int, start: dt.datetime, tags: list[str], source: str = "fast", jobs: int = 2,
           export_dir: Optional[Path] = None) -> dict:
    """Render (or reuse) the hour in ``tags``; return ``summary.json`` with the per-format ``formats`` infos."""
    global _HISTORY, _TABLES
    target = cache_dir(events, seed, start, source)
    target.mkdir(parents=True, exist_ok=True)
    summary_file = target / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
    export_key = target.name
    export_ok = export_dir is None or all(
        (export_dir / EXPORTED[t] / "_key").exists() and (export_dir / EXPORTED[t] / "_key").read_text() == export_key
        for t in tags if t in EXPORTED)
    def done(t: str) -> bool:
        data = target / (PAYLOAD_FILE if t == PAYLOAD_TAG else f"{t}.bin")
        return data.exists() and (target / f"{t}.json").exists()

    todo = [t for t in tags if not done(t) or (export_dir is not None and t in EXPORTED and not export_ok)]
    if summary is not None and not todo:
        summary["formats"] = {t: json.loads((target / f"{t}.json").read_text()) for t in tags}
        summary["cached"] = True
        if export_dir is not None:
            _copy_expected(target, export_dir, export_key)
        return summary

    t0 = time.monotonic()
    src = make_source(events, seed, start, source)
    history = src.run()
    gen_s = time.monotonic() - t0
    if summary is None:
        keys: dict[str, set] = {name: set() for name in src.tables}
        ops: dict[str, int] = {}
        for tx in history:
            for ch in tx.changes:
                keys[ch.table].add(ch.key)
                ops[ch.op] = ops.get(ch.op, 0) + 1
        expected_rows = _write_expected(src, target / "expected")
        changes_rows = _write_changes(src, history, target / "changes")
        summary = {
            "source": source, "seed": seed, "start": start.isoformat(), "cache": str(target),
            "transactions": len(history), "events": sum(ops.values()), "ops": ops,
            "distinct_keys": {t: len(k) for t, k in keys.items()}, "distinct_keys_total": sum(len(k) for k in keys.values()),
            "expected_rows": expected_rows, "changes_rows": changes_rows, "history_s": round(gen_s, 1),
            "tables": {name: {"primary_key": list(t.primary_key), "columns": {c.name: c.ctype for c in t.columns}}
                       for name, t in src.tables.items()},
        }
        del keys
        summary_file.write_text(json.dumps(summary, indent=1))

    # big formats first, each paired with small ones, so that two large renderings rarely overlap
    order = ["dbz", "canal", "splex", "qlikj", "arcion", PAYLOAD_TAG, "dts", "cdl", "qlika"]
    todo.sort(key=lambda t: order.index(t) if t in order else len(order))
    _HISTORY, _TABLES = history, src.tables
    t1 = time.monotonic()
    if jobs > 1 and len(todo) > 1:
        gc.collect()
        gc.freeze()  # keep the forked renderers from copying the history's pages for the collector
        ctx = mp.get_context("fork")
        with ctx.Pool(min(jobs, len(todo)), maxtasksperchild=1) as pool:
            for tag, info in pool.imap_unordered(_render_one, [(t, target, export_dir) for t in todo]):
                print(f"rendered {tag}: {info['messages']} messages, {info['value_bytes'] / 1e6:.0f} MB "
                      f"in {info['render_s']} s", file=sys.stderr, flush=True)
        gc.unfreeze()
    else:
        for t in todo:
            _render_one((t, target, export_dir))
    summary["render_s"] = round(time.monotonic() - t1, 1)
    summary_file.write_text(json.dumps(summary, indent=1))
    if export_dir is not None:
        for t in tags:
            if t in EXPORTED:
                (export_dir / EXPORTED[t] / "_key").write_text(export_key)
        _copy_expected(target, export_dir, export_key)
    summary["formats"] = {t: json.loads((target / f"{t}.json").read_text()) for t in tags}
    summary["cached"] = False
    return summary


def _copy_expected(target: Path, export_dir: Path, key: str) -> None:
    for name in ("expected", "changes"):
        dest = export_dir / name
        if (dest / "_key").exists() and (dest / "_key").read_text() == key:
            continue
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(target / name, dest)
        (dest / "_key").write_text(key)


# ---------------------------------------------------------------------------------------------
# producing


#: Producer settings for large batches (:func:`produce_records`).
BATCHED = {"batch.num.messages": 10_000, "batch.size": 4_000_000, "linger.ms": 50,
           "queue.buffering.max.kbytes": 262_144}


def produce_records(bootstrap: str, records, per_partition: dict[tuple[str, int], int]) -> int:
    """Produce ``(topic, Message)`` pairs in order with one producer; return how many.

    Records go in large batches (:data:`BATCHED`), except each partition's last record, which is
    produced alone after a flush: the embedded broker (tansu, memory storage) reports a
    partition's high watermark as the base offset of its last record batch + 1, so the last batch
    must hold one record for the high watermark to be the log end (``cdclake.sim.kafka`` produces
    every record alone for the same reason, which is ten times slower). ``per_partition``: the
    number of records of each ``(topic, partition)`` among ``records``.
    """
    from cdclake.sim import produce_to

    remaining = dict(per_partition)
    held: list = []

    def stream():
        for topic, m in records:
            tp = (topic, m.partition)
            remaining[tp] -= 1
            if remaining[tp] == 0:
                held.append((topic, m))
            else:
                yield topic, m

    n = produce_to(bootstrap, stream(), producer_config=BATCHED, timeout=600)
    return n + produce_to(bootstrap, held)


def produce_file(bootstrap: str, topic: str, path: Path, partitions: int) -> dict:
    """Create ``topic`` and produce the messages of ``path`` in order (:func:`produce_records`);
    return counts and seconds."""
    from cdclake.sim import Message, create_topic

    meta = json.loads(path.with_suffix(".json").read_text())
    t0 = time.monotonic()
    create_topic(bootstrap, topic, partitions)
    n = produce_records(bootstrap, ((topic, Message(key, value, ts, part)) for part, ts, key, value in read_messages(path)),
                        {(topic, int(p)): c for p, c in meta["per_partition"].items()})
    return {"topic": topic, "messages": n, "produce_s": round(time.monotonic() - t0, 1)}


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Delete topics (frees the embedded broker's memory); missing topics are ignored."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for _topic, fut in admin.delete_topics(list(topics), operation_timeout=60).items():
        try:
            fut.result(timeout=60)
        except Exception:
            pass


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.data")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("render")
    r.add_argument("--events", type=int, required=True)
    r.add_argument("--seed", type=int, default=42)
    r.add_argument("--start", required=True)
    r.add_argument("--formats", required=True)
    r.add_argument("--source", choices=("fast", "sim"), default="fast")
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--export", default=None)
    r.add_argument("--summary-out", required=True)
    pr = sub.add_parser("produce")
    pr.add_argument("--bootstrap", required=True)
    pr.add_argument("--topic", required=True)
    pr.add_argument("--file", required=True)
    pr.add_argument("--partitions", type=int, required=True)
    args = p.parse_args(argv)
    if args.cmd == "render":
        start = dt.datetime.fromisoformat(args.start.replace("Z", "+00:00"))
        summary = render(args.events, args.seed, start, args.formats.split(","), args.source, args.jobs,
                         Path(args.export) if args.export else None)
        Path(args.summary_out).write_text(json.dumps(summary, indent=1))
    else:
        print(json.dumps(produce_file(args.bootstrap, args.topic, Path(args.file), args.partitions)))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    sys.exit(main())
