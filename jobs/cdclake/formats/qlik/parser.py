"""The ``qlik-json`` parser and the template both Qlik parsers share (see :mod:`cdclake.formats.qlik` for the document).

Implements Qlik Replicate's "Metadata and data messages" and "The Replicate envelope" on the
parser template (:class:`cdclake.formats.base.FormatParser`): :class:`QlikParser` reads a data
message with the stored metadata (:class:`cdclake.record.SchemaAwareParser`); its subclasses read
the envelope, as JSON (:class:`QlikJsonParser`) or Avro (:class:`~cdclake.formats.qlik.avro.QlikAvroParser`).
"""
from __future__ import annotations

import abc
import json
from typing import Any, Iterator, Mapping, Optional, Sequence

from cdclake.formats.base import Event, FormatParser, learnt_dict
from cdclake.formats.columnar import JSON
from cdclake.formats.fields import integer
from cdclake.formats.json_values import load_json
from cdclake.formats.options import key_delete_image
from cdclake.formats.qlik.schema import (DATA, ENVELOPE_SCHEMA, MAGIC, METADATA, QlikTable, TransactionMark,
                                         _Envelope, read_metadata, table_from_entry)
from cdclake.formats.qlik.values import transaction_last_event, value_text
from cdclake.formats.text import parse_timestamp, utc_ms
from cdclake.positions import as_element
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult, SchemaAwareParser, SchemaEntry
from cdclake.formats.qlik.schema import JSON_FORMAT, OPS, REFRESH_POSITION, _DELETE_HINT
from cdclake.formats.qlik.fast import fast_group, fast_members

_NEVER_SEEN = "was never seen (its metadata message has not been landed): rerun this hour after it lands"
#: The JSON text of :data:`ENVELOPE_SCHEMA` the Avro envelope is read with (parsed once per parser).
_ENVELOPE_TEXT = json.dumps(ENVELOPE_SCHEMA)
_JSON_MAGIC = MAGIC.decode()


class _Images:
    """How one data message's images are read: the metadata's columns, typed by it, present only
    when ``columnMask`` sets them (None: all); other columns typed by ``column_types`` (else
    ``string``), added to ``types``."""

    def __init__(self, fmt: str, table: QlikTable, present: Optional[list], extra_types: Mapping[str, str]):
        self.fmt, self.known, self.extra_types = fmt, table.by_name, extra_types
        self.present = None if present is None else set(present)
        self.types = {c.name: c.ctype for c in table.columns}

    def image(self, obj: Any, field_name: str) -> Optional[dict]:
        """Canonical text of an image (None stays None). Raises :class:`ParseError` naming
        ``field_name`` (not an object) or ``field_name.column`` (a value that does not fit)."""
        if obj is None:
            return None
        if not isinstance(obj, Mapping):
            raise ParseError(self.fmt, f"image is a {type(obj).__name__}, not an object", field_name)
        known, present, types = self.known, self.present, self.types
        out: dict[str, Optional[str]] = {}
        for col, value in obj.items():
            col = str(col)
            if col in known:
                if present is not None and col not in present:
                    continue  # not replicated: absent
                ctype = known[col].ctype
            else:
                ctype = self.extra_types.get(col, "string")
                types.setdefault(col, ctype)
            try:
                out[col] = value_text(value, ctype)
            except (ValueError, TypeError, ArithmeticError) as exc:
                raise ParseError(self.fmt, f"cannot read {value!r} as {ctype}: {exc}", f"{field_name}.{col}") from None
        return out


class QlikParser(FormatParser, SchemaAwareParser):
    """Shared reading of both Qlik envelopes; subclasses read the envelope (:meth:`_envelope`).

    ``QlikParser(options, entries)``: ``options`` as every format's plus ``table`` (``"schema.table"``
    or ``"table"``, for JSON topics of one table; ``ValueError`` when malformed); ``entries`` the
    stored :class:`SchemaEntry` rows the data messages are decoded with (see :meth:`with_schemas`).
    The row steps read the headers first (``changeSequence`` ... ``transactionLastEvent``), then the
    masks and types, the key, and last the images.
    """

    format_name = ""
    STEPS = ("position", "table", "column_types", "primary_key", "images")
    LEARNT = {"_cache": learnt_dict, "_fast_times": learnt_dict}

    def __init__(self, options: Optional[Mapping[str, Any]] = None, entries: Sequence[SchemaEntry] = ()):
        self._raw_options = dict(options or {})
        super().__init__(self._raw_options)
        table_opt = self._raw_options.get("table")
        if table_opt is not None and (not isinstance(table_opt, str) or not table_opt.strip()):
            raise ValueError(f"sources[].options.table must be 'schema.table' or 'table', got {table_opt!r}")
        self.default_table: Optional[tuple] = None
        if table_opt:
            parts = table_opt.strip().rsplit(".", 1)
            self.default_table = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        self.entries: dict[str, SchemaEntry] = {}
        for e in entries:
            self.entries[str(e.schema_id)] = e

    # -- SchemaAwareParser -----------------------------------------------------------------------

    def schema_entries(self, record: KafkaRecord) -> list:
        """``[SchemaEntry]`` for a metadata (``MD``) message; ``[]`` for anything else, bad input included."""
        try:
            env = self._envelope(record)
            if env is None or env.kind != METADATA:
                return []
            meta = self._metadata(env)
        except ParseError:
            return []
        return [SchemaEntry(self.format_name, meta.schema_id, meta.table_version, meta.schema, meta.table,
                            meta.definition())]

    def with_schemas(self, entries: Sequence[SchemaEntry]):
        """A parser with this one's options that decodes data messages with ``entries`` (added to
        the entries it already holds; an entry with the same ``schema_id`` replaces the older)."""
        return type(self)(self._raw_options, list(self.entries.values()) + list(entries))

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for data
        messages (``DT``) whose table definition the parser holds (found as :meth:`parse` finds it:
        ``messageSchemaId``; ``qlik-avro``: an embedded ``messageSchema``; ``qlik-json``:
        ``externalSchemaId`` or the table's name), with ``headers`` an object whose ``operation`` is
        REFRESH, INSERT, UPDATE or DELETE. The records of each table definition whose image (``data``; a
        DELETE's ``data``, else ``beforeData``) names the same columns in the same order are converted
        column by column with :func:`~cdclake.formats.qlik.values.value_converter` (the converters of
        :func:`value_text`); an UPDATE's ``beforeData`` must name those columns too. The envelope and
        the data message are decoded with :data:`cdclake.formats.columnar.JSON` (``qlik-json``) or the
        parser's own Avro decoding (``qlik-avro``); the table lookup, masks, key, delete image, names,
        position, timestamp and transaction headers go through the functions :meth:`parse` calls.

        Left to :meth:`parse` (None): metadata messages, tombstones, a ``message`` given as JSON
        text, a data message whose definition is not held, and anything :meth:`parse` refuses or
        reads otherwise: an envelope or header of another shape, a malformed mask, a value a
        converter refuses (even in a column the mask leaves out), an image whose columns differ,
        a key column absent or null, a refused name."""
        return fast_members(self, records)

    def fast_group(self, records: list[KafkaRecord], key: Any, members: list[tuple], out: list) -> None:
        """The changes of one table definition's members (see :meth:`fast_members`) into ``out``."""
        fast_group(self, records, key, members, out)

    def _fast_message(self, record: KafkaRecord, memo: dict) -> Optional[tuple]:
        """``(QlikTable, data message)`` of a data message the fast path reads, or None (raises
        for what :meth:`parse` refuses); ``memo`` is kept for one batch."""
        raise NotImplementedError

    # -- the template's steps ------------------------------------------------------------------

    def decode(self, record: KafkaRecord) -> Optional[Event]:
        """The envelope; a data message decoded with its metadata (``event.schema``, a
        :class:`QlikTable`); a metadata message has its envelope as ``event.message``."""
        env = self._envelope(record)
        if env is None:
            return None
        if env.kind == METADATA:
            return Event(record, env)
        table, message = self._data(env)
        return Event(record, message, schema=table)

    def control(self, event: Event) -> Optional[ParseResult]:
        """A metadata message is a ``metadata`` control record; else ``headers.operation``."""
        if event.schema is None:
            meta = self._metadata(event.message)
            return ControlRecord("metadata", self.format_name, None, meta.schema, meta.table,
                                 detail=f"schemaId {meta.schema_id} tableVersion {meta.table_version}")
        headers = event.source = event.message.get("headers")
        if not isinstance(headers, Mapping):
            raise ParseError(self.format_name, "data message without headers", "headers")
        operation = headers.get("operation")
        if not isinstance(operation, str) or not operation:
            raise ParseError(self.format_name, "missing operation", "headers.operation")
        event.op = OPS.get(operation.upper())
        if event.op is None:
            raise ParseError(self.format_name, f"unknown operation {operation!r} (expected REFRESH, INSERT, UPDATE "
                                               "or DELETE)", "headers.operation")
        return None

    def changes(self, event: Event) -> list[ChangeRecord]:
        """The row steps; a value of an unexpected shape is a :class:`ParseError` naming ``message``."""
        try:
            return super().changes(event)
        except ParseError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
            raise ParseError(self.format_name, f"malformed data message ({exc})", "message") from None

    def position(self, event: Event) -> None:
        """``(changeSequence,)`` (REFRESH: :data:`REFRESH_POSITION`), ``timestamp``, ``transactionId``,
        ``transactionEventCounter`` and ``transactionLastEvent``."""
        fmt, headers = self.format_name, event.source
        if event.op == "snapshot":
            event.position = REFRESH_POSITION
        else:
            seq = headers.get("changeSequence")
            if seq is None or seq == "":
                raise ParseError(fmt, f"{headers.get('operation')} record without a change sequence",
                                 "headers.changeSequence")
            try:
                event.position = (as_element(seq, "changeSequence"),)
            except ValueError as exc:
                raise ParseError(fmt, str(exc), "headers.changeSequence") from None
        event.ts_ms = self._timestamp_ms(headers.get("timestamp"))
        tx_id = headers.get("transactionId")
        event.tx_id = (tx_id if tx_id is None or isinstance(tx_id, str) else str(tx_id)) or None
        event.tx_seq = integer(fmt, headers.get("transactionEventCounter"), "headers.transactionEventCounter", None)
        try:
            event.tx_last = transaction_last_event(headers)
        except ValueError as exc:
            raise ParseError(fmt, str(exc), "headers.transactionLastEvent") from None

    def table(self, event: Event) -> None:
        """The metadata's schema and table (no database)."""
        event.schema_name, event.table = event.schema.schema, event.schema.table

    def column_types(self, event: Event) -> None:
        """``columnMask`` (the replicated columns) and ``changeMask`` (checked), the metadata's types."""
        table, headers, fmt = event.schema, event.source, self.format_name
        try:
            present = table.columns_in(headers.get("columnMask"))
        except ValueError as exc:
            raise ParseError(fmt, str(exc), "headers.columnMask") from None
        try:
            table.columns_in(headers.get("changeMask"))
        except ValueError as exc:
            raise ParseError(fmt, str(exc), "headers.changeMask") from None
        event.plan = images = _Images(fmt, table, present, self.options.column_types(None, table.schema, table.table))
        event.types = images.types

    def primary_key(self, event: Event) -> None:
        """Configured, else the metadata's ``primaryKeyPosition`` columns."""
        table = event.schema
        override = self.options.key_override(None, table.schema, table.table)
        event.primary_key = list(override or table.primary_key)
        if not event.primary_key:
            raise ParseError(self.format_name, f"table {table.table!r} has no primary key in its metadata "
                             "(primaryKeyPosition 0 everywhere): set sources[].primary_key or sources[].primary_keys",
                             "primary_key")

    def images(self, event: Event) -> None:
        """INSERT/REFRESH: after = ``data``; UPDATE: after = ``data``, before = ``beforeData``;
        DELETE: before = ``data`` (else ``beforeData``), which must hold the key."""
        fmt, op, image, message = self.format_name, event.op, event.plan.image, event.message
        data, before_data = message.get("data"), message.get("beforeData")
        operation = event.source.get("operation")
        if op in ("insert", "snapshot"):
            if data is None:
                raise ParseError(fmt, f"{operation} record without data", "data")
            event.after = image(data, "data")
        elif op == "update":
            if data is None:
                raise ParseError(fmt, "UPDATE record without data", "data")
            event.after = image(data, "data")
            event.before = image(before_data, "beforeData")
        else:
            row, where = (data, "data") if data is not None else (before_data, "beforeData")
            if row is None:
                raise ParseError(fmt, "DELETE record without data or beforeData", "data")
            event.before = key_delete_image(fmt, event.primary_key, image(row, where), None, where, _DELETE_HINT)

    def _timestamp_ms(self, value: Any) -> Optional[int]:
        if value is None or value == "":
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if not isinstance(value, str):
            raise ParseError(self.format_name, f"{value!r} is not a timestamp", "headers.timestamp")
        try:
            ts = parse_timestamp(value)
        except ValueError as exc:
            raise ParseError(self.format_name, str(exc), "headers.timestamp") from None
        return None if ts is None else utc_ms(ts)

    def read_transaction(self, record: KafkaRecord) -> Optional[TransactionMark]:
        """The transaction headers of a data message (:class:`TransactionMark`), for holding back
        transactions whose last event (``transactionLastEvent`` true) has not arrived yet.

        None for metadata messages, tombstones and full-load (REFRESH) records. Raises
        :class:`ParseError` as :meth:`parse` does for a message it cannot read.
        """
        env = self._envelope(record)
        if env is None or env.kind == METADATA:
            return None
        _table, message = self._data(env)
        headers = message.get("headers")
        if not isinstance(headers, Mapping):
            raise ParseError(self.format_name, "data message without headers", "headers")
        if str(headers.get("operation") or "").upper() == "REFRESH":
            return None
        try:
            last = transaction_last_event(headers)
        except ValueError as exc:
            raise ParseError(self.format_name, str(exc), "headers.transactionLastEvent") from None
        return TransactionMark(headers.get("transactionId") or None,
                               integer(self.format_name, headers.get("transactionEventCounter"),
                                       "headers.transactionEventCounter", None), last)

    # -- envelope ----------------------------------------------------------------------------

    @abc.abstractmethod
    def _envelope(self, record: KafkaRecord) -> Optional[_Envelope]:
        """The record's envelope (JSON or Avro), or None for a Kafka tombstone."""

    def _check_kind(self, kind: Any) -> str:
        if kind not in (METADATA, DATA):
            raise ParseError(self.format_name, f"unknown message type {kind!r} (expected MD or DT)", "type")
        return kind

    @abc.abstractmethod
    def _metadata(self, env: _Envelope) -> QlikTable:
        """The table definition of a metadata message."""

    @abc.abstractmethod
    def _data(self, env: _Envelope) -> tuple:
        """``(QlikTable, data message as a dict)``."""

    # -- schema lookup -------------------------------------------------------------------------

    def _table(self, schema_id: str) -> QlikTable:
        key = ("id", schema_id)
        if key not in self._cache:
            entry = self.entries.get(schema_id)
            if entry is None:
                raise ParseError(self.format_name, f"schema {schema_id} {_NEVER_SEEN}", "messageSchemaId")
            self._cache[key] = table_from_entry(self.format_name, entry)
        return self._cache[key]

    def _table_by_name(self, schema: Optional[str], table: str, version: Optional[int]) -> QlikTable:
        candidates = [e for e in self.entries.values() if e.source_table == table
                      and (schema is None or e.source_schema == schema)
                      and (version is None or e.table_version == version)]
        if not candidates:
            label = f"{schema}.{table}" if schema else table
            if version is not None:
                label += f" tableVersion {version}"
            raise ParseError(self.format_name, f"schema {label} {_NEVER_SEEN}", "messageSchemaId")
        best = max(candidates, key=lambda e: (e.table_version if e.table_version is not None else -1, e.schema_id))
        return self._table(best.schema_id)


class QlikJsonParser(QlikParser):
    """Parser of ``qlik-json`` records: ``QlikJsonParser(options).with_schemas(entries).parse(rec)``.

    The Kafka value is the Replicate envelope as JSON (``magic`` ``"atMSG"``, ``type``,
    ``headers``, ``messageSchemaId``, ``messageSchema``, ``message`` as a JSON object). See the
    module docstring for the lookup rule of a data message's metadata and for results and errors.
    """

    format_name = JSON_FORMAT

    @staticmethod
    def may_hold_schema(value: Optional[bytes]) -> bool:
        """A metadata message's envelope has ``"type": "MD"``: its UTF-8 text holds ``"MD"``, or
        escapes (``\\u004D``) that may spell it."""
        return bool(value) and (b'"MD"' in value or b"\\u" in value)

    def _envelope(self, record: KafkaRecord) -> Optional[_Envelope]:
        if not record.value:
            return None
        env = load_json(JSON_FORMAT, record.value)
        if env.get("magic") != MAGIC.decode():
            raise ParseError(JSON_FORMAT, f"magic is {env.get('magic')!r}, not 'atMSG': not a Replicate envelope",
                             "magic")
        kind = self._check_kind(env.get("type"))
        message = env.get("message")
        if isinstance(message, str):
            try:
                message = json.loads(message)
            except ValueError:
                raise ParseError(JSON_FORMAT, "message text is not JSON", "message") from None
            except RecursionError:
                raise ParseError(JSON_FORMAT, "message text is JSON nested too deeply to read", "message") from None
        if not isinstance(message, dict):
            raise ParseError(JSON_FORMAT, f"message is a {type(message).__name__}, not an object", "message")
        sid = env.get("messageSchemaId")
        return _Envelope(kind, sid if isinstance(sid, str) and sid else None, env.get("messageSchema"), message)

    def _metadata(self, env: _Envelope) -> QlikTable:
        return read_metadata(JSON_FORMAT, env.message)

    def _fast_message(self, record: KafkaRecord, memo: dict) -> Optional[tuple]:
        env = JSON.decode(record.value)
        if type(env) is not dict or env.get("magic") != _JSON_MAGIC or env.get("type") != DATA:
            return None
        message = env.get("message")
        if type(message) is not dict:
            return None
        sid = env.get("messageSchemaId")
        if not (type(sid) is str and sid):
            return self._data(_Envelope(DATA, None, env.get("messageSchema"), message))
        table = memo.get(sid)
        if table is None:
            table = memo[sid] = self._table(sid)
        return table, message

    def _data(self, env: _Envelope) -> tuple:
        msg = env.message
        headers = msg.get("headers") if isinstance(msg.get("headers"), Mapping) else {}
        if env.schema_id:
            return self._table(env.schema_id), msg
        external = headers.get("externalSchemaId")
        if isinstance(external, str) and external:
            return self._table(external), msg
        schema, table = msg.get("schema"), msg.get("table")
        if not (isinstance(table, str) and table) and self.default_table:
            schema, table = self.default_table
        if isinstance(table, str) and table:
            version = msg.get("tableVersion", headers.get("tableVersion"))
            version = integer(JSON_FORMAT, version, "tableVersion", None)
            return self._table_by_name(schema if isinstance(schema, str) and schema else None, table, version), msg
        raise ParseError(JSON_FORMAT, "data message names no schema: it has no messageSchemaId, externalSchemaId "
                                      "or table name (publish metadata messages, or set sources[].options.table)",
                         "messageSchemaId")
