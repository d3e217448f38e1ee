"""Typed source positions: every format's native change order as a tuple of integers.

Bronze stores a position as ``array<decimal(38,0)>``; Spark compares arrays element by element
(a shorter prefix sorts first), so positions of one table compare as numbers, never as text.
Each element must be a non-negative integer below 10**38.

========================  ===========================================================
source                    position tuple
========================  ===========================================================
MySQL binlog (Debezium)   (binlog file sequence number, position, row)
PostgreSQL (Debezium)     (commit LSN, LSN) from ``source.sequence``, else (LSN, LSN)
Canal JSON                (``es`` ms, ``id``, row index in ``data``)
Lindorm / other sources   (source ``ts_ms``,)
========================  ===========================================================

Ties (equal positions, e.g. rows of one Debezium MySQL snapshot) are broken by Kafka partition
and offset, in that order.
"""
from __future__ import annotations

import re
from typing import Optional

MAX_ELEMENT = 10**38 - 1
_BINLOG_RE = re.compile(r"^(?P<base>.*?)\.?(?P<num>[0-9]+)$")
_LSN_RE = re.compile(r"^(?P<hi>[0-9A-Fa-f]{1,8})/(?P<lo>[0-9A-Fa-f]{1,8})$")


def _ascii_digits(text: str) -> bool:
    """``text`` is ASCII digits only: ``str.isdigit`` also takes other scripts' digits (``"١٢٣"``,
    which ``int`` reads as 123) and superscripts, which no source writes in a position."""
    return text.isascii() and text.isdigit()


def binlog_file_number(name: str) -> int:
    """Sequence number of a MySQL binlog file name: ``mysql-bin.000010`` → 10.

    Raises ValueError when the name does not end in digits.
    """
    m = _BINLOG_RE.match(name or "")
    if not m:
        raise ValueError(f"binlog file name {name!r} does not end in a sequence number")
    return int(m.group("num"))


def pg_lsn(value: object) -> int:
    """A PostgreSQL LSN as an integer: accepts an int, decimal digits, or ``X/Y`` hex text.

    ``0/FFFFFFFF`` → 4294967295 and ``1/0`` → 4294967296. Raises ValueError otherwise.
    """
    if isinstance(value, bool):
        raise ValueError(f"LSN {value!r} is not a number")
    if isinstance(value, int):
        return value
    text = str(value).strip()
    if _ascii_digits(text):
        return int(text)
    m = _LSN_RE.match(text)
    if not m:
        raise ValueError(f"LSN {value!r} is neither a number nor X/Y hex")
    return (int(m.group("hi"), 16) << 32) | int(m.group("lo"), 16)


def as_element(value: object, what: str = "position") -> int:
    """One position element as a non-negative int (accepts int or digit text).

    Raises ValueError for anything else, naming ``what``.
    """
    if type(value) is int and 0 <= value <= MAX_ELEMENT:  # what nearly every message carries
        return value
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{what} {value!r} is not a non-negative integer")
    if isinstance(value, int):
        n = value
    else:
        text = str(value).strip()
        if not _ascii_digits(text):
            raise ValueError(f"{what} {value!r} is not a non-negative integer")
        n = int(text)
    if n < 0 or n > MAX_ELEMENT:
        raise ValueError(f"{what} {value!r} is out of range [0, 10**38)")
    return n


def compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """-1, 0 or 1 as position ``a`` sorts before, with, or after ``b`` (as Spark sorts arrays)."""
    return (a > b) - (a < b)


def optional_int(value: object) -> Optional[int]:
    """``int(value)`` for ints and digit strings, None for None/empty."""
    if value is None or value == "":
        return None
    return as_element(value)
