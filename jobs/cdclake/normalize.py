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

One bad record never stops a run: whatever fails for one record (a parser error, an exception of
any type while its key or value is decoded, its change checked, its bronze row built or its row
converted to Arrow, or its schema registry entries extracted) puts that record in quarantine with
a reason naming the format and the field, and the rest of the hour is applied. Records past the
limits of ``normalize`` in the pipeline file (:class:`cdclake.config.NormalizeConfig`: a value or
key larger than ``max_value_bytes``, a JSON value or key nested deeper than
``max_nesting_depth``) are quarantined with the limit as their reason, before they are parsed.
"""
from __future__ import annotations

import logging
import re
from collections import namedtuple
from itertools import accumulate
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

from cdclake.catalog import (BRONZE_TABLE, CONTROL_TABLE, QUARANTINE_TABLE, RAW_TABLE, REGISTRY_TABLE, ensure_namespace,
                             qualified)
from cdclake.config import NormalizeConfig, PipelineConfig
from cdclake.faults import kill_point
from cdclake.land import RAW_SPLIT_BYTES, window_filter
from cdclake.formats import get_parser
from cdclake.record import OPS, ChangeRecord, ControlRecord, KafkaRecord, ParseError, SchemaAwareParser, SchemaEntry
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


#: The default limits on one raw record (``normalize`` of :class:`cdclake.config.PipelineConfig`).
MAX_VALUE_BYTES = NormalizeConfig().max_value_bytes
MAX_NESTING_DEPTH = NormalizeConfig().max_nesting_depth
#: Quarantine reasons are cut to this many characters (a parser may quote a huge value).
MAX_REASON_CHARS = 2000

_ESCAPE_RE = re.compile(rb"\\.", re.DOTALL)
#: Every byte but quotes and brackets (deleted first), every byte but brackets (deleted last).
_NOT_QUOTE_OR_BRACKET = bytes(b for b in range(256) if b not in b'"{}[]')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"{}[]")
#: Opening brackets to +1, closing ones to -1 (as signed bytes).
_DEPTH_STEPS = bytes.maketrans(b"{[}]", b"\x01\x01\xff\xff")
#: Every byte but opening brackets: ``len(data.translate(None, _NOT_OPENING))`` counts them in one pass.
_NOT_OPENING = bytes(b for b in range(256) if b not in b"{[")


def json_nesting_depth(data: bytes) -> int:
    """The deepest nesting of objects and arrays in the JSON text ``data`` (UTF-8 bytes).

    A scalar is 0 deep, ``{}`` and ``[1]`` 1, ``{"a": [[]]}`` 3. Brackets inside strings do not
    count (backslash escapes honoured; a string left open runs to the end). Bytes that are not
    JSON get the depth of their brackets outside strings (the highest running count of opening
    minus closing brackets). Never raises; runs in C but for one step per bracket.
    """
    if b"\\" in data:
        data = _ESCAPE_RE.sub(b"", data)  # escapes are inside strings; none of them ends one
    data = data.translate(None, _NOT_QUOTE_OR_BRACKET)
    if b'"' in data:
        # quotes now alternate open, close: dropping two adjacent ones keeps every other byte
        # inside or outside its string, and what lies between the pairs left is inside
        data = data.replace(b'""', b"")
        if b'"' in data:
            data = b"".join(data.split(b'"')[::2])
    steps = memoryview(data.translate(_DEPTH_STEPS, _NOT_BRACKET)).cast("b")
    return max(0, max(accumulate(steps), default=0))


_ONE_KIND = bytes.maketrans(b"[]", b"{}")


def json_deeper_than(data: bytes, limit: int) -> bool:
    """Whether the JSON text ``data`` is nested deeper than ``limit`` (``json_nesting_depth(data) >
    limit``), most documents decided without a step per bracket.

    Depth is at most the number of opening brackets; and, when no string holds a bracket, at most
    that number less the openers right after a closer (``},{``: a sibling never goes deeper than
    the one before it), which keeps wide, shallow documents (a Connect schema's fields) off the
    exact scan. Exact for JSON; for bytes that are not JSON (which no parser reads) it may answer
    False where :func:`json_nesting_depth` is past the limit. Never raises.
    """
    if len(data.translate(None, _NOT_OPENING)) <= limit:
        return False
    text = _ESCAPE_RE.sub(b"", data) if b"\\" in data else data
    kept = text.translate(None, _NOT_QUOTE_OR_BRACKET)
    if 2 * kept.count(b'""') == kept.count(b'"'):  # every run of quotes even: no string holds a bracket
        brackets = kept.translate(_ONE_KIND, b'"')
        if brackets.count(b"{") - brackets.count(b"}{") <= limit:
            return False
    return json_nesting_depth(text) > limit


def check_limits(fmt: str, record: KafkaRecord, max_value_bytes: int = MAX_VALUE_BYTES,
                 max_nesting_depth: int = MAX_NESTING_DEPTH) -> None:
    """Raise :class:`ParseError` (field ``value`` or ``key``) when ``record`` passes a limit.

    ``max_value_bytes`` bounds the length of the value and of the key, in bytes;
    ``max_nesting_depth`` the nesting of objects and arrays (:func:`json_deeper_than`) of the
    value and the key of formats whose name ends in ``-json``. The reason names the limit, e.g.
    ``debezium-json: field 'value': nested deeper than 64 levels (normalize.max_nesting_depth)``.
    Costs one pass counting ``{`` and ``[`` on a value that has no more of them than the depth limit.
    """
    is_json = fmt.endswith("-json")
    for name, data in (("value", record.value), ("key", record.key)):
        if data is None:
            continue
        if len(data) > max_value_bytes:
            raise ParseError(fmt, f"{len(data)} bytes, more than the limit of {max_value_bytes} bytes "
                                  "(normalize.max_value_bytes)", name)
        if is_json and json_deeper_than(data, max_nesting_depth):
            raise ParseError(fmt, f"nested deeper than {max_nesting_depth} levels (normalize.max_nesting_depth)",
                             name)


def quarantine_reason(text: str) -> str:
    """``text`` as a quarantine reason: at most :data:`MAX_REASON_CHARS` characters (the cut
    is said), with characters UTF-8 cannot hold (lone surrogates) as backslash escapes."""
    if len(text) > MAX_REASON_CHARS:
        text = f"{text[:MAX_REASON_CHARS]}... ({len(text) - MAX_REASON_CHARS} more characters)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _exception_text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001  (an exception whose message cannot be made)
        return repr(type(exc))


#: The registry column types :func:`registry_row` checks (bronze.schema_registry; int is 32-bit).
_ENTRY_TEXT = {"source_format": False, "schema_id": False, "source_schema": True, "source_table": True,
               "definition": False}


def registry_row(entry: SchemaEntry, r) -> tuple:
    """The :data:`REGISTRY_SCHEMA` row of ``entry``, found in raw row ``r`` (a raw table row).

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
    from cdclake.names import check_names

    check_names(c)  # names with a path separator, '.'/'..' or control characters are refused
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


def classify_records(parser, records: Iterable[tuple[tuple, KafkaRecord]], max_value_bytes: int = MAX_VALUE_BYTES,
                     max_nesting_depth: int = MAX_NESTING_DEPTH) -> Iterator[tuple]:
    """Parse ``(kafka columns, KafkaRecord)`` pairs with one parser; yield ``(kind, row_tuple)``.

    The Kafka columns are (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp_ms,
    landed_hour). Row tuples have the columns of ``_STAGED_SCHEMA`` (kind ``change``),
    :data:`QUARANTINE_SCHEMA` or :data:`CONTROL_SCHEMA`; each record gives one quarantine row,
    one control row, or one or more change rows. Never raises for bad input: a record past the
    limits (``max_value_bytes``, ``max_nesting_depth``: :func:`check_limits`), a parser error, or
    any exception while the record is parsed, its changes checked (:func:`check_change`) or its
    bronze rows built, becomes a quarantine row whose reason starts with the format's name and
    names the field (``value`` for an unexpected exception of the parser; the first field of a
    wrong type for one after it).
    """
    import datetime as dt

    fmt = parser.format_name
    is_json = fmt.endswith("-json")
    for kcols, rec in records:
        result = _UNPARSED
        try:
            value, key = rec.value, rec.key
            if ((value is not None and (len(value) > max_value_bytes or is_json
                                        and len(value.translate(None, _NOT_OPENING)) > max_nesting_depth))
                    or (key is not None and (len(key) > max_value_bytes or is_json
                                             and len(key.translate(None, _NOT_OPENING)) > max_nesting_depth))):
                check_limits(fmt, rec, max_value_bytes, max_nesting_depth)  # the exact check, by its reason
            result = parser.parse(rec)
            if isinstance(result, ControlRecord):
                control = kcols + (fmt, result.kind, result.source_database, result.source_schema,
                                   result.source_table, result.detail, result.tx_id, result.tx_end)
            else:
                control = None
                for c in result:
                    check_change(c)
                out = [bronze_row(c, kcols) for c in result]
        except ParseError as exc:
            yield "quarantine", kcols + (fmt, quarantine_reason(str(exc)), rec.key, rec.value,
                                         dt.datetime.now(dt.timezone.utc))
            continue
        except Exception as exc:  # a parser bug must not crash the run: quarantine with the cause
            where = "value" if result is _UNPARSED else _change_field(result)
            reason = f"{fmt}: field '{where}': unexpected {type(exc).__name__}: {_exception_text(exc)}"
            yield "quarantine", kcols + (fmt, quarantine_reason(reason), rec.key, rec.value,
                                         dt.datetime.now(dt.timezone.utc))
            continue
        if control is not None:
            yield "control", control
            continue
        if not out:
            yield "control", kcols + (fmt, "empty", None, None, None, "record carried no row change", None, None)
        for row in out:
            yield "change", row


_UNPARSED = object()
#: The Python types of the :class:`ChangeRecord` fields that bronze stores.
_CHANGE_TYPES = {"source_format": str, "source_database": (str, type(None)), "source_schema": (str, type(None)),
                 "source_table": str, "op": str, "before": (dict, type(None)), "after": (dict, type(None)),
                 "primary_key": (list, tuple), "column_types": dict, "source_position": (list, tuple),
                 "source_ts_ms": (int, type(None)), "tx_id": (str, type(None)), "tx_seq": (int, type(None)),
                 "row_in_record": int, "tx_last": (bool, type(None)), "tx_size": (int, type(None))}


def _change_field(result) -> str:
    """The first field of a wrong type in a parser's ``result`` (``value`` when none is)."""
    try:
        for c in result:
            if not isinstance(c, ChangeRecord):
                return "value"
            for name, types in _CHANGE_TYPES.items():
                if not isinstance(getattr(c, name), types):
                    return name
    except Exception:  # noqa: BLE001  (not iterable: the parser's result itself is wrong)
        pass
    return "value"


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


#: The bronze column of each staged column named otherwise.
_BRONZE_COLUMN = {"before_k": "before", "before_v": "before", "after_k": "after", "after_v": "after",
                  "types_k": "column_types", "types_v": "column_types"}


def writable_rows(found: dict[str, list[tuple]], schema, parsers: dict, items_by_topic: dict) -> dict[str, list[tuple]]:
    """``found`` (as :func:`tagged_batch` takes it) without the records one of whose change or
    control rows has a value that does not convert to its column of ``schema``: each such record
    gives one quarantine row instead (and none of its other rows), whose reason names the format
    and the bronze column, e.g. ``debezium-json: field 'after': cannot be written as
    list<element: string> (UnicodeEncodeError: ...)``.

    ``parsers`` is ``{topic: parser}``; ``items_by_topic`` ``{topic: [(kafka columns,
    KafkaRecord)]}``, the records the rows came from (a record is known by topic, partition and
    offset). Converts column by column, and value by value only in the columns that fail. Never
    raises for a value; returns ``found`` itself when every value converts.
    """
    import datetime as dt

    import pyarrow as pa

    types = {f.name: f.type for f in schema}
    bad: dict[tuple, str] = {}
    for kind in ("change", "control"):
        rows, slots = found[kind], _SLOTS[kind]
        where = (slots["kafka_topic"], slots["kafka_partition"], slots["kafka_offset"])
        for name, i in slots.items():
            try:
                pa.array([r[i] for r in rows], type=types[name])
                continue
            except Exception:  # noqa: BLE001  (find the values that fail)
                pass
            for r in rows:
                try:
                    pa.array([r[i]], type=types[name])
                except Exception as exc:  # noqa: BLE001
                    record = tuple(r[j] for j in where)
                    if record not in bad:
                        bad[record] = quarantine_reason(
                            f"{parsers[record[0]].format_name}: field '{_BRONZE_COLUMN.get(name, name)}': cannot be "
                            f"written as {types[name]} ({type(exc).__name__}: {_exception_text(exc)})")
    if not bad:
        return found
    out: dict[str, list[tuple]] = {}
    for kind, rows in found.items():
        slots = _SLOTS[kind]
        t, p, o = slots["kafka_topic"], slots["kafka_partition"], slots["kafka_offset"]
        out[kind] = rows if kind == "quarantine" else [r for r in rows if (r[t], r[p], r[o]) not in bad]
    out["quarantine"] = list(out["quarantine"])
    now = dt.datetime.now(dt.timezone.utc)
    for topic, items in items_by_topic.items():
        fmt = parsers[topic].format_name
        for kcols, rec in items:
            reason = bad.get(kcols[:3])
            if reason is not None:
                out["quarantine"].append(kcols + (fmt, reason, rec.key, rec.value, now))
    return out


def parse_batches(parsers: dict, schema, batches, max_value_bytes: int = MAX_VALUE_BYTES,
                  max_nesting_depth: int = MAX_NESTING_DEPTH) -> Iterator:
    """``mapInArrow`` body: raw table Arrow batches in, Arrow batches of ``schema``
    (:func:`tagged_arrow_schema`) out.

    Each record goes through :func:`classify_records` with its topic's parser and the limits
    ``max_value_bytes`` and ``max_nesting_depth``; the rows cross
    between the JVM and Python as Arrow columns, not pickled rows, and leave grouped by kind.
    When a value of an unexpected type (a parser's bug) or one Arrow cannot hold (a lone
    surrogate in a string) fails the batch, the records whose rows do not convert are
    quarantined instead (:func:`writable_rows`) and the rest of the batch is kept.
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
                for kind, row in classify_records(parsers[topic], items, max_value_bytes, max_nesting_depth):
                    found[kind].append(row)
            try:
                out = tagged_batch(found, schema)
            except Exception:  # noqa: BLE001  (one record's value fails its whole column)
                out = tagged_batch(writable_rows(found, schema, parsers, by_topic), schema)
        finally:
            if enabled:
                gc.enable()
        yield out


def normalize(spark: "SparkSession", cfg: PipelineConfig, window: Window) -> dict[str, dict[str, int]]:
    """Parse the window's raw records of the selected topics into bronze, quarantine and control.

    Records past the limits of ``cfg.normalize`` (``max_value_bytes``, ``max_nesting_depth``) and
    records that fail in any way are quarantined one by one (see the module docstring).
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
    max_bytes, max_depth = cfg.normalize.max_value_bytes, cfg.normalize.max_nesting_depth
    tagged = raw.mapInArrow(lambda batches: parse_batches(parsers, arrow_schema, batches, max_bytes, max_depth),
                            _TAGGED_SCHEMA)
    tagged = tagged.persist(StorageLevel.MEMORY_AND_DISK)
    kind = F.col("_kind")
    stats = {t: {"raw": 0, "changes": 0, "quarantined": 0, "control": 0} for t in topics}
    try:
        for k, (name, _schema) in zip(("change", "quarantine", "control"), _TABLES):
            part = tagged.where(kind == k).select(*[n for n, _ in _OUTPUTS[k]])
            frame = _bronze_frame(part) if k == "change" else part
            frame.writeTo(qualified(cfg, name)).overwrite(window_filter(window, topics))
            if k == "change":
                kill_point("normalize.bronze_written")
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
