"""A real MySQL/MariaDB binary log rendered as Canal flat messages and as Maxwell messages.

Input: row events read from the server's binary log (``binlog_format=ROW``,
``binlog_row_image=FULL``, ``binlog_row_metadata=FULL`` for column names) with
``pymysqlreplication.BinLogStreamReader`` (python-mysql-replication,
https://github.com/julien-duponchelle/python-mysql-replication): :func:`read_binlog` gathers
each transaction's ``WriteRowsEvent``/``UpdateRowsEvent``/``DeleteRowsEvent`` rows with the
binlog file and the event's start position, the event timestamp (seconds), the GTID, and the
``XidEvent`` that commits it (its ``xid`` and position). :func:`describe_tables` reads the column
types (``information_schema.COLUMNS.COLUMN_TYPE``, e.g. ``decimal(12,2)``, ``datetime(6)``) and
primary keys, as Canal and Maxwell read them from the server's schema.

Outputs, one list of :class:`cdclake.sim.render.Message` each, in binlog order:

- :func:`canal_flat_json`: Canal's flat messages (Alibaba Canal, ``FlatMessage`` as its Kafka
  producer writes it with ``canal.mq.flatMessage = true``: https://github.com/alibaba/canal/wiki
  "Canal Kafka RocketMQ QuickStart"), one per rows event: ``data`` (the rows, every value as text,
  NULL as null), ``old`` (UPDATE: the changed columns' previous values), ``database``, ``table``,
  ``pkNames``, ``isDdl`` false, ``type`` INSERT/UPDATE/DELETE, ``es`` (the event's binlog
  timestamp, ms), ``ts`` (the time the message was built, ms), ``id`` (Canal's batch id: a serial
  here), ``sql`` empty, ``sqlType`` (java.sql.Types) and ``mysqlType`` (the column types). A flat
  message carries no binlog file or offset: the order is ``es``, then ``id``. Values: decimals as
  plain digits, DATETIME as ``YYYY-MM-DD HH:MM:SS`` with the column's fractional digits, DATE as
  ``YYYY-MM-DD``, BLOB/BINARY bytes as ISO-8859-1 text (Canal's ``new String(bytes, ISO_8859_1)``).
- :func:`maxwell_json`: Zendesk Maxwell's JSON (https://maxwells-daemon.io/dataformat/, "Row
  events"; options ``output_binlog_position``, ``output_xoffset``, ``output_primary_key_columns``,
  ``output_server_id`` on), one per row: ``database``, ``table``, ``type`` insert/update/delete,
  ``ts`` (binlog timestamp, seconds), ``xid``, ``xoffset`` (the row's index in its transaction,
  on every row but the last) or ``commit: true`` (on the last), ``position`` ``"file:pos"`` (the
  rows event's start in the binlog), ``server_id``, ``primary_key_columns``, ``data`` (the whole
  row) and ``old`` (UPDATE: the changed columns' previous values). Values: numbers as JSON
  numbers (decimals unrounded), DATETIME/DATE text as Canal's, BLOB/BINARY as Base64, text as
  strings.

The Kafka timestamp of a message is its transaction's commit time (the XID event's binlog
timestamp, ms) plus :func:`cdclake.sim.render.delivery_delay_ms`, never decreasing along the
list; the partition is that of the producers' defaults: Canal by ``database.table``
(``canal.mq.partitionHash``), Maxwell by database (``producer_partition_by=database``), as
``crc32 % partitions``.
"""
from __future__ import annotations

import base64
import datetime as _dt
import json
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Mapping, Optional, Sequence

from cdclake.sim.render import Message, delivery_delay_ms

#: java.sql.Types codes of the column types used (Canal ``sqlType``); anything else is VARCHAR (12).
SQL_TYPES = {"tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "bigint": -5, "decimal": 3, "float": 7,
             "double": 8, "date": 91, "datetime": 93, "timestamp": 93, "time": 92, "char": 1, "varchar": 12,
             "binary": -2, "varbinary": -3, "tinyblob": -4, "blob": 2004, "mediumblob": 2004, "longblob": 2004,
             "tinytext": -1, "text": 2005, "mediumtext": 2005, "longtext": 2005}


@dataclass(frozen=True)
class MyColumn:
    """A column: ``name``, ``column_type`` (``COLUMN_TYPE``, e.g. ``decimal(12,2)``), ``data_type``
    (``DATA_TYPE``, e.g. ``decimal``) and ``fsp`` (fractional seconds digits of a DATETIME)."""

    name: str
    column_type: str
    data_type: str
    fsp: int = 0


@dataclass(frozen=True)
class MyTable:
    """A table: ``name``, ``columns`` in table order and ``primary_key`` (in key order)."""

    name: str
    columns: tuple
    primary_key: tuple

    def column(self, name: str) -> MyColumn:
        """The column called ``name`` (``KeyError`` when there is none)."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass
class RowsEvent:
    """One rows event: ``table``, ``op`` (insert/update/delete), ``rows`` (``(before, after)``
    pairs of ``{column: Python value}`` or None), the binlog ``file`` and the event's start
    ``pos`` and end ``next_pos``, and ``ts`` (its binlog timestamp, seconds)."""

    table: str
    op: str
    rows: list
    file: str
    pos: int
    next_pos: int
    ts: int


@dataclass
class BinlogTransaction:
    """One committed transaction: ``xid``, ``gtid`` (or None), ``commit_ts`` (the XID event's
    timestamp, seconds), ``commit_file``/``commit_pos`` (where its XID event ends), ``server_id``
    and its ``events`` in binlog order."""

    xid: int
    gtid: Optional[str]
    commit_ts: int
    commit_file: str
    commit_pos: int
    server_id: int
    events: list = field(default_factory=list)


def describe_tables(cursor, database: str, tables: Sequence[str]) -> dict[str, MyTable]:
    """``{table: MyTable}`` from ``information_schema`` through a DB-API cursor (``%s``
    parameters, as PyMySQL's). ``KeyError`` for a missing table."""
    out = {}
    for name in tables:
        cursor.execute("SELECT COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, COALESCE(DATETIME_PRECISION, 0) "
                       "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s "
                       "ORDER BY ORDINAL_POSITION", (database, name))
        cols = tuple(MyColumn(r[0], r[1], r[2], int(r[3])) for r in cursor.fetchall())
        if not cols:
            raise KeyError(f"{database}.{name}")
        cursor.execute("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                       "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX", (database, name))
        out[name] = MyTable(name, cols, tuple(r[0] for r in cursor.fetchall()))
    return out


def read_binlog(connection: Mapping, database: str, start_file: str, start_pos: int, start_gtid: str,
                end_pos: int, server_id: int = 91234) -> list[BinlogTransaction]:
    """The committed transactions of ``database`` in the binary log after ``start_file:start_pos``
    (``SHOW MASTER STATUS`` taken before the workload) and MariaDB GTID position ``start_gtid``
    (``@@gtid_binlog_pos``; empty: from the start), up to position ``end_pos`` of the same file
    (``SHOW MASTER STATUS`` after the workload).

    The stream is read in blocking mode up to ``end_pos``: MariaDB 10.11 drops a non-blocking
    dump connection (``BINLOG_DUMP_NON_BLOCK``) at an event larger than about 128 KiB (seen
    here with python-mysql-replication 1.0.17), while the blocking dump sends it whole.

    ``connection``: PyMySQL keyword arguments (``host``, ``port``, ``user``, ``password``). Needs
    ``pymysqlreplication`` (``mysql-replication`` in requirements). Rows events before the start
    position are skipped; a transaction without rows of ``database`` is left out.
    """
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    ops = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
    stream = BinLogStreamReader(connection_settings=dict(connection), server_id=server_id, blocking=True,
                                end_log_pos=end_pos,
                                is_mariadb=True, auto_position=start_gtid or None, resume_stream=True,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent,
                                             MariadbGtidEvent])
    out: list[BinlogTransaction] = []
    pending: list[RowsEvent] = []
    gtid: Optional[str] = None
    try:
        for ev in stream:
            file, end = stream.log_file, ev.packet.log_pos
            begin = end - ev.event_size
            after_start = (file or "", begin) >= (start_file, start_pos)
            if isinstance(ev, MariadbGtidEvent):
                gtid, pending = ev.gtid, []
            elif isinstance(ev, XidEvent):
                if pending and after_start:
                    out.append(BinlogTransaction(ev.xid, gtid, ev.timestamp, file, end, ev.packet.server_id,
                                                 pending))
                pending, gtid = [], None
            elif ev.schema == database and after_start:
                op = ops[type(ev)]
                rows = [((r.get("before_values") if op == "update" else r["values"] if op == "delete" else None),
                         (r.get("after_values") if op == "update" else r["values"] if op == "insert" else None))
                        for r in ev.rows]
                pending.append(RowsEvent(ev.table, op, rows, file, begin, end, ev.timestamp))
    finally:
        stream.close()
    return out


# ---------------------------------------------------------------------------------------------
# values


def datetime_text(value: object, fsp: int) -> str:
    """A DATETIME as ``YYYY-MM-DD HH:MM:SS`` with ``fsp`` fractional digits (0: none)."""
    text = value.strftime("%Y-%m-%d %H:%M:%S")  # type: ignore[attr-defined]
    return text + "." + f"{value.microsecond:06d}"[:fsp] if fsp else text  # type: ignore[attr-defined]


def _is_binary(col: MyColumn) -> bool:
    return col.data_type in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")


def canal_value(col: MyColumn, value: object) -> Optional[str]:
    """Canal's text of a binlog value (None for NULL)."""
    if value is None:
        return None
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, _dt.datetime):
        return datetime_text(value, col.fsp)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return str(value)


def maxwell_value(col: MyColumn, value: object) -> object:
    """Maxwell's JSON value of a binlog value (a :class:`Decimal` stays a Decimal: written as a
    JSON number by :func:`json_text`)."""
    if value is None or isinstance(value, (int, float, Decimal)):
        return value
    if isinstance(value, _dt.datetime):
        return datetime_text(value, col.fsp)
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        if _is_binary(col):
            return base64.b64encode(bytes(value)).decode("ascii")
        return bytes(value).decode("utf-8")
    return str(value)


def json_text(obj: object) -> str:
    """Compact JSON of ``obj`` with :class:`Decimal` values written as JSON numbers, digit for digit."""
    if isinstance(obj, Decimal):
        return format(obj, "f")
    if isinstance(obj, dict):
        return "{" + ",".join(f"{json.dumps(str(k), ensure_ascii=False)}:{json_text(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(json_text(v) for v in obj) + "]"
    return json.dumps(obj, ensure_ascii=False)


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _sql_type(col: MyColumn) -> int:
    return SQL_TYPES.get(col.data_type, 12)


def _changed(table: MyTable, before: Mapping, after: Mapping) -> list[str]:
    return [c.name for c in table.columns if before[c.name] != after[c.name]]


# ---------------------------------------------------------------------------------------------
# renderers


def canal_flat_json(transactions: Sequence[BinlogTransaction], tables: Mapping[str, MyTable], database: str,
                    partitions: int = 1) -> list[Message]:
    """Canal flat messages of ``transactions`` (see the module docstring). Raises ``KeyError`` for
    a table not in ``tables``."""
    out: list[Message] = []
    serial = 0
    last_ts = 0
    for tx in transactions:
        for i, ev in enumerate(tx.events):
            table = tables[ev.table]
            serial += 1
            images = [after if ev.op != "delete" else before for before, after in ev.rows]
            data = [{c.name: canal_value(c, img[c.name]) for c in table.columns} for img in images]
            old = None
            if ev.op == "update":
                old = [{n: canal_value(table.column(n), b[n]) for n in _changed(table, b, a)} for b, a in ev.rows]
            kafka_ts = last_ts = max(last_ts, tx.commit_ts * 1000 + delivery_delay_ms(str(tx.xid), i))
            msg = {"data": data, "database": database, "es": ev.ts * 1000, "id": serial, "isDdl": False,
                   "mysqlType": {c.name: c.column_type for c in table.columns}, "old": old,
                   "pkNames": list(table.primary_key), "sql": "",
                   "sqlType": {c.name: _sql_type(c) for c in table.columns}, "table": table.name,
                   "ts": kafka_ts - 2, "type": ev.op.upper()}
            part = zlib.crc32(f"{database}.{table.name}".encode()) % partitions
            out.append(Message(None, _dumps(msg), kafka_ts, part, tx.commit_ts * 1000, len(data)))
    return out


def maxwell_json(transactions: Sequence[BinlogTransaction], tables: Mapping[str, MyTable], database: str,
                 partitions: int = 1) -> list[Message]:
    """Maxwell row messages of ``transactions`` (see the module docstring); the Kafka key is
    Maxwell's default hash key ``{"database", "table", "pk.<column>": value ...}``. Raises
    ``KeyError`` for a table not in ``tables``."""
    out: list[Message] = []
    last_ts = 0
    for tx in transactions:
        rows = [(ev, before, after) for ev in tx.events for before, after in ev.rows]
        for i, (ev, before, after) in enumerate(rows):
            table = tables[ev.table]
            image = after if ev.op != "delete" else before
            msg: dict = {"database": database, "table": table.name, "type": ev.op, "ts": ev.ts, "xid": tx.xid}
            if i == len(rows) - 1:
                msg["commit"] = True
            else:
                msg["xoffset"] = i
            msg["position"] = f"{ev.file}:{ev.pos}"
            msg["server_id"] = tx.server_id
            msg["primary_key_columns"] = list(table.primary_key)
            msg["data"] = {c.name: maxwell_value(c, image[c.name]) for c in table.columns}
            if ev.op == "update":
                msg["old"] = {n: maxwell_value(table.column(n), before[n]) for n in _changed(table, before, after)}
            key = {"database": database, "table": table.name,
                   **{f"pk.{k}": maxwell_value(table.column(k), image[k]) for k in table.primary_key}}
            kafka_ts = last_ts = max(last_ts, tx.commit_ts * 1000 + delivery_delay_ms(str(tx.xid), i))
            part = zlib.crc32(database.encode()) % partitions
            out.append(Message(json_text(key).encode(), json_text(msg).encode(), kafka_ts, part,
                               tx.commit_ts * 1000, 1))
    return out
