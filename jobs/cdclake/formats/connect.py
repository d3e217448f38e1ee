"""Kafka Connect JSON: schemas, logical types and the envelope, for every format that uses it.

Implements the Kafka Connect JSON converter's documents (``schemas.enable=true``: ``{"schema",
"payload"}``, a field schema ``{"type", "name", "parameters", "fields", "field"}``) with the
logical types of Apache Kafka Connect (``org.apache.kafka.connect.data.Decimal``, ``Date``,
``Time``, ``Timestamp``) and Debezium (``io.debezium.time.*``, ``io.debezium.data.*``: Debezium
connector documentation, *Data type mappings*). Used by ``debezium-json`` (and its Lindorm
variant), ``arcion-json`` and ``cdl-json``.

- :func:`connect_type` and :func:`connect_text` (per value) / :func:`connect_converter` (per
  field schema, made once): canonical type and text of a value described by a field schema.
- :func:`struct_fields` and :func:`key_fields`: column → field schema, from an envelope's
  ``before``/``after`` (or other) structs and from a Kafka key's struct.
- :class:`ConnectJsonParser`: the :meth:`decode` step of those formats (an envelope reader for
  values and one for keys, the tombstone of a null payload, the payload's type check).
"""
from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any, Callable, Mapping, Optional

from cdclake.formats.base import Event, FormatParser
from cdclake.formats.fields import json_object, key_detail
from cdclake.formats.json_values import EnvelopeReader
from cdclake.formats.text import EXACT, array_converter, coerce_text, epoch_timestamp, text_converter
from cdclake.record import ControlRecord, KafkaRecord
from cdclake.types import array_text, decimal_precision_scale, normalize_type, to_text

EPOCH = dt.datetime(1970, 1, 1)
#: Debezium's ``unavailable.value.placeholder`` (its default): what the PostgreSQL connector sends
#: for a TOASTed value an update left unchanged (REPLICA IDENTITY DEFAULT).
PLACEHOLDER = "__debezium_unavailable_value"
#: The placeholder as text (text, varchar, json, jsonb, xml ...) and as Base64 bytes (bytea).
TOAST_PLACEHOLDERS = (PLACEHOLDER, base64.b64encode(PLACEHOLDER.encode()).decode())


def _name_uuid(data: bytes) -> str:
    """Java's ``UUID.nameUUIDFromBytes(data)`` (version 3, MD5), as text."""
    import hashlib
    import uuid

    return str(uuid.UUID(bytes=hashlib.md5(data).digest(), version=3))


#: The placeholder of an array column, whole (as Debezium 3.6's PostgreSQL connector sends it,
#: seen in both converters): ``[placeholder]`` (arrays of text types), the placeholder's bytes as
#: numbers (int[], bigint[], date[] ...), ``[the UUID named by its bytes]`` (uuid[]) and ``[its
#: Base64]`` (bytea[]). Arrays of other types (numeric, boolean, timestamps ...) arrive as null,
#: which no reader can tell from a NULL.
TOAST_ARRAYS = ([PLACEHOLDER], list(PLACEHOLDER.encode()), [_name_uuid(PLACEHOLDER.encode())],
                [TOAST_PLACEHOLDERS[1]])

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
CONNECT_TYPES = {
    "int8": "smallint", "int16": "smallint", "int32": "int", "int64": "bigint",
    "float32": "float", "float": "float", "float64": "double", "double": "double",
    "boolean": "boolean", "string": "string", "bytes": "binary",
}
#: Epoch-based timestamp logical types → units per second.
TIMESTAMP_UNITS = {
    "org.apache.kafka.connect.data.Timestamp": 1000, "io.debezium.time.Timestamp": 1000,
    "io.debezium.time.MicroTimestamp": 10**6, "io.debezium.time.NanoTimestamp": 10**9,
}
#: Time-of-day logical types → units per second (rendered ``HH:MM:SS.ffffff``, typed string).
TIME_UNITS = {
    "org.apache.kafka.connect.data.Time": 1000, "io.debezium.time.Time": 1000,
    "io.debezium.time.MicroTime": 10**6, "io.debezium.time.NanoTime": 10**9,
}
#: Epoch-based timestamps hold a wall-clock time without a zone (Debezium: PostgreSQL ``timestamp``,
#: MySQL ``DATETIME``, Oracle ``TIMESTAMP``), read as ``timestamp_ntz``; ``ZonedTimestamp`` (PostgreSQL
#: ``timestamptz``, MySQL ``TIMESTAMP``) is an instant, read as ``timestamp`` (UTC).
LOGICAL_TYPES = {
    **{name: "timestamp_ntz" for name in TIMESTAMP_UNITS},
    **{name: "string" for name in TIME_UNITS},
    "io.debezium.time.ZonedTimestamp": "timestamp", "io.debezium.time.IsoTimestamp": "timestamp",
    "org.apache.kafka.connect.data.Date": "date", "io.debezium.time.Date": "date", "io.debezium.time.IsoDate": "date",
    VARIABLE_SCALE_DECIMAL: "string",
    "io.debezium.time.ZonedTime": "string", "io.debezium.time.IsoTime": "string",
    "io.debezium.data.Json": "string", "io.debezium.data.Uuid": "string", "io.debezium.data.Enum": "string",
    "io.debezium.data.EnumSet": "string", "io.debezium.data.Xml": "string",
}
def connect_type(schema: Mapping[str, Any]) -> str:
    """Canonical type of one Kafka Connect field schema (``{"type", "name", "parameters"}``).

    ``int8``/``int16`` → smallint, ``int32`` → int, ``int64`` → bigint, ``float32`` → float,
    ``float64`` → double, ``bytes`` → binary; Connect ``Decimal`` → ``decimal(p,s)`` (precision
    from ``connect.decimal.precision``, default 38); temporal logical types → date /
    timestamp_ntz (epoch-based: a wall-clock time) / timestamp (``ZonedTimestamp``: an instant) /
    string; an ``array`` → ``array<T>`` of its ``items`` schema's type (an array of arrays:
    ``array<string>``); anything else (struct, map, unknown names) → string. Raises
    ``ValueError`` when a ``Decimal``'s parameters are not an object or name no valid decimal type.
    """
    name = schema.get("name")
    if name == DECIMAL:
        params = connect_parameters(schema)
        return normalize_type(f"decimal({params.get('connect.decimal.precision', 38)},{params.get('scale', 0)})")
    if schema.get("type") == "array" and name is None:
        items = schema.get("items")
        element = connect_type(items) if isinstance(items, Mapping) and items.get("type") != "array" else "string"
        return f"array<{element}>"
    return LOGICAL_TYPES.get(name) or CONNECT_TYPES.get(schema.get("type"), "string")


def connect_parameters(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``parameters`` of a Connect field schema (``{}`` when absent or null).

    Raises ``ValueError`` when they are not a JSON object.
    """
    params = schema.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise ValueError(f"parameters {params!r} are not an object")
    return params


def decode_decimal(value: Any, scale: int) -> Decimal:
    """A Connect ``Decimal``: Base64 of the big-endian two's-complement unscaled integer, times
    10**-scale (``"MDk="``, scale 2 → 123.45). Numbers (``decimal.format=NUMERIC``) pass through.

    Raises ``ValueError`` for text that is not Base64.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Decimal(str(value))
    unscaled = int.from_bytes(base64.b64decode(str(value), validate=True), "big", signed=True)
    return Decimal(unscaled).scaleb(-int(scale), context=EXACT)


def time_text(amount: int, per_second: int) -> str:
    """A time of day given in units since midnight as ``HH:MM:SS.ffffff`` (hours not wrapped)."""
    micros = amount * 10**6 // per_second
    hours, rest = divmod(micros, 3600 * 10**6)
    minutes, rest = divmod(rest, 60 * 10**6)
    seconds, micros = divmod(rest, 10**6)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{micros:06d}"


def connect_text(value: Any, schema: Mapping[str, Any]) -> Optional[str]:
    """Canonical text of a JSON value described by a Connect field schema (see :func:`connect_type`).

    Timestamps become UTC ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (``ZonedTimestamp`` converted from its
    offset), dates ``YYYY-MM-DD``, times ``HH:MM:SS.ffffff``, decimals plain digits. Raises
    ``ValueError`` when the value does not match its schema.
    """
    if value is None:
        return None
    name = schema.get("name")
    ctype = connect_type(schema)
    if name == DECIMAL:
        scale = int(connect_parameters(schema).get("scale", 0))
        return coerce_text(format(decode_decimal(value, scale), "f"), ctype)
    if name == VARIABLE_SCALE_DECIMAL and isinstance(value, dict):
        return to_text(decode_decimal(value.get("value"), int(value.get("scale") or 0)))
    if name in TIMESTAMP_UNITS and isinstance(value, int):
        return to_text(epoch_timestamp(value, TIMESTAMP_UNITS[name]))
    if name in TIME_UNITS and isinstance(value, int):
        return time_text(value, TIME_UNITS[name])
    if ctype.startswith("array<") and isinstance(value, list):
        items = schema.get("items")
        items = items if isinstance(items, Mapping) else {}
        return array_text([connect_text(v, items) for v in value])
    return coerce_text(value, ctype)


_DIRECT_LIMIT = 10**28


def connect_converter(schema: Mapping[str, Any]) -> Callable[[Any], Optional[str]]:
    """:func:`connect_text` for one field schema as a function of the value:
    ``connect_converter(s)(v) == connect_text(v, s)`` for every value, errors included.

    The schema is read once, when the function is made (it must not change afterwards): the
    values a connector sends for it (Base64 text for ``Decimal``, integers for the epoch-based
    temporal types, what :func:`cdclake.formats.text.text_converter` reads directly for the
    others) take a direct path, anything else goes through :func:`connect_text`.
    """
    try:
        name = schema.get("name")
        text = text_converter(connect_type(schema))
        scale = int(connect_parameters(schema).get("scale", 0)) if name == DECIMAL else 0
    except Exception:  # connect_text raises what this schema makes it raise, value by value
        return lambda v: connect_text(v, schema)
    if name == DECIMAL:
        # digits written directly when the column's type keeps the message's scale and the value
        # has at most 28 digits (its text a short integer's); other values exactly (EXACT)
        typed = decimal_precision_scale(connect_type(schema))
        direct = typed is not None and typed[1] == scale >= 0
        unit = 10 ** scale if direct else 1  # a scale past the type's (up to 38) never takes the direct path

        def decimal(v: Any) -> Optional[str]:
            if type(v) is str:
                try:
                    unscaled = int.from_bytes(base64.b64decode(v, validate=True), "big", signed=True)
                except ValueError:
                    return connect_text(v, schema)
                if direct and -_DIRECT_LIMIT < unscaled < _DIRECT_LIMIT:
                    if not scale:
                        return str(unscaled)
                    whole, fraction = divmod(abs(unscaled), unit)
                    return f"{'-' if unscaled < 0 else ''}{whole}.{fraction:0{scale}d}"
                return text(format(Decimal(unscaled).scaleb(-scale, context=EXACT), "f"))
            return connect_text(v, schema)
        return decimal
    if name in TIMESTAMP_UNITS:
        units = TIMESTAMP_UNITS[name]

        def timestamp(v: Any) -> Optional[str]:
            if type(v) is int:
                try:
                    return (EPOCH + dt.timedelta(microseconds=v * 10**6 // units)).isoformat(sep=" ")
                except (ValueError, TypeError, ArithmeticError):
                    pass
            return connect_text(v, schema)
        return timestamp
    if name in TIME_UNITS:
        units = TIME_UNITS[name]
        return lambda v: time_text(v, units) if type(v) is int else connect_text(v, schema)
    if name == VARIABLE_SCALE_DECIMAL:
        return lambda v: connect_text(v, schema)
    items = schema.get("items")
    if schema.get("type") == "array" and isinstance(items, Mapping):  # each element by its own schema
        return array_converter(connect_converter(items), lambda v: connect_text(v, schema))
    return text


def column_converter(col_schemas: Mapping[str, Mapping[str, Any]], types: Mapping[str, str],
                     col: str) -> Callable[[Any], Optional[str]]:
    """The converter of image column ``col`` (JSON value → canonical text): its Connect field
    schema's in ``col_schemas`` (:func:`connect_converter`), else that of its canonical type in
    ``types`` (:func:`cdclake.formats.text.text_converter`), else :func:`cdclake.types.to_text`."""
    if col in col_schemas:
        return connect_converter(col_schemas[col])
    if col in types:
        return text_converter(types[col])
    return to_text


def is_toast(value: Any) -> bool:
    """Whether ``value`` is Debezium's unavailable-value placeholder (a PostgreSQL TOAST column the
    connector did not send: to be left out of the image): one of :data:`TOAST_PLACEHOLDERS`, or
    a list equal to one of :data:`TOAST_ARRAYS`."""
    if type(value) is list:
        return value in TOAST_ARRAYS
    return type(value) is str and value in TOAST_PLACEHOLDERS


def struct_fields(schema: Optional[Mapping[str, Any]], names: tuple[str, ...], strict: bool = True) -> dict[str, dict]:
    """Column → field schema of the envelope schema's structs named ``names`` (union, first wins).

    Strict (Arcion, CDL): lists that are not lists and entries that are not objects with a text
    ``field`` are skipped; never raises. ``strict=False`` (Debezium, as it has always read its
    envelopes): any ``fields`` value is iterated (``TypeError`` for one that cannot be) and a column
    entry counts when its ``field`` is not null, whatever its type.
    """
    out: dict[str, dict] = {}
    for env_field in _listed((schema or {}).get("fields"), strict):
        if isinstance(env_field, dict) and env_field.get("field") in names:
            for col in _listed(env_field.get("fields"), strict):
                if isinstance(col, dict) and (isinstance(col.get("field"), str) if strict
                                              else col.get("field") is not None):
                    out.setdefault(col["field"], col)
    return out


def key_fields(schema: Any, strict: bool = True) -> dict[str, dict]:
    """Column → field schema of a Kafka key's struct schema (``{"fields": [...]}``).

    Strict (Arcion): entries that are not objects with a text ``field`` are skipped; never raises.
    ``strict=False`` (Debezium): any ``fields`` value is iterated (``TypeError`` for one that cannot
    be) and every object holding a ``field`` member counts.
    """
    if strict:
        fields = schema.get("fields") if isinstance(schema, dict) else None
        return {f["field"]: f for f in _listed(fields, True) if isinstance(f, dict) and isinstance(f.get("field"), str)}
    return {f["field"]: f for f in _listed((schema or {}).get("fields"), False) if isinstance(f, dict) and "field" in f}


def _listed(value: Any, strict: bool) -> Any:
    """The entries of a ``fields`` value: a list (strict: anything else is no entries; else any
    value but null/empty, iterated as it is)."""
    if strict:
        return value if isinstance(value, list) else ()
    return value or ()


class ConnectJsonParser(FormatParser):
    """Base of the formats whose Kafka values (and keys) are Kafka Connect JSON documents.

    Keeps an :class:`cdclake.formats.json_values.EnvelopeReader` for the values and one for the
    keys (learnt per parser, dropped when pickled). :meth:`decode` gives an :class:`Event` with the
    payload as ``message``, the envelope's ``schema`` (None without one) and ``envelope`` id; a
    ``null`` payload is a tombstone, whose detail is the Kafka key as text. Raises
    :class:`ParseError` for a value that is not a JSON object (``value``) or a payload that is not
    an object (``payload``).
    """

    LEARNT = {"_reader": lambda parser: EnvelopeReader(parser.format_name), "_key_reader": lambda parser: EnvelopeReader(parser.format_name)}

    def tombstone(self, record: KafkaRecord) -> ControlRecord:
        """A ``tombstone`` whose detail is the Kafka key as text."""
        return ControlRecord("tombstone", self.format_name, detail=key_detail(record.key))

    def decode(self, record: KafkaRecord) -> Optional[Event]:
        """The payload (an object) with its schema, envelope id and :meth:`source_block`; None for a
        ``null`` payload."""
        payload, schema, envelope = self._reader.load(record.value)
        if payload is None:
            return None
        if not isinstance(payload, dict):
            json_object(self.format_name, payload, "payload")  # raises
        return Event(record, payload, schema, envelope, self.source_block(payload))

    def source_block(self, payload: dict) -> Any:
        """The block of the payload the steps share as ``event.source`` (default: none)."""
        return None
