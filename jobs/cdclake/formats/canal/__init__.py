"""``canal-json``: Alibaba Canal flat messages in JSON (as written by Canal and by Alibaba Cloud DTS).

The package: :mod:`~cdclake.formats.canal.parser` (:class:`CanalJsonParser`, whose docstring
cites the document it implements) and the format's :data:`FORMATS` entry.
"""
from __future__ import annotations

from cdclake.formats.base import Format
from cdclake.formats.canal.parser import FORMAT, CanalJsonParser, canal_converter, canal_text, mysql_type
from cdclake.formats.probe import Probe

__all__ = ["FORMATS", "CanalJsonParser", "canal_converter", "canal_text", "is_canal", "mysql_type"]


def is_canal(p: Probe) -> bool:
    """A JSON object with ``isDdl``, ``type`` and ``data`` or ``pkNames`` (a flat message)."""
    o = p.obj
    return o is not None and "isDdl" in o and "type" in o and ("data" in o or "pkNames" in o)


FORMATS = (Format(
    FORMAT, CanalJsonParser, 'Alibaba Cloud DTS: "data formats of Kafka messages" (Canal JSON)', is_canal,
    "a JSON object with ``isDdl``, ``type`` and ``data`` or ``pkNames`` (flat message)"),)
