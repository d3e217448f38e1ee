"""Stage 1, land: copy each topic's hour offset ranges from Kafka into the raw Iceberg table.

``raw.kafka_records`` columns: kafka_topic string, kafka_partition int, kafka_offset bigint,
kafka_timestamp_ms bigint (record timestamp, ms), key binary, value binary (null for a Kafka
tombstone; kept), headers array<struct<name string, value binary>>, landed_hour timestamp (UTC
hour whose offset range holds the record; see ``cdclake.kafka_ranges``). Partitioned by
(kafka_topic, hours(landed_hour)).

``raw.land_manifest`` records what each run landed: kafka_topic, kafka_partition, landed_hour,
start_offset, end_offset (exclusive), records (bigint), landed_at timestamp (one row per
partition and non-empty hour; partitioned like the raw table, so that any window can be
replaced by an overwrite whose filter matches whole files).

Re-landing a window replaces exactly that window's rows for the landed topics (one atomic
Iceberg overwrite by filter), so reruns and backfills are idempotent.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cdclake import kafka_ranges
from cdclake.catalog import MANIFEST_TABLE, RAW_TABLE, ensure_namespace, qualified
from cdclake.config import PipelineConfig
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

RAW_SCHEMA = ("kafka_topic string, kafka_partition int, kafka_offset bigint, kafka_timestamp_ms bigint, "
              "key binary, value binary, headers array<struct<name:string,value:binary>>, landed_hour timestamp")
MANIFEST_SCHEMA = ("kafka_topic string, kafka_partition int, landed_hour timestamp, start_offset bigint, "
                   "end_offset bigint, records bigint, landed_at timestamp")


#: Parquet row groups of the raw table, in compressed bytes (Iceberg's default is 128 MB). CDC
#: values compress 20 to 50 times (the Connect schema repeats in every Debezium message), so an
#: hour of a topic is often one file under 128 MB, written as one row group: one Spark task would
#: read it, and normalize would have to shuffle every value to spread the parsing over the cores.
#: Row groups of 8 MB let normalize read a file in several tasks (:data:`RAW_SPLIT_BYTES`).
RAW_ROW_GROUP_BYTES = 8 * 1024 * 1024
#: Iceberg ``split-size`` normalize reads the raw table with: one task per row group.
RAW_SPLIT_BYTES = RAW_ROW_GROUP_BYTES


def ensure_tables(spark: "SparkSession", cfg: PipelineConfig) -> None:
    """Create ``raw.kafka_records`` and ``raw.land_manifest`` when missing.

    The raw table is written in Parquet row groups of :data:`RAW_ROW_GROUP_BYTES` (set on a raw
    table made by an earlier version too; files written before keep theirs).
    """
    ensure_namespace(spark, cfg, "raw")
    raw = qualified(cfg, RAW_TABLE)
    row_group = f"'write.parquet.row-group-size-bytes'='{RAW_ROW_GROUP_BYTES}'"
    spark.sql(f"CREATE TABLE IF NOT EXISTS {raw} ({RAW_SCHEMA}) USING iceberg "
              f"PARTITIONED BY (kafka_topic, hours(landed_hour)) TBLPROPERTIES ('format-version'='2', {row_group})")
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {raw}").collect()}
    if props.get("write.parquet.row-group-size-bytes") != str(RAW_ROW_GROUP_BYTES):
        spark.sql(f"ALTER TABLE {raw} SET TBLPROPERTIES ({row_group})")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified(cfg, MANIFEST_TABLE)} ({MANIFEST_SCHEMA}) USING iceberg "
              "PARTITIONED BY (kafka_topic, hours(landed_hour)) TBLPROPERTIES ('format-version'='2')")


def window_filter(window: Window, topics: list[str], hour_col: str = "landed_hour"):
    """Column predicate selecting ``topics`` and the hours of ``window``."""
    from pyspark.sql import functions as F

    return (F.col("kafka_topic").isin(topics)
            & (F.col(hour_col) >= F.lit(window.start).cast("timestamp"))
            & (F.col(hour_col) < F.lit(window.end).cast("timestamp")))


class LandingShrinks(RuntimeError):
    """Re-landing would replace landed records with fewer (Kafka retention or compaction removed them)."""


def check_not_shrinking(spark: "SparkSession", cfg: PipelineConfig, window: Window, topics: list[str], new) -> None:
    """Refuse to overwrite an hour with fewer records than the manifest says were landed before.

    Raises :class:`LandingShrinks` naming topic, partition, hour and both counts.
    """
    from pyspark.sql import functions as F

    keys = ["kafka_topic", "kafka_partition", "landed_hour"]
    before = spark.table(qualified(cfg, MANIFEST_TABLE)).where(window_filter(window, topics)).select(*keys, "records")
    now = new.groupBy(*keys).agg(F.count("*").alias("now"))
    lost = before.join(now, keys, "left").where(F.coalesce("now", F.lit(0)) < F.col("records")).limit(5).collect()
    if lost:
        r = lost[0]
        raise LandingShrinks(
            f"{r.kafka_topic}[{r.kafka_partition}] hour {r.landed_hour.isoformat()}: Kafka now holds "
            f"{r.now or 0} records where {r.records} were landed before (retention or compaction); "
            "refusing to overwrite the landed hour (bronze and silver are built from it)")


def raw_arrow_schema():
    """The Arrow schema of :data:`RAW_SCHEMA` (made on the driver: it needs the JVM)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    return to_arrow_schema(_parse_datatype_string(RAW_SCHEMA))


def land(spark: "SparkSession", cfg: PipelineConfig, window: Window) -> dict[str, int]:
    """Land every selected topic's records of ``window`` into the raw table; return counts per topic.

    One Spark task per topic partition reads its records with confluent-kafka and hands them to
    the JVM as Arrow batches (:func:`cdclake.kafka_ranges.arrow_batches`); one atomic overwrite
    of the window; then the manifest (offset range and count per partition and hour). Raises
    ``KafkaUnavailable`` (broker unreachable, topic missing, reading stalls) and
    :class:`LandingShrinks`.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    topics = list(window.topics or cfg.topics())
    k = cfg.kafka
    parts = kafka_ranges.partitions(k.bootstrap_servers, topics, k.timeout_s, k.client)
    ensure_tables(spark, cfg)
    bootstrap, timeout, client = k.bootstrap_servers, max(30.0, k.timeout_s), dict(k.client)
    schema = raw_arrow_schema()

    def read(batches):
        for b in batches:
            for topic, p in zip(b.column(0).to_pylist(), b.column(1).to_pylist()):
                yield from kafka_ranges.arrow_batches(bootstrap, topic, p, window, schema, timeout, client)

    # one row, and so one task, per topic partition
    todo = spark.createDataFrame(spark.sparkContext.parallelize(parts, max(1, len(parts))),
                                 "kafka_topic string, kafka_partition int")
    df = todo.mapInArrow(read, RAW_SCHEMA)
    # A first landing of the window goes straight from Kafka to the table; a rerun keeps the
    # records it read (memory, then local disk) to count them against the manifest before it
    # replaces anything, so Kafka is read once either way.
    rerun = bool(spark.table(qualified(cfg, MANIFEST_TABLE)).where(window_filter(window, topics)).take(1))
    try:
        if rerun:
            df = df.persist(StorageLevel.MEMORY_AND_DISK)
            check_not_shrinking(spark, cfg, window, topics, df)
        df.writeTo(qualified(cfg, RAW_TABLE)).overwrite(window_filter(window, topics))
    finally:
        df.unpersist()  # nothing to free after a first landing

    manifest = (spark.table(qualified(cfg, RAW_TABLE)).where(window_filter(window, topics))
                .groupBy("kafka_topic", "kafka_partition", "landed_hour")
                .agg(F.min("kafka_offset").alias("start_offset"), (F.max("kafka_offset") + 1).alias("end_offset"),
                     F.count("*").alias("records"))
                .withColumn("landed_at", F.current_timestamp()))
    manifest.writeTo(qualified(cfg, MANIFEST_TABLE)).overwrite(window_filter(window, topics))
    result = {t: 0 for t in topics}
    for r in spark.table(qualified(cfg, MANIFEST_TABLE)).where(window_filter(window, topics)).orderBy(
            "kafka_topic", "kafka_partition", "landed_hour").collect():
        log.info("landed %s[%d] hour %s: offsets %d..%d, %d records", r.kafka_topic, r.kafka_partition,
                 r.landed_hour.isoformat(), r.start_offset, r.end_offset, r.records)
        result[r.kafka_topic] += r.records
    for t, n in result.items():
        log.info("landed %d records of topic %s for %s", n, t, window)
    return result
