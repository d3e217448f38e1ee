"""``dts-avro``: Alibaba Cloud DTS change records in the DTS Avro format.

The package: :mod:`~cdclake.formats.dts.schema` (the Avro schema and the reading of a Kafka value),
:mod:`~cdclake.formats.dts.values` (image values to canonical types and text) and
:mod:`~cdclake.formats.dts.parser` (the parser, :class:`DtsAvroParser`, whose docstring cites the
document it implements). Its public names are importable from here.
"""
from cdclake.formats.dts.parser import (CONTROL_OPERATIONS, ROW_OPERATIONS, DtsAvroParser, parse_position,
                                        primary_key_info, split_object_name)
from cdclake.formats.dts.schema import (AVSC, FORMAT, NAMESPACE, PARSED_SCHEMA, RECORD_SCHEMA, decode,
                                        record_schema)
from cdclake.formats.dts.values import MYSQL_CHARSETS, MYSQL_NULL_TYPES, SourceInfo, decode_text, read_value, value_text

__all__ = ["AVSC", "CONTROL_OPERATIONS", "DtsAvroParser", "FORMAT", "MYSQL_CHARSETS", "MYSQL_NULL_TYPES", "NAMESPACE",
           "PARSED_SCHEMA", "RECORD_SCHEMA", "ROW_OPERATIONS", "SourceInfo", "decode", "decode_text",
           "parse_position", "primary_key_info", "read_value", "record_schema", "split_object_name", "value_text"]
