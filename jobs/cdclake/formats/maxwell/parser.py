"""``maxwell-json``: Zendesk Maxwell's daemon change records in JSON, one row per Kafka record.

Implements "Maxwell's Daemon: Data Format" (https://maxwells-daemon.io/dataformat/, sections
*INSERT*, *UPDATE*, *DELETE*, *CREATE TABLE*, *ALTER TABLE* and *Column types*), "Bootstrapping"
(https://maxwells-daemon.io/bootstrapping/, the ``bootstrap-*`` records) and the *formatting*
options of "Reference" (https://maxwells-daemon.io/config/): ``output_binlog_position``,
``output_commit_info``, ``output_xoffset``, ``output_primary_keys``,
``output_primary_key_columns``, ``output_nulls`` and ``output_ddl``. Apache Paimon's Maxwell test
files (``kafka/maxwell/table/schemaevolution``) serve as conformance vectors.

====================  =====================================================================
field                 read as
====================  =====================================================================
``type``              ``insert`` → insert, ``update`` → update, ``delete`` → delete,
                      ``bootstrap-insert`` → snapshot (a row of a table's bootstrap);
                      ``bootstrap-start``/``bootstrap-complete`` → ``metadata`` control
                      records; ``table-create``/``-alter``/``-drop`` and
                      ``database-create``/``-alter``/``-drop`` (``output_ddl``) → ``ddl``
                      control records (detail: ``sql``)
``database``,         ``source_database``, ``source_table`` (``source_schema`` is None)
``table``
``data``              the row after the change; a delete's row as it was before (→ ``before``)
``old``               an update's previous values of the changed columns only: the before
                      image is ``data`` overlaid with ``old`` (the document's
                      ``data.merge(old)``). With ``output_nulls=false`` Maxwell leaves null
                      values out of ``data``: a column named in ``old`` but absent from
                      ``data`` changed to NULL, and is null in the after image
``position``          ``"<binlog file>:<offset>"`` (``output_binlog_position``) → position
                      elements 1 and 2, e.g. ``master.000006:800911`` → ``(6, 800911, ...)``
``commit``            ``true`` on the last row of a transaction (``output_commit_info``) →
                      position element 3 (1, else 0) and ``tx_last``
``xoffset``           the row's index in its transaction (``output_xoffset``; Maxwell leaves it
                      out of the row carrying ``commit``) → position element 4 (0 when absent)
                      and ``tx_seq``
``xid``               the InnoDB transaction id → ``tx_id``
``ts``                the commit time in seconds → ``source_ts_ms`` (× 1000); none for a
                      bootstrap row, whose ``ts`` is the time Maxwell read it
``primary_key_        the primary key's columns (``output_primary_key_columns``)
columns``
``server_id``,        not used (``primary_key`` repeats values ``data`` holds; ``server_id`` and
``thread_id``,        ``thread_id`` name the server and connection)
``primary_key``
====================  =====================================================================

Position ``(binlog file number, offset, commit, xoffset)``. Rows of one rows event share its
offset; ``xoffset`` orders them, and the ``commit`` row, which Maxwell sends without
``xoffset``, is the transaction's last. Without ``output_xoffset`` the rows of one event tie
and keep their Kafka order (partition, offset): Maxwell's producer keeps a table's rows in one
partition in binlog order unless ``producer_partition_by`` is ``random`` or ``column``.

With ``silver.complete_transactions``, a transaction (``xid``) is applied once its ``commit`` row
has landed (:mod:`cdclake.silver.transactions`): its topic must carry whole transactions, which
a ``kafka_topic`` per table (``%{database}_%{table}``) does not for transactions over several
tables (Maxwell marks the transaction's last row only).

Records without ``position`` (option ``sources[].options.without_position``). Maxwell as it ships
sends none: ``output_binlog_position`` is off by default, and ``ts`` has second precision and is
no order. Maxwell's producer partitions by database by default (``producer_partition_by=database``;
``table`` and ``primary_key`` also keep each key in one partition) and writes each partition in
binlog order, so such a row is ordered by its Kafka order: by default (``kafka-order``) it gets
the empty position ``()`` and keeps its Kafka partition and offset, as SharePlex records without
``scn`` and every AWS DMS record do. That order holds only while each key's changes reach one
partition; where they do not (``producer_partition_by`` ``random`` or ``column``, a topic whose
partition count changed), silver fails the table naming a key, its partitions and this option
(:mod:`cdclake.silver.order`) rather than apply the changes in an arbitrary order. With
``without_position: quarantine`` such a row is a :class:`ParseError` (field ``position``) naming
the Maxwell option to set (``output_binlog_position=true``). Rows with and without positions in
one topic order every row without one before every row with one: right when
``output_binlog_position`` is turned on later, wrong when it is turned off (the new rows would
sort before the rows with positions already applied), so a topic that had positions should set
``without_position: quarantine``.

Bootstrap rows (``bootstrap-insert``) carry no position: Maxwell reads the table while it goes
on replicating, and sends the changes made since the bootstrap started after
``bootstrap-complete``. A bootstrap row gets the empty position ``()`` (``(0, 0, 0, 0)`` under
``without_position: quarantine``), which sorts before every binlog change with a position and,
among rows without one, keeps its Kafka order, so that a row read by the bootstrap never
overrides a later change of the binlog (the bootstrap's state is the binlog's at some point, and
every later change follows).

Primary key: configured (``primary_key``/``primary_keys``) → ``primary_key_columns`` → the
Kafka key. Maxwell's default Kafka key is ``{"database": ..., "table": ..., "pk.<column>":
value, ...}`` (``kafka_key_format=hash``; ``_uuid`` for a table without a key, which gives no
key) or ``[database, table, [{column: value}, ...]]`` (``array``); Maxwell lower-cases the
column names in it, so a key column is matched to the row's column of that name in any case
when the row has exactly one. A delete keys by its ``data`` row, completed from the Kafka key.

Values. Maxwell's JSON carries no column types: numbers are JSON numbers (a DECIMAL's digits
exactly: the value is read as a decimal, never as a binary float), strings JSON strings
(datetime and timestamp as ``YYYY-MM-DD hh:mm:ss[.ffffff]``, BLOB/BINARY Base64), sets JSON
arrays and JSON columns JSON values. As for Debezium records without a schema, columns are
``string`` (a value's own text; objects and arrays as compact JSON) unless ``column_types``
configures them (a configured ``binary`` column reads the Base64 text, ``timestamp`` the
datetime text as UTC, ``decimal(p,s)`` the exact number).

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``) and ``without_position`` (``kafka-order``, the default, or
``quarantine``; ``ValueError`` for another value).
"""
from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Callable, Iterator, Mapping, Optional

import msgspec

from cdclake.formats.base import ConfiguredTypes, Event, FormatParser
from cdclake.formats.columnar import NO_MAP, convert_images, json_objects, names_pass, row_maker
from cdclake.formats.fields import element, json_object, kafka_key_text, name_text, operation_type, table_name
from cdclake.formats.json_values import map_leaves
from cdclake.formats.options import SourceOptions, key_delete_image, resolve_primary_key
from cdclake.formats.text import coerce_text, convert_image
from cdclake.positions import binlog_file_number
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import to_text

FORMAT = "maxwell-json"
#: The fast path's change row of a record.
_ROW = row_maker("source_database", "source_table", "op", "before", "after", "primary_key", "column_types",
                 "source_position", "source_ts_ms", "tx_id", "tx_seq", "tx_last", source_format=FORMAT,
                 source_schema=None)
#: ``type`` → bronze op of a row change.
ROW_TYPES = {"insert": "insert", "update": "update", "delete": "delete", "bootstrap-insert": "snapshot"}
#: ``type`` → control kind of a record that is not a row change.
CONTROL_TYPES = {
    "bootstrap-start": "metadata", "bootstrap-complete": "metadata",
    "database-create": "ddl", "database-alter": "ddl", "database-drop": "ddl",
    "table-create": "ddl", "table-alter": "ddl", "table-drop": "ddl",
}
#: The values of the ``without_position`` option (``sources[].options.without_position``), the default first.
WITHOUT_POSITION = ("kafka-order", "quarantine")
#: The position of a bootstrap row under ``without_position: quarantine``: before every binlog change.
BOOTSTRAP_POSITION = (0, 0, 0, 0)
NO_POSITION_REASON = ("no binlog position: start Maxwell with output_binlog_position=true, or set "
                      "sources[].options.without_position: kafka-order (the default) when each key's changes "
                      "reach one partition in binlog order")
_DELETE_HINT = "the deleted row does not carry them; check sources[].primary_key or sources[].primary_keys"
_DECODER = json.JSONDecoder(parse_float=Decimal)
#: The fast path's decoder: numbers with a fraction or exponent as ``Decimal``, as :func:`load_value`.
FAST_JSON = msgspec.json.Decoder(float_hook=Decimal)


def load_value(fmt: str, raw: Any) -> dict:
    """A Kafka value (UTF-8 JSON) as a dict, JSON numbers with a fraction or exponent read as
    ``Decimal`` (exactly their digits). Raises :class:`ParseError` naming field ``value`` when the
    bytes are not UTF-8, not one JSON document, nested too deeply, or not an object."""
    try:
        text = bytes(raw).decode("utf-8") if isinstance(raw, (bytes, bytearray, memoryview)) else str(raw)
    except UnicodeDecodeError as exc:
        raise ParseError(fmt, f"value is not UTF-8 text ({exc.reason} at byte {exc.start})", "value") from None
    try:
        obj = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ParseError(fmt, f"value is not valid JSON ({exc.msg} at char {exc.pos})", "value") from None
    except RecursionError:
        raise ParseError(fmt, "value is nested too deeply", "value") from None
    if not isinstance(obj, dict):
        raise ParseError(fmt, f"value is a JSON {type(obj).__name__}, not an object", "value")
    return obj


def kafka_key(raw: Optional[bytes]) -> Optional[dict]:
    """The key columns of a Maxwell Kafka key, ``{column: JSON value}`` in the key's order, or None.

    ``{"database", "table", "pk.<column>": value ...}`` gives its ``pk.`` members (prefix
    removed); ``[database, table, [{column: value}, ...]]`` its objects' members. A key of any
    other shape, not JSON, or without key columns (``_uuid``) gives None; never raises.
    """
    if not raw:
        return None
    try:
        obj = _DECODER.decode(bytes(raw).decode("utf-8"))
    except (ValueError, TypeError, RecursionError):
        return None
    out: dict = {}
    if isinstance(obj, dict):
        for name, value in obj.items():
            if name.startswith("pk.") and len(name) > 3:
                out[name[3:]] = value
    elif isinstance(obj, list) and len(obj) == 3 and isinstance(obj[2], list):
        for item in obj[2]:
            if not isinstance(item, dict):
                return None
            out.update(item)
    return out or None


def binlog_position(value: Any) -> tuple[int, int]:
    """``"<binlog file>:<offset>"`` → ``(file number, offset)``: ``master.000006:800911`` →
    ``(6, 800911)``. Raises :class:`ParseError` naming ``position`` for anything else."""
    if not isinstance(value, str) or ":" not in value:
        raise ParseError(FORMAT, f"cannot read position: {value!r} is not <binlog file>:<offset>", "position")
    name, offset = value.rsplit(":", 1)
    try:
        number = binlog_file_number(name)
    except ValueError as exc:
        raise ParseError(FORMAT, f"cannot read position: {exc}", "position") from None
    return number, element(FORMAT, offset, "position", what="binlog offset", prefix="cannot read position: ")


def plain_json(value: Any) -> Any:
    """``value`` with every ``Decimal`` inside lists and objects as a float (a JSON column's
    document, written as compact JSON text like every other format's)."""
    return map_leaves(value, _float_decimal)


def _float_decimal(v: Any) -> Any:
    return float(v) if isinstance(v, Decimal) else v


class _TablePlan(ConfiguredTypes):
    """The table's configured ``column_types`` and key; :meth:`convert` reads Maxwell's JSON values
    (lists and objects as compact JSON text, ``Decimal`` numbers exactly)."""

    def __init__(self, options: SourceOptions, database: Optional[str], table: str):
        super().__init__(options, database, None, table)
        self.key_override = options.key_override(database, None, table)
        self._converters: dict[str, Callable[[Any], Optional[str]]] = {}

    def converter(self, col: str) -> Callable[[Any], Optional[str]]:
        """The converter of column ``col``: JSON value → canonical text (``ValueError`` when it
        does not fit the configured type)."""
        conv = self._converters.get(col)
        if conv is None:
            ctype = self.types.get(col)

            def conv(v: Any, ctype: Optional[str] = ctype) -> Optional[str]:
                t = type(v)
                if t is dict or t is list:
                    v = plain_json(v)
                if ctype is None:
                    return v if t is str else to_text(v)
                return coerce_text(v, ctype)
            self._converters[col] = conv
        return conv

    def convert(self, col: str, value: Any) -> Optional[str]:
        """Canonical text of ``value`` in column ``col``."""
        return (self._converters.get(col) or self.converter(col))(value)


class MaxwellJsonParser(FormatParser):
    """Parser of ``maxwell-json`` records: ``MaxwellJsonParser(options).parse(KafkaRecord)``.

    Returns one :class:`ChangeRecord` in a list, or a :class:`ControlRecord` (``ddl``, ``metadata``
    for bootstrap start and end, ``tombstone`` for an empty value). Raises :class:`ParseError`
    for unreadable JSON (``value``), a missing or unknown ``type`` (``type``), a ``database``
    that is not text, a missing ``table`` (``table``), a ``data`` or ``old`` that is not an
    object (``data``, ``old``), a value that does not fit its configured type (``data.<col>``),
    a ``primary_key_columns`` that is not a list of names, no resolvable primary key
    (``primary_key``), a delete whose row lacks a key column (``data``), an unreadable ``ts``,
    ``xid``, ``xoffset``, ``commit`` or ``position``, and a binlog row without ``position``
    under ``without_position: quarantine`` (``position``, see the module docstring).
    """

    format_name = FORMAT
    #: The key is resolved before the images (a delete's image is completed from it).
    STEPS = ("table", "column_types", "primary_key", "images", "position")

    def __init__(self, options: Optional[Mapping[str, Any]] = None):
        mode = (options or {}).get("without_position") or WITHOUT_POSITION[0]
        if mode not in WITHOUT_POSITION:
            raise ValueError(f"sources[].options.without_position must be one of {', '.join(WITHOUT_POSITION)}, "
                             f"got {mode!r}")
        self.kafka_order = mode == "kafka-order"
        super().__init__(options)

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for row
        changes (``insert``, ``update``, ``delete``, ``bootstrap-insert``) with a ``data`` object and,
        for an update, an ``old`` object naming only columns of ``data`` (or none): the images of each
        table plan with the same columns in the same order are converted column by column by the plan's
        converters. The key, a delete's key image, the position and the transaction fields go through
        the functions :meth:`parse` calls. None (:meth:`parse` reads that record) for anything else:
        JSON msgspec refuses, a control record, a field of another type, a value a converter refuses, a
        key column missing or null, a name the pipeline refuses. Plan key ``(database, table)``; member
        ``(index, message, op, data, old)``."""
        for i, msg in json_objects(records, FAST_JSON.decode):
            kind = msg.get("type")
            op = ROW_TYPES.get(kind) if type(kind) is str else None
            database, table, data, old = msg.get("database"), msg.get("table"), msg.get("data"), msg.get("old")
            if (op is None or type(table) is not str or not table
                    or (database is not None and type(database) is not str)
                    or type(data) is not dict or not data
                    or (old is not None and (op != "update" or type(old) is not dict or not set(old) <= set(data)))):
                continue
            yield (database, table), (i, msg, op, data, old)

    def fast_group(self, records: list[KafkaRecord], names: Any, members: list[tuple], out: list) -> None:
        """The changes of one table's row records (``members``: index, message, op, data, old) into ``out``."""
        database, table = names
        plan = self.kept(names, _TablePlan, self.options, database, table)
        types = plan.types
        types_pair = (list(types), list(types.values()))
        # every image (data, and an update's data overlaid with old) grouped by its columns
        images: list = []
        for _, _, op, data, old in members:
            images.append(data)
            images.append({**data, **old} if old is not None else None)
        buckets: dict[tuple, list[int]] = {}
        for n, image in enumerate(images):
            if image is not None:
                buckets.setdefault(tuple(image), []).append(n)
        texts: list = [None] * len(images)
        refused: set[int] = set()
        for columns, at in buckets.items():
            converted, bad = convert_images([images[n] for n in at], columns, [plan.converter(c) for c in columns])
            names_list = list(columns)
            for m, n in enumerate(at):
                if m in bad:
                    refused.add(n)
                else:
                    texts[n] = (names_list, converted[m])
        checked: dict = {}
        for j, (i, msg, op, data, old) in enumerate(members):
            a, b = 2 * j, 2 * j + 1
            if a in refused or b in refused:
                continue
            try:
                carried = carried_key(msg.get("primary_key_columns"))
                key = kafka_key(records[i].key)
                key_cols = key_columns(key, data) if key else None
                pk = resolve_primary_key(FORMAT, plan.key_override, carried, list(key_cols) if key_cols else None)
                position, ts_ms, tx_id, tx_seq, tx_last = row_position(msg, op, self.kafka_order)
                after_names, after_texts = texts[a]
                if op == "delete":
                    key_text = kafka_key_text(FORMAT, key_cols, plan.convert) if key_cols else None
                    image = key_delete_image(FORMAT, pk, dict(zip(after_names, after_texts)), key_text, "data",
                                             _DELETE_HINT)
                    before, after = (list(image), list(image.values())), NO_MAP
                else:
                    image = dict(zip(after_names, after_texts))
                    after = (after_names, after_texts)
                    before = NO_MAP
                    if op == "update":
                        before = texts[b] if old is not None else (after_names, after_texts)
                if any(image.get(k) is None for k in pk):
                    continue
                names_key = (op, tuple(pk), tuple(after_names), tuple(before[0] or ()))
                if not (checked.get(names_key) or names_pass(checked, names_key, lambda: ChangeRecord(
                        FORMAT, database, None, table, op, dict.fromkeys(before[0] or ()),
                        dict.fromkeys(after[0] or ()), pk, types))):
                    continue
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                continue
            out[i] = [_ROW(database, table, op, before, after, list(pk), types_pair, list(position), ts_ms, tx_id,
                           tx_seq, tx_last)]

    def decode(self, record: KafkaRecord) -> Event:
        """The record, a JSON object (numbers with a fraction as ``Decimal``)."""
        return Event(record, load_value(FORMAT, record.value))

    def control(self, event: Event) -> Optional[ParseResult]:
        """``type`` and ``database``; bootstrap start/end and DDL are control records."""
        msg = event.message
        kind = operation_type(FORMAT, msg.get("type"), "type")
        event.database = name_text(FORMAT, msg.get("database"), "database")
        if kind in CONTROL_TYPES:
            table = msg.get("table")
            detail = msg.get("sql") if CONTROL_TYPES[kind] == "ddl" else kind
            return ControlRecord(CONTROL_TYPES[kind], FORMAT, event.database, None,
                                 table if isinstance(table, str) else None,
                                 detail=detail if isinstance(detail, str) else kind)
        if kind not in ROW_TYPES:
            raise ParseError(FORMAT, f"unknown operation type {kind!r} (expected insert, update, delete, "
                             "bootstrap-insert, bootstrap-start, bootstrap-complete or a table-/database- DDL type)",
                             "type")
        event.op = ROW_TYPES[kind]
        return None

    def table(self, event: Event) -> None:
        """``table`` (required of a row change)."""
        event.table = table_name(FORMAT, event.message.get("table"), "table")

    def column_types(self, event: Event) -> None:
        """The configured ``column_types`` (Maxwell carries none), kept per table."""
        event.plan = plan = self.kept((event.database, event.table), _TablePlan, self.options, event.database,
                                      event.table)
        event.types, event.convert = dict(plan.types), plan.convert

    def primary_key(self, event: Event) -> None:
        """Configured, else ``primary_key_columns``, else the Kafka key's columns (matched to the
        row's columns in any case, see the module docstring)."""
        msg = event.message
        data = json_object(FORMAT, msg.get("data"), "data", missing=f"{msg['type']} carries no row")
        carried = carried_key(msg.get("primary_key_columns"))
        event.key = key = kafka_key(event.record.key)
        key_cols = key_columns(key, data) if key else None
        event.primary_key = resolve_primary_key(FORMAT, event.plan.key_override, carried,
                                                list(key_cols) if key_cols else None)
        event.carried_key = key_cols  # type: ignore[assignment]

    def images(self, event: Event) -> None:
        """``data`` as the after image (a delete's as the before image); an update's before image
        is ``data`` overlaid with ``old``; a column in ``old`` but not in ``data`` is null after."""
        msg, convert, op = event.message, event.convert, event.op
        image = convert_image(FORMAT, msg["data"], convert, "data")
        if op == "delete":
            key_text = None
            if event.carried_key:
                key_text = kafka_key_text(FORMAT, event.carried_key, convert)
            event.before = key_delete_image(FORMAT, event.primary_key, image, key_text, "data", _DELETE_HINT)
            return
        event.after = image
        if op == "update":
            old = msg.get("old")
            if old is None:
                event.before = dict(image)  # type: ignore[arg-type]
            else:
                old_image = convert_image(FORMAT, json_object(FORMAT, old, "old"), convert, "old")
                event.before = {**image, **old_image}  # type: ignore[dict-item]
                for col in old_image:  # type: ignore[union-attr]
                    if col not in image:  # type: ignore[operator]
                        image[col] = None  # type: ignore[index]

    def position(self, event: Event) -> None:
        """``(file number, offset, commit, xoffset)``, ``ts``, ``xid``, ``xoffset`` and ``commit``."""
        (event.position, event.ts_ms, event.tx_id, event.tx_seq, event.tx_last) = row_position(
            event.message, event.op, self.kafka_order)


def carried_key(value: Any) -> Optional[list[str]]:
    """``primary_key_columns``: a list of names, or None when absent, null or empty. Raises
    :class:`ParseError` naming ``primary_key_columns`` for anything else."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
        raise ParseError(FORMAT, f"primary_key_columns {value!r} is not a list of column names",
                         "primary_key_columns")
    return list(value) or None


def key_columns(key: Mapping[str, Any], data: Mapping[str, Any]) -> dict:
    """The Kafka key's columns named as ``data`` names them: a key name that is not a column of
    ``data`` takes the one column of ``data`` equal to it in lower case, when there is one."""
    out = {}
    for name, value in key.items():
        if name not in data:
            same = [c for c in data if isinstance(c, str) and c.lower() == name.lower()]
            if len(same) == 1:
                name = same[0]
        out[name] = value
    return out


def row_position(msg: Mapping[str, Any], op: str, kafka_order: bool) -> tuple:
    """``(position, ts_ms, tx_id, tx_seq, tx_last)`` of a row record (see the module docstring).
    Raises :class:`ParseError` naming ``ts``, ``xid``, ``xoffset``, ``commit`` or ``position``."""
    ts = element(FORMAT, msg.get("ts"), "ts", null=None)
    xid = element(FORMAT, msg.get("xid"), "xid", null=None)
    xoffset = element(FORMAT, msg.get("xoffset"), "xoffset", null=None)
    commit = msg.get("commit")
    if commit is not None and not isinstance(commit, bool):
        raise ParseError(FORMAT, f"commit {commit!r} is not true or false", "commit")
    tx_last = True if commit else (False if xid is not None else None)
    tx_id = None if xid is None else str(xid)
    if op == "snapshot":
        return (() if kafka_order else BOOTSTRAP_POSITION), None, tx_id, xoffset, tx_last
    raw = msg.get("position")
    if raw is None:
        if not kafka_order:
            raise ParseError(FORMAT, NO_POSITION_REASON, "position")
        position: tuple = ()
    else:
        position = (*binlog_position(raw), 1 if commit else 0, xoffset or 0)
    return position, None if ts is None else ts * 1000, tx_id, xoffset, tx_last


# ---------------------------------------------------------------------------------------------
# the columnar fast path


