"""The ``qlik-avro`` parser: Qlik Replicate's envelope and data messages in Avro binary encoding.

:class:`QlikAvroParser` reads the envelope (no Confluent framing) with the envelope schema, a
metadata message with the Avro schema it carries, and a data message with its metadata's
``dataSchema`` (fastavro ``schemaless_reader``, logical types applied); every other step is
:class:`~cdclake.formats.qlik.parser.QlikParser`'s (see :mod:`cdclake.formats.qlik` for the document).
"""
from __future__ import annotations

import hashlib
import io
import json
from typing import Any, Optional

from cdclake.formats.qlik.schema import (DATA, ENVELOPE_SCHEMA, MAGIC, QlikTable, _Envelope, read_metadata)
from cdclake.record import KafkaRecord, ParseError
from cdclake.formats.qlik.schema import AVRO_FORMAT
from cdclake.formats.qlik.parser import QlikParser, _ENVELOPE_TEXT, _NEVER_SEEN

class QlikAvroParser(QlikParser):
    """Parser of ``qlik-avro`` records: ``QlikAvroParser(options).with_schemas(entries).parse(rec)``.

    The Kafka value is the Replicate envelope (:data:`ENVELOPE_SCHEMA`) in Avro binary encoding.
    Metadata messages are decoded with their embedded ``messageSchema``; data messages with the
    ``dataSchema`` of the metadata named by ``messageSchemaId``. Truncated or trailing bytes, a
    wrong magic or an undecodable message raise :class:`ParseError` (``value``, ``magic``,
    ``message``, ``messageSchema``).
    """

    format_name = AVRO_FORMAT

    @staticmethod
    def may_hold_schema(value: Optional[bytes]) -> bool:
        """A metadata message's envelope begins with the magic and the type ``MD``: Avro's
        length 2 of the string (the zig-zag varint byte ``0x04``) and its two bytes. A length
        written in more than one byte (a varint Avro readers take, though writers do not make
        it) is let through."""
        if not value or len(value) < 6 or value[:5] != MAGIC:
            return False
        return value[5:8] == b"\x04MD" or value[5] >= 0x80

    def _parsed(self, key: tuple, schema_text: str, field_name: str):
        from fastavro import parse_schema

        if key not in self._cache:
            try:
                self._cache[key] = parse_schema(json.loads(schema_text))
            except Exception as exc:  # fastavro raises several types for a bad schema
                raise ParseError(AVRO_FORMAT, f"not a usable Avro schema ({type(exc).__name__}: {exc})",
                                 field_name) from None
        return self._cache[key]

    def _decode(self, data: bytes, schema, field_name: str) -> Any:
        from fastavro import schemaless_reader

        buf = io.BytesIO(data)
        try:
            obj = schemaless_reader(buf, schema, None)
        except Exception as exc:  # truncated or corrupt Avro: EOFError, struct.error, ValueError, ...
            raise ParseError(AVRO_FORMAT, f"not decodable Avro ({type(exc).__name__}: {exc or 'truncated'})",
                             field_name) from None
        if buf.tell() != len(data):
            raise ParseError(AVRO_FORMAT, f"{len(data) - buf.tell()} trailing byte(s) after the Avro record",
                             field_name)
        return obj

    def _envelope(self, record: KafkaRecord) -> Optional[_Envelope]:
        if not record.value:
            return None
        value = bytes(record.value)
        if value[:5] != MAGIC:
            raise ParseError(AVRO_FORMAT, f"magic is {value[:5]!r}, not b'atMSG': not a Replicate envelope", "magic")
        env = self._decode(value, self._parsed(("envelope",), json.dumps(ENVELOPE_SCHEMA), "value"), "value")
        kind = self._check_kind(env.get("type"))
        return _Envelope(kind, env.get("messageSchemaId") or None, env.get("messageSchema") or None, env["message"])

    def _metadata(self, env: _Envelope) -> QlikTable:
        if not env.schema_text:
            raise ParseError(AVRO_FORMAT, "metadata message without an embedded messageSchema cannot be decoded",
                             "messageSchema")
        digest = hashlib.sha1(env.schema_text.encode("utf-8")).hexdigest()
        schema = self._parsed(("md", digest), env.schema_text, "messageSchema")
        return read_metadata(AVRO_FORMAT, self._decode(env.message, schema, "message"))

    def _data(self, env: _Envelope) -> tuple:
        if env.schema_id:
            table = self._table(env.schema_id)
        elif env.schema_text:
            table = self._table_by_data_schema(env.schema_text)
        else:
            raise ParseError(AVRO_FORMAT, "data message names no schema (neither messageSchemaId nor messageSchema)",
                             "messageSchemaId")
        if not table.data_schema:
            raise ParseError(AVRO_FORMAT, f"metadata of schema {table.schema_id} has no dataSchema", "messageSchemaId")
        schema = self._parsed(("dt", table.schema_id), table.data_schema, "messageSchemaId")
        message = self._decode(env.message, schema, "message")
        if not isinstance(message, dict):
            raise ParseError(AVRO_FORMAT, "data message is not an Avro record", "message")
        return table, message

    def _fast_message(self, record: KafkaRecord, memo: dict) -> Optional[tuple]:
        value = record.value
        if value[:5] != MAGIC:
            return None
        schema = memo.get(None)
        if schema is None:
            schema = memo[None] = self._parsed(("envelope",), _ENVELOPE_TEXT, "value")
        env = self._decode(value, schema, "value")
        if env.get("type") != DATA:
            return None
        return self._data(_Envelope(DATA, env.get("messageSchemaId") or None, env.get("messageSchema") or None,
                                    env["message"]))

    def _table_by_data_schema(self, schema_text: str) -> QlikTable:
        try:
            wanted = json.loads(schema_text)
        except (ValueError, RecursionError):
            raise ParseError(AVRO_FORMAT, "messageSchema is not JSON (or nested too deeply to read)",
                             "messageSchema") from None
        for sid in sorted(self.entries):
            table = self._table(sid)
            try:
                if table.data_schema and json.loads(table.data_schema) == wanted:
                    return table
            except ValueError:
                continue
        raise ParseError(AVRO_FORMAT, f"schema embedded in the message {_NEVER_SEEN}", "messageSchemaId")
