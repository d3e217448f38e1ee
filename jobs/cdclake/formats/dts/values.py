"""DTS Avro values: the union branches of an image read as Python values and canonical types.

Follows the schema's value types (``Integer``, ``Character``, ``Decimal``, ``Float``, ``Timestamp``,
``DateTime``, ``TimestampWithTimeZone``, ``BinaryGeometry``, ``TextGeometry``, ``BinaryObject``,
``TextObject``, ``EmptyObject``) and how Alibaba's subscription SDK
(``aliyun/aliyun-dts-subscribe-sdk-java``) reads them: :func:`read_value` per value,
:func:`decode_text` for character sets, :func:`value_text` for the canonical text.
"""
from __future__ import annotations

import codecs
import datetime as _dt
import re
import zoneinfo
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping, Optional

from cdclake.formats.dts.schema import NAMESPACE
from cdclake.formats.text import ABSENT, float32_text
from cdclake.types import to_text

_INTEGER_RE = re.compile(r"^[+-]?[0-9]+$")

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
    4: "float", 5: "double", 7: "timestamp", 17: "timestamp", 12: "timestamp_ntz", 18: "timestamp_ntz",
    10: "date", 14: "date", 11: "string", 19: "string", 245: "string", 247: "string", 248: "string",
    255: "string",
}
_MYSQL_FLOAT = 4
_PG_BOOL = 16
_INT_BYTES = {1: "smallint", 2: "smallint", 3: "int", 4: "int"}
_INT_RANGES = (("smallint", 2**15), ("int", 2**31), ("bigint", 2**63))
_INT_ORDER = {"smallint": 0, "int": 1, "bigint": 2}
_EPOCH = _dt.datetime(1970, 1, 1)
_OFFSET_RE = re.compile(r"^(?:UTC|GMT)?\s*([+-])([0-9]{1,2})(?::?([0-9]{2}))?(?::?([0-9]{2}))?$", re.I)


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
    """A ``DateTime``: date and time → timestamp_ntz (MySQL DATETIME: a wall-clock time, no zone);
    date only → date; time only → string ``HH:MM:SS[.ffffff]`` (MySQL TIME); year only → int
    (MySQL YEAR). Zero dates (a 0 year, month or day: MySQL's ``0000-00-00``) are null."""
    year, month, day, hour = d.get("year"), d.get("month"), d.get("day"), d.get("hour")
    has_date, has_time = None not in (year, month, day), hour is not None
    us = _fraction_us(d.get("millis"), source)
    if has_date and 0 in (year, month, day):
        return None, "timestamp_ntz" if has_time else "date"
    if has_date and has_time:
        return _dt.datetime(year, month, day, hour, d.get("minute") or 0, d.get("second") or 0, us), "timestamp_ntz"
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
            return value.replace(tzinfo=zone).astimezone(_dt.timezone.utc).replace(tzinfo=None), "timestamp"
        if ctype == "string" and value is not None:
            return f"{value}{data['timezone'].strip()}", ctype
        return value, "timestamp" if ctype == "timestamp_ntz" else ctype
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
        return float32_text(value, keep_out_of_range=True)
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"{value} is not a finite decimal")
    return to_text(value, ctype or "string")


# ---------------------------------------------------------------------------------------------
# a column of values over a batch of records

_FLOAT = f"{NAMESPACE}.Float"


def read_column(items: list, type_number: int, source: SourceInfo, memo: dict) -> list[Optional[list]]:
    """:func:`read_value` over one column of a batch of images: per item ``[value, type, texts]``
    (``texts``: a dict where the caller keeps the value's canonical texts by type), or None where
    :func:`read_value` refuses the item.

    ``memo`` (kept by the caller for one column: one ``type_number`` and ``source``) maps the items
    read before to their entry, by a key equal only for items :func:`read_value` reads alike (the
    branch and the record's values; none for a Float of 0.0, -0.0 or NaN, which compare unlike
    their bits, nor for a value holding a record), so that equal items (an update's unchanged
    columns) share one entry and are read once.
    """
    out: list[Optional[list]] = []
    append = out.append
    for item in items:
        key = None
        if type(item) is tuple:
            data = item[1]
            if type(data) is not dict:
                key = item
            elif item[0] != _FLOAT or (data["value"] and data["value"] == data["value"]):
                key = (item[0], *data.values())
        if key is not None:
            try:
                entry = memo[key]
                append(entry)
                continue
            except KeyError:
                pass
            except TypeError:  # a value holding a record (TimestampWithTimeZone)
                key = None
        try:
            value, ctype = read_value(item, type_number, source)
            entry = [value, ctype, {}]
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            entry = None
        if key is not None:
            memo[key] = entry
        append(entry)
    return out
