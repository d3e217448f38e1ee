"""The columnar fast path of ``debezium-json`` (:meth:`DebeziumJsonParser.fast_members
<cdclake.formats.debezium.parser.DebeziumJsonParser.fast_members>`): a batch of change events grouped
by envelope and table, each image column converted over the batch by the table plan's converters
(:mod:`cdclake.formats.columnar`), the key, the delete image, the position and the names through
the functions the per-record parser calls (:mod:`cdclake.formats.debezium.plan`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

from cdclake.formats.columnar import NO_MAP, source_names, convert_images, key_indices, names_pass, row_maker
from cdclake.formats.connect import (key_fields)
from cdclake.formats.fields import kafka_key_text, optional_element
from cdclake.formats.debezium.lindorm import is_lindorm
from cdclake.formats.options import key_delete_image
from cdclake.record import ChangeRecord, KafkaRecord
from cdclake.formats.debezium.plan import FORMAT, _DELETE_HINT, _FAST_MEMBERS, _FAST_OPS, _KEY_HEADERS, _MAX_KEYS, _TOAST, _TablePlan, _key_value_text, source_position

if TYPE_CHECKING:
    from cdclake.formats.debezium.parser import DebeziumJsonParser

def _row_maker(fmt: str):
    """The change row maker of format ``fmt`` (the Debezium formats share this fast path)."""
    return row_maker("source_database", "source_schema", "source_table", "op", "before", "after", "primary_key",
                     "column_types", "source_position", "source_ts_ms", "tx_id", "tx_seq", source_format=fmt)


#: Format name → its change row maker, made on first use.
_ROWS: dict = {}


def fast_members(parser: DebeziumJsonParser, records: list[KafkaRecord],
                 payloads: Iterable[tuple[int, Any, Optional[dict], Any]]) -> Iterator[tuple[tuple, tuple]]:
    """:meth:`DebeziumJsonParser.fast_members` on decoded payloads: ``payloads`` gives ``(index in
    records, payload, Connect schema, envelope id)`` for the records decoded (the others are left
    to the per-record parser). Used by the formats that decode Debezium envelopes otherwise (Avro).
    Plan key ``(envelope id, source.db, source.schema, source.table)`` as the message holds them
    (:func:`fast_group` checks they are names); member ``(index, payload, source, Connect schema)``."""
    for i, payload, schema, envelope in payloads:
        if type(payload) is not dict or not payload.keys() <= _FAST_MEMBERS:
            continue
        headers = records[i].headers
        if headers and any(h in _KEY_HEADERS for h, _ in headers):
            continue  # a half of a primary key change: the per-record parser pairs them
        source = payload.get("source")
        if type(source) is not dict or payload.get("op") not in _FAST_OPS or is_lindorm(source):
            continue
        yield (envelope, source.get("db"), source.get("schema"), source.get("table")), (i, payload, source, schema)


def fast_group(parser: DebeziumJsonParser, records: list[KafkaRecord], key: tuple, members: list[tuple],
                out: list) -> None:
    """The changes of one table plan's records (``members``: index, payload, source, schema) into ``out``."""
    envelope, db, schema_name, table = key
    if source_names(members[0][2]) is None:  # the names of the key, as the plan's source blocks hold them
        return
    make_row = _ROWS.get(parser.format_name) or _ROWS.setdefault(parser.format_name, _row_maker(parser.format_name))
    try:
        plan = parser.kept(key, _TablePlan, parser.options, members[0][3], db, schema_name, table)
    except (TypeError, AttributeError, ValueError):
        return
    columns = tuple(plan.col_schemas)
    converters = [plan.converter(c) for c in columns]
    types = dict(plan.types)
    types_pair = (list(types), list(types.values()))
    befores, before_refused = convert_images([m[1].get("before") for m in members], columns, converters, _TOAST)
    afters, after_refused = convert_images([m[1].get("after") for m in members], columns, converters, _TOAST)
    names = list(columns)
    keys = parser._fast_keys
    checked: dict[tuple, bool] = parser._fast_names
    where: dict[tuple, Optional[list[int]]] = {}  # primary key → its columns' indices in ``names``
    for j, (i, payload, source, _) in enumerate(members):
        if j in before_refused or j in after_refused:
            continue
        op = _FAST_OPS[payload["op"]]
        before, after = befores[j], afters[j]
        if after is None and op != "delete":
            continue
        raw_key = records[i].key
        try:
            read = keys[raw_key]
        except KeyError:
            read = parser.kafka_key(raw_key)
            if len(keys) >= _MAX_KEYS:
                keys.clear()
            keys[raw_key] = read
        except TypeError:  # a key that is not bytes
            continue
        pk = plan.key_override or (list(read[0]) if read else None)
        if not pk:
            continue
        try:
            if op == "delete":
                key_text = None
                if read:
                    values, key_schema = read
                    key_text = kafka_key_text(FORMAT, values, _key_value_text,
                                              key_fields(key_schema, strict=False) or plan.col_schemas, types)
                image = key_delete_image(FORMAT, pk, None if before is None else dict(zip(names, before)), key_text,
                                         "before", _DELETE_HINT)
                before_pair = (list(image), list(image.values()))
                if any(image.get(k) is None for k in pk):
                    continue
                name_key = (key, tuple(pk), tuple(image))
            else:
                name_key = (key, tuple(pk))
                at = where.get(name_key, where)
                if at is where:
                    at = key_indices(where, name_key, names, pk)
                if at is None or any(after[k] is None for k in at):
                    continue
                before_pair = NO_MAP if before is None else (names, before)
            transaction = payload.get("transaction")
            if type(transaction) is not dict:
                transaction = {}
            tx_id = source.get("txId")
            if tx_id is None:
                tx_id = transaction.get("id")
                if tx_id is None:
                    tx_id = source.get("gtid")
            ts = source.get("ts_ms")
            if ts is None:
                ts = payload.get("ts_ms")
            position = list(source_position(source, payload))
            ts = optional_element(FORMAT, ts, "source.ts_ms")
            tx_seq = optional_element(FORMAT, transaction.get("total_order"), "transaction.total_order")
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            continue
        if not (checked.get(name_key) or names_pass(checked, name_key, lambda: ChangeRecord(
                FORMAT, db, schema_name, table, op, dict.fromkeys(before_pair[0] or ()), dict.fromkeys(names), pk,
                types))):
            continue
        out[i] = [make_row(db, schema_name, table, op, before_pair, NO_MAP if after is None else (names, after),
                           list(pk), types_pair, position, ts, None if tx_id is None else str(tx_id), tx_seq)]
