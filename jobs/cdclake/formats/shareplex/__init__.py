"""``shareplex-json``: SharePlex JSON change records (as Alibaba Cloud DTS and SharePlex write them to Kafka).

The package: :mod:`~cdclake.formats.shareplex.parser` (:class:`ShareplexJsonParser`, whose
docstring cites the document it implements) and the format's :data:`FORMATS` entry.
"""
from __future__ import annotations

from cdclake.formats.base import Format
from cdclake.formats.probe import Probe
from cdclake.formats.shareplex.parser import FORMAT, ShareplexJsonParser, meta_idx, split_table

__all__ = ["FORMATS", "ShareplexJsonParser", "is_shareplex", "meta_idx", "split_table"]


def is_shareplex(p: Probe) -> bool:
    """A JSON object whose ``meta`` is an object, with ``data``."""
    o = p.obj
    return o is not None and isinstance(o.get("meta"), dict) and "data" in o


FORMATS = (Format(
    FORMAT, ShareplexJsonParser, 'Alibaba Cloud DTS: "data formats of Kafka messages" (Shareplex JSON)',
    is_shareplex, "a JSON object whose ``meta`` is an object, with ``data``"),)
