"""Rendering a simulated history as Oracle GoldenGate for Big Data's Kafka Handler writes it (JSON Formatter).

The shape follows *Operation Formatted JSON* of "Oracle GoldenGate for Big Data: Using the
Pluggable Formatters" (see :mod:`cdclake.formats.ogg`), with ``includePrimaryKeys=true`` and the
transaction id and commit sequence number in the metadata: one message per operation,
``{"table", "op_type", "op_ts", "current_ts", "pos", "csn", "xid", "primary_keys", "before",
"after"}``.
"""
from __future__ import annotations

import base64
import datetime as _dt
import json
import zlib
from decimal import Decimal
from typing import Mapping, Optional, Sequence

from cdclake.sim.model import DATABASE, Column, Table, Transaction, ms_to_datetime
from cdclake.sim.render import Message, delivery_delay_ms

#: The trail file's header: the RBA of a trail file's first record.
FIRST_RBA = 1416
#: A trail file is rolled over to the next sequence number past this many bytes (GoldenGate's
#: ``MEGABYTES`` option; small here so that a simulated history spans several trail files).
TRAIL_BYTES = 400_000
#: Bytes a trail record adds to its column data (record header, token area).
RECORD_OVERHEAD = 74
#: The commit sequence number of the first transaction.
FIRST_CSN = 5_210_388
#: Tables whose deletes carry only the key (the source logs only the key of a deleted row).
KEY_ONLY_DELETES = frozenset({"orders"})


class _Raw(str):
    """JSON number text written as it is (a decimal with its scale, as GoldenGate writes NUMBER)."""


def ogg_value(col: Column, value: object) -> object:
    """A value as the JSON Formatter writes it: integers and doubles as JSON numbers, decimals as
    JSON numbers with their scale, datetimes as GoldenGate's ``YYYY-MM-DD:HH:MM:SS.ffffff``, dates
    ``YYYY-MM-DD``, binary as Base64 text, text as text; None for NULL."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return _Raw(format(value, "f"))
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, _dt.datetime):
        return value.strftime("%Y-%m-%d:%H:%M:%S.%f")
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


def _dumps(obj: dict) -> bytes:
    """Compact JSON with :class:`_Raw` decimals written as number text."""
    raws: list[str] = []

    def mark(value: object) -> object:
        if isinstance(value, _Raw):
            raws.append(str(value))
            return f"\x00{len(raws) - 1}\x00"
        if isinstance(value, dict):
            return {k: mark(v) for k, v in value.items()}
        return value

    text = json.dumps(mark(obj), separators=(",", ":"), ensure_ascii=False)
    for n, raw in enumerate(raws):
        text = text.replace(f'"\\u0000{n}\\u0000"', raw, 1)
    return text.encode("utf-8")


def _ts(ms: int, sep: str) -> str:
    return ms_to_datetime(ms).strftime(f"%Y-%m-%d{sep}%H:%M:%S.%f")


def ogg_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
             partitions: int = 3, schema: Optional[str] = None) -> list[Message]:
    """GoldenGate JSON messages for every change of ``history``, in commit order.

    One message per row change (the bulk load as inserts): ``table`` ``SCHEMA.TABLE`` with the
    schema ``schema`` (default ``database``); ``op_type`` ``I``/``U``/``D``; ``op_ts`` the commit
    time (UTC, µs) and ``current_ts`` the Kafka timestamp; ``pos`` the trail position, a
    10-digit trail sequence number then a 10-digit RBA: the RBA grows by each record's size and the
    trail rolls over to the next sequence number past :data:`TRAIL_BYTES`; ``csn`` a decimal
    string increasing with every transaction; ``xid`` the transaction id; ``primary_keys`` the
    table's key. An update's ``before`` is the full row and its ``after`` only the key and the
    changed columns (a compressed update); an insert's ``after`` is the row; a delete's ``before``
    is the row, or only the key for the tables of :data:`KEY_ONLY_DELETES`. Values: see
    :func:`ogg_value`. Kafka key: the key values concatenated (the Kafka Handler's default
    ``${primaryKeys}`` template), partition ``crc32(key) % partitions``; Kafka timestamps are
    commit time + :func:`cdclake.sim.render.delivery_delay_ms`, never decreasing. No truncates
    (the simulated history has none).
    """
    owner = schema or database
    out: list[Message] = []
    seqno, rba = 0, FIRST_RBA
    csn = FIRST_CSN
    last_ts = 0
    for tx in history:
        csn += 1 + zlib.crc32(tx.tx_id.encode("utf-8")) % 29
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]
            kafka_ts = last_ts = max(last_ts, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i))
            key_cols = list(table.primary_key)
            if ch.op == "update":
                before = ch.before or {}
                after = ch.after or {}
                images = {"before": {c.name: ogg_value(c, before[c.name]) for c in table.columns},
                          "after": {c.name: ogg_value(c, after[c.name]) for c in table.columns
                                    if c.name in key_cols or after[c.name] != before[c.name]}}
            elif ch.op == "delete":
                before = ch.before or {}
                images = {"before": {c.name: ogg_value(c, before[c.name]) for c in table.columns
                                     if ch.table not in KEY_ONLY_DELETES or c.name in key_cols},
                          "after": None}
            else:
                images = {"before": None, "after": {c.name: ogg_value(c, ch.image[c.name]) for c in table.columns}}
            msg = {"table": f"{owner}.{table.name}", "op_type": ch.op[0].upper(),
                   "op_ts": _ts(tx.commit_ts_ms, " "), "current_ts": _ts(kafka_ts, "T"),
                   "pos": f"{seqno:010d}{rba:010d}", "csn": str(csn), "xid": tx.tx_id,
                   "primary_keys": key_cols, **images}
            value = _dumps(msg)
            key = "".join(str(ogg_value(table.column(k), ch.image[k])) for k in key_cols).encode("utf-8")
            out.append(Message(key, value, kafka_ts, zlib.crc32(key) % partitions, tx.commit_ts_ms, 1))
            rba += len(value) + RECORD_OVERHEAD
            if rba > TRAIL_BYTES:
                seqno, rba = seqno + 1, FIRST_RBA
    return out
