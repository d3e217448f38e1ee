"""Every table of the lake: its name, schema, partitioning and creation, and how silver tables are named.

The stages (land, normalize, silver) and the gates reach tables only through this module; they do
not import each other. Tables (all inside the pipeline's catalog, :mod:`cdclake.catalog`):

=============================  ====================================================  =====================
table                          rows                                                  schema
=============================  ====================================================  =====================
``raw.kafka_records``          landed Kafka records, partitioned by topic and hour   :data:`RAW_SCHEMA`
``raw.land_manifest``          offset range read per topic, partition and hour       :data:`MANIFEST_SCHEMA`
``bronze.changes``             canonical change records (``cdclake.record``)         :data:`BRONZE_SCHEMA`
``bronze.quarantine``          records that could not be parsed, with the reason     :data:`QUARANTINE_SCHEMA`
``bronze.control_events``      DDL, tombstones, heartbeats: recognised, not rows     :data:`CONTROL_SCHEMA`
``bronze.schema_registry``     table definitions from metadata messages (Qlik)       :data:`REGISTRY_SCHEMA`
``bronze.run_metrics``         one row per stage run, topic (and silver table)       :data:`RUN_METRICS_SCHEMA`
``<silver>.<name>``            one table per source table (:func:`silver_table`)     source columns +
                                                                                     :data:`META_COLUMNS`
``<silver>_tombstones.<name>`` deletes and truncates of a silver table               :data:`TOMBSTONE_SCHEMA`
``<silver>_history.<name>``    SCD type 2 versions of a silver table's keys          source columns +
                                                                                     :data:`HISTORY_META`
=============================  ====================================================  =====================

Raw, manifest, bronze, quarantine and control tables are partitioned by (kafka_topic,
hours(landed_hour)), so that a window is replaced by an overwrite whose filter
(:func:`window_filter`) matches whole files; the registry by source_format. All are Iceberg format 2.
Schemas are Spark StructTypes, every column nullable (as Spark reads a DDL column list);
:func:`ddl` gives a schema's SQL column list, :func:`arrow_schema` its Arrow schema.

Silver tables live in ``<catalog>.<silver.namespace>`` and are named
``<table_prefix><database>__<schema>__<table>`` (missing parts left out). A name longer than
:data:`MAX_NAME_CHARS` (255, what catalogs hold: PostgreSQL's Iceberg JDBC catalog keeps table
names in VARCHAR(255)) is shortened deterministically to its first 238 characters, ``~`` and the
first 16 hex digits of the SHA-256 of the whole name (UTF-8): 255 characters
(:attr:`SourceTable.silver_name`); a table an earlier version created under the whole name keeps
it. Tombstone and history tables take the silver table's name in their own namespaces. New
tables record their source table in the property ``cdc.source-table`` (JSON ``[prefix, database,
schema, table]``). Names from messages never become paths: every table named after a source
table gets an explicit location ``<warehouse>/<namespace>/<slug>-<hash>`` (:func:`table_location`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DataType, DecimalType, DoubleType, IntegerType,
                               LongType, MapType, StringType, StructField, StructType, TimestampType)

from cdclake import types as T
from cdclake.catalog import ensure_namespace, qualified
from cdclake.config import PipelineConfig
from cdclake.record import ChangeRecord
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RAW_TABLE = "raw.kafka_records"
MANIFEST_TABLE = "raw.land_manifest"
BRONZE_TABLE = "bronze.changes"
QUARANTINE_TABLE = "bronze.quarantine"
CONTROL_TABLE = "bronze.control_events"
REGISTRY_TABLE = "bronze.schema_registry"
RUN_METRICS_TABLE = "bronze.run_metrics"


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


def window_filter(window: Window, topics: list[str], hour_col: str = "landed_hour"):
    """Column predicate selecting ``topics`` and the hours of ``window``."""
    from pyspark.sql import functions as F

    return (F.col("kafka_topic").isin(topics)
            & (F.col(hour_col) >= F.lit(window.start).cast("timestamp"))
            & (F.col(hour_col) < F.lit(window.end).cast("timestamp")))


#: Iceberg write options of the hour tables (raw, ledger, bronze, quarantine, control): every task
#: writes the rows it holds. Iceberg's default (``hash``) first shuffles a partitioned table's rows
#: so that each partition is written by one task: a topic's hour, the whole of a window, went
#: through one task and one core, after a shuffle of every value. With ``fanout-enabled`` a task
#: may hold rows of several partitions (a window of several hours or topics).
HOUR_WRITE_OPTIONS = {"distribution-mode": "none", "fanout-enabled": "true"}


def overwrite_hours(df: "DataFrame", cfg: PipelineConfig, table: str, window: Window, topics: list[str]) -> None:
    """Replace the rows of ``topics`` in the hours of ``window`` in hour table ``table`` with ``df``
    (:data:`HOUR_WRITE_OPTIONS`): one Iceberg commit, files written by the tasks that hold the rows."""
    df.writeTo(qualified(cfg, table)).options(**HOUR_WRITE_OPTIONS).overwrite(window_filter(window, topics))


def _create(spark: "SparkSession", cfg: PipelineConfig, table: str, schema: StructType, partitioning: str,
            properties: str = "") -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified(cfg, table)} ({ddl(schema)}) USING iceberg "
              f"PARTITIONED BY ({partitioning}) TBLPROPERTIES ('format-version'='2'{properties})")


def _add_columns(spark: "SparkSession", cfg: PipelineConfig, table: str, schema: StructType) -> None:
    """Add the columns of ``schema`` that ``table`` lacks (a table made by an earlier version), at the end."""
    have = set(spark.table(qualified(cfg, table)).columns)
    for f in schema.fields:
        if f.name not in have:
            spark.sql(f"ALTER TABLE {qualified(cfg, table)} ADD COLUMN {column_ddl(f)}")


_BY_TOPIC_HOUR = "kafka_topic, hours(landed_hour)"

# --- raw: landed Kafka records and the offset ledger -------------------------------------------

#: ``raw.kafka_records``: one row per Kafka record. ``kafka_timestamp_ms``: the record timestamp
#: (ms); ``value`` null for a Kafka tombstone (kept); ``landed_hour``: UTC hour of the run that
#: took the record (see :mod:`cdclake.kafka_ranges`).
RAW_SCHEMA = StructType([
    StructField("kafka_topic", StringType()), StructField("kafka_partition", IntegerType()),
    StructField("kafka_offset", LongType()), StructField("kafka_timestamp_ms", LongType()),
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("headers", ArrayType(StructType([StructField("name", StringType()), StructField("value", BinaryType())]))),
    StructField("landed_hour", TimestampType()),
])
#: ``raw.land_manifest``, the offset ledger: one row per topic partition and landed hour, empty
#: hours included; ``end_offset`` exclusive, ``records`` landed, ``landed_at`` when.
MANIFEST_SCHEMA = StructType([
    StructField("kafka_topic", StringType()), StructField("kafka_partition", IntegerType()),
    StructField("landed_hour", TimestampType()), StructField("start_offset", LongType()),
    StructField("end_offset", LongType()), StructField("records", LongType()), StructField("landed_at", TimestampType()),
])

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

#: The Kafka coordinates and landed hour every bronze, quarantine and control row carries.
KAFKA_COLUMNS = [StructField("kafka_topic", StringType()), StructField("kafka_partition", IntegerType()),
                 StructField("kafka_offset", LongType()), StructField("kafka_timestamp_ms", LongType()),
                 StructField("landed_hour", TimestampType())]

#: The Spark type of a :class:`ChangeRecord` field, by its annotation. A required integer is an
#: index inside a Kafka record (int: ``row_in_record``), an optional one a time, sequence or count
#: (bigint); a source position (a tuple of non-negative integers) is ``array<decimal(38,0)>``.
_SPARK_TYPES: dict[str, DataType] = {
    "str": StringType(), "Optional[str]": StringType(), "int": IntegerType(), "Optional[int]": LongType(),
    "Optional[bool]": BooleanType(), "list[str]": ArrayType(StringType()),
    "tuple[int, ...]": ArrayType(DecimalType(38, 0)), "dict[str, str]": MapType(StringType(), StringType()),
    "Optional[dict[str, Optional[str]]]": MapType(StringType(), StringType()),
}
#: The last field of the first version of bronze: the Kafka columns come after it, and fields
#: added since after them (an existing table gets them appended: :func:`ensure_bronze_tables`).
_FIRST_VERSION_LAST_FIELD = "row_in_record"


def _change_fields() -> list[tuple[str, DataType, bool]]:
    """``[(field, Spark type, optional)]`` of :class:`ChangeRecord`, in declaration order."""
    out = []
    for f in dataclasses.fields(ChangeRecord):
        if f.type not in _SPARK_TYPES:
            raise TypeError(f"ChangeRecord.{f.name}: no bronze column type for annotation {f.type!r} "
                            "(add it to cdclake.lake._SPARK_TYPES)")
        out.append((f.name, _SPARK_TYPES[f.type], f.type.startswith("Optional[")))
    return out


_FIELDS = _change_fields()
_SPLIT = [n for n, _, _ in _FIELDS].index(_FIRST_VERSION_LAST_FIELD) + 1
#: ``bronze.changes``: the :class:`ChangeRecord` fields up to ``row_in_record``, the Kafka
#: columns, then the fields added since (``tx_last``, ``tx_size``). Derived from the dataclass:
#: a new field of ChangeRecord is a new bronze column.
BRONZE_SCHEMA = StructType([StructField(n, t) for n, t, _ in _FIELDS[:_SPLIT]] + KAFKA_COLUMNS
                           + [StructField(n, t) for n, t, _ in _FIELDS[_SPLIT:]])
#: The Python types each ChangeRecord field may hold to be written to its bronze column.
CHANGE_PYTHON_TYPES = {n: ((dict,) if isinstance(t, MapType) else (list, tuple) if isinstance(t, ArrayType)
                           else (bool,) if isinstance(t, BooleanType) else (str,) if isinstance(t, StringType)
                           else (int,))
                       + ((type(None),) if optional else ()) for n, t, optional in _FIELDS}
#: Each map column of bronze, as it leaves the Python workers: key and value arrays (PySpark's
#: dict conversion does not keep key order, and silver creates columns in the message's order).
STAGED_MAPS = {f.name: (f"{f.name}_k", f"{f.name}_v") for f in BRONZE_SCHEMA.fields if isinstance(f.dataType, MapType)}
#: How change rows leave the Python workers (:func:`bronze_row`): bronze, maps as key and value arrays.
STAGED_SCHEMA = StructType([c for f in BRONZE_SCHEMA.fields
                            for c in ([StructField(k, ArrayType(StringType())) for k in STAGED_MAPS[f.name]]
                                      if f.name in STAGED_MAPS else [f])])
#: The bronze column of each staged column (a map's key and value arrays: the map).
STAGED_TO_BRONZE = {s: n for n, pair in STAGED_MAPS.items() for s in pair}


def _pairs(m: Optional[dict]) -> tuple:
    return (None, None) if m is None else (list(m), list(m.values()))


def _optional_list(v) -> Optional[list]:
    return None if v is None else list(v)


def _row_builder(name: str, arg: str,
                 field: Callable[[int, str, DataType, bool], str]) -> Callable[[Any, tuple], tuple]:
    """A function ``name(arg, kcols)`` returning the staged bronze row (:data:`STAGED_SCHEMA`) as one
    tuple expression written out from :data:`BRONZE_SCHEMA` (it runs once per change row in
    normalize's Python workers, where a loop over the columns costs twice as much): ``field(i,
    name, type, optional)`` gives the expression of ChangeRecord field ``i``, and ``*kcols`` goes
    where the Kafka columns go. For :func:`bronze_row` and today's fields the source it compiles is::

        def bronze_row(c, kcols):
            return (c.source_format, c.source_database, c.source_schema, c.source_table, c.op,
                    *_pairs(c.before), *_pairs(c.after), list(c.primary_key), *_pairs(c.column_types),
                    list(c.source_position), c.source_ts_ms, c.tx_id, c.tx_seq, c.row_in_record,
                    *kcols, c.tx_last, c.tx_size)

    and for :func:`staged_row`::

        def staged_row(t, kcols):
            return (t[0], t[1], t[2], t[3], t[4], *t[5], *t[6], t[7], *t[8], t[9], t[10], t[11], t[12],
                    t[13], *kcols, t[14], t[15])
    """
    parts = []
    for i, (n, t, optional) in enumerate(_FIELDS):
        if i == _SPLIT:
            parts.append("*kcols")
        parts.append(field(i, n, t, optional))
    if _SPLIT == len(_FIELDS):
        parts.append("*kcols")
    scope = {"__name__": __name__, "_pairs": _pairs, "_optional_list": _optional_list}
    exec(f"def {name}({arg}, kcols):\n    return ({', '.join(parts)})\n", scope)
    return scope[name]


bronze_row = _row_builder("bronze_row", "c", lambda i, n, t, optional: (
    f"*_pairs(c.{n})" if isinstance(t, MapType) else
    (f"_optional_list(c.{n})" if optional else f"list(c.{n})") if isinstance(t, ArrayType) else f"c.{n}"))
staged_row = _row_builder("staged_row", "t",
                          lambda i, n, t, optional: f"*t[{i}]" if isinstance(t, MapType) else f"t[{i}]")
staged_row.__doc__ = """The staged bronze row tuple (:data:`STAGED_SCHEMA`) of a change row of a columnar fast path
(:mod:`cdclake.formats.columnar`: the ChangeRecord fields in order, maps as (keys, values) pairs,
arrays as lists) and ``kcols`` (the values of :data:`KAFKA_COLUMNS`). ``staged_row`` of a fast
path's change row equals :func:`bronze_row` of the ChangeRecord ``parse`` gives."""
bronze_row.__doc__ = """The staged bronze row tuple of ChangeRecord ``c`` (:data:`STAGED_SCHEMA`; ``kcols``: the
values of :data:`KAFKA_COLUMNS`): maps as key and value lists (None: both None), arrays as lists
(the position as ints, which Arrow writes as ``decimal(38,0)`` exactly). Raises ``TypeError`` for
a required array field that is None, ``AttributeError`` for a map field that is not a dict."""


def bronze_frame(staged: "DataFrame") -> "DataFrame":
    """Staged change rows (:data:`STAGED_SCHEMA`) as :data:`BRONZE_SCHEMA`, maps built in key order."""
    from pyspark.sql import functions as F

    def column(n: str):
        if n not in STAGED_MAPS:
            return F.col(n)
        k, v = STAGED_MAPS[n]
        return F.when(F.col(k).isNotNull(), F.map_from_arrays(k, v)).alias(n)

    return staged.select(*[column(n) for n in BRONZE_SCHEMA.names])


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
#: The tables every raw record of a window ends up in (one of them), with their schemas.
BRONZE_TABLES = ((BRONZE_TABLE, BRONZE_SCHEMA), (QUARANTINE_TABLE, QUARANTINE_SCHEMA), (CONTROL_TABLE, CONTROL_SCHEMA))


#: Parquet row groups of ``bronze.changes``, in compressed bytes: normalize writes each file's
#: changes ordered by source table (:data:`BRONZE_WRITE_ORDER`), so that a row group holds few
#: tables and silver's read of one table skips the row groups of the others by their statistics.
BRONZE_ROW_GROUP_BYTES = 8 * 1024 * 1024
#: The order of the changes within each file normalize writes to ``bronze.changes``.
BRONZE_WRITE_ORDER = ("source_table", "source_schema", "source_database")


def ensure_bronze_tables(spark: "SparkSession", cfg: PipelineConfig) -> None:
    """Create the bronze, quarantine, control and registry tables when missing.

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
#: table was created are added at the end (:func:`ensure_run_metrics_table`).
RUN_METRICS_SCHEMA = StructType([
    StructField("run_at", TimestampType()), StructField("pipeline", StringType()), StructField("stage", StringType()),
    StructField("kafka_topic", StringType()), StructField("window_start", TimestampType()),
    StructField("window_end", TimestampType()), StructField("records_landed", LongType()),
    StructField("records_parsed", LongType()), StructField("change_rows", LongType()),
    StructField("quarantined", LongType()), StructField("control", LongType()), StructField("silver_table", StringType()),
    StructField("changes_merged", LongType()), StructField("keys_upserted", LongType()),
    StructField("keys_deleted", LongType()), StructField("newest_source_ts", TimestampType()),
    StructField("lag_s", DoubleType()), StructField("duration_s", DoubleType()), StructField("future_stamped", LongType()),
])


def ensure_run_metrics_table(spark: "SparkSession", cfg: PipelineConfig) -> None:
    """Create ``bronze.run_metrics`` (:data:`RUN_METRICS_SCHEMA`, partitioned by days(run_at)) when missing.

    A table made by an earlier version gets the columns added since (at the end, an Iceberg schema
    change: the rows written before read them as null).
    """
    ensure_namespace(spark, cfg, "bronze")
    _create(spark, cfg, RUN_METRICS_TABLE, RUN_METRICS_SCHEMA, "days(run_at)")
    _add_columns(spark, cfg, RUN_METRICS_TABLE, RUN_METRICS_SCHEMA)


# --- silver, tombstone and history tables: naming -----------------------------------------------

#: Longest table name the pipeline gives a table (characters): what catalogs hold.
MAX_NAME_CHARS = 255
#: Hex digits of the SHA-256 that end a shortened name and a table location.
NAME_HASH_DIGITS = 16
#: Table property naming the source table of a silver table (JSON [prefix, database, schema, table]).
SOURCE_TABLE_PROPERTY = "cdc.source-table"
#: Table property holding the primary key columns as a JSON array (``cdc.primary-key`` joins them with commas).
PRIMARY_KEY_PROPERTY = "cdc.primary-key-columns"
#: Silver table property set once a key change has been merged (see :func:`cdclake.silver.keys.replay_rows`).
KEY_CHANGES_PROPERTY = "cdc.key-changes"


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:NAME_HASH_DIGITS]


def short_name(name: str) -> str:
    """``name`` when it has at most :data:`MAX_NAME_CHARS` characters, else its shortened form.

    Shortened: the first 238 characters, ``~``, and the first 16 hex digits of the SHA-256 of the
    whole name in UTF-8 (255 characters), e.g. ``short_name("a" * 300) == "a" * 238 + "~" + hex16``.
    """
    if len(name) <= MAX_NAME_CHARS:
        return name
    return name[:MAX_NAME_CHARS - NAME_HASH_DIGITS - 1] + "~" + _digest(name)


def table_location(cfg: PipelineConfig, namespace: str, name: str) -> str:
    """The location given to a new table ``name`` of ``namespace``: ``<warehouse>/<namespace>/<slug>-<hash>``.

    ``slug``: the first 40 ASCII letters, digits and underscores of ``name`` (other runs become
    one ``_``; ``t`` when none is left), ``hash``: the first 16 hex digits of the SHA-256 of
    ``name`` (UTF-8). So a name from a message never becomes a path, and the location is under
    the warehouse, in the namespace's directory (as Iceberg's default location would be).
    """
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", name)[:40].strip("_") or "t"
    return f"{cfg.catalog.warehouse.rstrip('/')}/{namespace}/{slug}-{_digest(name)}"


@dataclass(frozen=True)
class SourceTable:
    """A source table as bronze names it, plus the topic's silver table prefix.

    ``legacy_name``: the silver table was created by an earlier version under :attr:`full_name`
    though that is longer than :data:`MAX_NAME_CHARS` (see :func:`resolve_legacy_name`).
    """

    prefix: str
    database: Optional[str]
    schema: Optional[str]
    table: str
    legacy_name: bool = field(default=False, compare=False)

    @property
    def full_name(self) -> str:
        """``<prefix><database>__<schema>__<table>`` (missing parts left out), however long."""
        return self.prefix + "__".join(p for p in (self.database, self.schema, self.table) if p)

    @property
    def silver_name(self) -> str:
        """The silver table name: :attr:`full_name`, shortened by :func:`short_name` when too long."""
        return self.full_name if self.legacy_name else short_name(self.full_name)

    def identity(self) -> str:
        """The value of :data:`SOURCE_TABLE_PROPERTY`: JSON ``[prefix, database, schema, table]``."""
        return json.dumps([self.prefix, self.database, self.schema, self.table], ensure_ascii=False)

    def __str__(self) -> str:
        return ".".join(p for p in (self.database, self.schema, self.table) if p)


def resolve_legacy_name(st: SourceTable, exists: Callable[[str], bool]) -> SourceTable:
    """``st``, marked :attr:`SourceTable.legacy_name` when its silver table has its long name.

    An earlier version named every silver table :attr:`SourceTable.full_name`, however long (a
    catalog on an object store could hold such names). When that name is longer than
    :data:`MAX_NAME_CHARS` and ``exists(full_name)`` (the silver table of that name exists in the
    silver namespace), the table keeps it; otherwise ``st`` is returned unchanged.
    """
    if st.legacy_name or len(st.full_name) <= MAX_NAME_CHARS:
        return st
    return replace(st, legacy_name=True) if exists(st.full_name) else st


def tombstone_namespace(cfg: PipelineConfig) -> str:
    """The namespace of the tombstone tables: ``<silver.namespace>_tombstones``."""
    return cfg.silver.namespace + "_tombstones"


def history_namespace(cfg: PipelineConfig) -> str:
    """The namespace of the history tables: ``<silver.namespace>_history``."""
    return cfg.silver.namespace + "_history"


def _table_name(cfg: PipelineConfig, namespace: str, name: str) -> str:
    return f"{cfg.catalog.name}.{T.quote_ident(namespace)}.{T.quote_ident(name)}"


def silver_table(cfg: PipelineConfig, st: SourceTable) -> str:
    """Fully qualified, quoted Spark name of the silver table of ``st``."""
    return _table_name(cfg, cfg.silver.namespace, st.silver_name)


def tombstone_table(cfg: PipelineConfig, st: SourceTable) -> str:
    """Quoted name of the tombstone table of ``st``: ``<namespace>_tombstones.<silver name>``.

    Columns (:data:`TOMBSTONE_SCHEMA`): key array<string> (primary-key values in canonical text;
    empty for a truncate), and the ``_cdc_*`` position columns and source time (ms) of the delete.
    """
    return _table_name(cfg, tombstone_namespace(cfg), st.silver_name)


def history_table(cfg: PipelineConfig, silver_name: str) -> str:
    """Quoted name of the history table of silver table ``silver_name``: ``<namespace>_history.<silver name>``."""
    return _table_name(cfg, history_namespace(cfg), silver_name)


def table_exists(spark: "SparkSession", name: str) -> bool:
    """Whether the table of the quoted Spark name ``name`` exists; other errors propagate."""
    try:
        spark.table(name).schema
        return True
    except Exception as exc:  # AnalysisException: TABLE_OR_VIEW_NOT_FOUND
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
            return False
        raise


# --- silver, tombstone and history tables: schemas ----------------------------------------------

#: The fields of the order of a change as silver stores it: source position, Kafka partition and
#: offset (:mod:`cdclake.silver.order`).
ORDER_FIELDS = [("p", "array<decimal(38,0)>"), ("kp", "int"), ("ko", "bigint")]
ORDER_TYPE = "struct<" + ",".join(f"{n}:{t}" for n, t in ORDER_FIELDS) + ">"
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
