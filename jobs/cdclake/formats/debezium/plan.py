"""What the per-record parser and the fast path of ``debezium-json`` share: the table plan of one
envelope schema and table, the record variants (Debezium's own, Lindorm's), the source position of
each connector, control records and the Kafka key's columns (see :mod:`cdclake.formats.debezium.parser`).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional

from cdclake.formats.base import ColumnPlan
from cdclake.formats.connect import (TOAST_ARRAYS, TOAST_PLACEHOLDERS, column_converter,
                                     connect_text, connect_type, struct_fields)
from cdclake.formats.fields import element
from cdclake.formats.options import SourceOptions
from cdclake.formats.text import ABSENT, coerce_text
from cdclake.positions import binlog_file_number, pg_lsn
from cdclake.record import ControlRecord, KafkaRecord, ParseError
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


class _TablePlan(ColumnPlan):
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
        super().__init__()

    def make_converter(self, col: str) -> Callable[[Any], Any]:
        """The converter of column ``col`` (JSON value → canonical text), TOAST placeholders not
        handled: the column's Connect schema's, else its canonical type's, else :func:`to_text`."""
        return column_converter(self.col_schemas, self.types, col)

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
    """How a record of Debezium's own connectors is read; :data:`cdclake.formats.debezium.lindorm.LINDORM`
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
