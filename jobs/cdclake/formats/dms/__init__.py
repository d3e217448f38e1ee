"""``aws-dms-json``: AWS Database Migration Service messages on an Apache Kafka target.

The package: :mod:`~cdclake.formats.dms.parser` (:class:`AwsDmsJsonParser`, whose docstring
cites the document it implements) and the format's :data:`FORMATS` entry.
"""
from __future__ import annotations

from cdclake.formats.base import Format
from cdclake.formats.dms.parser import FORMAT, AwsDmsJsonParser, operation_name
from cdclake.formats.probe import Probe

__all__ = ["FORMATS", "AwsDmsJsonParser", "is_dms", "operation_name"]


def is_dms(p: Probe) -> bool:
    """A JSON object whose ``metadata`` object holds ``record-type``."""
    o = p.obj
    return o is not None and isinstance(o.get("metadata"), dict) and "record-type" in o["metadata"]


FORMATS = (Format(
    FORMAT, AwsDmsJsonParser, 'AWS DMS User Guide: "Using Apache Kafka as a target for AWS Database Migration '
    'Service"', is_dms, "a JSON object whose ``metadata`` object holds ``record-type``"),)
