"""The limits on one raw record that normalize checks before parsing it: size and JSON nesting.

A value or key larger than ``normalize.max_value_bytes``, or a JSON value or key nested deeper than
``normalize.max_nesting_depth`` (:class:`cdclake.config.NormalizeConfig`), is quarantined with the
limit as its reason, before any parser reads it (a deeply nested document would exhaust the
parsers' recursion; a huge one the worker's memory).
"""
from __future__ import annotations

import re
from itertools import accumulate

from cdclake.config import NormalizeConfig
from cdclake.record import KafkaRecord, ParseError

#: The default limits on one raw record (``normalize`` of :class:`cdclake.config.PipelineConfig`).
MAX_VALUE_BYTES = NormalizeConfig().max_value_bytes
MAX_NESTING_DEPTH = NormalizeConfig().max_nesting_depth

_ESCAPE_RE = re.compile(rb"\\.", re.DOTALL)
#: Every byte but quotes and brackets (deleted first), every byte but brackets (deleted last).
_NOT_QUOTE_OR_BRACKET = bytes(b for b in range(256) if b not in b'"{}[]')
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"{}[]")
#: Opening brackets to +1, closing ones to -1 (as signed bytes).
_DEPTH_STEPS = bytes.maketrans(b"{[}]", b"\x01\x01\xff\xff")
#: Every byte but opening brackets: ``len(data.translate(None, NOT_OPENING))`` counts them in one pass.
NOT_OPENING = bytes(b for b in range(256) if b not in b"{[")


def json_nesting_depth(data: bytes) -> int:
    """The deepest nesting of objects and arrays in the JSON text ``data`` (UTF-8 bytes).

    A scalar is 0 deep, ``{}`` and ``[1]`` 1, ``{"a": [[]]}`` 3. Brackets inside strings do not
    count (backslash escapes honoured; a string left open runs to the end). Bytes that are not
    JSON get the depth of their brackets outside strings (the highest running count of opening
    minus closing brackets). Never raises; runs in C but for one step per bracket.
    """
    if b"\\" in data:
        data = _ESCAPE_RE.sub(b"", data)  # escapes are inside strings; none of them ends one
    data = data.translate(None, _NOT_QUOTE_OR_BRACKET)
    if b'"' in data:
        # quotes now alternate open, close: dropping two adjacent ones keeps every other byte
        # inside or outside its string, and what lies between the pairs left is inside
        data = data.replace(b'""', b"")
        if b'"' in data:
            data = b"".join(data.split(b'"')[::2])
    steps = memoryview(data.translate(_DEPTH_STEPS, _NOT_BRACKET)).cast("b")
    return max(0, max(accumulate(steps), default=0))


_ONE_KIND = bytes.maketrans(b"[]", b"{}")


def json_deeper_than(data: bytes, limit: int) -> bool:
    """Whether the JSON text ``data`` is nested deeper than ``limit`` (``json_nesting_depth(data) >
    limit``), most documents decided without a step per bracket.

    Depth is at most the number of opening brackets; and, when no string holds a bracket, at most
    that number less the openers right after a closer (``},{``: a sibling never goes deeper than
    the one before it), which keeps wide, shallow documents (a Connect schema's fields) off the
    exact scan. Exact for JSON; for bytes that are not JSON (which no parser reads) it may answer
    False where :func:`json_nesting_depth` is past the limit. Never raises.
    """
    if len(data.translate(None, NOT_OPENING)) <= limit:
        return False
    text = _ESCAPE_RE.sub(b"", data) if b"\\" in data else data
    kept = text.translate(None, _NOT_QUOTE_OR_BRACKET)
    if 2 * kept.count(b'""') == kept.count(b'"'):  # every run of quotes even: no string holds a bracket
        brackets = kept.translate(_ONE_KIND, b'"')
        if brackets.count(b"{") - brackets.count(b"}{") <= limit:
            return False
    return json_nesting_depth(text) > limit


def is_json_format(fmt: str) -> bool:
    """Whether format ``fmt``'s values are JSON text whose nesting is limited: a name ending in
    ``-json``, or in ``-jsonschema`` (JSON after a 5-byte wire-format header)."""
    return fmt.endswith(("-json", "-jsonschema"))


def check_limits(fmt: str, record: KafkaRecord, max_value_bytes: int = MAX_VALUE_BYTES,
                 max_nesting_depth: int = MAX_NESTING_DEPTH) -> None:
    """Raise :class:`ParseError` (field ``value`` or ``key``) when ``record`` passes a limit.

    ``max_value_bytes`` bounds the length of the value and of the key, in bytes;
    ``max_nesting_depth`` the nesting of objects and arrays (:func:`json_deeper_than`) of the
    value and the key of formats whose name ends in ``-json`` or ``-jsonschema`` (whose JSON
    follows a 5-byte wire-format header, counted with it), and for ``auto`` of a value or key that
    is JSON text (starting with ``{`` or ``[``). The reason names the limit, e.g.
    ``debezium-json: field 'value': nested deeper than 64 levels (normalize.max_nesting_depth)``.
    Costs one pass counting ``{`` and ``[`` on a value that has no more of them than the depth limit.
    """
    is_json = is_json_format(fmt)
    for name, data in (("value", record.value), ("key", record.key)):
        if data is None:
            continue
        if len(data) > max_value_bytes:
            raise ParseError(fmt, f"{len(data)} bytes, more than the limit of {max_value_bytes} bytes "
                                  "(normalize.max_value_bytes)", name)
        if (is_json or fmt == "auto" and data.lstrip()[:1] in (b"{", b"[")) and json_deeper_than(data, max_nesting_depth):
            raise ParseError(fmt, f"nested deeper than {max_nesting_depth} levels (normalize.max_nesting_depth)",
                             name)

