"""Rendering a simulated history as Debezium MySQL change events through Confluent's AvroConverter
(:func:`debezium_avro`) and JsonSchemaConverter (:func:`debezium_jsonschema`).

:func:`debezium_avro` renders the same events as :func:`cdclake.sim.render.debezium_json` (one
message per row change, a tombstone after each delete, the initial snapshot as op ``r``, the
same keys, partitions, timestamps and positions), but each key and value is an Avro record in
the Confluent Schema Registry wire format (magic byte 0, 4-byte big-endian schema id, Avro
binary): Debezium documentation "Avro serialization"; Confluent documentation "Schema Registry
Wire format". The Avro schemas are made from the events' Kafka Connect schemas as Confluent's
``AvroData.fromConnectSchema`` makes them (:func:`avro_schema`: ``connect.name``,
``connect.version``, ``connect.parameters``, ``connect.type``, Avro ``logicalType`` ``decimal``
with ``precision``/``scale``, optional fields as ``["null", T]`` with default null, a record name
defined once and referenced after) and registered with ``confluent_kafka.schema_registry`` under
the subjects ``<topic>-key`` and ``<topic>-value`` of the connector's topic per table
(``<server>.<database>.<table>``), in the registry at ``registry_url`` (default:
:func:`cdclake.sim.registry.registry_url`).

:func:`debezium_jsonschema` renders the same events with JSON Schemas (:func:`json_schema`, as
Confluent's ``JsonSchemaData.fromConnectSchema`` writes them: ``object``/``properties`` with
``title`` and ``connect.index``, ``oneOf`` null for optional fields, ``connect.type``,
``connect.parameters``) and the payload as the JSON document, Connect decimals as JSON numbers.
"""
from __future__ import annotations

import base64
import io
import json
from decimal import Decimal
from typing import Any, Mapping, Optional, Sequence

import fastavro

from cdclake.sim.model import DATABASE, Table, Transaction
from cdclake.sim.registry import registry_url as default_registry_url
from cdclake.sim.render import Message, debezium_json

_CONNECT_AVRO = {"int32": "int", "int64": "long", "float32": "float", "float": "float", "float64": "double",
                 "double": "double", "boolean": "boolean", "string": "string", "bytes": "bytes"}
#: Connect logical types Confluent's AvroData writes with an Avro logical type.
_AVRO_LOGICAL = {"org.apache.kafka.connect.data.Date": "date", "org.apache.kafka.connect.data.Time": "time-millis",
                 "org.apache.kafka.connect.data.Timestamp": "timestamp-millis"}
DECIMAL = "org.apache.kafka.connect.data.Decimal"


def avro_schema(schema: Mapping[str, Any], defined: Optional[set] = None) -> Any:
    """The Avro schema (JSON) of a Kafka Connect schema, as Confluent's AvroData writes it (see the
    module docstring). ``defined``: the full names of the records already written (a record met
    again is referenced by name)."""
    defined = set() if defined is None else defined
    ctype = schema.get("type")
    name = schema.get("name")
    if ctype == "struct":
        full = name or "io.confluent.connect.avro.ConnectDefault"
        if full in defined:
            out: Any = full
        else:
            defined.add(full)
            namespace, _, short = full.rpartition(".")
            out = {"type": "record", "name": short, **({"namespace": namespace} if namespace else {}),
                   "fields": [_avro_field(f, defined) for f in schema.get("fields") or ()]}
            if name:
                out["connect.name"] = name
    elif ctype == "array":
        out = {"type": "array", "items": avro_schema(schema["items"], defined)}
    elif ctype == "map":
        out = {"type": "map", "values": avro_schema(schema["values"], defined)}
    else:
        base = "int" if ctype in ("int8", "int16") else _CONNECT_AVRO[ctype]
        out = {"type": base}
        if ctype in ("int8", "int16"):
            out["connect.type"] = ctype
        params = schema.get("parameters")
        if name == DECIMAL:
            out.update(scale=int(params["scale"]), precision=int(params.get("connect.decimal.precision", 64)))
        if schema.get("version") is not None:
            out["connect.version"] = schema["version"]
        if params:
            out["connect.parameters"] = dict(params)
        if schema.get("default") is not None:
            out["connect.default"] = schema["default"]
        if name:
            out["connect.name"] = name
        if name == DECIMAL:
            out["logicalType"] = "decimal"
        elif name in _AVRO_LOGICAL:
            out["logicalType"] = _AVRO_LOGICAL[name]
        if len(out) == 1:
            out = base
    return ["null", out] if schema.get("optional") else out


def _avro_field(f: Mapping[str, Any], defined: set) -> dict:
    out = {"name": f["field"], "type": avro_schema(f, defined)}
    if f.get("optional"):
        out["default"] = None
    elif f.get("default") is not None:
        out["default"] = f["default"]
    return out


def avro_datum(value: Any, schema: Mapping[str, Any]) -> Any:
    """A Connect JSON value as the Avro datum of :func:`avro_schema` (Base64 ``bytes`` decoded)."""
    if value is None:
        return None
    ctype = schema.get("type")
    if ctype == "struct":
        return {f["field"]: avro_datum(value.get(f["field"]), f) for f in schema.get("fields") or ()}
    if ctype == "bytes":
        return base64.b64decode(value)
    if ctype == "array":
        return [avro_datum(v, schema["items"]) for v in value]
    if ctype == "map":
        return {k: avro_datum(v, schema["values"]) for k, v in value.items()}
    return value


class AvroWriter:
    """``AvroWriter(registry url).write(subject, {"schema": Connect schema, "payload": value})``: the
    Connect JSON document as a wire-format Avro value (its schema made by :func:`avro_schema` and
    registered under ``subject`` once per Connect schema)."""

    def __init__(self, url: str):
        from cdclake.formats.debezium.avro import registry_client

        self._client = registry_client({"url": url})
        from confluent_kafka.schema_registry import Schema

        self._schema = Schema
        self._kept: dict[str, tuple[int, Any]] = {}

    def write(self, subject: str, doc: dict) -> bytes:
        from cdclake.formats.debezium.avro import wire_value

        text = json.dumps(doc["schema"], sort_keys=True)
        kept = self._kept.get(text)
        if kept is None:
            avro = avro_schema(doc["schema"])
            sid = self._client.register_schema(subject, self._schema(json.dumps(avro), "AVRO"))
            kept = self._kept[text] = (sid, fastavro.parse_schema(avro))
        sid, parsed = kept
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, avro_datum(doc["payload"], doc["schema"]))
        return wire_value(sid, buf.getvalue())


def debezium_avro(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
                  server_name: str = "shop", partitions: int = 3, registry_url: Optional[str] = None) -> list[Message]:
    """Debezium MySQL connector messages through the AvroConverter for every change of ``history``
    (see the module docstring; the events are :func:`cdclake.sim.render.debezium_json`'s)."""
    return _render(AvroWriter(registry_url or default_registry_url()), history, tables, database, server_name,
                   partitions)


def _render(writer: AvroWriter, history: Sequence[Transaction], tables: Mapping[str, Table], database: str,
            server_name: str, partitions: int) -> list[Message]:
    out = []
    for m in debezium_json(history, tables, database, server_name, with_schema=True, partitions=partitions):
        key_doc = json.loads(m.key)
        topic = key_doc["schema"]["name"].rsplit(".", 1)[0]
        key = writer.write(f"{topic}-key", key_doc)
        value = None if m.value is None else writer.write(f"{topic}-value", json.loads(m.value))
        out.append(Message(key, value, m.timestamp_ms, m.partition, m.commit_ts_ms, m.rows))
    return out


_JSON_NUMBER = {"int8": "integer", "int16": "integer", "int32": "integer", "int64": "integer", "float32": "number",
                "float": "number", "float64": "number", "double": "number"}


def json_schema(schema: Mapping[str, Any], index: Optional[int] = None) -> dict:
    """The JSON Schema of a Kafka Connect schema, as Confluent's JSON Schema converter writes it
    (see the module docstring); ``index``: the field's ``connect.index``."""
    ctype, name = schema.get("type"), schema.get("name")
    if ctype == "struct":
        out: dict = {"type": "object", "properties": {f["field"]: json_schema(f, i)
                                                      for i, f in enumerate(schema.get("fields") or ())}}
    elif ctype == "array":
        out = {"type": "array", "items": json_schema(schema["items"])}
    elif ctype == "map":
        out = {"type": "object", "additionalProperties": json_schema(schema["values"])}
    elif name == DECIMAL:
        out = {"type": "number", "connect.type": "bytes"}
    elif ctype in _JSON_NUMBER:
        out = {"type": _JSON_NUMBER[ctype], "connect.type": {"float": "float32", "double": "float64"}.get(ctype, ctype)}
    elif ctype == "bytes":
        out = {"type": "string", "connect.type": "bytes"}
    else:
        out = {"type": "boolean" if ctype == "boolean" else "string"}
    if name:
        out["title"] = name
    if schema.get("version") is not None:
        out["connect.version"] = schema["version"]
    if schema.get("parameters"):
        out["connect.parameters"] = dict(schema["parameters"])
    if schema.get("optional"):
        out = {"oneOf": [{"type": "null"}, out]}
    if index is not None:
        out["connect.index"] = index
    return out


def json_document(value: Any, schema: Mapping[str, Any]) -> Any:
    """A Connect JSON value as the JSON Schema converter writes it: Connect decimals (Base64) as numbers."""
    if value is None:
        return None
    if schema.get("type") == "struct":
        return {f["field"]: json_document(value.get(f["field"]), f) for f in schema.get("fields") or ()}
    if schema.get("name") == DECIMAL:
        scale = int((schema.get("parameters") or {}).get("scale", 0))
        unscaled = int.from_bytes(base64.b64decode(value), "big", signed=True)
        return float(Decimal(unscaled).scaleb(-scale))  # exact text for the simulated decimal(12,2) values
    return value


class JsonSchemaWriter(AvroWriter):
    """:class:`AvroWriter` for JSON Schema: registers :func:`json_schema` (``schemaType`` JSON) and
    writes the payload as the JSON document."""

    def write(self, subject: str, doc: dict) -> bytes:
        from cdclake.formats.debezium.avro import wire_value

        text = json.dumps(doc["schema"], sort_keys=True)
        kept = self._kept.get(text)
        if kept is None:
            sid = self._client.register_schema(subject, self._schema(json.dumps(json_schema(doc["schema"])), "JSON"))
            kept = self._kept[text] = (sid, None)
        body = json.dumps(json_document(doc["payload"], doc["schema"]), separators=(",", ":"), ensure_ascii=False)
        return wire_value(kept[0], body.encode("utf-8"))


def debezium_jsonschema(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
                        server_name: str = "shop", partitions: int = 3,
                        registry_url: Optional[str] = None) -> list[Message]:
    """Debezium MySQL connector messages through the JSON Schema converter for every change of
    ``history`` (see the module docstring; the events are :func:`cdclake.sim.render.debezium_json`'s)."""
    return _render(JsonSchemaWriter(registry_url or default_registry_url()), history, tables, database, server_name,
                   partitions)
