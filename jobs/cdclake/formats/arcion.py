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
  :func:`cdclake.formats.connect.connect_type`). ``op`` is ``r`` (a snapshot read, *Change
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

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``); configured types apply to columns the value schema does
not type (messages sent without a schema).
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from cdclake.formats.base import Event
from cdclake.formats.connect import ConnectJsonParser, connect_text, connect_type, key_fields, struct_fields
from cdclake.formats.fields import element, json_object, kafka_key_text, name_text, optional_element, table_name
from cdclake.formats.json_values import unwrap_envelope
from cdclake.formats.options import key_delete_image, resolve_primary_key
from cdclake.formats.text import coerce_text, convert_image
from cdclake.positions import binlog_file_number
from cdclake.record import ParseError, ParseResult
from cdclake.types import to_text

FORMAT = "arcion-json"
#: ``op`` codes → canonical operations.
OPS = {"r": "snapshot", "c": "insert", "u": "update", "d": "delete"}
#: ``source.connector`` values whose positions are MySQL binlog coordinates (compared lower-case).
BINLOG_CONNECTORS = ("mysql", "mariadb")
#: What the earlier edition of the document sends in place of a null key or tombstone value.
_DEFAULT_MARKERS = (b"default", b'"default"')
_DELETE_HINT = "the delete's before image and its Kafka key both lack them"
_NOT_A_NAME = "{!r} is not a name"


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
    return payload, key_fields(schema)


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
    return element(FORMAT, source.get(name), f"source.{name}", what=name, prefix="cannot read position: ")


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


def _image(payload: Mapping[str, Any], name: str) -> Any:
    """``payload[name]`` with ``{}`` (the document's "no image") read as None."""
    image = payload.get(name)
    return None if image == {} else image


class _Typed:
    """The column types of one record (its value schema's, its key schema's, then the configured
    ones) and :meth:`convert` (column, JSON value → canonical text)."""

    def __init__(self, col_schemas: dict, key_schemas: dict, configured: Mapping[str, str]):
        self.col_schemas = col_schemas
        self.types = {col: _type_of(s, "schema") for col, s in col_schemas.items()}
        for col, s in key_schemas.items():
            self.types.setdefault(col, _type_of(s, "key"))
        for col, ctype in configured.items():
            self.types.setdefault(col, ctype)

    def convert(self, col: str, value: Any) -> Optional[str]:
        """Canonical text of ``value`` in column ``col`` (``ValueError`` when it does not fit)."""
        if col in self.col_schemas:
            return _text_of(value, self.col_schemas[col])
        return coerce_text(value, self.types[col]) if col in self.types else to_text(value)


def _key_value_text(col: str, value: Any, key_schemas: dict, col_schemas: dict, types: dict) -> Optional[str]:
    """A Kafka key value typed by its field in the key's schema, else in the value's, else by type."""
    schema_of = key_schemas.get(col) or col_schemas.get(col)
    return _text_of(value, schema_of) if schema_of else coerce_text(value, types.get(col, "string"))


class ArcionJsonParser(ConnectJsonParser):
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

    def is_tombstone(self, value: Optional[bytes]) -> bool:
        """A null value: None, empty, JSON ``null`` or the earlier edition's ``"default"`` (item 5)."""
        return _is_null_marker(value)

    def source_block(self, payload: dict) -> dict:
        """The ``source`` block, required."""
        return json_object(FORMAT, payload.get("source"), "source", missing="missing source block")

    def control(self, event: Event) -> Optional[ParseResult]:
        """No control records but tombstones: the ``op``."""
        op = event.message.get("op")
        if op is None:
            raise ParseError(FORMAT, "missing operation", "op")
        if not isinstance(op, str) or op not in OPS:
            raise ParseError(FORMAT, f"unknown operation {op!r} (expected one of r, c, u, d)", "op")
        event.op = OPS[op]
        return None

    def table(self, event: Event) -> None:
        """``source.table``, ``source.db`` and ``source.schema``."""
        source = event.source
        event.table = table_name(FORMAT, source.get("table"), "source.table")
        event.database = name_text(FORMAT, source.get("db"), "source.db", _NOT_A_NAME)
        event.schema_name = name_text(FORMAT, source.get("schema"), "source.schema", _NOT_A_NAME)

    def column_types(self, event: Event) -> None:
        """Types from the value schema's structs, then the Kafka key's schema, then ``column_types``."""
        col_schemas = struct_fields(event.schema, ("before", "after"))
        event.key = read_arcion_key(event.record.key)
        key_schemas = event.key[1] if event.key else {}
        event.plan = typed = _Typed(col_schemas, key_schemas,
                                    self.options.column_types(event.database, event.schema_name, event.table))
        event.types, event.convert = typed.types, typed.convert

    def images(self, event: Event) -> None:
        """``before`` and ``after`` (``{}`` is no image); all but a delete need ``after``."""
        op, payload = event.op, event.message
        event.before = convert_image(FORMAT, _image(payload, "before"), event.convert, "before")
        event.after = convert_image(FORMAT, _image(payload, "after"), event.convert, "after")
        if op != "delete" and event.after is None:
            raise ParseError(FORMAT, f"{op} has no after image", "after")
        if op == "delete":
            event.after = None

    def primary_key(self, event: Event) -> None:
        """Configured, else the Kafka key's columns; a delete's key values from its image or key."""
        key_values, key_schemas = event.key if event.key else ({}, {})
        event.primary_key = resolve_primary_key(
            FORMAT, self.options.key_override(event.database, event.schema_name, event.table), None,
            list(key_values) or None)
        if event.op == "delete":
            key_text = kafka_key_text(FORMAT, key_values, _key_value_text, key_schemas, event.plan.col_schemas,
                                      event.types)
            event.before = key_delete_image(FORMAT, event.primary_key, event.before, key_text, "before", _DELETE_HINT)

    def position(self, event: Event) -> None:
        """``source.ts_ms``, then the position; ``source.gtid`` as the transaction id."""
        source = event.source
        event.ts_ms = optional_element(FORMAT, source.get("ts_ms"), "source.ts_ms")
        event.position = source_position(source, event.op == "snapshot")
        gtid = source.get("gtid")
        event.tx_id = None if gtid in (None, "") else str(gtid)
