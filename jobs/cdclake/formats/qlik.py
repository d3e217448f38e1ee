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
:meth:`schema_entries` on every record and stores one :class:`SchemaEntry` per metadata message
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

Options: ``primary_key``, ``primary_keys``, ``column_types`` (:class:`SourceOptions`; configured
types apply to columns the metadata does not describe) and ``table`` (``qlik-json`` only).
"""
from __future__ import annotations

import abc
import datetime as _dt
import hashlib
import io
import json
import re
import struct
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Union

from cdclake.formats._common import SourceOptions, coerce_text, key_delete_image, load_json, pad_scale, parse_timestamp
from cdclake.positions import as_element
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult, SchemaAwareParser, SchemaEntry
from cdclake.types import normalize_type, to_text

JSON_FORMAT = "qlik-json"
AVRO_FORMAT = "qlik-avro"
MAGIC = b"atMSG"
METADATA, DATA = "MD", "DT"
OPS = {"REFRESH": "snapshot", "INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
#: Position of every full-load (REFRESH) record: before any change sequence.
REFRESH_POSITION = (0,)

#: "The Replicate envelope" (Qlik documentation), the Avro schema of every ``qlik-avro`` value.
ENVELOPE_SCHEMA = {
    "type": "record",
    "name": "MessageEnvelope",
    "fields": [
        {"name": "magic", "type": {"type": "fixed", "name": "Magic", "size": 5}},
        {"name": "type", "type": "string"},
        {"name": "headers", "type": ["null", {"type": "map", "values": "string"}]},
        {"name": "messageSchemaId", "type": ["null", "string"]},
        {"name": "messageSchema", "type": ["null", "string"]},
        {"name": "message", "type": "bytes"},
    ],
}

#: Qlik Replicate data type → canonical type (NUMERIC and unknown types are handled in :func:`qlik_type`).
QLIK_TYPES = {
    "INT1": "smallint", "INT2": "smallint", "INT4": "int", "INT8": "bigint",
    "UINT1": "smallint", "UINT2": "int", "UINT4": "bigint", "UINT8": "decimal(20,0)",
    "REAL4": "float", "REAL8": "double", "BOOLEAN": "boolean", "BOOL": "boolean",
    "STRING": "string", "WSTRING": "string", "CLOB": "string", "NCLOB": "string",
    "BYTES": "binary", "BLOB": "binary",
    "DATE": "date", "TIME": "string", "DATETIME": "timestamp", "TIMESTAMP": "timestamp",
}
_TYPE_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*$")
_NEVER_SEEN = "was never seen (its metadata message has not been landed): rerun this hour after it lands"
_DELETE_HINT = "the columnMask of the deleted row leaves them out; key columns must be replicated"


# ---------------------------------------------------------------------------------------------
# types, values and masks


def qlik_type(type_text: Any, precision: Any = 0, scale: Any = 0) -> str:
    """Canonical type of a Qlik Replicate column type (``type`` of ``tableColumns``).

    ============================  =====================
    Qlik Replicate type           canonical type
    ============================  =====================
    INT1, INT2, UINT1             smallint
    INT4, UINT2                   int
    INT8, UINT4                   bigint
    UINT8                         decimal(20,0)
    NUMERIC(p,s)                  decimal(p,s)
    REAL4 / REAL8                 float / double
    BOOLEAN                       boolean
    STRING, WSTRING, CLOB, NCLOB  string
    BYTES, BLOB                   binary
    DATE                          date
    TIME                          string (``HH:MM:SS[.f]``)
    DATETIME (any precision)      timestamp
    anything else                 string
    ============================  =====================

    NUMERIC takes precision and scale from the type text (``NUMERIC(10,2)``) or else from the
    ``precision``/``scale`` properties; a precision of 0 (unknown) becomes 38, and precisions
    above 38 are capped at 38 (:func:`cdclake.types.normalize_type`).
    """
    m = _TYPE_RE.match(str(type_text or ""))
    if not m:
        return "string"
    base = m.group(1).upper()
    if base in ("NUMERIC", "DECIMAL", "NUMBER"):
        p = int(m.group(2)) if m.group(2) else _int_or_zero(precision)
        s = int(m.group(3)) if m.group(3) else (0 if m.group(2) else _int_or_zero(scale))
        p = p or 38
        return normalize_type(f"decimal({p},{min(s, p)})")
    return QLIK_TYPES.get(base, "string")


def _int_or_zero(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(value, 0)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return 0


def float32_text(value: float) -> str:
    """The shortest decimal text that reads back as the same 32-bit float (REAL4 values)."""
    if value != value or value in (float("inf"), float("-inf")):
        return repr(float(value))
    target = struct.unpack("f", struct.pack("f", value))[0]
    for digits in range(1, 10):
        text = f"{target:.{digits}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == target:
            return repr(float(text))
    return repr(target)


def value_text(value: Any, ctype: str) -> Optional[str]:
    """Canonical text of one Qlik value (decoded JSON or Avro) of canonical type ``ctype``.

    JSON values are numbers (INT*, REAL*), booleans, or text (NUMERIC, DATE, TIME, DATETIME;
    BYTES/BLOB as hexadecimal digits). Avro values come with logical types applied: ``Decimal``,
    ``datetime.date``, ``datetime.time``, aware UTC ``datetime``, ``bytes``. Timestamps without a
    zone are taken as UTC. Raises ``ValueError`` when the value does not fit ``ctype``.
    """
    if value is None:
        return None
    if ctype == "binary":
        if isinstance(value, (bytes, bytearray)):
            return to_text(bytes(value))
        if isinstance(value, str):
            text = value.strip()
            try:
                return to_text(bytes.fromhex(text if len(text) % 2 == 0 else "0" + text))
            except ValueError:
                raise ValueError(f"{value!r} is not hexadecimal digits") from None
        raise ValueError(f"{value!r} is not binary data")
    if isinstance(value, (bytes, bytearray)):
        if ctype == "string":
            return to_text(bytes(value))
        raise ValueError(f"bytes {bytes(value)!r} do not fit type {ctype}")
    if isinstance(value, _dt.time):
        return value.isoformat()
    if ctype == "float" and isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return float32_text(float(value))
    if isinstance(value, _dt.datetime):
        if ctype == "date":
            return to_text(value.date())
        return to_text(value)
    if isinstance(value, _dt.date) and ctype in ("date", "string"):
        return to_text(value)
    if isinstance(value, Decimal) and ctype.startswith("decimal"):
        return to_text(pad_scale(value, ctype))
    return coerce_text(value, ctype)


def mask_ordinals(mask: Union[str, bytes, bytearray, None]) -> Optional[frozenset]:
    """The column ordinals whose bits are set in a ``changeMask``/``columnMask``; None for no mask.

    The mask is hexadecimal digits (JSON) or raw bytes (Avro), little-endian: byte ``k`` holds
    bits ``8k`` to ``8k+7`` (least significant bit first), and bit ``i`` is ordinal ``i + 1``.
    So ``"0B"`` (binary 1011) gives ordinals {1, 2, 4}, ``"FF03"`` gives 1 to 10. A hex string of
    odd length is read as if it had a leading ``0``. An empty mask (``""``) is None. Raises
    ``ValueError`` for text that is not hexadecimal digits.
    """
    if mask is None:
        return None
    if isinstance(mask, str):
        text = mask.strip()
        if not text:
            return None
        if len(text) % 2:
            text = "0" + text
        try:
            data = bytes.fromhex(text)
        except ValueError:
            raise ValueError(f"{mask!r} is not hexadecimal digits") from None
    elif isinstance(mask, (bytes, bytearray)):
        data = bytes(mask)
    else:
        raise ValueError(f"{mask!r} is neither hexadecimal text nor bytes")
    return frozenset(8 * k + bit + 1 for k, byte in enumerate(data) for bit in range(8) if byte >> bit & 1)


def transaction_last_event(headers: Any) -> Optional[bool]:
    """``headers.transactionLastEvent`` of a data message as a bool (None when absent or null).

    Accepts a JSON/Avro boolean or the text ``true``/``false`` (any case). Raises ``ValueError``
    for anything else.
    """
    if not isinstance(headers, Mapping):
        return None
    value = headers.get("transactionLastEvent")
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"transactionLastEvent {value!r} is not a boolean")


# ---------------------------------------------------------------------------------------------
# metadata


class QlikColumn(NamedTuple):
    """One column of ``tableColumns``: name, ordinal (from 1), Qlik type, canonical type,
    length, precision, scale and ``primaryKeyPosition`` (0 = not in the key)."""

    name: str
    ordinal: int
    qlik_type: str
    ctype: str
    length: int
    precision: int
    scale: int
    primary_key_position: int


@dataclass(frozen=True)
class QlikTable:
    """A metadata message, read: one version of one table's structure.

    ``columns`` are in ordinal order; ``primary_key`` is ordered by ``primaryKeyPosition``;
    ``data_schema`` is the ``dataSchema`` text (the Avro schema of the data messages) or None;
    ``raw`` is the metadata message itself (JSON-compatible values).
    """

    schema_id: str
    schema: Optional[str]
    table: str
    table_version: Optional[int]
    columns: tuple
    primary_key: tuple
    data_schema: Optional[str]
    raw: dict

    @property
    def by_name(self) -> dict:
        """``{column name: QlikColumn}``."""
        return {c.name: c for c in self.columns}

    def columns_in(self, mask: Union[str, bytes, None]) -> Optional[list]:
        """Names of the columns whose bits are set in ``mask`` (in ordinal order); None for no mask.

        Raises ``ValueError`` for a malformed mask or a bit beyond the table's ordinals. A mask
        more than 8 bytes longer than the table's ordinals need is read only up to them (its
        other bytes must be zero): its bits are never all expanded.
        """
        ordinals = mask_ordinals(self._trimmed(mask))
        if ordinals is None:
            return None
        known = {c.ordinal: c.name for c in self.columns}
        unknown = sorted(o for o in ordinals if o not in known)
        if unknown:
            raise ValueError(f"mask {_mask_repr(mask)} sets ordinal(s) {unknown} that table "
                             f"{self.table!r} version {self.table_version} does not have")
        return [known[o] for o in sorted(ordinals)]

    def _trimmed(self, mask: Union[str, bytes, None]) -> Union[str, bytes, None]:
        width = (max((c.ordinal for c in self.columns), default=0) + 7) // 8
        size = len(mask) // 2 if isinstance(mask, str) else len(mask) if isinstance(mask, (bytes, bytearray)) else 0
        if size <= width + 8:
            return mask
        if isinstance(mask, str):
            text = mask.strip()
            try:
                data = bytes.fromhex(text if len(text) % 2 == 0 else "0" + text)
            except ValueError:
                return mask  # mask_ordinals says it is not hexadecimal digits
        else:
            data = bytes(mask)
        if data.count(0, width) != len(data) - width:
            raise ValueError(f"mask of {len(data)} bytes sets ordinal(s) past {width * 8}, beyond table "
                             f"{self.table!r} version {self.table_version}")
        return data[:width]

    def definition(self) -> str:
        """The JSON text stored in :class:`SchemaEntry` ``definition``: ``schemaId``, ``lineage``,
        ``tableStructure.tableColumns`` and ``dataSchema`` of the metadata message (characters
        written as themselves, but for text UTF-8 cannot hold: then all as ``\\u`` escapes)."""
        raw = self.raw
        doc = {"schemaId": self.schema_id, "lineage": raw.get("lineage"),
               "tableStructure": {"tableColumns": (raw.get("tableStructure") or {}).get("tableColumns")},
               "dataSchema": self.data_schema}
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False, default=str)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (from a \ud800 escape): kept as its escape
            text = json.dumps(doc, separators=(",", ":"), ensure_ascii=True, default=str)
        return text


def _mask_repr(mask: Any) -> str:
    return bytes(mask).hex().upper() if isinstance(mask, (bytes, bytearray)) else repr(mask)


def _opt_int(fmt: str, value: Any, field_name: str, default: Optional[int] = 0) -> Optional[int]:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise ParseError(fmt, f"{value!r} is not an integer", field_name)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise ParseError(fmt, f"{value!r} is not an integer", field_name)


def read_metadata(fmt: str, message: Any) -> QlikTable:
    """Read a metadata message (decoded JSON object or Avro record) into a :class:`QlikTable`.

    Follows "Metadata message": ``schemaId`` (required), ``lineage.table`` (required),
    ``lineage.schema``, ``lineage.tableVersion``, ``tableStructure.tableColumns`` (an object of
    column name → properties, ``ordinal`` required and unique, from 1), ``dataSchema`` (text; an
    object is accepted and kept as its JSON text). Raises :class:`ParseError` naming the field.
    """
    if not isinstance(message, Mapping):
        raise ParseError(fmt, f"metadata message is a {type(message).__name__}, not an object", "message")
    schema_id = message.get("schemaId")
    if not isinstance(schema_id, str) or not schema_id.strip():
        raise ParseError(fmt, "metadata message without a schemaId", "schemaId")
    lineage = message.get("lineage")
    if not isinstance(lineage, Mapping):
        raise ParseError(fmt, "metadata message without lineage", "lineage")
    table = lineage.get("table")
    if not isinstance(table, str) or not table:
        raise ParseError(fmt, "metadata message names no table", "lineage.table")
    schema = lineage.get("schema")
    if schema is not None and not isinstance(schema, str):
        raise ParseError(fmt, f"schema name {schema!r} is not text", "lineage.schema")
    version = _opt_int(fmt, lineage.get("tableVersion"), "lineage.tableVersion", None)
    if version is not None and not -2**31 <= version < 2**31:
        raise ParseError(fmt, f"table version {version} does not fit 32 bits", "lineage.tableVersion")
    structure = message.get("tableStructure")
    columns_obj = structure.get("tableColumns") if isinstance(structure, Mapping) else None
    if not isinstance(columns_obj, Mapping) or not columns_obj:
        raise ParseError(fmt, "metadata message without table columns", "tableStructure.tableColumns")
    columns = []
    seen: dict[int, str] = {}
    for name, props in columns_obj.items():
        where = f"tableStructure.tableColumns.{name}"
        if not isinstance(props, Mapping):
            raise ParseError(fmt, f"column properties are a {type(props).__name__}, not an object", where)
        ordinal = _opt_int(fmt, props.get("ordinal"), f"{where}.ordinal", None)
        if ordinal is None or ordinal < 1:
            raise ParseError(fmt, f"ordinal {props.get('ordinal')!r} is not a positive integer", f"{where}.ordinal")
        if ordinal in seen:
            raise ParseError(fmt, f"ordinal {ordinal} is also the ordinal of column {seen[ordinal]!r}",
                             f"{where}.ordinal")
        seen[ordinal] = str(name)
        qtype = props.get("type")
        if not isinstance(qtype, str):
            raise ParseError(fmt, f"column type {qtype!r} is not text", f"{where}.type")
        length = _opt_int(fmt, props.get("length"), f"{where}.length") or 0
        precision = _opt_int(fmt, props.get("precision"), f"{where}.precision") or 0
        scale = _opt_int(fmt, props.get("scale"), f"{where}.scale") or 0
        pk_pos = _opt_int(fmt, props.get("primaryKeyPosition"), f"{where}.primaryKeyPosition") or 0
        columns.append(QlikColumn(str(name), ordinal, qtype, qlik_type(qtype, precision, scale),
                                  length, precision, scale, pk_pos))
    columns.sort(key=lambda c: c.ordinal)
    primary_key = tuple(c.name for c in sorted((c for c in columns if c.primary_key_position > 0),
                                               key=lambda c: (c.primary_key_position, c.ordinal)))
    data_schema = message.get("dataSchema")
    if isinstance(data_schema, Mapping):
        data_schema = json.dumps(data_schema, separators=(",", ":"))
    if data_schema is not None and not isinstance(data_schema, str):
        raise ParseError(fmt, f"dataSchema is a {type(data_schema).__name__}, not text", "dataSchema")
    return QlikTable(schema_id.strip(), schema or None, table, version, tuple(columns), primary_key,
                     data_schema or None, _plain(message))


def _plain(value: Any) -> Any:
    """A JSON-compatible copy of a decoded metadata message (bytes become hex text)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex().upper()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def table_from_entry(fmt: str, entry: SchemaEntry) -> QlikTable:
    """The :class:`QlikTable` of a stored :class:`SchemaEntry` (its ``definition`` JSON text).

    Raises :class:`ParseError` naming ``messageSchemaId`` when the stored definition is unreadable.
    """
    try:
        return read_metadata(fmt, json.loads(entry.definition))
    except (ValueError, TypeError, RecursionError) as exc:
        raise ParseError(fmt, f"stored metadata of schema {entry.schema_id} is unreadable: {exc}",
                         "messageSchemaId") from None


class TransactionMark(NamedTuple):
    """Transaction headers of one data message: ``transactionId`` (None when empty),
    ``transactionEventCounter`` and ``transactionLastEvent`` (None when absent)."""

    tx_id: Optional[str]
    event_counter: Optional[int]
    last_event: Optional[bool]


class _Envelope(NamedTuple):
    kind: str
    schema_id: Optional[str]
    schema_text: Optional[str]
    message: Any


# ---------------------------------------------------------------------------------------------
# the parsers


class _QlikParser(SchemaAwareParser):
    """Shared decoding of both Qlik envelopes; subclasses read the envelope (:meth:`_envelope`)."""

    format_name = ""

    def __init__(self, options: Optional[Mapping[str, Any]] = None, entries: Sequence[SchemaEntry] = ()):
        self._raw_options = dict(options or {})
        self.options = SourceOptions(self._raw_options)
        table_opt = self._raw_options.get("table")
        if table_opt is not None and (not isinstance(table_opt, str) or not table_opt.strip()):
            raise ValueError(f"option table must be 'schema.table' or 'table', got {table_opt!r}")
        self.default_table: Optional[tuple] = None
        if table_opt:
            parts = table_opt.strip().rsplit(".", 1)
            self.default_table = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
        self.entries: dict[str, SchemaEntry] = {}
        for e in entries:
            self.entries[str(e.schema_id)] = e
        self._cache: dict = {}

    # -- pickling: caches are rebuilt ----------------------------------------------------------

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    # -- SchemaAwareParser -----------------------------------------------------------------------

    def schema_entries(self, record: KafkaRecord) -> list:
        """``[SchemaEntry]`` for a metadata (``MD``) message; ``[]`` for anything else, bad input included."""
        try:
            env = self._envelope(record)
            if env is None or env.kind != METADATA:
                return []
            meta = self._metadata(env)
        except ParseError:
            return []
        return [SchemaEntry(self.format_name, meta.schema_id, meta.table_version, meta.schema, meta.table,
                            meta.definition())]

    def with_schemas(self, entries: Sequence[SchemaEntry]):
        """A parser with this one's options that decodes data messages with ``entries`` (added to
        the entries it already holds; an entry with the same ``schema_id`` replaces the older)."""
        return type(self)(self._raw_options, list(self.entries.values()) + list(entries))

    # -- parse -------------------------------------------------------------------------------

    def parse(self, record: KafkaRecord) -> ParseResult:
        """Parse one Kafka record.

        Returns a ``metadata`` :class:`ControlRecord` for a metadata message, a ``tombstone`` for
        a Kafka tombstone, else a one-element list of :class:`ChangeRecord`. Raises
        :class:`ParseError` for a bad envelope (``value``, ``magic``, ``type``, ``message``), a
        data message whose schema was never seen (``messageSchemaId``), a bad data message
        (``headers``, ``headers.operation``, ``headers.changeSequence``, ``headers.timestamp``,
        ``headers.transactionEventCounter``, ``headers.columnMask``, ``headers.changeMask``,
        ``data``, ``beforeData``, ``data.<column>``) or no primary key (``primary_key``).
        """
        env = self._envelope(record)
        if env is None:
            return ControlRecord("tombstone", self.format_name)
        if env.kind == METADATA:
            meta = self._metadata(env)
            return ControlRecord("metadata", self.format_name, None, meta.schema, meta.table,
                                 detail=f"schemaId {meta.schema_id} tableVersion {meta.table_version}")
        table, message = self._data(env)
        try:
            return [self._change(table, message)]
        except ParseError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as exc:
            raise ParseError(self.format_name, f"malformed data message ({exc})", "message") from None

    def read_transaction(self, record: KafkaRecord) -> Optional[TransactionMark]:
        """The transaction headers of a data message (:class:`TransactionMark`), for holding back
        transactions whose last event (``transactionLastEvent`` true) has not arrived yet.

        None for metadata messages, tombstones and full-load (REFRESH) records. Raises
        :class:`ParseError` as :meth:`parse` does for a message it cannot read.
        """
        env = self._envelope(record)
        if env is None or env.kind == METADATA:
            return None
        _table, message = self._data(env)
        headers = message.get("headers")
        if not isinstance(headers, Mapping):
            raise ParseError(self.format_name, "data message without headers", "headers")
        if str(headers.get("operation") or "").upper() == "REFRESH":
            return None
        try:
            last = transaction_last_event(headers)
        except ValueError as exc:
            raise ParseError(self.format_name, str(exc), "headers.transactionLastEvent") from None
        return TransactionMark(headers.get("transactionId") or None,
                               _opt_int(self.format_name, headers.get("transactionEventCounter"),
                                        "headers.transactionEventCounter", None), last)

    # -- envelope ----------------------------------------------------------------------------

    @abc.abstractmethod
    def _envelope(self, record: KafkaRecord) -> Optional[_Envelope]:
        """The record's envelope (JSON or Avro), or None for a Kafka tombstone."""

    def _check_kind(self, kind: Any) -> str:
        if kind not in (METADATA, DATA):
            raise ParseError(self.format_name, f"unknown message type {kind!r} (expected MD or DT)", "type")
        return kind

    @abc.abstractmethod
    def _metadata(self, env: _Envelope) -> QlikTable:
        """The table definition of a metadata message."""

    @abc.abstractmethod
    def _data(self, env: _Envelope) -> tuple:
        """``(QlikTable, data message as a dict)``."""

    # -- schema lookup -------------------------------------------------------------------------

    def _table(self, schema_id: str) -> QlikTable:
        key = ("id", schema_id)
        if key not in self._cache:
            entry = self.entries.get(schema_id)
            if entry is None:
                raise ParseError(self.format_name, f"schema {schema_id} {_NEVER_SEEN}", "messageSchemaId")
            self._cache[key] = table_from_entry(self.format_name, entry)
        return self._cache[key]

    def _table_by_name(self, schema: Optional[str], table: str, version: Optional[int]) -> QlikTable:
        candidates = [e for e in self.entries.values() if e.source_table == table
                      and (schema is None or e.source_schema == schema)
                      and (version is None or e.table_version == version)]
        if not candidates:
            label = f"{schema}.{table}" if schema else table
            if version is not None:
                label += f" tableVersion {version}"
            raise ParseError(self.format_name, f"schema {label} {_NEVER_SEEN}", "messageSchemaId")
        best = max(candidates, key=lambda e: (e.table_version if e.table_version is not None else -1, e.schema_id))
        return self._table(best.schema_id)

    # -- one data message ----------------------------------------------------------------------

    def _change(self, table: QlikTable, message: Mapping) -> ChangeRecord:
        fmt = self.format_name
        headers = message.get("headers")
        if not isinstance(headers, Mapping):
            raise ParseError(fmt, "data message without headers", "headers")
        operation = headers.get("operation")
        if not isinstance(operation, str) or not operation:
            raise ParseError(fmt, "missing operation", "headers.operation")
        op = OPS.get(operation.upper())
        if op is None:
            raise ParseError(fmt, f"unknown operation {operation!r} (expected REFRESH, INSERT, UPDATE or DELETE)",
                             "headers.operation")
        if op == "snapshot":
            position = REFRESH_POSITION
        else:
            seq = headers.get("changeSequence")
            if seq is None or seq == "":
                raise ParseError(fmt, f"{operation} record without a change sequence", "headers.changeSequence")
            try:
                position = (as_element(seq, "changeSequence"),)
            except ValueError as exc:
                raise ParseError(fmt, str(exc), "headers.changeSequence") from None
        ts_ms = self._timestamp_ms(headers.get("timestamp"))
        tx_id = headers.get("transactionId")
        if tx_id is not None and not isinstance(tx_id, str):
            tx_id = str(tx_id)
        tx_seq = _opt_int(fmt, headers.get("transactionEventCounter"), "headers.transactionEventCounter", None)
        try:
            tx_last = transaction_last_event(headers)
        except ValueError as exc:
            raise ParseError(fmt, str(exc), "headers.transactionLastEvent") from None
        try:
            present = table.columns_in(headers.get("columnMask"))
        except ValueError as exc:
            raise ParseError(fmt, str(exc), "headers.columnMask") from None
        try:
            table.columns_in(headers.get("changeMask"))
        except ValueError as exc:
            raise ParseError(fmt, str(exc), "headers.changeMask") from None

        known = table.by_name
        extra_types = self.options.column_types(None, table.schema, table.table)
        types = {c.name: c.ctype for c in table.columns}
        present_set = None if present is None else set(present)

        def image(obj: Any, field_name: str) -> Optional[dict]:
            if obj is None:
                return None
            if not isinstance(obj, Mapping):
                raise ParseError(fmt, f"image is a {type(obj).__name__}, not an object", field_name)
            out: dict[str, Optional[str]] = {}
            for col, value in obj.items():
                col = str(col)
                if col in known:
                    if present_set is not None and col not in present_set:
                        continue  # not replicated: absent
                    ctype = known[col].ctype
                else:
                    ctype = extra_types.get(col, "string")
                    types.setdefault(col, ctype)
                try:
                    out[col] = value_text(value, ctype)
                except (ValueError, TypeError, ArithmeticError) as exc:
                    raise ParseError(fmt, f"cannot read {value!r} as {ctype}: {exc}", f"{field_name}.{col}") from None
            return out

        data, before_data = message.get("data"), message.get("beforeData")
        override = self.options.key_override(None, table.schema, table.table)
        primary_key = list(override or table.primary_key)
        if not primary_key:
            raise ParseError(fmt, f"table {table.table!r} has no primary key in its metadata "
                                  f"(primaryKeyPosition 0 everywhere): set primary_key for the source", "primary_key")
        if op in ("insert", "snapshot"):
            if data is None:
                raise ParseError(fmt, f"{operation} record without data", "data")
            before, after = None, image(data, "data")
        elif op == "update":
            if data is None:
                raise ParseError(fmt, "UPDATE record without data", "data")
            after, before = image(data, "data"), image(before_data, "beforeData")
        else:
            row, where = (data, "data") if data is not None else (before_data, "beforeData")
            if row is None:
                raise ParseError(fmt, "DELETE record without data or beforeData", "data")
            before = key_delete_image(fmt, primary_key, image(row, where), None, where, _DELETE_HINT)
            after = None
        return ChangeRecord(
            source_format=fmt, source_database=None, source_schema=table.schema, source_table=table.table,
            op=op, before=before, after=after, primary_key=primary_key, column_types=types,
            source_position=position, source_ts_ms=ts_ms, tx_id=tx_id or None, tx_seq=tx_seq, tx_last=tx_last)

    def _timestamp_ms(self, value: Any) -> Optional[int]:
        if value is None or value == "":
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if not isinstance(value, str):
            raise ParseError(self.format_name, f"{value!r} is not a timestamp", "headers.timestamp")
        try:
            ts = parse_timestamp(value)
        except ValueError as exc:
            raise ParseError(self.format_name, str(exc), "headers.timestamp") from None
        if ts is None:
            return None
        delta = ts - _dt.datetime(1970, 1, 1)
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


class QlikJsonParser(_QlikParser):
    """Parser of ``qlik-json`` records: ``QlikJsonParser(options).with_schemas(entries).parse(rec)``.

    The Kafka value is the Replicate envelope as JSON (``magic`` ``"atMSG"``, ``type``,
    ``headers``, ``messageSchemaId``, ``messageSchema``, ``message`` as a JSON object). See the
    module docstring for the lookup rule of a data message's metadata and for results and errors.
    """

    format_name = JSON_FORMAT

    def _envelope(self, record: KafkaRecord) -> Optional[_Envelope]:
        if not record.value:
            return None
        env = load_json(JSON_FORMAT, record.value)
        if env.get("magic") != MAGIC.decode():
            raise ParseError(JSON_FORMAT, f"magic is {env.get('magic')!r}, not 'atMSG': not a Replicate envelope",
                             "magic")
        kind = self._check_kind(env.get("type"))
        message = env.get("message")
        if isinstance(message, str):
            try:
                message = json.loads(message)
            except ValueError:
                raise ParseError(JSON_FORMAT, "message text is not JSON", "message") from None
            except RecursionError:
                raise ParseError(JSON_FORMAT, "message text is JSON nested too deeply to read", "message") from None
        if not isinstance(message, dict):
            raise ParseError(JSON_FORMAT, f"message is a {type(message).__name__}, not an object", "message")
        sid = env.get("messageSchemaId")
        return _Envelope(kind, sid if isinstance(sid, str) and sid else None, env.get("messageSchema"), message)

    def _metadata(self, env: _Envelope) -> QlikTable:
        return read_metadata(JSON_FORMAT, env.message)

    def _data(self, env: _Envelope) -> tuple:
        msg = env.message
        headers = msg.get("headers") if isinstance(msg.get("headers"), Mapping) else {}
        if env.schema_id:
            return self._table(env.schema_id), msg
        external = headers.get("externalSchemaId")
        if isinstance(external, str) and external:
            return self._table(external), msg
        schema, table = msg.get("schema"), msg.get("table")
        if not (isinstance(table, str) and table) and self.default_table:
            schema, table = self.default_table
        if isinstance(table, str) and table:
            version = msg.get("tableVersion", headers.get("tableVersion"))
            version = _opt_int(JSON_FORMAT, version, "tableVersion", None)
            return self._table_by_name(schema if isinstance(schema, str) and schema else None, table, version), msg
        raise ParseError(JSON_FORMAT, "data message names no schema: it has no messageSchemaId, externalSchemaId "
                                      "or table name (publish metadata messages, or set the option table)",
                         "messageSchemaId")


class QlikAvroParser(_QlikParser):
    """Parser of ``qlik-avro`` records: ``QlikAvroParser(options).with_schemas(entries).parse(rec)``.

    The Kafka value is the Replicate envelope (:data:`ENVELOPE_SCHEMA`) in Avro binary encoding.
    Metadata messages are decoded with their embedded ``messageSchema``; data messages with the
    ``dataSchema`` of the metadata named by ``messageSchemaId``. Truncated or trailing bytes, a
    wrong magic or an undecodable message raise :class:`ParseError` (``value``, ``magic``,
    ``message``, ``messageSchema``).
    """

    format_name = AVRO_FORMAT

    def _parsed(self, key: tuple, schema_text: str, field_name: str):
        from fastavro import parse_schema

        if key not in self._cache:
            try:
                self._cache[key] = parse_schema(json.loads(schema_text))
            except Exception as exc:  # fastavro raises several types for a bad schema
                raise ParseError(AVRO_FORMAT, f"not a usable Avro schema ({type(exc).__name__}: {exc})",
                                 field_name) from None
        return self._cache[key]

    def _decode(self, data: bytes, schema, field_name: str) -> Any:
        from fastavro import schemaless_reader

        buf = io.BytesIO(data)
        try:
            obj = schemaless_reader(buf, schema, None)
        except Exception as exc:  # truncated or corrupt Avro: EOFError, struct.error, ValueError, ...
            raise ParseError(AVRO_FORMAT, f"not decodable Avro ({type(exc).__name__}: {exc or 'truncated'})",
                             field_name) from None
        if buf.tell() != len(data):
            raise ParseError(AVRO_FORMAT, f"{len(data) - buf.tell()} trailing byte(s) after the Avro record",
                             field_name)
        return obj

    def _envelope(self, record: KafkaRecord) -> Optional[_Envelope]:
        if not record.value:
            return None
        value = bytes(record.value)
        if value[:5] != MAGIC:
            raise ParseError(AVRO_FORMAT, f"magic is {value[:5]!r}, not b'atMSG': not a Replicate envelope", "magic")
        env = self._decode(value, self._parsed(("envelope",), json.dumps(ENVELOPE_SCHEMA), "value"), "value")
        kind = self._check_kind(env.get("type"))
        return _Envelope(kind, env.get("messageSchemaId") or None, env.get("messageSchema") or None, env["message"])

    def _metadata(self, env: _Envelope) -> QlikTable:
        if not env.schema_text:
            raise ParseError(AVRO_FORMAT, "metadata message without an embedded messageSchema cannot be decoded",
                             "messageSchema")
        digest = hashlib.sha1(env.schema_text.encode("utf-8")).hexdigest()
        schema = self._parsed(("md", digest), env.schema_text, "messageSchema")
        return read_metadata(AVRO_FORMAT, self._decode(env.message, schema, "message"))

    def _data(self, env: _Envelope) -> tuple:
        if env.schema_id:
            table = self._table(env.schema_id)
        elif env.schema_text:
            table = self._table_by_data_schema(env.schema_text)
        else:
            raise ParseError(AVRO_FORMAT, "data message names no schema (neither messageSchemaId nor messageSchema)",
                             "messageSchemaId")
        if not table.data_schema:
            raise ParseError(AVRO_FORMAT, f"metadata of schema {table.schema_id} has no dataSchema", "messageSchemaId")
        schema = self._parsed(("dt", table.schema_id), table.data_schema, "messageSchemaId")
        message = self._decode(env.message, schema, "message")
        if not isinstance(message, dict):
            raise ParseError(AVRO_FORMAT, "data message is not an Avro record", "message")
        return table, message

    def _table_by_data_schema(self, schema_text: str) -> QlikTable:
        try:
            wanted = json.loads(schema_text)
        except (ValueError, RecursionError):
            raise ParseError(AVRO_FORMAT, "messageSchema is not JSON (or nested too deeply to read)",
                             "messageSchema") from None
        for sid in sorted(self.entries):
            table = self._table(sid)
            try:
                if table.data_schema and json.loads(table.data_schema) == wanted:
                    return table
            except ValueError:
                continue
        raise ParseError(AVRO_FORMAT, f"schema embedded in the message {_NEVER_SEEN}", "messageSchemaId")
