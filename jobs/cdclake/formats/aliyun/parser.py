"""``aliyun-json``: the JSON change messages Alibaba Cloud DataWorks writes to Kafka (Apache Paimon's ``aliyun-json``).

Implements "DataWorks: Appendix: Message formats" (Alibaba Cloud documentation,
https://www.alibabacloud.com/help/en/dataworks/user-guide/message-formats, sections *Format of a
Kafka message*, *Field types* and *Fields*): the messages a DataWorks node that synchronizes a
whole database to Kafka writes, one row change per message. Apache Paimon reads the same messages
as its ``aliyun-json`` Kafka format (``AliyunRecordParser``); its test messages
(``paimon/kafka/aliyun/``) are this module's conformance vectors.

==============================  ====================================================================
field                           read as
==============================  ====================================================================
``payload.op``                  ``INSERT`` → insert (``after``); ``UPDATE_AFTER`` → update (``after``,
                                and ``before`` when the message carries it: the update "in one");
                                ``UPDATE_BEFORE`` (the document spells it ``UPDATE_BEFOR``: both are
                                read) → delete of its ``before`` row (see below); ``DELETE`` → delete
                                (``before``); ``TRUNCATE`` → truncate; ``MHEARTBEAT`` → a
                                ``heartbeat`` control record; ``TRANSACTION_BEGIN``,
                                ``TRANSACTION_END``, ``GTID``, ``XACOMMIT``, ``XAROLLBACK`` →
                                ``metadata``; ``CREATE``, ``ALTER``, ``ERASE``, ``QUERY``,
                                ``RENAME``, ``CINDEX``, ``DINDEX`` or a non-null ``payload.ddl`` →
                                ``ddl`` (detail: the ``ddl`` text). Case-sensitive, as the document
                                says; anything else is a :class:`ParseError`.
``payload.before.dataColumn``,  the images: column name → value
``payload.after.dataColumn``
``schema.dataColumn``           ``[{"name", "type"}]``: the column types, ``LONG`` → bigint,
                                ``DOUBLE`` → double, ``BOOLEAN`` → boolean, ``STRING`` → string,
                                ``BYTES`` (Base64 text) → binary, ``DATE`` (13-digit epoch
                                milliseconds) → timestamp_ntz (a wall-clock time, as Paimon's
                                ``TIMESTAMP(3)``)
``schema.primaryKey``           the key column names
``schema.source``               ``dbName`` → ``source_database``, ``schemaName`` (when sent) →
                                ``source_schema``, ``tableName`` → ``source_table``
``payload.sequenceId``          decimal text, "used to order the data when full and incremental
                                data are merged" → position ``(sequenceId,)``
``payload.timestamp.eventTime`` the change's time in the source (ms) → ``source_ts_ms`` (``-1``:
                                none)
==============================  ====================================================================

Order. The position is ``(sequenceId,)``. A row of the full (initial) load is sent as an
``INSERT`` with ``sequenceId`` ``"-1"`` and ``eventTime``/``checkpointTime`` ``-1`` (Paimon's
``event-insert.txt``): it has no log position, and gets ``(0,)``, before every incremental change,
as the sequence is meant to merge full and incremental data (a load row never overrides a later
change of its key; rows of one load have distinct keys, so ties among them, broken by Kafka
partition and offset, do not matter). ``-1`` on any other operation cannot be ordered and is a
:class:`ParseError`.

Updates. DataWorks sends an update either "in one" (``UPDATE_AFTER`` carrying ``before`` and
``after``) or as two messages, ``UPDATE_BEFORE`` (the old row) then ``UPDATE_AFTER`` (the new
row). The ``UPDATE_BEFORE`` half is read, as Paimon reads it (a retraction of the old row), as a
delete of the old row at its own sequence; the ``UPDATE_AFTER`` half, at the next sequence, then
upserts the new row. So an update that changes the key removes the old key's row, which an
``UPDATE_AFTER`` without ``before`` could not say; an update that keeps the key ends as the new
row. (Silver's history therefore records such a split update as a delete and an upsert.)

Types: the six types of the document are coarse (a DECIMAL column comes as ``DOUBLE`` with text
values such as ``"1.100000"``, a DATE column as ``DATE``): configured ``column_types`` win over
them. A ``DATE`` value configured as ``date`` is the UTC date of its milliseconds. Columns that
``schema.dataColumn`` does not name are typed by ``column_types``, else read as text.

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``). Primary key: configured → ``schema.primaryKey`` → the Kafka
key's columns (a JSON object).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Optional

from cdclake.formats.base import ColumnPlan, Event, FormatParser
from cdclake.formats.columnar import JSON, NO_MAP, convert_images, names_pass, row_maker
from cdclake.formats.fields import element, integer, json_object, name_text, operation_type, table_name
from cdclake.formats.json_values import EnvelopeReader, load_json, read_key
from cdclake.formats.options import SourceOptions, key_delete_image, resolve_primary_key
from cdclake.formats.text import convert_image, epoch_timestamp, text_converter
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import to_text

FORMAT = "aliyun-json"
#: The fast path's change row of a record.
_ROW = row_maker("source_database", "source_schema", "source_table", "op", "before", "after", "primary_key",
                 "column_types", "source_position", "source_ts_ms", source_format=FORMAT)
#: ``payload.op`` of a row change → (bronze op, the image it reads: ``before``/``after``/both).
ROW_OPS = {"INSERT": "insert", "UPDATE_AFTER": "update", "UPDATE_BEFORE": "delete", "UPDATE_BEFOR": "delete",
           "DELETE": "delete", "TRUNCATE": "truncate"}
#: ``payload.op`` of a message that is not a row change → control kind.
CONTROL_OPS = {"MHEARTBEAT": "heartbeat", "TRANSACTION_BEGIN": "metadata", "TRANSACTION_END": "metadata",
               "GTID": "metadata", "XACOMMIT": "metadata", "XAROLLBACK": "metadata",
               **dict.fromkeys(("CREATE", "ALTER", "ERASE", "QUERY", "RENAME", "CINDEX", "DINDEX"), "ddl")}
#: ``schema.dataColumn[].type`` → canonical type.
TYPES = {"LONG": "bigint", "DOUBLE": "double", "BOOLEAN": "boolean", "STRING": "string", "BYTES": "binary",
         "DATE": "timestamp_ntz"}
#: The ``sequenceId`` of a full-load row, and the position it gets: before every incremental change.
LOAD_SEQUENCE = -1
LOAD_POSITION = (0,)
_DELETE_HINT = "the deleted row does not carry them; send Kafka keys holding the key columns"


def _ms_date(value: Any) -> Optional[str]:
    """A ``DATE`` value (epoch ms) in a column configured as ``date``: the UTC date; other values
    as ``date`` text (``ValueError`` when they do not fit)."""
    if type(value) is int:
        return to_text(epoch_timestamp(value, 1000).date())
    return text_converter("date")(value)


def aliyun_converter(vendor_type: Optional[str], ctype: Optional[str]) -> Callable[[Any], Optional[str]]:
    """The converter of one column (JSON value → canonical text of ``ctype``; ``ValueError`` when
    it does not fit): :func:`cdclake.formats.text.text_converter` of ``ctype``, but a ``DATE``
    column configured as ``date`` reads milliseconds; no type: :func:`cdclake.types.to_text`."""
    if ctype is None:
        return to_text
    if vendor_type == "DATE" and ctype == "date":
        return _ms_date
    return text_converter(ctype)


class _TablePlan(ColumnPlan):
    """What :class:`AliyunJsonParser` derives from one table's ``schema.dataColumn`` and options.

    ``types`` (column → canonical type: configured ``column_types`` win over ``schema.dataColumn``),
    ``key_override`` (the configured key or None), one converter per column, and :meth:`convert`.
    Raises :class:`ParseError` (``schema.dataColumn[i]``) for an entry that is not ``{"name": text,
    "type": one of TYPES}``.
    """

    def __init__(self, options: SourceOptions, columns: tuple, database: Optional[str], schema: Optional[str],
                 table: str):
        vendor: dict[str, str] = {}
        for i, entry in enumerate(columns):
            if len(entry) != 2 or not isinstance(entry[0], str) or not entry[0]:
                raise ParseError(FORMAT, "column entry without a name", f"schema.dataColumn[{i}]")
            name, vtype = entry
            if not isinstance(vtype, str) or vtype not in TYPES:
                raise ParseError(FORMAT, f"unknown column type {vtype!r} (expected one of {', '.join(TYPES)})",
                                 f"schema.dataColumn[{i}].type")
            vendor[name] = vtype
        configured = options.column_types(database, schema, table)
        self.vendor = vendor
        #: column → its index in ``schema.dataColumn`` (the images' column order)
        self.order = {c: i for i, c in enumerate(vendor)}
        self.types = {c: configured.get(c, TYPES[t]) for c, t in vendor.items()}
        for col, ctype in configured.items():
            self.types.setdefault(col, ctype)
        self.key_override = options.key_override(database, schema, table)
        super().__init__()

    def make_converter(self, col: str) -> Callable[[Any], Optional[str]]:
        """The converter of column ``col`` (:func:`aliyun_converter`)."""
        return aliyun_converter(self.vendor.get(col), self.types.get(col))


def _columns_key(schema: Mapping) -> tuple:
    """``schema.dataColumn`` as a hashable tuple of ``(name, type)`` pairs (entries that are not
    objects give ``(entry,)``, refused by :class:`_TablePlan`). Raises :class:`ParseError` when
    it is not a list."""
    cols = schema.get("dataColumn")
    if not isinstance(cols, list):
        raise ParseError(FORMAT, f"expected a list of columns, got {type(cols).__name__}", "schema.dataColumn")
    return tuple((c.get("name"), c.get("type")) if isinstance(c, dict) else (c,) for c in cols)


def _names(schema: Mapping) -> tuple[Optional[str], Optional[str], str]:
    """``(dbName, schemaName, tableName)`` of ``schema.source``; raises :class:`ParseError`."""
    source = json_object(FORMAT, schema.get("source"), "schema.source", missing="missing table name")
    return (name_text(FORMAT, source.get("dbName"), "schema.source.dbName"),
            name_text(FORMAT, source.get("schemaName"), "schema.source.schemaName"),
            table_name(FORMAT, source.get("tableName"), "schema.source.tableName"))


def _position(payload: Mapping, op: str, kind: str) -> tuple[tuple, Optional[int]]:
    """``((sequenceId,), eventTime)`` of a row change (see the module docstring); raises
    :class:`ParseError` naming ``payload.sequenceId`` or ``payload.timestamp.eventTime``."""
    seq = payload.get("sequenceId")
    if op == "insert" and (seq == "-1" or seq == LOAD_SEQUENCE):
        position = LOAD_POSITION
    elif seq is None or seq == "":
        raise ParseError(FORMAT, f"{kind} change without a sequenceId to order it by", "payload.sequenceId")
    else:
        position = (element(FORMAT, seq, "payload.sequenceId", what="sequenceId"),)
    stamp = payload.get("timestamp")
    event_time = None
    if stamp is not None:
        stamp = json_object(FORMAT, stamp, "payload.timestamp")
        event_time = integer(FORMAT, stamp.get("eventTime"), "payload.timestamp.eventTime", default=None)
        if event_time is not None and event_time < 0:
            event_time = None
    return position, event_time


def _primary_key(schema: Mapping, plan: _TablePlan, key: Any, required: bool) -> list[str]:
    """Configured, else ``schema.primaryKey``, else the Kafka key's columns."""
    carried = schema.get("primaryKey")
    if carried is not None and (not isinstance(carried, list) or not all(isinstance(c, str) for c in carried)):
        raise ParseError(FORMAT, "primaryKey is not a list of column names", "schema.primaryKey")
    return resolve_primary_key(FORMAT, plan.key_override, carried, list(key[0]) if key else None, required=required)


def _image(payload: Mapping, name: str, required: bool) -> Optional[dict]:
    """``payload.<name>.dataColumn`` (a JSON object), or None when the image is null or absent and
    not ``required``. Raises :class:`ParseError` naming the field."""
    holder = payload.get(name)
    if holder is None:
        if required:
            raise ParseError(FORMAT, f"missing {name} image", f"payload.{name}")
        return None
    holder = json_object(FORMAT, holder, f"payload.{name}")
    return json_object(FORMAT, holder.get("dataColumn"), f"payload.{name}.dataColumn", "dataColumn",
                       missing=f"missing {name} image")


def _in_order(image: Optional[dict], order: dict) -> Optional[dict]:
    """``image`` with the columns of ``schema.dataColumn`` first, in its order (``order``: column →
    index), then the others as the image has them: silver's columns follow the message's schema,
    as Paimon's table schema does."""
    if image is None or tuple(image) == tuple(order):
        return image
    return dict(sorted(image.items(), key=lambda kv: order.get(kv[0], len(order))))


#: The images each row operation reads: (before required, after required, before read at all).
_IMAGES = {"INSERT": (False, True, False), "UPDATE_AFTER": (False, True, True), "UPDATE_BEFORE": (True, False, True),
           "UPDATE_BEFOR": (True, False, True), "DELETE": (True, False, True), "TRUNCATE": (False, False, False)}


class AliyunJsonParser(FormatParser):
    """Parser of ``aliyun-json`` records: ``AliyunJsonParser(options).parse(KafkaRecord)``.

    Returns a list of one :class:`ChangeRecord`, or a :class:`ControlRecord` (DDL, heartbeats,
    transaction and GTID markers, Kafka tombstones). Raises :class:`ParseError` for unreadable
    JSON, a missing ``payload``, ``schema`` or ``payload.op``, an unknown operation, a missing
    table name, a ``schema.dataColumn`` that is not a list of known types, a missing or unreadable
    ``sequenceId``, a missing image, a value that does not fit its type, no resolvable primary
    key, or a delete whose row lacks the key and no Kafka key supplies it.
    """

    format_name = FORMAT
    STEPS = ("table", "column_types", "primary_key", "images", "position")
    LEARNT = {"_key_reader": lambda parser: EnvelopeReader(parser.format_name)}

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for row
        changes other than TRUNCATE whose images name the columns of ``schema.dataColumn`` in its order;
        each table plan's images are converted column by column by the plan's converters, the rest goes
        through the functions :meth:`parse` calls. Anything else gives None: :meth:`parse` reads that
        record. Plan key ``(dbName, schemaName, tableName, columns)``; member ``(index, message,
        payload, schema, op)``."""
        decode = JSON.decode
        for i, rec in enumerate(records):
            try:
                msg = decode(rec.value)
                payload, schema = msg["payload"], msg["schema"]
                if type(payload) is not dict or type(schema) is not dict or payload.get("ddl") is not None:
                    continue
                variant = payload.get("op")
                if type(variant) is not str or variant not in _IMAGES or variant == "TRUNCATE":
                    continue
                source = schema["source"]
                database, schema_name, table = source.get("dbName"), source.get("schemaName"), source.get("tableName")
                if (type(table) is not str or not table or (database is not None and type(database) is not str)
                        or (schema_name is not None and type(schema_name) is not str)):
                    continue
                key = (database, schema_name, table, _columns_key(schema))
            except Exception:  # noqa: BLE001  (the per-record parser reads it)
                continue
            yield key, (i, msg, payload, schema, variant)

    def fast_group(self, records: list[KafkaRecord], key: Any, members: list[tuple], out: list) -> None:
        """The changes of one table plan's messages (``members``: index, message, payload, schema, op) into ``out``."""
        database, schema_name, table, columns_key = key
        try:
            plan = self.kept(key, _TablePlan, self.options, columns_key, database, schema_name, table)
        except (ParseError, TypeError, AttributeError, ValueError):
            return
        columns = tuple(c[0] for c in columns_key)
        names = list(columns)
        converters = [plan.converter(c) for c in columns]
        types_pair = (list(plan.types), list(plan.types.values()))
        images: list = []
        slots: list[tuple[Optional[int], Optional[int]]] = []
        for i, msg, payload, schema, variant in members:
            _, need_after, read_before = _IMAGES[variant]
            before_at = after_at = None
            if read_before and (variant != "UPDATE_AFTER" or payload.get("before") is not None):
                before_at = len(images)
                images.append(_holder_image(payload, "before"))
            if need_after:
                after_at = len(images)
                images.append(_holder_image(payload, "after"))
            slots.append((before_at, after_at))
        texts, refused = convert_images(images, columns, converters)
        checked: dict = {}
        for (i, msg, payload, schema, variant), (b, a) in zip(members, slots):
            if any(s is not None and (s in refused or images[s] is None) for s in (b, a)):
                continue
            try:
                op = ROW_OPS[variant]
                read = read_key(records[i].key, self._key_reader)
                pk = _primary_key(schema, plan, read, True)
                position, ts_ms = _position(payload, op, variant)
                before = NO_MAP if b is None else (names, texts[b])
                after = NO_MAP if a is None else (names, texts[a])
                if op == "delete":
                    key_text = convert_image(FORMAT, read[0], plan.convert, "key") if read else None
                    image = key_delete_image(FORMAT, pk, dict(zip(names, texts[b])), key_text,  # type: ignore[index]
                                             "payload.before.dataColumn", _DELETE_HINT)
                    before = (list(image), list(image.values()))
                keyed = dict(zip(*before)) if op == "delete" else dict(zip(names, texts[a]))  # type: ignore[index]
                if any(keyed.get(k) is None for k in pk):
                    raise ValueError("primary key column missing or null")
                change = _ROW(database, schema_name, table, op, before, after, list(pk), types_pair, list(position),
                              ts_ms)
                names_key = (tuple(pk), op, tuple(before[0] or ()), a is None)
                if not (checked.get(names_key) or names_pass(checked, names_key, lambda: ChangeRecord(
                        FORMAT, database, schema_name, table, op,
                        None if before[0] is None else dict.fromkeys(before[0]),
                        None if a is None else dict.fromkeys(names), pk, plan.types))):
                    continue
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                continue
            out[i] = [change]

    def decode(self, record: KafkaRecord) -> Event:
        """The message, a JSON object with a ``payload`` object."""
        msg = load_json(FORMAT, record.value)
        payload = json_object(FORMAT, msg.get("payload"), "payload", missing="missing payload")
        return Event(record, msg, source=payload)

    def control(self, event: Event) -> Optional[ParseResult]:
        """DDL (a non-null ``payload.ddl`` or a DDL ``op``), heartbeats and markers; else the op."""
        payload = event.source
        op = operation_type(FORMAT, payload.get("op"), "payload.op")
        kind = CONTROL_OPS.get(op)
        if kind is None and payload.get("ddl") is not None and op != "TRUNCATE":
            kind = "ddl"
        if kind is not None:
            database = schema_name = table = None
            schema = event.message.get("schema")
            source = schema.get("source") if isinstance(schema, dict) else None
            if isinstance(source, dict):
                database, schema_name, table = (v if isinstance(v, str) else None for v in
                                                (source.get("dbName"), source.get("schemaName"),
                                                 source.get("tableName")))
            ddl = payload.get("ddl")
            return ControlRecord(kind, FORMAT, database, schema_name, table or None,
                                 detail=ddl if isinstance(ddl, str) else None)
        if op not in ROW_OPS:
            raise ParseError(FORMAT, f"unknown operation type {op!r} (expected INSERT, UPDATE_BEFORE, UPDATE_AFTER, "
                                     "DELETE, TRUNCATE, a DDL operation or MHEARTBEAT)", "payload.op")
        event.variant = op
        event.op = ROW_OPS[op]
        return None

    def table(self, event: Event) -> None:
        """``schema.source``: ``dbName``, ``schemaName``, ``tableName``."""
        event.schema = json_object(FORMAT, event.message.get("schema"), "schema", missing="missing schema")
        event.database, event.schema_name, event.table = _names(event.schema)

    def column_types(self, event: Event) -> None:
        """The table plan from ``schema.dataColumn``, kept per table and columns."""
        key = (event.database, event.schema_name, event.table, _columns_key(event.schema))
        event.plan = plan = self.kept(key, _TablePlan, self.options, key[3], *key[:3])
        event.types, event.convert = plan.types, plan.convert

    def primary_key(self, event: Event) -> None:
        """Configured, else ``schema.primaryKey``, else the Kafka key's columns (none needed by a TRUNCATE)."""
        event.key = read_key(event.record.key, self._key_reader)
        event.primary_key = _primary_key(event.schema, event.plan, event.key, event.op != "truncate")

    def images(self, event: Event) -> None:
        """The images the op reads (see the module docstring), columns in ``schema.dataColumn``
        order; a delete's before image is completed with the Kafka key's values where it lacks key
        columns."""
        need_before, need_after, read_before = _IMAGES[event.variant]
        payload, convert = event.source, event.convert
        before = _image(payload, "before", need_before) if read_before else None
        after = _image(payload, "after", need_after) if need_after else None
        order = event.plan.order
        event.before = _in_order(convert_image(FORMAT, before, convert, "payload.before.dataColumn"), order)
        event.after = _in_order(convert_image(FORMAT, after, convert, "payload.after.dataColumn"), order)
        if event.op == "delete":
            key_text = None
            if event.key:
                key_text = convert_image(FORMAT, event.key[0], convert, "key")
            event.before = key_delete_image(FORMAT, event.primary_key, event.before, key_text,
                                            "payload.before.dataColumn", _DELETE_HINT)

    def position(self, event: Event) -> None:
        """``(sequenceId,)`` (a full-load insert: ``(0,)``) and ``timestamp.eventTime``."""
        event.position, event.ts_ms = _position(event.source, event.op, event.variant)

    def build(self, event: Event) -> list[ChangeRecord]:
        """The change (``column_types`` a copy of the plan's)."""
        return [ChangeRecord(
            source_format=FORMAT, source_database=event.database, source_schema=event.schema_name,
            source_table=event.table, op=event.op, before=event.before, after=event.after,
            primary_key=list(event.primary_key), column_types=dict(event.types), source_position=event.position,
            source_ts_ms=event.ts_ms)]


def _holder_image(payload: dict, name: str) -> Any:
    """``payload.<name>.dataColumn`` when it is an object, else a marker the batch refuses."""
    holder = payload.get(name)
    if type(holder) is dict and type(holder.get("dataColumn")) is dict:
        return holder["dataColumn"]
    return _REFUSE


_REFUSE: Any = ["not an image"]


