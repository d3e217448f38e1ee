"""Operations on the lake's tables: creating them (and adding the columns a newer version has),
selecting a window's hours, and whether a table exists.

Raw, manifest, bronze, quarantine and control tables are partitioned by (kafka_topic,
hours(landed_hour)), so that a window's files are whole partitions (:func:`window_filter` selects
its rows; :func:`cdclake.lake.commit_hours` replaces its files); the registry by source_format, run metrics by
days(run_at). All are Iceberg format 2.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from cdclake import types as T
from cdclake.catalog import ensure_namespace, qualified
from cdclake.config import PipelineConfig
from cdclake.lake.changes import BRONZE_SCHEMA
from cdclake.lake.naming import SourceTable, table_location, tombstone_namespace, tombstone_table
from cdclake.lake.schemas import (BRONZE_TABLE, CONTROL_SCHEMA, CONTROL_TABLE, MANIFEST_SCHEMA, MANIFEST_TABLE,
                                  QUARANTINE_SCHEMA, QUARANTINE_TABLE, RAW_SCHEMA, RAW_TABLE, REGISTRY_SCHEMA,
                                  RECONCILIATION_SCHEMA, RECONCILIATION_TABLE, REGISTRY_TABLE,
                                  RUN_METRICS_SCHEMA, RUN_METRICS_TABLE, SHAPES_TABLE, TOMBSTONE_SCHEMA,
                                  column_ddl, ddl)
from cdclake.lake.shapes import SHAPES_SCHEMA
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


def window_filter(window: Window, topics: list[str], hour_col: str = "landed_hour"):
    """Column predicate selecting ``topics`` and the hours of ``window``."""
    from pyspark.sql import functions as F

    return (F.col("kafka_topic").isin(topics)
            & (F.col(hour_col) >= F.lit(window.start).cast("timestamp"))
            & (F.col(hour_col) < F.lit(window.end).cast("timestamp")))


def _create(spark: "SparkSession", cfg: PipelineConfig, table: str, schema: StructType, partitioning: str,
            properties: str = "") -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified(cfg, table)} ({ddl(schema)}) USING iceberg "
              + (f"PARTITIONED BY ({partitioning}) " if partitioning else "")
              + f"TBLPROPERTIES ('format-version'='2'{properties})")


def _add_columns(spark: "SparkSession", cfg: PipelineConfig, table: str, schema: StructType) -> None:
    """Add the columns of ``schema`` that ``table`` lacks (a table made by an earlier version), at the end."""
    have = set(spark.table(qualified(cfg, table)).columns)
    for f in schema.fields:
        if f.name not in have:
            spark.sql(f"ALTER TABLE {qualified(cfg, table)} ADD COLUMN {column_ddl(f)}")


def table_exists(spark: "SparkSession", name: str) -> bool:
    """Whether the table of the quoted Spark name ``name`` exists; other errors propagate."""
    try:
        spark.table(name).schema
        return True
    except Exception as exc:  # AnalysisException: TABLE_OR_VIEW_NOT_FOUND
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
            return False
        raise


_BY_TOPIC_HOUR = "kafka_topic, hours(landed_hour)"

# --- raw: landed Kafka records and the offset ledger -------------------------------------------

#: Parquet row groups of the raw table, in compressed bytes (Iceberg's default is 128 MB). CDC
#: values compress 20 to 50 times (the Connect schema repeats in every Debezium message), so an
#: hour of a topic is often one file under 128 MB, written as one row group: one Spark task would
#: read it, and normalize would have to shuffle every value to spread the parsing over the cores.
#: Row groups of 8 MB let normalize read a file in several tasks (:data:`RAW_SPLIT_BYTES`).
RAW_ROW_GROUP_BYTES = 8 * 1024 * 1024
#: Iceberg ``split-size`` normalize reads the raw table with: one task per row group.
RAW_SPLIT_BYTES = RAW_ROW_GROUP_BYTES


def ensure_raw_tables(spark: "SparkSession", cfg: PipelineConfig) -> None:
    """Create ``raw.kafka_records`` and ``raw.land_manifest`` when missing.

    The raw table is written in Parquet row groups of :data:`RAW_ROW_GROUP_BYTES` (set on a raw
    table made by an earlier version too; files written before keep theirs).
    """
    ensure_namespace(spark, cfg, "raw")
    _create(spark, cfg, RAW_TABLE, RAW_SCHEMA, _BY_TOPIC_HOUR, f", {_row_groups(RAW_ROW_GROUP_BYTES)}")
    _keep_row_groups(spark, cfg, RAW_TABLE, RAW_ROW_GROUP_BYTES)
    _create(spark, cfg, MANIFEST_TABLE, MANIFEST_SCHEMA, _BY_TOPIC_HOUR)


def _row_groups(size: int) -> str:
    """The table property of Parquet row groups of ``size`` compressed bytes, as SQL."""
    return f"'write.parquet.row-group-size-bytes'='{size}'"


def _keep_row_groups(spark: "SparkSession", cfg: PipelineConfig, table: str, size: int) -> None:
    """Set ``table``'s Parquet row group size to ``size`` bytes where it has another (a table made
    by an earlier version; files written before keep theirs)."""
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {qualified(cfg, table)}").collect()}
    if props.get("write.parquet.row-group-size-bytes") != str(size):
        spark.sql(f"ALTER TABLE {qualified(cfg, table)} SET TBLPROPERTIES ({_row_groups(size)})")


# --- bronze: change records, quarantine, control events, schema registry ----------------------

#: The tables every raw record of a window ends up in (one of them), with their schemas.
BRONZE_TABLES = ((BRONZE_TABLE, BRONZE_SCHEMA), (QUARANTINE_TABLE, QUARANTINE_SCHEMA), (CONTROL_TABLE, CONTROL_SCHEMA))


#: Parquet row groups of ``bronze.changes``, in compressed bytes: normalize writes each file's
#: changes ordered by source table (:data:`BRONZE_WRITE_ORDER`), so that a row group holds few
#: tables and silver's read of one table skips the row groups of the others by their statistics.
BRONZE_ROW_GROUP_BYTES = 8 * 1024 * 1024
#: The order of the changes within each file normalize writes to ``bronze.changes``.
BRONZE_WRITE_ORDER = ("source_table", "source_schema", "source_database")


def ensure_bronze_tables(spark: "SparkSession", cfg: PipelineConfig) -> None:
    """Create the bronze, quarantine, control, registry and change shape tables when missing.

    A table made by an earlier version gets the columns added since (at the end), and
    ``bronze.changes`` its row group size (:data:`BRONZE_ROW_GROUP_BYTES`; files written before
    keep theirs).
    """
    ensure_namespace(spark, cfg, "bronze")
    for name, schema in BRONZE_TABLES:
        _create(spark, cfg, name, schema, _BY_TOPIC_HOUR,
                f", {_row_groups(BRONZE_ROW_GROUP_BYTES)}" if name == BRONZE_TABLE else "")
        _add_columns(spark, cfg, name, schema)
    _keep_row_groups(spark, cfg, BRONZE_TABLE, BRONZE_ROW_GROUP_BYTES)
    _create(spark, cfg, REGISTRY_TABLE, REGISTRY_SCHEMA, "source_format")
    _create(spark, cfg, SHAPES_TABLE, SHAPES_SCHEMA, "")


# --- run metrics ------------------------------------------------------------------------------

def ensure_run_metrics_table(spark: "SparkSession", cfg: PipelineConfig) -> None:
    """Create ``bronze.run_metrics`` (:data:`RUN_METRICS_SCHEMA`, partitioned by days(run_at)) when missing.

    A table made by an earlier version gets the columns added since (at the end, an Iceberg schema
    change: the rows written before read them as null).
    """
    ensure_namespace(spark, cfg, "bronze")
    _create(spark, cfg, RUN_METRICS_TABLE, RUN_METRICS_SCHEMA, "days(run_at)")
    _add_columns(spark, cfg, RUN_METRICS_TABLE, RUN_METRICS_SCHEMA)


def ensure_reconciliation_table(spark: "SparkSession", cfg: PipelineConfig) -> None:
    """Create ``bronze.reconciliation`` (:data:`RECONCILIATION_SCHEMA`, partitioned by
    days(run_at)) when missing; a table made by an earlier version gets the columns added since."""
    ensure_namespace(spark, cfg, "bronze")
    _create(spark, cfg, RECONCILIATION_TABLE, RECONCILIATION_SCHEMA, "days(run_at)")
    _add_columns(spark, cfg, RECONCILIATION_TABLE, RECONCILIATION_SCHEMA)


# --- silver's tombstone tables -----------------------------------------------------------------

def ensure_tombstone_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable) -> str:
    """Create the tombstone table of ``st`` when missing (merge-on-read, at its own
    :func:`table_location`); return its quoted name."""
    ensure_namespace(spark, cfg, tombstone_namespace(cfg))
    name = tombstone_table(cfg, st)
    location = table_location(cfg, tombstone_namespace(cfg), st.silver_name)
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({ddl(TOMBSTONE_SCHEMA)}) USING iceberg "
              f"LOCATION {T.sql_string(location)} "
              "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read', "
              "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')")
    return name
