"""The schema registry: table definitions from metadata messages, kept across hours (Qlik Replicate).

Formats whose data messages need earlier metadata messages keep their table definitions in
``bronze.schema_registry`` (:data:`cdclake.lake.REGISTRY_SCHEMA`), which accumulates across hours:
:func:`register_schemas` adds a window's definitions and hands the parsers every stored one.
"""
from __future__ import annotations

import logging
from collections import namedtuple
from typing import TYPE_CHECKING, Iterable, Iterator

from cdclake.catalog import qualified
from cdclake.config import PipelineConfig
from cdclake.errors import task_run_error
from cdclake.lake import (RAW_SCHEMA, REGISTRY_SCHEMA, REGISTRY_TABLE, HourTable, arrow_schema, ddl, plan_splits,
                          read_splits)
from cdclake.normalize.limits import MAX_NESTING_DEPTH, MAX_VALUE_BYTES, check_limits
from cdclake.normalize.rows import batch_records
from cdclake.record import SchemaAwareParser, SchemaEntry
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


#: The registry column types :func:`registry_row` checks (bronze.schema_registry; int is 32-bit).
_ENTRY_TEXT = {"source_format": False, "schema_id": False, "source_schema": True, "source_table": True,
               "definition": False}


def registry_row(entry: SchemaEntry, r) -> tuple:
    """The :data:`cdclake.lake.REGISTRY_SCHEMA` row of ``entry``, found in raw row ``r`` (a raw table row).

    Raises ``TypeError`` or ``ValueError`` when an entry field does not fit its column (text that
    is not a ``str`` or that UTF-8 cannot hold, a ``table_version`` that is not a 32-bit int).
    """
    for name, nullable in _ENTRY_TEXT.items():
        value = getattr(entry, name)
        if value is None and nullable:
            continue
        if not isinstance(value, str):
            raise TypeError(f"schema entry {name} is a {type(value).__name__}, not text")
        value.encode("utf-8")
    version = entry.table_version
    if version is not None and (type(version) is not int or not -2**31 <= version < 2**31):
        raise ValueError(f"schema entry table_version {version!r} is not a 32-bit integer")
    return (entry.source_format, entry.schema_id, version, entry.source_schema, entry.source_table,
            entry.definition, r.kafka_topic, r.kafka_partition, r.kafka_offset, r.landed_hour)


def register_schemas(spark: "SparkSession", cfg: PipelineConfig, window: Window, parsers: dict, raw_table: HourTable,
                     tasks: int, min_rows: int) -> dict:
    """Store the window's table definitions and give schema-aware parsers every stored one.

    For each topic of ``parsers`` (``{topic: parser}``) whose parser is a
    :class:`cdclake.record.SchemaAwareParser` (Qlik Replicate), the metadata messages of
    ``window`` are added to ``bronze.schema_registry`` (keyed by source_format and schema_id; a
    known id is kept as first registered; of one id found twice in the window, the lowest
    topic, partition and offset's), then the parser is replaced by
    ``parser.with_schemas(all entries of its format)``. Returns the new ``{topic: parser}``.

    The files of ``raw_table`` (the raw table as :func:`cdclake.lake.hour_table` loads it) are read
    by Spark tasks as normalize's are (:func:`cdclake.lake.plan_splits` with ``tasks`` and
    ``min_rows``, :func:`window_entries`); only the entries reach the driver. A
    task that fails for a reason that is not a record's (:func:`cdclake.errors.task_run_error`)
    raises that :class:`cdclake.errors.RunError`.
    """
    aware = {t: p for t, p in parsers.items() if isinstance(p, SchemaAwareParser)}
    if not aware:
        return parsers
    splits = plan_splits(cfg, raw_table, window, sorted(aware), tasks, min_rows)
    max_bytes, max_depth = cfg.normalize.max_value_bytes, cfg.normalize.max_nesting_depth
    columns = RAW_SCHEMA.names

    def task(batches):
        for b in batches:
            for i in b.column(0).to_pylist():
                yield from window_entries(aware, read_splits(raw_table, splits[i], columns), max_bytes, max_depth)

    found: dict[tuple, tuple] = {}
    if splits:
        todo = spark.createDataFrame(spark.sparkContext.parallelize([(i,) for i in range(len(splits))],
                                                                    len(splits)), "split int")
        try:
            rows = todo.mapInArrow(task, ddl(REGISTRY_SCHEMA)).collect()
        except Exception as exc:
            stopped = task_run_error(exc)  # a service, a timeout, the runtime: the run fails
            if stopped is None:
                raise
            raise stopped from None
        for row in sorted(map(tuple, rows), key=lambda r: r[6:9]):
            found.setdefault(row[:2], row)
    formats = sorted({f for p in aware.values() for f in schema_formats(p)})
    stored = _stored(spark, cfg, formats)
    known = {(f, e.schema_id) for f, es in stored.items() for e in es}
    if any(k not in known for k in found):  # else the MERGE would insert nothing
        new = spark.createDataFrame([r for k, r in found.items() if k not in known], REGISTRY_SCHEMA)
        new.createOrReplaceTempView("_cdc_new_schemas")
        spark.sql(f"MERGE INTO {qualified(cfg, REGISTRY_TABLE)} t USING _cdc_new_schemas s ON t.source_format = "
                  "s.source_format AND t.schema_id = s.schema_id WHEN NOT MATCHED THEN INSERT *")
        stored = _stored(spark, cfg, formats)
    for fmt, es in stored.items():
        log.info("schema registry: %d table definitions of format %s (%d found in %s)", len(es), fmt,
                 sum(1 for k in found if k[0] == fmt), window)
    return {t: (aware[t].with_schemas([e for f in schema_formats(aware[t]) for e in stored[f]]) if t in aware else p)
            for t, p in parsers.items()}


def _stored(spark: "SparkSession", cfg: PipelineConfig, formats: list[str]) -> dict[str, list[SchemaEntry]]:
    """``{format: [SchemaEntry]}``: the entries ``bronze.schema_registry`` holds for ``formats``."""
    from pyspark.sql import functions as F

    stored: dict[str, list[SchemaEntry]] = {f: [] for f in formats}
    for r in spark.table(qualified(cfg, REGISTRY_TABLE)).where(F.col("source_format").isin(formats)).collect():
        stored[r.source_format].append(SchemaEntry(r.source_format, r.schema_id, r.table_version, r.source_schema,
                                                   r.source_table, r.definition))
    return stored


#: Where a schema entry was found: the raw row's Kafka columns :func:`registry_row` reads.
_Found = namedtuple("_Found", "kafka_topic kafka_partition kafka_offset landed_hour")


def window_entries(parsers: dict, batches: Iterable, max_value_bytes: int = MAX_VALUE_BYTES,
                   max_nesting_depth: int = MAX_NESTING_DEPTH) -> Iterator:
    """The schema entries of raw table Arrow batches (:data:`cdclake.lake.RAW_SCHEMA`, as
    :func:`cdclake.lake.read_splits` reads them), as Arrow batches of
    :data:`cdclake.lake.REGISTRY_SCHEMA` rows (:func:`registry_row`), none for a batch without.

    ``parsers``: ``{topic: SchemaAwareParser}`` of every topic in the batches. A record whose
    value its parser's ``may_hold_schema`` refuses is not decoded (the window's data messages);
    the others are checked against the limits (:func:`check_limits`) and read with
    ``schema_entries``. A record past the limits, or whose extraction raises anything
    (``RecursionError``, ``MemoryError`` ...), or gives an entry that does not fit the registry,
    contributes no entries: its parse then quarantines it.
    """
    import pyarrow as pa

    schema = arrow_schema(REGISTRY_SCHEMA)
    for batch in batches:
        topics, values = batch.column("kafka_topic").to_pylist(), batch.column("value").to_pylist()
        at = [j for j, (t, v) in enumerate(zip(topics, values)) if parsers[t].may_hold_schema(v)]
        if not at:
            continue
        rows = []
        for (topic, partition, offset, _ts, hour), rec in batch_records(batch.take(at)):
            try:
                parser = parsers[topic]
                check_limits(parser.format_name, rec, max_value_bytes, max_nesting_depth)
                found = [registry_row(e, _Found(topic, partition, offset, hour)) for e in parser.schema_entries(rec)]
            except Exception:  # noqa: BLE001  (the record's own parse quarantines it with the reason)
                continue
            rows += found
        if rows:
            yield pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(zip(*rows), schema)], schema=schema)


def schema_formats(parser: SchemaAwareParser) -> tuple[str, ...]:
    """The formats whose stored entries ``parser`` takes: its ``schema_formats`` (``auto``: every
    schema-aware format it may detect), else its own format."""
    return tuple(getattr(parser, "schema_formats", None) or (parser.format_name,))
