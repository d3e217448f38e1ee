"""``aliyun-json``: the JSON change messages Alibaba Cloud DataWorks writes to Kafka.

The package: :mod:`~cdclake.formats.aliyun.parser` (:class:`AliyunJsonParser`, whose docstring
cites the document it implements) and the format's :data:`FORMATS` entry.
"""
from __future__ import annotations

from cdclake.formats.aliyun.parser import FORMAT, AliyunJsonParser
from cdclake.formats.base import Format
from cdclake.formats.probe import Probe

__all__ = ["FORMATS", "AliyunJsonParser", "is_aliyun"]


def is_aliyun(p: Probe) -> bool:
    """``{"schema", "payload"}`` whose payload holds ``sequenceId`` or whose schema holds ``dataColumn``."""
    o = p.obj
    if o is None or not ("schema" in o and "payload" in o):
        return False
    schema, payload = o.get("schema"), o.get("payload")
    return ((isinstance(payload, dict) and "sequenceId" in payload)
            or (isinstance(schema, dict) and "dataColumn" in schema))


FORMATS = (Format(
    FORMAT, AliyunJsonParser, 'DataWorks: "Appendix: Message formats" (Format of a Kafka message, Field types, Fields)',
    is_aliyun, "``{schema, payload}`` whose payload holds ``sequenceId`` or whose schema holds ``dataColumn``",
    # DataWorks has six coarse types: a DOUBLE may be a decimal, a DATE a date without time
    coarse_types={"double": ("decimal",), "timestamp_ntz": ("date",)}),)
