"""The vendor formats: one package per vendor, each declaring its formats as objects.

Each vendor package ``cdclake.formats.<vendor>`` holds its parser (derived from the parser
template :class:`cdclake.formats.base.FormatParser`, its module docstring citing the document it
implements) and declares its formats in ``FORMATS`` as :class:`~cdclake.formats.base.Format`
objects (name, parser class, document, ``auto`` rule, coarse types). The closed list of packages is
:data:`cdclake.formats.registry.PACKAGES`; :data:`FORMATS` here (format name → parser class, with
``auto``, :mod:`cdclake.formats.auto`, which reads each record with the parser of the format
detected in it) derives from it. A parser class is built with the source's options from the
pipeline YAML (see :func:`get_parser`).
"""
from __future__ import annotations

from typing import Iterator, Mapping, Optional

from cdclake.errors import UnknownFormat
from cdclake.formats.auto import AutoParser
from cdclake.formats.base import Format
from cdclake.formats.registry import all_formats, by_name, format_named
from cdclake.record import ParseError, RecordParser, SchemaAwareParser, parse_all


class _Parsers(Mapping):
    """Format name → parser class, for every format of the closed list and ``auto``; read when
    looked at, so it follows :data:`cdclake.formats.registry.PACKAGES`."""

    def __getitem__(self, name: str) -> type:
        if name == "auto":
            return AutoParser
        return by_name()[name].parser

    def __iter__(self) -> Iterator[str]:
        return iter(sorted([*by_name(), "auto"]))

    def __len__(self) -> int:
        return len(by_name()) + 1

    def __repr__(self) -> str:
        return f"FORMATS({dict(self)!r})"


#: Every format the pipeline reads: the ``format`` of a source in the pipeline YAML → its parser class.
FORMATS: Mapping[str, type] = _Parsers()

__all__ = ["FORMATS", "Format", "ParseError", "RecordParser", "SchemaAwareParser", "all_formats", "format_named",
           "formats", "get_parser", "parse_all"]


def formats() -> list[str]:
    """The format names, sorted."""
    return sorted(FORMATS)


def get_parser(name: str, options: Optional[Mapping[str, object]] = None) -> RecordParser:
    """Build the parser of format ``name`` with the source's options.

    Raises :class:`~cdclake.errors.UnknownFormat` (a ``KeyError``) with the list of known formats
    when ``name`` is not one of :data:`FORMATS`, and ``ValueError`` for a malformed option.
    """
    try:
        cls = FORMATS[name]
    except KeyError:
        raise UnknownFormat(f"unknown format {name!r}; known formats: {', '.join(formats())}") from None
    return cls(dict(options or {}))
