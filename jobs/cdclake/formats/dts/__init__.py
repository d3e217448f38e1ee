"""``dts-avro``: Alibaba Cloud DTS change records in the DTS Avro format.

The package: :mod:`~cdclake.formats.dts.schema` (the Avro schema and the reading of a Kafka value),
:mod:`~cdclake.formats.dts.values` (image values to canonical types and text) and
:mod:`~cdclake.formats.dts.parser` (the parser, :class:`DtsAvroParser`, whose docstring cites the
document it implements). Its public names are importable from here.
"""
from cdclake.errors import ParseError
from cdclake.formats.base import Format
from cdclake.formats.dts.parser import (CONTROL_OPERATIONS, ROW_OPERATIONS, DtsAvroParser, parse_position,
                                        primary_key_info, split_object_name)
from cdclake.formats.dts.schema import (AVSC, FORMAT, NAMESPACE, PARSED_SCHEMA, RECORD_SCHEMA, decode,
                                        record_schema)
from cdclake.formats.dts.values import MYSQL_CHARSETS, MYSQL_NULL_TYPES, SourceInfo, decode_text, read_value, value_text
from cdclake.formats.probe import Probe

__all__ = ["AVSC", "CONTROL_OPERATIONS", "DtsAvroParser", "FORMAT", "FORMATS", "MYSQL_CHARSETS", "MYSQL_NULL_TYPES", "NAMESPACE",
           "PARSED_SCHEMA", "RECORD_SCHEMA", "ROW_OPERATIONS", "SourceInfo", "decode", "decode_text", "is_dts_avro",
           "parse_position", "primary_key_info", "read_value", "record_schema", "split_object_name", "value_text"]


def is_dts_avro(p: Probe) -> bool:
    """Not JSON, not Qlik's ``atMSG``: a value that decodes as exactly one DTS Avro ``Record``."""
    if p.json is not None or p.value.startswith(b"atMSG"):  # JSON, or Qlik's Avro envelope
        return False
    try:
        decode(p.value)
    except ParseError:
        return False
    return True


FORMATS = (Format(
    FORMAT, DtsAvroParser, 'Alibaba Cloud DTS: "data formats of Kafka messages" (DTS Avro) and its Record.avsc',
    is_dts_avro, "not JSON, not ``atMSG``: a value that decodes as exactly one DTS Avro ``Record``"),)
