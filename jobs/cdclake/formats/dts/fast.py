"""The columnar fast path of ``dts-avro`` (:meth:`DtsAvroParser.fast_parse
<cdclake.formats.dts.parser.DtsAvroParser.fast_parse>`): a batch of DTS records grouped by table and
image shape, the values read with the readers the per-record parser uses
(:mod:`cdclake.formats.dts.values`), keys, positions and names through the parser's own functions.
"""
from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

from cdclake.formats.columnar import NO_MAP, row_maker
from cdclake.formats.dts.schema import FORMAT, peek_operation, read_whole
from cdclake.formats.dts.values import SourceInfo, read_column, value_text
from cdclake.formats.json_values import read_key
from cdclake.formats.options import key_delete_image, resolve_primary_key
from cdclake.formats.text import ABSENT, coerce_text
from cdclake.names import check_names
from cdclake.record import ChangeRecord, KafkaRecord
from cdclake.types import widen
from cdclake.formats.dts.plan import ROW_OPERATIONS, _DELETE_HINT, _txid, primary_key_info, split_object_name

if TYPE_CHECKING:
    from cdclake.formats.dts.parser import DtsAvroParser


_MAX_KEYS = 65536
#: Values read by the fast path kept for the next batches (past that, forgotten).
_MAX_VALUES = 32768
_UNSET = object()
_REFUSED = object()
_FIELD = itemgetter("name", "dataTypeNumber")
#: The fast path's change row of a record.
_ROW = row_maker("source_database", "source_schema", "source_table", "op", "before", "after", "primary_key",
                 "column_types", "source_position", "source_ts_ms", "tx_id", source_format=FORMAT)


def fast_members(parser: DtsAvroParser, records: list[KafkaRecord]) -> Iterator[tuple[tuple, tuple]]:
    """:meth:`DtsAvroParser.fast_members`: see there."""
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
        yield key, (i, msg, op, source)


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


def fast_group(parser: DtsAvroParser, records: list[KafkaRecord], key: tuple, members: list[tuple],
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
        out[i] = [_ROW(database, schema, table, op, NO_MAP if op == "insert" else before_pair,
                       NO_MAP if op == "delete" else after_pair, pk, types_pair, position, seconds * 1000, _txid(msg))]
