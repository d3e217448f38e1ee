"""Stage 2, normalize: parse the landed raw records of a window into canonical bronze rows.

Every raw record ends up in exactly one of three tables (the normalize gate checks the counts):

- ``bronze.changes``: one row per row change (:class:`cdclake.record.ChangeRecord` fields plus
  kafka_topic, kafka_partition, kafka_offset, kafka_timestamp_ms, landed_hour:
  :data:`cdclake.lake.BRONZE_SCHEMA`); a multi-row record (Canal ``data``) gives several rows
  with the same Kafka coordinates.
- ``bronze.quarantine``: records no parser could read: kafka coordinates, landed_hour,
  source_format, reason (names format and field), key and value bytes, quarantined_at.
- ``bronze.control_events``: records that are not row changes (DDL, tombstones, heartbeats,
  transaction markers, metadata messages): kafka coordinates, landed_hour, source_format, kind,
  source names, detail.

Formats whose data messages need earlier metadata messages (Qlik Replicate) also keep their table
definitions in ``bronze.schema_registry`` (:func:`cdclake.normalize.registry.register_schemas`),
which accumulates across hours.

All three are partitioned by (kafka_topic, hours(landed_hour)); a rerun overwrites the window.

One bad record never stops a run: whatever fails for one record (a parser error, an exception of
any type while its key or value is decoded, its change checked, its bronze row built or its row
converted to Arrow, or its schema registry entries extracted) puts that record in quarantine with
a reason naming the format and the field, and the rest of the hour is applied. Records past the
limits of ``normalize`` in the pipeline file (:class:`cdclake.config.NormalizeConfig`: a value or
key larger than ``max_value_bytes``, a JSON value or key nested deeper than
``max_nesting_depth``) are quarantined with the limit as their reason, before they are parsed
(:mod:`cdclake.normalize.limits`).

The Python workers' side, raw records to row tuples, is :mod:`cdclake.normalize.rows`; the tables'
schemas and creation are :mod:`cdclake.lake`'s.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from cdclake.catalog import qualified
from cdclake.config import PipelineConfig
from cdclake.errors import task_run_error
from cdclake.faults import kill_point
from cdclake.formats import get_parser
from cdclake.lake import (BRONZE_TABLES, BRONZE_WRITE_ORDER, RAW_SPLIT_BYTES, RAW_TABLE, bronze_frame,
                          ensure_bronze_tables, overwrite_hours, window_filter)
from cdclake.normalize.limits import (MAX_NESTING_DEPTH, MAX_VALUE_BYTES, check_limits, json_deeper_than,
                                      json_nesting_depth)
from cdclake.normalize.registry import register_schemas, registry_row
from cdclake.normalize.rows import (OUTPUT_COLUMNS, TAGGED_SCHEMA, RawRow, classify, classify_records, kafka_record,
                                    parse_batches, quarantine_reason, tagged_arrow_schema)
from cdclake.results import NormalizeResult, TopicCounts
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MAX_NESTING_DEPTH", "MAX_VALUE_BYTES", "RawRow", "check_limits", "classify", "classify_records",
           "json_deeper_than", "json_nesting_depth", "kafka_record", "normalize", "parse_batches", "quarantine_reason",
           "register_schemas", "registry_row", "tagged_arrow_schema"]

log = logging.getLogger(__name__)


def normalize(spark: "SparkSession", cfg: PipelineConfig, window: Window,
              paths: Optional[dict] = None) -> NormalizeResult:
    """Parse the window's raw records of the selected topics into bronze, quarantine and control.

    Records past the limits of ``cfg.normalize`` (``max_value_bytes``, ``max_nesting_depth``) and
    records that fail in any way are quarantined one by one (see the module docstring).
    Returns a :class:`cdclake.results.NormalizeResult`: a :class:`cdclake.results.TopicCounts` per
    topic (raw records, change rows, quarantined and control records), which reads as
    ``{topic: {"raw": n, "changes": rows, "quarantined": n, "control": n}}``. A format
    with a columnar fast path reads most records with it (:mod:`cdclake.formats.columnar`) and
    the rest with its per-record parser; the share is logged per topic and, given a dict
    ``paths``, put there: ``{topic: {"fast_path": records, "per_record": records}}``.
    """
    from pyspark import StorageLevel

    topics = list(window.topics or cfg.topics())
    ensure_bronze_tables(spark, cfg)
    parsers = {t: get_parser(cfg.source(t).format, cfg.source(t).parser_options()) for t in topics}
    # one task per Parquet row group of the raw table (cdclake.lake.RAW_ROW_GROUP_BYTES)
    raw = (spark.read.option("split-size", str(RAW_SPLIT_BYTES)).table(qualified(cfg, RAW_TABLE))
           .where(window_filter(window, topics)))
    parsers = register_schemas(spark, cfg, raw, parsers)

    raw = _parse_tasks(raw, spark.sparkContext.defaultParallelism)
    arrow_schema = tagged_arrow_schema()
    max_bytes, max_depth = cfg.normalize.max_value_bytes, cfg.normalize.max_nesting_depth
    tagged = raw.mapInArrow(lambda batches: parse_batches(parsers, arrow_schema, batches, max_bytes, max_depth),
                            TAGGED_SCHEMA)
    tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        return _write(spark, window, topics, parsers, tagged, cfg, paths)
    except Exception as exc:
        stopped = task_run_error(exc)  # a service, a timeout, the runtime: the run fails, nothing quarantined
        if stopped is None:
            raise
        raise stopped from None
    finally:
        tagged.unpersist()


#: Raw records one parsing task takes at least, where the window's files are small: a task (a
#: Python worker started, the parsers unpickled, a file writer per table partition) costs about
#: what parsing some ten thousand records does.
PARSE_TASK_RECORDS = 100_000


def _parse_tasks(raw, cores: int):
    """``raw`` (the window's raw rows, one Spark partition per row group or per few small files) in
    partitions the parsers take one task each: a window smaller than ``cores`` partitions (a small
    hour, or one landed before row groups were capped, is one row group) spread over every core by
    a shuffle, as the parsers are the stage's main work; one of many small files (one topic per
    source table: a file per topic and hour) gathered without a shuffle into a multiple of
    ``cores`` tasks of about :data:`PARSE_TASK_RECORDS` records (the count Iceberg's scan planning
    gives, from the files' metadata)."""
    n = raw.rdd.getNumPartitions()
    if n < cores:
        return raw.repartition(cores)
    rows = _planned_rows(raw)
    if rows is None:
        return raw
    tasks = -(-max(1, -(-rows // PARSE_TASK_RECORDS)) // cores) * cores
    return raw.coalesce(tasks) if tasks < n else raw


def _planned_rows(df) -> Optional[int]:
    """The rows Spark's optimizer says ``df`` holds (an Iceberg scan counts its files' records, less
    what delete files may remove), or None when it does not say."""
    try:
        count = df._jdf.queryExecution().optimizedPlan().stats().rowCount()
        return int(str(count.get())) if count.isDefined() else None
    except Exception:  # noqa: BLE001  (a plan without statistics: the partitions as planned)
        return None


def _write(spark: "SparkSession", window: Window, topics: list[str], parsers: dict, tagged, cfg: PipelineConfig,
           paths: Optional[dict]) -> NormalizeResult:
    """Write the parsed frame ``tagged`` (:data:`cdclake.normalize.rows.TAGGED_SCHEMA`) into the
    window's bronze, quarantine and control partitions; log and return the counts per topic
    (:class:`cdclake.results.NormalizeResult`)."""
    from pyspark.sql import functions as F

    kind = F.col("_kind")
    stats = {t: TopicCounts() for t in topics}
    for k, (name, _schema) in zip(("change", "quarantine", "control"), BRONZE_TABLES):
        part = tagged.where(kind == k).select(*OUTPUT_COLUMNS[k].names)
        frame = bronze_frame(part) if k == "change" else part
        overwrite_hours(frame, cfg, name, window, topics, BRONZE_WRITE_ORDER if k == "change" else ())
        if k == "change":
            kill_point("normalize.bronze_written")
    # counted on the parsed frame the writes took their rows from (the gate counts the tables)
    fast = {}
    for r in tagged.groupBy("kafka_topic").agg(
            F.count(F.when(F.col("_first"), 1)).alias("raw"),
            F.count(F.when(F.col("_first") & F.col("_fast"), 1)).alias("fast"),
            *[F.count(F.when(kind == k, 1)).alias(n)
              for k, n in (("change", "changes"), ("quarantine", "quarantined"), ("control", "control"))]).collect():
        stats[r["kafka_topic"]] = TopicCounts(**{n: int(r[n]) for n in ("raw", "changes", "quarantined", "control")})
        fast[r["kafka_topic"]] = int(r["fast"])
        if paths is not None:
            paths[r["kafka_topic"]] = {"fast_path": int(r["fast"]), "per_record": int(r["raw"]) - int(r["fast"])}
    for t, s in stats.items():
        log.info("normalized topic %s for %s: %d raw records -> %d change rows, %d quarantined, %d control",
                 t, window, s.raw, s.changes, s.quarantined, s.control)
        if parsers[t].FAST_PATH and s.raw:
            log.info("normalized topic %s for %s: %d of %d raw records (%.2f%%) read by the per-record parser, "
                     "the rest by the columnar fast path", t, window, s.raw - fast.get(t, 0), s.raw,
                     100.0 * (s.raw - fast.get(t, 0)) / s.raw)
        if s.quarantined:
            for q in (tagged.where((kind == "quarantine") & (F.col("kafka_topic") == t))
                      .select("kafka_partition", "kafka_offset", "reason").limit(5).collect()):
                log.warning("quarantined %s[%d]@%d: %s", t, q.kafka_partition, q.kafka_offset, q.reason)
    return NormalizeResult(stats)
