"""Debezium's change events: ``debezium-json``, ``debezium-avro`` and ``debezium-jsonschema``.

The package: :mod:`~cdclake.formats.debezium.parser` (``debezium-json``,
:class:`DebeziumJsonParser`, with Lindorm's declared variant in
:mod:`~cdclake.formats.debezium.lindorm`), :mod:`~cdclake.formats.debezium.avro` (``debezium-avro``
through a schema registry: the Confluent wire format and Avro) and
:mod:`~cdclake.formats.debezium.jsonschema` (``debezium-jsonschema``); each module's docstring
cites the documents it implements. The three formats' :data:`FORMATS` entries are here.
"""
from __future__ import annotations

from cdclake.formats.base import Format
from cdclake.formats.debezium.avro import FORMAT as AVRO_FORMAT, DebeziumAvroParser, registry_client, wire_parts, \
    wire_value
from cdclake.formats.debezium.jsonschema import FORMAT as JSONSCHEMA_FORMAT, DebeziumJsonSchemaParser
from cdclake.formats.debezium.parser import FORMAT, DebeziumJsonParser
from cdclake.formats.probe import Probe, confluent_body

__all__ = ["AVRO_FORMAT", "FORMAT", "FORMATS", "JSONSCHEMA_FORMAT", "DebeziumAvroParser", "DebeziumJsonParser",
           "DebeziumJsonSchemaParser", "is_debezium", "is_debezium_avro", "is_debezium_jsonschema",
           "registry_client", "wire_parts", "wire_value"]

#: Debezium's schema change fields and heartbeat fields.
_DDL = ("ddl", "historyRecord", "tableChanges")
_HEARTBEAT = {"ts_ms", "serverName", "HEARTBEAT_IDENTIFIER", "message_type", "message_version"}


def is_debezium(p: Probe) -> bool:
    """A Kafka Connect payload (enveloped or bare) that is a change (``op`` and a ``source``
    block), a transaction marker (``status`` ``BEGIN``/``END``), a schema change (``ddl``,
    ``historyRecord``, ``tableChanges``) or a heartbeat."""
    pl = p.payload
    if pl is None:
        return False
    if "op" in pl and isinstance(pl.get("source"), dict):
        return True
    if pl.get("status") in ("BEGIN", "END") and "id" in pl:
        return True
    if any(k in pl for k in _DDL):
        return True
    return bool(pl) and set(pl) <= _HEARTBEAT and ("serverName" in pl or "message_type" in pl
                                                   or "HEARTBEAT_IDENTIFIER" in pl)


def is_debezium_avro(p: Probe) -> bool:
    """Confluent's wire format whose body does not start with ``{`` (a Debezium value's first Avro
    byte is a union index, 0 or 2)."""
    body = confluent_body(p)
    return body is not None and body[:1] != b"{"


def is_debezium_jsonschema(p: Probe) -> bool:
    """Confluent's wire format whose body starts with ``{`` (JsonSchemaConverter's JSON)."""
    body = confluent_body(p)
    return body is not None and body[:1] == b"{"


_CONNECTORS = "Debezium connector documentation (MySQL, PostgreSQL, Oracle, SQL Server): the change event envelope"
FORMATS = (
    Format(FORMAT, DebeziumJsonParser, _CONNECTORS + "; Lindorm: \"Debezium Format V2.0\"", is_debezium,
           "a Kafka Connect payload (enveloped or bare) that is a change (``op`` and a ``source`` block), a "
           "transaction marker, a schema change or a heartbeat, and is not Arcion's, CDL's or DataWorks'",
           yields_to=("aliyun-json", "arcion-json", "cdl-json")),
    Format(AVRO_FORMAT, DebeziumAvroParser, _CONNECTORS + "; Debezium \"Avro serialization\"; Confluent Schema "
           "Registry \"Wire format\"", is_debezium_avro,
           "Confluent's wire format (a ``0`` byte, a 4-byte schema id) whose body does not start with ``{``, and "
           "not a whole DTS Avro record", yields_to=("dts-avro",)),
    Format(JSONSCHEMA_FORMAT, DebeziumJsonSchemaParser, _CONNECTORS + "; Confluent Schema Registry \"JSON Schema "
           "serializer\"", is_debezium_jsonschema,
           "Confluent's wire format whose body starts with ``{`` (JsonSchemaConverter's JSON)"),
)
