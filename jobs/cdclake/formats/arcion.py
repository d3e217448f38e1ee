"""``arcion-json``: Arcion Replicant change events for a Kafka target in its JSON CDC format.

Implements "JSON CDC format for Kafka" (Arcion Replicant documentation, *Change data capture
format* → *JSON CDC format*; Applier ``replication-format: JSON``):

- **Message** (section *DML message structure*): every message has a Kafka key and a value, each
  a Kafka Connect JSON document ``{"schema": ..., "payload": ...}``.
- **Key** (items 1 and 3): a struct of the primary-key (else unique-key, else row-identifier)
  columns, ``{"schema": {"type": "struct", "name": "<connector>.<db>.<table>.Key", "fields":
  [...]}, "payload": {col: value}}``. Its columns, in the key's order, are the change's primary
  key. A table without such a key gets a **null key**: then the source must configure
  ``primary_key``/``primary_keys``, else the record is a :class:`ParseError` (field
  ``primary_key``). The earlier edition of the page used the string ``"default"`` instead of
  null for such keys and for tombstone values; both spellings are read the same way.
- **Value** (section *Examples*): ``payload`` holds ``before``, ``after``, ``source``, ``op`` and
  ``ts_ms``; ``schema`` is the envelope's Connect schema, whose ``before``/``after`` structs type
  the columns (Connect types and logical types as in Debezium:
  :func:`cdclake.formats.debezium.connect_type`). ``op`` is ``r`` (a snapshot read, *Change
  events in snapshot mode*), ``c``, ``u`` or ``d`` (*Change events in realtime mode*). An
  insert or snapshot read carries ``"before": {}`` and a delete ``"after": {}``: an empty object
  means the image does not exist (None), not an image whose columns are all absent.
- **Tombstone** (item 5): after each delete, a message with the same key and a null value: a
  ``tombstone`` :class:`ControlRecord`.
- **Key updates** (item 4): an update of a key column arrives as a delete of the old key
  followed by an insert of the new one, both ordinary changes here.
- **Names**: ``source.db``, ``source.schema`` (null for MySQL) and ``source.table``.

Position (:mod:`cdclake.positions`), from the ``source`` block:

- MySQL / MariaDB (``source.connector``, or a non-null ``source.file``): ``(binlog file number,
  pos, row)`` from ``source.file`` / ``pos`` / ``row`` (a null ``row`` counts as 0).
- Other sources: ``(source.ts_ms,)``.
- Snapshot reads (``op: "r"``) are sent with ``file``, ``pos`` and ``ts_ms`` null. Replicant
  reads the snapshot before it starts realtime replication from the log position taken at the
  snapshot's start, so every realtime change of a table is at least as new as its snapshot rows;
  such a read gets the zero position (``(0, 0, 0)`` for MySQL, ``(0,)`` otherwise), which sorts
  before every realtime change of the table. A snapshot row therefore never overrides a later
  change, whatever the arrival order; rows of one snapshot have distinct keys, so ties among
  them (broken by partition and offset) do not matter. A realtime change (``c``/``u``/``d``)
  whose position fields are null cannot be ordered and is a :class:`ParseError`.

``source_ts_ms`` is ``source.ts_ms`` (ms; null for snapshot reads, which then have none: the
payload's ``ts_ms`` is Replicant's processing time, not the commit time). ``tx_id`` is
``source.gtid`` when present.

Options: those of :class:`cdclake.formats._common.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``); configured types apply to columns the value schema does
not type (messages sent without a schema).
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from cdclake.formats._common import (
    LearningParser,
    coerce_text,
    convert_image,
    key_delete_image,
    resolve_primary_key,
    unwrap_envelope,
)
from cdclake.formats.debezium import connect_text, connect_type
from cdclake.positions import as_element, binlog_file_number, optional_int
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import to_text

FORMAT = "arcion-json"
#: ``op`` codes → canonical operations.
OPS = {"r": "snapshot", "c": "insert", "u": "update", "d": "delete"}
#: ``source.connector`` values whose positions are MySQL binlog coordinates (compared lower-case).
BINLOG_CONNECTORS = ("mysql", "mariadb")
#: What the earlier edition of the document sends in place of a null key or tombstone value.
_DEFAULT_MARKERS = (b"default", b'"default"')
_DELETE_HINT = "the delete's before image and its Kafka key both lack them"


def _is_null_marker(raw: Optional[bytes]) -> bool:
    """True for a Kafka key or value that stands for null: None, empty, JSON ``null``, ``"default"``."""
    if not raw:
        return True
    text = bytes(raw).strip()
    return not text or text == b"null" or text in _DEFAULT_MARKERS


def read_arcion_key(raw: Optional[bytes]) -> Optional[tuple[dict[str, Any], dict[str, dict]]]:
    """The Kafka key as ``(column → JSON value, column → Connect field schema)``, or None.

    None stands for the documented null key (item 3: the table has no primary, unique or row
    identifier key): a missing key, JSON ``null``, ``{"schema": ..., "payload": null}``, an
    empty payload, or the earlier edition's ``"default"``. Accepts the Connect envelope and a
    bare ``{col: value}`` object (schemas disabled); the column order is the payload's. Raises
    :class:`ParseError` with field ``key`` for bytes that are not UTF-8 JSON or a payload that is
    not an object.
    """
    if _is_null_marker(raw):
        return None
    try:
        obj = json.loads(bytes(raw).decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ParseError(FORMAT, f"key is not UTF-8 text ({exc.reason} at byte {exc.start})", "key") from None
    except json.JSONDecodeError as exc:
        raise ParseError(FORMAT, f"key is not valid JSON ({exc.msg} at char {exc.pos})", "key") from None
    payload, schema = unwrap_envelope(obj)
    if payload is None or payload == {}:
        return None
    if not isinstance(payload, dict):
        raise ParseError(FORMAT, f"key payload is a JSON {type(payload).__name__}, not an object", "key")
    return payload, {f["field"]: f for f in _fields(schema)}


def _fields(schema: Any) -> list[dict]:
    """The field schemas of a Connect struct schema that name a field (malformed entries skipped)."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list):
        return []
    return [f for f in fields if isinstance(f, dict) and isinstance(f.get("field"), str)]


def value_field_schemas(schema: Optional[Mapping[str, Any]]) -> dict[str, dict]:
    """Column → Connect field schema, from the envelope schema's ``before`` and ``after`` structs."""
    out: dict[str, dict] = {}
    for env_field in _fields(schema):
        if env_field["field"] in ("before", "after"):
            for col in _fields(env_field):
                out.setdefault(col["field"], col)
    return out


def _type_of(schema: Mapping[str, Any], where: str) -> str:
    """:func:`connect_type` of a field schema; :class:`ParseError` naming ``where`` if malformed."""
    try:
        return connect_type(schema)
    except (AttributeError, TypeError, ValueError) as exc:
        raise ParseError(FORMAT, f"unreadable field schema {schema!r}: {exc}", where) from None


def _text_of(value: Any, schema: Mapping[str, Any]) -> Optional[str]:
    """:func:`connect_text`, raising only ``ValueError`` for values or schemas it cannot read."""
    try:
        return connect_text(value, schema)
    except (AttributeError, TypeError, ArithmeticError) as exc:
        raise ValueError(str(exc)) from None


def _element(source: Mapping[str, Any], name: str) -> int:
    try:
        return as_element(source.get(name), name)
    except ValueError as exc:
        raise ParseError(FORMAT, f"cannot read position: {exc}", f"source.{name}") from None


def source_position(source: Mapping[str, Any], snapshot: bool) -> tuple[int, ...]:
    """The change's position (see the module docstring) from its ``source`` block.

    MySQL/MariaDB: ``(binlog_file_number(file), pos, row)``; others: ``(ts_ms,)``. A snapshot
    read whose position fields are null gets ``(0, 0, 0)`` / ``(0,)``. Raises
    :class:`ParseError` naming ``source.file``, ``source.pos``, ``source.row`` or
    ``source.ts_ms`` for a value that cannot be read, or that is null on a realtime change.
    """
    connector = str(source.get("connector") or "").lower()
    if connector in BINLOG_CONNECTORS or source.get("file") is not None:
        file, pos = source.get("file"), source.get("pos")
        if file is None and pos is None:
            if snapshot:
                return 0, 0, 0
            raise ParseError(FORMAT, "realtime change carries no binlog position", "source.file")
        if not isinstance(file, str):
            raise ParseError(FORMAT, f"binlog file name {file!r} is not text", "source.file")
        try:
            number = binlog_file_number(file)
        except ValueError as exc:
            raise ParseError(FORMAT, f"cannot read position: {exc}", "source.file") from None
        if pos is None:
            raise ParseError(FORMAT, "binlog file without a position", "source.pos")
        row = 0 if source.get("row") is None else _element(source, "row")
        return number, _element(source, "pos"), row
    if source.get("ts_ms") is None:
        if snapshot:
            return (0,)
        raise ParseError(FORMAT, "realtime change carries no source.ts_ms to order it by", "source.ts_ms")
    return (_element(source, "ts_ms"),)


def _name(source: Mapping[str, Any], name: str) -> Optional[str]:
    value = source.get(name)
    if value is not None and not isinstance(value, str):
        raise ParseError(FORMAT, f"{value!r} is not a name", f"source.{name}")
    return value


def _image(payload: Mapping[str, Any], name: str) -> Any:
    """``payload[name]`` with ``{}`` (the document's "no image") read as None."""
    image = payload.get(name)
    return None if image == {} else image


class ArcionJsonParser(LearningParser):
    """Parser of ``arcion-json`` records: ``ArcionJsonParser(options).parse(KafkaRecord)``.

    Returns one :class:`ChangeRecord` in a list, or a ``tombstone`` :class:`ControlRecord` for a
    null value (item 5). Raises :class:`ParseError` for a value that is not a JSON object
    (``value``), a payload or ``source`` that is not an object (``payload``, ``source``), a
    missing or unknown ``op`` (``op``), a missing ``source.table``, an image that is not an
    object or a value that does not fit its schema (``before``/``after[.column]``), an unreadable
    Kafka key (``key[.column]``), an unreadable or missing position (``source.*``), an insert,
    snapshot read or update without an after image (``after``), no primary key (``primary_key``:
    null Kafka key and none configured), or a delete whose key columns have no value
    (``before``).
    """

    format_name = FORMAT

    def parse(self, record: KafkaRecord) -> ParseResult:
        """Parse one Kafka record (see the class docstring for results and errors)."""
        if _is_null_marker(record.value):
            return ControlRecord("tombstone", FORMAT, detail=_key_detail(record.key))
        payload, schema, _ = self._reader.load(record.value)
        if payload is None:
            return ControlRecord("tombstone", FORMAT, detail=_key_detail(record.key))
        if not isinstance(payload, dict):
            raise ParseError(FORMAT, f"payload is a JSON {type(payload).__name__}, not an object", "payload")
        source = payload.get("source")
        if not isinstance(source, dict):
            raise ParseError(FORMAT, "missing source block" if source is None else
                             f"source is a JSON {type(source).__name__}, not an object", "source")
        op = payload.get("op")
        if op is None:
            raise ParseError(FORMAT, "missing operation", "op")
        if not isinstance(op, str) or op not in OPS:
            raise ParseError(FORMAT, f"unknown operation {op!r} (expected one of r, c, u, d)", "op")
        return [self._change(record, payload, schema, source, OPS[op])]

    def _change(self, record: KafkaRecord, payload: dict, schema: Optional[dict], source: dict,
                kind: str) -> ChangeRecord:
        table = source.get("table")
        if not isinstance(table, str) or not table:
            raise ParseError(FORMAT, "missing table name", "source.table")
        database, schema_name = _name(source, "db"), _name(source, "schema")

        col_schemas = value_field_schemas(schema)
        key = read_arcion_key(record.key)
        key_values, key_schemas = key if key else ({}, {})
        types = {col: _type_of(s, "schema") for col, s in col_schemas.items()}
        for col, s in key_schemas.items():
            types.setdefault(col, _type_of(s, "key"))
        for col, ctype in self.options.column_types(database, schema_name, table).items():
            types.setdefault(col, ctype)

        def convert(col: str, value: Any) -> Optional[str]:
            if col in col_schemas:
                return _text_of(value, col_schemas[col])
            return coerce_text(value, types[col]) if col in types else to_text(value)

        before = convert_image(FORMAT, _image(payload, "before"), convert, "before")
        after = convert_image(FORMAT, _image(payload, "after"), convert, "after")
        if kind != "delete" and after is None:
            raise ParseError(FORMAT, f"{kind} has no after image", "after")
        if kind == "delete":
            after = None

        primary_key = resolve_primary_key(
            FORMAT, self.options.key_override(database, schema_name, table), None, list(key_values) or None)
        if kind == "delete":
            key_text = {}
            for col, value in key_values.items():
                schema_of = key_schemas.get(col) or col_schemas.get(col)
                try:
                    key_text[col] = (_text_of(value, schema_of) if schema_of
                                     else coerce_text(value, types.get(col, "string")))
                except (ValueError, TypeError, ArithmeticError) as exc:
                    raise ParseError(FORMAT, f"cannot read Kafka key value {value!r}: {exc}", f"key.{col}") from None
            before = key_delete_image(FORMAT, primary_key, before, key_text, "before", _DELETE_HINT)

        try:
            ts = optional_int(source.get("ts_ms"))
        except ValueError as exc:
            raise ParseError(FORMAT, str(exc), "source.ts_ms") from None
        gtid = source.get("gtid")
        return ChangeRecord(
            source_format=FORMAT,
            source_database=database,
            source_schema=schema_name,
            source_table=table,
            op=kind,
            before=before,
            after=after,
            primary_key=primary_key,
            column_types=types,
            source_position=source_position(source, kind == "snapshot"),
            source_ts_ms=ts,
            tx_id=None if gtid in (None, "") else str(gtid),
        )


def _key_detail(key: Optional[bytes]) -> Optional[str]:
    """The Kafka key as text, for the detail of a tombstone."""
    return bytes(key).decode("utf-8", errors="replace") if key else None
