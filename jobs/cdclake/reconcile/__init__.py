"""Reconciliation: does a silver table hold what its source table holds?

The pipeline proves that every Kafka offset reached bronze, quarantine or control; this compares
a silver table with the source table itself, read through the pipeline's ``reconcile.connection``
(PostgreSQL or MySQL/MariaDB, :mod:`cdclake.reconcile.source`), as data-diff tools do: by
checksums over key ranges, never by pulling both tables whole.

1. Every row of both sides gets a *key hash* and a *row hash* (60-bit integers of the MD5 of
   the key's and the whole row's canonical text, :mod:`cdclake.reconcile.canonical`: decimals
   by value, timestamps as UTC microseconds, binary as hex, text as UTF-8, NULL apart from every
   value). The source database computes them in SQL, Spark over the silver table (its
   ``_cdc_*`` columns left out; in soft-delete mode, rows with ``_cdc_deleted`` left out).
2. Round 1: rows are grouped into ``reconcile.buckets`` buckets by key hash modulo the bucket
   count; per bucket, the row count and the exact sum of row hashes are compared. A bucket that
   differs on either is a *differing bucket*.
3. While the differing buckets hold more than ``reconcile.fetch_rows`` rows (on the larger side),
   the next round splits only them: modulus times ``reconcile.buckets``, rows restricted to the
   differing buckets of the round before.
4. The rows of the last differing buckets are fetched from both sides (key columns, key text and
   row hash) and compared key by key: a key only on one side, or with another row hash, differs.
5. A differing key is *in flight* when Kafka holds a change of it after the offset ledger's end
   (:mod:`cdclake.reconcile.inflight`: the next hourly run applies it), else *drift*. Kafka is
   read after the source, so that a change committed while the source was read is seen.

The result (:class:`Reconciliation`) is one row per table and run in ``bronze.reconciliation``
(:data:`cdclake.lake.RECONCILIATION_SCHEMA`) and a log line; :func:`reconcile` raises
:class:`cdclake.errors.DriftFound` (one line) when a table has drift. ``bytes_read_source`` is
the size of every result fetched from the source (:class:`~cdclake.reconcile.source.SourceDatabase`).

Limits, said plainly: ``float``/``double`` columns are compared rounded to 9 decimals; a silver
table whose hourly run has landed changes but not yet merged them shows them as drift (run it
outside the hourly runs, as the maintenance DAG does); the source is read without a snapshot
shared with Kafka, so a change committed between the source's read and Kafka's end offsets is in
flight, and one captured later than Kafka's end offsets were read is reported as drift.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from cdclake.catalog import pyiceberg_catalog, qualified, with_retries
from cdclake.config import PipelineConfig, env_connection
from cdclake.config.connections import AIRFLOW_CONN_PREFIX, CONNECTION_ENV_PREFIX, Connections
from cdclake.errors import ConfigError, DriftFound
from cdclake.lake import (PRIMARY_KEY_PROPERTY, RECONCILIATION_SCHEMA, RECONCILIATION_TABLE, SOFT_DELETE_COLUMN,
                          SOURCE_TABLE_PROPERTY, SourceTable, ensure_reconciliation_table)
from cdclake.reconcile.canonical import spark_hash, spark_text, spark_value
from cdclake.reconcile.inflight import keys_in_flight
from cdclake.reconcile.source import BucketSums, Column, SourceDatabase, SourceUnavailable
from cdclake.types import quote_ident
from cdclake.window import UTC

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

__all__ = ["Reconciliation", "SourceUnavailable", "drift_message", "reconcile", "reconcile_table", "silver_tables", "write_results"]

#: The largest modulus a round may reach (key hashes have 60 bits).
MAX_MODULUS = 2 ** 60


@dataclass
class Reconciliation:
    """What reconciling one silver table found (one ``bronze.reconciliation`` row).

    ``rows_source``/``rows_silver``: rows on each side (silver: not deleted);
    ``buckets_compared``/``buckets_differing``: key buckets compared and found differing, over
    all rounds; ``keys_in_flight``/``keys_drifted``: differing keys (:mod:`cdclake.reconcile`);
    ``drift_samples``: up to ``reconcile.max_samples`` drifted keys as JSON objects of the key
    columns' canonical texts (``{"id": "5"}``); ``bytes_read_source``: bytes of the results
    fetched from the source; ``duration_s``: seconds; ``rounds``: bucket rounds.
    """

    silver_table: str
    source_table: str
    rows_source: int = 0
    rows_silver: int = 0
    buckets_compared: int = 0
    buckets_differing: int = 0
    keys_in_flight: int = 0
    keys_drifted: int = 0
    drift_samples: list[str] = field(default_factory=list)
    in_flight_samples: list[str] = field(default_factory=list)
    bytes_read_source: int = 0
    duration_s: float = 0.0
    rounds: int = 0

    @property
    def status(self) -> str:
        """``drift``, ``in flight`` or ``in sync``."""
        return "drift" if self.keys_drifted else ("in flight" if self.keys_in_flight else "in sync")

    def row(self, cfg: PipelineConfig, run_at: dt.datetime) -> dict:
        """The ``bronze.reconciliation`` row (:data:`cdclake.lake.RECONCILIATION_SCHEMA`)."""
        return {"run_at": run_at, "pipeline": cfg.name, "silver_table": self.silver_table,
                "source_table": self.source_table, "status": self.status, "rows_source": self.rows_source,
                "rows_silver": self.rows_silver, "buckets_compared": self.buckets_compared,
                "buckets_differing": self.buckets_differing, "keys_in_flight": self.keys_in_flight,
                "keys_drifted": self.keys_drifted, "drift_samples": list(self.drift_samples),
                "bytes_read_source": self.bytes_read_source, "duration_s": float(self.duration_s)}

    def log_line(self) -> str:
        """One line: table, source, status and every figure."""
        samples = f" e.g. {', '.join(self.drift_samples[:5])}" if self.drift_samples else ""
        return (f"reconcile: {self.silver_table} vs {self.source_table}: {self.status}; rows source "
                f"{self.rows_source} silver {self.rows_silver}; buckets compared {self.buckets_compared} differing "
                f"{self.buckets_differing} ({self.rounds} rounds); keys in flight {self.keys_in_flight}, drifted "
                f"{self.keys_drifted}{samples}; bytes read from source {self.bytes_read_source}; "
                f"{self.duration_s:.1f}s")


def silver_tables(spark: "SparkSession", cfg: PipelineConfig) -> list[str]:
    """The tables to reconcile: ``reconcile.tables``, or every table of ``silver.namespace``."""
    if cfg.reconcile is not None and cfg.reconcile.tables:
        return list(cfg.reconcile.tables)
    ns = f"{cfg.catalog.name}.{quote_ident(cfg.silver.namespace)}"
    return sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {ns}").collect())


def _connection(cfg: PipelineConfig, connections: Optional[Connections]) -> tuple[str, dict]:
    if cfg.reconcile is None:
        raise ConfigError(f"{cfg.path}: key 'reconcile': not set; reconciliation needs 'reconcile.connection'")
    conn_id = cfg.reconcile.connection
    conn = (connections or env_connection)(conn_id)
    if conn is None:
        raise ConfigError(f"key 'reconcile.connection': connection {conn_id!r} is not defined (neither "
                          f"{CONNECTION_ENV_PREFIX}{conn_id.upper()} nor {AIRFLOW_CONN_PREFIX}{conn_id.upper()} "
                          "is set, nor is it in Airflow)")
    return conn_id, dict(conn)


class _Silver:
    """The silver side: the table's rows as key hash ``hk`` and row hash ``hr`` (two longs per
    row, cached for the rounds); the key texts only of the rows fetched at the end."""

    def __init__(self, spark: "SparkSession", name: str, key: list[Column], columns: list[Column]):
        from pyspark.sql import functions as F

        df = spark.table(name)
        types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
        by_lower = {c.lower(): c for c in types if not c.startswith("_cdc_")}

        def silver_col(c: Column) -> tuple[Optional[str], str, Optional[str]]:
            col = c.name if c.name in types else by_lower.get(c.name.lower())
            return col, c.kind, types.get(col) if col else None

        if SOFT_DELETE_COLUMN in types:
            df = df.where(~F.coalesce(F.col(SOFT_DELETE_COLUMN), F.lit(False)))
        self.key_cols = [silver_col(c) for c in key]
        self.kt = spark_text(self.key_cols)
        self.rows = df.select(spark_hash(self.kt).alias("_cdc_hk"), "*")
        self.hashes = self.rows.select(F.col("_cdc_hk").alias("hk"), spark_hash(spark_text(
            [silver_col(c) for c in columns])).alias("hr")).persist()
        self.row_hash = spark_hash(spark_text([silver_col(c) for c in columns]))

    def bucket_sums(self, modulus: int, parents: Optional[tuple[int, list[int]]]) -> dict[int, BucketSums]:
        from pyspark.sql import functions as F

        df = self.hashes
        if parents is not None:
            df = df.where((F.col("hk") % F.lit(parents[0])).isin(parents[1]))
        rows = (df.groupBy((F.col("hk") % F.lit(modulus)).alias("b"))
                .agg(F.count(F.lit(1)).alias("n"), F.sum(F.col("hr").cast("decimal(38,0)")).alias("s")).collect())
        return {int(r["b"]): BucketSums(int(r["n"]), int(r["s"])) for r in rows}

    def bucket_rows(self, modulus: int, buckets: list[int]) -> dict[str, tuple[int, list[Optional[str]]]]:
        from pyspark.sql import functions as F

        rows = (self.rows.where((F.col("_cdc_hk") % F.lit(modulus)).isin(buckets))
                .select(self.kt.alias("kt"), self.row_hash.alias("hr"),
                        *(spark_value(*kc).alias(f"k{i}") for i, kc in enumerate(self.key_cols))).collect())
        return {r["kt"]: (int(r["hr"]), [r[f"k{i}"] for i in range(len(self.key_cols))]) for r in rows}

    def close(self) -> None:
        self.hashes.unpersist()


def _source_of(cfg: PipelineConfig, name: str, props: dict, dialect: str) -> tuple[SourceTable, Optional[str], str]:
    """``(SourceTable, schema or database to read, table)`` of silver table ``name``."""
    raw = props.get(SOURCE_TABLE_PROPERTY)
    if raw is None:
        raise ConfigError(f"silver table {name} has no property {SOURCE_TABLE_PROPERTY}: not a silver table")
    prefix, database, schema, table = json.loads(raw)
    st = SourceTable(prefix, database, schema, table)
    override = (cfg.reconcile.source_tables if cfg.reconcile else {}).get(name)
    if override:
        where, _, tbl = override.rpartition(".")
        return st, where or None, tbl
    return st, (schema or "public") if dialect == "postgres" else database, table


def reconcile_table(spark: "SparkSession", cfg: PipelineConfig, name: str,
                    connections: Optional[Connections] = None) -> Reconciliation:
    """Reconcile silver table ``name`` (in ``silver.namespace``) with its source table, as the
    module docstring says. Raises :class:`ConfigError` (no ``reconcile`` section, an unknown
    connection, a table without primary key or source table), :class:`SourceUnavailable` (the
    database refused or failed a query) and :class:`cdclake.errors.KafkaUnavailable`."""
    started = time.monotonic()
    rc = cfg.reconcile
    conn_id, conn = _connection(cfg, connections)
    full = f"{cfg.catalog.name}.{quote_ident(cfg.silver.namespace)}.{quote_ident(name)}"
    try:
        props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {full}").collect()}
    except Exception as exc:
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
            raise ConfigError(f"silver table {cfg.silver.namespace}.{name} does not exist") from None
        raise
    key_names = json.loads(props.get(PRIMARY_KEY_PROPERTY) or "[]")
    if not key_names:
        raise ConfigError(f"silver table {name} has no primary key ({PRIMARY_KEY_PROPERTY}): it cannot be reconciled")
    dialect = "postgres" if str(conn.get("conn_type")).lower().startswith("postgres") else "mysql"
    st, where, table = _source_of(cfg, name, props, dialect)
    db = SourceDatabase(conn, conn_id, database=None if conn.get("schema") or dialect != "postgres" else st.database)
    silver = None
    try:
        columns = db.columns(where, table)
        by_name = {c.name: c for c in columns}
        missing = [k for k in key_names if k not in by_name]
        if missing:
            raise ConfigError(f"silver table {name}: key column(s) {missing} not in source table {where}.{table}")
        key = [by_name[k] for k in key_names]
        label = f"{db.database}/{where}.{table}" if dialect == "postgres" else f"{where + '.' if where else ''}{table}"
        result = Reconciliation(name, f"{db.where}/{label}")
        silver = _Silver(spark, full, key, columns)
        differing, samples = _compare(db, silver, where, table, key, columns, rc.buckets, rc.fetch_rows, result)
        result.bytes_read_source = db.bytes_read
    finally:
        db.close()
        if silver is not None:
            silver.close()
    if differing:
        flight, stats = keys_in_flight(cfg, st, [(c.name, c.kind) for c in key], rc.kafka_timeout_s)
        log.info("reconcile: %s: %d differing keys; %d keys changed in %d records after the offset ledger",
                 name, len(differing), len(flight), stats.get("records", 0))
        drifted = sorted(k for k in differing if k not in flight)
        result.keys_in_flight = len(differing) - len(drifted)
        result.keys_drifted = len(drifted)
        result.drift_samples = [samples[k] for k in drifted[:rc.max_samples]]
        result.in_flight_samples = [samples[k] for k in sorted(set(differing) & flight)[:rc.max_samples]]
    result.duration_s = time.monotonic() - started
    return result


def _compare(db: SourceDatabase, silver: _Silver, where: Optional[str], table: str, key: list[Column],
             columns: list[Column], buckets: int, fetch_rows: int, result: Reconciliation) -> tuple[list[str], dict]:
    """The rounds of the module docstring: the differing keys' texts and ``{key text: sample}``."""
    modulus, parents = buckets, None
    while True:
        result.rounds += 1
        with ThreadPoolExecutor(1) as pool:  # the database and Spark at the same time
            pending = pool.submit(db.bucket_sums, where, table, key, columns, modulus, parents)
            sil = silver.bucket_sums(modulus, parents)
            src = pending.result()
        if parents is None:
            result.rows_source = sum(b.rows for b in src.values())
            result.rows_silver = sum(b.rows for b in sil.values())
        seen = sorted(set(src) | set(sil))
        diff = [b for b in seen if src.get(b) != sil.get(b)]
        result.buckets_compared += len(seen)
        result.buckets_differing += len(diff)
        if not diff:
            return [], {}
        size = sum(max(src[b].rows if b in src else 0, sil[b].rows if b in sil else 0) for b in diff)
        if size <= fetch_rows or modulus * buckets > MAX_MODULUS:
            break
        parents, modulus = (modulus, diff), modulus * buckets
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(db.bucket_rows, where, table, key, columns, modulus, diff)
        sil_rows = silver.bucket_rows(modulus, diff)
        src_rows = pending.result()
    differing, samples = [], {}
    for kt in sorted(set(src_rows) | set(sil_rows)):
        a, b = src_rows.get(kt), sil_rows.get(kt)
        if a is None or b is None or a[0] != b[0]:
            differing.append(kt)
            values = (a or b)[1]
            samples[kt] = json.dumps({c.name: v for c, v in zip(key, values)}, ensure_ascii=False,
                                     separators=(",", ":"))
    return differing, samples


def write_results(spark: "SparkSession", cfg: PipelineConfig, results: list[Reconciliation],
                  run_at: Optional[dt.datetime] = None) -> None:
    """Append one ``bronze.reconciliation`` row per result (created when missing): one pyiceberg commit."""
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException

    ensure_reconciliation_table(spark, cfg)
    if not results:
        return
    run_at = run_at or dt.datetime.now(UTC)
    rows = [r.row(cfg, run_at) for r in results]
    cat = pyiceberg_catalog(cfg.catalog)

    def append() -> None:
        table = cat.load_table(RECONCILIATION_TABLE)
        table.append(pa.Table.from_pylist([{c: r[c] for c in RECONCILIATION_SCHEMA.names} for r in rows],
                                          schema=table.schema().as_arrow()))

    try:
        with_retries(append, cfg.catalog, "writing reconciliation results", transient=(CommitFailedException,))
    finally:
        cat.engine.dispose()
    spark.sql(f"REFRESH TABLE {qualified(cfg, RECONCILIATION_TABLE)}")


def reconcile(spark: "SparkSession", cfg: PipelineConfig, tables: Optional[list[str]] = None,
              connections: Optional[Connections] = None) -> list[Reconciliation]:
    """Reconcile ``tables`` (None: :func:`silver_tables`) one after the other, log a line and
    write a ``bronze.reconciliation`` row for each, and return the results. Raises
    :class:`DriftFound` naming the tables with drift, their counts and first keys, after writing."""
    results = []
    for name in tables or silver_tables(spark, cfg):
        r = reconcile_table(spark, cfg, name, connections)
        log.info("%s", r.log_line())
        results.append(r)
    write_results(spark, cfg, results)
    message = drift_message(results)
    if message:
        raise DriftFound(message)
    return results


def drift_message(results: list[Reconciliation]) -> Optional[str]:
    """The one line :class:`DriftFound` carries for ``results``: each table with drift, its count,
    its source and its first three keys; None when no table drifted."""
    drift = [r for r in results if r.keys_drifted]
    if not drift:
        return None
    return "drift found: " + "; ".join(f"{r.silver_table}: {r.keys_drifted} key(s) differ from {r.source_table} "
                                       f"(e.g. {', '.join(r.drift_samples[:3])})" for r in drift)
