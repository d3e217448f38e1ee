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

The Python workers do the whole data path: each task reads its share of the window's raw data
files with pyarrow (:func:`cdclake.lake.plan_splits`, :func:`cdclake.lake.read_splits`), parses
them, and writes the bronze, quarantine and control data files itself
(:mod:`cdclake.normalize.files`), returning only the files' metadata and its counts; the driver
commits the change shapes its bronze rows name (:func:`cdclake.lake.commit_shapes`), then
``bronze.changes``, then quarantine and control (:func:`cdclake.lake.commit_hours`), each in one
overwrite of the window. No record crosses into the JVM.

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
import time
from typing import TYPE_CHECKING, Optional

from cdclake.config import PipelineConfig
from cdclake.errors import task_run_error
from cdclake.faults import kill_point
from cdclake.formats import get_parser
from cdclake.lake import (BRONZE_TABLES, BRONZE_WRITE_ORDER, RAW_SCHEMA, RAW_TABLE, commit_hours, commit_shapes,
                          ensure_bronze_tables, hour_table, plan_splits, read_splits)
from cdclake.normalize.files import KINDS, TASK_OUTPUT_DDL, task_results, write_parsed
from cdclake.normalize.limits import (MAX_NESTING_DEPTH, MAX_VALUE_BYTES, check_limits, json_deeper_than,
                                      json_nesting_depth)
from cdclake.normalize.registry import register_schemas, registry_row, window_entries
from cdclake.normalize.rows import (RawRow, classify, classify_records, kafka_record,
                                    parse_batches, quarantine_reason, tagged_arrow_schema)
from cdclake.results import NormalizeResult, TopicCounts
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MAX_NESTING_DEPTH", "MAX_VALUE_BYTES", "RawRow", "check_limits", "classify", "classify_records",
           "json_deeper_than", "json_nesting_depth", "kafka_record", "normalize", "parse_batches", "quarantine_reason",
           "register_schemas", "registry_row", "tagged_arrow_schema", "window_entries"]

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
    topics = list(window.topics or cfg.topics())
    ensure_bronze_tables(spark, cfg)
    parsers = {t: get_parser(cfg.source(t).format, cfg.source(t).parser_options()) for t in topics}
    cores = spark.sparkContext.defaultParallelism
    raw_table = hour_table(cfg, RAW_TABLE)
    parsers = register_schemas(spark, cfg, window, parsers, raw_table, PARSE_TASKS_PER_CORE * cores, PARSE_TASK_RECORDS)
    splits = plan_splits(cfg, raw_table, window, topics, PARSE_TASKS_PER_CORE * cores, PARSE_TASK_RECORDS)
    arrow_schema = tagged_arrow_schema()
    max_bytes, max_depth = cfg.normalize.max_value_bytes, cfg.normalize.max_nesting_depth
    tables = {k: hour_table(cfg, name, order=BRONZE_WRITE_ORDER if k == "change" else (),
                            plain=("key", "value") if k == "quarantine" else (), compressed_groups=k == "change")
              for k, (name, _schema) in zip(KINDS, BRONZE_TABLES)}
    columns = RAW_SCHEMA.names

    def task(batches):
        for b in batches:
            for i in b.column(0).to_pylist():
                parsed = parse_batches(parsers, arrow_schema, read_splits(raw_table, splits[i], columns), max_bytes,
                                       max_depth)
                yield from write_parsed(tables, parsed)

    # one row, and so one task, per split of the window's raw files
    todo = spark.createDataFrame(spark.sparkContext.parallelize([(i,) for i in range(len(splits))],
                                                                max(1, len(splits))), "split int")
    written = todo.mapInArrow(task, TASK_OUTPUT_DDL)
    spark.sparkContext.setJobDescription(f"normalize: {len(topics)} topics, {window}")
    t0 = time.monotonic()
    try:
        files, counts = task_results(written.collect())
        log.info("normalize %s: %d tasks parsed the raw data files and wrote %d data files in %.1f s", window,
                 len(splits), sum(len(f) for f in files.values()), time.monotonic() - t0)
    except Exception as exc:
        stopped = task_run_error(exc)  # a service, a timeout, the runtime: the run fails, nothing quarantined
        if stopped is None:
            raise
        raise stopped from None
    finally:
        spark.sparkContext.setJobDescription(None)
    t0 = time.monotonic()
    commit_shapes(cfg, counts.shapes)  # before the bronze rows that name them
    for k, t in tables.items():
        commit_hours(cfg, t.name, window, topics, files.get(t.name, []), "normalize")
        if k == "change":
            kill_point("normalize.bronze_written")
    log.info("normalize %s: bronze, quarantine and control committed in %.1f s", window, time.monotonic() - t0)
    return _report(window, topics, parsers, counts, paths)


#: Raw records one parsing task takes at least, where the window's files are small: a task (a
#: Python worker started, the parsers unpickled, a file writer per table partition) costs about
#: what parsing some ten thousand records does.
PARSE_TASK_RECORDS = 100_000
#: Parsing tasks per core at least (:func:`cdclake.lake.plan_splits`): a core whose task ends
#: early takes another.
PARSE_TASKS_PER_CORE = 2


def _report(window: Window, topics: list[str], parsers: dict, counts, paths: Optional[dict]) -> NormalizeResult:
    """Log the counts per topic of the writing tasks (``counts``: a
    :class:`cdclake.normalize.files.TaskCounts`) and return them as a :class:`NormalizeResult`;
    the fast path's share per topic goes to ``paths`` when given."""
    stats = {t: TopicCounts() for t in topics}
    for t, (raw, changes, quarantined, control, fast) in counts.counts.items():
        stats[t] = TopicCounts(raw=raw, changes=changes, quarantined=quarantined, control=control)
        if paths is not None:
            paths[t] = {"fast_path": fast, "per_record": raw - fast}
    for t, s in stats.items():
        log.info("normalized topic %s for %s: %d raw records -> %d change rows, %d quarantined, %d control",
                 t, window, s.raw, s.changes, s.quarantined, s.control)
        fast = counts.counts.get(t, [0] * 5)[4]
        if parsers[t].FAST_PATH and s.raw:
            log.info("normalized topic %s for %s: %d of %d raw records (%.2f%%) read by the per-record parser, "
                     "the rest by the columnar fast path", t, window, s.raw - fast, s.raw,
                     100.0 * (s.raw - fast) / s.raw)
        for partition, offset, reason in counts.samples.get(t, []):
            log.warning("quarantined %s[%d]@%d: %s", t, partition, offset, reason)
    return NormalizeResult(stats)
