"""``aws-dms-json``: AWS Database Migration Service messages on an Apache Kafka target.

Implements "Using Apache Kafka as a target for AWS Database Migration Service" (AWS DMS User
Guide, https://docs.aws.amazon.com/dms/latest/userguide/CHAP_Target.Kafka.html), sections
*Apache Kafka endpoint settings* (``MessageFormat`` ``JSON``/``JSON_UNFORMATTED``,
``IncludeTransactionDetails``, ``IncludePartitionValue``, ``PartitionIncludeSchemaTable``,
``IncludeTableAlterOperations``, ``IncludeControlDetails``, ``IncludeNullAndEmpty``,
``NoHexPrefix``), *Using a before image to view original values of CDC rows* (the
``BeforeImageSettings`` task setting and the ``add-before-image-columns`` transformation rule),
*Limitations* (partition keys) and *Message format for Apache Kafka* (``RecordType``,
``Operation``, ``SchemaName``, ``TableName``, ``Timestamp``). Each Kafka value is one JSON
document ``{"data": {...}, "metadata": {...}}`` (``JSON`` indents it, ``JSON_UNFORMATTED`` writes
one line: both read alike), with ``control`` instead of ``data`` for control records and, with
``BeforeImageSettings``, a before image under the configured field name:

=================================  ==============================================================
field                              read as
=================================  ==============================================================
``metadata.record-type``           ``data`` → a row change; ``control`` → a control record (see
                                   below); anything else → ParseError
``metadata.operation``             data: ``load`` (full load) → snapshot, ``insert`` → insert,
                                   ``update`` → update, ``delete`` → delete (the document's older
                                   revision names ``create`` and ``read``: insert and snapshot).
                                   Control: ``create-table``, ``rename-table``, ``drop-table``,
                                   ``change-columns``, ``add-column``, ``drop-column``,
                                   ``rename-column``, ``column-type-change`` → a ``ddl`` control
                                   record; ``truncate-table`` (older revision ``TruncateTable``)
                                   → a truncate of the table; any other control operation (e.g. a
                                   task restart) → a ``metadata`` control record. Case-insensitive;
                                   ``TruncateTable``/``DropTable`` spellings read as
                                   ``truncate-table``/``drop-table``
``metadata.schema-name``,          ``source_schema`` (``""`` → None) and ``source_table``;
``metadata.table-name``            ``source_database`` is None (DMS names no database)
``metadata.transaction-id``        ``tx_id`` (``IncludeTransactionDetails``); an integer or text
``metadata.transaction-record-id`` ``tx_seq``: the record's offset in its transaction
``metadata.commit-timestamp``      ``source_ts_ms`` (ISO 8601, UTC); None when absent
``metadata.timestamp``             not used: when DMS built the message, not the change's time
``metadata.partition-key-type``,   not used (``primary-key``, ``schema-table``, ``task-id`` ...);
``partition-key-value``,           ``prev-transaction-id``/``prev-transaction-record-id`` link a
``prev-transaction-*``,            record to the one DMS sent before it, which no single record
``stream-position``                can turn into a position; ``stream-position`` is what the
                                   document calls the log position, in the source engine's own
                                   text (the example's is MySQL binlog coordinates, a PostgreSQL
                                   source gives LSNs) whose layout it does not describe
``data``                           the row: the after image of load/insert/update, the before
                                   image of a delete
``BI_<col>`` columns in ``data``   the ``add-before-image-columns`` rule: a column named
                                   prefix + ``col`` + suffix, where ``col`` is also a column of
                                   ``data``, is ``col``'s value before an update (taken out of the
                                   row for every operation)
``<before_image_field>``           the ``BeforeImageSettings`` object (``FieldName``): an update's
                                   before image (partial: ``ColumnFilter`` ``pk-only`` gives the
                                   key columns, ``non-lob``/``all`` more)
``control``                        the control details (``IncludeControlDetails``): kept as the
                                   control record's detail
=================================  ==============================================================

Any other top-level member is a ParseError (it may be a before image under a field name the
source does not configure: nothing is dropped unseen).

Values are JSON: numbers, text, booleans, null. The format carries no types (as schemaless
Debezium), so a column is ``string`` (a value's JSON text, :func:`cdclake.types.to_text`) unless
``column_types`` configures it. A configured ``binary`` column reads DMS's hexadecimal text with
the ``0x`` prefix (``NoHexPrefix`` false, DMS's default), or without it when the source sets
``no_hex_prefix: true``.

``IncludeNullAndEmpty``. By default (false) DMS leaves NULL and empty columns out of ``data``:
the message then cannot tell a NULL from an empty value, nor either from a column it did not
send. The parser never guesses: such a column is absent from the image, so silver keeps its
previous value on an update (an insert's absent columns are null). Set ``IncludeNullAndEmpty``
true on the endpoint for exact NULLs.

Order. The message holds no position this parser can read (``stream-position`` above):
``metadata.timestamp`` is the time DMS built the message (wall-clock time, never an order), and a
transaction id is no order across transactions (PostgreSQL xids follow transaction starts, not
commits; other engines' ids are not numbers in commit order). DMS reads the source's log and
sends a table's changes in the order it reads them, commit order, and Kafka keeps a partition's
records in the order they were written; so the order used is the Kafka order: position ``()`` for
every change, ties broken by (partition, offset). This is exact for every key whose changes all
go to one partition: ``partition-key-type`` ``schema-table`` (DMS's default without
``ParallelApply*``) or ``primary-key`` (the ``ParallelApply*`` default) with the key unchanged, or
a constant partition key. It cannot be guaranteed when one key's changes are spread over
partitions (an update that changes the primary key under ``primary-key`` partitioning, an
``attribute-name`` partition key that is not the primary key, a topic whose partition count
changed while DMS wrote to it), nor with ``ParallelApplyThreads``, for which the document does
not say that one key's changes keep their order across threads. A key whose changes come from two
partitions fails its silver table, naming the key (:mod:`cdclake.silver.order`), rather than be
applied in an arbitrary order. ``transaction-id`` and
``transaction-record-id`` are kept as ``tx_id``/``tx_seq`` (grouping and order inside one
transaction), never used to order transactions.

Primary key: configured (``primary_key``/``primary_keys``) → the Kafka key's columns when it is a
JSON object → ParseError. DMS's own Kafka key is the partition value (``schema.table``, or the
primary key's value without its column names), so DMS sources configure their keys. A delete's
before image needs the key's values (from ``data``, else a JSON Kafka key); an update's or
insert's row must hold them.

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``), and

- ``before_image_field``: the ``BeforeImageSettings`` ``FieldName`` (default none);
- ``before_image_prefix`` / ``before_image_suffix``: the ``add-before-image-columns`` rule's
  ``column-prefix`` (default ``BI_``) and ``column-suffix`` (default empty); both empty turns the
  reading of before-image columns off;
- ``no_hex_prefix``: the endpoint's ``NoHexPrefix`` (default false).
"""
from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, Optional

from cdclake.formats.base import ConfiguredTypes, Event, FormatParser
from cdclake.formats.fields import commit_time_ms, element, json_object, name_text, table_name
from cdclake.formats.json_values import load_json, read_key
from cdclake.formats.options import SourceOptions, key_delete_image, resolve_primary_key
from cdclake.formats.text import convert_image
from cdclake.names import check_names
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import to_text

FORMAT = "aws-dms-json"
#: ``metadata.operation`` of a data record → bronze op (``create``/``read``: the older revision's names).
DATA_OPS = {"load": "snapshot", "insert": "insert", "update": "update", "delete": "delete",
            "create": "insert", "read": "snapshot"}
#: Control operations that change a table's definition (``IncludeTableAlterOperations``).
DDL_OPS = frozenset({"create-table", "rename-table", "drop-table", "change-columns", "add-column", "drop-column",
                     "rename-column", "column-type-change"})
TRUNCATE_OPS = frozenset({"truncate-table"})
#: Top-level members of a message besides the configured before-image field.
MEMBERS = frozenset({"data", "metadata", "control"})
_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_HEX_RE = re.compile(r"(?:[0-9a-fA-F]{2})*")
_DELETE_HINT = "the deleted row does not carry them; check sources[].primary_key or sources[].primary_keys"


def operation_name(value: Any, field_name: str = "metadata.operation") -> str:
    """``metadata.operation`` in one spelling: lower case, ``CamelCase`` words joined by ``-``
    (``TruncateTable`` → ``truncate-table``). Raises :class:`ParseError` naming ``field_name`` for
    a missing or empty operation."""
    if not isinstance(value, str) or not value.strip():
        raise ParseError(FORMAT, "missing operation", field_name)
    return _CAMEL_RE.sub("-", value.strip()).lower()


def commit_ms(meta: Mapping[str, Any]) -> Optional[int]:
    """``metadata.commit-timestamp`` (ISO 8601, UTC) in ms since the epoch; None when absent or
    null. Raises :class:`ParseError` naming ``metadata.commit-timestamp`` for other text."""
    return commit_time_ms(FORMAT, meta, "commit-timestamp", "metadata.commit-timestamp")


def transaction_id(meta: Mapping[str, Any]) -> Optional[str]:
    """``metadata.transaction-id`` as text (DMS writes an integer); None when absent or null.
    Raises :class:`ParseError` naming ``metadata.transaction-id`` for another JSON type."""
    value = meta.get("transaction-id")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ParseError(FORMAT, f"transaction id {value!r} is not an integer or text", "metadata.transaction-id")
    return str(value)


class _TablePlan(ConfiguredTypes):
    """The configured ``column_types`` of a table (other columns: text) with DMS's binary text:
    a ``binary`` column reads hexadecimal digits after ``0x`` (without it when ``no_hex_prefix``)."""

    def __init__(self, options: SourceOptions, schema: Optional[str], table: str, no_hex_prefix: bool):
        super().__init__(options, None, schema, table)
        self.no_hex_prefix = no_hex_prefix

    def convert(self, col: str, value: Any) -> Optional[str]:
        """Canonical text of ``value`` in column ``col`` (``ValueError`` when it does not fit)."""
        if type(value) is str and self.types.get(col) == "binary":
            digits = value if self.no_hex_prefix else (value[2:] if value[:2] in ("0x", "0X") else None)
            if digits is None or not _HEX_RE.fullmatch(digits):
                want = "hexadecimal digits" if self.no_hex_prefix else "0x and hexadecimal digits"
                raise ValueError(f"not a valid binary value ({want} expected)")
            return to_text(bytes.fromhex(digits))
        return super().convert(col, value)


class AwsDmsJsonParser(FormatParser):
    """Parser of ``aws-dms-json`` records: ``AwsDmsJsonParser(options).parse(KafkaRecord)``.

    Returns one :class:`ChangeRecord` in a list (a truncate for ``truncate-table``), or a
    :class:`ControlRecord`: ``tombstone`` for an empty value, ``ddl`` for table and column
    changes, ``metadata`` for other control records. Raises :class:`ParseError` for unreadable
    JSON (``value``), a top-level member it does not know (the member), a missing ``metadata``
    (``metadata``), a missing or unknown record type or operation (``metadata.record-type``,
    ``metadata.operation``), a schema name that is not text (``metadata.schema-name``), a missing
    table name on a row change (``metadata.table-name``), an unreadable ``transaction-id``,
    ``transaction-record-id`` or ``commit-timestamp``, a missing or non-object ``data`` or before
    image (``data``, the field), a value that does not fit a configured type (``data.<col>``), no
    resolvable primary key (``primary_key``), or a row without a value for a key column (``data``).
    ``ValueError`` for malformed options.
    """

    format_name = FORMAT

    def __init__(self, options: Optional[Mapping[str, Any]] = None):
        super().__init__(options)
        opts = dict(options or {})
        field = opts.get("before_image_field")
        if field is not None and (not isinstance(field, str) or not field or field in MEMBERS):
            raise ValueError(f"sources[].options.before_image_field must be a field name other than data, metadata "
                             f"and control, got {field!r}")
        prefix, suffix = opts.get("before_image_prefix", "BI_"), opts.get("before_image_suffix", "")
        prefix, suffix = prefix or "", suffix or ""
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise ValueError("sources[].options.before_image_prefix and sources[].options.before_image_suffix "
                             "must be text")
        no_hex = opts.get("no_hex_prefix", False)
        if not isinstance(no_hex, bool):
            raise ValueError(f"sources[].options.no_hex_prefix must be true or false, got {no_hex!r}")
        self.before_image_field: Optional[str] = field
        self.before_image_affixes: Optional[tuple[str, str]] = (prefix, suffix) if prefix or suffix else None
        self.no_hex_prefix = no_hex

    # -- the fast path --------------------------------------------------------------------------

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for data
        records (load, insert, update, delete) and truncates: each value is decoded with msgspec
        (:data:`cdclake.formats.columnar.JSON`, equal to ``json.loads`` on every document both accept)
        and read by the very steps :meth:`parse` runs (the default
        :meth:`~cdclake.formats.base.FormatParser.fast_group`), the table plans (configured types, one
        converter per column) kept per table. None (:meth:`parse` reads that record) for an empty value,
        a document msgspec refuses or that is not an object, a control record, any record a step
        refuses, and a change :meth:`fast_check` refuses (normalize quarantines those). One plan key
        (None); member ``(index, Event)``."""
        return self.json_event_members(records, self._event)

    def fast_check(self, change: ChangeRecord) -> None:
        """Raise for a change whose key has a null column or a name
        :func:`cdclake.names.check_names` refuses."""
        if _null_key(change):
            raise ValueError("key column null")
        check_names(change)

    # -- the steps ------------------------------------------------------------------------------

    def decode(self, record: KafkaRecord) -> Event:
        """The message, a JSON object with a ``metadata`` object (checked first) and no member
        the format does not know."""
        return self._event(record, load_json(FORMAT, record.value))

    def _event(self, record: KafkaRecord, msg: dict) -> Event:
        meta = json_object(FORMAT, msg.get("metadata"), "metadata", missing="missing metadata block")
        for member in msg:
            if member not in MEMBERS and member != self.before_image_field:
                hint = "" if self.before_image_field else (" (a BeforeImageSettings FieldName: set "
                                                           "sources[].options.before_image_field)")
                raise ParseError(FORMAT, f"unknown member {member!r}{hint}", str(member))
        return Event(record, msg, source=meta)

    def control(self, event: Event) -> Optional[ParseResult]:
        """``record-type`` and ``operation``; control records end here (a truncate goes on to
        :meth:`changes` without row images)."""
        meta = event.source
        kind = meta.get("record-type")
        if not isinstance(kind, str) or not kind.strip():
            raise ParseError(FORMAT, "missing record type", "metadata.record-type")
        kind = kind.strip().lower()
        if kind not in ("data", "control"):
            raise ParseError(FORMAT, f"unknown record type {meta.get('record-type')!r} (expected data or control)",
                             "metadata.record-type")
        op = operation_name(meta.get("operation"))
        event.schema_name = name_text(FORMAT, meta.get("schema-name"), "metadata.schema-name") or None
        if kind == "data":
            if op not in DATA_OPS:
                raise ParseError(FORMAT, f"unknown operation {meta.get('operation')!r} of a data record (expected "
                                 "load, insert, update or delete)", "metadata.operation")
            event.op = DATA_OPS[op]
            return None
        if op in TRUNCATE_OPS:
            event.op = "truncate"
            return None
        table = name_text(FORMAT, meta.get("table-name"), "metadata.table-name") or None
        detail = op if event.message.get("control") is None else f"{op} {to_text(event.message.get('control'))}"
        return ControlRecord("ddl" if op in DDL_OPS else "metadata", FORMAT, None, event.schema_name, table,
                             detail=detail)

    def table(self, event: Event) -> None:
        """``metadata.table-name`` (required of a row change)."""
        event.table = table_name(FORMAT, event.source.get("table-name"), "metadata.table-name")

    def column_types(self, event: Event) -> None:
        """The configured ``column_types`` (the format carries none), kept per table."""
        plan = self.kept((event.schema_name, event.table), _TablePlan, self.options, event.schema_name, event.table,
                         self.no_hex_prefix)
        event.types, event.convert = dict(plan.types), plan.convert

    def images(self, event: Event) -> None:
        """``data`` without its before-image columns as the row; an update's before image from
        those columns and the ``before_image_field`` object (the field's values win)."""
        msg, op = event.message, event.op
        if op == "truncate":
            event.before = event.after = None
            return
        data = msg.get("data")
        if data is None:
            raise ParseError(FORMAT, f"{op} carries no row", "data")
        row = json_object(FORMAT, data, "data")
        before: dict = {}
        affixes = self.before_image_affixes
        if affixes:
            prefix, suffix = affixes
            cut = len(suffix)
            marked = {}
            for col in row:
                if (type(col) is str and col.startswith(prefix) and col.endswith(suffix)
                        and len(col) > len(prefix) + cut):
                    name = col[len(prefix):len(col) - cut] if cut else col[len(prefix):]
                    if name in row:
                        marked[col] = name
            if marked:
                row = {c: v for c, v in row.items() if c not in marked}
                before = {marked[c]: data[c] for c in marked}
        field = self.before_image_field
        if field is not None and msg.get(field) is not None:
            before.update(json_object(FORMAT, msg.get(field), field))
        image = convert_image(FORMAT, row, event.convert, "data")
        if op == "update":
            event.after = image
            event.before = convert_image(FORMAT, before, event.convert, field or "data") if before else None
        elif op == "delete":
            event.before, event.after = image, None
        else:
            event.before, event.after = None, image

    def primary_key(self, event: Event) -> None:
        """Configured, else the Kafka key's columns (a JSON object); a delete's image completed
        from the Kafka key, an insert's, load's or update's row must hold the key."""
        op = event.op
        kafka_key = read_key(event.record.key)
        event.primary_key = pk = resolve_primary_key(
            FORMAT, self.options.key_override(None, event.schema_name, event.table), None,
            list(kafka_key[0]) if kafka_key else None, required=op != "truncate")
        if op == "truncate":
            return
        if op == "delete":
            key_text = convert_image(FORMAT, kafka_key[0], event.convert, "key") if kafka_key else None
            event.before = key_delete_image(FORMAT, pk, event.before, key_text, "data", _DELETE_HINT)
            return
        missing = [c for c in pk if c not in event.after]  # type: ignore[operator]
        if missing:
            raise ParseError(FORMAT, f"{op} carries no value for key column(s) {', '.join(missing)}", "data")

    def position(self, event: Event) -> None:
        """No position (the Kafka order: see the module docstring); ``transaction-id``,
        ``transaction-record-id`` and ``commit-timestamp``."""
        meta = event.source
        event.position = ()
        event.tx_id = transaction_id(meta)
        event.tx_seq = element(FORMAT, meta.get("transaction-record-id"), "metadata.transaction-record-id",
                               null=None)
        event.ts_ms = commit_ms(meta)


def _null_key(change: ChangeRecord) -> bool:
    """Whether the image naming a change's row (after; before for a delete) has a null key column."""
    image = change.before if change.op == "delete" else change.after
    return image is not None and any(image.get(k) is None for k in change.primary_key)


