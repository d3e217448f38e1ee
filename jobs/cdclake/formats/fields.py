"""Readers of message fields shared by the formats: one behaviour each, named by what it accepts.

Every reader takes the format name ``fmt`` and the field's name as the message spells it
(``source.pos``, ``meta.seq`` ...) and raises :class:`cdclake.record.ParseError` naming that
field when the value does not fit; the reason is the same whichever format calls it. Where
formats read a field differently (null allowed or not, negative numbers allowed or not, the
wording a format's tests pin), the difference is a keyword argument or a distinct reader.

=========================  ====================================================================
reader                     accepts
=========================  ====================================================================
:func:`element`            a position element: a non-negative integer below 10**38 (JSON
                           integer or decimal digits); null only where ``null`` gives a value
:func:`optional_element`   the same, null or ``""`` giving None (reason words it ``position``)
:func:`integer`            any integer, negative too (JSON integer or ``-?digits`` text);
                           null or ``""`` giving ``default``
:func:`json_object`        a JSON object (dict)
:func:`name_text`          a database, schema or namespace name: text or null
:func:`table_name`         a table name: non-empty text
:func:`commit_time_ms`     a commit time: ISO-8601 text (UTC) or null, in ms since the epoch
=========================  ====================================================================

:func:`split_quoted` splits a dotted name (``SCHEMA.TABLE``) on the dots outside double quotes.

:func:`key_detail` renders a Kafka key for a tombstone's detail; :func:`kafka_key_text` renders
the columns of a Kafka key that keys a delete.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Optional

from cdclake.formats.text import parse_timestamp, utc_ms
from cdclake.positions import as_element, optional_int
from cdclake.record import ParseError

_REQUIRED: Any = object()
_INTEGER_RE = re.compile(r"\s*-?[0-9]+\s*")


def element(fmt: str, value: Any, field_name: str, *, what: Optional[str] = None, null: Any = _REQUIRED,
            prefix: str = "") -> Any:
    """A position element: a non-negative integer below 10**38 (:func:`cdclake.positions.as_element`).

    ``null``: what a null value gives (by default null is not an integer like any other value);
    ``what``: the name the reason gives the value (default ``field_name``); ``prefix``: text put
    before the reason (``"cannot read position: "``). Raises :class:`ParseError` naming
    ``field_name``, e.g. ``field 'es': es 'x' is not a non-negative integer``.
    """
    if value is None and null is not _REQUIRED:
        return null
    try:
        return as_element(value, what or field_name)
    except ValueError as exc:
        raise ParseError(fmt, f"{prefix}{exc}", field_name) from None


def optional_element(fmt: str, value: Any, field_name: str) -> Optional[int]:
    """An optional position element (:func:`cdclake.positions.optional_int`): None for null or
    ``""``. Raises :class:`ParseError` naming ``field_name`` (reason ``position 'x' is not a
    non-negative integer``)."""
    try:
        return optional_int(value)
    except ValueError as exc:
        raise ParseError(fmt, str(exc), field_name) from None


def integer(fmt: str, value: Any, field_name: str, default: Optional[int] = 0) -> Optional[int]:
    """An integer of any sign and size: a JSON integer (not a boolean) or text of optional ``-`` and
    digits (blanks around allowed); ``default`` for null or ``""``. Raises :class:`ParseError`
    naming ``field_name`` (``'x' is not an integer``)."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ParseError(fmt, f"{value!r} is not an integer", field_name)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INTEGER_RE.fullmatch(value):
        return int(value)
    raise ParseError(fmt, f"{value!r} is not an integer", field_name)


def json_object(fmt: str, value: Any, field_name: str, what: Optional[str] = None,
                missing: Optional[str] = None) -> dict:
    """``value`` when it is a JSON object. Raises :class:`ParseError` naming ``field_name``: with
    reason ``missing`` for a null value when given, else ``<what> is a JSON <type>, not an object``
    (``what`` defaults to ``field_name``)."""
    if isinstance(value, dict):
        return value
    if value is None and missing is not None:
        raise ParseError(fmt, missing, field_name)
    raise ParseError(fmt, f"{what or field_name} is a JSON {type(value).__name__}, not an object", field_name)


def name_text(fmt: str, value: Any, field_name: str, reason: str = "name {!r} is not text") -> Optional[str]:
    """A database, schema or namespace name: text, or None for null. Raises :class:`ParseError`
    naming ``field_name`` with ``reason`` (formatted with the value) for anything else."""
    if value is not None and not isinstance(value, str):
        raise ParseError(fmt, reason.format(value), field_name)
    return value


def operation_type(fmt: str, value: Any, field_name: str) -> str:
    """A message's operation type as it carries it: non-empty text. Raises :class:`ParseError`
    naming ``field_name`` (``missing operation type``) otherwise."""
    if not isinstance(value, str) or not value:
        raise ParseError(fmt, "missing operation type", field_name)
    return value


def known_operation(fmt: str, value: Any, ops: Mapping[str, str], field_name: str, what: str, expected: str,
                    blank_is_missing: bool = False) -> str:
    """The canonical op of an operation field's ``value`` in ``ops`` (the format's names → op).
    Raises :class:`ParseError` naming ``field_name``: ``missing <what>`` for None (and ``""``
    with ``blank_is_missing``), ``unknown <what> <value> (expected <expected>)`` for a value
    ``ops`` does not hold."""
    if value is None or (blank_is_missing and value == ""):
        raise ParseError(fmt, f"missing {what}", field_name)
    if not isinstance(value, str) or value not in ops:
        raise ParseError(fmt, f"unknown {what} {value!r} (expected {expected})", field_name)
    return ops[value]


def table_name(fmt: str, value: Any, field_name: str) -> str:
    """A table name: non-empty text. Raises :class:`ParseError` naming ``field_name`` (``missing
    table name``) otherwise."""
    if not isinstance(value, str) or not value:
        raise ParseError(fmt, "missing table name", field_name)
    return value


def commit_time_ms(fmt: str, meta: Mapping[str, Any], key: str, field_name: str) -> Optional[int]:
    """``meta[key]``, a commit time as ISO-8601 text in UTC (:func:`cdclake.formats.text.parse_timestamp`),
    in ms since the epoch; None when absent or null. Raises :class:`ParseError` naming
    ``field_name`` (``cannot read commit time``) for anything else, a zero date too."""
    text = meta.get(key)
    if text is None:
        return None
    try:
        if not isinstance(text, str):
            raise ValueError(f"{text!r} is not text")
        value = parse_timestamp(text)
        if value is None:
            raise ValueError(f"{text!r} is a zero date")
    except ValueError as exc:
        raise ParseError(fmt, f"cannot read commit time: {exc}", field_name) from None
    return utc_ms(value)


def split_quoted(name: str, max_splits: Optional[int] = None) -> list[str]:
    """The parts of a dotted name, split on the dots outside double quotes (at most ``max_splits``
    of them, the first ones; later dots stay in the last part). Quoted parts lose their quotes
    (``""`` inside them is one ``"``): ``"MY.S"."T.1"`` → ``["MY.S", "T.1"]``. Raises
    ``ValueError`` for an empty part or an unterminated quote."""
    parts: list[str] = []
    current: list[str] = []
    i, quoted = 0, False
    while i < len(name):
        ch = name[i]
        if quoted:
            if ch == '"':
                if name[i + 1:i + 2] == '"':
                    current.append('"')
                    i += 1
                else:
                    quoted = False
            else:
                current.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == "." and (max_splits is None or len(parts) < max_splits):
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if quoted:
        raise ValueError(f"unterminated quote in table name {name!r}")
    parts.append("".join(current))
    if any(not p for p in parts):
        raise ValueError(f"table name {name!r} has an empty part")
    return parts


def key_detail(key: Optional[bytes]) -> Optional[str]:
    """A Kafka key (bytes) as text, for the detail of a tombstone: UTF-8 with invalid bytes
    replaced; None for no key."""
    return bytes(key).decode("utf-8", errors="replace") if key else None


def kafka_key_text(fmt: str, values: Mapping[str, Any], convert: Callable[..., Optional[str]],
                   *args: Any) -> dict[str, Optional[str]]:
    """Canonical text of a Kafka key's columns (``{column: JSON value}``), in the key's order:
    ``convert(column, value, *args)`` per column. Raises :class:`ParseError` naming ``key.<column>``
    (``cannot read Kafka key value ...``) when it raises ``ValueError``, ``TypeError`` or
    ``ArithmeticError``."""
    out = {}
    for col, value in values.items():
        try:
            out[col] = convert(col, value, *args)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ParseError(fmt, f"cannot read Kafka key value {value!r}: {exc}", f"key.{col}") from None
    return out
