"""Canonical column types and their one text form each, and the conversion table to Spark SQL.

Bronze images are ``map<string,string>``; every value is written there in the canonical text
form of its column's canonical type, and becomes typed only in silver, through
:func:`sql_cast` (one conversion per type). Canonical type names are Spark SQL / Iceberg names:

=================  =============================================  ==============================
canonical type     text form in bronze                            silver column (Iceberg type)
=================  =============================================  ==============================
boolean            ``true`` / ``false``                           boolean
smallint, int      decimal digits, optional ``-``                 int (Iceberg has no smallint)
bigint             decimal digits, optional ``-``                 long
float, double      Python ``repr`` of the float (``3.14``, ``nan``) float / double
decimal(p,s)       plain decimal, no exponent (``-12.50``)        decimal(p,s)
string             the text itself                                string
binary             standard Base64 of the bytes                   binary
date               ``YYYY-MM-DD``                                 date
timestamp          ``YYYY-MM-DD HH:MM:SS[.ffffff]`` in UTC        timestamp with zone (UTC, µs)
=================  =============================================  ==============================

Unknown or missing types are ``string``.
"""
from __future__ import annotations

import base64
import datetime as _dt
import re
from decimal import Decimal
from typing import Optional

_DECIMAL_RE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
SIMPLE_TYPES = ("boolean", "smallint", "int", "bigint", "float", "double", "string", "binary", "date", "timestamp")


def normalize_type(t: Optional[str]) -> str:
    """Return the canonical spelling of a type name; unknown names become ``string``.

    >>> normalize_type("DECIMAL(10, 2)")
    'decimal(10,2)'
    """
    if not t:
        return "string"
    t = t.strip().lower()
    m = _DECIMAL_RE.match(t)
    if m:
        p, s = int(m.group(1)), int(m.group(2))
        return f"decimal({min(p, 38)},{min(s, min(p, 38))})"
    return t if t in SIMPLE_TYPES else "string"


def decimal_precision_scale(t: str) -> Optional[tuple[int, int]]:
    """``(precision, scale)`` of a ``decimal(p,s)`` type, else None."""
    m = _DECIMAL_RE.match(t)
    return (int(m.group(1)), int(m.group(2))) if m else None


def to_text(value: object, ctype: str = "string") -> Optional[str]:
    """Render a Python value in the canonical text form of ``ctype`` (None stays None).

    Accepts what parsers commonly hold: bool, int, float, Decimal, str, bytes,
    ``datetime.date`` and ``datetime.datetime`` (naive values are taken as UTC).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        if ctype.startswith("decimal"):
            return format(Decimal(repr(value)), "f")
        return repr(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def spark_type(ctype: str) -> str:
    """The Spark SQL type of a silver column for canonical type ``ctype``."""
    ctype = normalize_type(ctype)
    return "int" if ctype == "smallint" else ctype


#: Spark SQL templates per silver type: (canonical text -> typed value, typed value -> text).
_SQL_CONVERSIONS = {
    "string": ("{}", "{}"),
    "binary": ("unbase64({})", "base64({})"),
    "timestamp": ("to_timestamp({})", "date_format({}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"),
}


def sql_cast(expr: str, ctype: str) -> str:
    """Spark SQL expression turning the canonical text ``expr`` into the silver type ``ctype``.

    This is the one conversion table from bronze text to typed silver values.
    """
    st = spark_type(ctype)
    template = _SQL_CONVERSIONS.get(st, (f"CAST({{}} AS {st})", ""))[0]
    return template.format(expr)


def sql_text(expr: str, ctype: str) -> str:
    """Spark SQL expression turning a typed silver value back into text that :func:`sql_cast` reads.

    The inverse of :func:`sql_cast` (``sql_cast(sql_text(x, t), t) == x``), used where silver
    values meet bronze images again (a key change carrying the old row's columns over).
    Timestamps are written in the session time zone, which the pipeline sets to UTC.
    """
    template = _SQL_CONVERSIONS.get(spark_type(ctype), ("", "CAST({} AS STRING)"))[1]
    return template.format(expr)


def widen(old: str, new: str) -> Optional[str]:
    """The type a column of type ``old`` becomes when a change carries ``new``, by Iceberg's promotions.

    Iceberg promotes a column only int → bigint (long), float → double and decimal(P,S) →
    decimal(P',S) with P' > P (same scale). Returns the wider type for such a promotion, ``old``
    when ``new`` is the same or narrower by one of them (bigint then int stays bigint;
    decimal(12,2) then decimal(10,2) stays decimal(12,2)), and None for any other pair (a
    decimal scale change, int → double, bigint → decimal, anything → string ...). Type names are
    canonical (:func:`normalize_type`; smallint counts as int).

    >>> widen("decimal(10,2)", "decimal(12,2)")
    'decimal(12,2)'
    >>> widen("decimal(10,2)", "decimal(10,4)") is None
    True
    """
    old, new = spark_type(old), spark_type(new)
    if old == new:
        return old
    for chain in (("int", "bigint"), ("float", "double")):
        if old in chain and new in chain:
            return chain[max(chain.index(old), chain.index(new))]
    po, pn = decimal_precision_scale(old), decimal_precision_scale(new)
    if po and pn and po[1] == pn[1]:
        return old if po[0] >= pn[0] else new
    return None


def quote_ident(name: str) -> str:
    """Quote an identifier for Spark SQL: wrapped in backticks, inner backticks doubled."""
    return "`" + str(name).replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """A Spark SQL string literal for ``value`` (backslashes and quotes escaped)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"
