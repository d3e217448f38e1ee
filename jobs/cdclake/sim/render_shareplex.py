"""Rendering a simulated history as SharePlex JSON messages.

The shape follows the *Shareplex JSON* section of "Alibaba Cloud DTS: data formats of Kafka
messages": one message per operation, ``{"meta": {time, userid, op, scn, rowid, trans, seq, size,
table, idx, posttime}, "data": {...}}`` plus ``"key"`` for updates, every value a string or null,
as SharePlex replicating an Oracle database writes it.
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

#: The SCN of the first transaction and the sequence part of its ``trans`` id, as in the document.
FIRST_SCN = 14_589_063_118_712
FIRST_TRANS_SEQ = 411_499
USERID = 84
#: Oracle's ROWID alphabet (extended ROWID: 6 chars object, 3 file, 6 block, 3 row).
_ROWID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _base64_digits(number: int, width: int) -> str:
    out = []
    for _ in range(width):
        number, digit = divmod(number, 64)
        out.append(_ROWID_ALPHABET[digit])
    return "".join(reversed(out))


def rowid(table_no: int, key: tuple) -> str:
    """A deterministic Oracle extended ROWID (18 characters) for a row of table number ``table_no``."""
    h = zlib.crc32(repr(key).encode("utf-8"))
    return (_base64_digits(78_249 + table_no, 6) + _base64_digits(8, 3)
            + _base64_digits(570_000 + h % 40_000, 6) + _base64_digits(h // 40_000 % 200, 3))


def shareplex_text(col: Column, value: object) -> Optional[str]:
    """A value as SharePlex writes it: text, or None for NULL.

    Decimals plain, floats as ``repr``, timestamps ``YYYY-MM-DDTHH:MM:SS.fffffffff`` (Oracle
    TIMESTAMP, nanoseconds), dates ``YYYY-MM-DDT00:00:00`` (Oracle DATE), booleans ``1``/``0``,
    binary as Base64 (what the parser reads for a ``binary`` column).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, _dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond * 1000:09d}"
    if isinstance(value, _dt.date):
        return value.isoformat() + "T00:00:00"
    return str(value)


def _seconds(ms: int) -> str:
    return ms_to_datetime(ms).strftime("%Y-%m-%dT%H:%M:%S")


def shareplex_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
                   partitions: int = 3, schema: Optional[str] = None, first_scn: int = FIRST_SCN) -> list[Message]:
    """SharePlex JSON messages for every change of ``history``, in commit order.

    One message per row change (the bulk load as inserts): ``meta.op`` ``ins``/``upd``/``del``;
    ``meta.table`` ``SCHEMA.TABLE`` with the schema ``schema`` (default ``database``); ``scn`` a
    decimal string increasing with every transaction (Oracle-style, all operations of a
    transaction share it); ``trans`` ``<undo segment>.<slot>.<sequence>``; ``seq`` from 1 in the
    transaction, ``size`` its operation count, ``idx`` ``seq/size``; ``time`` the commit time
    (UTC, seconds), ``posttime`` the Kafka timestamp's second; ``rowid`` fixed per row key;
    ``userid`` 84. ``data`` is the row for inserts and deletes and only the changed columns (new
    values) for updates, whose ``key`` holds the table's key columns' values before the change.
    Kafka key None; partition ``crc32(rowid) % partitions`` (so one row's changes stay in order);
    Kafka timestamps are commit time + :func:`cdclake.sim.render.delivery_delay_ms`, never
    decreasing. No control records: the simulated history has no DDL or truncates.
    """
    owner = schema or database
    table_no = {name: i for i, name in enumerate(tables)}
    out: list[Message] = []
    scn = first_scn
    last_ts = 0
    for n, tx in enumerate(history):
        crc = zlib.crc32(tx.tx_id.encode("utf-8"))
        scn += 1 + crc % 37
        trans = f"{1 + n % 10}.{crc % 34}.{FIRST_TRANS_SEQ + n}"
        size = len(tx.changes)
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]
            row_id = rowid(table_no[ch.table], ch.key)
            kafka_ts = last_ts = max(last_ts, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i))
            meta = {"time": _seconds(tx.commit_ts_ms), "userid": USERID, "op": ch.op[:3], "scn": str(scn),
                    "rowid": row_id, "trans": trans, "seq": i + 1, "size": size,
                    "table": f"{owner}.{table.name}", "idx": f"{i + 1}/{size}", "posttime": _seconds(kafka_ts)}
            msg: dict = {"meta": meta}
            if ch.op == "update":
                msg["data"] = {c.name: shareplex_text(c, ch.after[c.name]) for c in table.columns  # type: ignore[index]
                               if ch.after[c.name] != ch.before[c.name]}  # type: ignore[index]
                before = ch.before or {}
                msg["key"] = {k: shareplex_text(table.column(k), before[k]) for k in table.primary_key}
            else:
                msg["data"] = {c.name: shareplex_text(c, ch.image[c.name]) for c in table.columns}
            out.append(Message(None, _dumps(msg), kafka_ts, zlib.crc32(row_id.encode()) % partitions,
                               tx.commit_ts_ms, 1))
    return out
