"""``debezium-avro``: Debezium change events serialised with Avro through a schema registry.

Implements:

- Debezium documentation, "Avro serialization" (https://debezium.io/documentation/reference/stable/configuration/avro.html):
  a connector with ``key.converter``/``value.converter`` ``io.confluent.connect.avro.AvroConverter``
  writes each key and value as an Avro record whose schema the converter registers in a schema
  registry (subjects ``<topic>-key`` and ``<topic>-value``). The value is Debezium's change
  event envelope (``before``, ``after``, ``source``, ``op``, ``ts_ms``, ``transaction``) as an
  Avro record; the Kafka Connect schema of each field travels in the Avro schema as the
  properties ``connect.name`` (logical types: ``org.apache.kafka.connect.data.Decimal``,
  ``io.debezium.time.*``, ``io.debezium.data.VariableScaleDecimal`` ...), ``connect.type``
  (``int8``/``int16`` over Avro ``int``) and ``connect.parameters`` (a decimal's ``scale`` and
  ``connect.decimal.precision``), beside Avro's own ``logicalType`` (``decimal`` with
  ``precision``/``scale``, ``date``, ``time-millis``, ``timestamp-millis``, read when no
  ``connect.name`` says more).
- Confluent documentation, "Schema Registry Wire format"
  (https://docs.confluent.io/platform/current/schema-registry/fundamentals/serdes-develop/index.html#wire-format):
  byte 0 is the magic byte ``0``, bytes 1-4 the schema id (big-endian), the rest the Avro binary
  encoding of the record (no container file header).

How: the schema of an id is fetched once per parser from the registry with
``confluent_kafka.schema_registry.SchemaRegistryClient`` (``GET /schemas/ids/{id}``) and turned
into (1) a fastavro reader with Avro's logical types left out, so that values come as the
connector's Connect values (unscaled decimal bytes, epoch integers), and (2) the Kafka Connect
schema it stands for (:func:`connect_schema`, as Confluent's ``AvroData.toConnectSchema``
reads it). A decoded value is then exactly the ``payload`` Kafka Connect's JsonConverter would
have written (``bytes`` as Base64 text, ``float`` as the shortest text of its 32-bit value), and
every step after decoding is ``debezium-json``'s (:class:`cdclake.formats.debezium.DebeziumJsonParser`):
operations, control events (transaction metadata, schema change events, heartbeats), names,
column types, images, key, delete images and positions are not read a second way. Its errors
and control records name ``debezium-avro``.

Kafka keys are read the same way (the key's schema id from the registry); a key that cannot be
read is not used, as ``debezium-json`` does with keys that are not JSON.

Options: those of :class:`cdclake.formats.options.SourceOptions` and ``schema_registry`` (required):
``{url: "http://host:8081" (several comma-separated), basic_auth_user_info: "user:password"
(optional; ``schema_registry.connection: <conn_id>`` in a pipeline file fills it and the url from
a connection, :func:`cdclake.config.apply_connections`)}``.

Errors (:class:`cdclake.record.ParseError`, format ``debezium-avro``): field ``value`` for a
value shorter than the 5-byte header
(``truncated``), a magic byte other than 0, a schema id the registry does not know, an Avro body
that does not decode with its schema or leaves bytes over; ``schema`` for a registry schema that
is not an Avro record; then ``debezium-json``'s errors, reworded with this format's name. A
registry that cannot be reached (connection refused, HTTP 5xx) raises
:class:`SchemaRegistryUnavailable`: the run fails and is retried, nothing is quarantined.
"""
from __future__ import annotations

import base64
import io
import json
import struct
import warnings
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Optional

import fastavro

from cdclake.formats.base import Event, learnt_dict
from cdclake.formats.connect import DECIMAL
from cdclake.formats.debezium.fast import fast_members
from cdclake.formats.debezium.parser import DebeziumJsonParser
from cdclake.formats.debezium.plan import FORMAT as JSON_FORMAT
from cdclake.formats.fields import json_object, key_detail
from cdclake.formats.json_values import map_leaves
from cdclake.formats.text import float32_text
from cdclake.errors import SchemaRegistryUnavailable, UnknownSchema
from cdclake.record import ControlRecord, KafkaRecord, ParseError, ParseResult

FORMAT = "debezium-avro"
MAGIC = 0
HEADER = 5

_PRIMITIVE_CONNECT = {"int": "int32", "long": "int64", "float": "float32", "double": "float64", "boolean": "boolean",
                      "string": "string", "bytes": "bytes", "null": "string", "enum": "string", "fixed": "bytes"}
#: Avro logical types → the Kafka Connect / Debezium logical type they stand for, when no
#: ``connect.name`` is given (Confluent's AvroData: date, time-millis, timestamp-millis).
_LOGICAL = {"date": "org.apache.kafka.connect.data.Date", "time-millis": "org.apache.kafka.connect.data.Time",
            "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
            "time-micros": "io.debezium.time.MicroTime", "timestamp-micros": "io.debezium.time.MicroTimestamp"}
_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))


# -- the Confluent wire format -------------------------------------------------------------------


def wire_parts(fmt: str, raw: Any, field: str = "value") -> tuple[int, bytes]:
    """``(schema id, body)`` of a Confluent wire-format value: magic byte 0, 4-byte big-endian id.

    Raises :class:`ParseError` naming ``field``: ``truncated`` (fewer than 5 bytes) or a wrong
    magic byte.
    """
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise ParseError(fmt, f"{field} is {type(raw).__name__}, not bytes", field)
    raw = bytes(raw)
    if len(raw) < HEADER:
        raise ParseError(fmt, f"truncated: {len(raw)} bytes, the Confluent wire format needs a magic byte and a "
                         "4-byte schema id", field)
    if raw[0] != MAGIC:
        raise ParseError(fmt, f"magic byte 0x{raw[0]:02x} is not 0 (not the Confluent Schema Registry wire format)",
                         field)
    return struct.unpack(">I", raw[1:HEADER])[0], raw[HEADER:]


def wire_value(schema_id: int, body: bytes) -> bytes:
    """A Confluent wire-format value: magic byte, big-endian schema id, body."""
    return bytes([MAGIC]) + struct.pack(">I", schema_id) + body


# -- Avro schema → Kafka Connect schema, Avro datum → Connect JSON values ------------------------


def _named(schema: Any, names: dict, namespace: Optional[str]) -> Any:
    """A schema with a named-type reference (``"Value"``, ``"ns.Value"``) resolved through ``names``."""
    if isinstance(schema, str) and schema not in _PRIMITIVES:
        for full in (schema, f"{namespace}.{schema}" if namespace else schema):
            if full in names:
                return names[full]
        raise ValueError(f"unknown named type {schema!r}")
    return schema


def _register(schema: dict, names: dict, namespace: Optional[str]) -> Optional[str]:
    """Record a named schema (record, enum, fixed) under its full name; return its namespace."""
    name = schema.get("name")
    if not isinstance(name, str):
        raise ValueError(f"{schema.get('type')} without a name")
    ns = schema.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
    full = name if "." in name else (f"{ns}.{name}" if ns else name)
    names[full] = schema
    return ns or None


def connect_schema(schema: Any, names: Optional[dict] = None, namespace: Optional[str] = None) -> dict:
    """The Kafka Connect schema (the JSON converter's shape: ``{"type", "name", "parameters",
    "optional", "fields": [{"field", ...}]}``) an Avro schema (parsed JSON) stands for.

    ``["null", X]`` → X optional; a union of several non-null types → ``string`` (its values are
    read as they come); ``int`` → ``int32`` unless ``connect.type`` says ``int8``/``int16``;
    ``long`` → ``int64``; ``float`` → ``float32``; ``double`` → ``float64``; ``bytes``/``fixed``
    → ``bytes``; ``enum`` → ``string``; ``record`` → ``struct``. ``connect.name`` gives the
    logical type (else Avro's ``logicalType``: ``decimal`` → Connect Decimal with its ``scale``
    and ``precision``, see :data:`_LOGICAL`), ``connect.parameters`` its parameters. Raises
    ``ValueError`` for an unknown named type or a named type without a name.
    """
    names = {} if names is None else names
    schema = _named(schema, names, namespace)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return dict(connect_schema(branches[0], names, namespace), optional=True)
        for b in branches:  # named types defined inside the union stay known
            connect_schema(b, names, namespace)
        return {"type": "string", "optional": "null" in schema}
    if isinstance(schema, str):
        return {"type": _PRIMITIVE_CONNECT[schema], "optional": False}
    if not isinstance(schema, dict):
        raise ValueError(f"not an Avro schema: {schema!r}")
    avro_type = schema.get("type")
    if isinstance(avro_type, (list, dict)) or (isinstance(avro_type, str) and avro_type not in _PRIMITIVES and
                                                avro_type not in ("record", "enum", "fixed", "array", "map")):
        return connect_schema(avro_type, names, namespace)
    out: dict = {"optional": False}
    if avro_type in ("record", "enum", "fixed"):
        namespace = _register(schema, names, namespace)
    if avro_type == "record":
        out["type"] = "struct"
        out["fields"] = []
        for f in schema.get("fields") or ():
            out["fields"].append(dict(connect_schema(f["type"], names, namespace), field=f["name"]))
    elif avro_type == "array":
        out.update(type="array", items=connect_schema(schema.get("items"), names, namespace))
    elif avro_type == "map":
        out.update(type="map", values=connect_schema(schema.get("values"), names, namespace))
    else:
        out["type"] = schema.get("connect.type") or _PRIMITIVE_CONNECT[avro_type]
    name = schema.get("connect.name")
    params = schema.get("connect.parameters")
    logical = schema.get("logicalType")
    if name is None and logical == "decimal":
        name = DECIMAL
        params = {"scale": str(schema.get("scale", 0)), "connect.decimal.precision": str(schema.get("precision", 38)),
                  **(params or {})}
    elif name is None and logical in _LOGICAL:
        name = _LOGICAL[logical]
    if name is not None:
        out["name"] = name
    if params is not None:
        out["parameters"] = params
    return out


def plain_schema(schema: Any) -> Any:
    """An Avro schema (parsed JSON) without ``logicalType`` properties: decoded with it, values
    stay the Avro base types (bytes, int, long, string) the Connect converters read."""
    if isinstance(schema, list):
        return [plain_schema(s) for s in schema]
    if isinstance(schema, dict):
        return {k: plain_schema(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def _b64(v: Any) -> Any:
    return base64.b64encode(v).decode("ascii") if isinstance(v, (bytes, bytearray)) else v


def _f32(v: Any) -> Any:
    return float(float32_text(v)) if isinstance(v, float) else v


def _generic(v: Any) -> Any:
    """A value of a union of several types: bytes → Base64 text, containers walked."""
    return map_leaves(v, _b64)


def json_values(schema: Any, names: Optional[dict] = None, namespace: Optional[str] = None
                ) -> Optional[Callable[[Any], Any]]:
    """The function turning a datum fastavro decoded with ``plain_schema(schema)`` into the values
    Kafka Connect's JsonConverter writes for it (``bytes``/``fixed`` → Base64 text, ``float`` →
    the double of its shortest 32-bit text), or None when the datum already is that."""
    names = {} if names is None else names
    schema = _named(schema, names, namespace)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            inner = json_values(branches[0], names, namespace)
            return None if inner is None else (lambda v: None if v is None else inner(v))
        for b in branches:
            json_values(b, names, namespace)
        return _generic
    avro_type = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(avro_type, (list, dict)) or (isinstance(schema, dict) and avro_type in _PRIMITIVES):
        return json_values(avro_type, names, namespace) if isinstance(avro_type, (list, dict)) else \
            json_values(str(avro_type), names, namespace)
    if isinstance(schema, dict) and avro_type not in ("record", "enum", "fixed", "array", "map"):
        return json_values(avro_type, names, namespace)
    if avro_type in ("bytes", "fixed"):
        if avro_type == "fixed":
            _register(schema, names, namespace)
        return _b64
    if avro_type == "float":
        return _f32
    if avro_type == "record":
        namespace = _register(schema, names, namespace)
        convs = [(f["name"], json_values(f["type"], names, namespace)) for f in schema.get("fields") or ()]
        convs = [(n, c) for n, c in convs if c is not None]
        if not convs:
            return None

        def record(v: dict) -> dict:
            v = dict(v)
            for n, c in convs:
                v[n] = c(v[n])
            return v
        return record
    if avro_type == "enum":
        _register(schema, names, namespace)
        return None
    if avro_type == "array":
        inner = json_values(schema.get("items"), names, namespace)
        return None if inner is None else (lambda v: [inner(x) for x in v])
    if avro_type == "map":
        inner = json_values(schema.get("values"), names, namespace)
        return None if inner is None else (lambda v: {k: inner(x) for k, x in v.items()})
    return None


class AvroDecoder:
    """What one registry schema id gives: ``connect`` (the Kafka Connect schema, see
    :func:`connect_schema`) and :meth:`read` (Avro body → Connect JSON values)."""

    def __init__(self, schema_id: int, schema_text: str):
        self.schema_id = schema_id
        avro = json.loads(schema_text)
        self.connect = connect_schema(avro)
        self.parsed = fastavro.parse_schema(plain_schema(avro), _write_hint=False)
        self.convert = json_values(avro)

    def read(self, fmt: str, body: bytes, field: str) -> Any:
        """The datum of ``body`` as Connect JSON values. Raises :class:`ParseError` naming
        ``field`` when it does not decode with the schema or leaves bytes over."""
        buf = io.BytesIO(body)
        try:
            datum = fastavro.schemaless_reader(buf, self.parsed, None)
        except Exception as exc:  # noqa: BLE001  (fastavro raises many types for bad input)
            raise ParseError(fmt, f"cannot decode Avro {field} with schema id {self.schema_id}: "
                             f"{type(exc).__name__}: {exc}", field) from None
        if buf.tell() != len(body):
            raise ParseError(fmt, f"cannot decode Avro {field} with schema id {self.schema_id}: "
                             f"{len(body) - buf.tell()} bytes after the record", field)
        return datum if self.convert is None else self.convert(datum)


def registry_client(conf: Mapping[str, Any]) -> Any:
    """A ``confluent_kafka.schema_registry.SchemaRegistryClient`` of ``conf`` (its settings:
    ``url``, ``basic.auth.user.info`` ...); authlib's deprecation warning about httpx, raised when
    the client's module is first imported, is not shown."""
    with warnings.catch_warnings():
        import authlib.deprecate  # noqa: F401  (it puts an "always" filter first: ours goes before it)

        warnings.simplefilter("ignore", DeprecationWarning)
        from confluent_kafka.schema_registry import SchemaRegistryClient
    return SchemaRegistryClient(dict(conf))


def _registry_options(options: Mapping[str, Any]) -> dict:
    reg = options.get("schema_registry")
    if not isinstance(reg, Mapping) or not isinstance(reg.get("url"), str) or not reg.get("url"):
        raise ValueError("sources[].options.schema_registry must be a mapping with a url (the schema registry's address)")
    conf = {"url": reg["url"]}
    if reg.get("basic_auth_user_info"):
        conf["basic.auth.user.info"] = str(reg["basic_auth_user_info"])
    return conf


class DebeziumAvroParser(DebeziumJsonParser):
    """Parser of ``debezium-avro`` records: ``DebeziumAvroParser(options).parse(KafkaRecord)``.

    Results as :class:`cdclake.formats.debezium.DebeziumJsonParser`'s (change records, control
    records for tombstones, transaction events, schema change events, heartbeats), named
    ``debezium-avro``. Raises :class:`ParseError` as the module docstring says; raises
    :class:`SchemaRegistryUnavailable` when the registry cannot be asked. ``ValueError`` at
    construction when ``schema_registry`` is missing or has no url. The registry client and the
    decoders per schema id are made on first use in each copy of the parser (not pickled).
    """

    format_name = FORMAT
    #: The registry's ``schemaType`` this format reads, its name in reasons, the decoder class of
    #: one schema id, and what a change event's schema is called in reasons.
    SCHEMA_TYPE = "AVRO"
    SCHEMA_NAME = "Avro"
    DECODER: Any = AvroDecoder
    RECORD = "an Avro record"
    LEARNT = {"_client": lambda parser: None, "_decoders": learnt_dict}

    def __init__(self, options: Optional[Mapping[str, Any]] = None):
        self._registry_conf = _registry_options(options or {})
        super().__init__(options)

    # -- the registry ---------------------------------------------------------------------------

    def _registry_schema(self, schema_id: int) -> tuple[str, str]:
        """``(schema type, text)`` of ``schema_id``; :class:`UnknownSchema` or
        :class:`SchemaRegistryUnavailable`."""
        if self._client is None:
            self._client = registry_client(self._registry_conf)
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise UnknownSchema(str(exc)) from None
            raise SchemaRegistryUnavailable(self._unavailable(str(exc))) from None
        except Exception as exc:  # noqa: BLE001  (httpx: connection refused, timeouts ...)
            raise SchemaRegistryUnavailable(self._unavailable(f"{type(exc).__name__}: {exc}")) from None
        return (schema.schema_type or "AVRO"), schema.schema_str

    def _unavailable(self, cause: str) -> str:
        """The one-line message of :class:`SchemaRegistryUnavailable`: the registry, the cause and
        the setting that names it."""
        cause = " ".join(cause.split())
        return (f"{self.format_name}: schema registry {self._registry_conf['url']} cannot be asked ({cause}); "
                "nothing was quarantined, a rerun applies the window once it answers "
                "(sources[].options.schema_registry.url)")

    def decoder(self, schema_id: int, field: str = "value") -> AvroDecoder:
        """The decoder of ``schema_id``, kept per parser. Raises :class:`ParseError` naming
        ``field`` for an id the registry does not know or a schema that is not an Avro record."""
        dec = self._decoders.get(schema_id)
        if dec is not None:
            return dec
        try:
            stype, text = self._registry_schema(schema_id)
        except UnknownSchema as exc:
            raise ParseError(self.format_name, f"schema id {schema_id} is not in the schema registry ({exc})",
                             field) from None
        if stype != self.SCHEMA_TYPE:
            raise ParseError(self.format_name, f"schema id {schema_id} is a {stype} schema, not {self.SCHEMA_NAME}",
                             field)
        try:
            dec = self.DECODER(schema_id, text)
        except Exception as exc:  # noqa: BLE001  (not JSON, not a valid schema)
            raise ParseError(self.format_name, f"schema id {schema_id} is not a valid {self.SCHEMA_NAME} schema "
                             f"({type(exc).__name__}: {exc})", "schema") from None
        if dec.connect.get("type") != "struct":
            raise ParseError(self.format_name, f"schema id {schema_id} is not {self.RECORD}", "schema")
        if len(self._decoders) < self.MAX_PLANS:
            self._decoders[schema_id] = dec
        return dec

    def read_registered(self, raw: Any, field: str) -> tuple[Any, Any]:
        """``(Connect JSON values, decoder)`` of a wire-format ``raw`` (the decoder of its schema
        id: ``connect``, ``schema_id``); :class:`ParseError` naming ``field``."""
        schema_id, body = wire_parts(self.format_name, raw, field)
        dec = self.decoder(schema_id, field)
        return dec.read(self.format_name, body, field), dec

    # -- the template's steps -------------------------------------------------------------------

    def parse(self, record: KafkaRecord) -> ParseResult:
        """:meth:`DebeziumJsonParser.parse` of the decoded value; errors and control records name
        ``debezium-avro``."""
        try:
            result = super().parse(record)
        except ParseError as exc:
            if exc.format != JSON_FORMAT:
                raise
            prefix = f"{JSON_FORMAT}: " + (f"field '{exc.field}': " if exc.field else "")
            message = str(exc)
            raise ParseError(self.format_name, message[len(prefix):] if message.startswith(prefix) else message,
                             exc.field) from None
        if isinstance(result, ControlRecord) and result.source_format == JSON_FORMAT:
            return replace(result, source_format=self.format_name)
        return result

    def tombstone(self, record: KafkaRecord) -> ControlRecord:
        """A ``tombstone`` whose detail is the Kafka key's columns as JSON (as it came when it
        cannot be read)."""
        read = self.kafka_key(record.key)
        detail = json.dumps(read[0], ensure_ascii=False) if read else key_detail(record.key)
        return ControlRecord("tombstone", self.format_name, detail=detail)

    def decode(self, record: KafkaRecord) -> Optional[Event]:
        """The Avro record of the value as the envelope's payload, with the Connect schema of its
        id (``envelope``: the schema id)."""
        payload, dec = self.read_registered(record.value, "value")
        if not isinstance(payload, dict):
            json_object(self.format_name, payload, "value")  # raises
        return Event(record, payload, dec.connect, ("avro", dec.schema_id), self.source_block(payload))

    def kafka_key(self, raw: Optional[bytes]) -> Optional[tuple[dict, Optional[dict]]]:
        """``(column → Connect JSON value, Connect schema)`` of an Avro Kafka key, or None for no
        key or one that cannot be read (an unreachable registry still raises)."""
        if not raw:
            return None
        try:
            values, dec = self.read_registered(raw, "key")
        except ParseError:
            return None
        if not isinstance(values, dict) or not values:
            return None
        return values, dec.connect

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path: each value decoded with its schema id's decoder, then
        ``debezium-json``'s members of the payloads (:func:`cdclake.formats.debezium.fast.fast_members`;
        its :meth:`~DebeziumJsonParser.fast_group` converts them).
        A record whose value does not decode (or whose id the registry does not know) gives None;
        an unreachable registry raises :class:`SchemaRegistryUnavailable`, as :meth:`parse` does."""
        def payloads():
            for i, rec in enumerate(records):
                raw = rec.value
                if not raw or type(raw) is not bytes or len(raw) < HEADER or raw[0] != MAGIC:
                    continue
                try:
                    payload, dec = self.read_registered(raw, "value")
                except ParseError:
                    continue
                yield i, payload, dec.connect, ("avro", dec.schema_id)
        return fast_members(self, records, payloads())

