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
timestamp          ``YYYY-MM-DD HH:MM:SS[.ffffff]`` in UTC        timestamptz (UTC, µs)
timestamp_ntz      ``YYYY-MM-DD HH:MM:SS[.ffffff]``, wall clock   timestamp (no zone, µs; Spark
                   time without a zone                            ``TIMESTAMP_NTZ``)
array<T>           a JSON array of the elements' canonical texts  list<T's silver type>
                   as JSON strings, nulls as ``null``
                   (``["1","2",null]``); T is one of the types
                   above
=================  =============================================  ==============================

Unknown or missing types are ``string``; so is an array of arrays (its elements as JSON text).

:func:`guess_type` guesses the canonical type of a column from canonical texts seen (``inspect``
proposes it), with :func:`raw_numbers` giving the numbers of a JSON value as written.
"""
from __future__ import annotations

import base64
import json
import datetime as _dt
import re
from decimal import Decimal
from typing import Iterable, Optional

_DECIMAL_RE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")
_ARRAY_RE = re.compile(r"^array\s*<(.*)>$", re.S)
SIMPLE_TYPES = ("boolean", "smallint", "int", "bigint", "float", "double", "string", "binary", "date", "timestamp",
                "timestamp_ntz")
#: The canonical types of timestamps: with a zone (an instant, UTC) and without (a wall-clock time).
TIMESTAMP_TYPES = ("timestamp", "timestamp_ntz")


def normalize_type(t: Optional[str]) -> str:
    """Return the canonical spelling of a type name; unknown names become ``string``.

    ``array<T>`` keeps its element type when that is a canonical type other than an array (an
    array of arrays is ``string``).

    >>> normalize_type("DECIMAL(10, 2)")
    'decimal(10,2)'
    >>> normalize_type("ARRAY<Decimal(5, 1)>")
    'array<decimal(5,1)>'
    """
    if not t:
        return "string"
    t = t.strip().lower()
    m = _DECIMAL_RE.match(t)
    if m:
        p, s = int(m.group(1)), int(m.group(2))
        return f"decimal({min(p, 38)},{min(s, min(p, 38))})"
    m = _ARRAY_RE.match(t)
    if m:
        inner = m.group(1).strip()
        return "string" if _ARRAY_RE.match(inner) else f"array<{normalize_type(inner)}>"
    return t if t in SIMPLE_TYPES else "string"


def array_element(t: str) -> Optional[str]:
    """The element type of canonical type ``array<T>`` (``T``), else None."""
    return t[6:-1] if t.startswith("array<") and t.endswith(">") else None


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
    if isinstance(value, list) and array_element(ctype) is not None:
        return array_text([to_text(v, array_element(ctype)) for v in value])
    if isinstance(value, (dict, list)):
        import json

        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def array_text(elements: list[Optional[str]]) -> str:
    """The canonical text of an array whose elements are already canonical texts (or None):
    ``["1","2",null]`` (compact JSON, non-ASCII characters kept)."""
    import json

    return json.dumps(elements, separators=(",", ":"), ensure_ascii=False)


def spark_type(ctype: str) -> str:
    """The Spark SQL type of a silver column for canonical type ``ctype`` (``array<smallint>`` →
    ``array<int>``)."""
    ctype = normalize_type(ctype)
    element = array_element(ctype)
    if element is not None:
        return f"array<{spark_type(element)}>"
    return "int" if ctype == "smallint" else ctype


#: Spark SQL templates per silver type: (canonical text -> typed value, typed value -> text).
_SQL_CONVERSIONS = {
    "string": ("{}", "{}"),
    "binary": ("unbase64({})", "base64({})"),
    "timestamp": ("to_timestamp({})", "date_format({}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"),
    "timestamp_ntz": ("to_timestamp_ntz({})", "date_format({}, 'yyyy-MM-dd HH:mm:ss.SSSSSS')"),
}
#: The lambda variable of an array's element conversion (arrays do not nest).
_ELEMENT = "_cdc_e"


def sql_cast(expr: str, ctype: str) -> str:
    """Spark SQL expression turning the canonical text ``expr`` into the silver type ``ctype``.

    This is the one conversion table from bronze text to typed silver values; an array's text is
    read as ``array<string>`` and each element converted by its type's rule.
    """
    st = spark_type(ctype)
    element = array_element(st)
    if element is not None:
        texts = f"from_json({expr}, 'array<string>')"
        if element == "string":
            return texts
        return f"transform({texts}, {_ELEMENT} -> {sql_cast(_ELEMENT, element)})"
    template = _SQL_CONVERSIONS.get(st, (f"CAST({{}} AS {st})", ""))[0]
    return template.format(expr)


def sql_text(expr: str, ctype: str) -> str:
    """Spark SQL expression turning a typed silver value back into text that :func:`sql_cast` reads.

    The inverse of :func:`sql_cast` (``sql_cast(sql_text(x, t), t) == x``), used where silver
    values meet bronze images again (a key change carrying the old row's columns over).
    Timestamps are written in the session time zone, which the pipeline sets to UTC.
    """
    st = spark_type(ctype)
    element = array_element(st)
    if element is not None:
        return f"to_json(transform({expr}, {_ELEMENT} -> {sql_text(_ELEMENT, element)}))"
    template = _SQL_CONVERSIONS.get(st, ("", "CAST({} AS STRING)"))[1]
    return template.format(expr)


def widen(old: str, new: str) -> Optional[str]:
    """The type a column of type ``old`` becomes when a change carries ``new``, by Iceberg's promotions.

    Iceberg promotes a column only int → bigint (long), float → double and decimal(P,S) →
    decimal(P',S) with P' > P (same scale), and an array's element type by the same rules. Returns
    the wider type for such a promotion, ``old`` when ``new`` is the same or narrower by one of
    them (bigint then int stays bigint; decimal(12,2) then decimal(10,2) stays decimal(12,2)), and
    None for any other pair (a decimal scale change, int → double, bigint → decimal, anything →
    string ...). Type names are canonical (:func:`normalize_type`; smallint counts as int).

    Two pairs keep a column made by an earlier version of the pipeline as it is: ``timestamp``
    then ``timestamp_ntz`` stays ``timestamp`` (the wall-clock values are read as UTC, as that
    version read them), and ``string`` then ``array<T>`` stays ``string`` (the array's canonical
    text, :func:`array_text`).

    >>> widen("decimal(10,2)", "decimal(12,2)")
    'decimal(12,2)'
    >>> widen("decimal(10,2)", "decimal(10,4)") is None
    True
    >>> widen("array<int>", "array<bigint>")
    'array<bigint>'
    """
    old, new = spark_type(old), spark_type(new)
    if old == new:
        return old
    if (old, new) == ("timestamp", "timestamp_ntz") or (old == "string" and array_element(new) is not None):
        return old
    eo, en = array_element(old), array_element(new)
    if eo is not None and en is not None:
        inner = widen(eo, en)
        return None if inner is None else f"array<{inner}>"
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


# -- a canonical type guessed from values (``inspect``) -------------------------------------------

_INT = re.compile(r"-?\d+\Z")
_DEC = re.compile(r"-?\d+\.(\d+)\Z")
_FLOAT = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\Z|-?(inf|Infinity|NaN|nan)\Z")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")
_TS = re.compile(r"\d{4}-\d{2}-\d{2}[T :]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?\Z")
_MIDNIGHT = re.compile(r"\d{4}-\d{2}-\d{2}[T ]00:00:00(\.0+)?(Z|[+-]00:?00)?\Z")
_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}\Z")
_HEX = re.compile(r"0x[0-9A-Fa-f]*\Z")


class _Number(str):
    """A JSON number as written (its trailing zeros kept)."""


def raw_numbers(value: Optional[bytes]) -> dict:
    """``{member name: [number texts as written]}`` of every number (and numeric text) in a JSON
    value, at any depth; empty for a value that is not JSON."""
    out: dict = {}
    if not value or value.lstrip()[:1] != b"{":
        return out
    try:
        doc = json.loads(value, parse_float=_Number, parse_int=_Number)
    except (ValueError, RecursionError):
        return out
    stack = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            if isinstance(v, (dict, list)):
                stack.append(v)
            elif isinstance(k, str) and isinstance(v, str) and _DEC.match(v):
                out.setdefault(k, []).append(str(v))
    return out


def guess_type(values: Iterable[str], raw: Iterable[str] = ()) -> Optional[str]:
    """The canonical type the non-null text ``values`` of a column show, or None for none.

    ``bigint`` (all integers), ``decimal(38,s)`` (all numbers, those with a fraction written
    (``raw``: the numbers as the messages write them, else ``values``) with the same ``s`` digits,
    some with a trailing zero, which the shortest form of a double never has), ``double`` (other
    numbers), ``date``, ``timestamp`` (a zone written: ``Z``, ``+02:00``), ``timestamp_ntz`` (none
    written), ``binary`` (``0x`` hex, or Base64 with at
    least one digit, ``+``, ``/`` or ``=``), ``boolean``, else ``string``.
    """
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    if all(_INT.match(v) for v in vals):
        return "bigint"
    written = [v for v in raw if _DEC.match(v)] or [v for v in vals if _DEC.match(v)]
    fractions = {len(_DEC.match(v).group(1)) for v in written}
    if (all(_INT.match(v) or _DEC.match(v) for v in vals) and len(fractions) == 1
            and any(v.endswith("0") for v in written)):
        # the same scale everywhere, trailing zeros kept: a double's shortest form has none
        return f"decimal(38,{fractions.pop()})"
    if all(_FLOAT.match(v) for v in vals):
        return "double"
    if all(_DATE.match(v) for v in vals):
        return "date"
    if all(_TS.match(v) for v in vals):
        if all(_MIDNIGHT.match(v) for v in vals):
            return "date"
        # a time written with a zone is an instant; without one, a wall-clock time
        return "timestamp" if any(_TS.match(v).group(2) for v in vals) else "timestamp_ntz"
    if all(v in ("true", "false") for v in vals):
        return "boolean"
    if all(_HEX.match(v) for v in vals):
        return "binary"
    if all(len(v) % 4 == 0 and _B64.match(v) for v in vals) and any(re.search(r"[0-9+/=]", v) for v in vals):
        return "binary"
    return "string"
