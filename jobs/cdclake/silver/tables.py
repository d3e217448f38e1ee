"""The silver table itself: creation and evolution, truncates and tombstones.

A silver table is created on first sight with typed columns (:mod:`cdclake.types`) and the
metadata columns :data:`cdclake.lake.META_COLUMNS`, bucketed by the first key column in the
partition field ``_cdc_bucket``, Iceberg format 2, merge-on-read by default, at its own location
(:func:`cdclake.lake.table_location`). New columns are added; types evolve only by Iceberg's
promotions (:func:`cdclake.types.widen`). A truncate deletes every row older than it and is
remembered as the tombstone with an empty key; in hard-delete mode every delete leaves a
tombstone (:data:`cdclake.lake.TOMBSTONE_SCHEMA`).
"""
from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Optional

from cdclake import types as T
from cdclake.catalog import ensure_namespace
from cdclake.config import PipelineConfig
from cdclake.errors import SchemaChangeError, SilverError
from cdclake.lake import (KEY_CHANGES_PROPERTY, MAX_NAME_CHARS, META_COLUMNS, PRIMARY_KEY_PROPERTY, SOFT_DELETE_COLUMN,
                          SOURCE_TABLE_PROPERTY, SourceTable, ensure_tombstone_table, resolve_legacy_name, silver_table,
                          table_exists, table_location, tombstone_table)
from cdclake.results import TableResult
from cdclake.silver.order import BRONZE, latest_change, literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def open_silver_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable,
                      namespace_ready: bool = False) -> tuple[SourceTable, str]:
    """``(st, name)``: the source table (:func:`cdclake.lake.resolve_legacy_name`) and the quoted
    name of its silver table, whose namespace is created when missing (unless ``namespace_ready``:
    the caller made sure of it).

    Raises :class:`SilverError` when the silver table records another source table than ``st``
    (:func:`check_owner`).
    """
    if not namespace_ready:
        ensure_namespace(spark, cfg, cfg.silver.namespace)
    st = resolve_legacy_name(st, lambda n: table_exists(
        spark, f"{cfg.catalog.name}.{T.quote_ident(cfg.silver.namespace)}.{T.quote_ident(n)}"))
    name = silver_table(cfg, st)
    check_owner(spark, name, st)
    return st, name


def check_owner(spark: "SparkSession", name: str, st: SourceTable) -> None:
    """Raise :class:`SilverError` when silver table ``name`` records another source table than ``st``.

    Only a name of :data:`MAX_NAME_CHARS` characters can be both a source table's own name and
    another's shortened one (:func:`cdclake.lake.short_name`); only those are looked at.
    """
    if len(st.silver_name) != MAX_NAME_CHARS or not table_exists(spark, name):
        return
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    owner = props.get(SOURCE_TABLE_PROPERTY)
    if owner is not None and owner != st.identity():
        raise SilverError(f"silver table {name} holds source table {owner}, not {st.identity()}: two source "
                          "tables have this silver name")


def ensure_silver_table(spark: "SparkSession", cfg: PipelineConfig, name: str, pk: list[str],
                        types: dict[str, str], result: TableResult,
                        meta: Optional[dict[str, str]] = None, location: Optional[str] = None,
                        properties: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Create the silver (or history) table, or evolve it to hold ``types``; return its column types.

    ``name``: the quoted Spark name; ``pk``: key columns; ``types``: column → canonical type.
    ``meta`` are the ``_cdc_*`` columns (default :data:`cdclake.lake.META_COLUMNS`, plus
    ``_cdc_deleted`` in soft-delete mode). A new table is created at ``location``
    (:func:`cdclake.lake.table_location`; None: the catalog's default, for pipeline-owned names
    only) with ``properties`` added to its own (format 2, write modes, ``cdc.primary-key`` and
    :data:`cdclake.lake.PRIMARY_KEY_PROPERTY`), then bucketed by ``pk[0]`` in the partition field
    ``_cdc_bucket``. An existing table keeps its location.
    Raises :class:`SchemaChangeError` naming table, column and both types for a type change
    Iceberg cannot make (:func:`cdclake.types.widen`; a narrower type keeps the silver type).
    """
    q = T.quote_ident
    if meta is None:
        meta = dict(META_COLUMNS, **({SOFT_DELETE_COLUMN: "boolean"} if cfg.silver.delete_mode == "soft" else {}))
    if not table_exists(spark, name):
        cols = [f"{q(c)} {T.spark_type(t)}" for c, t in types.items()] + [f"{c} {t}" for c, t in meta.items()]
        mode = cfg.silver.write_mode
        props = {"format-version": "2", "write.merge.mode": mode, "write.update.mode": mode,
                 "write.delete.mode": mode, "cdc.primary-key": ",".join(pk),
                 PRIMARY_KEY_PROPERTY: json.dumps(pk, ensure_ascii=False), **(properties or {})}
        spark.sql(
            f"CREATE TABLE {name} ({', '.join(cols)}) USING iceberg "
            + (f"LOCATION {T.sql_string(location)} " if location else "")
            + "TBLPROPERTIES (" + ", ".join(f"{T.sql_string(k)}={T.sql_string(v)}" for k, v in props.items()) + ")")
        # named by the pipeline: Iceberg would name it after the column, and put that in data file paths
        spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD bucket({cfg.silver.buckets}, {q(pk[0])}) AS _cdc_bucket")
        log.info("created silver table %s with key %s and %d columns", name, pk, len(types))
        return dict(types)
    fields = spark.table(name).schema.fields
    for c, t in meta.items():  # tables made by an earlier version lack newer metadata columns
        if c not in {f.name for f in fields}:
            spark.sql(f"ALTER TABLE {name} ADD COLUMN {c} {t}")
            log.info("silver table %s: added metadata column %s", name, c)
    current = {f.name: f.dataType.simpleString() for f in fields if f.name not in meta}
    for c, t in types.items():
        t = T.spark_type(t)
        if c not in current:
            spark.sql(f"ALTER TABLE {name} ADD COLUMN {q(c)} {t}")
            current[c] = t
            result.added_columns.append(c)
            log.info("silver table %s: added column %s %s", name, c, t)
            continue
        old = current[c]
        wider = T.widen(old, t)
        if wider is None:
            raise SchemaChangeError(f"silver table {name}: column {c!r} cannot change type from {old} to {t} "
                                    "(Iceberg promotes only int to bigint, float to double and a decimal's "
                                    "precision at the same scale)")
        if wider != old:
            element = T.array_element(wider)  # a list's element type is promoted as its own field
            target = f"{q(c)}.element TYPE {element}" if element is not None else f"{q(c)} TYPE {wider}"
            spark.sql(f"ALTER TABLE {name} ALTER COLUMN {target}")
            current[c] = wider
            log.info("silver table %s: widened column %s from %s to %s", name, c, old, wider)
    return current


def new_table_options(cfg: PipelineConfig, st: SourceTable) -> dict:
    """Location and properties of the silver table of ``st`` when it is created (keyword
    arguments of :func:`ensure_silver_table`)."""
    return {"location": table_location(cfg, cfg.silver.namespace, st.silver_name),
            "properties": {SOURCE_TABLE_PROPERTY: st.identity()}}


def has_key_changes(spark: "SparkSession", name: str) -> bool:
    """Whether silver table ``name`` exists and has :data:`cdclake.lake.KEY_CHANGES_PROPERTY` set."""
    if not table_exists(spark, name):
        return False
    rows = spark.sql(f"SHOW TBLPROPERTIES {name}").collect()
    return any(r["key"] == KEY_CHANGES_PROPERTY and r["value"] == "true" for r in rows)


def mark_key_changes(spark: "SparkSession", name: str) -> None:
    """Set :data:`cdclake.lake.KEY_CHANGES_PROPERTY` on silver table ``name`` (a key change was merged)."""
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({T.sql_string(KEY_CHANGES_PROPERTY)}='true')")


def record_truncate(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, at: tuple) -> None:
    """Remember a truncate (position, Kafka partition, offset) as the tombstone row with an empty key.

    Changes older than the latest truncate are dropped in every later batch too, so a late insert
    cannot bring back a row the truncate removed.
    """
    name = ensure_tombstone_table(spark, cfg, st)
    o = literal(at)
    spark.sql(f"MERGE INTO {name} t USING (SELECT CAST(array() AS ARRAY<STRING>) AS key, "
              f"{o.source_position} AS _cdc_position, {o.kafka_partition} AS _cdc_kafka_partition, "
              f"{o.kafka_offset} AS _cdc_kafka_offset, CAST(NULL AS BIGINT) AS _cdc_source_ts_ms) s ON size(t.key) = 0 "
              f"WHEN MATCHED AND {latest_change('t').sql()} < {latest_change('s').sql()} THEN UPDATE SET * "
              "WHEN NOT MATCHED THEN INSERT *")


def stored_truncate(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable):
    """The latest recorded truncate of ``st`` as ``(position, partition, offset)``, or None."""
    name = tombstone_table(cfg, st)
    if not table_exists(spark, name):
        return None
    row = spark.sql(f"SELECT _cdc_position, _cdc_kafka_partition, _cdc_kafka_offset FROM {name} "
                    "WHERE size(key) = 0").first()
    return None if row is None else (row[0], row[1], row[2])


def apply_truncates(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, name: str, trunc: Optional[tuple],
                    result: TableResult) -> Optional[tuple]:
    """Apply the batch's latest truncate ``trunc`` (``(position, partition, offset)``, or None:
    :attr:`cdclake.silver.summary.BatchSummary.truncate`) and return the latest truncate of ``st`` or None.

    A truncate is recorded (:func:`record_truncate`) and deletes every row of silver table
    ``name`` older than it (``result.truncated`` is set). Returns ``(position, partition,
    offset)`` of the latest truncate recorded, this batch's or an earlier one's
    (:func:`stored_truncate`).
    """
    if trunc is not None:
        result.truncated = True
        record_truncate(spark, cfg, st, trunc)
        if table_exists(spark, name):
            spark.sql(f"DELETE FROM {name} WHERE {latest_change().sql()} < {literal(trunc).sql()}")
    return stored_truncate(spark, cfg, st)


def after_truncate(changes: "DataFrame", truncated_at: Optional[tuple]) -> "DataFrame":
    """The bronze rows of ``changes`` that are not truncates and are newer than ``truncated_at``
    (``(position, partition, offset)``; None: no truncate)."""
    from pyspark.sql import functions as F

    rows = changes.where(F.col("op") != "truncate")
    if truncated_at is not None:
        rows = rows.where(BRONZE.column() > literal(truncated_at).column())
    return rows


def record_tombstones(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, view: str, nkeys: int) -> None:
    """Upsert a tombstone for every delete of the batch; drop those older than the retention.

    Silver calls it for a batch with deletes only: the retention is measured from the newest
    tombstone, so a batch without deletes would find nothing new to drop.
    """
    name = ensure_tombstone_table(spark, cfg, st)
    key = "array(" + ", ".join(f"s._k{i}" for i in range(nkeys)) + ")"
    meta = ["_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset", "_cdc_source_ts_ms"]
    newer = f"{latest_change('t').sql()} < {latest_change('s').sql()}"
    spark.sql(f"MERGE INTO {name} t USING (SELECT * FROM {view} WHERE _op = 'delete') s ON t.key = {key} "
              f"WHEN MATCHED AND {newer} THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in meta)} "
              f"WHEN NOT MATCHED THEN INSERT (key, {', '.join(meta)}) VALUES ({key}, {', '.join('s.' + c for c in meta)})")
    # the newest source time and the oldest of a key's tombstone: a DELETE only when one is past the retention
    ages = spark.sql(f"SELECT max(_cdc_source_ts_ms) AS m, min(CASE WHEN size(key) > 0 THEN _cdc_source_ts_ms END) "
                     f"AS oldest FROM {name}").first()
    if ages["m"] is not None:
        cutoff = int(ages["m"]) - cfg.silver.tombstone_retention_hours * 3_600_000
        if ages["oldest"] is not None and int(ages["oldest"]) < cutoff:
            spark.sql(f"DELETE FROM {name} WHERE _cdc_source_ts_ms < {cutoff} AND size(key) > 0")
