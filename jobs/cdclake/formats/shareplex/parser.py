"""``shareplex-json``: SharePlex JSON change records (as Alibaba Cloud DTS and SharePlex write them to Kafka).

Implements "Alibaba Cloud DTS: data formats of Kafka messages", section *Shareplex JSON* (Table 1
and the three examples). Each Kafka record is one operation ``{"meta": {...}, "data": {...},
"key": {...}}``:

=================  ==========================================================================
field              read as
=================  ==========================================================================
``meta.op``        ``ins``/``INSERT`` → insert (``data`` is the row); ``upd``/``UPDATE`` → update;
                   ``del``/``DELETE`` → delete (``data`` is the deleted row); ``TRUNCATE`` →
                   truncate; ``DROP COLUMN`` → a ``ddl`` control record; ``UPDATE AFTER`` → update;
                   ``UPDATE BEFORE`` → a ``metadata`` control record (see below). Case-insensitive;
                   ``_`` may stand for the space.
``meta.table``     ``SCHEMA.TABLE``, split on the first dot outside double quotes (quotes removed,
                   ``""`` inside quotes is one ``"``) → ``source_schema``, ``source_table``; no dot:
                   the whole name is the table. ``source_database`` is None.
``meta.scn``       the commit SCN, a decimal string (any size below 10**38) → position element 1
``meta.seq``       the operation's sequence number in its transaction (from 1) → position element
                   2 and ``tx_seq``; taken from ``meta.idx`` when absent
``meta.size``,     the transaction's operation count; ``idx`` is ``seq/size`` → ``tx_size`` (silver's
``meta.idx``       ``complete_transactions`` option counts a transaction's changes against it)
``meta.trans``     the transaction id → ``tx_id``
``meta.time``      the commit time, UTC, ``yyyy-MM-ddTHH:mm:ss`` with optional ``Z`` (fractions and
                   offsets accepted) → ``source_ts_ms``
``userid``,        not used (``rowid`` is a physical address, not a key; ``posttime`` is the time
``rowid``,         the destination applied the change)
``posttime``
=================  ==========================================================================

Images. Values are strings or null (numbers and booleans, which SharePlex's own Kafka writer
may send, are kept as their text); there are no types in the format, so columns are ``string``
unless ``column_types`` configures them. An update's ``data`` holds only the changed columns (new
values) and ``key`` the key columns' values before the change: the before image is ``key``
(partial) and the after image is ``key`` overlaid with ``data`` — the key columns keep their
values unless ``data`` changes them, and every other unchanged column is absent. An insert's
after image and a delete's before image are ``data`` (a delete that also carries ``key`` has it
laid under ``data``). ``UPDATE AFTER`` is read as an update; the ``UPDATE BEFORE`` record of the
pair carries only the old image, which the upsert of the ``UPDATE AFTER`` record does not need,
so it is recognised and counted, never applied.

Primary key: configured (``primary_key``/``primary_keys``) → the ``key`` object's column names
(as SharePlex sends them: its key columns, for a table without a key all its columns; only
updates carry ``key``) → the Kafka key's columns when it is a JSON object → ParseError. So
inserts and deletes need a configured key.

Position ``(scn, seq)``: the SCN orders transactions, ``seq`` the operations inside one (0 when
neither ``seq`` nor ``idx`` is sent). SharePlex can be set to send fewer ``meta`` fields: without
``scn`` the position is ``()`` and changes keep their Kafka order (partition, offset) only, which
is right for a single-partition topic.

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``). Configured ``timestamp`` columns read SharePlex's
``2024-05-24T15:58:48.000000000`` text (nanoseconds truncated to µs); ``binary`` columns are read
as Base64 text.
"""
from __future__ import annotations

import re
from typing import Any, Iterator, Mapping, Optional

from cdclake.formats.base import ConfiguredTypes, Event, FormatParser, learnt_dict
from cdclake.formats.columnar import NO_MAP, convert_images, json_objects, row_maker
from cdclake.formats.fields import commit_time_ms, element, json_object, split_quoted
from cdclake.formats.json_values import load_json, read_key
from cdclake.formats.options import key_delete_image, resolve_primary_key
from cdclake.formats.text import convert_image, text_converter
from cdclake.names import check_names
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import to_text

FORMAT = "shareplex-json"
#: The fast path's change row of a record.
_ROW = row_maker("source_schema", "source_table", "op", "before", "after", "primary_key", "column_types",
                 "source_position", "source_ts_ms", "tx_id", "tx_seq", "tx_size", source_format=FORMAT,
                 source_database=None)
#: ``meta.op`` (upper-cased, ``_`` read as a space) → bronze op, or a control kind for records that are not rows.
OPS = {
    "INS": "insert", "INSERT": "insert",
    "UPD": "update", "UPDATE": "update", "UPDATE AFTER": "update",
    "DEL": "delete", "DELETE": "delete",
    "TRUNCATE": "truncate",
}
CONTROL_OPS = {"DROP COLUMN": "ddl", "UPDATE BEFORE": "metadata"}
_IDX_RE = re.compile(r"^\s*([0-9]+)\s*/\s*([0-9]+)\s*$")
_DELETE_HINT = "the deleted row does not carry them; check sources[].primary_key or sources[].primary_keys"
#: Entries kept per parser in each of the fast path's caches (operations with their
#: tables, commit times, Kafka keys); past that, a cache starts anew.
_MAX_KEPT = 65536


def split_table(name: str) -> tuple[Optional[str], str]:
    """``SCHEMA.TABLE`` → ``(schema, table)``, split on the first dot outside double quotes.

    Quoted parts lose their quotes (``""`` inside them is one ``"``): ``"MY.S"."T.1"`` →
    ``("MY.S", "T.1")``. A name without such a dot is ``(None, name)``. Raises ``ValueError`` for
    an empty part or an unterminated quote.
    """
    parts = split_quoted(name, max_splits=1)
    return (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])


def meta_idx(meta: Mapping[str, Any]) -> tuple[Optional[int], Optional[int]]:
    """``(seq, size)`` of an operation: ``meta.seq``/``meta.size``, else the parts of ``meta.idx``
    (``"1/11"`` → ``(1, 11)``); None where unknown. Raises :class:`ParseError` naming the field
    that is not a non-negative integer (or, for ``idx``, not ``seq/size``)."""
    seq = element(FORMAT, meta.get("seq"), "meta.seq", null=None)
    size = element(FORMAT, meta.get("size"), "meta.size", null=None)
    idx = meta.get("idx")
    if idx is not None and (seq is None or size is None):
        m = _IDX_RE.match(str(idx)) if isinstance(idx, str) else None
        if not m:
            raise ParseError(FORMAT, f"{idx!r} is not seq/size", "meta.idx")
        seq = int(m.group(1)) if seq is None else seq
        size = int(m.group(2)) if size is None else size
    return seq, size


def commit_ms(meta: Mapping[str, Any]) -> Optional[int]:
    """``meta.time`` (UTC commit time, ``yyyy-MM-ddTHH:mm:ss[Z]``) in ms since the epoch, None
    when absent. Raises :class:`ParseError` naming ``meta.time`` for other text."""
    return commit_time_ms(FORMAT, meta, "time", "meta.time")


def source_position(meta: Mapping[str, Any]) -> tuple[int, ...]:
    """``(scn, seq)`` (seq 0 when unknown), or ``()`` without ``meta.scn``. Raises
    :class:`ParseError` naming ``meta.scn`` when it is not a non-negative integer below 10**38
    (a JSON number or decimal digits)."""
    scn = meta.get("scn")
    if scn is None:
        return ()
    scn_value = element(FORMAT, scn, "meta.scn", what="scn")
    seq, _ = meta_idx(meta)
    return scn_value, seq or 0


def _op_name(op: Any) -> str:
    if not isinstance(op, str) or not op.strip():
        raise ParseError(FORMAT, "missing operation", "meta.op")
    return " ".join(op.replace("_", " ").upper().split())


def _meta(msg: Mapping[str, Any]) -> dict:
    return json_object(FORMAT, msg.get("meta"), "meta", missing="missing meta block")


class ShareplexJsonParser(FormatParser):
    """Parser of ``shareplex-json`` records: ``ShareplexJsonParser(options).parse(KafkaRecord)``.

    Returns one :class:`ChangeRecord` in a list, or a :class:`ControlRecord`: ``tombstone`` for an
    empty value, ``ddl`` for ``DROP COLUMN``, ``metadata`` for ``UPDATE BEFORE``. Raises
    :class:`ParseError` for unreadable JSON (``value``), a missing ``meta`` (``meta``), a missing or
    unknown ``meta.op`` (``meta.op``), a missing or malformed ``meta.table`` (``meta.table``),
    unreadable ``meta.scn``/``seq``/``size``/``idx``/``time``, ``data`` or ``key`` that is not an
    object (or is missing where the operation needs it), a value that does not fit a configured
    type (``data.<col>``, ``key.<col>``), no resolvable primary key (``primary_key``), an update
    whose ``key``, ``data`` and Kafka key leave out a key column (``key``), or a delete whose row
    has no value for one (``data``). An update may carry null key values (the document's sample
    does): the change is returned and the pipeline quarantines it, as it does every change whose
    key is null, unless a key without those columns is configured.
    """

    format_name = FORMAT
    #: The table is read with the operation (control records carry it too).
    STEPS = ("column_types", "images", "primary_key", "position")
    LEARNT = {"_fast_targets": learnt_dict, "_fast_times": learnt_dict, "_fast_keys": learnt_dict}

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for insert,
        update and delete operations (``meta.op`` in any of its spellings, not ``TRUNCATE``, ``DROP
        COLUMN`` or ``UPDATE BEFORE``): a ``meta`` object naming the table, a ``data`` object and, when
        present, a ``key`` object. The images of each table plan (table and configured ``column_types``)
        are converted column by column by the plan's converters, images of the same columns in the same
        order together (an update's ``data`` holds only its changed columns). The operation, the table's
        name, the primary key, a delete's key image, ``(scn, seq)``, ``seq``/``size``/``idx`` and the
        commit time go through the functions :meth:`parse` calls. None (:meth:`parse` reads that record)
        for anything else: unreadable JSON, a control record, a field of the wrong type, a value a
        converter refuses, a primary key that cannot be resolved or has a null or missing column, a name
        the pipeline refuses. Plan key ``(schema, table)``; member ``(index, meta, op, data, key)``."""
        targets = self._fast_targets
        for i, msg in json_objects(records):
            meta, data, key = msg.get("meta"), msg.get("data"), msg.get("key")
            if type(meta) is not dict or type(data) is not dict or (key is not None and type(key) is not dict):
                continue
            op, name = meta.get("op"), meta.get("table")
            if type(op) is not str or type(name) is not str:
                continue
            target = targets.get((op, name), False)
            if target is False:
                target = _fast_target(op, name)
                _keep(targets, (op, name), target)
            if target is None:
                continue
            yield target[1], (i, meta, target[0], data, key)

    def fast_group(self, records: list[KafkaRecord], names: Any, members: list[tuple], out: list) -> None:
        """The changes of one table's operations (``members``: index, meta, op, data, key) into ``out``."""
        schema, table = names
        plan = self.kept(names, ConfiguredTypes, self.options, None, schema, table)
        types = plan.types
        override = self.options.key_override(None, schema, table)
        types_pair = (list(types), list(types.values()))
        count = len(members)
        images, refused = _convert_images(plan, [m[3] for m in members] + [m[4] for m in members])
        shapes: dict[tuple, Optional[tuple]] = {}
        for j, (i, meta, op, _, _) in enumerate(members):
            if j in refused or j + count in refused:
                continue
            data_cols, data_names, data_texts = images[j]
            key_cols, key_names, key_texts = images[j + count] or ((), None, None)
            try:
                raw_key = records[i].key
                kafka_key = _kafka_key(self, raw_key) if raw_key else None
                kafka_cols = tuple(kafka_key[0]) if kafka_key else ()
                shape_key = (op, data_cols, key_cols, kafka_cols)
                shape = shapes.get(shape_key, False)
                if shape is False:
                    shape = shapes[shape_key] = _shape(self, names, types, override, *shape_key)
                if shape is None:
                    continue
                pk, at = shape
                kafka_key_text = convert_image(FORMAT, kafka_key[0], plan.convert, "key") if kafka_key else None
                if op == "insert":
                    if None in [data_texts[k] for k in at]:
                        continue
                    before, after = NO_MAP, (data_names, data_texts)
                else:
                    image = dict(zip(key_cols, key_texts)) if key_cols else {}
                    image.update(zip(data_cols, data_texts))
                    if op == "update":
                        before = NO_MAP if key_names is None else (key_names, key_texts)
                        if kafka_key_text:
                            for col in pk:
                                if col not in image and col in kafka_key_text:
                                    image[col] = kafka_key_text[col]
                        after = (list(image), list(image.values()))
                    else:
                        image = key_delete_image(FORMAT, pk, image, kafka_key_text, "data", _DELETE_HINT)
                        before, after = (list(image), list(image.values())), NO_MAP
                    if None in [image.get(k) for k in pk]:
                        continue
                tx_seq, tx_size = meta_idx(meta)
                position = list(source_position(meta))
                ts_ms = _commit_ms(self, meta)
                trans = meta.get("trans")
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                continue
            out[i] = [_ROW(schema, table, op, before, after, list(pk), types_pair, position, ts_ms,
                           None if trans is None else str(trans), tx_seq, tx_size)]

    def decode(self, record: KafkaRecord) -> Event:
        """The operation, a JSON object, with its ``meta`` block (required)."""
        msg = load_json(FORMAT, record.value)
        return Event(record, msg, source=_meta(msg))

    def control(self, event: Event) -> Optional[ParseResult]:
        """``meta.op`` and ``meta.table``; ``DROP COLUMN`` and ``UPDATE BEFORE`` are control records."""
        meta, msg = event.source, event.message
        op_name = _op_name(meta.get("op"))
        if op_name not in OPS and op_name not in CONTROL_OPS:
            raise ParseError(FORMAT, f"unknown operation {meta.get('op')!r} (expected ins, upd, del, INSERT, "
                             "UPDATE, DELETE, TRUNCATE, DROP COLUMN, UPDATE BEFORE or UPDATE AFTER)", "meta.op")
        event.schema_name, event.table = self._table(meta)
        if op_name in CONTROL_OPS:
            detail = op_name if msg.get("data") is None else f"{op_name} {to_text(msg.get('data'))}"
            return ControlRecord(CONTROL_OPS[op_name], FORMAT, None, event.schema_name, event.table, detail=detail)
        event.op = OPS[op_name]
        return None

    @staticmethod
    def _table(meta: Mapping[str, Any]) -> tuple[Optional[str], str]:
        name = meta.get("table")
        if not isinstance(name, str) or not name.strip():
            raise ParseError(FORMAT, "missing table name", "meta.table")
        try:
            return split_table(name.strip())
        except ValueError as exc:
            raise ParseError(FORMAT, str(exc), "meta.table") from None

    def transaction_size(self, record: KafkaRecord) -> Optional[int]:
        """The number of operations in the record's transaction (``meta.size``, else from
        ``meta.idx``), None when the record does not say. Raises :class:`ParseError` like
        :meth:`parse` for an unreadable record."""
        if not record.value:
            return None
        return meta_idx(_meta(load_json(FORMAT, record.value)))[1]

    def column_types(self, event: Event) -> None:
        """The configured ``column_types`` (the format carries none), kept per table."""
        plan = self.kept((event.schema_name, event.table), ConfiguredTypes, self.options, None, event.schema_name,
                         event.table)
        event.types, event.convert = dict(plan.types), plan.convert

    def images(self, event: Event) -> None:
        """The images as the record carries them: ``data`` (as ``after``) and ``key`` (as ``before``),
        laid out per operation by :meth:`primary_key`; all but a truncate need ``data``."""
        msg = event.message
        event.after = convert_image(FORMAT, msg.get("data"), event.convert, "data")
        event.before = convert_image(FORMAT, msg.get("key"), event.convert, "key")
        if event.op != "truncate" and event.after is None:
            raise ParseError(FORMAT, f"{event.op} carries no row", "data")

    def primary_key(self, event: Event) -> None:
        """Configured, else the ``key`` object's columns, else the Kafka key's; then the images: an
        update's before is ``key`` and its after ``key`` overlaid with ``data``, a delete's before
        is ``data`` over ``key``."""
        data, key_image, kind = event.after, event.before, event.op
        kafka_key = read_key(event.record.key)
        primary_key = event.primary_key = resolve_primary_key(
            FORMAT, self.options.key_override(None, event.schema_name, event.table),
            list(key_image) if key_image else None, list(kafka_key[0]) if kafka_key else None,
            required=kind != "truncate")
        kafka_key_text = convert_image(FORMAT, kafka_key[0], event.convert, "key") if kafka_key else None
        event.before = event.after = None
        if kind == "insert":
            event.after = data
        elif kind == "update":
            event.before = key_image
            after = event.after = {**(key_image or {}), **data}  # type: ignore[dict-item]
            for col in primary_key:
                if col not in after and kafka_key_text and col in kafka_key_text:
                    after[col] = kafka_key_text[col]
            missing = [c for c in primary_key if c not in after]
            if missing:
                raise ParseError(FORMAT, f"update carries no value for key column(s) {', '.join(missing)} "
                                 "in 'key' or 'data'", "key")
        elif kind == "delete":
            event.before = key_delete_image(FORMAT, primary_key, {**(key_image or {}), **data},  # type: ignore[dict-item]
                                            kafka_key_text, "data", _DELETE_HINT)

    def position(self, event: Event) -> None:
        """``(scn, seq)``, ``meta.time``, ``meta.trans``, ``seq`` and ``size``."""
        meta = event.source
        event.tx_seq, event.tx_size = meta_idx(meta)
        event.position = source_position(meta)
        event.ts_ms = commit_ms(meta)
        trans = meta.get("trans")
        event.tx_id = None if trans is None else str(trans)


def _keep(cache: dict, key: Any, value: Any) -> None:
    """``cache[key] = value``, the cache started anew past :data:`_MAX_KEPT` entries."""
    if len(cache) >= _MAX_KEPT:
        cache.clear()
    cache[key] = value


def _fast_target(op: str, name: str) -> Optional[tuple[str, tuple[Optional[str], str]]]:
    """``(bronze op, (schema, table))`` of a ``meta.op`` and ``meta.table`` text as
    :meth:`ShareplexJsonParser.parse` reads them, None when it does not read them as an insert,
    update or delete (a truncate, a control record, an error)."""
    try:
        kind = OPS.get(_op_name(op))
        names = ShareplexJsonParser._table({"table": name})
    except ParseError:
        return None
    return (kind, names) if kind in ("insert", "update", "delete") else None


def _convert_images(plan: ConfiguredTypes, images: list) -> tuple[list, set[int]]:
    """The canonical text of ``images`` (``data`` or ``key`` objects, or None) with the table
    plan's converters, those of the same columns in the same order converted together
    (:func:`convert_images`). Returns ``(converted, refused)``: per image ``(columns, names list,
    texts list)`` or None for no image, and the indices of the images a value of which does not
    convert (their entries undefined)."""
    types = plan.types
    buckets: dict[tuple, tuple[list, list]] = {}
    for n, image in enumerate(images):
        if image is not None:
            columns = tuple(image)
            bucket = buckets.get(columns)
            if bucket is None:
                bucket = buckets[columns] = ([], [])
            bucket[0].append(n)
            bucket[1].append(image)
    converted: list = [None] * len(images)
    refused: set[int] = set()
    for columns, (at, bucket) in buckets.items():
        if not columns:  # empty objects
            texts, bad = [[] for _ in bucket], set()
        else:
            converters = [text_converter(types[col]) if col in types else _untyped_text for col in columns]
            try:
                texts, bad = convert_images(bucket, columns, converters)
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                texts, bad = [], set(range(len(bucket)))
        column_names = list(columns)
        for m, n in enumerate(at):
            if m in bad:
                refused.add(n)
            else:
                converted[n] = (columns, column_names, texts[m])
    return converted, refused


def _untyped_text(value: Any) -> Optional[str]:
    """:func:`to_text`, the converter of a column without a configured type (text is its own text)."""
    return value if type(value) is str else to_text(value)


def _shape(parser: ShareplexJsonParser, names: tuple, types: dict, override: Optional[list], op: str,
           data_cols: tuple, key_cols: tuple, kafka_cols: tuple) -> Optional[tuple[list, tuple]]:
    """``(primary key, positions of its columns in data_cols)`` of the operations of one table
    whose ``data``, ``key`` and Kafka key hold these columns (positions only for an insert), or
    None when such operations are left to :meth:`ShareplexJsonParser.parse`: no primary key, a
    key column an insert or update cannot carry, a name :func:`check_names` refuses."""
    try:
        pk = resolve_primary_key(FORMAT, override, list(key_cols) if key_cols else None,
                                 list(kafka_cols) if kafka_cols else None)
    except ParseError:
        return None
    carried = {"insert": data_cols, "update": (*key_cols, *data_cols, *kafka_cols)}.get(op)
    if carried is not None and not set(pk) <= set(carried):
        return None
    columns = dict.fromkeys((*data_cols, *key_cols, *kafka_cols))
    try:
        check_names(ChangeRecord(FORMAT, None, names[0], names[1], op, columns, columns, pk, types))
    except Exception:  # noqa: BLE001
        return None
    return pk, tuple(data_cols.index(k) for k in pk) if op == "insert" else ()


def _kafka_key(parser: ShareplexJsonParser, raw: bytes) -> Optional[tuple[dict, Optional[dict]]]:
    """:func:`read_key` of a Kafka key (not empty), kept per key."""
    keys = parser._fast_keys
    try:
        return keys[raw]
    except KeyError:
        read = read_key(raw)
        _keep(keys, raw, read)
        return read


def _commit_ms(parser: ShareplexJsonParser, meta: Mapping[str, Any]) -> Optional[int]:
    """:func:`commit_ms`, kept per ``meta.time`` text (the operations of a transaction share it)."""
    text = meta.get("time")
    if type(text) is not str:
        return commit_ms(meta)
    times = parser._fast_times
    ms = times.get(text)
    if ms is None:
        ms = commit_ms(meta)
        _keep(times, text, ms)
    return ms
