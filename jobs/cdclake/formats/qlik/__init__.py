"""``qlik-json`` and ``qlik-avro``: Qlik Replicate (formerly Attunity Replicate) Kafka target messages.

Implements Qlik Replicate's "Metadata and data messages" (metadata message: ``schemaId``,
``lineage`` {``server``, ``task``, ``schema``, ``table``, ``tableVersion``, ``timestamp``},
``tableStructure.tableColumns`` {column → ``ordinal``, ``type``, ``length``, ``precision``,
``scale``, ``primaryKeyPosition``}, ``dataSchema``; data message: ``headers`` {``operation``,
``changeSequence``, ``timestamp``, ``streamPosition``, ``transactionId``, ``changeMask``,
``columnMask``, ``externalSchemaId``, ``transactionEventCounter``, ``transactionLastEvent``},
``data``, ``beforeData``) and "The Replicate envelope" (Avro record ``MessageEnvelope``: ``magic``
= the 5 bytes ``atMSG``, ``type`` ``MD`` (metadata) or ``DT`` (data), ``headers``,
``messageSchemaId`` or ``messageSchema``, ``message``). Value types follow the Kafka target's
"Supported data types" table (JSON: numbers for INT*/REAL*, text for DATE/TIME/DATETIME/NUMERIC,
hexadecimal digits for BYTES/BLOB; Avro: ``int``/``long``/``float``/``double``, ``decimal`` on
bytes for NUMERIC, ``date``, ``time-millis``, ``timestamp-micros``, ``bytes``). The JSON form
of the envelope (``"magic": "atMSG"``, ``"type": "DT"``, ``"message": {"data", "beforeData",
"headers"}``) follows the examples in Qlik's support article "Qlik Replicate and Kafka target:
How to add tables name in Kafka message".

The two registered names share everything but the envelope:

- ``qlik-json``: the Kafka value is the envelope as a JSON object; ``message`` is a JSON object
  (the metadata or data message itself).
- ``qlik-avro``: the Kafka value is the envelope in Avro binary encoding (no Confluent framing);
  ``message`` is Avro bytes: a metadata message carries its own Avro schema in ``messageSchema``,
  a data message names its metadata's ``schemaId`` in ``messageSchemaId`` and is decoded with
  that metadata's ``dataSchema`` (fastavro ``schemaless_reader``; logical types applied).

The formats are metadata-driven (:class:`cdclake.record.SchemaAwareParser`): the pipeline calls
:meth:`schema_entries` on every record whose bytes :meth:`may_hold_schema` lets through (a
``type`` that may be ``MD``) and stores one :class:`SchemaEntry` per metadata message
(``schema_id`` = ``schemaId``, ``table_version`` = ``lineage.tableVersion``, ``definition`` = the
metadata as JSON text), then parses with :meth:`with_schemas`. A metadata message parsed as a
record is a ``metadata`` :class:`ControlRecord`. A data message whose schema was never seen
raises ``ParseError`` naming ``messageSchemaId`` ("... was never seen (its metadata message has
not been landed): rerun this hour after it lands").

Which metadata decodes a data message:

- ``qlik-avro``: the envelope's ``messageSchemaId`` (the metadata's ``schemaId``); an envelope that
  embeds ``messageSchema`` instead is matched to the stored metadata whose ``dataSchema`` is the
  same Avro schema.
- ``qlik-json`` (the document is silent on how a JSON data message names its metadata; this is
  the rule): the envelope's ``messageSchemaId`` when not null; else ``headers.externalSchemaId``;
  else the table the message names (``schema``/``table`` of the data message, or the ``table``
  option ``"schema.table"`` for topics that carry one table), with ``tableVersion`` when the
  message carries one (``message.tableVersion`` or ``headers.tableVersion``), else the highest
  table version seen for that table. A JSON message that names none of these is a ParseError.

Data semantics:

- ``headers.operation``: ``REFRESH`` (full load) → ``snapshot``; ``INSERT``, ``UPDATE``,
  ``DELETE`` → ``insert``, ``update``, ``delete``.
- Position: ``(int(changeSequence),)``. The change sequence is a decimal string common to all
  tables of a task and monotonically increasing (35 digits in practice: more than 64 bits, kept
  exact; at most 38). REFRESH records carry no change sequence ("applicable to CDC operations
  only") and get ``(0,)``: Replicate reads the full load while it caches the changes that happen
  meanwhile and sends those afterwards, so every CDC change of a row is at least as new as its
  full-load image and must sort after it; full-load rows tie with each other and keep Kafka order.
- ``headers.timestamp`` (UTC text) → ``source_ts_ms``; ``transactionId`` → ``tx_id``;
  ``transactionEventCounter`` → ``tx_seq``; ``transactionLastEvent`` → ``tx_last``.
- ``columnMask`` / ``changeMask`` (:func:`mask_ordinals`): hexadecimal digits (Avro: bytes), a
  little-endian bitmask: byte ``k`` of the mask (hex digits ``2k``, ``2k+1``) holds bits
  ``8k``..``8k+7``, least significant bit first, and bit ``i`` is the column of ordinal ``i + 1``
  (the document's example: ``0B`` = binary 1011 = bits 0, 1, 3 = ordinals 1, 2 and 4). A column
  whose bit is clear in ``columnMask`` was not replicated and is *absent* from both images (its
  silver value is kept); a null ``columnMask`` means every column is present. ``changeMask`` is
  validated and exposed (:meth:`QlikTable.columns_in`) but does not shape images.
- Images: INSERT/REFRESH ``after`` = ``data``; UPDATE ``after`` = ``data``, ``before`` =
  ``beforeData`` (None when the task does not send before images); DELETE ``before`` = ``data``
  (``beforeData`` when ``data`` is null). Columns the metadata does not know are kept (typed from
  the ``column_types`` option, else ``string``); the mask speaks only of the metadata's columns.
- Primary key: the configured ``primary_key``/``primary_keys``, else the columns with a nonzero
  ``primaryKeyPosition`` ordered by it; else ParseError ``primary_key``.
- Types (:func:`qlik_type`) from ``tableColumns``; values to canonical text (:func:`value_text`).
  DATETIME values carry no zone and are taken as UTC.

Options: ``primary_key``, ``primary_keys``, ``column_types`` (:class:`cdclake.formats.options.SourceOptions`;
configured types apply to columns the metadata does not describe) and ``table`` (``qlik-json`` only).

The package: :mod:`~cdclake.formats.qlik.values` (types, values, masks),
:mod:`~cdclake.formats.qlik.schema` (the envelope schema and metadata messages) and
:mod:`~cdclake.formats.qlik.parser` (the parsers); their public names are importable from here.
"""
from cdclake.formats.base import Format
from cdclake.formats.probe import Probe
from cdclake.formats.qlik.avro import QlikAvroParser
from cdclake.formats.qlik.parser import QlikJsonParser, QlikParser
from cdclake.formats.qlik.schema import (AVRO_FORMAT, DATA, ENVELOPE_SCHEMA, JSON_FORMAT, MAGIC, METADATA, OPS,
                                        REFRESH_POSITION, QlikColumn, QlikTable, TransactionMark, read_metadata,
                                        table_from_entry)
from cdclake.formats.qlik.values import (QLIK_TYPES, float32_text, mask_ordinals, qlik_type, transaction_last_event,
                                        value_text)

__all__ = ["AVRO_FORMAT", "DATA", "FORMATS", "ENVELOPE_SCHEMA", "JSON_FORMAT", "MAGIC", "METADATA", "OPS", "QLIK_TYPES",
           "QlikAvroParser", "QlikColumn", "QlikJsonParser", "QlikParser", "QlikTable", "REFRESH_POSITION",
           "TransactionMark", "float32_text", "is_qlik_avro", "is_qlik_json", "mask_ordinals", "qlik_type", "read_metadata", "table_from_entry",
           "transaction_last_event", "value_text"]


def is_qlik_json(p: Probe) -> bool:
    """A JSON object whose ``magic`` is ``"atMSG"`` (the Replicate envelope)."""
    o = p.obj
    return o is not None and o.get("magic") == "atMSG"


def is_qlik_avro(p: Probe) -> bool:
    """A value that starts with the bytes ``atMSG`` (the Avro envelope's magic)."""
    return p.value.startswith(MAGIC)


_DOCUMENT = 'Qlik Replicate: "Metadata and data messages" and the Kafka target\'s "Supported data types"'
FORMATS = (
    Format(JSON_FORMAT, QlikJsonParser, _DOCUMENT, is_qlik_json, 'a JSON object whose ``magic`` is ``"atMSG"``'),
    Format(AVRO_FORMAT, QlikAvroParser, _DOCUMENT, is_qlik_avro, "a value that starts with the bytes ``atMSG``"),
)
