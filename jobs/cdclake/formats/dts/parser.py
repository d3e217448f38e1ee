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

import json
import re
from operator import itemgetter
from typing import Any, Mapping, Optional

from cdclake.formats.base import Event, FormatParser
from cdclake.formats.columnar import NO_MAP
from cdclake.formats.dts.schema import FORMAT, decode, peek_operation, read_whole
from cdclake.formats.dts.values import SourceInfo, read_column, read_value, value_text
from cdclake.formats.json_values import read_key
from cdclake.formats.options import key_delete_image, resolve_primary_key
from cdclake.formats.text import ABSENT, coerce_text
from cdclake.names import check_names
from cdclake.positions import MAX_ELEMENT
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import widen

# ---------------------------------------------------------------------------------------------
# operations and names

ROW_OPERATIONS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
#: Control record kind of each non-row operation.
CONTROL_OPERATIONS = {
    "DDL": "ddl", "COMMAND": "ddl",
    "BEGIN": "transaction", "COMMIT": "transaction", "ROLLBACK": "transaction", "ABORT": "transaction",
    "HEARTBEAT": "heartbeat", "CHECKPOINT": "heartbeat", "NOOP": "heartbeat",
    "FILL": "metadata", "FINISH": "metadata", "CONTROL": "metadata", "RDB": "metadata", "INIT": "metadata",
}
_POSITION_RE = re.compile(r"^([0-9]+)@([0-9]+)$")
_DELETE_HINT = "the deleted row's image does not carry them"
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_TRUNCATE_RE = re.compile(rf"^\s*truncate\s+(?:table\s+)?(?P<name>{_IDENT}(?:\s*\.\s*{_IDENT})?)\s*;?\s*$", re.I)
_NAME_PART_RE = re.compile(_IDENT)


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def split_object_name(name: Optional[str]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """``(database, schema, table)`` of an ``objectName``.

    ``db`` → (db, None, None); ``db.table`` → (db, None, table); ``db.schema.table`` →
    (db, schema, table). Parts are split at dots; ``\\u002E`` inside a part is a dot of the name
    (the SDK's ``ObjectNameUtils`` escaping). None or empty gives (None, None, None). Raises
    ``ValueError`` for more than three parts or an empty part.
    """
    if not name:
        return None, None, None
    parts = [p.replace("\\u002E", ".") for p in name.split(".")]
    if len(parts) > 3 or not all(parts):
        raise ValueError(f"objectName {name!r} is not db, db.table or db.schema.table")
    if len(parts) == 1:
        return parts[0], None, None
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return parts[0], parts[1], parts[2]


def parse_position(source_position: Optional[str], record_id: int) -> tuple[int, ...]:
    """The position tuple of a record.

    ``offset@fileindex`` (MySQL binlog: end offset of the event @ binlog file number) gives
    ``(fileindex, offset, id)``: numbers compare as numbers, the file first (``"194@10"`` sorts
    after ``"99999@9"``). Any other ``sourcePosition`` (other sources, or numbers beyond
    ``10**38``) gives ``(id,)``. Raises ``ValueError`` for a negative ``id``.
    """
    if isinstance(record_id, bool) or not isinstance(record_id, int) or not 0 <= record_id <= MAX_ELEMENT:
        raise ValueError(f"id {record_id!r} is not a non-negative integer")
    m = _POSITION_RE.match((source_position or "").strip())
    if m:
        offset, file_index = int(m.group(1)), int(m.group(2))
        if offset <= MAX_ELEMENT and file_index <= MAX_ELEMENT:
            return (file_index, offset, record_id)
    return (record_id,)


def _txid(msg: Mapping[str, Any]) -> Optional[str]:
    """``sourceTxid``, None for the empty and ``"0"`` ids MySQL sources send."""
    txid = (msg.get("sourceTxid") or "").strip()
    return None if txid in ("", "0") else txid


def primary_key_info(tags: Mapping[str, str]) -> Optional[list[str]]:
    """Key columns from the ``pk_uk_info`` tag: ``PRIMARY``, else the first unique index, else None.

    Raises ``ValueError`` when the tag is present but not a JSON object of column-name lists.
    """
    text = tags.get("pk_uk_info")
    if not text:
        return None
    try:
        info = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"pk_uk_info is not JSON ({exc.msg})") from None
    except RecursionError:
        raise ValueError("pk_uk_info is JSON nested too deeply to read") from None
    if not isinstance(info, dict) or not all(
            isinstance(cols, list) and all(isinstance(c, str) for c in cols) for cols in info.values()):
        raise ValueError(f"pk_uk_info {text!r} is not an object of column-name lists")
    if info.get("PRIMARY"):
        return list(info["PRIMARY"])
    for cols in info.values():
        if cols:
            return list(cols)
    return None


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
    FAST_PATH = True
    _LEARNT = FormatParser._LEARNT + ("_fast_keys", "_fast_carried", "_fast_values")

    def _forget(self) -> None:
        super()._forget()
        self._fast_keys: dict = {}
        self._fast_carried: dict = {}
        self._fast_values: dict = {}

    def fast_parse(self, records: list[KafkaRecord]) -> list[Optional[list[tuple]]]:
        """The columnar fast path (:mod:`cdclake.formats.columnar`) for INSERT, UPDATE and DELETE
        records (their ``operation`` peeked at before the value is read) that read as one whole
        ``Record`` of the full schema, with a ``db.table`` or ``db.schema.table`` ``objectName``, a
        ``fields`` list of distinct names and images as long as it. The records of one table plan
        (``objectName``, ``fields``, source type) are read column by column with
        :func:`~cdclake.formats.dts.values.read_value` (equal values of a column read once) and
        rendered by the functions :meth:`parse` renders with; the names, key, delete image,
        position and transaction go through the functions :meth:`parse` calls. Control records,
        DDL (TRUNCATE included), records without ``bornTimestamp`` and anything refused (a value,
        a name, a key, a position) give None: :meth:`parse` reads that record."""
        return _fast_parse(self, records)

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

_MAX_KEYS = 65536
#: Values read by the fast path kept for the next batches (past that, forgotten).
_MAX_VALUES = 32768
_UNSET = object()
_REFUSED = object()
_FIELD = itemgetter("name", "dataTypeNumber")


def _fast_parse(parser: DtsAvroParser, records: list[KafkaRecord]) -> list[Optional[list[tuple]]]:
    """:meth:`DtsAvroParser.fast_parse`: see there."""
    out: list[Optional[list[tuple]]] = [None] * len(records)
    groups: dict[tuple, list[tuple]] = {}
    for i, rec in enumerate(records):
        raw = rec.value
        try:
            if not raw or peek_operation(raw) not in ROW_OPERATIONS:
                continue
            msg = read_whole(bytes(raw))
            op = ROW_OPERATIONS[msg["operation"]]
            fields, before, after = msg["fields"], msg["beforeImages"], msg["afterImages"]
            if type(fields) is not list or not fields:
                continue
            n = len(fields)
            if ((before is not None and (type(before) is not list or len(before) != n))
                    or (after is not None and (type(after) is not list or len(after) != n))
                    or (before is None if op == "delete" else after is None)):
                continue
            source = SourceInfo(msg["source"]["sourceType"], msg.get("sourcePosition") or "")
            key = (msg["objectName"], tuple(map(_FIELD, fields)), source.source_type, source.mysql,
                   source.datetime_fraction_ns)
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            continue
        members = groups.get(key)
        if members is None:
            members = groups[key] = []
        members.append((i, msg, op, source))
    for key, members in groups.items():
        try:
            _fast_group(parser, records, key, members, out)
        except Exception:  # noqa: BLE001  (the per-record parser reads the group's records)
            for m in members:
                out[m[0]] = None
    return out


def _rows(images: list, numbers: list, source: SourceInfo, memos: list) -> list:
    """Per image (None: no image) the tuple of its columns' entries (:func:`read_column`), read
    column by column."""
    present = [j for j, image in enumerate(images) if image is not None]
    rows: list = [None] * len(images)
    if present:
        columns = [read_column([images[j][c] for j in present], number, source, memos[c])
                   for c, number in enumerate(numbers)]
        for j, row in zip(present, zip(*columns)):
            rows[j] = row
    return rows


def _plan(names: list, before: Optional[tuple], after: Optional[tuple], configured: Mapping[str, str]) -> tuple:
    """``(types, types pair, slots)`` of a change whose images have these entries: ``types`` as
    :meth:`DtsAvroParser.column_types` makes it (the wider of before and after, then the
    configured types), and per column the slot its text is kept under in an entry (the
    configured type as ``(True, type)``, else the column's type)."""
    types: dict[str, str] = {}
    if before is not None:
        for name, entry in zip(names, before):
            if entry[1]:
                types[name] = entry[1]
    if after is not None:
        for name, entry in zip(names, after):
            ctype = entry[1]
            if ctype:
                old = types.get(name)
                if old != ctype:
                    types[name] = ctype if old is None else (widen(old, ctype) or ctype)
    types.update(configured)
    slots = [(True, configured[name]) if name in configured else types.get(name) for name in names]
    return types, (list(types), list(types.values())), slots


def _texts(names: list, row: tuple, slots: list) -> Optional[tuple[list, list]]:
    """The (columns, texts) pair of one image's entries as :meth:`DtsAvroParser._texts` renders it
    (values left out of the image skipped); None when a value does not render."""
    texts = []
    absent = False
    for entry, slot in zip(row, slots):
        value = entry[0]
        if value is ABSENT:
            absent = True
            continue
        known = entry[2]
        text = known.get(slot, _UNSET)
        if text is _UNSET:
            try:
                if type(slot) is tuple:
                    text = None if value is None else coerce_text(value, slot[1])
                else:
                    text = value_text(value, slot)
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                text = _REFUSED
            known[slot] = text
        if text is _REFUSED:
            return None
        texts.append(text)
    return ([name for name, entry in zip(names, row) if entry[0] is not ABSENT] if absent else names), texts


def _fast_group(parser: DtsAvroParser, records: list[KafkaRecord], key: tuple, members: list[tuple],
                out: list) -> None:
    """The changes of one table plan's records (``members``: index, message, op, source) into ``out``."""
    object_name, fields = key[0], key[1]
    try:
        database, schema, table = split_object_name(object_name)
    except ValueError:
        return
    names = [f[0] for f in fields]
    numbers = [f[1] for f in fields]
    if table is None or len(set(names)) != len(names):
        return
    options = parser.options
    configured = options.column_types(database, schema, table)
    override = options.key_override(database, schema, table)
    source = members[0][3]
    kept = parser._fast_values
    memos = kept.get(key)
    if memos is None:
        memos = kept[key] = [{} for _ in names]
    befores = _rows([m[1]["beforeImages"] for m in members], numbers, source, memos)
    afters = _rows([m[1]["afterImages"] for m in members], numbers, source, memos)
    if sum(len(memo) for kept_memos in kept.values() for memo in kept_memos) > _MAX_VALUES:
        kept.clear()
    keys, carried_keys = parser._fast_keys, parser._fast_carried
    plans: dict[tuple, tuple] = {}
    checked: dict[tuple, bool] = {}
    for (i, msg, op, _), before, after in zip(members, befores, afters):
        if (before is not None and None in before) or (after is not None and None in after):
            continue
        signature = (None if before is None else tuple([e[1] for e in before]),
                     None if after is None else tuple([e[1] for e in after]))
        plan = plans.get(signature)
        if plan is None:
            plan = plans[signature] = _plan(names, before, after, configured)
        types, types_pair, slots = plan
        before_pair = NO_MAP if before is None else _texts(names, before, slots)
        after_pair = NO_MAP if after is None else _texts(names, after, slots)
        if before_pair is None or after_pair is None:
            continue
        raw_key = records[i].key
        try:
            read = keys[raw_key]
        except KeyError:
            read = read_key(raw_key)
            if len(keys) >= _MAX_KEYS:
                keys.clear()
            keys[raw_key] = read
        except TypeError:  # a key that is not bytes
            continue
        carried = None
        if not override:
            info = msg["tags"].get("pk_uk_info")
            carried = carried_keys.get(info, _UNSET)
            if carried is _UNSET:
                try:
                    carried = primary_key_info({"pk_uk_info": info})
                except Exception:  # noqa: BLE001  (the per-record parser reports it)
                    carried = _REFUSED
                if len(carried_keys) < _MAX_KEYS:
                    carried_keys[info] = carried
            if carried is _REFUSED:
                continue
        try:
            pk = resolve_primary_key(FORMAT, override, carried, list(read[0]) if read else None)
            if op == "delete":
                key_text = parser._key_text(read[0], types) if read else None
                image = key_delete_image(FORMAT, pk, dict(zip(*before_pair)), key_text, "beforeImages",
                                         _DELETE_HINT)
                before_pair = (list(image), list(image.values()))
            else:
                image = dict(zip(*after_pair))
                if any(image.get(k) is None for k in pk):
                    continue
            position = list(parser._position(msg))
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            continue
        seconds = msg["sourceTimestamp"]
        if seconds < 0:
            continue
        pk_names = tuple(pk)
        ok = checked.get(pk_names)
        if ok is None:
            try:
                every = dict.fromkeys(names)
                check_names(ChangeRecord(FORMAT, database, schema, table, op, every, every, pk,
                                         dict.fromkeys([*names, *configured])))
                ok = checked[pk_names] = True
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                ok = checked[pk_names] = False
        if not ok:
            continue
        out[i] = [(FORMAT, database, schema, table, op, NO_MAP if op == "insert" else before_pair,
                   NO_MAP if op == "delete" else after_pair, pk, types_pair, position, seconds * 1000, _txid(msg),
                   None, 0, None, None)]
