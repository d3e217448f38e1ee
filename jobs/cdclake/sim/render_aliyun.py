"""Rendering a simulated history as Alibaba Cloud DataWorks writes it to Kafka (``aliyun-json``).

Follows "DataWorks: Appendix: Message formats" (Alibaba Cloud documentation): one JSON message per
row change, ``{"schema": {...}, "payload": {...}, "version": "0.0.1"}``:

- ``schema.dataColumn``: the table's columns in order, ``{"name", "type"}`` with the document's
  types: smallint/int/bigint ``LONG``; float, double and decimal ``DOUBLE``; boolean
  ``BOOLEAN``; string ``STRING``; binary ``BYTES``; date and timestamp ``DATE``.
  ``schema.primaryKey`` the key columns, ``schema.source`` ``dbType`` ``MySQL``, ``dbName``,
  ``tableName``.
- Values: integers and floats as JSON numbers, decimals as text with their scale's digits (as in
  Apache Paimon's aliyun test messages: ``"1.100000"``), booleans as JSON booleans, binary as
  Base64 text, dates and timestamps as epoch milliseconds (a date at UTC midnight).
- ``payload.op``: the bulk load at the start of the history is the full load: ``INSERT`` with
  ``sequenceId`` ``"-1"`` and ``eventTime``/``checkpointTime`` ``-1``. Streamed changes: ``INSERT``
  (``after``), ``DELETE`` (``before``) and updates, about a third of them as two messages
  (``UPDATE_BEFORE`` with ``before``, then ``UPDATE_AFTER`` with ``after``), the others "in one"
  (``UPDATE_AFTER`` with ``before`` and ``after``); the absent image is ``null``.
- ``payload.sequenceId``: decimal text, increasing with every message: the commit time in ms
  times 10**6 plus a counter (Paimon's messages: ``1731663842292000001``).
- ``payload.timestamp``: ``eventTime`` the commit time, ``checkpointTime`` the same,
  ``systemTime`` the Kafka timestamp; ``payload.ddl`` null.

Kafka key None (DataWorks shards by primary key); partition ``crc32(table and key) % partitions``
so that a row's changes stay in order; Kafka timestamps are the commit time plus
:func:`cdclake.sim.render.delivery_delay_ms`, never decreasing. All tables go into one list.
"""
from __future__ import annotations

import base64
import datetime as _dt
import json
import zlib
from decimal import Decimal
from typing import Mapping, Optional, Sequence

from cdclake.sim.model import DATABASE, Column, Table, Transaction, datetime_to_ms
from cdclake.sim.render import Message, delivery_delay_ms

_EPOCH_DATE = _dt.date(1970, 1, 1)
_TYPES = {"smallint": "LONG", "int": "LONG", "bigint": "LONG", "float": "DOUBLE", "double": "DOUBLE",
          "boolean": "BOOLEAN", "string": "STRING", "binary": "BYTES", "date": "DATE", "timestamp": "DATE",
          "timestamp_ntz": "DATE"}


def aliyun_type(col: Column) -> str:
    """The document's type of a column (decimals are ``DOUBLE``)."""
    return "DOUBLE" if col.ctype.startswith("decimal") else _TYPES[col.ctype]


def aliyun_value(col: Column, value: object) -> object:
    """A value as DataWorks writes it (see the module docstring); None stays None."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, _dt.datetime):
        return datetime_to_ms(value)
    if isinstance(value, _dt.date):
        return (value - _EPOCH_DATE).days * 86_400_000
    return value


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def aliyun_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
                partitions: int = 2, split_every: int = 3) -> list[Message]:
    """DataWorks JSON messages for every change of ``history``, in commit order (see the module
    docstring); every ``split_every``-th update (by a hash of its transaction and index) is sent
    as ``UPDATE_BEFORE`` + ``UPDATE_AFTER``. ``Message.rows`` counts the history's row changes a
    message completes (the ``UPDATE_AFTER`` half carries the update)."""
    schemas = {name: {"dataColumn": [{"name": c.name, "type": aliyun_type(c)} for c in t.columns],
                      "primaryKey": list(t.primary_key),
                      "source": {"dbType": "MySQL", "dbName": database, "tableName": name}}
               for name, t in tables.items()}
    out: list[Message] = []
    last_ts = 0
    seq = 0
    for tx in history:
        n = 0
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]

            def image(row: Optional[Mapping]) -> Optional[dict]:
                return None if row is None else {"dataColumn": {c.name: aliyun_value(c, row[c.name])
                                                                for c in table.columns}}

            if tx.snapshot:
                events = [("INSERT", None, ch.after)]
            elif ch.op == "insert":
                events = [("INSERT", None, ch.after)]
            elif ch.op == "delete":
                events = [("DELETE", ch.before, None)]
            elif zlib.crc32(f"{tx.tx_id}/{i}".encode()) % split_every == 0:
                events = [("UPDATE_BEFORE", ch.before, None), ("UPDATE_AFTER", None, ch.after)]
            else:
                events = [("UPDATE_AFTER", ch.before, ch.after)]
            part = zlib.crc32(repr((ch.table, ch.key)).encode("utf-8")) % partitions
            for j, (op, before, after) in enumerate(events):
                kafka_ts = last_ts = max(last_ts, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, n))
                n += 1
                if tx.snapshot:
                    sequence, stamp = "-1", {"eventTime": -1, "systemTime": kafka_ts, "checkpointTime": -1}
                else:
                    seq = max(seq + 1, tx.commit_ts_ms * 1_000_000)
                    sequence = str(seq)
                    stamp = {"eventTime": tx.commit_ts_ms, "systemTime": kafka_ts, "checkpointTime": tx.commit_ts_ms}
                payload = {"before": image(before), "after": image(after), "sequenceId": sequence,
                           "timestamp": stamp, "op": op, "ddl": None}
                value = _dumps({"schema": schemas[ch.table], "payload": payload, "version": "0.0.1"})
                out.append(Message(None, value, kafka_ts, part, tx.commit_ts_ms, 1 if j == len(events) - 1 else 0))
    return out
