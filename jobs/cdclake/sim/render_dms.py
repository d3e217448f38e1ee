"""Rendering a simulated history as AWS DMS messages on a Kafka target.

The shape follows "Using Apache Kafka as a target for AWS Database Migration Service" (AWS DMS
User Guide): one message per row, ``{"data": {...}, "metadata": {...}}``, with the endpoint set to
``IncludeTransactionDetails`` and ``IncludeNullAndEmpty`` true, ``IncludeControlDetails`` true,
``partition-key-type`` ``schema-table``, and the task's ``BeforeImageSettings`` ``{"EnableBeforeImage":
true, "FieldName": "before-image", "ColumnFilter": "pk-only"}``, as DMS replicating a MySQL
database (full load, then CDC) writes it.
"""
from __future__ import annotations

import datetime as _dt
import json
import zlib
from decimal import Decimal
from typing import Any, Mapping, Optional, Sequence

from cdclake.sim.model import DATABASE, Table, Transaction, ms_to_datetime
from cdclake.sim.render import Message, delivery_delay_ms

#: The task's resource id (DMS names control records' partition values after it).
TASK_ID = "7VXBCPZ3LQ4KTS5MHAWJ2YNUOE"
#: The ``BeforeImageSettings`` ``FieldName`` the rendering uses.
BEFORE_IMAGE_FIELD = "before-image"
#: The first transaction id (DMS's MySQL transaction ids are integers).
FIRST_TRANSACTION_ID = 9_324_410_911_751
#: DMS's ``create-table`` column types per canonical type (``IncludeControlDetails``).
_DMS_TYPES = {"bigint": "INT8", "int": "INT4", "double": "REAL8", "string": "STRING", "timestamp": "DATETIME",
              "timestamp_ntz": "DATETIME",
              "date": "DATE", "binary": "BYTES"}


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _iso(ms: int) -> str:
    return ms_to_datetime(ms).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def dms_value(value: Any) -> Any:
    """A value as DMS writes it to JSON: integers and doubles as numbers, decimals as their text
    (exact), timestamps ``YYYY-MM-DDTHH:MM:SS.ffffffZ``, dates ``YYYY-MM-DD``, binary as ``0x`` and
    upper-case hexadecimal digits (``NoHexPrefix`` false), None as null."""
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex().upper()
    if isinstance(value, _dt.datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value


def _control(table: Table, schema: str, ts: int) -> dict:
    columns = {}
    for c in table.columns:
        spec: dict = {"type": "NUMERIC" if c.ctype.startswith("decimal") else _DMS_TYPES[c.ctype]}
        if c.ctype.startswith("decimal"):
            p, s = c.ctype[len("decimal("):-1].split(",")
            spec.update(precision=int(p), scale=int(s))
        spec["nullable"] = c.nullable
        columns[c.name] = spec
    return {"control": {"table-def": {"columns": columns, "primary-key": list(table.primary_key)}},
            "metadata": {"timestamp": _iso(ts), "record-type": "control", "operation": "create-table",
                         "partition-key-type": "task-id", "partition-key-value": TASK_ID,
                         "schema-name": schema, "table-name": table.name}}


def dms_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
             partitions: int = 3, schema: Optional[str] = None) -> list[Message]:
    """AWS DMS messages for every change of ``history``, in commit order.

    A ``create-table`` control record per table before its first row (``control.table-def``,
    partition value the task id); then one data record per row change: the bulk load as
    ``load`` rows without transaction details, later changes as ``insert``/``update``/``delete``
    with ``transaction-id`` (an integer increasing per transaction), ``transaction-record-id``
    (from 1 in the transaction), ``prev-transaction-id``/``prev-transaction-record-id`` (the
    record sent before it) and ``commit-timestamp`` (µs). ``data`` is the whole row (the after
    image; a delete's before image), nulls included; an update carries ``before-image`` with the
    key columns' values before it. ``schema-name`` is ``schema`` (default ``database``). Kafka
    key ``schema.table``, partition ``crc32(schema.table) % partitions`` (``schema-table``: one
    table's records in one partition, in commit order); Kafka timestamps are commit time +
    :func:`cdclake.sim.render.delivery_delay_ms`, never decreasing; ``metadata.timestamp`` is the
    Kafka timestamp (when DMS built the message).
    """
    owner = schema or database
    out: list[Message] = []
    last_ts = 0
    created: set[str] = set()
    tx_number = FIRST_TRANSACTION_ID
    prev: Optional[tuple[int, int]] = None
    for n, tx in enumerate(history):
        if not tx.snapshot:
            tx_number += 1 + zlib.crc32(tx.tx_id.encode("utf-8")) % 97
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]
            name = f"{owner}.{table.name}"
            partition = zlib.crc32(name.encode("utf-8")) % partitions
            kafka_ts = last_ts = max(last_ts, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i))
            if table.name not in created:
                created.add(table.name)
                out.append(Message(f"{TASK_ID}.{name}".encode("utf-8"), _dumps(_control(table, owner, kafka_ts)),
                                   kafka_ts, partition, tx.commit_ts_ms, 0))
            meta: dict = {"timestamp": _iso(kafka_ts), "record-type": "data",
                          "operation": "load" if tx.snapshot else ch.op, "partition-key-type": "schema-table",
                          "schema-name": owner, "table-name": table.name}
            if not tx.snapshot:
                meta["transaction-id"] = tx_number
                meta["transaction-record-id"] = i + 1
                if prev is not None:
                    meta["prev-transaction-id"], meta["prev-transaction-record-id"] = prev
                meta["commit-timestamp"] = _iso(tx.commit_ts_ms)
                prev = (tx_number, i + 1)
            msg: dict = {"data": {c.name: dms_value(ch.image[c.name]) for c in table.columns}}
            if ch.op == "update" and not tx.snapshot:
                before = ch.before or {}
                msg[BEFORE_IMAGE_FIELD] = {k: dms_value(before[k]) for k in table.primary_key}
            msg["metadata"] = meta
            out.append(Message(name.encode("utf-8"), _dumps(msg), kafka_ts, partition, tx.commit_ts_ms, 1))
    return out
