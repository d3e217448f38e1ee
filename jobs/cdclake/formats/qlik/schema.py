"""Qlik Replicate metadata: the envelope's schema and the table definitions of metadata messages.

Implements "The Replicate envelope" (Avro record ``MessageEnvelope``: ``magic`` = the 5 bytes
``atMSG``, ``type`` ``MD`` or ``DT``, ``headers``, ``messageSchemaId`` or ``messageSchema``,
``message``) and the metadata message of "Metadata and data messages" (``schemaId``, ``lineage``,
``tableStructure.tableColumns``, ``dataSchema``), read into :class:`QlikTable` and stored as a
:class:`cdclake.record.SchemaEntry`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Optional, Union

from cdclake.formats.fields import integer
from cdclake.formats.qlik.values import mask_ordinals, qlik_type
from cdclake.record import ParseError, SchemaEntry

JSON_FORMAT = "qlik-json"
AVRO_FORMAT = "qlik-avro"
OPS = {"REFRESH": "snapshot", "INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
#: Position of every full-load (REFRESH) record: before any change sequence.
REFRESH_POSITION = (0,)
_DELETE_HINT = "the columnMask of the deleted row leaves them out; key columns must be replicated"
MAGIC = b"atMSG"
METADATA, DATA = "MD", "DT"

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
    version = integer(fmt, lineage.get("tableVersion"), "lineage.tableVersion", None)
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
        ordinal = integer(fmt, props.get("ordinal"), f"{where}.ordinal", None)
        if ordinal is None or ordinal < 1:
            raise ParseError(fmt, f"ordinal {props.get('ordinal')!r} is not a positive integer", f"{where}.ordinal")
        if ordinal in seen:
            raise ParseError(fmt, f"ordinal {ordinal} is also the ordinal of column {seen[ordinal]!r}",
                             f"{where}.ordinal")
        seen[ordinal] = str(name)
        qtype = props.get("type")
        if not isinstance(qtype, str):
            raise ParseError(fmt, f"column type {qtype!r} is not text", f"{where}.type")
        length = integer(fmt, props.get("length"), f"{where}.length") or 0
        precision = integer(fmt, props.get("precision"), f"{where}.precision") or 0
        scale = integer(fmt, props.get("scale"), f"{where}.scale") or 0
        pk_pos = integer(fmt, props.get("primaryKeyPosition"), f"{where}.primaryKeyPosition") or 0
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
