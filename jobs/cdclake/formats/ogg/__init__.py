"""``ogg-json``: Oracle GoldenGate for Big Data, Kafka Handler with the JSON Formatter (operation modeled).

The package: :mod:`~cdclake.formats.ogg.parser` (:class:`OggJsonParser`, whose docstring cites
the document it implements) and the format's :data:`FORMATS` entry.
"""
from __future__ import annotations

from cdclake.formats.base import Format
from cdclake.formats.ogg.parser import FORMAT, OggJsonParser, ogg_converter, ogg_datetime, split_table
from cdclake.formats.probe import Probe

__all__ = ["FORMATS", "OggJsonParser", "is_ogg", "ogg_converter", "ogg_datetime", "split_table"]


def is_ogg(p: Probe) -> bool:
    """A JSON object with ``op_type``, ``table`` and ``pos``."""
    o = p.obj
    return o is not None and all(k in o for k in ("op_type", "table", "pos"))


FORMATS = (Format(
    FORMAT, OggJsonParser, 'Oracle GoldenGate for Big Data: "Using the Pluggable Formatters" (Using the JSON '
    'Formatter, Operation Formatted JSON)', is_ogg, "a JSON object with ``op_type``, ``table`` and ``pos``"),)
