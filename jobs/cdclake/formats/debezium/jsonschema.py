"""``debezium-jsonschema``: Debezium change events as JSON with JSON Schema through a schema registry.

Implements:

- Debezium documentation, "Avro serialization" (the schema registry converters: a connector with
  ``value.converter`` ``io.confluent.connect.json.JsonSchemaConverter`` registers each key and
  value schema, here a JSON Schema, in a schema registry) and the change event envelope of the
  connector documentation, as ``debezium-json`` reads it.
- Confluent documentation, "Schema Registry Wire format"
  (https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/index.html#wire-format):
  magic byte ``0``, a 4-byte big-endian schema id, then the JSON document (the event's payload
  alone: no ``schema``/``payload`` envelope).
- Confluent documentation, "JSON Schema Serializer and Deserializer" (the JSON Schema Connect
  converter): a Connect schema written as JSON Schema: ``object`` with ``properties`` (``title``:
  the struct's name) for a struct, ``{"oneOf": [{"type": "null"}, X]}`` for an optional field,
  ``integer``/``number`` with ``connect.type`` (``int8`` ... ``int64``, ``float32``,
  ``float64``), ``string`` with ``connect.type: bytes`` for bytes (Base64 text), ``title`` the
  Connect logical type's name (``org.apache.kafka.connect.data.Decimal``, ``io.debezium.time.*``
  ...), ``connect.parameters`` its parameters, ``connect.index`` the field order.

How: as :mod:`cdclake.formats.debezium.avro` (whose registry client, wire format and errors it
shares): the registry's schema of an id (``schemaType`` ``JSON``) is turned once per parser into
the Kafka Connect schema it stands for (:func:`connect_schema`), the document is read as JSON
(numbers with a fraction or exponent exactly, as decimals), and everything after decoding is
``debezium-json``'s. A Connect ``Decimal`` written as a JSON number (the converter's
``decimal.format`` ``NUMERIC``) is read exactly at the schema's scale (a number with more
fraction digits than the scale is refused); one written as Base64 text is read as
``debezium-json`` reads it. Other numbers become what ``json.loads`` gives.

Options: ``schema_registry`` as for ``debezium-avro`` and those of
:class:`cdclake.formats.options.SourceOptions`. Errors: :class:`cdclake.record.ParseError`
(format ``debezium-jsonschema``) naming ``value`` for a value that is not the wire format, an
unknown schema id, a schema that is not JSON Schema or a body that is not one UTF-8 JSON object;
``schema`` for a schema that is not an object schema; then ``debezium-json``'s errors.
"""
from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any, Callable, Optional

from cdclake.formats.connect import DECIMAL
from cdclake.formats.debezium.avro import DebeziumAvroParser
from cdclake.record import ParseError

FORMAT = "debezium-jsonschema"
_INTEGER = {"int8", "int16", "int32", "int64"}


def _branches(schema: dict) -> Optional[list]:
    for k in ("oneOf", "anyOf"):
        if isinstance(schema.get(k), list):
            return schema[k]
    if isinstance(schema.get("type"), list):
        return [dict(schema, type=t) for t in schema["type"]]
    return None


def connect_schema(schema: Any) -> dict:
    """The Kafka Connect schema (the JSON converter's shape) a JSON Schema written by the JSON
    Schema converter stands for (see the module docstring). A union of several non-null types,
    and anything else not listed, is ``string``. Raises ``ValueError`` for a schema that is not a
    JSON object."""
    if not isinstance(schema, dict):
        raise ValueError(f"not a JSON Schema: {schema!r}")
    branches = _branches(schema)
    if branches is not None:
        real = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
        if len(real) == 1:
            return dict(connect_schema(real[0]), optional=True)
        return {"type": "string", "optional": len(real) < len(branches)}
    jtype, ctype = schema.get("type"), schema.get("connect.type")
    out: dict = {"optional": False}
    if jtype == "object" and isinstance(schema.get("properties"), dict):
        props = list(schema["properties"].items())
        if all(isinstance(v, dict) and isinstance(v.get("connect.index"), int) for _, v in props):
            props.sort(key=lambda kv: kv[1]["connect.index"])
        out.update(type="struct", fields=[dict(connect_schema(v), field=k) for k, v in props])
    elif jtype == "object":
        out["type"] = "map"
    elif jtype == "array":
        out.update(type="array", items=connect_schema(schema.get("items") or {}))
    elif jtype == "integer":
        out["type"] = ctype if ctype in _INTEGER else "int64"
    elif jtype == "number":
        out["type"] = ctype if ctype in ("float32", "float64", "bytes") or ctype in _INTEGER else "float64"
    elif jtype == "boolean":
        out["type"] = "boolean"
    else:
        out["type"] = "bytes" if ctype == "bytes" else "string"
    name = schema.get("connect.name", schema.get("title"))
    if isinstance(name, str):
        out["name"] = name
    if isinstance(schema.get("connect.parameters"), dict):
        out["parameters"] = schema["connect.parameters"]
    return out


def _plain(v: Any) -> Any:
    """A decoded JSON value as ``json.loads`` gives it (decimals → floats), containers walked."""
    if type(v) is Decimal:
        return float(v)
    if type(v) is dict:
        return {k: _plain(x) for k, x in v.items()}
    if type(v) is list:
        return [_plain(x) for x in v]
    return v


def _decimal_bytes(scale: int) -> Callable[[Any], Any]:
    """A Connect Decimal written as a JSON number → its Base64 unscaled bytes (the JSON converter's
    own form); a number that does not fit the scale is left as text, which the converter refuses."""
    def convert(v: Any) -> Any:
        if type(v) is Decimal or (type(v) is int and not isinstance(v, bool)):
            sign, digits, exponent = Decimal(v).as_tuple()
            shift = exponent + scale if isinstance(exponent, int) else None
            if shift is None or shift > 64:  # NaN, infinity, or far past any decimal type
                return str(v)
            n = int("".join(map(str, digits)) or "0")
            if shift >= 0:
                n *= 10 ** shift
            else:
                n, rest = divmod(n, 10 ** -shift)
                if rest:
                    return f"{v} has more than {scale} fraction digits"
            n = -n if sign else n
            length = ((n if n >= 0 else ~n).bit_length() + 8) // 8
            return base64.b64encode(n.to_bytes(length, "big", signed=True)).decode("ascii")
        return _plain(v)
    return convert


def json_values(schema: dict) -> Callable[[Any], Any]:
    """The function turning a document decoded with decimals into the values the JSON converter's
    reader gives: Connect ``Decimal`` numbers as Base64 unscaled bytes, other numbers as ``json.loads``
    gives them. ``schema``: the Connect schema of :func:`connect_schema`."""
    if schema.get("type") == "struct":
        convs = {f["field"]: json_values(f) for f in schema.get("fields") or ()}

        def struct(v: Any) -> Any:
            if type(v) is not dict:
                return _plain(v)
            return {k: convs.get(k, _plain)(x) for k, x in v.items()}
        return struct
    if schema.get("name") == DECIMAL:
        params = schema.get("parameters") or {}
        try:
            scale = int(params.get("scale", 0))
        except (TypeError, ValueError):
            return _plain
        return lambda v: None if v is None else _decimal_bytes(scale)(v)
    return _plain


class JsonSchemaDecoder:
    """What one registry schema id (a JSON Schema) gives: ``connect`` (the Kafka Connect schema)
    and :meth:`read` (body → values)."""

    def __init__(self, schema_id: int, schema_text: str):
        self.schema_id = schema_id
        self.connect = connect_schema(json.loads(schema_text))
        self.convert = json_values(self.connect)

    def read(self, fmt: str, body: bytes, field: str) -> Any:
        """The JSON document of ``body`` (see :func:`json_values`). Raises :class:`ParseError`
        naming ``field`` for bytes that are not UTF-8 or not one JSON document."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(fmt, f"{field} is not UTF-8 text ({exc.reason} at byte {exc.start + 5})", field) from None
        try:
            doc = json.loads(text, parse_float=Decimal)
        except ValueError as exc:
            raise ParseError(fmt, f"{field} is not valid JSON ({type(exc).__name__}: {str(exc)[:200]})",
                             field) from None
        except RecursionError:
            raise ParseError(fmt, f"{field} is nested deeper than the JSON reader can follow", field) from None
        try:
            return self.convert(doc)
        except RecursionError:
            raise ParseError(fmt, f"{field} is nested deeper than the JSON reader can follow", field) from None


class DebeziumJsonSchemaParser(DebeziumAvroParser):
    """Parser of ``debezium-jsonschema`` records: as :class:`DebeziumAvroParser`, with JSON Schema
    registry schemas and JSON bodies (see the module docstring)."""

    format_name = FORMAT
    SCHEMA_TYPE = "JSON"
    SCHEMA_NAME = "JSON Schema"
    DECODER = JsonSchemaDecoder
    RECORD = "an object schema"
