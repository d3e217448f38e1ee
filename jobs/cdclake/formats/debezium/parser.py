"""``debezium-json``: Debezium change events in JSON, with or without the Kafka Connect schema.

Implements:

- Debezium connector documentation (MySQL, PostgreSQL, Oracle, SQL Server): the change event
  envelope (``before``, ``after``, ``source``, ``op``, ``ts_ms``, ``transaction``), the ``source``
  block of each connector (``file``/``pos``/``row``; ``lsn``/``sequence``/``txId``; ``scn``;
  ``commit_lsn``/``change_lsn``/``event_serial_no``), transaction metadata events, schema change
  events, and the Kafka Connect / Debezium logical types (:mod:`cdclake.formats.connect`).
- "Lindorm: Debezium Format V2.0", a declared variant chosen per record by its ``source`` block
  (:mod:`cdclake.formats.debezium.lindorm`): ``source.namespace``, ``"schema": {}``, the column delete and
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

from typing import Any, Iterator, Optional

from cdclake.formats.base import Event, learnt_dict
from cdclake.formats.connect import (ConnectJsonParser, key_fields)
from cdclake.formats.fields import kafka_key_text, name_text, optional_element, table_name
from cdclake.formats.json_values import read_key
from cdclake.formats.debezium.lindorm import LINDORM, is_lindorm
from cdclake.formats.options import key_delete_image, resolve_primary_key
from cdclake.formats.text import convert_image
from cdclake.record import ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.formats.debezium.plan import DEBEZIUM, FORMAT, NEW_KEY_HEADER, OLD_KEY_HEADER, OPS, _DELETE_HINT, _DELETE_HINT_PG, _TablePlan, _control, _key_value_text, header_key, source_position
from cdclake.formats.columnar import envelope_payloads
from cdclake.formats.debezium.fast import fast_group, fast_members

class DebeziumJsonParser(ConnectJsonParser):
    """Parser of ``debezium-json`` records: ``DebeziumJsonParser(options).parse(KafkaRecord)``.

    Returns one :class:`ChangeRecord` in a list, or a :class:`ControlRecord` for a tombstone
    (value None or empty), a heartbeat, a transaction BEGIN/END event, a schema change event or
    an ``op: "m"`` message (``metadata``). Raises :class:`ParseError` for unreadable JSON, a
    missing or unknown ``op`` (field ``op``), a missing ``source.table``, a value that does not
    fit its schema, no resolvable primary key (field ``primary_key``), or a delete whose key
    cannot be found in its ``before`` image nor in the Kafka key (field ``before``). Each record
    is read as its :class:`DebeziumVariant`: Lindorm's (:mod:`cdclake.formats.debezium.lindorm`) or
    Debezium's own.
    """

    format_name = FORMAT
    LEARNT = {"_fast_keys": learnt_dict, "_fast_names": learnt_dict}

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for change events whose
        envelope the value reader has met (a record read whole first teaches it), of a known
        shape: a payload of ``before``, ``after``, ``source``, ``op`` (c, u, d, r), ``ts_ms``
        (``ts_us``, ``ts_ns``) and ``transaction`` only, a non-Lindorm ``source`` with text names,
        images holding exactly the envelope's columns in its order, a Kafka key whose columns are
        the primary key (or a configured key). Each image column is converted over the batch by
        the table plan's converters; the key, the delete image, the position and the names go
        through the functions :meth:`parse` calls. Anything else (and any value a converter
        refuses) gives None: :meth:`parse` reads that record. Plan key ``(envelope id, db,
        schema, table)``; member ``(index, payload, source, Connect schema)``."""
        return fast_members(self, records, envelope_payloads(self._reader, records))

    def fast_group(self, records: list[KafkaRecord], key: Any, members: list[tuple], out: list) -> None:
        """The changes of one plan's members (see :meth:`fast_members`) into ``out``."""
        fast_group(self, records, key, members, out)

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
