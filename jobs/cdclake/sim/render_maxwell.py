"""Rendering a simulated history as Maxwell's daemon writes it to Kafka (``maxwell-json``).

Follows "Maxwell's Daemon: Data Format" and "Bootstrapping" (https://maxwells-daemon.io/) with
``output_binlog_position``, ``output_commit_info``, ``output_xoffset``, ``output_server_id``,
``output_thread_id`` and ``output_ddl`` on, ``producer_partition_by=primary_key`` and the
default Kafka key format (``kafka_key_format=hash``):

- One message per row: ``database``, ``table``, ``type`` (``insert``/``update``/``delete``),
  ``ts`` (commit time, seconds), ``xid`` (a transaction number counting up from 9000),
  ``xoffset`` (the row's index in its transaction; left out of the last row, which carries
  ``commit: true``), ``position`` (``<binlog file>:<offset>`` of the row's rows event, rows of
  one event sharing it), ``server_id``, ``thread_id``, ``data`` (the row after the change, a
  delete's row before it) and, for an update, ``old`` (the previous values of the changed
  columns only).
- The bulk load at the start of the history is a bootstrap of each table it loads:
  ``bootstrap-start`` (``data: {}``), one ``bootstrap-insert`` per row (no ``xid``, no
  ``position``; ``ts`` the load's time), ``bootstrap-complete``.
- DDL (``output_ddl``): a ``table-create`` per table before the first transaction and a
  ``table-alter`` of ``orders`` (a comment) after the middle transaction, with ``def``, ``sql``,
  ``ts`` in milliseconds (as Maxwell writes it for DDL) and ``position``; Kafka key None.
- Kafka key ``{"database": ..., "table": ..., "pk.<column>": value}``; the partition is
  ``crc32(key bytes) % partitions`` (``crc32("database.table")`` for DDL and bootstrap markers).

Values as Maxwell writes them: integers and doubles JSON numbers, DECIMAL the exact digits as a
JSON number, strings, dates ``YYYY-MM-DD``, timestamps ``YYYY-MM-DD hh:mm:ss.fff`` (the
columns' millisecond precision), binary Base64. Kafka timestamps are the commit time plus
:func:`cdclake.sim.render.delivery_delay_ms`, raised where needed so they never decrease.
"""
from __future__ import annotations

import base64
import zlib
from typing import Mapping, Optional, Sequence

import msgspec

from cdclake.sim.model import DATABASE, Column, Table, Transaction
from cdclake.sim.render import Message, delivery_delay_ms
from cdclake.types import TIMESTAMP_TYPES

SERVER_ID = 23042
FIRST_XID = 9000
_ENCODE = msgspec.json.Encoder(decimal_format="number").encode


def maxwell_value(col: Column, value: object) -> object:
    """A column value as Maxwell writes it in ``data``/``old`` (None stays None)."""
    if value is None:
        return None
    if col.ctype in TIMESTAMP_TYPES:
        return value.strftime("%Y-%m-%d %H:%M:%S.") + f"{value.microsecond // 1000:03d}"  # type: ignore[attr-defined]
    if col.ctype == "date":
        return value.isoformat()  # type: ignore[attr-defined]
    if col.ctype == "binary":
        return base64.b64encode(bytes(value)).decode("ascii")  # type: ignore[arg-type]
    return value


def _row(table: Table, row: Mapping) -> dict:
    return {c.name: maxwell_value(c, row[c.name]) for c in table.columns}


def _key(database: str, table: Table, row: Mapping) -> bytes:
    key: dict = {"database": database, "table": table.name}
    for k in table.primary_key:
        key[f"pk.{k.lower()}"] = maxwell_value(table.column(k), row[k])
    return _ENCODE(key)


def _definition(database: str, table: Table, comment: Optional[str] = None) -> dict:
    d: dict = {"database": database, "charset": "utf8mb4", "table": table.name,
               "columns": [{"type": c.mysql_type.split("(", 1)[0].lower(), "name": c.name} for c in table.columns],
               "primary-key": list(table.primary_key)}
    if comment is not None:
        d["comment"] = comment
    return d


def maxwell_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
                 partitions: int = 1, server_id: int = SERVER_ID) -> list[Message]:
    """Maxwell messages for every change of ``history``, in commit order (see the module
    docstring). ``Message.rows`` is 1 for a row message and 0 for DDL and bootstrap markers."""
    history = list(history)
    out: list[Message] = []
    last_ts = 0

    def emit(key: Optional[bytes], msg: dict, ts_ms: int, commit_ts_ms: int, rows: int, table: str) -> None:
        nonlocal last_ts
        last_ts = max(last_ts, ts_ms)
        part = zlib.crc32(key if key is not None else f"{database}.{table}".encode()) % partitions
        out.append(Message(key, _ENCODE(msg), last_ts, part, commit_ts_ms, rows))

    def ddl(kind: str, table: Table, ts_ms: int, position: str, sql: str, comment: Optional[str] = None) -> None:
        msg = {"type": kind, "database": database, "table": table.name}
        if kind == "table-alter":
            msg["old"] = _definition(database, table)
        msg.update({"def": _definition(database, table, comment), "ts": ts_ms, "sql": sql, "position": position})
        emit(None, msg, ts_ms + 300, ts_ms, 0, table.name)

    if history:
        first = history[0]
        for i, t in enumerate(tables.values()):
            ts = first.commit_ts_ms - 900 + i
            ddl("table-create", t, ts, f"{first.binlog_file}:{max(first.binlog_pos - 400 + i, 4)}", t.create_sql())
    middle = len(history) // 2
    bootstrapping: dict[str, int] = {}  # table → ts of its bootstrap (seconds)
    xid = FIRST_XID
    for n, tx in enumerate(history):
        if tx.snapshot:
            for ch in tx.changes:
                table = tables[ch.table]
                ts = tx.commit_ts_ms // 1000
                if ch.table not in bootstrapping:
                    bootstrapping[ch.table] = ts
                    emit(None, {"database": database, "table": ch.table, "type": "bootstrap-start", "ts": ts,
                                "data": {}}, tx.commit_ts_ms + 200, tx.commit_ts_ms, 0, ch.table)
                msg = {"database": database, "table": ch.table, "type": "bootstrap-insert", "ts": ts,
                       "data": _row(table, ch.after)}  # type: ignore[arg-type]
                emit(_key(database, table, ch.after), msg, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, 0),  # type: ignore[arg-type]
                     tx.commit_ts_ms, 1, ch.table)
            continue
        for name, ts in bootstrapping.items():  # the bootstrap ends before the first binlog change
            emit(None, {"database": database, "table": name, "type": "bootstrap-complete", "ts": ts, "data": {}},
                 tx.commit_ts_ms, tx.commit_ts_ms, 0, name)
        bootstrapping = {}
        xid += 1
        last = len(tx.changes) - 1
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]
            image = ch.after if ch.after is not None else ch.before
            msg = {"database": database, "table": ch.table, "type": ch.op, "ts": tx.commit_ts_ms // 1000, "xid": xid}
            if i == last:
                msg["commit"] = True
            else:
                msg["xoffset"] = i
            msg.update({"position": f"{ch.binlog_file}:{ch.binlog_pos}", "server_id": server_id,
                        "thread_id": tx.thread_id, "data": _row(table, image)})  # type: ignore[arg-type]
            if ch.op == "update":
                old = {c.name: maxwell_value(c, ch.before[c.name]) for c in table.columns  # type: ignore[index]
                       if ch.before[c.name] != ch.after[c.name]}  # type: ignore[index]
                if old:  # Maxwell leaves out an empty ``old``
                    msg["old"] = old
            emit(_key(database, table, image), msg, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i),  # type: ignore[arg-type]
                 tx.commit_ts_ms, 1, ch.table)
        if n == middle and "orders" in tables:
            end = tx.changes[-1]
            ddl("table-alter", tables["orders"], tx.commit_ts_ms, f"{end.binlog_file}:{end.binlog_pos + 200}",
                f"ALTER TABLE `{database}`.`orders` COMMENT = 'customer orders'", "customer orders")
    for name, ts in bootstrapping.items():  # a history of bulk loads only
        emit(None, {"database": database, "table": name, "type": "bootstrap-complete", "ts": ts, "data": {}},
             last_ts, ts * 1000, 0, name)
    return out
