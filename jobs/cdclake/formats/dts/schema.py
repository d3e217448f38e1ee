"""The DTS Avro schema (``com.alibaba.dts.formats.avro.Record``) and the reading of one Kafka value.

"Alibaba Cloud DTS: Data formats of a Kafka cluster", section "DTS Avro", points to the schema in
Alibaba Cloud's ``aliyun/aliyun-dts-subscribe-demo`` (``python/dts_record_avsc/``): the 14 files
are :data:`AVSC`; :data:`RECORD_SCHEMA` is the ``Record`` schema made self-contained and
:func:`decode` reads a Kafka value with it (one Avro datum, no header), as that demo does.
"""
from __future__ import annotations

import copy
import io
from typing import Any, Optional

import fastavro
from fastavro.schema import parse_schema

from cdclake.errors import NotOneRecord
from cdclake.record import ParseError

FORMAT = "dts-avro"
NAMESPACE = "com.alibaba.dts.formats.avro"

# ---------------------------------------------------------------------------------------------
# The DTS Avro schema.
#
# The 14 schema files of Alibaba Cloud's aliyun/aliyun-dts-subscribe-demo, directory
# python/dts_record_avsc/ (Copyright Alibaba Cloud, Apache License 2.0), transcribed as Python
# values, one entry per file (key = file name without ".avsc"); content unchanged, including
# the original "doc" texts (the records of plain fields written with _record). tests/test_formats_dts.py
# checks them against the published files.

_N = NAMESPACE
_VALUE_UNION = ["null"] + [f"{_N}.{t}" for t in (
    "Integer", "Character", "Decimal", "Float", "Timestamp", "DateTime", "TimestampWithTimeZone",
    "BinaryGeometry", "TextGeometry", "BinaryObject", "TextObject", "EmptyObject")]


def _nullable_int(name: str) -> dict:
    return {"name": name, "default": None, "type": ["null", "int"]}


def _record(name: str, *fields: tuple[str, Any]) -> dict:
    """A record type of the namespace whose fields are ``(name, type)`` pairs, in order."""
    return {"namespace": _N, "type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


_RECORD = {"namespace": _N, "type": "record", "name": "Record", "fields": [
    {"name": "version", "type": "int", "doc": "version infomation"},
    {"name": "id", "type": "long", "doc": "unique id of this record in the whole stream"},
    {"name": "sourceTimestamp", "type": "long", "doc": "record log timestamp"},
    {"name": "sourcePosition", "type": "string", "doc": "record source location information"},
    {"name": "safeSourcePosition", "type": "string", "default": "",
     "doc": "safe record source location information, use to recovery."},
    {"name": "sourceTxid", "type": "string", "default": "", "doc": "record transation id"},
    {"name": "source", "doc": "source dataource", "type": {
        "namespace": _N, "name": "Source", "type": "record", "fields": [
            {"name": "sourceType", "type": {
                "namespace": _N, "name": "SourceType", "type": "enum", "symbols": [
                    "MySQL", "Oracle", "SQLServer", "PostgreSQL", "MongoDB", "Redis", "DB2", "PPAS",
                    "DRDS", "HBASE", "HDFS", "FILE", "OTHER"]}},
            {"name": "version", "type": "string", "doc": "source datasource version information"}]}},
    {"namespace": _N, "name": "operation", "type": {"name": "Operation", "type": "enum", "symbols": [
        "INSERT", "UPDATE", "DELETE", "DDL", "BEGIN", "COMMIT", "ROLLBACK", "ABORT", "HEARTBEAT",
        "CHECKPOINT", "COMMAND", "FILL", "FINISH", "CONTROL", "RDB", "NOOP", "INIT"]}},
    {"name": "objectName", "default": None, "type": ["null", "string"]},
    {"name": "processTimestamps", "default": None, "type": ["null", {"type": "array", "items": "long"}],
     "doc": "time when this record is processed along the stream dataflow"},
    {"name": "tags", "default": {}, "type": {"type": "map", "values": "string"},
     "doc": "tags to identify properties of this record"},
    {"name": "fields", "default": None, "type": ["null", "string", {"type": "array", "items": f"{_N}.Field"}]},
    {"name": "beforeImages", "default": None,
     "type": ["null", "string", {"type": "array", "items": list(_VALUE_UNION)}]},
    {"name": "afterImages", "default": None,
     "type": ["null", "string", {"type": "array", "items": list(_VALUE_UNION)}]},
    {"name": "bornTimestamp", "default": 0, "type": "long",
     "doc": "the timestamp in unit of millisecond that record is born in source"}]}

AVSC: dict[str, dict] = {f"{_N}.{schema['name']}": schema for schema in (
    _record("BinaryGeometry", ("type", "string"), ("value", "bytes")),
    _record("BinaryObject", ("type", "string"), ("value", "bytes")),
    _record("Character", ("charset", "string"), ("value", "bytes")),
    dict(_record("DateTime"), fields=[_nullable_int(n) for n in ("year", "month", "day", "hour", "minute", "second",
                                                                  "millis")]),
    _record("Decimal", ("value", "string"), ("precision", "int"), ("scale", "int")),
    {"namespace": _N, "type": "enum", "name": "EmptyObject", "symbols": ["NULL", "NONE"]},
    _record("Field", ("name", "string"), ("dataTypeNumber", "int")),
    _record("Float", ("value", "double"), ("precision", "int"), ("scale", "int")),
    _record("Integer", ("precision", "int"), ("value", "string")),
    _RECORD,
    _record("TextGeometry", ("type", "string"), ("value", "string")),
    _record("TextObject", ("type", "string"), ("value", "string")),
    _record("Timestamp", ("timestamp", "long"), ("millis", "int")),
    _record("TimestampWithTimeZone", ("value", "DateTime"), ("timezone", "string")),
)}

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _inline(node: Any, namespace: str, defined: set) -> Any:
    """``node`` with every reference to a type of :data:`AVSC` replaced by its definition at the
    first use (later uses keep the full name), as Avro requires of one self-contained schema."""
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return node
        name = _full_name(node, namespace)
        return name if name in defined else _inline(copy.deepcopy(AVSC[name]), namespace, defined)
    if isinstance(node, list):
        return [_inline(branch, namespace, defined) for branch in node]
    out = dict(node)
    kind = node.get("type")
    if kind in ("record", "enum", "fixed"):
        name = _full_name(node["name"], node.get("namespace", namespace))
        defined.add(name)
        if kind == "record":
            inner = name.rpartition(".")[0]
            out["fields"] = [dict(f, type=_inline(f["type"], inner, defined)) for f in node["fields"]]
    elif kind == "array":
        out["items"] = _inline(node["items"], namespace, defined)
    elif kind == "map":
        out["values"] = _inline(node["values"], namespace, defined)
    elif kind not in _PRIMITIVES:
        out["type"] = _inline(kind, namespace, defined)
    return out


def record_schema(born_timestamp: bool = True) -> dict:
    """The ``com.alibaba.dts.formats.avro.Record`` schema as one self-contained JSON object.

    With ``born_timestamp=False``, the schema without its last field ``bornTimestamp``, as
    records written before that field existed have it (the SDK reads that field only when bytes
    remain).
    """
    schema = _inline(AVSC[f"{_N}.Record"], "", set())
    if not born_timestamp:
        schema["fields"] = [f for f in schema["fields"] if f["name"] != "bornTimestamp"]
    return schema


#: The full Record schema, self-contained (every named type defined at its first use).
RECORD_SCHEMA = record_schema()
#: :data:`RECORD_SCHEMA` parsed by fastavro (for ``schemaless_reader``/``schemaless_writer``).
PARSED_SCHEMA = parse_schema(RECORD_SCHEMA)
_PARSED_WITHOUT_BORN = parse_schema(record_schema(born_timestamp=False))

def decode(raw: bytes) -> dict:
    """Read one Kafka value as a DTS Avro ``Record`` (a dict of the schema's fields).

    Union values of named types come as ``(full type name, value)`` pairs (``return_named_type``),
    so that e.g. ``BinaryObject`` and ``BinaryGeometry``, alike in shape, stay apart. A value that
    ends where ``bornTimestamp`` would start is read with the schema without that field. Raises
    :class:`ParseError` (field ``value``) for bytes that are not exactly one such datum
    (truncated, other data, trailing bytes).
    """
    data = bytes(raw)
    try:
        return _read(data, PARSED_SCHEMA)
    except EOFError:
        try:
            return _read(data, _PARSED_WITHOUT_BORN)
        except Exception:  # noqa: BLE001  (report the first failure below)
            pass
        reason = "value is not a DTS Avro record (truncated: the data ends early)"
    except NotOneRecord as exc:
        reason = str(exc)
    except Exception as exc:  # noqa: BLE001  (fastavro raises many types for foreign bytes)
        reason = f"value is not a DTS Avro record ({type(exc).__name__}: {exc})"
    raise ParseError(FORMAT, reason, "value")


def _read(data: bytes, schema: dict) -> dict:
    stream = io.BytesIO(data)
    msg = fastavro.schemaless_reader(stream, schema, return_named_type=True)
    rest = len(data) - stream.tell()
    if rest:
        raise NotOneRecord(f"value is not a DTS Avro record ({rest} bytes left after the record)")
    if not _head_enums_in_range(data):
        raise NotOneRecord("value is not a DTS Avro record (source.sourceType or operation is written as a "
                             "negative enum index)")
    return msg


# ---------------------------------------------------------------------------------------------
# The operation of a value before it is read whole

#: The ``Operation`` symbols, in the schema's order.
OPERATIONS: tuple[str, ...] = tuple(
    next(f for f in RECORD_SCHEMA["fields"] if f["name"] == "operation")["type"]["symbols"])
#: What comes before ``operation``, datum by datum: ``version``, ``id``, ``sourceTimestamp`` (one
#: variable-length integer each: False), ``sourcePosition``, ``safeSourcePosition``,
#: ``sourceTxid`` (strings: True), ``source`` (``sourceType``, an enum, and ``version``).
_HEAD = (False, False, False, True, True, True, False, True)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag variable-length integer at ``pos`` and the position after it (IndexError at
    the end of ``data``; ValueError past 10 bytes or 64 bits)."""
    b = data[pos]
    pos += 1
    n, shift = b & 0x7F, 7
    while b & 0x80:
        if shift > 63:
            raise ValueError("integer past 10 bytes")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    if n >> 64:
        raise ValueError("integer past 64 bits")
    return (n >> 1) ^ -(n & 1), pos


def _head(data: bytes) -> tuple[int, int, int]:
    """``(sourceType index, operation index, bytes of the operation)`` of a value, read from the
    data up to ``operation`` alone (IndexError at the end of ``data``, ValueError for a negative
    text length or an integer past 64 bits)."""
    pos, source_type = 0, 0
    for i, is_text in enumerate(_HEAD):
        b = data[pos]
        if b < 0x80:  # what nearly every datum here is: one byte
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = _varint(data, pos)
        if is_text:
            if n < 0:
                raise ValueError("negative text length")
            pos += n
        elif i == 6:
            source_type = n
    operation, end = _varint(data, pos)
    return source_type, operation, end - pos


def peek_operation(data: bytes) -> Optional[str]:
    """The ``operation`` of a Kafka value, read from the data before it alone; None when those
    bytes do not lead to one of the schema's operations (written in one byte). Reads no further:
    the value may still be no record :func:`decode` reads."""
    try:
        _, index, width = _head(data)
    except (IndexError, ValueError):
        return None
    return OPERATIONS[index] if width == 1 and 0 <= index < len(OPERATIONS) else None


#: The ``SourceType`` symbols, in the schema's order.
SOURCE_TYPES: tuple[str, ...] = tuple(
    next(f for f in RECORD_SCHEMA["fields"] if f["name"] == "source")["type"]["fields"][0]["type"]["symbols"])


def _head_enums_in_range(data: bytes) -> bool:
    """``source.sourceType`` and ``operation`` of a record fastavro has read are indices the schema
    has: fastavro reads a negative enum index as a symbol counted from the end (-1 as ``INIT``)."""
    source_type, operation, _ = _head(data)
    return 0 <= source_type < len(SOURCE_TYPES) and 0 <= operation < len(OPERATIONS)


def read_whole(data: bytes) -> dict:
    """``data`` read as one whole ``Record`` of the full schema (:data:`PARSED_SCHEMA`), as
    :func:`decode` reads it first; raises (any exception) for bytes it does not read so, including
    a record without ``bornTimestamp``."""
    return _read(data, PARSED_SCHEMA)
