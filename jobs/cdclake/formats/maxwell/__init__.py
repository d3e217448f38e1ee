"""``maxwell-json``: Zendesk Maxwell's daemon change records in JSON, one row per Kafka record.

The package: :mod:`~cdclake.formats.maxwell.parser` (:class:`MaxwellJsonParser`, whose docstring
cites the document it implements) and the format's :data:`FORMATS` entry.
"""
from __future__ import annotations

from cdclake.formats.base import Format
from cdclake.formats.maxwell.parser import (BOOTSTRAP_POSITION, FORMAT, NO_POSITION_REASON, MaxwellJsonParser,
                                            kafka_key)
from cdclake.formats.probe import Probe

__all__ = ["BOOTSTRAP_POSITION", "FORMATS", "NO_POSITION_REASON", "MaxwellJsonParser", "is_maxwell", "kafka_key"]


def is_maxwell(p: Probe) -> bool:
    """A JSON object with ``database``, ``type``, ``ts`` and ``data``, ``def`` or ``sql``, and none
    of Canal's ``isDdl``/``es``."""
    o = p.obj
    return (o is not None and all(k in o for k in ("database", "type", "ts"))
            and any(k in o for k in ("data", "def", "sql")) and "isDdl" not in o and "es" not in o)


FORMATS = (Format(
    FORMAT, MaxwellJsonParser, "Maxwell's Daemon: \"Data Format\", \"Bootstrapping\" and the formatting options "
    "of \"Reference\"", is_maxwell,
    "a JSON object with ``database``, ``type``, ``ts`` and ``data``, ``def`` or ``sql``, and none of Canal's "
    "``isDdl``/``es``"),)
