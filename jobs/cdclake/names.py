"""Which names from messages the pipeline accepts.

Database, schema, table and column names (bronze ``source_database``, ``source_schema``,
``source_table``, the keys of ``before``, ``after`` and ``column_types``, the entries of
``primary_key``) come from messages. The rule:

- **Refused**: a name that contains a path separator (``/`` or ``\\``), is ``.`` or ``..`` (or
  has ``..`` as a segment between separators), or contains NUL or any other control character
  (Unicode category ``Cc``: U+0000..U+001F, U+007F..U+009F). The normalize stage quarantines
  the Kafka record with a reason naming the format, the field and the name
  (:func:`check_names`).
- **Accepted**, and carried exactly: every other name, whatever it holds (spaces, quotes,
  backticks, ``;``, ``--``, SQL keywords, commas, any letters, up to any length). Such names
  reach SQL only as quoted identifiers (:func:`cdclake.types.quote_ident`) or string literals
  (:func:`cdclake.types.sql_string`), and never become paths: silver, tombstone and history
  tables get a location of their own under the warehouse (:func:`cdclake.lake.table_location`),
  and a silver table name too long for a catalog is shortened (:func:`cdclake.lake.short_name`).
"""
from __future__ import annotations

import re
from typing import Iterable, Optional

from cdclake.record import ChangeRecord, ParseError

#: Characters that separate path segments on the file systems and object stores a warehouse lives on.
SEPARATORS = ("/", "\\")
#: Names that are relative path segments.
DOT_SEGMENTS = frozenset((".", ".."))
#: Unicode category Cc is exactly U+0000..U+001F and U+007F..U+009F.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_REFUSED_CHARS = re.compile(r"[/\\\x00-\x1f\x7f-\x9f]")  # separators and control characters


def name_problem(name: str) -> Optional[str]:
    """What makes ``name`` refused (a short phrase), or None when it is accepted.

    >>> name_problem("DROP TABLE x") is None
    True
    >>> name_problem("../x")
    'contains a path separator'
    """
    if any(s in name for s in SEPARATORS):
        return "contains a path separator"
    if name in DOT_SEGMENTS:
        return "is a relative path segment"
    m = _CONTROL.search(name)
    if m:
        return f"contains the control character U+{ord(m.group()):04X}"
    return None


def _named(c: ChangeRecord) -> Iterable[tuple[str, str]]:
    """``(field, name)`` for every name a change carries, in the order they are checked."""
    for fld in ("source_database", "source_schema", "source_table"):
        value = getattr(c, fld)
        if value is not None:
            yield fld, value
    for k in c.primary_key or ():
        yield "primary_key", k
    for fld in ("before", "after", "column_types"):
        for k in getattr(c, fld) or {}:
            yield fld, k


def check_names(c: ChangeRecord) -> None:
    """Refuse a change carrying a name the rule of this module refuses.

    Raises :class:`cdclake.record.ParseError` with the change's format, the bronze field holding
    the name (``source_database``, ``source_schema``, ``source_table``, ``primary_key``,
    ``before``, ``after`` or ``column_types``) and a reason quoting the name with ``repr``, e.g.
    ``debezium-json: field 'source_table': name '../x' contains a path separator``. Non-string
    names are refused too.
    """
    # fast path: the names of nearly every change are fine, and repeat from change to change
    try:
        if (not _REFUSED_CHARS.search("".join(n for _, n in _named(c)))
                and not any(n in DOT_SEGMENTS for _, n in _named(c))):
            return
    except TypeError:  # a name that is not text
        pass
    for fld, name in _named(c):
        if not isinstance(name, str):
            raise ParseError(c.source_format, f"name {name!r} is a {type(name).__name__}, not text", fld)
        problem = name_problem(name)
        if problem:
            raise ParseError(c.source_format, f"name {name!r} {problem}", fld)
