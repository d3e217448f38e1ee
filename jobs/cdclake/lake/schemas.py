"""The schemas of the lake's tables, as Spark StructTypes, and the names of the pipeline's own tables.

Every column is nullable, as Spark reads a DDL column list. :func:`ddl` gives the SQL column list
of a schema (CREATE and ALTER TABLE), :func:`arrow_schema` the Arrow schema Spark gives it.
``bronze.changes`` is derived from :class:`cdclake.record.ChangeRecord` (:mod:`cdclake.lake.changes`);
silver and history tables take their columns from the source table, plus the metadata columns
declared here (:data:`META_COLUMNS`, :data:`HISTORY_META`).
"""
from __future__ import annotations

import re

from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DecimalType, DoubleType, IntegerType, LongType,
                               StringType, StructField, StructType, TimestampType)

#: The pipeline's own tables (in the pipeline's catalog, :mod:`cdclake.catalog`).
RAW_TABLE = "raw.kafka_records"
MANIFEST_TABLE = "raw.land_manifest"
BRONZE_TABLE = "bronze.changes"
QUARANTINE_TABLE = "bronze.quarantine"
CONTROL_TABLE = "bronze.control_events"
REGISTRY_TABLE = "bronze.schema_registry"
SHAPES_TABLE = "bronze.change_shapes"
RUN_METRICS_TABLE = "bronze.run_metrics"
RECONCILIATION_TABLE = "bronze.reconciliation"


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def column_ddl(f: StructField) -> str:
    """The DDL of one column, ``"name type"`` (e.g. ``"headers array<struct<name:string,value:binary>>"``)."""
    if not _PLAIN_NAME.fullmatch(f.name):
        raise ValueError(f"column {f.name!r}: lake tables have plain column names")
    return f"{f.name} {f.dataType.simpleString()}"


def ddl(schema: StructType | list[StructField]) -> str:
    """The DDL column list (``"name type, ..."``) of ``schema``, as CREATE TABLE takes it."""
    return ", ".join(column_ddl(f) for f in schema)


def arrow_schema(schema: StructType):
    """The Arrow schema Spark gives ``schema`` (``to_arrow_schema``; no JVM needed)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema)


# --- raw: landed Kafka records and the offset ledger -------------------------------------------

#: ``raw.kafka_records``: one row per Kafka record. ``kafka_timestamp_ms``: the record timestamp
#: (ms); ``value`` null for a Kafka tombstone (kept); ``landed_hour``: UTC hour of the run that
#: took the record (see :mod:`cdclake.kafka_ranges`).
RAW_SCHEMA = StructType([
    StructField("kafka_topic", StringType()), StructField("kafka_partition", IntegerType()),
    StructField("kafka_offset", LongType()), StructField("kafka_timestamp_ms", LongType()),
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("headers", ArrayType(StructType([StructField("name", StringType()),
                                                 StructField("value", BinaryType())]))),
    StructField("landed_hour", TimestampType()),
])
#: ``raw.land_manifest``, the offset ledger: one row per topic partition and landed hour, empty
#: hours included; ``end_offset`` exclusive, ``records`` landed, ``landed_at`` when.
MANIFEST_SCHEMA = StructType([
    StructField("kafka_topic", StringType()), StructField("kafka_partition", IntegerType()),
    StructField("landed_hour", TimestampType()), StructField("start_offset", LongType()),
    StructField("end_offset", LongType()), StructField("records", LongType()),
    StructField("landed_at", TimestampType()),
])


# --- bronze: quarantine, control events, schema registry ----------------------------------------

#: The Kafka coordinates and landed hour every bronze, quarantine and control row carries.
KAFKA_COLUMNS = [StructField("kafka_topic", StringType()), StructField("kafka_partition", IntegerType()),
                 StructField("kafka_offset", LongType()), StructField("kafka_timestamp_ms", LongType()),
                 StructField("landed_hour", TimestampType())]
#: ``bronze.quarantine``: records no parser could read, with the reason (names format and field).
QUARANTINE_SCHEMA = StructType(KAFKA_COLUMNS + [
    StructField("source_format", StringType()), StructField("reason", StringType()), StructField("key", BinaryType()),
    StructField("value", BinaryType()), StructField("quarantined_at", TimestampType()),
])
#: ``bronze.control_events``: records that are not row changes; ``kind`` one of
#: :data:`cdclake.record.CONTROL_KINDS`; ``tx_end`` whether a transaction marker ends its transaction.
CONTROL_SCHEMA = StructType(KAFKA_COLUMNS + [
    StructField("source_format", StringType()), StructField("kind", StringType()),
    StructField("source_database", StringType()), StructField("source_schema", StringType()),
    StructField("source_table", StringType()), StructField("detail", StringType()), StructField("tx_id", StringType()),
    StructField("tx_end", BooleanType()),
])
#: ``bronze.schema_registry``: table definitions of metadata messages, keyed by (source_format, schema_id).
REGISTRY_SCHEMA = StructType([
    StructField("source_format", StringType()), StructField("schema_id", StringType()),
    StructField("table_version", IntegerType()), StructField("source_schema", StringType()),
    StructField("source_table", StringType()), StructField("definition", StringType()),
    StructField("kafka_topic", StringType()), StructField("kafka_partition", IntegerType()),
    StructField("kafka_offset", LongType()), StructField("landed_hour", TimestampType()),
])


# --- run metrics ------------------------------------------------------------------------------

#: ``bronze.run_metrics``: what each run of a stage did, one row per topic (silver: per topic and
#: silver table), appended after the stage succeeded (:mod:`cdclake.metrics`). ``run_at``: when
#: the stage finished (UTC); ``stage``: land, normalize or silver; ``window_start``/``window_end``:
#: the run's hour window ``[start, end)``; ``records_landed`` (land): Kafka records landed;
#: ``records_parsed``, ``change_rows``, ``quarantined``, ``control`` (normalize): raw records read
#: and the bronze, quarantine and control rows they became; ``silver_table`` (silver): the quoted
#: silver table, ``changes_merged``: its bronze changes of the window, ``keys_upserted`` and
#: ``keys_deleted``: keys the MERGE upserted and deleted; ``newest_source_ts``: the newest source
#: commit time of the window's bronze changes of the topic (normalize, silver); ``lag_s``: seconds
#: from it to ``run_at``; ``duration_s``: seconds the stage ran (all its topics together);
#: ``future_stamped`` (land): records landed that were stamped more than ``land.max_future_skew_s``
#: after they were read. Columns that do not apply to a stage are null; columns added since a
#: table was created are added at the end (:func:`cdclake.lake.ensure_run_metrics_table`).
RUN_METRICS_SCHEMA = StructType([
    StructField("run_at", TimestampType()), StructField("pipeline", StringType()), StructField("stage", StringType()),
    StructField("kafka_topic", StringType()), StructField("window_start", TimestampType()),
    StructField("window_end", TimestampType()), StructField("records_landed", LongType()),
    StructField("records_parsed", LongType()), StructField("change_rows", LongType()),
    StructField("quarantined", LongType()), StructField("control", LongType()),
    StructField("silver_table", StringType()),
    StructField("changes_merged", LongType()), StructField("keys_upserted", LongType()),
    StructField("keys_deleted", LongType()), StructField("newest_source_ts", TimestampType()),
    StructField("lag_s", DoubleType()), StructField("duration_s", DoubleType()),
    StructField("future_stamped", LongType()),
])


#: ``bronze.reconciliation``: one row per silver table and reconciliation run
#: (:mod:`cdclake.reconcile`), appended. ``run_at``: when the run finished (UTC);
#: ``silver_table``: the name in ``silver.namespace``; ``source_table``: the server, database and
#: table read; ``status``: ``in sync``, ``in flight`` or ``drift``; ``rows_source``,
#: ``rows_silver``: rows on each side (silver: not deleted); ``buckets_compared``,
#: ``buckets_differing``: key-hash buckets compared and found differing, over all rounds;
#: ``keys_in_flight``: differing keys Kafka holds a change of after the offset ledger's end;
#: ``keys_drifted``: the other differing keys; ``drift_samples``: up to ``reconcile.max_samples``
#: of them, each a JSON object of the key columns' canonical texts; ``bytes_read_source``: bytes
#: of the results fetched from the source database; ``duration_s``: seconds.
RECONCILIATION_SCHEMA = StructType([
    StructField("run_at", TimestampType()), StructField("pipeline", StringType()),
    StructField("silver_table", StringType()), StructField("source_table", StringType()),
    StructField("status", StringType()), StructField("rows_source", LongType()), StructField("rows_silver", LongType()),
    StructField("buckets_compared", LongType()), StructField("buckets_differing", LongType()),
    StructField("keys_in_flight", LongType()), StructField("keys_drifted", LongType()),
    StructField("drift_samples", ArrayType(StringType())), StructField("bytes_read_source", LongType()),
    StructField("duration_s", DoubleType()),
])


# --- silver, tombstone and history tables: schemas ----------------------------------------------

#: The fields of the order of a change as silver stores it: source position, Kafka partition and
#: offset (:mod:`cdclake.silver.order`).
ORDER_STRUCT = StructType([StructField("p", ArrayType(DecimalType(38, 0))), StructField("kp", IntegerType()),
                           StructField("ko", LongType())])
#: :data:`ORDER_STRUCT` as a Spark SQL type: ``struct<p:array<decimal(38,0)>,kp:int,ko:bigint>``.
ORDER_TYPE = ORDER_STRUCT.simpleString()
#: Metadata columns of every silver row (see :mod:`cdclake.silver`): the order, operation and
#: source time (ms) of the key's latest change, the order of its latest reset, and the order of
#: every column whose value came from an older change than the latest.
META_COLUMNS = {
    "_cdc_position": "array<decimal(38,0)>",
    "_cdc_kafka_partition": "int",
    "_cdc_kafka_offset": "bigint",
    "_cdc_op": "string",
    "_cdc_source_ts_ms": "bigint",
    "_cdc_reset": ORDER_TYPE,
    "_cdc_column_positions": f"map<string,{ORDER_TYPE}>",
}
#: The columns of :data:`META_COLUMNS` copied from the last change of a key.
LAST_CHANGE_COLUMNS = ("_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset", "_cdc_op", "_cdc_source_ts_ms")
#: The boolean column flagging a deleted row in soft-delete mode.
SOFT_DELETE_COLUMN = "_cdc_deleted"
#: Tombstone tables: one row per deleted key (hard-delete mode) and one with an empty key for the
#: latest truncate.
TOMBSTONE_SCHEMA = StructType([
    StructField("key", ArrayType(StringType())), StructField("_cdc_position", ArrayType(DecimalType(38, 0))),
    StructField("_cdc_kafka_partition", IntegerType()), StructField("_cdc_kafka_offset", LongType()),
    StructField("_cdc_source_ts_ms", LongType()),
])
#: Metadata columns of every history row (see :mod:`cdclake.silver.history`).
HISTORY_META = {
    "_cdc_op": "string",
    "_cdc_valid_from_position": "array<decimal(38,0)>",
    "_cdc_valid_from_ts_ms": "bigint",
    "_cdc_valid_to_position": "array<decimal(38,0)>",
    "_cdc_valid_to_ts_ms": "bigint",
    "_cdc_is_current": "boolean",
    "_cdc_kafka_partition": "int",
    "_cdc_kafka_offset": "bigint",
}
