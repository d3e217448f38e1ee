"""Canonical text of vendor values (:mod:`cdclake.types`), shared by every format.

- :func:`coerce_text` renders a JSON value in the canonical text of a canonical type, raising
  ``ValueError`` when it cannot; :func:`text_converter` is the same per type, made once.
- :func:`convert_image` applies a converter to a whole before/after image; :data:`ABSENT` leaves
  a column out of it.
- :func:`parse_timestamp`, :func:`epoch_timestamp` and :func:`utc_ms` read timestamps as naive
  UTC datetimes and ms since the epoch; :func:`float32_text` writes a 32-bit float; :func:`pad_scale`
  pads a decimal to its type's scale.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import re
import struct
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Callable, Optional

from cdclake.record import ParseError
from cdclake.types import TIMESTAMP_TYPES, array_element, array_text, decimal_precision_scale, to_text


class _Absent:
    """Sentinel type of :data:`ABSENT`."""

    def __repr__(self) -> str:
        return "ABSENT"


#: Returned by an image value converter to leave a column out of the image (absent).
ABSENT = _Absent()
#: Decimal arithmetic that never rounds a source's number: Python's default context keeps 28
#: digits, a ``numeric(38,10)`` has 38 and PostgreSQL's unconstrained ``numeric`` up to 147,455.
#: Exponents stay within the default context's range, so that an absurd scale (a Connect
#: ``Decimal`` of scale 2**31 - 1, whose text would take gigabytes) is refused at once
#: (``InvalidOperation``).
EXACT = Context(prec=1_000_000, Emax=999_999, Emin=-999_999)

EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH = EPOCH
_ISO_START_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}")
_SUBMICRO_RE = re.compile(r"\.([0-9]{7,})")
_INT_TYPES = ("smallint", "int", "bigint")


def parse_timestamp(text: str) -> Optional[_dt.datetime]:
    """Read ``YYYY-MM-DD[T ]HH:MM[:SS[.f...]][Z|±HH:MM]`` as a naive UTC datetime.

    Text without an offset is taken as UTC; fractions beyond microseconds are truncated. MySQL
    zero dates (``0000-00-00 ...``) give None, as Debezium does. Raises ``ValueError`` otherwise.
    """
    text = text.strip()
    if text.startswith("0000-00-00"):
        return None
    if not _ISO_START_RE.match(text):
        raise ValueError(f"{text!r} is not a YYYY-MM-DD timestamp")
    m = _SUBMICRO_RE.search(text)
    if m:
        text = text[: m.start(1) + 6] + text[m.end(1):]
    value = _dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return value


def parse_wallclock(text: str) -> Optional[_dt.datetime]:
    """Read a timestamp as :func:`parse_timestamp` does, but as the wall-clock time it names (a
    ``timestamp_ntz`` value): an offset, when the text carries one, is dropped, not applied (as
    PostgreSQL reads ``'2024-01-01 10:00+02'::timestamp``: 10:00)."""
    text = text.strip()
    if text.startswith("0000-00-00"):
        return None
    value = parse_timestamp(re.sub(r"(?:[Zz]|[+-][0-9]{2}(?::?[0-9]{2}(?::?[0-9]{2})?)?)$", "", text)
                            if _ISO_START_RE.match(text) and len(text) > 10 else text)
    return value


def epoch_timestamp(amount: int, per_second: int) -> _dt.datetime:
    """The naive UTC datetime ``amount`` units after the epoch (``per_second`` units a second:
    1000 for ms, 10**6 for µs, 10**9 for ns); sub-microsecond parts are truncated."""
    micros = amount * 10**6 // per_second
    return _EPOCH + _dt.timedelta(microseconds=micros)


def coerce_text(value: Any, ctype: str) -> Optional[str]:
    """Render a JSON value (string, number, bool, object, array) as canonical text of ``ctype``.

    Strings are read as their type's text (digits, ``1.5``, ``true``/``1``, ``YYYY-MM-DD``,
    ``YYYY-MM-DD HH:MM:SS[.f]``); numbers for ``date`` are days since the epoch and numbers for
    ``timestamp`` milliseconds since the epoch; ``binary`` strings are kept as the Base64 text they
    already are. Decimals keep their digits and are padded to the type's scale. Raises
    ``ValueError`` when the value does not fit the type.
    """
    return text_converter(ctype)(value)


_TEXT_CONVERTERS: dict[str, Callable[[Any], Optional[str]]] = {}


def text_converter(ctype: str) -> Callable[[Any], Optional[str]]:
    """:func:`coerce_text` for one type as a function of the value: ``text_converter(t)(v) ==
    coerce_text(v, t)`` for every value, errors included.

    The type is looked at once, when the function is made (and the function is kept per type),
    so a parser converting many values of the same column pays for that once. The value types a
    format commonly sends for the type (``int`` for integers, ``str`` for text, decimals and
    timestamps, ``float`` for doubles) take a direct path; every other value goes through the
    general rules of :func:`coerce_text`.
    """
    conv = _TEXT_CONVERTERS.get(ctype)
    if conv is None:
        conv = _TEXT_CONVERTERS[ctype] = _make_text_converter(ctype)
    return conv


def general_text(value: Any, ctype: str) -> Optional[str]:
    """:func:`coerce_text` by its general rules alone, without the direct paths of
    :func:`text_converter` (which give way to it for every value they do not read directly)."""
    if value is None:
        return None
    try:
        return _coerce(value, ctype)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise ValueError(f"not a valid {ctype} value ({exc})") from None


def _make_text_converter(ctype: str) -> Callable[[Any], Optional[str]]:
    """One function per type: the type's common value types first, then the general rule.

    A direct path that raises gives way to the general rule, which then raises its own error.
    """

    def general(value: Any) -> Optional[str]:
        return general_text(value, ctype)

    if ctype in ("string", "binary"):
        def text(v: Any) -> Optional[str]:
            return v if type(v) is str else general(v)
        return text
    if ctype in _INT_TYPES:
        def integer(v: Any) -> Optional[str]:
            try:
                t = type(v)
                if t is int:
                    return str(v)
                if t is str:
                    return str(int(v.strip()))
            except (ValueError, TypeError, ArithmeticError):
                pass
            return general(v)
        return integer
    if ctype in ("float", "double"):
        def floating(v: Any) -> Optional[str]:
            try:
                t = type(v)
                if t is float:
                    return repr(v)
                if t is int or t is str:
                    return repr(float(v))
            except (ValueError, TypeError, ArithmeticError):
                pass
            return general(v)
        return floating
    ps = decimal_precision_scale(ctype)
    if ps is not None:
        scale, quantum = ps[1], Decimal(1).scaleb(-ps[1])

        def decimal(v: Any) -> Optional[str]:
            try:
                if type(v) is str:
                    number = Decimal(v.strip())
                    if number.is_finite():
                        if number.as_tuple().exponent > -scale:
                            number = number.quantize(quantum, context=EXACT)
                        return format(number, "f")
            except (ValueError, TypeError, ArithmeticError):
                pass
            return general(v)
        return decimal
    if ctype in TIMESTAMP_TYPES:  # with a zone: converted to UTC; without: the wall-clock time as written
        parse = parse_timestamp if ctype == "timestamp" else parse_wallclock

        def timestamp(v: Any) -> Optional[str]:
            try:
                t = type(v)
                if t is str:
                    return to_text(parse(v))
                if t is int:
                    return (_EPOCH + _dt.timedelta(microseconds=v * 1000)).isoformat(sep=" ")
            except (ValueError, TypeError, ArithmeticError):
                pass
            return general(v)
        return timestamp
    if ctype == "boolean":
        def boolean(v: Any) -> Optional[str]:
            return ("true" if v else "false") if type(v) is bool else general(v)
        return boolean
    element = array_element(ctype)
    if element is not None:
        return array_converter(text_converter(element), general)
    return general


def array_converter(item: Callable[[Any], Optional[str]], general: Callable[[Any], Optional[str]]
                    ) -> Callable[[Any], Optional[str]]:
    """The converter of an array column: a JSON list's elements each through ``item`` (canonical
    texts, :func:`cdclake.types.array_text`); any other value, and a list an element of which
    ``item`` refuses, through ``general`` (which then raises its own error)."""

    def array(v: Any) -> Optional[str]:
        if type(v) is list:
            try:
                return array_text([item(x) for x in v])
            except (ValueError, TypeError, ArithmeticError):
                pass
        return general(v)
    return array


def _coerce(value: Any, ctype: str) -> Optional[str]:
    element = array_element(ctype)
    if element is not None:
        if isinstance(value, str):  # an array written as JSON text
            value = json.loads(value)
        if not isinstance(value, list):
            raise ValueError(f"{value!r} is not an array")
        return array_text([general_text(x, element) for x in value])
    if ctype == "string" or isinstance(value, (dict, list)):
        return to_text(value)
    if ctype == "boolean":
        if isinstance(value, bool):
            return to_text(value)
        text = str(value).strip().lower()
        if text in ("1", "true", "t", "yes", "y"):
            return "true"
        if text in ("0", "false", "f", "no", "n"):
            return "false"
        raise ValueError(f"{value!r} is not a boolean")
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a {ctype}")
    if ctype in _INT_TYPES:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"{value!r} is not an integer")
            value = int(value)
        return str(int(str(value).strip()))
    if ctype in ("float", "double"):
        return to_text(float(value))
    if ctype.startswith("decimal"):
        return to_text(pad_scale(finite_decimal(value), ctype))
    if ctype == "date":
        if isinstance(value, int):
            return to_text(_EPOCH.date() + _dt.timedelta(days=value))
        text = str(value).strip()
        if text.startswith("0000-00-00"):
            return None
        return to_text(_dt.date.fromisoformat(text[:10]))
    if ctype in TIMESTAMP_TYPES:
        if isinstance(value, (int, float)):
            return to_text(epoch_timestamp(int(value), 1000))
        return to_text((parse_timestamp if ctype == "timestamp" else parse_wallclock)(str(value)))
    if ctype == "binary":
        return value if isinstance(value, str) else to_text(value)
    return to_text(value)


def finite_decimal(value: Any) -> Decimal:
    """A number or decimal text (blanks around allowed, exponents too) as a finite ``Decimal``.
    Raises ``ValueError`` (``... is not a decimal number``, ``... is not a finite decimal number``)."""
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a decimal number") from None
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a finite decimal number")
    return number


def pad_scale(number: Decimal, ctype: str) -> Decimal:
    """``number`` with trailing zeros up to the scale of ``decimal(p,s)`` (never rounds)."""
    ps = decimal_precision_scale(ctype)
    if ps and number.as_tuple().exponent > -ps[1]:
        return number.quantize(Decimal(1).scaleb(-ps[1]), context=EXACT)
    return number


def convert_image(
    fmt: str,
    image: Any,
    convert: Callable[[str, Any], Optional[str]],
    field_name: str,
) -> Optional[dict[str, Optional[str]]]:
    """Canonical text of every column of an image (None stays None).

    ``convert(column, json_value)`` renders one value and returns :data:`ABSENT` to leave the
    column out of the map. Raises :class:`ParseError` naming ``field_name`` when the image is not
    a JSON object, and ``field_name.column`` for a value that does not fit its type.
    """
    if image is None:
        return None
    if not isinstance(image, dict):
        raise ParseError(fmt, f"image is a JSON {type(image).__name__}, not an object", field_name)
    out: dict[str, Optional[str]] = {}
    for col, value in image.items():
        try:
            text = convert(col, value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ParseError(fmt, f"cannot read {value!r}: {exc}", f"{field_name}.{col}") from None
        if text is not ABSENT:
            out[col] = text
    return out


def utc_ms(value: _dt.datetime) -> int:
    """A naive UTC datetime as ms since the epoch (µs truncated; negative before 1970)."""
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def float32_text(value: float, keep_out_of_range: bool = False) -> str:
    """The shortest decimal text that reads back as the same 32-bit float (``1.100000023841858`` →
    ``1.1``): how REAL4 (Qlik) and FLOAT (DTS, Java's ``Float`` widened to double) columns are written.

    NaN and infinities are written as Python does (``nan``, ``inf``). By default (Qlik) a finite
    value beyond the 32-bit range becomes infinity (``inf``/``-inf``) and a shorter text that would
    round past the range is passed over. With ``keep_out_of_range=True`` (DTS, whose sources send
    doubles) a value beyond the range stays its own double text, and a shorter text that would
    round past the range raises ``OverflowError`` (the value is refused as not fitting).
    """
    value = float(value)
    if value != value or value in (math.inf, -math.inf):
        return repr(value)
    try:
        packed = struct.pack("<f", value)
    except OverflowError:  # rounds to infinity as a 32-bit float
        return repr(value) if keep_out_of_range else repr(math.copysign(math.inf, value))
    single = struct.unpack("<f", packed)[0]
    for digits in range(1, 10):
        candidate = float(f"{single:.{digits}g}")
        try:
            if struct.pack("<f", candidate) == packed:
                return repr(candidate)
        except OverflowError:
            if keep_out_of_range:
                raise
    return repr(single)
