"""The PyFlink peer's table: its final rows written into Apache Iceberg tables with pyiceberg.

Where the write runs, and why: Flink's Iceberg connector is a separate jar, out of reach of the
Flink job (``bench/peers/flink.py``), and pyiceberg does not install in ``.venv-flink`` beside
PyFlink 2.3 (pyiceberg 0.12's pyarrow extra needs pyarrow >= 18; the Flink venv's lock, made
from ``apache-flink==2.3.*``, holds pyarrow 16.1). So the write runs in the **parent** process
(the project venv, where the benchmark runs), right after the Flink process has returned the
final rows: the parent reads the hand-off file of each table (Arrow IPC, memory-mapped), casts it
to the table's Arrow schema and appends it in one pyiceberg transaction per table, whose commit
is the table's new snapshot. That span, from the first hand-off read to the last commit, is
``table_write_s``, added to the Flink job's timed span in the peer's ``wall_s``.

The tables are made before the Flink process starts and are not timed (``setup_s``), as a
deployment has its tables before an hour's job runs: one Iceberg table per source table,
``<namespace>.<table>``, in a SQLite ``SqlCatalog`` at ``<work_dir>/catalog.db`` with its warehouse
at ``<work_dir>/warehouse``; format version 2, the source table's columns with the Arrow types
silver gives them (:func:`bench.peers.pyiceberg_upsert.arrow_schema`: decimals, timestamps in
microseconds, ``timestamp`` with the UTC zone, ``timestamp_ntz`` without), unpartitioned unless
``buckets`` asks for ``bucket(n, first key column)`` as silver's. A table of the same name is
dropped first and its directory removed.

:func:`read_tables` reads the committed tables back with a pyiceberg scan: the rows the
benchmark compares with the source.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

CATALOG_NAME = "flink_peer"


def open_catalog(work_dir: Path):
    """The peer's pyiceberg ``SqlCatalog``: SQLite at ``<work_dir>/catalog.db``, warehouse
    ``<work_dir>/warehouse`` (both created when missing)."""
    from pyiceberg.catalog.sql import SqlCatalog

    work_dir = Path(work_dir).resolve()
    (work_dir / "warehouse").mkdir(parents=True, exist_ok=True)
    return SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{work_dir / 'catalog.db'}",
                      warehouse=(work_dir / "warehouse").as_uri())


def catalog_info(work_dir: Path) -> dict:
    """Where :func:`open_catalog` keeps the tables: ``{"name", "uri", "warehouse"}`` (strings)."""
    work_dir = Path(work_dir).resolve()
    return {"name": CATALOG_NAME, "uri": f"sqlite:///{work_dir / 'catalog.db'}",
            "warehouse": (work_dir / "warehouse").as_uri()}


def _local_path(location: str) -> Path | None:
    u = urlparse(location)
    if u.scheme in ("", "file"):
        return Path(unquote(u.path))
    return None


def create_tables(catalog, namespace: str, tables: dict, buckets: int = 0) -> dict:
    """Drop and create one empty Iceberg table per source table, before the timed span.

    ``tables``: ``{table: {"columns": {column: canonical type}, "primary_key": [column, ...]}}``.
    ``buckets``: 0 for unpartitioned tables, else ``bucket(buckets, first key column)``.
    Returns ``{"identifiers": {table: "<namespace>.<table>"}, "partitioning": str, "setup_s":
    seconds}``.
    """
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.transforms import BucketTransform

    from bench.peers.pyiceberg_upsert import arrow_schema

    t0 = time.perf_counter()
    catalog.create_namespace_if_not_exists(namespace)
    identifiers = {}
    for name, t in tables.items():
        ident = f"{namespace}.{name}"
        try:
            old = catalog.load_table(ident)
        except NoSuchTableError:
            old = None
        if old is not None:
            catalog.drop_table(ident)
            where = _local_path(old.location())
            if where is not None:
                shutil.rmtree(where, ignore_errors=True)
        tbl = catalog.create_table(ident, schema=arrow_schema(dict(t["columns"])), properties={"format-version": "2"})
        if buckets > 0:
            key = t["primary_key"][0]
            with tbl.update_spec() as spec:
                spec.add_field(key, BucketTransform(buckets), f"{key}_bucket")
        identifiers[name] = ident
    first_keys = sorted({t["primary_key"][0] for t in tables.values()})
    partitioning = f"bucket({buckets}, {'/'.join(first_keys)})" if buckets > 0 else "none"
    return {"identifiers": identifiers, "partitioning": partitioning, "setup_s": time.perf_counter() - t0}


def write_tables(catalog, identifiers: dict[str, str], handoff_paths: dict[str, str]) -> dict:
    """Append each table's final rows to its (empty) Iceberg table, one commit per table: the
    timed table write.

    ``identifiers``: ``{table: "ns.table"}`` (from :func:`create_tables`); ``handoff_paths``:
    ``{table: Arrow IPC file}`` written by the Flink process. Per table, in seconds: ``read_s``
    (the hand-off file, memory-mapped), ``cast_s`` (to the table's Arrow schema), ``files_s``
    (pyiceberg writes the Parquet data files), ``commit_s`` (the snapshot committed to the
    catalog); and ``rows``, ``snapshot_id``, ``data_files``, ``file_bytes``. Returns
    ``{"table_write_s": seconds from the first read to the last commit, "tables": {table: ...}}``.
    """
    import pyarrow as pa

    t_start = time.perf_counter()
    figures = {}
    for name, ident in identifiers.items():
        t0 = time.perf_counter()
        with pa.memory_map(handoff_paths[name]) as src:
            rows = pa.ipc.open_file(src).read_all()
        t1 = time.perf_counter()
        tbl = catalog.load_table(ident)
        rows = rows.select(tbl.schema().column_names).cast(tbl.schema().as_arrow())
        t2 = time.perf_counter()
        with tbl.transaction() as tx:
            tx.append(rows)
            t3 = time.perf_counter()
        t4 = time.perf_counter()
        snap = tbl.current_snapshot()
        summary = snap.summary if snap is not None else None
        figures[name] = {
            "identifier": ident, "rows": rows.num_rows, "read_s": t1 - t0, "cast_s": t2 - t1,
            "files_s": t3 - t2, "commit_s": t4 - t3, "wall_s": t4 - t0,
            "snapshot_id": snap.snapshot_id if snap is not None else None,
            "data_files": int(summary["added-data-files"]) if summary and "added-data-files" in summary else 0,
            "file_bytes": int(summary["added-files-size"]) if summary and "added-files-size" in summary else 0,
        }
    return {"table_write_s": time.perf_counter() - t_start, "tables": figures}


def read_tables(catalog, identifiers: dict[str, str]) -> dict[str, list[dict]]:
    """Every committed table read back with a pyiceberg scan (its current snapshot), as
    ``{table: [row dict]}`` of Python values (timestamps with the UTC zone where the column has
    one). Not timed: the benchmark's check of the peer, not the peer's work."""
    return {name: catalog.load_table(ident).scan().to_arrow().to_pylist() for name, ident in identifiers.items()}
