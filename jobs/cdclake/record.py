"""The canonical change record and the parser interface every vendor format implements.

A parser turns one Kafka record into zero or more :class:`ChangeRecord` rows (the bronze rows),
or into one :class:`ControlRecord` (DDL, tombstone, heartbeat, transaction marker: recognised,
counted, never applied as a row), or raises :class:`ParseError` naming the format and the field;
the normalize stage then puts the Kafka record in quarantine with that reason. A parser is
all-or-nothing per Kafka record: it builds the whole list before returning it.

Modelled on Apache Paimon's ``RichCdcMultiplexRecord`` (database, table, schema, row kind,
field map) and its ``format/<vendor>/...RecordParser`` packages.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Iterable, Optional, Protocol, Sequence, Union

from cdclake.errors import ParseError

#: The operations a bronze row can carry. DDL and control records are not rows.
OPS = ("insert", "update", "delete", "snapshot", "truncate")

#: Kinds of control records (not rows): accounted for in the normalize gate's counts.
#: ``key_change``: the delete half of a primary key change that the other half, a create, applies
#: (Debezium's ``__debezium.newkey`` header).
CONTROL_KINDS = ("tombstone", "ddl", "heartbeat", "transaction", "metadata", "key_change")


@dataclass(frozen=True)
class KafkaRecord:
    """One raw Kafka record as landed in the raw table.

    ``timestamp_ms`` is the record timestamp in milliseconds since the epoch (UTC);
    ``key`` and ``value`` are the raw bytes (``value`` is None for a Kafka tombstone);
    ``headers`` is a list of (name, bytes) pairs.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: Sequence[tuple[str, Optional[bytes]]] = ()


@dataclass
class ChangeRecord:
    """One row change in canonical form: a bronze row.

    Fields (bronze column types in brackets):

    - ``source_format`` [string]: the format name (a key of ``cdclake.formats.FORMATS``), e.g. ``debezium-json``.
    - ``source_database``, ``source_schema``, ``source_table`` [string]: as the message names
      them, unaltered (always quoted where they reach SQL); database or schema may be None.
    - ``op`` [string]: one of :data:`OPS`.
    - ``before``, ``after`` [map<string,string>]: images in canonical text form
      (:mod:`cdclake.types`). A column missing from the map is *absent* (not carried by the
      message); a key whose value is None *is* null. None means the image does not exist.
    - ``primary_key`` [array<string>]: ordered key column names.
    - ``column_types`` [map<string,string>]: canonical type per column when the format
      carries types (``bigint``, ``decimal(10,2)``, ``timestamp`` ...); empty otherwise.
    - ``source_position`` [array<decimal(38,0)>]: the format's native order as a tuple of
      non-negative integers, compared element by element (see ``cdclake.positions``).
    - ``source_ts_ms`` [bigint]: source commit time in ms since the epoch, UTC.
    - ``tx_id`` [string], ``tx_seq`` [bigint]: transaction id and order inside it, where known.
    - ``row_in_record`` [int]: index of this row inside a multi-row Kafka record (Canal ``data``).
    - ``tx_last`` [boolean]: this is the last change of its transaction (Qlik
      ``transactionLastEvent``); None where the format does not say.
    - ``tx_size`` [bigint]: the number of changes in the transaction (SharePlex ``meta.size`` or
      ``idx``); None where the format does not say.
    """

    source_format: str
    source_database: Optional[str]
    source_schema: Optional[str]
    source_table: str
    op: str
    before: Optional[dict[str, Optional[str]]]
    after: Optional[dict[str, Optional[str]]]
    primary_key: list[str]
    column_types: dict[str, str] = field(default_factory=dict)
    source_position: tuple[int, ...] = ()
    source_ts_ms: Optional[int] = None
    tx_id: Optional[str] = None
    tx_seq: Optional[int] = None
    row_in_record: int = 0
    tx_last: Optional[bool] = None
    tx_size: Optional[int] = None


@dataclass
class ControlRecord:
    """A record that is recognised but is not a row change (DDL, tombstone, heartbeat ...).

    ``kind`` is one of :data:`CONTROL_KINDS`; ``detail`` is free text (e.g. the DDL statement);
    ``tx_id`` the transaction a ``transaction`` marker belongs to, and ``tx_end`` whether it
    ends the transaction with a commit (DTS ``COMMIT``: true; ``BEGIN``: false).
    """

    kind: str
    source_format: str
    source_database: Optional[str] = None
    source_schema: Optional[str] = None
    source_table: Optional[str] = None
    detail: Optional[str] = None
    tx_id: Optional[str] = None
    tx_end: Optional[bool] = None


ParseResult = Union[list[ChangeRecord], ControlRecord]


class RecordParser(Protocol):
    """The parser interface: one Kafka record in, canonical rows or a control record out.

    Implementations are constructed with the source's options from the pipeline YAML
    (``options`` mapping, plus ``primary_key`` when configured) and must be picklable
    (they run inside Spark tasks).
    """

    format_name: str

    def parse(self, record: KafkaRecord) -> ParseResult:
        """Parse one record. Raises :class:`ParseError` for bad input."""
        ...


@dataclass(frozen=True)
class SchemaEntry:
    """A table definition carried by a metadata message (Qlik Replicate ``MD``), kept by the pipeline.

    ``schema_id`` identifies the definition (Qlik's schemaId); ``table_version`` is the source
    table's version; ``definition`` is the metadata message's JSON text (lineage,
    tableStructure, dataSchema). Stored in ``bronze.schema_registry``, keyed by
    (source_format, schema_id).
    """

    source_format: str
    schema_id: str
    table_version: Optional[int]
    source_schema: Optional[str]
    source_table: Optional[str]
    definition: str


class SchemaAwareParser(abc.ABC):
    """Base of the formats whose data messages are decoded with metadata seen earlier (Qlik Replicate).

    A parser declares it by subclassing; the normalize stage checks ``isinstance``. It first calls
    :meth:`schema_entries` on every raw record of the window and stores the entries in
    ``bronze.schema_registry``; it then parses with ``parser.with_schemas(all stored entries of
    the format)``, so that data messages arriving in a later hour than their metadata decode, and a
    data message whose schema was never seen raises :class:`ParseError` (quarantined; decoded when
    its hour is rerun after the metadata lands).
    """

    format_name: str

    @abc.abstractmethod
    def parse(self, record: KafkaRecord) -> ParseResult:
        """Parse one record. Raises :class:`ParseError` for bad input."""

    @abc.abstractmethod
    def schema_entries(self, record: KafkaRecord) -> list[SchemaEntry]:
        """Table definitions in ``record`` (empty for data messages and bad input; never raises)."""

    @abc.abstractmethod
    def with_schemas(self, entries: Sequence[SchemaEntry]) -> RecordParser:
        """A parser that decodes data messages with ``entries``."""

    @staticmethod
    def may_hold_schema(value: Optional[bytes]) -> bool:
        """False only when :meth:`schema_entries` of a record whose Kafka value is ``value`` (bytes,
        None for a tombstone) is surely ``[]``: a test of a few bytes that lets the normalize stage
        skip decoding the window's data messages when it looks for metadata messages. This
        default: True (every record is decoded)."""
        return True


def parse_all(parser: RecordParser, records: Iterable[KafkaRecord]):
    """Parse records one by one, yielding ``(record, result_or_ParseError)``; never raises ParseError."""
    for rec in records:
        try:
            yield rec, parser.parse(rec)
        except ParseError as exc:
            yield rec, exc
