"""Stage 2, normalize: parse the landed raw records of a window into canonical bronze rows.

Every raw record ends up in exactly one of three tables (the normalize gate checks the counts):

- ``bronze.changes``: one row per row change (:class:`cdclake.record.ChangeRecord` fields plus
  kafka_topic, kafka_partition, kafka_offset, kafka_timestamp_ms, landed_hour); a multi-row
  record (Canal ``data``) gives several rows with the same Kafka coordinates.
- ``bronze.quarantine``: records no parser could read: kafka coordinates, landed_hour,
  source_format, reason (names format and field), key and value bytes, quarantined_at.
- ``bronze.control_events``: records that are not row changes (DDL, tombstones, heartbeats,
  transaction markers, metadata messages): kafka coordinates, landed_hour, source_format, kind,
  source names, detail.

Formats whose data messages need earlier metadata messages (Qlik Replicate) also keep their table
definitions in ``bronze.schema_registry`` (:func:`register_schemas`), which accumulates across hours.

All three are partitioned by (kafka_topic, hours(landed_hour)); a rerun overwrites the window.
"""
from __future__ import annotations

import logging
from collections import namedtuple
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

from cdclake.catalog import (BRONZE_TABLE, CONTROL_TABLE, QUARANTINE_TABLE, RAW_TABLE, REGISTRY_TABLE, ensure_namespace,
                             qualified)
from cdclake.config import PipelineConfig
from cdclake.land import RAW_SPLIT_BYTES, window_filter
from cdclake.record import OPS, ChangeRecord, ControlRecord, KafkaRecord, ParseError, SchemaEntry, get_parser
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

KAFKA_COLS = "kafka_topic string, kafka_partition int, kafka_offset bigint, kafka_timestamp_ms bigint, landed_hour timestamp"
BRONZE_SCHEMA = (
    "source_format string, source_database string, source_schema string, source_table string, op string, "
    "before map<string,string>, after map<string,string>, primary_key array<string>, "
    "column_types map<string,string>, source_position array<decimal(38,0)>, source_ts_ms bigint, "
    "tx_id string, tx_seq bigint, row_in_record int, " + KAFKA_COLS + ", tx_last boolean, tx_size bigint")
QUARANTINE_SCHEMA = KAFKA_COLS + ", source_format string, reason string, key binary, value binary, quarantined_at timestamp"
CONTROL_SCHEMA = (KAFKA_COLS + ", source_format string, kind string, source_database string, source_schema string, "
                  "source_table string, detail string, tx_id string, tx_end boolean")
_TABLES = ((BRONZE_TABLE, BRONZE_SCHEMA), (QUARANTINE_TABLE, QUARANTINE_SCHEMA), (CONTROL_TABLE, CONTROL_SCHEMA))
REGISTRY_SCHEMA = ("source_format string, schema_id string, table_version int, source_schema string, "
                   "source_table string, definition string, kafka_topic string, kafka_partition int, "
                   "kafka_offset bigint, landed_hour timestamp")


def ensure_tables(spark: "SparkSession", cfg: PipelineConfig) -> None:
    """Create the bronze, quarantine and control tables when missing."""
    ensure_namespace(spark, cfg, "bronze")
    for name, schema in _TABLES:
        spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified(cfg, name)} ({schema}) USING iceberg "
                  "PARTITIONED BY (kafka_topic, hours(landed_hour)) TBLPROPERTIES ('format-version'='2')")
        have = set(spark.table(qualified(cfg, name)).columns)
        for col in schema.split(", "):  # tables made by an earlier version lack newer columns
            col_name, col_type = col.split(" ", 1)
            if col_name not in have:
                spark.sql(f"ALTER TABLE {qualified(cfg, name)} ADD COLUMN {col_name} {col_type}")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {qualified(cfg, REGISTRY_TABLE)} ({REGISTRY_SCHEMA}) USING iceberg "
              "PARTITIONED BY (source_format) TBLPROPERTIES ('format-version'='2')")


def kafka_record(r) -> KafkaRecord:
    """The :class:`KafkaRecord` of a raw table row."""
    return KafkaRecord(r.kafka_topic, r.kafka_partition, r.kafka_offset, r.kafka_timestamp_ms,
                       None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
                       [(h.name, None if h.value is None else bytes(h.value)) for h in (r.headers or [])])


def register_schemas(spark: "SparkSession", cfg: PipelineConfig, raw, parsers: dict) -> dict:
    """Store the window's table definitions and give schema-aware parsers every stored one.

    For each topic whose parser is a :class:`cdclake.record.SchemaAwareParser` (Qlik
    Replicate), the metadata messages of the window are added to ``bronze.schema_registry``
    (keyed by source_format and schema_id; a known id is kept as first registered), then the
    parser is replaced by ``parser.with_schemas(all entries of its format)``. Returns the new
    ``{topic: parser}``.
    """
    aware = {t: p for t, p in parsers.items() if hasattr(p, "schema_entries") and hasattr(p, "with_schemas")}
    if not aware:
        return parsers

    def entries(rows):
        for r in rows:
            for e in aware[r.kafka_topic].schema_entries(kafka_record(r)):
                yield (e.source_format, e.schema_id, e.table_version, e.source_schema, e.source_table, e.definition,
                       r.kafka_topic, r.kafka_partition, r.kafka_offset, r.landed_hour)

    from pyspark.sql import functions as F

    found = spark.createDataFrame(raw.where(F.col("kafka_topic").isin(list(aware))).rdd.mapPartitions(entries),
                                  REGISTRY_SCHEMA)
    found = found.dropDuplicates(["source_format", "schema_id"])
    found.createOrReplaceTempView("_cdc_new_schemas")
    spark.sql(f"MERGE INTO {qualified(cfg, REGISTRY_TABLE)} t USING _cdc_new_schemas s "
              "ON t.source_format = s.source_format AND t.schema_id = s.schema_id WHEN NOT MATCHED THEN INSERT *")
    formats = sorted({p.format_name for p in aware.values()})
    stored: dict[str, list[SchemaEntry]] = {f: [] for f in formats}
    for r in spark.table(qualified(cfg, REGISTRY_TABLE)).where(F.col("source_format").isin(formats)).collect():
        stored[r.source_format].append(SchemaEntry(r.source_format, r.schema_id, r.table_version, r.source_schema,
                                                   r.source_table, r.definition))
    for fmt, es in stored.items():
        log.info("schema registry: %d table definitions of format %s", len(es), fmt)
    return {t: (aware[t].with_schemas(stored[aware[t].format_name]) if t in aware else p) for t, p in parsers.items()}


def check_change(c: ChangeRecord) -> None:
    """Reject a change the silver stage could not apply. Raises :class:`ParseError`."""
    if c.op not in OPS:
        raise ParseError(c.source_format, f"operation {c.op!r} is not one of {OPS}", "op")
    if not c.source_table:
        raise ParseError(c.source_format, "no source table", "table")
    if c.op != "truncate":
        if not c.primary_key:
            raise ParseError(c.source_format, f"no primary key for table {c.source_table!r}", "primary_key")
        image = c.after if c.op != "delete" else (c.before or {})
        missing = [k for k in c.primary_key if image is None or image.get(k) is None]
        if missing:
            raise ParseError(c.source_format, f"primary key column(s) {missing} missing or null in the "
                             f"{'before' if c.op == 'delete' else 'after'} image", "primary_key")


def classify(parser, rows: Iterable) -> Iterator[tuple]:
    """Parse raw rows with one parser; yield ``(kind, row_tuple)`` with kind change/quarantine/control.

    ``rows`` carry the raw table's columns (see :func:`classify_records` for the rest).
    """
    return classify_records(parser, (((r.kafka_topic, r.kafka_partition, r.kafka_offset, r.kafka_timestamp_ms,
                                       r.landed_hour), kafka_record(r)) for r in rows))


def classify_records(parser, records: Iterable[tuple[tuple, KafkaRecord]]) -> Iterator[tuple]:
    """Parse ``(kafka columns, KafkaRecord)`` pairs with one parser; yield ``(kind, row_tuple)``.

    The Kafka columns are (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp_ms,
    landed_hour). Row tuples have the columns of ``_STAGED_SCHEMA`` (kind ``change``),
    :data:`QUARANTINE_SCHEMA` or :data:`CONTROL_SCHEMA`. Never raises for bad input: a parser
    error or any unexpected exception becomes a quarantine row whose reason names the record.
    """
    import datetime as dt

    fmt = parser.format_name
    for kcols, rec in records:
        try:
            result = parser.parse(rec)
            if isinstance(result, ControlRecord):
                yield "control", kcols + (fmt, result.kind, result.source_database, result.source_schema,
                                          result.source_table, result.detail, result.tx_id, result.tx_end)
                continue
            for c in result:
                check_change(c)
            out = [bronze_row(c, kcols) for c in result]
        except ParseError as exc:
            yield "quarantine", kcols + (fmt, str(exc), rec.key, rec.value, dt.datetime.now(dt.timezone.utc))
            continue
        except Exception as exc:  # a parser bug must not crash the run: quarantine with the cause
            yield "quarantine", kcols + (fmt, f"{fmt}: unexpected {type(exc).__name__}: {exc}", rec.key, rec.value,
                                         dt.datetime.now(dt.timezone.utc))
            continue
        if not out:
            yield "control", kcols + (fmt, "empty", None, None, None, "record carried no row change", None, None)
        for row in out:
            yield "change", row


#: How change rows leave the Python parsers: maps as key and value arrays, because PySpark's
#: dict conversion does not keep key order and silver creates columns in the message's order.
_STAGED_SCHEMA = BRONZE_SCHEMA.replace(
    "before map<string,string>, after map<string,string>, ",
    "before_k array<string>, before_v array<string>, after_k array<string>, after_v array<string>, ").replace(
    "column_types map<string,string>, ", "types_k array<string>, types_v array<string>, ")


def _pairs(m: Optional[dict]) -> tuple:
    return (None, None) if m is None else (list(m), list(m.values()))


def bronze_row(c: ChangeRecord, kcols: tuple) -> tuple:
    """A staged bronze row tuple (column order of ``_STAGED_SCHEMA``: maps as key/value arrays, the
    position as a list of ints, which Arrow writes as ``decimal(38,0)`` exactly)."""
    return (c.source_format, c.source_database, c.source_schema, c.source_table, c.op, *_pairs(c.before),
            *_pairs(c.after), list(c.primary_key), *_pairs(c.column_types),
            list(c.source_position), c.source_ts_ms, c.tx_id, c.tx_seq, c.row_in_record) + kcols + (
                c.tx_last, c.tx_size)


def _bronze_frame(staged: "DataFrame") -> "DataFrame":
    """Staged change rows (:data:`_STAGED_SCHEMA`) as :data:`BRONZE_SCHEMA`, maps built in key order."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import _parse_datatype_string

    def as_map(k: str, v: str):
        return F.when(F.col(k).isNotNull(), F.map_from_arrays(k, v))

    maps = {"before": as_map("before_k", "before_v"), "after": as_map("after_k", "after_v"),
            "column_types": F.map_from_arrays("types_k", "types_v")}
    names = _parse_datatype_string(BRONZE_SCHEMA).names
    return staged.select(*[maps[n].alias(n) if n in maps else F.col(n) for n in names])


def _columns(schema: str) -> list[tuple[str, str]]:
    """``[(name, type)]`` of a DDL column list such as :data:`BRONZE_SCHEMA` (commas inside ``<>``
    and ``()`` belong to the type)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(schema + ","):
        depth += ch in "<("
        depth -= ch in ">)"
        if ch == "," and depth == 0:
            name, ctype = schema[start:i].strip().split(" ", 1)
            out.append((name, ctype.strip()))
            start = i + 1
    return out


#: The outputs of :func:`classify` as one wide row: ``_kind`` (change/quarantine/control) and the
#: columns of the staged change, quarantine and control rows (shared names have one type).
_OUTPUTS = {"change": _columns(_STAGED_SCHEMA), "quarantine": _columns(QUARANTINE_SCHEMA),
            "control": _columns(CONTROL_SCHEMA)}
_TAGGED: dict[str, str] = {"_kind": "string"}
for _cols in _OUTPUTS.values():
    for _name, _type in _cols:
        assert _TAGGED.setdefault(_name, _type) == _type, _name
_TAGGED_SCHEMA = ", ".join(f"{n} {t}" for n, t in _TAGGED.items())


#: A raw table row with the attributes :func:`classify` reads (headers: items with ``name`` and ``value``).
RawRow = namedtuple("RawRow", "kafka_topic kafka_partition kafka_offset kafka_timestamp_ms landed_hour key value headers")
#: Where each kind's row tuple puts each column of :data:`_TAGGED` (absent: the kind has no such column).
_SLOTS = {kind: {name: i for i, (name, _) in enumerate(cols)} for kind, cols in _OUTPUTS.items()}


def tagged_arrow_schema():
    """The Arrow schema of :data:`_TAGGED_SCHEMA` (made on the driver: it needs the JVM)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import _parse_datatype_string

    return to_arrow_schema(_parse_datatype_string(_TAGGED_SCHEMA))


def batch_records(batch) -> Iterator[tuple[tuple, KafkaRecord]]:
    """The ``(kafka columns, KafkaRecord)`` pairs (:func:`classify_records`) of an Arrow batch of
    the raw table (``cdclake.land.RAW_SCHEMA``), read column by column."""
    cols = batch.to_pydict()
    topics, parts, offsets, stamps, hours = (cols[n] for n in ("kafka_topic", "kafka_partition", "kafka_offset",
                                                              "kafka_timestamp_ms", "landed_hour"))
    for i, (key, value, headers) in enumerate(zip(cols["key"], cols["value"], cols["headers"])):
        yield ((topics[i], parts[i], offsets[i], stamps[i], hours[i]),
               KafkaRecord(topics[i], parts[i], offsets[i], stamps[i], key, value,
                           [(h["name"], h["value"]) for h in headers] if headers else []))


def tagged_batch(found: dict[str, list[tuple]], schema):
    """One Arrow batch of ``schema`` (:func:`tagged_arrow_schema`) from the row tuples of each kind
    (``{"change": [...], "quarantine": [...], "control": [...]}``), built column by column."""
    import pyarrow as pa

    columns = {kind: list(zip(*rows)) for kind, rows in found.items()}
    arrays = []
    for f in schema:
        values: list = []
        for kind, rows in found.items():
            if f.name == "_kind":
                values += [kind] * len(rows)
            elif f.name in _SLOTS[kind] and rows:
                values += columns[kind][_SLOTS[kind][f.name]]
            else:
                values += [None] * len(rows)
        arrays.append(pa.array(values, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def parse_batches(parsers: dict, schema, batches) -> Iterator:
    """``mapInArrow`` body: raw table Arrow batches in, Arrow batches of ``schema``
    (:func:`tagged_arrow_schema`) out.

    Each record goes through :func:`classify_records` with its topic's parser; the rows cross
    between the JVM and Python as Arrow columns, not pickled rows, and leave grouped by kind.
    Python's cyclic garbage collector is paused while a batch is parsed: the batch's rows are
    many objects without cycles, freed by reference counting, and the collections they would set
    off find nothing to free (they cost a quarter of the parse).
    """
    import gc

    for batch in batches:
        enabled = gc.isenabled()
        gc.disable()
        try:
            by_topic: dict[str, list] = {}
            for item in batch_records(batch):
                by_topic.setdefault(item[0][0], []).append(item)
            found: dict[str, list[tuple]] = {"change": [], "quarantine": [], "control": []}
            for topic, items in by_topic.items():
                for kind, row in classify_records(parsers[topic], items):
                    found[kind].append(row)
            out = tagged_batch(found, schema)
        finally:
            if enabled:
                gc.enable()
        yield out


def normalize(spark: "SparkSession", cfg: PipelineConfig, window: Window) -> dict[str, dict[str, int]]:
    """Parse the window's raw records of the selected topics into bronze, quarantine and control.

    Returns ``{topic: {"raw": n, "changes": rows, "quarantined": n, "control": n}}``.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    topics = list(window.topics or cfg.topics())
    ensure_tables(spark, cfg)
    parsers = {t: get_parser(cfg.source(t).format, cfg.source(t).parser_options()) for t in topics}
    # one task per Parquet row group of the raw table (cdclake.land.RAW_ROW_GROUP_BYTES)
    raw = (spark.read.option("split-size", str(RAW_SPLIT_BYTES)).table(qualified(cfg, RAW_TABLE))
           .where(window_filter(window, topics)))
    parsers = register_schemas(spark, cfg, raw, parsers)

    # A small hour (or one landed before row groups were capped) is one row group, read in one
    # task: spread its records over every core, as the parsers are the stage's main work.
    cores = spark.sparkContext.defaultParallelism
    if raw.rdd.getNumPartitions() < cores:
        raw = raw.repartition(cores)
    arrow_schema = tagged_arrow_schema()
    tagged = raw.mapInArrow(lambda batches: parse_batches(parsers, arrow_schema, batches), _TAGGED_SCHEMA)
    tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)
    kind = F.col("_kind")
    stats = {t: {"raw": 0, "changes": 0, "quarantined": 0, "control": 0} for t in topics}
    try:
        for k, (name, _schema) in zip(("change", "quarantine", "control"), _TABLES):
            part = tagged.where(kind == k).select(*[n for n, _ in _OUTPUTS[k]])
            frame = _bronze_frame(part) if k == "change" else part
            frame.writeTo(qualified(cfg, name)).overwrite(window_filter(window, topics))
        # counted on the parsed frame the writes took their rows from (the gate counts the tables)
        for r in tagged.groupBy("kafka_topic").agg(
                F.countDistinct("kafka_partition", "kafka_offset").alias("raw"),
                *[F.count(F.when(kind == k, 1)).alias(n)
                  for k, n in (("change", "changes"), ("quarantine", "quarantined"), ("control", "control"))]).collect():
            stats[r["kafka_topic"]] = {n: int(r[n]) for n in ("raw", "changes", "quarantined", "control")}
        for t, s in stats.items():
            log.info("normalized topic %s for %s: %d raw records -> %d change rows, %d quarantined, %d control",
                     t, window, s["raw"], s["changes"], s["quarantined"], s["control"])
            if s["quarantined"]:
                for q in (tagged.where((kind == "quarantine") & (F.col("kafka_topic") == t))
                          .select("kafka_partition", "kafka_offset", "reason").limit(5).collect()):
                    log.warning("quarantined %s[%d]@%d: %s", t, q.kafka_partition, q.kafka_offset, q.reason)
    finally:
        tagged.unpersist()
    return stats
