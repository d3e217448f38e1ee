"""The schema registry: table definitions from metadata messages, kept across hours (Qlik Replicate).

Formats whose data messages need earlier metadata messages keep their table definitions in
``bronze.schema_registry`` (:data:`cdclake.lake.REGISTRY_SCHEMA`), which accumulates across hours:
:func:`register_schemas` adds a window's definitions and hands the parsers every stored one.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cdclake.catalog import qualified
from cdclake.config import PipelineConfig
from cdclake.lake import REGISTRY_SCHEMA, REGISTRY_TABLE
from cdclake.normalize.limits import check_limits
from cdclake.normalize.rows import kafka_record
from cdclake.record import SchemaAwareParser, SchemaEntry

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


def register_schemas(spark: "SparkSession", cfg: PipelineConfig, raw, parsers: dict) -> dict:
    """Store the window's table definitions and give schema-aware parsers every stored one.

    For each topic whose parser is a :class:`cdclake.record.SchemaAwareParser` (Qlik
    Replicate), the metadata messages of the window are added to ``bronze.schema_registry``
    (keyed by source_format and schema_id; a known id is kept as first registered), then the
    parser is replaced by ``parser.with_schemas(all entries of its format)``. Returns the new
    ``{topic: parser}``.

    A record past the limits of ``cfg.normalize`` (:func:`check_limits`), or whose extraction
    raises anything (``RecursionError``, ``MemoryError`` ...), or gives an entry that does not fit
    the registry (:func:`registry_row`), contributes no entries: its parse then quarantines it.
    """
    aware = {t: p for t, p in parsers.items() if isinstance(p, SchemaAwareParser)}
    if not aware:
        return parsers
    max_bytes, max_depth = cfg.normalize.max_value_bytes, cfg.normalize.max_nesting_depth

    def entries(rows):
        for r in rows:
            try:
                parser, rec = aware[r.kafka_topic], kafka_record(r)
                check_limits(parser.format_name, rec, max_bytes, max_depth)
                found = [registry_row(e, r) for e in parser.schema_entries(rec)]
            except Exception:  # noqa: BLE001  (the record's own parse quarantines it with the reason)
                continue
            yield from found

    from pyspark.sql import functions as F

    found = spark.createDataFrame(raw.where(F.col("kafka_topic").isin(list(aware))).rdd.mapPartitions(entries),
                                  REGISTRY_SCHEMA)
    found = found.dropDuplicates(["source_format", "schema_id"])
    found.createOrReplaceTempView("_cdc_new_schemas")
    spark.sql(f"MERGE INTO {qualified(cfg, REGISTRY_TABLE)} t USING _cdc_new_schemas s "
              "ON t.source_format = s.source_format AND t.schema_id = s.schema_id WHEN NOT MATCHED THEN INSERT *")
    formats = sorted({f for p in aware.values() for f in schema_formats(p)})
    stored: dict[str, list[SchemaEntry]] = {f: [] for f in formats}
    for r in spark.table(qualified(cfg, REGISTRY_TABLE)).where(F.col("source_format").isin(formats)).collect():
        stored[r.source_format].append(SchemaEntry(r.source_format, r.schema_id, r.table_version, r.source_schema,
                                                   r.source_table, r.definition))
    for fmt, es in stored.items():
        log.info("schema registry: %d table definitions of format %s", len(es), fmt)
    return {t: (aware[t].with_schemas([e for f in schema_formats(aware[t]) for e in stored[f]]) if t in aware else p)
            for t, p in parsers.items()}


def schema_formats(parser: SchemaAwareParser) -> tuple[str, ...]:
    """The formats whose stored entries ``parser`` takes: its ``schema_formats`` (``auto``: every
    schema-aware format it may detect), else its own format."""
    return tuple(getattr(parser, "schema_formats", None) or (parser.format_name,))
