"""Rendering a simulated history as the Kafka messages a CDC tool would produce.

Two wire formats:

- :func:`debezium_json` — Debezium's MySQL connector through Kafka Connect's JsonConverter
  (``{"schema": ..., "payload": ...}`` envelope when ``schemas.enable`` is on), one message per
  row change plus a tombstone after each delete; the bulk load at the start is rendered as the
  connector's initial snapshot (op ``r``).
- :func:`canal_json` — Canal's flat messages as its MQ producer writes them (``flatMessage``),
  one message per rows event (a run of same-table same-op changes of one transaction), plus
  DDL messages (``CREATE TABLE`` before the data, one ``ALTER TABLE ... COMMENT`` mid-stream)
  that change no data.

Timestamps: a message's Kafka timestamp is its commit time plus a deterministic delay in
``[200, 900)`` ms (:func:`delivery_delay_ms`), raised where needed so that timestamps never
decrease along the list (as a producer's send times do); it stays below commit + 900 ms. So a
change committed in the last 900 ms of an hour may carry a Kafka timestamp in the next hour (the simulated source commits one transaction
150 ms before every interior hour boundary, so this always happens once per boundary), and a
change committed earlier never does. Every commit is at least 1 s before the end of the
simulated range, so every Kafka timestamp stays inside it.

All tables go into the one list (one topic), as with a topic-routing transform; each message
names its table.
"""
from __future__ import annotations

import base64
import datetime as _dt
import json
import zlib
from dataclasses import dataclass
from decimal import Decimal
from typing import Iterable, Mapping, Optional, Sequence

from cdclake.sim.model import DATABASE, TABLES, RowChange, State, Table, Transaction, apply_change, datetime_to_ms
from cdclake.types import TIMESTAMP_TYPES, decimal_precision_scale

DEBEZIUM_VERSION = "1.5.4.Final"
SERVER_ID = 223344

#: java.sql.Types codes of the MySQL column types the simulated tables use (Canal ``sqlType``).
SQL_TYPES = {"bigint": -5, "int": 4, "varchar": 12, "decimal": 3, "double": 8, "datetime": 93, "date": 91,
             "varbinary": -3}


@dataclass(frozen=True)
class Message:
    """One Kafka message to produce.

    Not sent to Kafka: ``commit_ts_ms``, the source commit time of the change(s) it carries (for
    DDL messages, the time the statement ran), and ``rows``, how many row changes of the history
    it carries (0 for tombstones and DDL), in history order.
    """

    key: Optional[bytes]
    value: Optional[bytes]
    timestamp_ms: int
    partition: int
    commit_ts_ms: Optional[int] = None
    rows: int = 0


def delivery_delay_ms(tx_id: str, index: int) -> int:
    """The deterministic delay in ``[200, 900)`` ms between a commit and its Kafka timestamp."""
    return 200 + zlib.crc32(f"{tx_id}/{index}".encode()) % 700


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def connect_document(schema_json: bytes, payload: object) -> bytes:
    """A Kafka Connect JsonConverter document ``{"schema": ..., "payload": payload}`` with the
    schema given already serialized (``_dumps(schema)``, once per table): the bytes
    ``_dumps({"schema": schema, "payload": payload})`` gives, without serializing the schema (most
    of a Debezium, Replicant or CDL message) again for every message."""
    return b'{"schema":' + schema_json + b',"payload":' + _dumps(payload) + b"}"


def _partition(data: bytes, partitions: int) -> int:
    return zlib.crc32(data) % partitions


# ---------------------------------------------------------------------------------------------
# Debezium


def decimal_to_base64(value: Decimal, scale: int) -> str:
    """Kafka Connect ``Decimal``: Base64 of the unscaled value's big-endian two's complement
    (minimal length, as Java's ``BigInteger.toByteArray``)."""
    unscaled = int(value.scaleb(scale).to_integral_value())
    length = ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode("ascii")


def decimal_from_base64(text: str, scale: int) -> Decimal:
    """Inverse of :func:`decimal_to_base64`."""
    unscaled = int.from_bytes(base64.b64decode(text), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def _connect_field(col) -> dict:
    ctype = col.ctype
    if ctype == "bigint":
        f: dict = {"type": "int64", "optional": col.nullable}
    elif ctype == "int":
        f = {"type": "int32", "optional": col.nullable}
    elif ctype == "double":
        f = {"type": "double", "optional": col.nullable}
    elif ctype in TIMESTAMP_TYPES:
        f = {"type": "int64", "optional": col.nullable, "name": "io.debezium.time.Timestamp", "version": 1}
    elif ctype == "date":
        f = {"type": "int32", "optional": col.nullable, "name": "io.debezium.time.Date", "version": 1}
    elif ctype == "binary":
        f = {"type": "bytes", "optional": col.nullable}
    elif ctype.startswith("decimal"):
        p, s = decimal_precision_scale(ctype)  # type: ignore[misc]
        f = {"type": "bytes", "optional": col.nullable, "name": "org.apache.kafka.connect.data.Decimal",
             "version": 1, "parameters": {"scale": str(s), "connect.decimal.precision": str(p)}}
    else:
        f = {"type": "string", "optional": col.nullable}
    f["field"] = col.name
    return f


def _debezium_value(col, value: object) -> object:
    if value is None:
        return None
    if col.ctype.startswith("decimal"):
        return decimal_to_base64(value, decimal_precision_scale(col.ctype)[1])  # type: ignore[arg-type,index]
    if col.ctype in TIMESTAMP_TYPES:
        return datetime_to_ms(value)  # type: ignore[arg-type]
    if col.ctype == "date":
        return (value - _dt.date(1970, 1, 1)).days  # type: ignore[operator]
    if col.ctype == "binary":
        return base64.b64encode(value).decode("ascii")  # type: ignore[arg-type]
    return value


def _debezium_row(table: Table, row: Optional[Mapping]) -> Optional[dict]:
    if row is None:
        return None
    return {c.name: _debezium_value(c, row[c.name]) for c in table.columns}


def debezium_source_schema(connector: str, snapshot_values: str, fields: list[dict]) -> dict:
    """The Connect schema of a Debezium envelope's ``source`` block: the fields every connector
    has (``version``, ``connector``, ``name``, ``ts_ms``, ``snapshot`` as the Enum of
    ``snapshot_values``, ``db``), then the connector's own ``fields``; named
    ``io.debezium.connector.<connector>.Source``."""
    common = [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
         "parameters": {"allowed": snapshot_values}, "default": "false", "field": "snapshot"},
        {"type": "string", "optional": False, "field": "db"},
    ]
    return {"type": "struct", "fields": common + fields, "optional": False,
            "name": f"io.debezium.connector.{connector}.Source", "field": "source"}


#: The MySQL connector's ``source`` block (binlog file, position and row).
MYSQL_SOURCE_SCHEMA = debezium_source_schema("mysql", "true,last,false", [
    {"type": "string", "optional": True, "field": "table"},
    {"type": "int64", "optional": False, "field": "server_id"},
    {"type": "string", "optional": True, "field": "gtid"},
    {"type": "string", "optional": False, "field": "file"},
    {"type": "int64", "optional": False, "field": "pos"},
    {"type": "int32", "optional": False, "field": "row"},
    {"type": "int64", "optional": True, "field": "thread"},
    {"type": "string", "optional": True, "field": "query"},
])

#: The ``transaction`` block of a Debezium envelope's Connect schema (``provide.transaction.metadata``),
#: the same in every connector.
TRANSACTION_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


def debezium_value_schema(table: Table, server_name: str, database: str) -> dict:
    """The Connect schema of a Debezium MySQL change event value for ``table``."""
    prefix = f"{server_name}.{database}.{table.name}"
    row = {"type": "struct", "fields": [_connect_field(c) for c in table.columns], "optional": True,
           "name": f"{prefix}.Value"}
    return {
        "type": "struct",
        "fields": [dict(row, field="before"), dict(row, field="after"), MYSQL_SOURCE_SCHEMA,
                   {"type": "string", "optional": False, "field": "op"},
                   {"type": "int64", "optional": True, "field": "ts_ms"},
                   TRANSACTION_SCHEMA],
        "optional": False,
        "name": f"{prefix}.Envelope",
    }


def debezium_key_schema(table: Table, server_name: str, database: str) -> dict:
    """The Connect schema of a Debezium key: a struct of the primary-key columns."""
    fields = [_connect_field(table.column(k)) for k in table.primary_key]
    return {"type": "struct", "fields": fields, "optional": False,
            "name": f"{server_name}.{database}.{table.name}.Key"}


def debezium_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
                  server_name: str = "shop", with_schema: bool = True, partitions: int = 3) -> list[Message]:
    """Debezium MySQL connector messages (JsonConverter) for every change of ``history``.

    Messages are in commit order. Snapshot transactions become op ``r`` reads with
    ``source.snapshot`` ``"true"`` (``"last"`` on the very last one), all at the binlog position
    where streaming starts, ``server_id`` 0 and no transaction block, as the connector's initial
    snapshot reports them. Streamed changes carry op ``c``/``u``/``d``, the GTID, binlog file,
    position, row and thread, and a ``transaction`` block (``total_order`` and
    ``data_collection_order`` count from 1). Each delete is followed by a tombstone (same key and
    partition, value None). The partition is ``crc32(key bytes) % partitions``.
    """
    history = list(history)
    snapshot_txs = [tx for tx in history if tx.snapshot]
    streamed = [tx for tx in history if not tx.snapshot]
    if streamed:
        snap_file, snap_pos = streamed[0].binlog_file, streamed[0].binlog_pos
    elif history:
        last = history[-1].changes[-1]
        snap_file, snap_pos = last.binlog_file, last.binlog_pos + 1
    n_snapshot = sum(len(tx.changes) for tx in snapshot_txs)
    value_schemas = {name: _dumps(debezium_value_schema(t, server_name, database)) for name, t in tables.items()}
    key_schemas = {name: _dumps(debezium_key_schema(t, server_name, database)) for name, t in tables.items()}

    out: list[Message] = []
    seen_snapshot = 0
    last_ts = 0
    for tx in history:
        per_table: dict[str, int] = {}
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]
            key_payload = {k: _debezium_value(table.column(k), v) for k, v in zip(table.primary_key, ch.key)}
            key = connect_document(key_schemas[ch.table], key_payload) if with_schema else _dumps(key_payload)
            per_table[ch.table] = per_table.get(ch.table, 0) + 1
            kafka_ts = last_ts = max(last_ts, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i))
            if tx.snapshot:
                seen_snapshot += 1
                source = {"version": DEBEZIUM_VERSION, "connector": "mysql", "name": server_name,
                          "ts_ms": tx.commit_ts_ms, "snapshot": "last" if seen_snapshot == n_snapshot else "true",
                          "db": database, "table": ch.table, "server_id": 0, "gtid": None,
                          "file": snap_file, "pos": snap_pos, "row": 0, "thread": None, "query": None}
                op, before, after, transaction = "r", None, _debezium_row(table, ch.after), None
            else:
                source = {"version": DEBEZIUM_VERSION, "connector": "mysql", "name": server_name,
                          "ts_ms": tx.commit_ts_ms, "snapshot": "false", "db": database, "table": ch.table,
                          "server_id": SERVER_ID, "gtid": tx.gtid, "file": ch.binlog_file,
                          "pos": ch.binlog_pos, "row": ch.row, "thread": tx.thread_id, "query": None}
                op = {"insert": "c", "update": "u", "delete": "d"}[ch.op]
                before, after = _debezium_row(table, ch.before), _debezium_row(table, ch.after)
                transaction = {"id": tx.tx_id, "total_order": i + 1, "data_collection_order": per_table[ch.table]}
            payload = {"before": before, "after": after, "source": source, "op": op,
                       "ts_ms": kafka_ts - 5 - zlib.crc32(key) % 90, "transaction": transaction}
            value = connect_document(value_schemas[ch.table], payload) if with_schema else _dumps(payload)
            part = _partition(key, partitions)
            out.append(Message(key, value, kafka_ts, part, tx.commit_ts_ms, 1))
            if op == "d":
                out.append(Message(key, None, kafka_ts, part, tx.commit_ts_ms))
    return out


# ---------------------------------------------------------------------------------------------
# Canal


def canal_text(col, value: object) -> Optional[str]:
    """A value as Canal writes it in ``data``/``old``: text, or None for NULL."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if col.ctype in TIMESTAMP_TYPES:
        return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}"  # type: ignore[attr-defined]
    if col.ctype == "binary":
        return value.decode("latin-1")  # type: ignore[attr-defined]  # Canal's byte text is ISO-8859-1
    return str(value)


def _sql_type(mysql_type: str) -> int:
    return SQL_TYPES[mysql_type.split("(", 1)[0].lower()]


def _canal_message(database: str, table: Table, serial: int, es: int, ts: int, kind: str,
                   data: Optional[list], old: Optional[list], is_ddl: bool = False, sql: str = "") -> dict:
    return {
        "data": data,
        "database": database,
        "es": es,
        "id": serial,
        "isDdl": is_ddl,
        "mysqlType": None if is_ddl else {c.name: c.mysql_type for c in table.columns},
        "old": old,
        "pkNames": None if is_ddl else list(table.primary_key),
        "sql": sql,
        "sqlType": None if is_ddl else {c.name: _sql_type(c.mysql_type) for c in table.columns},
        "table": table.name,
        "ts": ts,
        "type": kind,
    }


def _runs(changes: Iterable[RowChange]) -> list[list[RowChange]]:
    runs: list[list[RowChange]] = []
    for ch in changes:
        if runs and (runs[-1][-1].table, runs[-1][-1].op) == (ch.table, ch.op):
            runs[-1].append(ch)
        else:
            runs.append([ch])
    return runs


def canal_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
               partitions: int = 1) -> list[Message]:
    """Canal flat messages for ``history``, in commit order.

    One message per run of consecutive same-table same-op changes of a transaction (all
    values as text, ``old`` with the changed columns' previous values for UPDATE), ``es`` = the
    commit time, ``ts`` = ``es`` + :func:`delivery_delay_ms`, ``id`` = a message serial from 1.
    DDL messages (``isDdl`` true): one ``CREATE TABLE`` per table before the first transaction,
    and ``ALTER TABLE `orders` COMMENT ...`` right after the middle transaction (its ``es`` is
    that transaction's commit time). Key None; partition ``crc32("database.table") % partitions``.
    """
    history = list(history)
    out: list[Message] = []
    serial = 0
    last_ts = 0

    def emit(table: Table, msg_es: int, msg_ts: int, kind: str, data, old, is_ddl=False, sql="") -> None:
        nonlocal serial, last_ts
        serial += 1
        msg_ts = last_ts = max(last_ts, msg_ts)
        msg = _canal_message(database, table, serial, msg_es, msg_ts, kind, data, old, is_ddl, sql)
        part = _partition(f"{database}.{table.name}".encode("utf-8"), partitions)
        out.append(Message(None, _dumps(msg), msg_ts, part, msg_es, len(data or ())))

    if history:
        first = history[0].commit_ts_ms
        for i, t in enumerate(tables.values()):
            ddl_es = first - 900 + i
            emit(t, ddl_es, ddl_es + 300, "CREATE", None, None, True, t.create_sql())
    middle = len(history) // 2
    for n, tx in enumerate(history):
        for i, run in enumerate(_runs(tx.changes)):
            table = tables[run[0].table]
            cols = table.columns
            data = [{c.name: canal_text(c, ch.image[c.name]) for c in cols} for ch in run]
            old = None
            if run[0].op == "update":
                old = [{c.name: canal_text(c, ch.before[c.name]) for c in cols  # type: ignore[index]
                        if ch.before[c.name] != ch.after[c.name]} for ch in run]  # type: ignore[index]
            kind = run[0].op.upper()
            emit(table, tx.commit_ts_ms, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i), kind, data, old)
        if n == middle and "orders" in tables:
            emit(tables["orders"], tx.commit_ts_ms, tx.commit_ts_ms + 300, "ALTER", None, None, True,
                 f"ALTER TABLE `{database}`.`orders` COMMENT = 'customer orders'")
    return out


# ---------------------------------------------------------------------------------------------


def state_before(history: Sequence[Transaction], messages: Sequence[Message], ts_ms: int,
                 tables: Mapping[str, Table] = TABLES) -> State:
    """The source state as seen through the messages with a Kafka timestamp before ``ts_ms``.

    ``messages`` must be one rendering of ``history`` (their timestamps never decrease along the
    list, so those messages are a prefix of it, and they carry a prefix of the history's row
    changes). A window can end inside a transaction: a transaction committed shortly before
    ``ts_ms`` may have only some of its changes there.
    """
    n = sum(m.rows for m in messages if m.timestamp_ms < ts_ms)
    state: State = {name: {} for name in tables}
    for tx in history:
        for ch in tx.changes:
            if n <= 0:
                return state
            apply_change(state, ch.table, ch.op, ch.before, ch.after, tables)
            n -= 1
    return state
