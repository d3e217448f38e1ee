"""The vendor formats: a closed list from format name to parser class.

One module (or package) per vendor format; each cites the document it implements, and each parser
class derives from the parser template :class:`cdclake.formats.base.FormatParser`; ``auto``
(:mod:`cdclake.formats.auto`) reads each record with the parser of the format detected in it. A parser class
is built with the source's options from the pipeline YAML (see :meth:`get_parser`).
"""
from __future__ import annotations

from typing import Mapping, Optional

from cdclake.formats.aliyun import AliyunJsonParser
from cdclake.formats.arcion import ArcionJsonParser
from cdclake.formats.auto import AutoParser
from cdclake.formats.canal import CanalJsonParser
from cdclake.formats.cdl import CdlJsonParser
from cdclake.formats.debezium import DebeziumJsonParser
from cdclake.formats.dms import AwsDmsJsonParser
from cdclake.formats.debezium_avro import DebeziumAvroParser
from cdclake.formats.debezium_jsonschema import DebeziumJsonSchemaParser
from cdclake.formats.dts import DtsAvroParser
from cdclake.formats.maxwell import MaxwellJsonParser
from cdclake.formats.ogg import OggJsonParser
from cdclake.formats.qlik import QlikAvroParser, QlikJsonParser
from cdclake.formats.shareplex import ShareplexJsonParser
from cdclake.errors import UnknownFormat
from cdclake.record import ParseError, RecordParser, SchemaAwareParser, parse_all

#: Every format the pipeline reads: the ``format`` of a source in the pipeline YAML → its parser class.
FORMATS: dict[str, type] = {
    "aliyun-json": AliyunJsonParser,
    "arcion-json": ArcionJsonParser,
    # every record in whichever of the formats above it is in (cdclake.formats.detect)
    "auto": AutoParser,
    "aws-dms-json": AwsDmsJsonParser,
    "canal-json": CanalJsonParser,
    "cdl-json": CdlJsonParser,
    "debezium-avro": DebeziumAvroParser,
    "debezium-json": DebeziumJsonParser,
    "debezium-jsonschema": DebeziumJsonSchemaParser,
    "dts-avro": DtsAvroParser,
    "maxwell-json": MaxwellJsonParser,
    "ogg-json": OggJsonParser,
    "qlik-avro": QlikAvroParser,
    "qlik-json": QlikJsonParser,
    "shareplex-json": ShareplexJsonParser,
}

__all__ = ["FORMATS", "ParseError", "RecordParser", "SchemaAwareParser", "formats", "get_parser", "parse_all"]


def formats() -> list[str]:
    """The format names, sorted."""
    return sorted(FORMATS)


def get_parser(name: str, options: Optional[Mapping[str, object]] = None) -> RecordParser:
    """Build the parser of format ``name`` with the source's options.

    Raises :class:`~cdclake.errors.UnknownFormat` (a ``KeyError``) with the list of known formats when ``name`` is not one of :data:`FORMATS`,
    and ``ValueError`` for a malformed option.
    """
    try:
        cls = FORMATS[name]
    except KeyError:
        raise UnknownFormat(f"unknown format {name!r}; known formats: {', '.join(formats())}") from None
    return cls(dict(options or {}))
