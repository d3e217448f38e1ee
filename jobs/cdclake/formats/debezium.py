"""``debezium-json``: Debezium change events in JSON, with or without the Kafka Connect schema.

Implements:

- Debezium connector documentation (MySQL, PostgreSQL, Oracle, SQL Server): the change event
  envelope (``before``, ``after``, ``source``, ``op``, ``ts_ms``, ``transaction``), the ``source``
  block of each connector (``file``/``pos``/``row``; ``lsn``/``sequence``/``txId``; ``scn``;
  ``commit_lsn``/``change_lsn``/``event_serial_no``), transaction metadata events, schema change
  events, and the Kafka Connect / Debezium logical types (:mod:`cdclake.formats.connect`).
- "Lindorm: Debezium Format V2.0", a declared variant chosen per record by its ``source`` block
  (:mod:`cdclake.formats.lindorm`): ``source.namespace``, ``"schema": {}``, the column delete and
  HBase tables.
- "Huawei MRS CDL JSON and open-source Debezium JSON" (``message_version`` 2.0): ``unique`` gives
  the primary key, ``message_type`` other than ``"0"`` is a heartbeat, ``LOB_COLUMNS`` ignored.
- Apache Flink's flink-json tests (``debezium-*.txt``) serve as conformance vectors, including
  the PostgreSQL REPLICA IDENTITY DEFAULT case (updates and deletes with ``before: null``).

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``); ``column_types`` types the columns of messages sent without
a schema (numbers given for a ``timestamp`` column are read as epoch milliseconds).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping, Optional

from cdclake.formats.base import Event
from cdclake.formats.columnar import NO_MAP, convert_images, envelope_payloads
from cdclake.formats.connect import (TOAST_ARRAYS, TOAST_PLACEHOLDERS, ConnectJsonParser, column_converter,
                                     connect_text, connect_type, key_fields, struct_fields)
from cdclake.formats.fields import element, kafka_key_text, name_text, optional_element, table_name
from cdclake.formats.json_values import read_key
from cdclake.formats.lindorm import LINDORM, is_lindorm
from cdclake.formats.options import SourceOptions, key_delete_image, resolve_primary_key
from cdclake.formats.text import ABSENT, coerce_text, convert_image
from cdclake.positions import binlog_file_number, pg_lsn
from cdclake.names import check_names
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import to_text

FORMAT = "debezium-json"
OPS = {"c": "insert", "u": "update", "d": "delete", "r": "snapshot", "t": "truncate"}

_HEARTBEAT_FIELDS = {"ts_ms", "serverName", "HEARTBEAT_IDENTIFIER", "message_type", "message_version"}
_DDL_FIELDS = ("ddl", "tableChanges", "historyRecord")
_DELETE_HINT = "send Kafka keys holding the key columns"
_DELETE_HINT_PG = "set REPLICA IDENTITY FULL on the PostgreSQL table or send Kafka keys"
_POSITION = "cannot read position: "
#: Kafka headers of a primary key change, which Debezium sends as a delete of the old key (header
#: ``__debezium.newkey``), a tombstone and a create of the new key (header ``__debezium.oldkey``).
NEW_KEY_HEADER, OLD_KEY_HEADER = "__debezium.newkey", "__debezium.oldkey"
#: The payload members a change the fast path reads may hold (any other member, ``unique``,
#: ``message_type``, ``status``, ``ddl`` ..., sends the record to the per-record parser).
_FAST_MEMBERS = frozenset(("before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction"))
_FAST_OPS = {"c": "insert", "u": "update", "d": "delete", "r": "snapshot"}
_TOAST = frozenset(TOAST_PLACEHOLDERS)
_KEY_HEADERS = frozenset((NEW_KEY_HEADER, OLD_KEY_HEADER))
#: Kafka keys read by the fast path, kept per parser (keys repeat: one per row of the source table).
_MAX_KEYS = 65536
_UNSET = object()


class _TablePlan:
    """What :class:`DebeziumJsonParser` derives from one envelope schema for one table, made once.

    ``col_schemas`` (column → Connect field schema), ``types`` (column → canonical type: the
    schema's, then the configured ``column_types``), ``key_override`` (the configured key or
    None) and :meth:`convert` (column, JSON value → canonical text or :data:`ABSENT`), with one
    converter per column, made on first use.
    """

    def __init__(self, options: SourceOptions, schema: Optional[dict], database: Optional[str],
                 schema_name: Optional[str], table: str):
        self.col_schemas = struct_fields(schema, ("before", "after"), strict=False)
        self.types = {col: connect_type(s) for col, s in self.col_schemas.items()}
        for col, ctype in options.column_types(database, schema_name, table).items():
            self.types.setdefault(col, ctype)
        self.key_override = options.key_override(database, schema_name, table)
        self._converters: dict[str, Callable[[Any], Any]] = {}

    def converter(self, col: str) -> Callable[[Any], Any]:
        """The converter of column ``col`` (JSON value → canonical text), TOAST placeholders not
        handled: the column's Connect schema's, else its canonical type's, else :func:`to_text`."""
        conv = self._converters.get(col)
        if conv is None:
            conv = self._converters[col] = column_converter(self.col_schemas, self.types, col)
        return conv

    def convert(self, col: str, value: Any) -> Any:
        """Canonical text of ``value`` in column ``col``, or :data:`ABSENT` for the TOAST
        placeholder (``ValueError`` when it does not fit)."""
        conv = self._converters.get(col) or self.converter(col)
        # connect.is_toast, inline: this runs for every value
        t = type(value)
        if (t is str and value in TOAST_PLACEHOLDERS) or (t is list and value in TOAST_ARRAYS):
            return ABSENT
        return conv(value)


class DebeziumVariant:
    """How a record of Debezium's own connectors is read; :data:`cdclake.formats.lindorm.LINDORM`
    is the other variant, with the same members.

    - ``schema_field``: the ``source`` member holding the schema name.
    - ``typed(plan, raw before, raw after)``: ``(column types, converter, carried key)``: the
      plan's (a copy of its types) and no carried key.
    - ``complete_after(op, after image, raw before, raw after)``: nothing to complete.
    """

    schema_field = "schema"

    @staticmethod
    def typed(plan: _TablePlan, raw_before: Any, raw_after: Any) -> tuple[dict, Callable[[str, Any], Any], None]:
        """The plan's types (a copy) and converter; no carried key."""
        return dict(plan.types), plan.convert, None

    @staticmethod
    def complete_after(op: str, after: Optional[dict], raw_before: Any, raw_after: Any) -> None:
        """Nothing: Debezium's after image is whole."""


DEBEZIUM = DebeziumVariant()


_BINLOG_NUMBERS: dict[str, int] = {}


def _binlog_number(name: str) -> int:
    """:func:`cdclake.positions.binlog_file_number`, kept per file name (a few thousand at most)."""
    number = _BINLOG_NUMBERS.get(name)
    if number is None:
        number = binlog_file_number(name)
        if len(_BINLOG_NUMBERS) < 4096:
            _BINLOG_NUMBERS[name] = number
    return number


def _sqlserver_lsn(value: Any) -> int:
    """A SQL Server LSN ``"00000027:00000758:0003"`` as the integer of its concatenated hex digits."""
    if value is None:
        return 0
    return int(str(value).replace(":", ""), 16)


def source_position(source: Mapping[str, Any], payload: Mapping[str, Any]) -> tuple[int, ...]:
    """The change's position (see :mod:`cdclake.positions`) from its ``source`` block.

    - MySQL (``file``, ``pos``, ``row``): ``(binlog file number, pos, row)``; an empty file name
      (snapshots of some embedded engines) counts as 0.
    - PostgreSQL: ``source.sequence`` (JSON text ``["<last commit lsn>|null", "<lsn>"]``) gives
      ``(commit lsn or 0, lsn)``, else ``(lsn, lsn)``.
    - SQL Server: ``(commit_lsn, change_lsn, event_serial_no)``, LSNs read as hex integers.
    - Oracle: ``(scn,)``.
    - Lindorm and others: ``(source.ts_ms,)``, else ``(payload ts_ms,)``, else ``()``.

    Null ``pos``, ``row``, ``event_serial_no`` and ``scn`` count as 0. Raises :class:`ParseError`
    naming the ``source`` field that cannot be read.
    """
    connector = str(source.get("connector") or "").lower()
    where = "source"
    try:
        if connector in ("sqlserver", "db2") or "change_lsn" in source or "commit_lsn" in source:
            where = "source.commit_lsn"
            commit = _sqlserver_lsn(source.get("commit_lsn"))
            where = "source.change_lsn"
            change = _sqlserver_lsn(source.get("change_lsn"))
            return commit, change, element(FORMAT, source.get("event_serial_no"), "source.event_serial_no", null=0,
                                           prefix=_POSITION)
        if connector == "mysql" or "file" in source:
            where = "source.file"
            file = source.get("file")
            number = (_binlog_number(file) if type(file) is str else binlog_file_number(file)) if file else 0
            return (number, element(FORMAT, source.get("pos"), "source.pos", null=0, prefix=_POSITION),
                    element(FORMAT, source.get("row"), "source.row", null=0, prefix=_POSITION))
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
            return (element(FORMAT, source.get("scn"), "source.scn", null=0, prefix=_POSITION),)
        ts = source.get("ts_ms") if source.get("ts_ms") is not None else payload.get("ts_ms")
        return (element(FORMAT, ts, "source.ts_ms", what="ts_ms", prefix=_POSITION),) if ts is not None else ()
    except ParseError:
        raise
    except (ValueError, TypeError) as exc:
        raise ParseError(FORMAT, f"{_POSITION}{exc}", where) from None


def _control(payload: Mapping[str, Any], source: Mapping[str, Any]) -> Optional[ControlRecord]:
    """The control record a payload stands for (heartbeat, transaction, DDL), or None."""
    message_type = payload.get("message_type")
    heartbeat = message_type is not None and str(message_type) != "0"
    if not heartbeat and "op" in payload:
        return None
    names = dict(source_database=source.get("db"), source_schema=source.get("schema"), source_table=source.get("table"))
    if heartbeat:
        return ControlRecord("heartbeat", FORMAT, **names, detail=f"message_type {message_type}")
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


def header_key(record: KafkaRecord, name: str) -> Optional[dict]:
    """The key columns a Debezium key header (:data:`NEW_KEY_HEADER`, :data:`OLD_KEY_HEADER`) holds,
    as Kafka Connect's ``SimpleHeaderConverter`` (a worker's default) or its ``JsonConverter``
    (``{"schema", "payload"}``) writes a key struct: ``{"id": 2}``; None when the record has no
    such header or it is not a JSON object of columns."""
    for header, value in record.headers or ():
        if header != name or not value:
            continue
        try:
            doc = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            return None
        if isinstance(doc, dict) and set(doc) == {"schema", "payload"} and isinstance(doc["payload"], dict):
            doc = doc["payload"]
        return doc if isinstance(doc, dict) and doc and all(isinstance(k, str) for k in doc) else None
    return None


def _key_value_text(col: str, value: Any, key_schemas: dict, types: dict) -> Optional[str]:
    """A Kafka key value typed by the key's own schema, else the value's (see :func:`kafka_key_text`)."""
    if col in key_schemas:
        return connect_text(value, key_schemas[col])
    return coerce_text(value, types[col]) if col in types else to_text(value)


class DebeziumJsonParser(ConnectJsonParser):
    """Parser of ``debezium-json`` records: ``DebeziumJsonParser(options).parse(KafkaRecord)``.

    Returns one :class:`ChangeRecord` in a list, or a :class:`ControlRecord` for a tombstone
    (value None or empty), a heartbeat, a transaction BEGIN/END event, a schema change event or
    an ``op: "m"`` message (``metadata``). Raises :class:`ParseError` for unreadable JSON, a
    missing or unknown ``op`` (field ``op``), a missing ``source.table``, a value that does not
    fit its schema, no resolvable primary key (field ``primary_key``), or a delete whose key
    cannot be found in its ``before`` image nor in the Kafka key (field ``before``). Each record
    is read as its :class:`DebeziumVariant`: Lindorm's (:mod:`cdclake.formats.lindorm`) or
    Debezium's own.
    """

    format_name = FORMAT
    FAST_PATH = True
    _LEARNT = ConnectJsonParser._LEARNT + ("_fast_keys", "_fast_names")

    def _forget(self) -> None:
        super()._forget()
        self._fast_keys: dict = {}
        self._fast_names: dict = {}

    def fast_parse(self, records: list[KafkaRecord]) -> list[Optional[list[tuple]]]:
        """The columnar fast path (:mod:`cdclake.formats.columnar`) for change events whose
        envelope the value reader has met (a record read whole first teaches it), of a known
        shape: a payload of ``before``, ``after``, ``source``, ``op`` (c, u, d, r), ``ts_ms``
        (``ts_us``, ``ts_ns``) and ``transaction`` only, a non-Lindorm ``source`` with text names,
        images holding exactly the envelope's columns in its order, a Kafka key whose columns are
        the primary key (or a configured key). Each image column is converted over the batch by
        the table plan's converters; the key, the delete image, the position and the names go
        through the functions :meth:`parse` calls. Anything else (and any value a converter
        refuses) gives None: :meth:`parse` reads that record."""
        return _fast_parse(self, records)

    def kafka_key(self, raw: Optional[bytes]) -> Optional[tuple[dict, Optional[dict]]]:
        """The Kafka key's ``(column → value, Connect schema or None)``, or None when there is none
        or it cannot be read (:func:`cdclake.formats.json_values.read_key`)."""
        return read_key(raw, self._key_reader)

    def source_block(self, payload: dict) -> dict:
        """The ``source`` block (``{}`` when it is not an object)."""
        source = payload.get("source")
        return source if isinstance(source, dict) else {}

    def control(self, event: Event) -> Optional[ParseResult]:
        """Heartbeats, transaction events, schema changes and ``op: "m"``; else the ``op``."""
        payload, source = event.message, event.source
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
        if op == "d" and header_key(event.record, NEW_KEY_HEADER) is not None:
            # the delete half of a primary key change: the create of the new key applies it as one
            # update that moves the row (so the new key keeps the columns the create leaves out)
            return ControlRecord("key_change", FORMAT, source.get("db"), source.get("schema"), source.get("table"),
                                 detail=f"key changed to {header_key(event.record, NEW_KEY_HEADER)}: the create "
                                        f"with header {OLD_KEY_HEADER} applies it")
        event.op = OPS[op]
        event.variant = LINDORM if is_lindorm(source) else DEBEZIUM
        return None

    def table(self, event: Event) -> None:
        """``source.table``, ``source.db`` and the variant's schema member."""
        source, field = event.source, event.variant.schema_field
        event.table = table_name(FORMAT, source.get("table"), "source.table")
        event.database = name_text(FORMAT, source.get("db"), "source.db")
        event.schema_name = name_text(FORMAT, source.get(field), f"source.{field}")

    def column_types(self, event: Event) -> None:
        """The table plan, kept per envelope and table (messages without a schema: per table)."""
        schema, envelope, payload = event.schema, event.envelope, event.message
        key = None if envelope is None and schema is not None else (envelope, event.database, event.schema_name,
                                                                     event.table)
        try:
            event.plan = self.kept(key, _TablePlan, self.options, schema, event.database, event.schema_name,
                                   event.table)
        except (TypeError, AttributeError, ValueError) as exc:  # fields, names or parameters of the wrong JSON type
            raise ParseError(FORMAT, f"not a Kafka Connect struct schema ({type(exc).__name__}: {exc})",
                             "schema") from None
        event.types, event.convert, event.carried_key = event.variant.typed(
            event.plan, payload.get("before"), payload.get("after"))

    def images(self, event: Event) -> None:
        """``before`` and ``after``; an insert, snapshot read or update needs ``after``. The create
        half of a primary key change (header :data:`OLD_KEY_HEADER`) is an update whose before
        image is the old key: silver moves the row, keeping the columns the after image leaves out
        (a TOASTed value the change left unchanged)."""
        raw_before, raw_after, op = event.message.get("before"), event.message.get("after"), event.op
        old_key = header_key(event.record, OLD_KEY_HEADER) if op == "insert" and raw_before is None else None
        if old_key is not None:
            raw_before, event.op = old_key, op = old_key, "update"
        event.before = convert_image(FORMAT, raw_before, event.convert, OLD_KEY_HEADER if old_key else "before")
        event.after = after = convert_image(FORMAT, raw_after, event.convert, "after")
        event.variant.complete_after(op, after, raw_before, raw_after)
        if op in ("insert", "snapshot", "update") and after is None:
            raise ParseError(FORMAT, f"{op} has no after image", "after")

    def primary_key(self, event: Event) -> None:
        """Configured, else carried (HBase ``ROW``, ``unique``), else the Kafka key's columns."""
        key = self.kafka_key(event.record.key)
        carried = event.carried_key
        if carried is None:
            unique = event.message.get("unique")
            carried = list(unique) if isinstance(unique, dict) and unique else None
        op = event.op
        event.primary_key = resolve_primary_key(
            FORMAT, event.plan.key_override, carried, list(key[0]) if key else None, required=op != "truncate")
        if op == "delete":
            key_text = None
            if key:
                values, schema = key
                key_text = kafka_key_text(FORMAT, values, _key_value_text,
                                          key_fields(schema, strict=False) or event.plan.col_schemas, event.types)
            event.before = key_delete_image(FORMAT, event.primary_key, event.before, key_text, "before",
                                            _DELETE_HINT_PG if "lsn" in event.source else _DELETE_HINT)
        elif op == "truncate":
            event.before = event.after = None

    def position(self, event: Event) -> None:
        """The ``source`` block's position, ``ts_ms`` and transaction."""
        source, payload = event.source, event.message
        transaction = payload.get("transaction") if isinstance(payload.get("transaction"), dict) else {}
        tx_ids = (source.get("txId"), transaction.get("id"), source.get("gtid"))
        tx_id = next((v for v in tx_ids if v is not None), None)
        ts = source.get("ts_ms") if source.get("ts_ms") is not None else payload.get("ts_ms")
        event.position = source_position(source, payload)
        event.ts_ms = optional_element(FORMAT, ts, "source.ts_ms")
        event.tx_id = None if tx_id is None else str(tx_id)
        event.tx_seq = optional_element(FORMAT, transaction.get("total_order"), "transaction.total_order")


def _fast_parse(parser: DebeziumJsonParser, records: list[KafkaRecord]) -> list[Optional[list[tuple]]]:
    """:meth:`DebeziumJsonParser.fast_parse`: see there."""
    return fast_changes(parser, records, envelope_payloads(parser._reader, records))


def fast_changes(parser: DebeziumJsonParser, records: list[KafkaRecord],
                 payloads: Iterable[tuple[int, Any, Optional[dict], Any]]) -> list[Optional[list[tuple]]]:
    """The fast path of :meth:`DebeziumJsonParser.fast_parse` on decoded payloads: ``payloads``
    gives ``(index in records, payload, Connect schema, envelope id)`` for the records decoded
    (others give None). Used by the formats that decode Debezium envelopes otherwise (Avro)."""
    out: list[Optional[list[tuple]]] = [None] * len(records)
    groups: dict[tuple, list[tuple]] = {}
    for i, payload, schema, envelope in payloads:
        if type(payload) is not dict or not payload.keys() <= _FAST_MEMBERS:
            continue
        if records[i].headers and any(h in _KEY_HEADERS for h, _ in records[i].headers):
            continue  # a half of a primary key change: the per-record parser pairs them
        op, source = payload.get("op"), payload.get("source")
        if type(source) is not dict or op not in _FAST_OPS or is_lindorm(source):
            continue
        table, db, schema_name = source.get("table"), source.get("db"), source.get("schema")
        if (type(table) is not str or not table or (db is not None and type(db) is not str)
                or (schema_name is not None and type(schema_name) is not str)):
            continue
        groups.setdefault((envelope, db, schema_name, table), []).append((i, payload, source, schema))
    for key, members in groups.items():
        _fast_group(parser, records, key, members, out)
    return out


def _fast_group(parser: DebeziumJsonParser, records: list[KafkaRecord], key: tuple, members: list[tuple],
                out: list) -> None:
    """The changes of one table plan's records (``members``: index, payload, source, schema) into ``out``."""
    envelope, db, schema_name, table = key
    try:
        plan = parser.kept(key, _TablePlan, parser.options, members[0][3], db, schema_name, table)
    except (TypeError, AttributeError, ValueError):
        return
    columns = tuple(plan.col_schemas)
    converters = [plan.converter(c) for c in columns]
    types = dict(plan.types)
    types_pair = (list(types), list(types.values()))
    befores, before_refused = convert_images([m[1].get("before") for m in members], columns, converters, _TOAST)
    afters, after_refused = convert_images([m[1].get("after") for m in members], columns, converters, _TOAST)
    names = list(columns)
    keys = parser._fast_keys
    checked: dict[tuple, bool] = parser._fast_names
    where: dict[tuple, Optional[list[int]]] = {}  # primary key → its columns' indices in ``names``
    for j, (i, payload, source, _) in enumerate(members):
        if j in before_refused or j in after_refused:
            continue
        op = _FAST_OPS[payload["op"]]
        before, after = befores[j], afters[j]
        if after is None and op != "delete":
            continue
        raw_key = records[i].key
        try:
            read = keys[raw_key]
        except KeyError:
            read = parser.kafka_key(raw_key)
            if len(keys) >= _MAX_KEYS:
                keys.clear()
            keys[raw_key] = read
        except TypeError:  # a key that is not bytes
            continue
        pk = plan.key_override or (list(read[0]) if read else None)
        if not pk:
            continue
        try:
            if op == "delete":
                key_text = None
                if read:
                    values, key_schema = read
                    key_text = kafka_key_text(FORMAT, values, _key_value_text,
                                              key_fields(key_schema, strict=False) or plan.col_schemas, types)
                image = key_delete_image(FORMAT, pk, None if before is None else dict(zip(names, before)), key_text,
                                         "before", _DELETE_HINT)
                before_pair = (list(image), list(image.values()))
                if any(image.get(k) is None for k in pk):
                    continue
                name_key = (key, tuple(pk), tuple(image))
            else:
                name_key = (key, tuple(pk))
                at = where.get(name_key, _UNSET)
                if at is _UNSET:
                    at = where[name_key] = [names.index(k) for k in pk] if set(pk) <= set(names) else None
                if at is None or any(after[k] is None for k in at):
                    continue
                before_pair = NO_MAP if before is None else (names, before)
            transaction = payload.get("transaction")
            if type(transaction) is not dict:
                transaction = {}
            tx_id = source.get("txId")
            if tx_id is None:
                tx_id = transaction.get("id")
                if tx_id is None:
                    tx_id = source.get("gtid")
            ts = source.get("ts_ms")
            if ts is None:
                ts = payload.get("ts_ms")
            position = list(source_position(source, payload))
            ts = optional_element(FORMAT, ts, "source.ts_ms")
            tx_seq = optional_element(FORMAT, transaction.get("total_order"), "transaction.total_order")
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            continue
        ok = checked.get(name_key)
        if ok is None:
            try:
                check_names(ChangeRecord(FORMAT, db, schema_name, table, op, dict.fromkeys(before_pair[0] or ()),
                                         dict.fromkeys(names), pk, types))
                ok = True
            except Exception:  # noqa: BLE001
                ok = False
            if len(checked) < _MAX_KEYS:
                checked[name_key] = ok
        if not ok:
            continue
        out[i] = [(parser.format_name, db, schema_name, table, op, before_pair, NO_MAP if after is None else (names, after),
                   list(pk), types_pair, position, ts, None if tx_id is None else str(tx_id), tx_seq, 0,
                   None, None)]
