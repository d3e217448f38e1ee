"""Rendering a simulated history as Alibaba Cloud DTS writes it to Kafka in the DTS Avro format.

Each Kafka value is one ``com.alibaba.dts.formats.avro.Record`` written with
``fastavro.schemaless_writer`` and the schema of :mod:`cdclake.formats.dts` (no header), as
"Alibaba Cloud DTS: Data formats of a Kafka cluster" (DTS Avro) and Alibaba's subscription demo
read them. Per transaction: a BEGIN record, one INSERT/UPDATE/DELETE record per row change, a
COMMIT record. Before the first transaction, one DDL record (``CREATE TABLE``) per table; after
the middle transaction an ``ALTER TABLE ... COMMENT`` DDL record; a HEARTBEAT record after every
``heartbeat_every`` transactions. The bulk load at the start is an ordinary transaction (DTS
change tracking reads it from the binlog).

Record fields, as a MySQL source gives them:

- ``id``: a serial from 1 over all records; ``version`` 0; ``source`` MySQL ``8.0.36``.
- ``sourcePosition``: ``"<offset>@<binlog file number>"`` (``"1234@9"``) of the row's rows
  event (BEGIN: the transaction's first event; COMMIT: its last event), ``safeSourcePosition``
  the transaction's start; positions cross ``mysql-bin.000009`` → ``000010``.
- ``sourceTimestamp``: commit time in seconds; ``bornTimestamp`` the same in ms;
  ``sourceTxid``: the transaction's GTID sequence number as text; ``objectName``
  ``"shop.<table>"`` (``"shop"`` for DDL, none for BEGIN/COMMIT/HEARTBEAT).
- ``tags``: ``pk_uk_info`` (``{"PRIMARY":["id"]}``), ``thread_id``, ``server_id``,
  ``readerThroughoutTime`` (Kafka timestamp, ms) and, on BEGIN, ``GTID``.
- ``fields``: ``{name, dataTypeNumber}`` with MySQL type codes (:data:`MYSQL_TYPE_CODES`);
  images: every column, by canonical type: smallint/int/bigint → ``Integer`` (precision = byte
  width 2/4/8; boolean → width 1, value 1/0), float/double → ``Float`` (precision 8, scale 15,
  as DTS writes both; FLOAT columns have type code 4), decimal → ``Decimal`` (Java
  ``BigDecimal.toString()`` text, the value's precision and scale), string → ``Character``
  (utf8mb4), binary → ``Character`` with charset ``binary``, date → ``DateTime`` (year, month,
  day), timestamp → ``DateTime`` with µs in ``millis`` for DATETIME columns and ``Timestamp``
  (epoch seconds, µs) for TIMESTAMP columns; NULL → Avro null.

Kafka: key ``b"shop.<table>"`` for row records, None otherwise; all records in partition 0 by
default (DTS keeps one partition for ordering); with ``partitions`` > 1 a row record goes to
``crc32(objectName) % partitions`` and the others to 0. Kafka timestamps are the commit time plus
:func:`cdclake.sim.render.delivery_delay_ms`, never decreasing.
"""
from __future__ import annotations

import datetime as _dt
import io
import json
import zlib
from decimal import Decimal
from typing import Any, Mapping, Optional, Sequence

import fastavro

from cdclake.formats.dts import NAMESPACE, PARSED_SCHEMA
from cdclake.positions import binlog_file_number
from cdclake.sim.model import DATABASE, Column, Table, Transaction
from cdclake.sim.render import SERVER_ID, Message, delivery_delay_ms
from cdclake.types import TIMESTAMP_TYPES

MYSQL_VERSION = "8.0.36"
#: MySQL column type codes (``dataTypeNumber``) by the type name of ``Column.mysql_type``.
MYSQL_TYPE_CODES = {
    "tinyint": 1, "smallint": 2, "mediumint": 9, "int": 3, "integer": 3, "bigint": 8, "float": 4,
    "double": 5, "real": 5, "decimal": 246, "numeric": 246, "timestamp": 7, "datetime": 12, "date": 10,
    "time": 11, "year": 13, "bit": 16, "json": 245, "enum": 247, "set": 248, "varchar": 253,
    "varbinary": 253, "char": 254, "binary": 254, "tinyblob": 249, "mediumblob": 250, "longblob": 251,
    "blob": 252, "tinytext": 249, "mediumtext": 250, "longtext": 251, "text": 252, "geometry": 255,
}
#: Type code by canonical type, for columns whose MySQL type is not in the table above.
_CTYPE_CODES = {"boolean": 1, "smallint": 2, "int": 3, "bigint": 8, "float": 4, "double": 5, "string": 253,
                "binary": 253, "date": 10, "timestamp": 7, "timestamp_ntz": 12}
_INT_WIDTH = {"boolean": 1, "smallint": 2, "int": 4, "bigint": 8}
_EPOCH = _dt.datetime(1970, 1, 1)


def _base_type(col: Column) -> str:
    return col.mysql_type.split("(", 1)[0].strip().lower()


def type_code(col: Column) -> int:
    """The ``dataTypeNumber`` of a column (MySQL's type code)."""
    fallback = 246 if col.ctype.startswith("decimal") else _CTYPE_CODES.get(col.ctype, 253)
    return MYSQL_TYPE_CODES.get(_base_type(col), fallback)


def _decimal_value(value: Decimal) -> dict:
    sign, digits, exponent = value.as_tuple()
    return {"value": str(value), "precision": len(digits), "scale": -exponent}


def dts_value(col: Column, value: Any) -> Any:
    """The union branch DTS writes for one column value (a ``(type name, record)`` pair, or None)."""
    if value is None:
        return None
    ctype, n = col.ctype, NAMESPACE
    if ctype in _INT_WIDTH:
        return (f"{n}.Integer", {"precision": _INT_WIDTH[ctype], "value": str(int(value))})
    if ctype in ("float", "double"):
        return (f"{n}.Float", {"value": float(value), "precision": 8, "scale": 15})
    if ctype.startswith("decimal"):
        return (f"{n}.Decimal", _decimal_value(Decimal(value)))
    if ctype == "binary":
        return (f"{n}.Character", {"charset": "binary", "value": bytes(value)})
    if ctype == "date":
        return (f"{n}.DateTime", {"year": value.year, "month": value.month, "day": value.day,
                                  "hour": None, "minute": None, "second": None, "millis": None})
    if ctype in TIMESTAMP_TYPES:
        if _base_type(col) == "timestamp":
            delta = value - _EPOCH
            return (f"{n}.Timestamp", {"timestamp": delta.days * 86_400 + delta.seconds,
                                       "millis": delta.microseconds})
        return (f"{n}.DateTime", {"year": value.year, "month": value.month, "day": value.day, "hour": value.hour,
                                  "minute": value.minute, "second": value.second, "millis": value.microsecond})
    return (f"{n}.Character", {"charset": "utf8mb4", "value": str(value).encode("utf-8")})


def _image(table: Table, row: Optional[Mapping]) -> Optional[list]:
    return None if row is None else [dts_value(c, row[c.name]) for c in table.columns]


def encode(record: Mapping[str, Any]) -> bytes:
    """One DTS Avro record as Kafka value bytes (``fastavro.schemaless_writer``, no header)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, PARSED_SCHEMA, dict(record))
    return out.getvalue()


def dts_avro(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
             partitions: int = 1, heartbeat_every: int = 40) -> list[Message]:
    """DTS Avro messages for ``history`` in commit order (see the module docstring)."""
    history = list(history)
    out: list[Message] = []
    serial = 0
    last_ts = 0

    def emit(operation: str, ts_ms: int, kafka_ts: int, position: str, safe: str, txid: str = "",
             object_name: Optional[str] = None, tags: Optional[dict] = None, fields=None, before=None,
             after=None, rows: int = 0) -> None:
        nonlocal serial, last_ts
        serial += 1
        kafka_ts = last_ts = max(last_ts, kafka_ts)
        record = {
            "version": 0, "id": serial, "sourceTimestamp": ts_ms // 1000, "sourcePosition": position,
            "safeSourcePosition": safe, "sourceTxid": txid,
            "source": {"sourceType": "MySQL", "version": MYSQL_VERSION}, "operation": operation,
            "objectName": object_name, "processTimestamps": None,
            "tags": {**(tags or {}), "server_id": str(SERVER_ID), "readerThroughoutTime": str(kafka_ts)},
            "fields": fields, "beforeImages": before, "afterImages": after, "bornTimestamp": ts_ms,
        }
        key = object_name.encode("utf-8") if rows and object_name else None
        part = zlib.crc32(key) % partitions if key and partitions > 1 else 0
        out.append(Message(key, encode(record), kafka_ts, part, ts_ms, rows))

    def pos(file: str, offset: int) -> str:
        return f"{offset}@{binlog_file_number(file)}"

    fields = {name: [{"name": c.name, "dataTypeNumber": type_code(c)} for c in t.columns] for name, t in tables.items()}
    pk_info = {name: json.dumps({"PRIMARY": list(t.primary_key)}, separators=(",", ":")) for name, t in tables.items()}
    if history:
        first = history[0]
        start = pos(first.binlog_file, first.binlog_pos)
        for i, t in enumerate(tables.values()):
            ddl_ms = first.commit_ts_ms - 900 + i
            emit("DDL", ddl_ms, ddl_ms + 300, start, start, object_name=database, after=t.create_sql())
    middle = len(history) // 2
    for n, tx in enumerate(history):
        safe = pos(tx.binlog_file, tx.binlog_pos)
        txid = tx.gtid.rpartition(":")[2]
        thread = {"thread_id": str(tx.thread_id)}
        emit("BEGIN", tx.commit_ts_ms, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, 0), safe, safe, txid,
             tags={**thread, "GTID": tx.gtid})
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]
            operation = ch.op.upper()
            emit(operation, tx.commit_ts_ms, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i + 1),
                 pos(ch.binlog_file, ch.binlog_pos), safe, txid, f"{database}.{ch.table}",
                 {**thread, "pk_uk_info": pk_info[ch.table]}, fields[ch.table],
                 _image(table, ch.before), _image(table, ch.after), rows=1)
        end = tx.changes[-1] if tx.changes else tx
        emit("COMMIT", tx.commit_ts_ms, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, len(tx.changes) + 1),
             pos(end.binlog_file, end.binlog_pos), safe, txid, tags=thread)
        if n == middle and "orders" in tables:
            emit("DDL", tx.commit_ts_ms, tx.commit_ts_ms + 300, pos(end.binlog_file, end.binlog_pos), safe,
                 object_name=database, after=f"ALTER TABLE `{database}`.`orders` COMMENT = 'customer orders'")
        if heartbeat_every and (n + 1) % heartbeat_every == 0:
            emit("HEARTBEAT", tx.commit_ts_ms, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, len(tx.changes) + 2),
                 pos(end.binlog_file, end.binlog_pos), safe)
    return out
