"""The columnar fast path of ``qlik-json`` and ``qlik-avro`` (:meth:`QlikParser.fast_parse
<cdclake.formats.qlik.parser.QlikParser.fast_parse>`): data messages grouped by table definition and
image columns, each column converted over the batch with the converters of
:func:`~cdclake.formats.qlik.values.value_text`; masks, keys, positions and names through the
functions the per-record parser calls.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from cdclake.formats.columnar import NO_MAP, convert_images, row_maker
from cdclake.formats.fields import integer
from cdclake.formats.options import key_delete_image
from cdclake.formats.qlik.schema import AVRO_FORMAT, JSON_FORMAT, QlikTable
from cdclake.formats.qlik.values import transaction_last_event, value_converter
from cdclake.names import check_names
from cdclake.positions import as_element
from cdclake.record import ChangeRecord, KafkaRecord, ParseError
from cdclake.formats.qlik.schema import OPS, REFRESH_POSITION, _DELETE_HINT

if TYPE_CHECKING:
    from cdclake.formats.qlik.parser import QlikParser

#: The fast path's change row of a data message, per format.
_ROWS = {fmt: row_maker("source_schema", "source_table", "op", "before", "after", "primary_key", "column_types",
                        "source_position", "source_ts_ms", "tx_id", "tx_seq", "tx_last", source_format=fmt,
                        source_database=None)
         for fmt in (JSON_FORMAT, AVRO_FORMAT)}


def fast_members(parser: QlikParser, records: list[KafkaRecord]) -> Iterator[tuple[tuple, tuple]]:
    """:meth:`QlikParser.fast_members`: see there."""
    memo: dict = {}
    for i, rec in enumerate(records):
        try:
            found = parser._fast_message(rec, memo)
            if found is None:
                continue
            table, message = found
            headers = message.get("headers")
            if type(headers) is not dict:
                continue
            operation = headers.get("operation")
            if type(operation) is not str or not operation:
                continue
            op = OPS.get(operation.upper())
            if op is None:
                continue
            row = message.get("data")
            if op == "delete" and row is None:
                row = message.get("beforeData")
            if type(row) is not dict:
                continue
            columns = tuple(row)
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            continue
        yield (id(table), columns), (i, message, headers, op, row, table)


#: Timestamps whose milliseconds a parser keeps (:attr:`QlikParser._fast_times`).
_MAX_TIMES = 4096


def fast_group(parser: QlikParser, records: list[KafkaRecord], key: tuple, members: list[tuple], out: list) -> None:
    """The changes of one table definition's records whose image names the same columns (``key``:
    the definition's id and the columns; ``members``: index, data message, headers, op, image,
    definition) into ``out``."""
    columns, table = key[1], members[0][5]
    timestamps = parser._fast_times
    fmt, options = parser.format_name, parser.options
    make_row = _ROWS[fmt]
    known = table.by_name
    extra_types = options.column_types(None, table.schema, table.table)
    pk = list(options.key_override(None, table.schema, table.table) or table.primary_key)
    if not pk:
        return
    types = {c.name: c.ctype for c in table.columns}
    ctypes = [known[c].ctype if c in known else extra_types.get(c, "string") for c in columns]
    for col, ctype in zip(columns, ctypes):
        if col not in known:
            types.setdefault(col, ctype)
    try:
        check_names(ChangeRecord(fmt, None, table.schema, table.table, "insert", None, None, pk, types))
    except ParseError:
        return
    types_pair = (list(types), list(types.values()))
    converters = [value_converter(t) for t in ctypes]
    afters, after_refused = convert_images([m[4] if m[3] != "delete" else None for m in members], columns, converters)
    befores, before_refused = convert_images(
        [m[4] if m[3] == "delete" else m[1].get("beforeData") if m[3] == "update" else None for m in members],
        columns, converters)
    column_masks: dict = {}
    change_masks: dict = {}
    timestamp_ms = parser._timestamp_ms
    for j, (i, message, headers, op, row, _) in enumerate(members):
        if j in after_refused or j in before_refused:
            continue
        try:
            mask = headers.get("columnMask")
            at = column_masks.get((type(mask), mask), False)
            if at is False:
                at = column_masks[(type(mask), mask)] = _mask_plan(table, columns, known, pk, mask)
            mask = headers.get("changeMask")
            if (type(mask), mask) not in change_masks:
                change_masks[(type(mask), mask)] = table.columns_in(mask)
            names, selected, pk_at = at
            after, before = afters[j], befores[j]
            if selected is not None:
                after = None if after is None else [after[k] for k in selected]
                before = None if before is None else [before[k] for k in selected]
            if op == "delete":
                image = key_delete_image(fmt, pk, dict(zip(names, before)), None,
                                         "data" if message.get("data") is not None else "beforeData", _DELETE_HINT)
                before_pair, after_pair = (list(image), list(image.values())), NO_MAP
            else:
                if pk_at is None or any(after[k] is None for k in pk_at):
                    continue
                before_pair, after_pair = NO_MAP if before is None else (names, before), (names, after)
            if op == "snapshot":
                position = list(REFRESH_POSITION)
            else:
                seq = headers.get("changeSequence")
                if seq is None or seq == "":
                    continue
                position = [as_element(seq, "changeSequence")]
            ts = headers.get("timestamp")
            if type(ts) is str:
                ts_ms = timestamps.get(ts, timestamps)
                if ts_ms is timestamps:
                    if len(timestamps) >= _MAX_TIMES:
                        timestamps.clear()
                    ts_ms = timestamps[ts] = timestamp_ms(ts)
            else:
                ts_ms = timestamp_ms(ts)
            tx_id = headers.get("transactionId")
            tx_id = (tx_id if tx_id is None or isinstance(tx_id, str) else str(tx_id)) or None
            tx_seq = integer(fmt, headers.get("transactionEventCounter"), "headers.transactionEventCounter", None)
            tx_last = transaction_last_event(headers)
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            continue
        out[i] = [make_row(table.schema, table.table, op, before_pair, after_pair, list(pk), types_pair, position,
                           ts_ms, tx_id, tx_seq, tx_last)]


def _mask_plan(table: QlikTable, columns: tuple, known: dict, pk: list, mask: Any) -> tuple:
    """``(names, selected, pk_at)`` of a ``columnMask`` for images of ``columns``: the names an
    image keeps, their indices in ``columns`` (None: all), the key columns' indices in ``names``
    (None: a key column is not kept). Raises as :meth:`QlikTable.columns_in` does."""
    present = table.columns_in(mask)
    if present is None:
        selected = list(range(len(columns)))
    else:
        present = set(present)
        selected = [k for k, c in enumerate(columns) if c not in known or c in present]
    names = [columns[k] for k in selected]
    pk_at = [names.index(k) for k in pk] if all(k in names for k in pk) else None
    return names, None if len(selected) == len(columns) else selected, pk_at
