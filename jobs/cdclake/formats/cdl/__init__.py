"""``cdl-json``: Huawei MRS CDL JSON (``message_version`` 1.0), with or without the Connect schema.

The package: :mod:`~cdclake.formats.cdl.parser` (:class:`CdlJsonParser`, whose docstring cites
the document it implements) and the format's :data:`FORMATS` entry.
"""
from __future__ import annotations

from cdclake.formats.base import Format
from cdclake.formats.cdl.parser import FORMAT, CdlJsonParser, cdl_type
from cdclake.formats.probe import Probe

__all__ = ["FORMATS", "CdlJsonParser", "cdl_type", "is_cdl"]


def is_cdl(p: Probe) -> bool:
    """A Kafka Connect payload holding ``message_version`` other than ``2.0``."""
    pl = p.payload
    return pl is not None and "message_version" in pl and str(pl["message_version"]) != "2.0"


FORMATS = (Format(
    FORMAT, CdlJsonParser, 'Huawei MRS: "CDL JSON and Open-Source Debezium JSON" (Data Formats, Table 1)', is_cdl,
    "a Kafka Connect payload holding ``message_version`` other than ``2.0``", yields_to=("aliyun-json",),
    # CDL's own Decimal carries no precision: a string may be a decimal
    coarse_types={"string": ("decimal",)}),)
