"""``arcion-json``: Arcion Replicant change events for a Kafka target in its JSON CDC format.

The package: :mod:`~cdclake.formats.arcion.parser` (:class:`ArcionJsonParser`, whose docstring
cites the document it implements) and the format's :data:`FORMATS` entry.
"""
from __future__ import annotations

from cdclake.formats.arcion.parser import FORMAT, ArcionJsonParser, read_arcion_key, source_position
from cdclake.formats.base import Format
from cdclake.formats.probe import Probe

__all__ = ["FORMATS", "ArcionJsonParser", "is_arcion", "read_arcion_key", "source_position"]


def is_arcion(p: Probe) -> bool:
    """A Kafka Connect payload with ``op`` and a ``source`` block whose ``connector`` is upper case
    (Replicant's spelling), without ``transaction`` or ``message_version``."""
    pl = p.payload
    if pl is None or "op" not in pl or "transaction" in pl or "message_version" in pl:
        return False
    source = pl.get("source")
    connector = source.get("connector") if isinstance(source, dict) else None
    return isinstance(connector, str) and connector != "" and connector == connector.upper() \
        and connector != connector.lower()


FORMATS = (Format(
    FORMAT, ArcionJsonParser, 'Arcion Replicant: "JSON CDC format for Kafka" (DML message structure)', is_arcion,
    "a Kafka Connect payload with ``op`` and a ``source`` block whose ``connector`` is upper case "
    "(``MYSQL``, ``ORACLE``), without ``transaction`` or ``message_version``",
    yields_to=("aliyun-json",)),)
