"""Rendering a simulated history as Huawei MRS CDL JSON (``message_version`` 1.0) messages.

The shape follows the CDL JSON sample of "Huawei MRS: CDL JSON and Open-Source Debezium JSON":
a Kafka Connect JSON document ``{"schema", "payload"}`` per row change, as a CDL task reading a
PostgreSQL source writes it (``DATA_STORE`` ``POSTGRESQL``, ``SEG_OWNER`` ``public``).
"""
from __future__ import annotations

import base64
import datetime as _dt
import uuid
import zlib
from decimal import Decimal
from typing import Mapping, Optional, Sequence

from cdclake.sim.model import DATABASE, Column, Table, Transaction, datetime_to_ms
from cdclake.sim.render import Message, _dumps, connect_document, delivery_delay_ms
from cdclake.types import TIMESTAMP_TYPES, to_text

DATA_STORE = "POSTGRESQL"
#: The LSN and transaction id of the first change, as in the document's sample.
FIRST_LSN = 163_955_221_008
FIRST_TX_ID = 57_227_595
HEARTBEAT_INTERVAL_MS = 60_000
CDL_DECIMAL = "com.xxx.cdc.data.Decimal"
_EPOCH_DAY = _dt.date(1970, 1, 1)

_CONNECT = {"bigint": "int64", "int": "int32", "smallint": "int16", "float": "float32", "double": "float64",
            "boolean": "boolean", "binary": "bytes", "string": "string"}


def cdl_field(col: Column) -> dict:
    """The Connect field schema CDL writes for a column of canonical type ``col.ctype``.

    bigint → int64, int → int32, smallint → int16, float → float32, double → float64, boolean,
    binary → bytes (Base64), string; timestamp → int64 ``org.apache.kafka.connect.data.Timestamp``
    (ms), date → int32 ``org.apache.kafka.connect.data.Date`` (days); decimal → string
    ``com.xxx.cdc.data.Decimal`` (no precision or scale, as in the document).
    """
    ctype = col.ctype
    if ctype in TIMESTAMP_TYPES:
        f: dict = {"type": "int64", "optional": col.nullable, "name": "org.apache.kafka.connect.data.Timestamp",
                   "version": 1}
    elif ctype == "date":
        f = {"type": "int32", "optional": col.nullable, "name": "org.apache.kafka.connect.data.Date", "version": 1}
    elif ctype.startswith("decimal"):
        f = {"type": "string", "optional": col.nullable, "name": CDL_DECIMAL}
    else:
        f = {"type": _CONNECT.get(ctype, "string"), "optional": col.nullable}
    f["field"] = col.name
    return f


def cdl_value(col: Column, value: object) -> object:
    """A value as CDL writes it for the field schema of :func:`cdl_field`."""
    if value is None:
        return None
    ctype = col.ctype
    if ctype in TIMESTAMP_TYPES:
        return datetime_to_ms(value)  # type: ignore[arg-type]
    if ctype == "date":
        day = value.date() if isinstance(value, _dt.datetime) else value
        return (day - _EPOCH_DAY).days  # type: ignore[operator]
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if ctype in ("float", "double") or isinstance(value, (int, float, bool, str)):
        return value
    return to_text(value, ctype)


def _row(table: Table, row: Optional[Mapping]) -> Optional[dict]:
    return None if row is None else {c.name: cdl_value(c, row[c.name]) for c in table.columns}


def _header_fields() -> list[dict]:
    return [
        {"type": "string", "optional": False, "field": "DATA_STORE"},
        {"type": "string", "optional": False, "field": "SEG_OWNER"},
        {"type": "string", "optional": False, "field": "TABLE_NAME"},
        {"type": "int64", "optional": False, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1,
         "field": "TIMESTAMP"},
        {"type": "string", "optional": False, "field": "OPERATION"},
        {"type": "string", "optional": True, "field": "LOB_COLUMNS"},
        {"type": "struct", "fields": [{"type": "array", "items": {"type": "struct", "fields": [
            {"type": "string", "optional": False, "field": "name"},
            {"type": "int64", "optional": False, "field": "value"}], "optional": False},
            "optional": False, "field": "properties"}], "optional": False, "name": "transaction",
         "field": "transaction"},
    ]


_TAIL_FIELDS = [
    {"type": "string", "optional": False, "field": "message_version"},
    {"type": "string", "optional": False, "field": "message_type"},
    {"type": "string", "optional": True, "field": "HEARTBEAT_IDENTIFIER"},
]


def cdl_schema(table: Table, schema: str) -> dict:
    """The Connect schema of a CDL JSON 1.0 message for ``table`` (the document's field order)."""
    cols = [cdl_field(c) for c in table.columns]
    unique = [cdl_field(table.column(k)) for k in table.primary_key]
    return {
        "type": "struct",
        "fields": _header_fields() + [
            {"type": "struct", "fields": unique, "optional": True, "name": "unique", "field": "unique"},
            {"type": "struct", "fields": cols, "optional": True, "name": "data", "field": "data"},
            {"type": "struct", "fields": cols, "optional": True, "name": "before", "field": "before"},
        ] + _TAIL_FIELDS,
        "optional": False,
        "name": f"{schema}.{table.name}",
    }


def heartbeat_schema() -> dict:
    """The Connect schema of a CDL heartbeat message (no table, no images)."""
    return {"type": "struct", "fields": _header_fields() + _TAIL_FIELDS, "optional": False, "name": "heartbeat"}


def _change_size(table: Table) -> int:
    """WAL bytes a row change of ``table`` advances the LSN by (a fixed, table-dependent amount)."""
    return 64 + 8 * len(table.columns)


def cdl_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
             partitions: int = 3, schema: str = "public", heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS,
             first_lsn: int = FIRST_LSN, first_tx_id: int = FIRST_TX_ID) -> list[Message]:
    """CDL JSON 1.0 messages for every change of ``history``, in commit order, plus heartbeats.

    Each row change is one message: ``DATA_STORE`` ``POSTGRESQL``, ``SEG_OWNER`` ``schema``,
    ``TIMESTAMP`` the commit time (ms), ``OPERATION`` ``INSERT``/``UPDATE``/``DELETE`` (the bulk
    load is rendered as inserts), ``transaction.properties`` with an ``lsn`` that increases with
    every change (transactions advance it by a commit record too) and the ``txId`` (one per
    transaction, increasing), ``unique`` the primary-key values, ``data``/``before`` the full
    images (a table with REPLICA IDENTITY FULL), ``message_type`` ``"0"`` and the task's
    ``HEARTBEAT_IDENTIFIER`` (a UUID fixed per ``database``). CDL JSON 1.0 names no database, so
    ``database`` only seeds that identifier.

    Heartbeats: whenever ``heartbeat_interval_ms`` has passed since the last one, a heartbeat is
    sent before the next transaction (``message_type`` ``"1"``, no ``OPERATION``, table or images,
    ``TIMESTAMP`` the heartbeat time, the current ``lsn``). Kafka key: the ``unique`` object as
    JSON (None for heartbeats, sent to partition 0); partition ``crc32(key) % partitions``; Kafka
    timestamps are commit time + :func:`cdclake.sim.render.delivery_delay_ms`, never decreasing.
    """
    history = list(history)
    identifier = str(uuid.uuid5(uuid.NAMESPACE_URL, f"cdl://{database}/{schema}"))
    schemas = {name: _dumps(cdl_schema(t, schema)) for name, t in tables.items()}
    heartbeat_json = _dumps(heartbeat_schema())
    out: list[Message] = []
    lsn = first_lsn
    last_ts = 0
    next_heartbeat = history[0].commit_ts_ms if history else 0

    def heartbeat(ts: int) -> None:
        nonlocal last_ts
        payload = {"DATA_STORE": DATA_STORE, "SEG_OWNER": schema, "TABLE_NAME": None, "TIMESTAMP": ts,
                   "OPERATION": None, "LOB_COLUMNS": None,
                   "transaction": {"properties": [{"name": "lsn", "value": lsn}]},
                   "message_version": "1.0", "message_type": "1", "HEARTBEAT_IDENTIFIER": identifier}
        kafka_ts = last_ts = max(last_ts, ts + 50)
        out.append(Message(None, connect_document(heartbeat_json, payload), kafka_ts, 0, ts, 0))

    for n, tx in enumerate(history):
        while heartbeat_interval_ms > 0 and next_heartbeat < tx.commit_ts_ms:
            heartbeat(next_heartbeat)
            next_heartbeat += heartbeat_interval_ms
        tx_id = first_tx_id + n
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]
            lsn += _change_size(table)
            unique = {k: cdl_value(table.column(k), v) for k, v in zip(table.primary_key, ch.key)}
            payload = {
                "DATA_STORE": DATA_STORE, "SEG_OWNER": schema, "TABLE_NAME": table.name,
                "TIMESTAMP": tx.commit_ts_ms, "OPERATION": ch.op.upper(), "LOB_COLUMNS": None,
                "transaction": {"properties": [{"name": "lsn", "value": lsn}, {"name": "txId", "value": tx_id}]},
                "unique": unique, "data": _row(table, ch.after), "before": _row(table, ch.before),
                "message_version": "1.0", "message_type": "0", "HEARTBEAT_IDENTIFIER": identifier,
            }
            key = _dumps(unique)
            kafka_ts = last_ts = max(last_ts, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i))
            value = connect_document(schemas[ch.table], payload)
            out.append(Message(key, value, kafka_ts, zlib.crc32(key) % partitions, tx.commit_ts_ms, 1))
        lsn += 48  # the commit record
    return out
