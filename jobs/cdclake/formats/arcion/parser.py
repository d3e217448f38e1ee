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
from typing import Any, Iterator, Mapping, Optional

from cdclake.formats.base import ColumnPlan, Event, learnt_dict
from cdclake.formats.columnar import NO_MAP, connect_members, convert_images, envelope_payloads, key_indices, names_pass, row_maker
from cdclake.formats.connect import (ConnectJsonParser, column_converter, connect_text, connect_type,
                                     key_fields, struct_fields)
from cdclake.formats.fields import element, json_object, kafka_key_text, known_operation, name_text, optional_element, table_name
from cdclake.formats.json_values import unwrap_envelope
from cdclake.formats.options import SourceOptions, key_delete_image, resolve_primary_key
from cdclake.formats.text import coerce_text, convert_image
from cdclake.positions import binlog_file_number
from cdclake.record import ChangeRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import to_text

FORMAT = "arcion-json"
#: The fast path's change row of a record.
_ROW = row_maker("source_database", "source_schema", "source_table", "op", "before", "after", "primary_key",
                 "column_types", "source_position", "source_ts_ms", "tx_id", source_format=FORMAT)
#: ``op`` codes → canonical operations.
OPS = {"r": "snapshot", "c": "insert", "u": "update", "d": "delete"}
#: ``source.connector`` values whose positions are MySQL binlog coordinates (compared lower-case).
BINLOG_CONNECTORS = ("mysql", "mariadb")
#: What the earlier edition of the document sends in place of a null key or tombstone value.
_DEFAULT_MARKERS = (b"default", b'"default"')
_DELETE_HINT = "the delete's before image and its Kafka key both lack them"
_NOT_A_NAME = "{!r} is not a name"
#: Kafka keys read by the fast path, kept per parser (keys repeat: one per row of the source table).
_MAX_KEYS = 65536
#: What the fast path keeps for a Kafka key :func:`read_arcion_key` refuses (or whose schema does not type).
_UNREAD: Any = object()


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
    LEARNT = {"_fast_keys": learnt_dict, "_fast_names": learnt_dict}

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for ``r``,
        ``c``, ``u`` and ``d`` events: a value that is one JSON object, either a Kafka Connect envelope
        the value reader has met (a record read whole first teaches it) or a bare payload (no schema),
        with a ``source`` block holding a text table and text or null ``db``/``schema``. The records of
        each table plan (envelope and table) are grouped by their images' columns, and each image column
        is converted over the group by the converter ``parse`` applies to it (the column's Connect field
        schema, else its configured type, else plain text). The Kafka key (:func:`read_arcion_key`, kept
        per key), the primary key, a delete's key image, the position, ``source.ts_ms`` and the GTID go
        through the functions :meth:`parse` calls. Left to :meth:`parse` (None): tombstones and ``null``
        payloads, unknown or missing ``op``, a missing or malformed ``source``, a Kafka key whose schema
        names columns the value schema does not, images whose columns differ from each other, a value a
        converter refuses, an insert, read or update without an after image, no primary key or a key
        column without a value, names :func:`cdclake.names.check_names` refuses, unreadable positions,
        and any value msgspec does not decode. Plan key ``(envelope id, db, schema, table)``; member
        ``(index, payload, source, Connect schema)``."""
        return connect_members(envelope_payloads(self._reader, records, bare=True), _change_source)

    def fast_group(self, records: list[KafkaRecord], key: Any, members: list[tuple], out: list) -> None:
        """The changes of one table plan's records (``members``: index, payload, source, schema) into
        ``out``, converted per set of image columns."""
        _, db, schema_name, table = key
        try:
            plan = self.kept(key, _TablePlan, self.options, members[0][3], db, schema_name, table)
        except Exception:  # noqa: BLE001
            return
        by_columns: dict[tuple, list[tuple]] = {}
        for i, payload, source, _ in members:
            before, after = _image(payload, "before"), _image(payload, "after")
            image = after if after is not None else before
            if image is not None and type(image) is not dict:
                continue
            by_columns.setdefault(() if image is None else tuple(image), []).append((i, payload, source, before, after))
        types = dict(plan.types)
        types_pair = (list(types), list(types.values()))
        for columns, rows in by_columns.items():
            _fast_columns(self, records, key, plan, types, types_pair, columns, rows, out)

    def is_tombstone(self, value: Optional[bytes]) -> bool:
        """A null value: None, empty, JSON ``null`` or the earlier edition's ``"default"`` (item 5)."""
        return _is_null_marker(value)

    def source_block(self, payload: dict) -> dict:
        """The ``source`` block, required."""
        return json_object(FORMAT, payload.get("source"), "source", missing="missing source block")

    def control(self, event: Event) -> Optional[ParseResult]:
        """No control records but tombstones: the ``op``."""
        event.op = known_operation(FORMAT, event.message.get("op"), OPS, "op", "operation", "one of r, c, u, d")
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


class _TablePlan(ColumnPlan):
    """What the fast path derives from one value schema for one table, made once.

    ``col_schemas`` (column → Connect field schema of the ``before``/``after`` structs), ``types``
    (as :class:`_Typed` makes them without a key schema: the value schema's types, then the
    configured ones), ``key_override`` (the configured key or None) and :meth:`converter`.
    Raises :class:`ParseError` where :class:`_Typed` does (a field schema that does not type).
    """

    def __init__(self, options: SourceOptions, schema: Optional[dict], database: Optional[str],
                 schema_name: Optional[str], table: str):
        self.col_schemas = struct_fields(schema, ("before", "after"))
        self.types = _Typed(self.col_schemas, {}, options.column_types(database, schema_name, table)).types
        self.key_override = options.key_override(database, schema_name, table)
        super().__init__()

    def make_converter(self, col: str) -> Any:
        """Column ``col``'s converter (JSON value → canonical text), as :meth:`_Typed.convert` reads
        it: its field schema's, else its type's, else :func:`to_text`."""
        return column_converter(self.col_schemas, self.types, col)


def _fast_key(parser: ArcionJsonParser, raw: Optional[bytes]) -> Any:
    """:func:`read_arcion_key` of a Kafka key, kept per key: ``_UNREAD`` where it raises or a field
    of its schema does not type (:func:`_type_of`). Raises ``TypeError`` for a key that is not
    hashable."""
    keys = parser._fast_keys
    read = keys.get(raw, keys)
    if read is not keys:
        return read
    try:
        read = read_arcion_key(raw)
        if read:
            for s in read[1].values():
                _type_of(s, "key")
    except Exception:  # noqa: BLE001  (the per-record parser reports it)
        read = _UNREAD
    if len(keys) >= _MAX_KEYS:
        keys.clear()
    keys[raw] = read
    return read


def _change_source(i: int, payload: dict) -> Optional[dict]:
    """The ``source`` block of a change the fast path reads (an object, and ``op`` one of :data:`OPS`)."""
    op, source = payload.get("op"), payload.get("source")
    return source if type(source) is dict and type(op) is str and op in OPS else None


def _fast_columns(parser: ArcionJsonParser, records: list[KafkaRecord], key: tuple, plan: _TablePlan, types: dict,
                  types_pair: tuple, columns: tuple, rows: list[tuple], out: list) -> None:
    """The changes of the records of one plan whose images hold ``columns`` (``rows``: index,
    payload, source, before, after) into ``out``."""
    _, db, schema_name, table = key
    converters = [plan.converter(c) for c in columns]
    befores, before_refused = convert_images([r[3] for r in rows], columns, converters)
    afters, after_refused = convert_images([r[4] for r in rows], columns, converters)
    names = list(columns)
    col_schemas, override = plan.col_schemas, plan.key_override
    checked = parser._fast_names
    where: dict[tuple, Optional[list[int]]] = {}  # primary key → its columns' indices in ``names``
    for j, (i, payload, source, _, _) in enumerate(rows):
        if j in before_refused or j in after_refused:
            continue
        op = OPS[payload["op"]]
        before, after = befores[j], afters[j]
        if op == "delete":
            after = None
        elif after is None:
            continue
        try:
            read = _fast_key(parser, records[i].key)
        except TypeError:
            continue
        if read is _UNREAD or (read is not None and not read[1].keys() <= col_schemas.keys()):
            continue  # a key schema typing columns the value schema does not: its types differ
        try:
            key_values, key_schemas = read if read else ({}, {})
            pk = resolve_primary_key(FORMAT, override, None, list(key_values) or None)
            if op == "delete":
                key_text = kafka_key_text(FORMAT, key_values, _key_value_text, key_schemas, col_schemas, types)
                image = key_delete_image(FORMAT, pk, None if before is None else dict(zip(names, before)), key_text,
                                         "before", _DELETE_HINT)
                before_pair = (list(image), list(image.values()))
            else:
                at = key_indices(where, tuple(pk), names, pk)
                if at is None or any(after[k] is None for k in at):
                    continue
                before_pair = NO_MAP if before is None else (names, before)
            ts = optional_element(FORMAT, source.get("ts_ms"), "source.ts_ms")
            position = list(source_position(source, op == "snapshot"))
            gtid = source.get("gtid")
            tx_id = None if gtid in (None, "") else str(gtid)
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            continue
        # every name the change carries is among these: the key, the columns, the types' columns
        name_key = (key, tuple(pk), columns)
        if not (checked.get(name_key) or names_pass(checked, name_key, lambda: ChangeRecord(
                FORMAT, db, schema_name, table, op, dict.fromkeys(names), dict.fromkeys(names), pk, types))):
            continue
        out[i] = [_ROW(db, schema_name, table, op, before_pair, NO_MAP if after is None else (names, after),
                       list(pk), types_pair, position, ts, tx_id)]
