"""Qlik Replicate values: column types, value text, column masks and transaction headers.

Follows Qlik Replicate's Kafka target "Supported data types" table (JSON: numbers for INT*/REAL*,
text for DATE/TIME/DATETIME/NUMERIC, hexadecimal digits for BYTES/BLOB; Avro: ``int``/``long``/
``float``/``double``, ``decimal`` on bytes for NUMERIC, ``date``, ``time-millis``,
``timestamp-micros``, ``bytes``) and "Metadata and data messages" (``columnMask``/``changeMask``,
``transactionLastEvent``).
"""
from __future__ import annotations

import datetime as _dt
import re
from decimal import Decimal
from typing import Any, Callable, Mapping, Optional, Union

from cdclake.formats.text import coerce_text, float32_text, pad_scale, text_converter
from cdclake.types import normalize_type, to_text

#: Qlik Replicate data type → canonical type (NUMERIC and unknown types are handled in :func:`qlik_type`).
QLIK_TYPES = {
    "INT1": "smallint", "INT2": "smallint", "INT4": "int", "INT8": "bigint",
    "UINT1": "smallint", "UINT2": "int", "UINT4": "bigint", "UINT8": "decimal(20,0)",
    "REAL4": "float", "REAL8": "double", "BOOLEAN": "boolean", "BOOL": "boolean",
    "STRING": "string", "WSTRING": "string", "CLOB": "string", "NCLOB": "string",
    "BYTES": "binary", "BLOB": "binary",
    "DATE": "date", "TIME": "string", "DATETIME": "timestamp_ntz", "TIMESTAMP": "timestamp_ntz",
}
_TYPE_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*(?:\(\s*([0-9]+)\s*(?:,\s*([0-9]+)\s*)?\))?\s*$")


def qlik_type(type_text: Any, precision: Any = 0, scale: Any = 0) -> str:
    """Canonical type of a Qlik Replicate column type (``type`` of ``tableColumns``).

    ============================  =====================
    Qlik Replicate type           canonical type
    ============================  =====================
    INT1, INT2, UINT1             smallint
    INT4, UINT2                   int
    INT8, UINT4                   bigint
    UINT8                         decimal(20,0)
    NUMERIC(p,s)                  decimal(p,s)
    REAL4 / REAL8                 float / double
    BOOLEAN                       boolean
    STRING, WSTRING, CLOB, NCLOB  string
    BYTES, BLOB                   binary
    DATE                          date
    TIME                          string (``HH:MM:SS[.f]``)
    DATETIME (any precision)      timestamp
    anything else                 string
    ============================  =====================

    NUMERIC takes precision and scale from the type text (``NUMERIC(10,2)``) or else from the
    ``precision``/``scale`` properties; a precision of 0 (unknown) becomes 38, and precisions
    above 38 are capped at 38 (:func:`cdclake.types.normalize_type`).
    """
    m = _TYPE_RE.match(str(type_text or ""))
    if not m:
        return "string"
    base = m.group(1).upper()
    if base in ("NUMERIC", "DECIMAL", "NUMBER"):
        p = int(m.group(2)) if m.group(2) else _int_or_zero(precision)
        s = int(m.group(3)) if m.group(3) else (0 if m.group(2) else _int_or_zero(scale))
        p = p or 38
        return normalize_type(f"decimal({p},{min(s, p)})")
    return QLIK_TYPES.get(base, "string")


def _int_or_zero(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, str) and value.strip().isdigit() and value.isascii():
        return int(value)
    return 0


def value_text(value: Any, ctype: str) -> Optional[str]:
    """Canonical text of one Qlik value (decoded JSON or Avro) of canonical type ``ctype``.

    JSON values are numbers (INT*, REAL*), booleans, or text (NUMERIC, DATE, TIME, DATETIME;
    BYTES/BLOB as hexadecimal digits). Avro values come with logical types applied: ``Decimal``,
    ``datetime.date``, ``datetime.time``, aware UTC ``datetime``, ``bytes``. Timestamps without a
    zone are taken as UTC. Raises ``ValueError`` when the value does not fit ``ctype``.
    """
    if value is None:
        return None
    if ctype == "binary":
        if isinstance(value, (bytes, bytearray)):
            return to_text(bytes(value))
        if isinstance(value, str):
            text = value.strip()
            try:
                return to_text(bytes.fromhex(text if len(text) % 2 == 0 else "0" + text))
            except ValueError:
                raise ValueError(f"{value!r} is not hexadecimal digits") from None
        raise ValueError(f"{value!r} is not binary data")
    if isinstance(value, (bytes, bytearray)):
        if ctype == "string":
            return to_text(bytes(value))
        raise ValueError(f"bytes {bytes(value)!r} do not fit type {ctype}")
    if isinstance(value, _dt.time):
        return value.isoformat()
    if ctype == "float" and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return float32_text(float(value))
    if isinstance(value, _dt.datetime):
        if ctype == "date":
            return to_text(value.date())
        return to_text(value)
    if isinstance(value, _dt.date) and ctype in ("date", "string"):
        return to_text(value)
    if isinstance(value, Decimal) and ctype.startswith("decimal"):
        return to_text(pad_scale(value, ctype))
    return coerce_text(value, ctype)


_VALUE_CONVERTERS: dict[str, Callable[[Any], Optional[str]]] = {}


def value_converter(ctype: str) -> Callable[[Any], Optional[str]]:
    """:func:`value_text` for one canonical type as a function of the value:
    ``value_converter(t)(v) == value_text(v, t)`` for every value, errors included (kept per type).

    The value types a data message carries take the branch :func:`value_text` would take for them,
    chosen by exact type (JSON text, numbers and booleans; Avro ``Decimal``, ``datetime``,
    ``date``, ``time`` and ``bytes``); any other value goes through :func:`value_text` itself.
    """
    conv = _VALUE_CONVERTERS.get(ctype)
    if conv is None:
        conv = _VALUE_CONVERTERS[ctype] = _make_value_converter(ctype)
    return conv


def _make_value_converter(ctype: str) -> Callable[[Any], Optional[str]]:
    if ctype in ("binary", "float"):
        def general(value: Any) -> Optional[str]:
            return value_text(value, ctype)
        if ctype == "binary":
            return general

        def real4(value: Any) -> Optional[str]:
            t = type(value)
            if t is float or t is int or t is str:
                return float32_text(float(value))
            return value_text(value, ctype)
        return real4
    direct = text_converter(ctype)
    is_decimal = ctype.startswith("decimal")
    keeps_date = ctype in ("date", "string")
    to_date = ctype == "date"
    Decimal_, datetime_, date_, time_ = Decimal, _dt.datetime, _dt.date, _dt.time

    def convert(value: Any) -> Optional[str]:
        t = type(value)
        if t is str or t is int or t is float or t is bool:
            return direct(value)
        if value is None:
            return None
        if t is Decimal_:
            return to_text(pad_scale(value, ctype)) if is_decimal else direct(value)
        if t is datetime_:
            return to_text(value.date()) if to_date else to_text(value)
        if t is date_:
            return to_text(value) if keeps_date else direct(value)
        if t is time_:
            return value.isoformat()
        if t is bytes and ctype == "string":
            return to_text(value)
        return value_text(value, ctype)
    return convert


def mask_ordinals(mask: Union[str, bytes, bytearray, None]) -> Optional[frozenset]:
    """The column ordinals whose bits are set in a ``changeMask``/``columnMask``; None for no mask.

    The mask is hexadecimal digits (JSON) or raw bytes (Avro), little-endian: byte ``k`` holds
    bits ``8k`` to ``8k+7`` (least significant bit first), and bit ``i`` is ordinal ``i + 1``.
    So ``"0B"`` (binary 1011) gives ordinals {1, 2, 4}, ``"FF03"`` gives 1 to 10. A hex string of
    odd length is read as if it had a leading ``0``. An empty mask (``""``) is None. Raises
    ``ValueError`` for text that is not hexadecimal digits.
    """
    if mask is None:
        return None
    if isinstance(mask, str):
        text = mask.strip()
        if not text:
            return None
        if len(text) % 2:
            text = "0" + text
        try:
            data = bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"{mask!r} is not hexadecimal digits") from None
    elif isinstance(mask, (bytes, bytearray)):
        data = bytes(mask)
    else:
        raise ValueError(f"{mask!r} is neither hexadecimal text nor bytes")
    return frozenset(8 * k + bit + 1 for k, byte in enumerate(data) for bit in range(8) if byte >> bit & 1)


def transaction_last_event(headers: Any) -> Optional[bool]:
    """``headers.transactionLastEvent`` of a data message as a bool (None when absent or null).

    Accepts a JSON/Avro boolean or the text ``true``/``false`` (any case). Raises ``ValueError``
    for anything else.
    """
    if not isinstance(headers, Mapping):
        return None
    value = headers.get("transactionLastEvent")
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"transactionLastEvent {value!r} is not a boolean")
