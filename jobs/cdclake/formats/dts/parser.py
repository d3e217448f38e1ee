"""``dts-avro``: Alibaba Cloud DTS change records in the DTS Avro format.

Implements "Alibaba Cloud DTS: Data formats of a Kafka cluster" (section "DTS Avro": the default
format, parsed "based on the schema definition of DTS Avro", DDL statements as strings) with the
schema it points to, ``com.alibaba.dts.formats.avro.Record`` and its 13 named types from Alibaba
Cloud's ``aliyun/aliyun-dts-subscribe-demo`` (``python/dts_record_avsc/``), embedded in
:mod:`cdclake.formats.dts.schema` as :data:`AVSC`. As in that demo, a Kafka value is one Avro
datum written with the schema, with no header (no Confluent magic byte or schema id); it is read
with ``fastavro.schemaless_reader``.
Field meanings follow the schema's docs and Alibaba's subscription SDK
(``aliyun/aliyun-dts-subscribe-sdk-java``), as noted per field below.

Record fields used:

- ``operation``: INSERT, UPDATE, DELETE are row changes (one :class:`ChangeRecord` each, ops
  ``insert``/``update``/``delete``). Everything else is a :class:`ControlRecord` (see
  :data:`CONTROL_OPERATIONS`): DDL (and COMMAND, which the SDK reads as DDL) → ``ddl`` with the
  statement (the string branch of ``afterImages``) as detail, except ``TRUNCATE [TABLE] [db.]t``,
  a ``truncate`` change of that table (the rows go); BEGIN, COMMIT, ROLLBACK, ABORT →
  ``transaction``; HEARTBEAT, CHECKPOINT, NOOP (progress markers) → ``heartbeat``; FILL, FINISH,
  CONTROL, RDB, INIT → ``metadata``. A Kafka tombstone (no value) is a ``tombstone``.
- ``objectName``: ``db``, ``db.table`` or ``db.schema.table``, dots inside a name escaped as
  ``\\u002E`` (:func:`split_object_name`). Physical names are kept (not the ``l_db_name`` /
  ``l_tb_name`` logical names of sharded sources, whose shards have unrelated positions).
- ``fields`` (name, ``dataTypeNumber``: MySQL's column type code for MySQL sources) and
  ``beforeImages``/``afterImages``: one value per field, in field order
  (:func:`cdclake.formats.dts.values.read_value`).
- ``sourcePosition`` and ``id``: position ``(binlog file index, offset, id)`` for MySQL's
  ``offset@fileindex`` (``"72469@78"``: offset 72469 in ``mysql-bin.000078``; rows of one binlog
  event share it, ``id`` — "unique id of this record in the whole stream", increasing — orders
  them); ``(id,)`` when ``sourcePosition`` has another form (:func:`parse_position`).
- ``sourceTimestamp`` (seconds) → ``source_ts_ms`` (× 1000); ``sourceTxid`` → ``tx_id`` (empty
  and ``"0"``, what MySQL sources send, mean unknown); ``tx_seq`` is not carried.
- ``tags``: ``pk_uk_info`` (``{"PRIMARY": [...], "<unique index>": [...]}``) gives the key.

Primary key: configured ``primary_keys``/``primary_key``, else ``PRIMARY`` of ``pk_uk_info``, else
its first unique index (a table without a primary key whose unique key identifies rows), else a
Kafka key holding a JSON object of key columns, else :class:`ParseError`.

Column types come from the value branch (DTS carries no declared column type beyond
``dataTypeNumber``): see :func:`cdclake.formats.dts.values.read_value`. Configured
``column_types`` win over them (DTS gives a decimal's precision per value, so ``column_types`` can
pin the declared ``decimal(p,s)``).

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``).
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional

from cdclake.formats.base import Event, FormatParser, learnt_dict
from cdclake.formats.dts.schema import FORMAT, decode
from cdclake.formats.dts.values import SourceInfo, read_value, value_text
from cdclake.formats.json_values import read_key
from cdclake.formats.options import key_delete_image, resolve_primary_key
from cdclake.formats.text import ABSENT, coerce_text
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import widen
from cdclake.formats.dts.plan import CONTROL_OPERATIONS, ROW_OPERATIONS, _DELETE_HINT, _NAME_PART_RE, _TRUNCATE_RE, _txid, _unquote, parse_position, primary_key_info, split_object_name
from cdclake.formats.dts.fast import fast_group, fast_members

class DtsAvroParser(FormatParser):
    """Parser of ``dts-avro`` records: ``DtsAvroParser(options).parse(KafkaRecord)``.

    Returns a one-element list of :class:`ChangeRecord` for INSERT/UPDATE/DELETE and for a DDL
    record holding ``TRUNCATE [TABLE] [db.]t``, or a :class:`ControlRecord` (see the module
    docstring). Raises :class:`ParseError` naming
    ``dts-avro`` and the field for: bytes that are not one DTS Avro record (``value``), a row
    change without a table (``objectName``), without ``fields`` (``fields``), with an image that
    is missing, not a list or not as long as ``fields`` (``beforeImages``/``afterImages``), a
    value that cannot be read (``afterImages.<column>``), a negative ``id`` or
    ``sourceTimestamp``, a malformed ``pk_uk_info`` (``tags.pk_uk_info``), no resolvable key
    (``primary_key``), or a delete whose before image lacks a key value.
    """

    format_name = FORMAT
    LEARNT = {"_fast_keys": learnt_dict, "_fast_carried": learnt_dict, "_fast_values": learnt_dict}

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for INSERT,
        UPDATE and DELETE records (their ``operation`` peeked at before the value is read) that read as
        one whole ``Record`` of the full schema, with a ``db.table`` or ``db.schema.table``
        ``objectName``, a ``fields`` list of distinct names and images as long as it. The records of one
        table plan (``objectName``, ``fields``, source type) are read column by column with
        :func:`~cdclake.formats.dts.values.read_value` (equal values of a column read once) and rendered
        by the functions :meth:`parse` renders with; the names, key, delete image, position and
        transaction go through the functions :meth:`parse` calls. Control records, DDL (TRUNCATE
        included), records without ``bornTimestamp`` and anything refused (a value, a name, a key, a
        position) give None: :meth:`parse` reads that record. Plan key ``(objectName, fields' names and
        type numbers, source type ...)``; member ``(index, record, op, SourceInfo)``."""
        return fast_members(self, records)

    def fast_group(self, records: list[KafkaRecord], key: Any, members: list[tuple], out: list) -> None:
        """The changes of one plan's members (see :meth:`fast_members`) into ``out``."""
        fast_group(self, records, key, members, out)

    def decode(self, record: KafkaRecord) -> Event:
        """The DTS Avro ``Record`` (:func:`cdclake.formats.dts.schema.decode`)."""
        return Event(record, decode(record.value))

    def control(self, event: Event) -> Optional[ParseResult]:
        """The ``objectName``; then ``TRUNCATE`` statements (a ``truncate`` change), control
        operations; else the row operation."""
        msg = event.message
        operation = msg["operation"]
        try:
            database, schema, table = split_object_name(msg.get("objectName"))
        except ValueError as exc:
            raise ParseError(FORMAT, str(exc), "objectName") from None
        if operation == "DDL":
            truncated = self._truncate(msg, database, schema)
            if truncated:
                return truncated
        if operation in CONTROL_OPERATIONS:
            return self._control(msg, operation, database, schema, table)
        if operation not in ROW_OPERATIONS:
            raise ParseError(FORMAT, f"unknown operation {operation!r}", "operation")
        event.op = ROW_OPERATIONS[operation]
        event.database, event.schema_name, event.table = database, schema, table
        return None

    def table(self, event: Event) -> None:
        """A row change needs a table in its ``objectName``."""
        if event.table is None:
            raise ParseError(FORMAT, f"row change without a table name ({event.message.get('objectName')!r})",
                             "objectName")

    def column_types(self, event: Event) -> None:
        """The images' values read from ``fields`` (their branches type the columns: the wider of
        before and after), then the configured ``column_types``, which win."""
        msg = event.message
        fields = msg.get("fields")
        if not isinstance(fields, list) or not fields:
            raise ParseError(FORMAT, f"row change without a field list (got {type(fields).__name__})", "fields")
        names = [f["name"] for f in fields]
        numbers = [f["dataTypeNumber"] for f in fields]
        source = SourceInfo(msg["source"]["sourceType"], msg.get("sourcePosition") or "")
        event.plan = configured = self.options.column_types(event.database, event.schema_name, event.table)
        types: dict[str, str] = {}
        event.before = self._image(msg, "beforeImages", names, numbers, source, types)
        event.after = self._image(msg, "afterImages", names, numbers, source, types)
        types.update(configured)
        event.types = types

    def images(self, event: Event) -> None:
        """The values' canonical text; an insert or update needs ``afterImages``, a delete
        ``beforeImages``."""
        op, configured = event.op, event.plan
        if op == "insert" and event.after is None:
            raise ParseError(FORMAT, "INSERT without an after image", "afterImages")
        if op == "delete" and event.before is None:
            raise ParseError(FORMAT, "DELETE without a before image", "beforeImages")
        if op == "update" and event.after is None:
            raise ParseError(FORMAT, "UPDATE without an after image", "afterImages")
        before = self._texts(event.before, event.types, configured, "beforeImages")
        after = self._texts(event.after, event.types, configured, "afterImages")
        event.before = before if op != "insert" else None
        event.after = after if op != "delete" else None

    def primary_key(self, event: Event) -> None:
        """Configured, else ``tags.pk_uk_info``, else the Kafka key's columns."""
        key = read_key(event.record.key)
        override = self.options.key_override(event.database, event.schema_name, event.table)
        carried = None
        if not override:
            try:
                carried = primary_key_info(event.message.get("tags") or {})
            except ValueError as exc:
                raise ParseError(FORMAT, str(exc), "tags.pk_uk_info") from None
        event.primary_key = resolve_primary_key(FORMAT, override, carried, list(key[0]) if key else None)
        if event.op == "delete":
            key_text = self._key_text(key[0], event.types) if key else None
            event.before = key_delete_image(FORMAT, event.primary_key, event.before, key_text, "beforeImages",
                                            _DELETE_HINT)

    def position(self, event: Event) -> None:
        """:func:`parse_position`, ``sourceTimestamp`` (seconds) and ``sourceTxid``."""
        msg = event.message
        event.position = self._position(msg)
        seconds = msg["sourceTimestamp"]
        if seconds < 0:
            raise ParseError(FORMAT, f"negative sourceTimestamp {seconds}", "sourceTimestamp")
        event.ts_ms = seconds * 1000
        event.tx_id = _txid(msg)

    @staticmethod
    def _position(msg: dict) -> tuple[int, ...]:
        try:
            return parse_position(msg.get("sourcePosition"), msg["id"])
        except ValueError as exc:
            raise ParseError(FORMAT, str(exc), "id") from None

    @staticmethod
    def _key_text(key: Mapping[str, Any], types: Mapping[str, str]) -> Optional[dict[str, Optional[str]]]:
        """Canonical text of a JSON Kafka key's columns; None when a value does not fit its type."""
        try:
            return {c: coerce_text(v, types.get(c, "string")) for c, v in key.items()}
        except ValueError:
            return None

    def _truncate(self, msg: dict, database: Optional[str], schema: Optional[str]) -> Optional[list[ChangeRecord]]:
        """A ``truncate`` change for a DDL record whose statement is ``TRUNCATE [TABLE] [db.]name``
        (the table named by the statement, the database by it or by ``objectName``); else None."""
        statement = msg.get("afterImages")
        m = _TRUNCATE_RE.match(statement) if isinstance(statement, str) else None
        if not m:
            return None
        names = [_unquote(part) for part in _NAME_PART_RE.findall(m.group("name"))]
        if len(names) == 2:
            database, schema = names[0], None
        table = names[-1]
        position = self._position(msg)
        key = resolve_primary_key(FORMAT, self.options.key_override(database, schema, table), None, None,
                                  required=False)
        return [ChangeRecord(
            source_format=FORMAT, source_database=database, source_schema=schema, source_table=table,
            op="truncate", before=None, after=None, primary_key=key, source_position=position,
            source_ts_ms=max(msg["sourceTimestamp"], 0) * 1000, tx_id=_txid(msg))]

    @staticmethod
    def _control(msg: dict, operation: str, database, schema, table) -> ControlRecord:
        kind = CONTROL_OPERATIONS[operation]
        if kind == "ddl":
            detail = next((img for img in (msg.get("afterImages"), msg.get("beforeImages")) if isinstance(img, str)),
                          None)
            return ControlRecord(kind, FORMAT, database, schema, table, detail=detail)
        txid = (msg.get("sourceTxid") or "").strip()
        detail = operation if txid in ("", "0") else f"{operation} {txid}"
        if kind != "transaction" or txid in ("", "0"):
            return ControlRecord(kind, FORMAT, database, schema, table, detail=detail)
        return ControlRecord(kind, FORMAT, database, schema, table, detail=detail, tx_id=txid,
                             tx_end=operation == "COMMIT")

    @staticmethod
    def _image(msg: dict, image_field: str, names: list, numbers: list, source: SourceInfo,
               types: dict) -> Optional[dict[str, Any]]:
        """Python values of one image (None when the record has none); records value types in
        ``types`` (the wider of before and after where they differ)."""
        image = msg.get(image_field)
        if image is None:
            return None
        if not isinstance(image, list):
            raise ParseError(FORMAT, f"image is a {type(image).__name__}, not a list of values", image_field)
        if len(image) != len(names):
            raise ParseError(FORMAT, f"image has {len(image)} values for {len(names)} fields", image_field)
        out: dict[str, Any] = {}
        for name, number, item in zip(names, numbers, image):
            try:
                value, ctype = read_value(item, number, source)
            except (ValueError, TypeError, ArithmeticError, OverflowError) as exc:
                raise ParseError(FORMAT, f"cannot read {item!r}: {exc}", f"{image_field}.{name}") from None
            if value is ABSENT:
                continue
            out[name] = value
            old = types.get(name)
            if ctype and old != ctype:
                types[name] = ctype if old is None else (widen(old, ctype) or ctype)
        return out

    @staticmethod
    def _texts(values: Optional[dict[str, Any]], types: Mapping[str, str], configured: Mapping[str, str],
               image_field: str) -> Optional[dict[str, Optional[str]]]:
        if values is None:
            return None
        out: dict[str, Optional[str]] = {}
        for name, value in values.items():
            try:
                if name in configured:
                    out[name] = None if value is None else coerce_text(value, configured[name])
                else:
                    out[name] = value_text(value, types.get(name))
            except (ValueError, TypeError, ArithmeticError) as exc:
                raise ParseError(FORMAT, f"cannot read {value!r}: {exc}", f"{image_field}.{name}") from None
        return out


# ---------------------------------------------------------------------------------------------
# the columnar fast path
