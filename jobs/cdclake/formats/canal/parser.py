"""``canal-json``: Alibaba Canal flat messages in JSON (as written by Canal and by Alibaba Cloud DTS).

Implements "Alibaba Cloud DTS: data formats of Kafka messages (Canal JSON)": fields ``data``,
``old``, ``database``, ``table``, ``pkNames``, ``isDdl``, ``type``, ``es``, ``ts``, ``id``,
``mysqlType``, ``sqlType`` and ``sql``, including the convention of DTS change tracking instances
created before 20 March 2022, whose DELETE messages carry the rows in ``old`` with ``data`` null.
Apache Flink's flink-json tests (``canal-data.txt``: multi-row ``data``, partial ``old``) serve
as conformance vectors.

One Kafka record gives one :class:`ChangeRecord` per row of ``data`` (``row_in_record`` is the
row's index); position ``(es, id, row index)``.

``INIT`` messages are the rows of an initial (full) load: DTS writes them before it ships the
binlog changes (Apache Flink reads them as inserts since FLINK-32862, "Support INIT operation
type to be compatible with DTS on Alibaba Cloud", apache/flink pull request 23207; Huawei DRS's
"Kafka Message Format" page documents ``INIT`` the same way: "For full synchronization, the value
can be INIT"). They are read as ``snapshot`` changes at position ``(0, 0, row index)``, which
sorts before every binlog change: a load row is at least as old as the changes replicated after
it, so it never overrides a later change of the same key, whatever the arrival order; rows of one
load have distinct keys. ``es`` is still their ``source_ts_ms`` when present. An UPDATE's ``before`` is the ``data`` row
overlaid with its ``old`` row (``old`` holds only the changed columns' previous values). DDL
(``isDdl: true``) is a ``ddl`` control record, except TRUNCATE, which is a ``truncate`` change.

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``); configured types apply to columns ``mysqlType`` does not
name. A Kafka key holding a JSON object of key columns is used when ``pkNames`` is empty and to
key deletes whose images lack the key.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterator, Mapping, Optional

from cdclake.formats.base import ColumnPlan, Event, FormatParser
from cdclake.formats.columnar import FIELD_INDEX, JSON, NO_MAP, convert_images, names_pass, row_maker
from cdclake.formats.fields import element, json_object, name_text, operation_type
from cdclake.formats.json_values import EnvelopeReader, load_json, read_key
from cdclake.formats.options import SourceOptions, key_delete_image, resolve_primary_key
from cdclake.formats.text import coerce_text, convert_image, text_converter
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import normalize_type, to_text

FORMAT = "canal-json"
#: The index of the before image in a change row.
_BEFORE = FIELD_INDEX["before"]
#: The fast path's change row of one row of a message.
_ROW = row_maker("source_database", "source_table", "op", "before", "after", "primary_key", "column_types",
                 "source_position", "source_ts_ms", "row_in_record", source_format=FORMAT, source_schema=None)
ROW_TYPES = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete", "INIT": "snapshot"}
#: The position of an ``INIT`` (initial load) row, before its row index: before every binlog change.
INIT_POSITION = (0, 0)
#: Canal event types that are schema changes (``DDL`` is what DTS sends).
DDL_TYPES = ("CREATE", "ALTER", "ERASE", "RENAME", "CINDEX", "DINDEX", "QUERY", "DDL")
_TYPE_RE = re.compile(r"^\s*(?P<base>[a-z]+(?: precision)?)\s*(?:\((?P<args>[^)]*)\))?(?P<rest>.*)$", re.I)
_SIMPLE = {
    "tinyint": "smallint", "mediumint": "int", "float": "float",
    "double": "double", "double precision": "double", "real": "double",
    "bool": "boolean", "boolean": "boolean", "date": "date", "datetime": "timestamp_ntz", "timestamp": "timestamp",
    "binary": "binary", "varbinary": "binary", "tinyblob": "binary", "blob": "binary",
    "mediumblob": "binary", "longblob": "binary",
}
_UNSIGNED = {"smallint": ("smallint", "int"), "int": ("int", "bigint"), "integer": ("int", "bigint"),
             "bigint": ("bigint", "decimal(20,0)")}
_DELETE_HINT = "the deleted row does not carry them; send Kafka keys holding the key columns"


def mysql_type(text: Any) -> str:
    """Canonical type of a Canal ``mysqlType`` entry (case-insensitive, e.g. ``bigint(20) unsigned``).

    tinyint → smallint; smallint → smallint (unsigned: int); mediumint → int; int/integer → int
    (unsigned: bigint); bigint → bigint (unsigned: decimal(20,0)); float → float; double/real →
    double; decimal/numeric(p,s) → decimal(p,s) (default (10,0)); bit(1) → boolean, bit(n>1) →
    bigint; date → date; datetime → timestamp_ntz (no zone); timestamp → timestamp (an instant,
    read as UTC); binary/varbinary/blob types → binary;
    everything else (char, varchar, text, enum, set, json, time, year ...) → string.
    """
    m = _TYPE_RE.match(str(text or ""))
    if not m:
        return "string"
    base, args, unsigned = m.group("base").lower(), m.group("args"), "unsigned" in m.group("rest").lower()
    if base in _UNSIGNED:
        return _UNSIGNED[base][unsigned]
    if base in ("decimal", "numeric", "dec", "fixed"):
        parts = [p.strip() for p in (args or "10,0").split(",")]
        return normalize_type(f"decimal({parts[0]},{parts[1] if len(parts) > 1 else 0})")
    if base == "bit":
        return "boolean" if (args or "1").strip() == "1" else "bigint"
    return _SIMPLE.get(base, "string")


def canal_text(value: Any, ctype: Optional[str]) -> Optional[str]:
    """Canonical text of a Canal value (a string or null) of canonical type ``ctype``.

    Binary values are ISO-8859-1 strings of the bytes: encoded to Base64. Datetime text
    ``YYYY-MM-DD HH:MM:SS[.f]`` is taken as UTC; MySQL zero dates give None. Untyped values go
    through :func:`cdclake.types.to_text`. Raises ``ValueError`` when a value does not fit.
    """
    if ctype == "binary" and isinstance(value, str):
        return to_text(value.encode("latin-1"))
    return coerce_text(value, ctype) if ctype else to_text(value)


def canal_converter(ctype: Optional[str]) -> Callable[[Any], Optional[str]]:
    """:func:`canal_text` for one type as a function of the value (same results and errors)."""
    if ctype == "binary":
        binary = text_converter("binary")
        return lambda v: to_text(v.encode("latin-1")) if isinstance(v, str) else binary(v)
    return text_converter(ctype) if ctype else to_text


class _TablePlan(ColumnPlan):
    """What :class:`CanalJsonParser` derives from one table's ``mysqlType`` and options, made once.

    ``types`` (column → canonical type: ``mysqlType``, then the configured ``column_types``),
    ``key_override`` (the configured key or None) and :meth:`convert` (column, value → canonical
    text), with one converter per column.
    """

    def __init__(self, options: SourceOptions, mysql_types: Mapping, database: Optional[str], table: str):
        self.types = {str(col): mysql_type(t) for col, t in mysql_types.items()}
        for col, ctype in options.column_types(database, None, table).items():
            self.types.setdefault(col, ctype)
        self.key_override = options.key_override(database, None, table)
        super().__init__()

    def make_converter(self, col: str) -> Callable[[Any], Optional[str]]:
        """The converter of column ``col`` (:func:`canal_converter` of its type)."""
        return canal_converter(self.types.get(col))


class CanalJsonParser(FormatParser):
    """Parser of ``canal-json`` records: ``CanalJsonParser(options).parse(KafkaRecord)``.

    Returns a list of :class:`ChangeRecord` (one per row of ``data``), or a :class:`ControlRecord`
    for DDL and Kafka tombstones. Raises :class:`ParseError` for unreadable JSON, a missing or
    unknown ``type``, a missing ``table`` or ``es`` on a row change, ``data`` that is not a list of
    objects, a value that does not fit its ``mysqlType``, no resolvable primary key, or a delete
    whose rows lack the key and no Kafka key supplies it.
    """

    format_name = FORMAT
    #: ``es`` and ``id`` are read with the table, before the types; the key before the rows.
    STEPS = ("table", "position", "column_types", "primary_key", "images")
    LEARNT = {"_key_reader": lambda parser: EnvelopeReader(parser.format_name)}

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[tuple, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for INSERT,
        UPDATE, DELETE and INIT messages (not DDL, not TRUNCATE) whose ``data`` rows all name the same
        columns in the same order, and an UPDATE's ``old`` rows only columns of its rows; the rows of
        each table plan (table and ``mysqlType``) are converted column by column by the plan's
        converters. The names, position, key and a delete's key image go through the functions
        :meth:`parse` calls; anything else gives None: :meth:`parse` reads that record. Plan key
        ``(database, table, mysqlType items)``; member ``(index, message, op, data, old)``."""
        decode = JSON.decode
        for i, rec in enumerate(records):
            try:
                msg = decode(rec.value)
                kind = msg.get("type")
            except (ValueError, TypeError, AttributeError):  # not JSON, not an object
                continue
            if type(kind) is not str or msg.get("isDdl") in (True, "true"):
                continue
            op = ROW_TYPES.get(kind.upper())
            database, table = msg.get("database") or None, msg.get("table") or None
            data, old = msg.get("data"), msg.get("old")
            if (op is None or type(table) is not str or (database is not None and type(database) is not str)
                    or type(data) is not list or not data or type(data[0]) is not dict
                    or (old is not None and (op != "update" or type(old) is not list))):
                continue
            mysql_types = msg.get("mysqlType")
            mysql_types = mysql_types if isinstance(mysql_types, dict) else {}
            yield (database, table, tuple(mysql_types.items())), (i, msg, op, data, old)

    def fast_group(self, records: list[KafkaRecord], key: Any, members: list[tuple], out: list) -> None:
        """The changes of one table plan's messages (``members``: index, message, op, data, old) into ``out``."""
        database, table, items = key
        try:
            plan = self.kept(key, _TablePlan, self.options, dict(items), database, table)
        except (TypeError, AttributeError, ValueError):
            return
        columns = tuple(members[0][3][0])
        converters = [plan.converter(c) for c in columns]
        names = list(columns)
        types = plan.types
        types_pair = (list(types), list(types.values()))
        # every image of the group in one batch: (member, row, before?) → index in ``images``
        images: list = []
        slots: list[list[tuple[int, Optional[int]]]] = []
        for i, msg, op, data, old in members:
            rows = []
            for r, row in enumerate(data):
                after_at = len(images)
                images.append(row)
                before_at = None
                if op == "update":
                    old_row = old[r] if old and r < len(old) else None
                    if old_row is not None:
                        before_at = len(images)
                        images.append({**row, **old_row} if type(row) is dict and type(old_row) is dict else None)
                        if images[-1] is None or len(images[-1]) != len(row):
                            before_at = -1  # not a dict, or names a column its row lacks: not read here
                rows.append((after_at, before_at))
            slots.append(rows)
        texts, refused = convert_images(images, columns, converters)
        checked: dict = {}  # names already checked (check_names), per primary key and before image
        for (i, msg, op, data, old), rows in zip(members, slots):
            if any(a in refused or b == -1 or (b is not None and b in refused) or images[a] is None for a, b in rows):
                continue
            try:
                if op == "snapshot":
                    ts_ms = element(FORMAT, msg.get("es"), "es", null=None)
                    es, msg_id = INIT_POSITION
                else:
                    ts_ms = es = element(FORMAT, msg.get("es"), "es")
                    msg_id = element(FORMAT, msg.get("id") or 0, "id")
                pk_names = msg.get("pkNames")
                read = read_key(records[i].key, self._key_reader)
                pk = resolve_primary_key(FORMAT, plan.key_override,
                                         [str(c) for c in pk_names] if isinstance(pk_names, list) else None,
                                         list(read[0]) if read else None)
                key_text = convert_image(FORMAT, read[0], plan.convert, "key") if read and op == "delete" else None
                changes = []
                for r, (a, b) in enumerate(rows):
                    if op == "delete":
                        image = key_delete_image(FORMAT, pk, dict(zip(names, texts[a])), key_text, f"data[{r}]",
                                                 _DELETE_HINT)
                        before, after = (list(image), list(image.values())), NO_MAP
                    else:
                        image = dict(zip(names, texts[a]))
                        before, after = (NO_MAP if b is None else (names, texts[b])), (names, texts[a])
                    if any(image.get(k) is None for k in pk):
                        raise ValueError("primary key column missing or null")
                    changes.append(_ROW(database, table, op, before, after, list(pk), types_pair, [es, msg_id, r],
                                        ts_ms, r))
                names_key = (key, tuple(pk), op, tuple(changes[0][_BEFORE][0] or ()))
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                continue
            if (checked.get(names_key) or names_pass(checked, names_key, lambda: ChangeRecord(
                    FORMAT, database, None, table, op, dict.fromkeys(changes[0][_BEFORE][0] or ()),
                    dict.fromkeys(names), pk, types))):
                out[i] = changes

    def decode(self, record: KafkaRecord) -> Event:
        """The flat message, a JSON object."""
        return Event(record, load_json(FORMAT, record.value))

    def control(self, event: Event) -> Optional[ParseResult]:
        """DDL (``isDdl``, or a DDL ``type``) but TRUNCATE; else the ``type`` and the names."""
        msg = event.message
        kind = operation_type(FORMAT, msg.get("type"), "type")
        kind = kind.upper()
        database = event.database = name_text(FORMAT, msg.get("database") or None, "database")
        table = event.table = name_text(FORMAT, msg.get("table") or None, "table")
        if kind != "TRUNCATE" and (msg.get("isDdl") in (True, "true") or kind in DDL_TYPES):
            return ControlRecord("ddl", FORMAT, database, None, table, detail=msg.get("sql"))
        if kind != "TRUNCATE" and kind not in ROW_TYPES:
            raise ParseError(
                FORMAT, f"unknown operation type {msg['type']!r} (expected INSERT, UPDATE, DELETE, INIT or DDL)",
                "type")
        event.op = "truncate" if kind == "TRUNCATE" else ROW_TYPES[kind]
        return None

    def table(self, event: Event) -> None:
        """``table`` is required of a row change (``database`` was read with the type)."""
        if not isinstance(event.table, str):
            raise ParseError(FORMAT, "missing table name", "table")

    def position(self, event: Event) -> None:
        """``(es, id)``, completed per row with the row's index; ``es`` is the commit time. An
        ``INIT`` row is at :data:`INIT_POSITION` (``es``, optional there, is its time)."""
        msg = event.message
        if event.op == "snapshot":
            event.ts_ms = element(FORMAT, msg.get("es"), "es", null=None)
            event.position = INIT_POSITION
            return
        event.ts_ms = element(FORMAT, msg.get("es"), "es")
        event.position = (event.ts_ms, element(FORMAT, msg.get("id") or 0, "id"))

    def column_types(self, event: Event) -> None:
        """The table plan from ``mysqlType``, kept per table and ``mysqlType``."""
        mysql_types = event.message.get("mysqlType")
        mysql_types = mysql_types if isinstance(mysql_types, dict) else {}
        event.plan = plan = self.kept((event.database, event.table, tuple(mysql_types.items())), _TablePlan,
                                      self.options, mysql_types, event.database, event.table)
        event.types, event.convert = plan.types, plan.convert

    def primary_key(self, event: Event) -> None:
        """Configured, else ``pkNames``, else the Kafka key's columns (none needed by a TRUNCATE)."""
        pk_names = event.message.get("pkNames")
        event.key = key = read_key(event.record.key, self._key_reader)
        event.primary_key = resolve_primary_key(
            FORMAT, event.plan.key_override, [str(c) for c in pk_names] if isinstance(pk_names, list) else None,
            list(key[0]) if key else None, required=event.op != "truncate")

    def images(self, event: Event) -> None:
        """``event.rows``: ``(before, after)`` per row of ``data`` (a delete's from ``old`` when
        ``data`` is null); an update's before image is its row overlaid with its ``old`` row."""
        op, msg, convert = event.op, event.message, event.convert
        if op == "truncate":
            event.rows = [(None, None)]
            return
        data, old, rows_field = msg.get("data"), msg.get("old"), "data"
        if op == "delete" and data is None and isinstance(old, list):
            data, old, rows_field = old, None, "old"
        if not isinstance(data, list):
            raise ParseError(FORMAT, f"expected a list of rows, got {type(data).__name__}", "data")
        if old is not None and not isinstance(old, list):
            raise ParseError(FORMAT, f"expected a list of rows or null, got {type(old).__name__}", "old")
        key_text = None
        if event.key and op == "delete":
            key_text = convert_image(FORMAT, event.key[0], convert, "key")
        rows = event.rows = []
        for i, row in enumerate(data):
            where = f"{rows_field}[{i}]"
            image = convert_image(FORMAT, json_object(FORMAT, row, where, "row"), convert, where)
            if op in ("insert", "snapshot"):
                rows.append((None, image))
            elif op == "update":
                old_row = old[i] if old and i < len(old) else None
                before = None if old_row is None else convert_image(
                    FORMAT, {**row, **json_object(FORMAT, old_row, f"old[{i}]", "row")}, convert, f"old[{i}]")
                rows.append((before, image))
            else:
                rows.append((key_delete_image(FORMAT, event.primary_key, image, key_text, where, _DELETE_HINT), None))

    def build(self, event: Event) -> list[ChangeRecord]:
        """One change per row, at position ``(es, id, row index)`` (``INIT``: ``(0, 0, row index)``)."""
        es, msg_id = event.position
        ts_ms = event.ts_ms
        database, table, op, primary_key, types = event.database, event.table, event.op, event.primary_key, event.types
        return [ChangeRecord(
            source_format=FORMAT, source_database=database, source_schema=None, source_table=table,
            op=op, before=before, after=after, primary_key=list(primary_key), column_types=dict(types),
            source_position=(es, msg_id, row), source_ts_ms=ts_ms, row_in_record=row)
            for row, (before, after) in enumerate(event.rows)]


