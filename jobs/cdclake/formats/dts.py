"""``dts-avro``: Alibaba Cloud DTS change records in the DTS Avro format.

Implements "Alibaba Cloud DTS: Data formats of a Kafka cluster" (section "DTS Avro": the default
format, parsed "based on the schema definition of DTS Avro", DDL statements as strings) with the
schema it points to, ``com.alibaba.dts.formats.avro.Record`` and its 13 named types from Alibaba
Cloud's ``aliyun/aliyun-dts-subscribe-demo`` (``python/dts_record_avsc/``), embedded below as
:data:`AVSC`. As in that demo, a Kafka value is one Avro datum written with the schema, with no
header (no Confluent magic byte or schema id); it is read with ``fastavro.schemaless_reader``.
Field meanings follow the schema's docs and Alibaba's subscription SDK
(``aliyun/aliyun-dts-subscribe-sdk-java``), as noted per field below.

Record fields used:

- ``operation``: INSERT, UPDATE, DELETE are row changes (one :class:`ChangeRecord` each, ops
  ``insert``/``update``/``delete``). Everything else is a :class:`ControlRecord` (see
  :data:`CONTROL_OPERATIONS`): DDL (and COMMAND, which the SDK reads as DDL) → ``ddl`` with the
  statement (the string branch of ``afterImages``) as detail, except ``TRUNCATE [TABLE] [db.]t``,
  a ``truncate`` change of that table (the rows go); BEGIN, COMMIT, ROLLBACK, ABORT →
  ``transaction``; HEARTBEAT, CHECKPOINT, NOOP (progress markers) → ``heartbeat``; FILL, FINISH,
  CONTROL, RDB, INIT → ``metadata``. A Kafka tombstone (no value) is a ``tombstone``.
- ``objectName``: ``db``, ``db.table`` or ``db.schema.table``, dots inside a name escaped as
  ``\\u002E`` (:func:`split_object_name`). Physical names are kept (not the ``l_db_name`` /
  ``l_tb_name`` logical names of sharded sources, whose shards have unrelated positions).
- ``fields`` (name, ``dataTypeNumber``: MySQL's column type code for MySQL sources) and
  ``beforeImages``/``afterImages``: one value per field, in field order (:func:`read_value`).
- ``sourcePosition`` and ``id``: position ``(binlog file index, offset, id)`` for MySQL's
  ``offset@fileindex`` (``"72469@78"``: offset 72469 in ``mysql-bin.000078``; rows of one binlog
  event share it, ``id`` — "unique id of this record in the whole stream", increasing — orders
  them); ``(id,)`` when ``sourcePosition`` has another form (:func:`parse_position`).
- ``sourceTimestamp`` (seconds) → ``source_ts_ms`` (× 1000); ``sourceTxid`` → ``tx_id`` (empty
  and ``"0"``, what MySQL sources send, mean unknown); ``tx_seq`` is not carried.
- ``tags``: ``pk_uk_info`` (``{"PRIMARY": [...], "<unique index>": [...]}``) gives the key.

Primary key: configured ``primary_keys``/``primary_key``, else ``PRIMARY`` of ``pk_uk_info``, else
its first unique index (a table without a primary key whose unique key identifies rows), else a
Kafka key holding a JSON object of key columns, else :class:`ParseError`.

Column types come from the value branch (DTS carries no declared column type beyond
``dataTypeNumber``): see :func:`read_value`. Configured ``column_types`` win over them (DTS gives
a decimal's precision per value, so ``column_types`` can pin the declared ``decimal(p,s)``).

Options: those of :class:`cdclake.formats._common.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``).
"""
from __future__ import annotations

import codecs
import copy
import datetime as _dt
import io
import json
import re
import struct
import zoneinfo
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping, Optional

import fastavro
from fastavro.schema import parse_schema

from cdclake.formats._common import (
    ABSENT,
    SourceOptions,
    coerce_text,
    key_delete_image,
    read_key,
    resolve_primary_key,
)
from cdclake.positions import MAX_ELEMENT
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import to_text, widen

FORMAT = "dts-avro"
NAMESPACE = "com.alibaba.dts.formats.avro"

# ---------------------------------------------------------------------------------------------
# The DTS Avro schema.
#
# The 14 schema files of Alibaba Cloud's aliyun/aliyun-dts-subscribe-demo, directory
# python/dts_record_avsc/ (Copyright Alibaba Cloud, Apache License 2.0), transcribed as Python
# literals, one entry per file (key = file name without ".avsc"); content unchanged, including
# the original "doc" texts. tests/test_formats_dts.py checks them against the published files.

_N = NAMESPACE
_VALUE_UNION = ["null"] + [f"{_N}.{t}" for t in (
    "Integer", "Character", "Decimal", "Float", "Timestamp", "DateTime", "TimestampWithTimeZone",
    "BinaryGeometry", "TextGeometry", "BinaryObject", "TextObject", "EmptyObject")]


def _nullable_int(name: str) -> dict:
    return {"name": name, "default": None, "type": ["null", "int"]}


AVSC: dict[str, dict] = {
    f"{_N}.BinaryGeometry": {"namespace": _N, "type": "record", "name": "BinaryGeometry", "fields": [
        {"name": "type", "type": "string"}, {"name": "value", "type": "bytes"}]},
    f"{_N}.BinaryObject": {"namespace": _N, "type": "record", "name": "BinaryObject", "fields": [
        {"name": "type", "type": "string"}, {"name": "value", "type": "bytes"}]},
    f"{_N}.Character": {"namespace": _N, "type": "record", "name": "Character", "fields": [
        {"name": "charset", "type": "string"}, {"name": "value", "type": "bytes"}]},
    f"{_N}.DateTime": {"namespace": _N, "type": "record", "name": "DateTime", "fields": [
        _nullable_int(n) for n in ("year", "month", "day", "hour", "minute", "second", "millis")]},
    f"{_N}.Decimal": {"namespace": _N, "type": "record", "name": "Decimal", "fields": [
        {"name": "value", "type": "string"}, {"name": "precision", "type": "int"},
        {"name": "scale", "type": "int"}]},
    f"{_N}.EmptyObject": {"namespace": _N, "type": "enum", "name": "EmptyObject", "symbols": ["NULL", "NONE"]},
    f"{_N}.Field": {"namespace": _N, "name": "Field", "type": "record", "fields": [
        {"name": "name", "type": "string"}, {"name": "dataTypeNumber", "type": "int"}]},
    f"{_N}.Float": {"namespace": _N, "type": "record", "name": "Float", "fields": [
        {"name": "value", "type": "double"}, {"name": "precision", "type": "int"},
        {"name": "scale", "type": "int"}]},
    f"{_N}.Integer": {"namespace": _N, "type": "record", "name": "Integer", "fields": [
        {"name": "precision", "type": "int"}, {"name": "value", "type": "string"}]},
    f"{_N}.Record": {"namespace": _N, "type": "record", "name": "Record", "fields": [
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
         "doc": "the timestamp in unit of millisecond that record is born in source"}]},
    f"{_N}.TextGeometry": {"namespace": _N, "type": "record", "name": "TextGeometry", "fields": [
        {"name": "type", "type": "string"}, {"name": "value", "type": "string"}]},
    f"{_N}.TextObject": {"namespace": _N, "type": "record", "name": "TextObject", "fields": [
        {"name": "type", "type": "string"}, {"name": "value", "type": "string"}]},
    f"{_N}.Timestamp": {"namespace": _N, "type": "record", "name": "Timestamp", "fields": [
        {"name": "timestamp", "type": "long"}, {"name": "millis", "type": "int"}]},
    f"{_N}.TimestampWithTimeZone": {"namespace": _N, "type": "record", "name": "TimestampWithTimeZone", "fields": [
        {"name": "value", "type": "DateTime"}, {"name": "timezone", "type": "string"}]},
}

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

# ---------------------------------------------------------------------------------------------
# operations and names

ROW_OPERATIONS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
#: Control record kind of each non-row operation.
CONTROL_OPERATIONS = {
    "DDL": "ddl", "COMMAND": "ddl",
    "BEGIN": "transaction", "COMMIT": "transaction", "ROLLBACK": "transaction", "ABORT": "transaction",
    "HEARTBEAT": "heartbeat", "CHECKPOINT": "heartbeat", "NOOP": "heartbeat",
    "FILL": "metadata", "FINISH": "metadata", "CONTROL": "metadata", "RDB": "metadata", "INIT": "metadata",
}
_POSITION_RE = re.compile(r"^(\d+)@(\d+)$")
_INTEGER_RE = re.compile(r"^[+-]?\d+$")
_DELETE_HINT = "the deleted row's image does not carry them"
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_TRUNCATE_RE = re.compile(rf"^\s*truncate\s+(?:table\s+)?(?P<name>{_IDENT}(?:\s*\.\s*{_IDENT})?)\s*;?\s*$", re.I)
_NAME_PART_RE = re.compile(_IDENT)


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


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
    except _TrailingBytes as exc:
        reason = str(exc)
    except Exception as exc:  # noqa: BLE001  (fastavro raises many types for foreign bytes)
        reason = f"value is not a DTS Avro record ({type(exc).__name__}: {exc})"
    raise ParseError(FORMAT, reason, "value")


class _TrailingBytes(Exception):
    """Bytes remain after one whole record."""


def _read(data: bytes, schema: dict) -> dict:
    stream = io.BytesIO(data)
    msg = fastavro.schemaless_reader(stream, schema, return_named_type=True)
    rest = len(data) - stream.tell()
    if rest:
        raise _TrailingBytes(f"value is not a DTS Avro record ({rest} bytes left after the record)")
    return msg


def split_object_name(name: Optional[str]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """``(database, schema, table)`` of an ``objectName``.

    ``db`` → (db, None, None); ``db.table`` → (db, None, table); ``db.schema.table`` →
    (db, schema, table). Parts are split at dots; ``\\u002E`` inside a part is a dot of the name
    (the SDK's ``ObjectNameUtils`` escaping). None or empty gives (None, None, None). Raises
    ``ValueError`` for more than three parts or an empty part.
    """
    if not name:
        return None, None, None
    parts = [p.replace("\\u002E", ".") for p in name.split(".")]
    if len(parts) > 3 or not all(parts):
        raise ValueError(f"objectName {name!r} is not db, db.table or db.schema.table")
    if len(parts) == 1:
        return parts[0], None, None
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return parts[0], parts[1], parts[2]


def parse_position(source_position: Optional[str], record_id: int) -> tuple[int, ...]:
    """The position tuple of a record.

    ``offset@fileindex`` (MySQL binlog: end offset of the event @ binlog file number) gives
    ``(fileindex, offset, id)``: numbers compare as numbers, the file first (``"194@10"`` sorts
    after ``"99999@9"``). Any other ``sourcePosition`` (other sources, or numbers beyond
    ``10**38``) gives ``(id,)``. Raises ``ValueError`` for a negative ``id``.
    """
    if isinstance(record_id, bool) or not isinstance(record_id, int) or not 0 <= record_id <= MAX_ELEMENT:
        raise ValueError(f"id {record_id!r} is not a non-negative integer")
    m = _POSITION_RE.match((source_position or "").strip())
    if m:
        offset, file_index = int(m.group(1)), int(m.group(2))
        if offset <= MAX_ELEMENT and file_index <= MAX_ELEMENT:
            return (file_index, offset, record_id)
    return (record_id,)


def primary_key_info(tags: Mapping[str, str]) -> Optional[list[str]]:
    """Key columns from the ``pk_uk_info`` tag: ``PRIMARY``, else the first unique index, else None.

    Raises ``ValueError`` when the tag is present but not a JSON object of column-name lists.
    """
    text = tags.get("pk_uk_info")
    if not text:
        return None
    try:
        info = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"pk_uk_info is not JSON ({exc.msg})") from None
    except RecursionError:
        raise ValueError("pk_uk_info is JSON nested too deeply to read") from None
    if not isinstance(info, dict) or not all(
            isinstance(cols, list) and all(isinstance(c, str) for c in cols) for cols in info.values()):
        raise ValueError(f"pk_uk_info {text!r} is not an object of column-name lists")
    if info.get("PRIMARY"):
        return list(info["PRIMARY"])
    for cols in info.values():
        if cols:
            return list(cols)
    return None


# ---------------------------------------------------------------------------------------------
# character sets

#: Python codec of each MySQL character set (``Character.charset``), following the Java
#: encodings of the SDK's ``JDKCharsetMapper`` where Python has the same one. ``binary`` is not
#: text: such values (BINARY/VARBINARY/BLOB columns) are kept as bytes. ``latin1`` is MySQL's
#: latin1, i.e. cp1252 with the five bytes cp1252 leaves undefined mapped to U+0081, U+008D,
#: U+008F, U+0090, U+009D. Names not listed are looked up as Python codec names (``UTF-8``,
#: ``GBK``, ``ISO-8859-1`` ...), after the few Oracle names below.
MYSQL_CHARSETS = {
    "utf8": "utf-8", "utf8mb3": "utf-8", "utf8mb4": "utf-8", "ascii": "ascii",
    "latin1": "mysql-latin1", "latin2": "iso8859_2", "latin5": "iso8859_9", "latin7": "iso8859_13",
    "cp1250": "cp1250", "cp1251": "cp1251", "cp1256": "cp1256", "cp1257": "cp1257",
    "cp850": "cp850", "cp852": "cp852", "cp866": "cp866", "cp932": "cp932", "keybcs2": "cp852",
    "armscii8": "cp1252", "dec8": "cp1252", "geostd8": "cp1252", "hp8": "cp1252", "swe7": "cp1252",
    "greek": "iso8859_7", "hebrew": "iso8859_8", "koi8r": "koi8_r", "koi8u": "koi8_u",
    "macroman": "mac_roman", "macce": "mac_latin2", "tis620": "tis_620",
    "big5": "big5", "gbk": "gbk", "gb2312": "gb2312", "gb18030": "gb18030",
    "sjis": "shift_jis", "ujis": "euc_jp", "eucjpms": "euc_jp", "euckr": "euc_kr",
    "ucs2": "utf-16-be", "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be",
    # Oracle NLS names
    "al32utf8": "utf-8", "al16utf16": "utf-16-be", "zhs16gbk": "gbk",
    "we8iso8859p1": "latin-1", "we8mswin1252": "cp1252",
}
_CP1252_UNDEFINED = (0x81, 0x8D, 0x8F, 0x90, 0x9D)
_MYSQL_LATIN1 = {i: bytes([i]).decode("cp1252") for i in range(0x80, 0xA0) if i not in _CP1252_UNDEFINED}


def decode_text(charset: str, data: bytes) -> Any:
    """The text of a ``Character`` value: ``data`` decoded with ``charset`` (see
    :data:`MYSQL_CHARSETS`); ``bytes`` for charset ``binary``. Raises ``ValueError`` for an
    unknown charset or bytes that are not text in it."""
    name = (charset or "").strip().lower()
    if name == "binary":
        return bytes(data)
    codec = MYSQL_CHARSETS.get(name, name)
    if codec == "mysql-latin1":
        return bytes(data).decode("latin-1").translate(_MYSQL_LATIN1)
    try:
        codecs.lookup(codec)
    except LookupError:
        raise ValueError(f"unknown charset {charset!r}") from None
    try:
        return bytes(data).decode(codec)
    except UnicodeDecodeError as exc:
        raise ValueError(f"bytes are not {charset} text ({exc.reason} at byte {exc.start})") from None


# ---------------------------------------------------------------------------------------------
# values

#: Canonical type of a null value by MySQL ``dataTypeNumber`` (the type its non-null values
#: get). Left out: DECIMAL/NEWDECIMAL (precision unknown) and the string/blob codes, which hold
#: text or bytes depending on the charset; nulls of those carry no type.
MYSQL_NULL_TYPES = {
    1: "smallint", 2: "smallint", 3: "int", 9: "int", 8: "bigint", 13: "int", 16: "bigint",
    4: "float", 5: "double", 7: "timestamp", 17: "timestamp", 12: "timestamp", 18: "timestamp",
    10: "date", 14: "date", 11: "string", 19: "string", 245: "string", 247: "string", 248: "string",
    255: "string",
}
_MYSQL_FLOAT = 4
_PG_BOOL = 16
_INT_BYTES = {1: "smallint", 2: "smallint", 3: "int", 4: "int"}
_INT_RANGES = (("smallint", 2**15), ("int", 2**31), ("bigint", 2**63))
_INT_ORDER = {"smallint": 0, "int": 1, "bigint": 2}
_EPOCH = _dt.datetime(1970, 1, 1)
_OFFSET_RE = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?$", re.I)


class SourceInfo:
    """What value decoding needs to know of a record: the source type and its position text."""

    def __init__(self, source_type: str, position: str):
        self.source_type = source_type
        self.mysql = source_type == "MySQL"
        #: DateTime ``millis`` unit: µs for MySQL and PostgreSQL logical readers, else ns (the
        #: SDK's LazyRecordDeserializer; PostgreSQL physical readers have ``<->`` positions).
        self.datetime_fraction_ns = not (source_type in ("MySQL", "PostgreSQL") and "<->" not in position)


def _integer_type(n: int, precision: int, type_number: int, source: SourceInfo) -> str:
    """``Integer.precision`` is the byte width (1 tinyint, 2 smallint, 3 mediumint, 4 int, 8 bigint);
    above 8 it is a number of decimal digits; 0 (unset) falls back to the MySQL type code. The
    type is widened for a value outside it (unsigned columns)."""
    if 0 < precision <= 8:
        base = _INT_BYTES.get(precision, "bigint")
    elif precision > 8:
        base = f"decimal({min(precision, 38)},0)"
    else:
        base = (MYSQL_NULL_TYPES.get(type_number) if source.mysql else None) or "bigint"
        if base not in _INT_ORDER:
            base = "bigint"
    digits = len(str(abs(n)))
    if base in _INT_ORDER:
        for name, bound in _INT_RANGES:
            if _INT_ORDER[name] >= _INT_ORDER[base] and -bound <= n < bound:
                return name
        base = "decimal(20,0)"
    p = int(base[8:-3])
    if digits > p:
        if digits > 38:
            raise ValueError(f"integer {n} has more than 38 digits")
        return f"decimal({max(digits, 20)},0)"
    return base


def _decimal(text: str, precision: int, scale: int) -> tuple[Decimal, str]:
    try:
        number = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a decimal number") from None
    if not number.is_finite():
        return number, "decimal(38,0)"  # rendered only into a configured non-decimal type
    exponent = number.as_tuple().exponent
    s = max(scale, -exponent, 0)
    integer_digits = max(number.adjusted() + 1, 0)
    p = max(precision, integer_digits + s, 1)
    if p > 38 or s > 38:
        raise ValueError(f"decimal {text!r} needs more than 38 digits")
    return number, f"decimal({p},{s})"


def _fraction_us(value: Optional[int], source: SourceInfo) -> int:
    if value is None:
        return 0
    us = value // 1000 if source.datetime_fraction_ns else value
    if not 0 <= us < 10**6:
        raise ValueError(f"fraction {value} is out of range")
    return us


def _datetime_value(d: Mapping[str, Any], source: SourceInfo) -> tuple[Any, str]:
    """A ``DateTime``: date and time → timestamp (naive, read as UTC: MySQL DATETIME has no zone);
    date only → date; time only → string ``HH:MM:SS[.ffffff]`` (MySQL TIME); year only → int
    (MySQL YEAR). Zero dates (a 0 year, month or day: MySQL's ``0000-00-00``) are null."""
    year, month, day, hour = d.get("year"), d.get("month"), d.get("day"), d.get("hour")
    has_date, has_time = None not in (year, month, day), hour is not None
    us = _fraction_us(d.get("millis"), source)
    if has_date and 0 in (year, month, day):
        return None, "timestamp" if has_time else "date"
    if has_date and has_time:
        return _dt.datetime(year, month, day, hour, d.get("minute") or 0, d.get("second") or 0, us), "timestamp"
    if has_date:
        return _dt.date(year, month, day), "date"
    if has_time and year is None and month is None and day is None:
        sign = "-" if hour < 0 else ""
        text = f"{sign}{abs(hour):02d}:{d.get('minute') or 0:02d}:{d.get('second') or 0:02d}"
        return (text + f".{us:06d}" if us else text), "string"
    if year is not None and month is None and day is None and not has_time:
        return year, "int"
    raise ValueError(f"DateTime {dict(d)!r} has an incomplete date")


def _timezone(text: str) -> _dt.tzinfo:
    t = (text or "").strip()
    if t.upper() in ("Z", "UTC", "GMT", "UT"):
        return _dt.timezone.utc
    m = _OFFSET_RE.match(t)
    if m:
        delta = _dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0), seconds=int(m.group(4) or 0))
        if delta >= _dt.timedelta(hours=24):
            raise ValueError(f"time zone offset {text!r} is out of range")
        return _dt.timezone(-delta if m.group(1) == "-" else delta)
    try:
        return zoneinfo.ZoneInfo(t)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {text!r}") from None


def _float32_text(value: float) -> str:
    """The shortest decimal text that reads back as the same 32-bit float (Java's ``Float``
    widened to double, as DTS writes FLOAT columns: 1.100000023841858 → ``1.1``)."""
    try:
        packed = struct.pack("<f", value)
    except OverflowError:
        return repr(value)
    if value != value or value in (float("inf"), float("-inf")):
        return repr(value)
    single = struct.unpack("<f", packed)[0]
    for digits in range(1, 10):
        candidate = float(f"{single:.{digits}g}")
        if struct.pack("<f", candidate) == packed:
            return repr(candidate)
    return repr(single)


def read_value(item: Any, type_number: int, source: SourceInfo) -> tuple[Any, Optional[str]]:
    """One image value (a union branch as :func:`decode` returns it) → ``(Python value, type)``.

    The value is :data:`ABSENT` (column left out of the image) for ``EmptyObject.NONE``: the
    SDK's ``NoneValue``, a placeholder "without any meaning" whose ``isNull()`` is false, i.e. no
    value was captured. An Avro null and ``EmptyObject.NULL`` are SQL NULL (value None; typed
    from a MySQL ``dataTypeNumber`` where :data:`MYSQL_NULL_TYPES` knows it, else untyped).

    ================================  ===========================================================
    branch                            value and canonical type
    ================================  ===========================================================
    Integer (precision, value text)   int; smallint/int/bigint by byte width (see
                                      ``_integer_type``), decimal(n,0) for digit precisions and
                                      values beyond bigint
    Character (charset, bytes)        str decoded with the charset (:func:`decode_text`),
                                      string; charset ``binary`` → bytes, binary
    Decimal (value, precision, scale) Decimal, decimal(p,s) (p, s of the value as DTS gives them,
                                      raised to fit the digits; text may use exponents: ``1E+3``)
    Float (value, precision, scale)   float; float for MySQL FLOAT (type 4) or precision ≤ 4
                                      bytes, else double. FLOAT text is the shortest that reads
                                      back as the same 32-bit float
    Timestamp (timestamp, millis)     epoch seconds + µs (the SDK's ``setMicro``) → timestamp UTC
    DateTime                          see ``_datetime_value``; ``millis`` holds µs for MySQL and
                                      PostgreSQL, ns for other sources (truncated to µs)
    TimestampWithTimeZone             DateTime in ``timezone`` (``+08:00``, ``UTC``, an IANA name)
                                      → timestamp in UTC; time-only → string with the zone
    BinaryGeometry (type, bytes)      string: the WKB as upper-case hex (``0101000000...``)
    TextGeometry (type, text)         string: the WKT text
    BinaryObject (type, bytes)        bytes, binary; type BIT → bigint (unsigned big-endian);
                                      JSON/JSONB → string (UTF-8)
    TextObject (type, text)           string; PostgreSQL bool (type 16) ``t``/``f`` → boolean
    EmptyObject                       NULL → None, NONE → ABSENT
    ================================  ===========================================================

    Raises ``ValueError`` (or ``TypeError``/``ArithmeticError``) for a value that does not fit.
    """
    if item is None:
        return None, MYSQL_NULL_TYPES.get(type_number) if source.mysql else None
    branch, data = item if isinstance(item, tuple) else (f"{NAMESPACE}.EmptyObject", item)
    kind = branch.rpartition(".")[2]
    if kind == "EmptyObject":
        if data == "NONE":
            return ABSENT, None
        return None, MYSQL_NULL_TYPES.get(type_number) if source.mysql else None
    if kind == "Integer":
        text = data["value"].strip()
        if not _INTEGER_RE.match(text):
            raise ValueError(f"{data['value']!r} is not an integer")
        n = int(text)
        return n, _integer_type(n, data["precision"], type_number, source)
    if kind == "Character":
        value = decode_text(data["charset"], data["value"])
        return value, "binary" if isinstance(value, bytes) else "string"
    if kind == "Decimal":
        return _decimal(data["value"], data["precision"], data["scale"])
    if kind == "Float":
        single = (source.mysql and type_number == _MYSQL_FLOAT) or 0 < data["precision"] <= 4
        return float(data["value"]), "float" if single else "double"
    if kind == "Timestamp":
        us = data["millis"]
        if not 0 <= us < 10**6:
            raise ValueError(f"Timestamp micro part {us} is out of range")
        return _EPOCH + _dt.timedelta(seconds=data["timestamp"], microseconds=us), "timestamp"
    if kind == "DateTime":
        return _datetime_value(data, source)
    if kind == "TimestampWithTimeZone":
        value, ctype = _datetime_value(data["value"], source)
        zone = _timezone(data["timezone"])
        if isinstance(value, _dt.datetime):
            return value.replace(tzinfo=zone).astimezone(_dt.timezone.utc).replace(tzinfo=None), ctype
        if ctype == "string" and value is not None:
            return f"{value}{data['timezone'].strip()}", ctype
        return value, ctype
    if kind == "BinaryGeometry":
        return bytes(data["value"]).hex().upper(), "string"
    if kind == "TextGeometry":
        return data["value"], "string"
    if kind == "BinaryObject":
        obj_type = (data["type"] or "").strip().upper()
        if obj_type == "BIT":
            return int.from_bytes(bytes(data["value"]), "big"), "bigint"
        if obj_type in ("JSON", "JSONB"):
            return bytes(data["value"]).decode("utf-8"), "string"
        return bytes(data["value"]), "binary"
    if kind == "TextObject":
        if source.source_type == "PostgreSQL" and type_number == _PG_BOOL:
            flag = data["value"].strip().lower()
            if flag in ("t", "true", "1"):
                return True, "boolean"
            if flag in ("f", "false", "0"):
                return False, "boolean"
            raise ValueError(f"{data['value']!r} is not a boolean")
        return data["value"], "string"
    raise ValueError(f"unknown value type {branch!r}")


def value_text(value: Any, ctype: Optional[str]) -> Optional[str]:
    """Canonical text of a value from :func:`read_value` in its type (floats of type ``float`` as
    32-bit floats). Raises ``ValueError`` for a NaN or infinite decimal."""
    if value is None:
        return None
    if ctype == "float" and isinstance(value, float):
        return _float32_text(value)
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"{value} is not a finite decimal")
    return to_text(value, ctype or "string")


# ---------------------------------------------------------------------------------------------
# parser


class DtsAvroParser:
    """Parser of ``dts-avro`` records: ``DtsAvroParser(options).parse(KafkaRecord)``.

    Returns a one-element list of :class:`ChangeRecord` for INSERT/UPDATE/DELETE and for a DDL
    record holding ``TRUNCATE [TABLE] [db.]t``, or a :class:`ControlRecord` (see the module
    docstring). Raises :class:`ParseError` naming
    ``dts-avro`` and the field for: bytes that are not one DTS Avro record (``value``), a row
    change without a table (``objectName``), without ``fields`` (``fields``), with an image that
    is missing, not a list or not as long as ``fields`` (``beforeImages``/``afterImages``), a
    value that cannot be read (``afterImages.<column>``), a negative ``id`` or
    ``sourceTimestamp``, a malformed ``pk_uk_info`` (``tags.pk_uk_info``), no resolvable key
    (``primary_key``), or a delete whose before image lacks a key value.
    """

    format_name = FORMAT

    def __init__(self, options: Optional[Mapping[str, Any]] = None):
        self.options = SourceOptions(options or {})

    def parse(self, record: KafkaRecord) -> ParseResult:
        """Parse one Kafka record (see the class docstring for results and errors)."""
        if not record.value:
            return ControlRecord("tombstone", FORMAT)
        msg = decode(record.value)
        operation = msg["operation"]
        try:
            database, schema, table = split_object_name(msg.get("objectName"))
        except ValueError as exc:
            raise ParseError(FORMAT, str(exc), "objectName") from None
        if operation == "DDL":
            truncated = self._truncate(msg, database, schema)
            if truncated:
                return truncated
        if operation in CONTROL_OPERATIONS:
            return self._control(msg, operation, database, schema, table)
        if operation not in ROW_OPERATIONS:
            raise ParseError(FORMAT, f"unknown operation {operation!r}", "operation")
        op = ROW_OPERATIONS[operation]
        if table is None:
            raise ParseError(FORMAT, f"row change without a table name ({msg.get('objectName')!r})", "objectName")

        fields = msg.get("fields")
        if not isinstance(fields, list) or not fields:
            raise ParseError(FORMAT, f"row change without a field list (got {type(fields).__name__})", "fields")
        names = [f["name"] for f in fields]
        numbers = [f["dataTypeNumber"] for f in fields]
        source = SourceInfo(msg["source"]["sourceType"], msg.get("sourcePosition") or "")
        configured = self.options.column_types(database, schema, table)

        types: dict[str, str] = {}
        raw: dict[str, Optional[dict[str, Any]]] = {}
        for image_field in ("beforeImages", "afterImages"):
            raw[image_field] = self._image(msg, image_field, names, numbers, source, types)
        before_raw, after_raw = raw["beforeImages"], raw["afterImages"]
        if op == "insert" and after_raw is None:
            raise ParseError(FORMAT, "INSERT without an after image", "afterImages")
        if op == "delete" and before_raw is None:
            raise ParseError(FORMAT, "DELETE without a before image", "beforeImages")
        if op == "update" and after_raw is None:
            raise ParseError(FORMAT, "UPDATE without an after image", "afterImages")
        types.update(configured)
        before = self._texts(before_raw, types, configured, "beforeImages")
        after = self._texts(after_raw, types, configured, "afterImages")

        key = read_key(record.key)
        override = self.options.key_override(database, schema, table)
        carried = None
        if not override:
            try:
                carried = primary_key_info(msg.get("tags") or {})
            except ValueError as exc:
                raise ParseError(FORMAT, str(exc), "tags.pk_uk_info") from None
        primary_key = resolve_primary_key(FORMAT, override, carried, list(key[0]) if key else None)
        if op == "delete":
            key_text = self._key_text(key[0], types) if key else None
            before = key_delete_image(FORMAT, primary_key, before, key_text, "beforeImages", _DELETE_HINT)

        try:
            position = parse_position(msg.get("sourcePosition"), msg["id"])
        except ValueError as exc:
            raise ParseError(FORMAT, str(exc), "id") from None
        seconds = msg["sourceTimestamp"]
        if seconds < 0:
            raise ParseError(FORMAT, f"negative sourceTimestamp {seconds}", "sourceTimestamp")
        txid = (msg.get("sourceTxid") or "").strip()
        return [ChangeRecord(
            source_format=FORMAT, source_database=database, source_schema=schema, source_table=table,
            op=op, before=before if op != "insert" else None, after=after if op != "delete" else None,
            primary_key=list(primary_key), column_types=types, source_position=position,
            source_ts_ms=seconds * 1000, tx_id=None if txid in ("", "0") else txid)]

    @staticmethod
    def _key_text(key: Mapping[str, Any], types: Mapping[str, str]) -> Optional[dict[str, Optional[str]]]:
        """Canonical text of a JSON Kafka key's columns; None when a value does not fit its type."""
        try:
            return {c: coerce_text(v, types.get(c, "string")) for c, v in key.items()}
        except ValueError:
            return None

    def _truncate(self, msg: dict, database: Optional[str], schema: Optional[str]) -> Optional[list[ChangeRecord]]:
        """A ``truncate`` change for a DDL record whose statement is ``TRUNCATE [TABLE] [db.]name``
        (the table named by the statement, the database by it or by ``objectName``); else None."""
        statement = msg.get("afterImages")
        m = _TRUNCATE_RE.match(statement) if isinstance(statement, str) else None
        if not m:
            return None
        names = [_unquote(part) for part in _NAME_PART_RE.findall(m.group("name"))]
        if len(names) == 2:
            database, schema = names[0], None
        table = names[-1]
        try:
            position = parse_position(msg.get("sourcePosition"), msg["id"])
        except ValueError as exc:
            raise ParseError(FORMAT, str(exc), "id") from None
        txid = (msg.get("sourceTxid") or "").strip()
        key = resolve_primary_key(FORMAT, self.options.key_override(database, schema, table), None, None,
                                  required=False)
        return [ChangeRecord(
            source_format=FORMAT, source_database=database, source_schema=schema, source_table=table,
            op="truncate", before=None, after=None, primary_key=key, source_position=position,
            source_ts_ms=max(msg["sourceTimestamp"], 0) * 1000, tx_id=None if txid in ("", "0") else txid)]

    @staticmethod
    def _control(msg: dict, operation: str, database, schema, table) -> ControlRecord:
        kind = CONTROL_OPERATIONS[operation]
        if kind == "ddl":
            detail = next((img for img in (msg.get("afterImages"), msg.get("beforeImages")) if isinstance(img, str)),
                          None)
            return ControlRecord(kind, FORMAT, database, schema, table, detail=detail)
        txid = (msg.get("sourceTxid") or "").strip()
        detail = operation if txid in ("", "0") else f"{operation} {txid}"
        if kind != "transaction" or txid in ("", "0"):
            return ControlRecord(kind, FORMAT, database, schema, table, detail=detail)
        return ControlRecord(kind, FORMAT, database, schema, table, detail=detail, tx_id=txid,
                             tx_end=operation == "COMMIT")

    @staticmethod
    def _image(msg: dict, image_field: str, names: list, numbers: list, source: SourceInfo,
               types: dict) -> Optional[dict[str, Any]]:
        """Python values of one image (None when the record has none); records value types in
        ``types`` (the wider of before and after where they differ)."""
        image = msg.get(image_field)
        if image is None:
            return None
        if not isinstance(image, list):
            raise ParseError(FORMAT, f"image is a {type(image).__name__}, not a list of values", image_field)
        if len(image) != len(names):
            raise ParseError(FORMAT, f"image has {len(image)} values for {len(names)} fields", image_field)
        out: dict[str, Any] = {}
        for name, number, item in zip(names, numbers, image):
            try:
                value, ctype = read_value(item, number, source)
            except (ValueError, TypeError, ArithmeticError, OverflowError) as exc:
                raise ParseError(FORMAT, f"cannot read {item!r}: {exc}", f"{image_field}.{name}") from None
            if value is ABSENT:
                continue
            out[name] = value
            old = types.get(name)
            if ctype and old != ctype:
                types[name] = ctype if old is None else (widen(old, ctype) or ctype)
        return out

    @staticmethod
    def _texts(values: Optional[dict[str, Any]], types: Mapping[str, str], configured: Mapping[str, str],
               image_field: str) -> Optional[dict[str, Optional[str]]]:
        if values is None:
            return None
        out: dict[str, Optional[str]] = {}
        for name, value in values.items():
            try:
                if name in configured:
                    out[name] = None if value is None else coerce_text(value, configured[name])
                else:
                    out[name] = value_text(value, types.get(name))
            except (ValueError, TypeError, ArithmeticError) as exc:
                raise ParseError(FORMAT, f"cannot read {value!r}: {exc}", f"{image_field}.{name}") from None
        return out
