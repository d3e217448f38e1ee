"""``debezium-json``: Debezium change events in JSON, with or without the Kafka Connect schema.

Implements:

- Debezium connector documentation (MySQL, PostgreSQL, Oracle, SQL Server): the change event
  envelope (``before``, ``after``, ``source``, ``op``, ``ts_ms``, ``transaction``), the ``source``
  block of each connector (``file``/``pos``/``row``; ``lsn``/``sequence``/``txId``; ``scn``;
  ``commit_lsn``/``change_lsn``/``event_serial_no``), transaction metadata events, schema change
  events, and the Kafka Connect / Debezium logical types.
- "Lindorm: Debezium Format V2.0": ``source.namespace``, ``"schema": {}``, the column delete (an
  update whose ``after`` omits a column) and HBase tables (row key ``ROW``, Base64 values).
- "Huawei MRS CDL JSON and open-source Debezium JSON" (``message_version`` 2.0): ``unique`` gives
  the primary key, ``message_type`` other than ``"0"`` is a heartbeat, ``LOB_COLUMNS`` ignored.
- Apache Flink's flink-json tests (``debezium-*.txt``) serve as conformance vectors, including
  the PostgreSQL REPLICA IDENTITY DEFAULT case (updates and deletes with ``before: null``).

Options: those of :class:`cdclake.formats._common.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``); ``column_types`` types the columns of messages sent without
a schema (numbers given for a ``timestamp`` column are read as epoch milliseconds).
"""
from __future__ import annotations

import base64
import datetime as dt
import json
from decimal import Decimal
from typing import Any, Callable, Mapping, Optional

from cdclake.formats._common import (
    ABSENT,
    LearningParser,
    SourceOptions,
    coerce_text,
    convert_image,
    epoch_timestamp,
    key_delete_image,
    read_key,
    resolve_primary_key,
    text_converter,
)
from cdclake.positions import as_element, binlog_file_number, optional_int, pg_lsn
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import decimal_precision_scale, normalize_type, to_text

FORMAT = "debezium-json"
OPS = {"c": "insert", "u": "update", "d": "delete", "r": "snapshot", "t": "truncate"}

EPOCH = dt.datetime(1970, 1, 1)
#: PostgreSQL TOAST placeholder (``unavailable.value.placeholder``), as text and as Base64 bytes.
TOAST_PLACEHOLDERS = ("__debezium_unavailable_value", base64.b64encode(b"__debezium_unavailable_value").decode())

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
CONNECT_TYPES = {
    "int8": "smallint", "int16": "smallint", "int32": "int", "int64": "bigint",
    "float32": "float", "float": "float", "float64": "double", "double": "double",
    "boolean": "boolean", "string": "string", "bytes": "binary",
}
#: Epoch-based timestamp logical types → units per second.
TIMESTAMP_UNITS = {
    "org.apache.kafka.connect.data.Timestamp": 1000, "io.debezium.time.Timestamp": 1000,
    "io.debezium.time.MicroTimestamp": 10**6, "io.debezium.time.NanoTimestamp": 10**9,
}
#: Time-of-day logical types → units per second (rendered ``HH:MM:SS.ffffff``, typed string).
TIME_UNITS = {
    "org.apache.kafka.connect.data.Time": 1000, "io.debezium.time.Time": 1000,
    "io.debezium.time.MicroTime": 10**6, "io.debezium.time.NanoTime": 10**9,
}
LOGICAL_TYPES = {
    **{name: "timestamp" for name in TIMESTAMP_UNITS},
    **{name: "string" for name in TIME_UNITS},
    "io.debezium.time.ZonedTimestamp": "timestamp", "io.debezium.time.IsoTimestamp": "timestamp",
    "org.apache.kafka.connect.data.Date": "date", "io.debezium.time.Date": "date", "io.debezium.time.IsoDate": "date",
    VARIABLE_SCALE_DECIMAL: "string",
    "io.debezium.time.ZonedTime": "string", "io.debezium.time.IsoTime": "string",
    "io.debezium.data.Json": "string", "io.debezium.data.Uuid": "string", "io.debezium.data.Enum": "string",
    "io.debezium.data.EnumSet": "string", "io.debezium.data.Xml": "string",
}
_HEARTBEAT_FIELDS = {"ts_ms", "serverName", "HEARTBEAT_IDENTIFIER", "message_type", "message_version"}
_DDL_FIELDS = ("ddl", "tableChanges", "historyRecord")
_DELETE_HINT = "send Kafka keys holding the key columns"
_DELETE_HINT_PG = "set REPLICA IDENTITY FULL on the PostgreSQL table or send Kafka keys"


def connect_type(schema: Mapping[str, Any]) -> str:
    """Canonical type of one Kafka Connect field schema (``{"type", "name", "parameters"}``).

    ``int8``/``int16`` → smallint, ``int32`` → int, ``int64`` → bigint, ``float32`` → float,
    ``float64`` → double, ``bytes`` → binary; Connect ``Decimal`` → ``decimal(p,s)`` (precision
    from ``connect.decimal.precision``, default 38); temporal logical types → date / timestamp /
    string; anything else (struct, array, map, unknown names) → string. Raises ``ValueError``
    when a ``Decimal``'s parameters are not an object or name no valid decimal type.
    """
    name = schema.get("name")
    if name == DECIMAL:
        params = connect_parameters(schema)
        return normalize_type(f"decimal({params.get('connect.decimal.precision', 38)},{params.get('scale', 0)})")
    return LOGICAL_TYPES.get(name) or CONNECT_TYPES.get(schema.get("type"), "string")


def connect_parameters(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``parameters`` of a Connect field schema (``{}`` when absent or null).

    Raises ``ValueError`` when they are not a JSON object.
    """
    params = schema.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ValueError(f"parameters {params!r} are not an object")
    return params


def decode_decimal(value: Any, scale: int) -> Decimal:
    """A Connect ``Decimal``: Base64 of the big-endian two's-complement unscaled integer, times
    10**-scale (``"MDk="``, scale 2 → 123.45). Numbers (``decimal.format=NUMERIC``) pass through.

    Raises ``ValueError`` for text that is not Base64.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Decimal(str(value))
    unscaled = int.from_bytes(base64.b64decode(str(value), validate=True), "big", signed=True)
    return Decimal(unscaled).scaleb(-int(scale))


def time_text(amount: int, per_second: int) -> str:
    """A time of day given in units since midnight as ``HH:MM:SS.ffffff`` (hours not wrapped)."""
    micros = amount * 10**6 // per_second
    hours, rest = divmod(micros, 3600 * 10**6)
    minutes, rest = divmod(rest, 60 * 10**6)
    seconds, micros = divmod(rest, 10**6)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}"


def connect_text(value: Any, schema: Mapping[str, Any]) -> Optional[str]:
    """Canonical text of a JSON value described by a Connect field schema (see :func:`connect_type`).

    Timestamps become UTC ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (``ZonedTimestamp`` converted from its
    offset), dates ``YYYY-MM-DD``, times ``HH:MM:SS.ffffff``, decimals plain digits. Raises
    ``ValueError`` when the value does not match its schema.
    """
    if value is None:
        return None
    name = schema.get("name")
    ctype = connect_type(schema)
    if name == DECIMAL:
        scale = int(connect_parameters(schema).get("scale", 0))
        return coerce_text(format(decode_decimal(value, scale), "f"), ctype)
    if name == VARIABLE_SCALE_DECIMAL and isinstance(value, dict):
        return to_text(decode_decimal(value.get("value"), int(value.get("scale") or 0)))
    if name in TIMESTAMP_UNITS and isinstance(value, int):
        return to_text(epoch_timestamp(value, TIMESTAMP_UNITS[name]))
    if name in TIME_UNITS and isinstance(value, int):
        return time_text(value, TIME_UNITS[name])
    return coerce_text(value, ctype)


_DIRECT_LIMIT = 10**28


def connect_converter(schema: Mapping[str, Any]) -> Callable[[Any], Optional[str]]:
    """:func:`connect_text` for one field schema as a function of the value:
    ``connect_converter(s)(v) == connect_text(v, s)`` for every value, errors included.

    The schema is read once, when the function is made (it must not change afterwards): the
    values a connector sends for it (Base64 text for ``Decimal``, integers for the epoch-based
    temporal types, what :func:`cdclake.formats._common.text_converter` reads directly for the
    others) take a direct path, anything else goes through :func:`connect_text`.
    """
    try:
        name = schema.get("name")
        text = text_converter(connect_type(schema))
        scale = int(connect_parameters(schema).get("scale", 0)) if name == DECIMAL else 0
    except Exception:  # connect_text raises what this schema makes it raise, value by value
        return lambda v: connect_text(v, schema)
    if name == DECIMAL:
        # digits written directly when the column's type keeps the message's scale and the value
        # fits Python's default decimal precision (28 digits), where Decimal.scaleb is exact
        typed = decimal_precision_scale(connect_type(schema))
        direct = typed is not None and typed[1] == scale >= 0
        unit = 10 ** scale if direct else 1  # a scale past the type's (up to 38) never takes the direct path

        def decimal(v: Any) -> Optional[str]:
            if type(v) is str:
                try:
                    unscaled = int.from_bytes(base64.b64decode(v, validate=True), "big", signed=True)
                except ValueError:
                    return connect_text(v, schema)
                if direct and -_DIRECT_LIMIT < unscaled < _DIRECT_LIMIT:
                    if not scale:
                        return str(unscaled)
                    whole, fraction = divmod(abs(unscaled), unit)
                    return f"{'-' if unscaled < 0 else ''}{whole}.{fraction:0{scale}d}"
                return text(format(Decimal(unscaled).scaleb(-scale), "f"))
            return connect_text(v, schema)
        return decimal
    if name in TIMESTAMP_UNITS:
        units = TIMESTAMP_UNITS[name]

        def timestamp(v: Any) -> Optional[str]:
            if type(v) is int:
                try:
                    return (EPOCH + dt.timedelta(microseconds=v * 10**6 // units)).isoformat(sep=" ")
                except (ValueError, TypeError, ArithmeticError):
                    pass
            return connect_text(v, schema)
        return timestamp
    if name in TIME_UNITS:
        units = TIME_UNITS[name]
        return lambda v: time_text(v, units) if type(v) is int else connect_text(v, schema)
    if name == VARIABLE_SCALE_DECIMAL:
        return lambda v: connect_text(v, schema)
    return text


def _is_toast(value: Any) -> bool:
    """Whether ``value`` is PostgreSQL's TOAST placeholder (a column the connector did not send)."""
    return value in TOAST_PLACEHOLDERS or (isinstance(value, list) and TOAST_PLACEHOLDERS[0] in value)


class _TablePlan:
    """What :class:`DebeziumJsonParser` derives from one envelope schema for one table, made once.

    ``col_schemas`` (column → Connect field schema), ``types`` (column → canonical type: the
    schema's, then the configured ``column_types``), ``key_override`` (the configured key or
    None) and :meth:`convert` (column, JSON value → canonical text or :data:`ABSENT`), with one
    converter per column, made on first use.
    """

    def __init__(self, options: SourceOptions, schema: Optional[dict], database: Optional[str],
                 schema_name: Optional[str], table: str):
        self.col_schemas = _image_schemas(schema)
        self.types = {col: connect_type(s) for col, s in self.col_schemas.items()}
        for col, ctype in options.column_types(database, schema_name, table).items():
            self.types.setdefault(col, ctype)
        self.key_override = options.key_override(database, schema_name, table)
        self._converters: dict[str, Callable[[Any], Any]] = {}

    def convert(self, col: str, value: Any) -> Any:
        """Canonical text of ``value`` in column ``col``, or :data:`ABSENT` for the TOAST
        placeholder (``ValueError`` when it does not fit)."""
        conv = self._converters.get(col)
        if conv is None:
            if col in self.col_schemas:
                conv = connect_converter(self.col_schemas[col])
            elif col in self.types:
                conv = text_converter(self.types[col])
            else:
                conv = to_text
            self._converters[col] = conv
        # _is_toast, inline: this runs for every value
        if value in TOAST_PLACEHOLDERS or (isinstance(value, list) and TOAST_PLACEHOLDERS[0] in value):
            return ABSENT
        return conv(value)


def _image_schemas(schema: Optional[dict]) -> dict[str, dict]:
    """Column → field schema from an envelope schema's ``before``/``after`` structs (union)."""
    out: dict[str, dict] = {}
    for env_field in (schema or {}).get("fields") or []:
        if isinstance(env_field, dict) and env_field.get("field") in ("before", "after"):
            for col in env_field.get("fields") or []:
                if isinstance(col, dict) and col.get("field") is not None:
                    out.setdefault(col["field"], col)
    return out


def _key_schemas(schema: Optional[dict]) -> dict[str, dict]:
    """Column → field schema of a Kafka key's struct schema."""
    return {f["field"]: f for f in (schema or {}).get("fields") or [] if isinstance(f, dict) and "field" in f}


def _sqlserver_lsn(value: Any) -> int:
    """A SQL Server LSN ``"00000027:00000758:0003"`` as the integer of its concatenated hex digits."""
    if value is None:
        return 0
    return int(str(value).replace(":", ""), 16)


def _element(value: Any, what: str) -> int:
    return 0 if value is None else as_element(value, what)


def source_position(source: Mapping[str, Any], payload: Mapping[str, Any]) -> tuple[int, ...]:
    """The change's position (see :mod:`cdclake.positions`) from its ``source`` block.

    - MySQL (``file``, ``pos``, ``row``): ``(binlog file number, pos, row)``; an empty file name
      (snapshots of some embedded engines) counts as 0.
    - PostgreSQL: ``source.sequence`` (JSON text ``["<last commit lsn>|null", "<lsn>"]``) gives
      ``(commit lsn or 0, lsn)``, else ``(lsn, lsn)``.
    - SQL Server: ``(commit_lsn, change_lsn, event_serial_no)``, LSNs read as hex integers.
    - Oracle: ``(scn,)``.
    - Lindorm and others: ``(source.ts_ms,)``, else ``(payload ts_ms,)``, else ``()``.

    Raises :class:`ParseError` naming the ``source`` field that cannot be read.
    """
    connector = str(source.get("connector") or "").lower()
    where = "source"
    try:
        if connector in ("sqlserver", "db2") or "change_lsn" in source or "commit_lsn" in source:
            where = "source.commit_lsn"
            commit = _sqlserver_lsn(source.get("commit_lsn"))
            where = "source.change_lsn"
            change = _sqlserver_lsn(source.get("change_lsn"))
            where = "source.event_serial_no"
            return commit, change, _element(source.get("event_serial_no"), where)
        if connector == "mysql" or "file" in source:
            where = "source.file"
            number = binlog_file_number(source["file"]) if source.get("file") else 0
            where = "source.pos"
            pos = _element(source.get("pos"), where)
            where = "source.row"
            return number, pos, _element(source.get("row"), where)
        if connector in ("postgresql", "postgres") or "lsn" in source:
            where = "source.sequence"
            seq = source.get("sequence")
            if seq:
                items = json.loads(seq) if isinstance(seq, str) else seq
                if not isinstance(items, list) or len(items) != 2:
                    raise ValueError(f"sequence {seq!r} is not a two-element array")
                lsn = items[1] if items[1] is not None else source.get("lsn")
                return (pg_lsn(items[0]) if items[0] is not None else 0), (pg_lsn(lsn) if lsn is not None else 0)
            where = "source.lsn"
            lsn = pg_lsn(source["lsn"]) if source.get("lsn") is not None else 0
            return lsn, lsn
        if connector == "oracle" or "scn" in source:
            where = "source.scn"
            return (_element(source.get("scn"), where),)
        where = "source.ts_ms"
        ts = source.get("ts_ms") if source.get("ts_ms") is not None else payload.get("ts_ms")
        return (as_element(ts, "ts_ms"),) if ts is not None else ()
    except (ValueError, TypeError) as exc:
        raise ParseError(FORMAT, f"cannot read position: {exc}", where) from None


def _control(payload: Mapping[str, Any], source: Mapping[str, Any]) -> Optional[ControlRecord]:
    """The control record a payload stands for (heartbeat, transaction, DDL), or None."""
    names = dict(source_database=source.get("db"), source_schema=source.get("schema"), source_table=source.get("table"))
    message_type = payload.get("message_type")
    if message_type is not None and str(message_type) != "0":
        return ControlRecord("heartbeat", FORMAT, **names, detail=f"message_type {message_type}")
    if "op" in payload:
        return None
    if payload.get("status") in ("BEGIN", "END"):
        return ControlRecord("transaction", FORMAT, **names, detail=f"{payload['status']} {payload.get('id')}")
    if any(k in payload for k in _DDL_FIELDS):
        detail = payload.get("ddl") or payload.get("historyRecord") or payload.get("tableChanges")
        names["source_database"] = payload.get("databaseName") or names["source_database"]
        names["source_schema"] = payload.get("schemaName") or names["source_schema"]
        return ControlRecord("ddl", FORMAT, **names, detail=detail if isinstance(detail, str) else to_text(detail))
    if payload and set(payload) <= _HEARTBEAT_FIELDS:
        return ControlRecord("heartbeat", FORMAT, **names)
    return None


class DebeziumJsonParser(LearningParser):
    """Parser of ``debezium-json`` records: ``DebeziumJsonParser(options).parse(KafkaRecord)``.

    Returns one :class:`ChangeRecord` in a list, or a :class:`ControlRecord` for a tombstone
    (value None or empty), a heartbeat, a transaction BEGIN/END event, a schema change event or
    an ``op: "m"`` message (``metadata``). Raises :class:`ParseError` for unreadable JSON, a
    missing or unknown ``op`` (field ``op``), a missing ``source.table``, a value that does not
    fit its schema, no resolvable primary key (field ``primary_key``), or a delete whose key
    cannot be found in its ``before`` image nor in the Kafka key (field ``before``).
    """

    format_name = FORMAT

    def parse(self, record: KafkaRecord) -> ParseResult:
        """Parse one Kafka record (see the class docstring for results and errors)."""
        if not record.value:
            return ControlRecord("tombstone", FORMAT, detail=_key_detail(record.key))
        payload, schema, envelope = self._reader.load(record.value)
        if payload is None:
            return ControlRecord("tombstone", FORMAT, detail=_key_detail(record.key))
        if not isinstance(payload, dict):
            raise ParseError(FORMAT, f"payload is a JSON {type(payload).__name__}, not an object", "payload")
        source = payload.get("source")
        source = source if isinstance(source, dict) else {}
        control = _control(payload, source)
        if control is not None:
            return control
        op = payload.get("op")
        if op is None:
            if str(payload.get("message_version")) == "1.0":
                raise ParseError(FORMAT, "CDL JSON (message_version 1.0) is not Debezium JSON; "
                                 "configure the CDL task for message_version 2.0", "message_version")
            raise ParseError(FORMAT, "missing operation", "op")
        if op == "m":
            return ControlRecord("metadata", FORMAT, source.get("db"), source.get("schema"), source.get("table"))
        if not isinstance(op, str) or op not in OPS:
            raise ParseError(FORMAT, f"unknown operation {op!r} (expected one of c, u, d, r, t, m)", "op")
        return [self._change(record, payload, schema, envelope, source, OPS[op])]

    def _change(
        self, record: KafkaRecord, payload: dict, schema: Optional[dict], envelope: Optional[int], source: dict,
        kind: str
    ) -> ChangeRecord:
        table = source.get("table")
        if not isinstance(table, str) or not table:
            raise ParseError(FORMAT, "missing table name", "source.table")
        database = source.get("db")
        lindorm = "namespace" in source and "connector" not in source
        schema_name = source.get("namespace") if lindorm else source.get("schema")
        for name, where in ((database, "source.db"), (schema_name, "source.namespace" if lindorm else "source.schema")):
            if name is not None and not isinstance(name, str):
                raise ParseError(FORMAT, f"name {name!r} is not text", where)
        raw_before, raw_after = payload.get("before"), payload.get("after")
        hbase = lindorm and any(isinstance(img, dict) and "ROW" in img for img in (raw_before, raw_after))

        # kept per envelope and table (messages without a schema: per table)
        try:
            plan = self.kept(None if envelope is None and schema is not None else (envelope, database, schema_name, table),
                             lambda: _TablePlan(self.options, schema, database, schema_name, table))
        except (TypeError, AttributeError, ValueError) as exc:  # fields, names or parameters of the wrong JSON type
            raise ParseError(FORMAT, f"not a Kafka Connect struct schema ({type(exc).__name__}: {exc})",
                             "schema") from None
        col_schemas, types, convert = plan.col_schemas, plan.types, plan.convert
        if hbase:
            types = {col: "binary" for img in (raw_before, raw_after) if isinstance(img, dict) for col in img}
            binary = text_converter("binary")
            convert = lambda col, value: ABSENT if _is_toast(value) else binary(value)  # noqa: E731  (HBase: all bytes)

        before = convert_image(FORMAT, raw_before, convert, "before")
        after = convert_image(FORMAT, raw_after, convert, "after")
        if lindorm and kind == "update" and isinstance(raw_before, dict) and isinstance(raw_after, dict):
            after.update({col: None for col in raw_before if col not in raw_after})
        if kind in ("insert", "snapshot", "update") and after is None:
            raise ParseError(FORMAT, f"{kind} has no after image", "after")

        key = read_key(record.key, self._key_reader)
        unique = payload.get("unique")
        carried = ["ROW"] if hbase else (list(unique) if isinstance(unique, dict) and unique else None)
        primary_key = resolve_primary_key(
            FORMAT, plan.key_override, carried,
            list(key[0]) if key else None, required=kind != "truncate")
        if kind == "delete":
            before = key_delete_image(FORMAT, primary_key, before, _key_text(key, col_schemas, types),
                                      "before", _DELETE_HINT_PG if "lsn" in source else _DELETE_HINT)
        if kind == "truncate":
            before = after = None

        transaction = payload.get("transaction") if isinstance(payload.get("transaction"), dict) else {}
        tx_ids = (source.get("txId"), transaction.get("id"), source.get("gtid"))
        tx_id = next((v for v in tx_ids if v is not None), None)
        ts = source.get("ts_ms") if source.get("ts_ms") is not None else payload.get("ts_ms")
        return ChangeRecord(
            source_format=FORMAT,
            source_database=database,
            source_schema=schema_name,
            source_table=table,
            op=kind,
            before=before,
            after=after,
            primary_key=primary_key,
            column_types=dict(types),
            source_position=source_position(source, payload),
            source_ts_ms=_int_field(ts, "source.ts_ms"),
            tx_id=None if tx_id is None else str(tx_id),
            tx_seq=_int_field(transaction.get("total_order"), "transaction.total_order"),
        )


def _key_text(key: Optional[tuple[dict, Optional[dict]]], col_schemas: dict, types: dict) -> Optional[dict]:
    """Canonical text of the Kafka key's values, typed by the key's own schema, else the value's."""
    if not key:
        return None
    values, schema = key
    key_schemas = _key_schemas(schema) or col_schemas
    out = {}
    for col, value in values.items():
        try:
            if col in key_schemas:
                out[col] = connect_text(value, key_schemas[col])
            else:
                out[col] = coerce_text(value, types[col]) if col in types else to_text(value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ParseError(FORMAT, f"cannot read Kafka key value {value!r}: {exc}", f"key.{col}") from None
    return out


def _int_field(value: Any, field_name: str) -> Optional[int]:
    """An optional non-negative integer field; :class:`ParseError` naming the field otherwise."""
    try:
        return optional_int(value)
    except ValueError as exc:
        raise ParseError(FORMAT, str(exc), field_name) from None


def _key_detail(key: Optional[bytes]) -> Optional[str]:
    """The Kafka key as text, for the detail of a tombstone."""
    return key.decode("utf-8", errors="replace") if key else None
