"""Benchmark peer: pyiceberg's ``Table.upsert`` / ``Table.delete`` applying deduplicated changes.

The pure-Arrow alternative to a Spark MERGE: given the final change per key (one row per key,
``_op`` in ``{'upsert', 'delete'}``), apply it to an Iceberg table with pyiceberg, and time it.

What pyiceberg 0.12 offers (read from its source, ``pyiceberg/table/__init__.py`` and
``table/upsert_util.py``):

- ``Transaction.upsert(df, join_cols)`` inserts unmatched rows and overwrites matched rows whose
  non-key values differ. It has **no delete**: rows missing from ``df`` stay. It refuses a
  ``df`` with duplicate keys. It scans the matching rows with an ``In(key, [...])`` filter
  (``Or`` of ``And(EqualTo ...)`` for composite keys), compares matched rows **one by one in
  Python** (``get_rows_to_update``), then ``overwrite``s the changed rows (copy-on-write:
  affected data files are rewritten) and ``append``s the new ones.
- ``Transaction.delete(filter)`` is copy-on-write only (merge-on-read falls back with a
  warning): files whose rows all match are dropped, others rewritten without the rows.

So deletes go through ``delete`` with a key filter, then the upserts through ``upsert``, both
in one transaction per table (one catalog commit; several snapshots). Keys of deletes and
upserts are disjoint (one change per key), so the order does not matter.

The work runs in a subprocess of the same interpreter (so peak RSS is that of the peer alone,
not of the caller): :func:`run` writes the inputs to Parquet (untimed), starts
``python bench/peers/pyiceberg_upsert.py --job ...``, samples the process tree's RSS with
psutil, and reads back the figures (JSON) and the final rows (Arrow IPC).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

PEER = "pyiceberg-upsert"

_DECIMAL_RE = re.compile(r"^(?:decimal|numeric)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")


def arrow_type(t: str):
    """The Arrow type of a silver column for a canonical (``cdclake.types``) or Flink/SQL type."""
    import pyarrow as pa

    s = re.sub(r"\s+not\s+null$", "", t.strip().lower())
    m = _DECIMAL_RE.match(s)
    if m:
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    if s.startswith("timestamp_ntz"):
        return pa.timestamp("us")  # silver: timestamp without a zone, microseconds
    if s.startswith("timestamp"):
        return pa.timestamp("us", tz="UTC")  # silver: timestamp with zone, microseconds
    base = re.sub(r"\s*\(.*$", "", s)
    table = {
        "boolean": pa.bool_(), "bool": pa.bool_(),
        "tinyint": pa.int32(), "smallint": pa.int32(), "int": pa.int32(), "integer": pa.int32(),
        "bigint": pa.int64(), "long": pa.int64(),
        "float": pa.float32(), "real": pa.float32(), "double": pa.float64(),
        "string": pa.string(), "varchar": pa.string(), "char": pa.string(), "text": pa.string(),
        "binary": pa.binary(), "bytes": pa.binary(), "varbinary": pa.binary(),
        "date": pa.date32(),
    }
    if base not in table:
        raise ValueError(f"unsupported column type {t!r}")
    return table[base]


def arrow_schema(columns: dict[str, str]):
    import pyarrow as pa

    return pa.schema([pa.field(c, arrow_type(t), nullable=True) for c, t in columns.items()])


# ---------------------------------------------------------------------------------------------
# parent side


def _to_parquet(value: Any, path: Path) -> str:
    """A pyarrow Table, a list of dicts or a Parquet path, as a Parquet path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(value, (str, os.PathLike)):
        return str(Path(value).resolve())
    if isinstance(value, list):
        value = pa.Table.from_pylist(value)
    pq.write_table(value, path)
    return str(path)


def run(input_spec: dict) -> dict:
    """Apply deduplicated changes with pyiceberg and return the figures and final rows.

    ``input_spec``::

        {"tables": {name: {"columns": {col: type}, "primary_key": [...],
                           "changes": pa.Table | list of dicts | ".../changes.parquet",
                           "base": pa.Table | list | path (optional: rows already in the table),
                           "base_table": "ns.table" (optional: copy the rows of this Iceberg
                                         table of "catalog" instead; it is only read)}},
         # "changes" / "base" may also be given as top-level {table: ...} maps
         # optional:
         "events": int,              # CDC events behind the changes (else the change count)
         "peer_catalog": {"uri": "sqlite:////abs/catalog.db" | "jdbc:sqlite:/abs/catalog.db",
                          "warehouse": "file:///abs/warehouse", "name": "peer"},
                                     # where the peer's tables go (dropped and recreated);
                                     # default: its own SQLite catalog in work_dir
         "catalog": {...},           # same shape: only read, for "base_table"
         "namespace": "peer_pyiceberg",
         "buckets": 8,               # partition by bucket(n, first key column) as silver; 0: none
         "work_dir": path, "timeout_s": 3600, "return_rows": True}

    ``changes`` has the key columns, the value columns and ``_op`` (``upsert``/``delete``), one
    row per key; value columns of deletes are ignored. Returns ``{"peer", "events", "changes",
    "wall_s", "events_per_s", "changes_per_s", "peak_rss_bytes", "process_wall_s",
    "setup_s", "tables": {per-table figures}, "rows": {table: [dict, ...]}, "rows_paths"}``.
    ``wall_s`` covers the delete + upsert transactions (commits included), not the table
    creation, the base load or the final scan.
    """
    tables = input_spec["tables"]
    if not tables:
        raise ValueError("no tables")
    work = Path(input_spec.get("work_dir") or tempfile.mkdtemp(prefix="pyiceberg-peer-"))
    work.mkdir(parents=True, exist_ok=True)
    job_tables = {}
    for name, t in tables.items():
        changes = t.get("changes", (input_spec.get("changes") or {}).get(name))
        base = t.get("base", (input_spec.get("base") or {}).get(name))
        if changes is None:
            raise ValueError(f"table {name!r} has no 'changes'")
        job_tables[name] = {
            "columns": dict(t["columns"]), "primary_key": list(t["primary_key"]),
            "changes": _to_parquet(changes, work / f"{name}.changes.parquet"),
            "base": _to_parquet(base, work / f"{name}.base.parquet") if base is not None else None,
            "base_table": t.get("base_table"),
        }
    cat = dict(input_spec.get("peer_catalog") or {})
    if not cat:
        (work / "warehouse").mkdir(exist_ok=True)
        cat = {"uri": f"sqlite:///{work / 'catalog.db'}", "warehouse": f"file://{work / 'warehouse'}"}
    source_cat = dict(input_spec.get("catalog") or {}) if any(t.get("base_table") for t in job_tables.values()) else None
    job = {"tables": job_tables, "catalog": cat, "source_catalog": source_cat,
           "namespace": input_spec.get("namespace", "peer_pyiceberg"),
           "buckets": int(input_spec.get("buckets", 8)), "out_dir": str(work)}
    job_path, out_path, log_path = work / "job.json", work / "result.json", work / "pyiceberg.log"
    job_path.write_text(json.dumps(job, indent=1))
    if out_path.exists():
        out_path.unlink()

    cmd = [sys.executable, str(Path(__file__).resolve()), "--job", str(job_path), "--out", str(out_path)]
    from bench.peers import run_child  # parent side only: the job process runs this file alone

    rc, process_wall, peak = run_child(cmd, log_path, work, float(input_spec.get("timeout_s", 3600)))
    if rc != 0 or not out_path.exists():
        tail = log_path.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"pyiceberg peer failed (exit {rc}); log {log_path}:\n{tail}")
    res = json.loads(out_path.read_text())
    changes = sum(t["changes"] for t in res["tables"].values())
    events = int(input_spec["events"]) if input_spec.get("events") is not None else changes
    wall = res["wall_s"]
    out = {
        "peer": PEER, "events": events, "changes": changes, "wall_s": wall,
        "events_per_s": events / wall if wall > 0 else None,
        "changes_per_s": changes / wall if wall > 0 else None,
        "peak_rss_bytes": peak, "peak_rss_timed_bytes": res.get("peak_rss_timed_bytes"),
        "process_wall_s": process_wall, "setup_s": res["setup_s"],
        "pyiceberg_version": res.get("pyiceberg_version"), "buckets": job["buckets"],
        "tables": res["tables"], "rows_paths": {t: r["rows_path"] for t, r in res["tables"].items()},
        "log": str(log_path),
    }
    if input_spec.get("return_rows", True):
        out["rows"] = {t: read_rows(p) for t, p in out["rows_paths"].items()}
    return out


def read_rows(path: str) -> list[dict]:
    """Rows of an Arrow IPC file written by the job, as Python values."""
    import pyarrow as pa

    with pa.memory_map(path) as src:
        return pa.ipc.open_file(src).read_all().to_pylist()


# ---------------------------------------------------------------------------------------------
# child side


def _catalog(cat: dict):
    from pyiceberg.catalog.sql import SqlCatalog

    uri = cat["uri"]
    if uri.startswith("jdbc:"):
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "jobs"))
        from cdclake.catalog import pyiceberg_catalog
        from cdclake.config import CatalogConfig

        return pyiceberg_catalog(CatalogConfig(name=cat.get("name", "lake"), uri=uri, warehouse=cat["warehouse"],
                                               user=cat.get("user"), password=cat.get("password")))
    return SqlCatalog(cat.get("name", "peer"), uri=uri, warehouse=cat["warehouse"])


def _key_filter(keys, primary_key: list[str]):
    """pyiceberg filter matching the rows whose key is in ``keys`` (an Arrow table of key columns)."""
    import functools
    import operator

    from pyiceberg.expressions import AlwaysFalse, EqualTo, In, Or

    if keys.num_rows == 0:
        return AlwaysFalse()
    if len(primary_key) == 1:
        return In(primary_key[0], keys.column(0).to_pylist())
    conds = [functools.reduce(operator.and_, [EqualTo(k, r[k]) for k in primary_key]) for r in keys.to_pylist()]
    return conds[0] if len(conds) == 1 else Or(*conds)


class _RssSampler:
    """Peak RSS of this process while a block runs."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(0.02)

    def __enter__(self) -> "_RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def _job(job: dict) -> dict:
    t_start = time.perf_counter()
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.transforms import BucketTransform

    out_dir = Path(job["out_dir"])
    catalog = _catalog(job["catalog"])
    ns = job["namespace"]
    catalog.create_namespace_if_not_exists(ns)
    prepared = {}
    for name, t in job["tables"].items():
        schema = arrow_schema(t["columns"])
        ident = f"{ns}.{name}"
        base = None
        if t["base"]:
            base = pq.read_table(t["base"])
        elif t.get("base_table"):  # read before our table replaces anything
            source = _catalog(job["source_catalog"]) if job.get("source_catalog") else catalog
            base = source.load_table(t["base_table"]).scan(selected_fields=tuple(t["columns"])).to_arrow()
        try:
            catalog.drop_table(ident)
        except NoSuchTableError:
            pass
        tbl = catalog.create_table(ident, schema=schema, properties={"format-version": "2"})
        if job["buckets"] > 0:
            with tbl.update_spec() as spec:
                spec.add_field(t["primary_key"][0], BucketTransform(job["buckets"]), f"{t['primary_key'][0]}_bucket")
        base_rows = 0
        if base is not None:
            base = base.select(list(t["columns"])).cast(schema)
            tbl.append(base)
            base_rows = base.num_rows
        changes = pq.read_table(t["changes"])
        op = changes.column("_op")
        unknown = set(pc.unique(op).to_pylist()) - {"upsert", "delete"}
        if unknown:
            raise ValueError(f"{name}: _op must be 'upsert' or 'delete', found {sorted(map(str, unknown))}")
        if any(changes.column(k).null_count for k in t["primary_key"]):
            raise ValueError(f"{name}: NULL in a key column")
        counts = changes.group_by(t["primary_key"]).aggregate([([], "count_all")])
        if counts.num_rows != changes.num_rows:
            raise ValueError(f"{name}: changes must have one row per key "
                             f"({changes.num_rows - counts.num_rows} rows repeat a key)")
        upserts = changes.filter(pc.equal(op, "upsert")).select(list(t["columns"])).cast(schema)
        deletes = changes.filter(pc.equal(op, "delete")).select(t["primary_key"])
        prepared[name] = (catalog.load_table(ident), upserts, deletes, base_rows, changes.num_rows)
    setup = time.perf_counter() - t_start

    import pyiceberg

    figures: dict[str, dict] = {}
    with _RssSampler() as rss:
        for name, (tbl, upserts, deletes, base_rows, n_changes) in prepared.items():
            pk = job["tables"][name]["primary_key"]
            t0 = time.perf_counter()
            with tbl.transaction() as tx:
                t1 = time.perf_counter()
                if deletes.num_rows:
                    tx.delete(_key_filter(deletes, pk))
                t2 = time.perf_counter()
                result = tx.upsert(upserts, join_cols=pk) if upserts.num_rows else None
                t3 = time.perf_counter()
            t4 = time.perf_counter()
            figures[name] = {"changes": n_changes, "upserts": upserts.num_rows, "deletes": deletes.num_rows,
                             "base_rows": base_rows,
                             "rows_updated": result.rows_updated if result else 0,
                             "rows_inserted": result.rows_inserted if result else 0,
                             "delete_s": t2 - t1, "upsert_s": t3 - t2, "commit_s": t4 - t3, "wall_s": t4 - t0}
    for name, (tbl, *_rest) in prepared.items():
        t0 = time.perf_counter()
        final = catalog.load_table(f"{ns}.{name}").scan().to_arrow()
        path = out_dir / f"{name}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, final.schema) as writer:
            writer.write_table(final)
        figures[name].update(rows=final.num_rows, scan_s=time.perf_counter() - t0, rows_path=str(path),
                             snapshots=len(catalog.load_table(f"{ns}.{name}").snapshots()))
    return {"pyiceberg_version": pyiceberg.__version__, "setup_s": setup,
            "wall_s": sum(f["wall_s"] for f in figures.values()), "peak_rss_timed_bytes": rss.peak,
            "tables": figures}


def _main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    res = _job(json.loads(Path(args.job).read_text()))
    Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
