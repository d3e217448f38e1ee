"""Rendering a simulated history as Arcion Replicant writes it to Kafka in its JSON CDC format.

Follows "JSON CDC format for Kafka" (Arcion Replicant documentation): every message has a key
and a value, both Kafka Connect JSON documents ``{"schema": ..., "payload": ...}``.

- Key: a struct of the primary-key columns, schema named ``<connector>.<db>.<table>.Key``.
- Value: envelope ``<connector>.<db>.<table>.Envelope`` with ``before``/``after`` structs
  (``<connector>.<db>.<table>.Value``), the ``source`` struct (named after the connector) and
  ``op``/``ts_ms``. The payload's ``source`` block carries ``version`` (the MySQL server
  version), ``connector: "MYSQL"``, ``name``, ``ts_ms``, ``db``, ``schema: null``, ``table``,
  ``snapshot``, ``server_id``, ``gtid``, ``file``, ``pos``, ``row``, ``thread`` and ``query``
  (a statement text built from the values, as in the document's samples).
- The bulk load at the start of the history is Replicant's snapshot: op ``r``, ``before: {}``,
  ``snapshot: "true"``, and ``ts_ms``/``server_id``/``gtid``/``file``/``pos``/``row``/``thread``
  null, payload ``ts_ms`` null.
- Realtime changes: op ``c`` (``before: {}``), ``u``, ``d`` (``after: {}``) with the binlog
  ``file``/``pos``/``row``, the commit time in ``source.ts_ms``, the GTID, ``server_id`` as text
  (``"1"``) and the payload ``ts_ms`` (Replicant's processing time, a little before the Kafka
  timestamp). An update that changes a key column becomes a delete of the old key (and its
  tombstone) followed by an insert of the new key, both at the update's binlog position.
- After each delete: a tombstone (same key and partition, value None).

Column values, by canonical type (the document shows only ``int32`` and ``string``; the other
types use Kafka Connect's JSON converter encodings): smallint ``int16``, int ``int32``, bigint
``int64``, float ``float32``, double ``float64``, boolean ``boolean``, string ``string``, binary
``bytes`` (Base64 text), decimal(p,s) Connect ``Decimal`` (Base64 of the unscaled integer,
parameters ``scale`` and ``connect.decimal.precision``), date Connect ``Date`` (days since the
epoch), timestamp Connect ``Timestamp`` (epoch milliseconds, UTC).

Kafka timestamps are the commit time plus :func:`cdclake.sim.render.delivery_delay_ms`, raised
where needed so they never decrease; the partition is ``crc32(key bytes) % partitions``. All
tables go into the one list (one topic).
"""
from __future__ import annotations

import base64
import datetime as _dt
import zlib
from typing import Mapping, Optional, Sequence

from cdclake.sim.model import DATABASE, Column, Table, Transaction, datetime_to_ms
from cdclake.sim.render import Message, _dumps, connect_document, decimal_to_base64, delivery_delay_ms
from cdclake.types import TIMESTAMP_TYPES, decimal_precision_scale, to_text

MYSQL_VERSION = "8.0.36"
CONNECTOR_NAME = "KAFKA_Connector"
_EPOCH_DATE = _dt.date(1970, 1, 1)
_CONNECT_TYPES = {"smallint": "int16", "int": "int32", "bigint": "int64", "float": "float32",
                  "double": "float64", "boolean": "boolean", "binary": "bytes"}

_SOURCE_FIELDS = [
    ("string", False, "version"), ("string", False, "connector"), ("string", False, "name"),
    ("int64", True, "ts_ms"), ("string", True, "db"), ("string", True, "schema"), ("string", False, "table"),
    ("string", True, "query"), ("string", True, "snapshot"), ("int64", True, "server_id"),
    ("string", True, "gtid"), ("string", True, "file"), ("int64", True, "pos"), ("int32", True, "row"),
]


def connect_field(col: Column) -> dict:
    """The Connect field schema Replicant writes for a column (see the module docstring)."""
    ctype = col.ctype
    ps = decimal_precision_scale(ctype)
    if ps:
        f: dict = {"type": "bytes", "optional": col.nullable, "name": "org.apache.kafka.connect.data.Decimal",
                   "version": 1, "parameters": {"scale": str(ps[1]), "connect.decimal.precision": str(ps[0])}}
    elif ctype == "date":
        f = {"type": "int32", "optional": col.nullable, "name": "org.apache.kafka.connect.data.Date", "version": 1}
    elif ctype in TIMESTAMP_TYPES:
        f = {"type": "int64", "optional": col.nullable, "name": "org.apache.kafka.connect.data.Timestamp",
             "version": 1}
    else:
        f = {"type": _CONNECT_TYPES.get(ctype, "string"), "optional": col.nullable}
    f["field"] = col.name
    return f


def connect_value(col: Column, value: object) -> object:
    """A column value in the JSON form of :func:`connect_field` (None stays None)."""
    if value is None:
        return None
    ps = decimal_precision_scale(col.ctype)
    if ps:
        return decimal_to_base64(value, ps[1])  # type: ignore[arg-type]
    if col.ctype in TIMESTAMP_TYPES:
        return datetime_to_ms(value)  # type: ignore[arg-type]
    if col.ctype == "date":
        return (value - _EPOCH_DATE).days  # type: ignore[operator]
    if col.ctype == "binary":
        return base64.b64encode(bytes(value)).decode("ascii")  # type: ignore[arg-type]
    return value


def key_schema(table: Table, name: str, database: str) -> dict:
    """The Connect schema of a Replicant key: a struct of the primary-key columns."""
    return {"type": "struct", "optional": False, "name": f"{name}.{database}.{table.name}.Key",
            "fields": [connect_field(table.column(k)) for k in table.primary_key]}


def value_schema(table: Table, name: str, database: str) -> dict:
    """The Connect schema of a Replicant value (the envelope) for ``table``."""
    prefix = f"{name}.{database}.{table.name}"
    cols = [connect_field(c) for c in table.columns]
    source = {"type": "struct", "optional": False, "field": "source", "name": name,
              "fields": [{"type": t, "optional": o, "field": f} for t, o, f in _SOURCE_FIELDS]}
    return {
        "type": "struct", "optional": False, "name": f"{prefix}.Envelope",
        "fields": [
            {"type": "struct", "optional": True, "field": "before", "name": f"{prefix}.Value", "fields": cols},
            {"type": "struct", "optional": True, "field": "after", "name": f"{prefix}.Value", "fields": cols},
            source,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


def _image(table: Table, row: Optional[Mapping]) -> dict:
    """A row in the payload (``{}`` for no image, as the document writes it)."""
    return {} if row is None else {c.name: connect_value(c, row[c.name]) for c in table.columns}


def _sql_values(table: Table, row: Optional[Mapping]) -> list[str]:
    row = row or {}
    return ["NULL" if row.get(c.name) is None else str(to_text(row[c.name], c.ctype)) for c in table.columns]


def query_text(table: Table, database: str, op: str, before: Optional[Mapping], after: Optional[Mapping]) -> str:
    """The ``source.query`` text: a statement built from the values, unquoted, as in the samples.

    ``op`` ``r``/``c`` give ``INSERT INTO db.t(cols) VALUES(...)``, ``d`` gives
    ``DELETE FROM db.t WHERE c=v AND ...`` and ``u`` gives ``UPDATE db.t SET c=v AND ... WHERE ...``.
    """
    names = table.column_names
    qualified = f"{database}.{table.name}"
    if op in ("r", "c"):
        return f"INSERT INTO {qualified}({', '.join(names)}) VALUES({', '.join(_sql_values(table, after))})"
    where = " AND ".join(f"{n}={v}" for n, v in zip(names, _sql_values(table, before)))
    if op == "d":
        return f"DELETE FROM {qualified} WHERE {where}"
    sets = " AND ".join(f"{n}={v}" for n, v in zip(names, _sql_values(table, after)))
    return f"UPDATE {qualified} SET {sets} WHERE {where}"


def arcion_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
                partitions: int = 3, connector_name: str = CONNECTOR_NAME, server_id: int = 1,
                version: str = MYSQL_VERSION) -> list[Message]:
    """Replicant JSON CDC messages (key and value) for every change of ``history``, in commit order.

    Snapshot transactions (the bulk load) become op ``r`` reads with null positions; streamed
    changes op ``c``/``u``/``d`` with binlog ``file``/``pos``/``row``; a key-changing update
    becomes delete + tombstone + insert; every delete is followed by a tombstone. See the module
    docstring for the message shapes. ``Message.rows`` counts the history's row changes a message
    completes (the insert half of a split update carries the update).
    """
    key_schemas = {name: _dumps(key_schema(t, connector_name, database)) for name, t in tables.items()}
    value_schemas = {name: _dumps(value_schema(t, connector_name, database)) for name, t in tables.items()}
    out: list[Message] = []
    last_ts = 0

    for tx in history:
        n = 0
        for ch in tx.changes:
            table = tables[ch.table]
            if tx.snapshot:
                events = [("r", None, ch.after)]
            elif ch.op == "insert":
                events = [("c", None, ch.after)]
            elif ch.op == "delete":
                events = [("d", ch.before, None)]
            elif table.key_of(ch.before) != table.key_of(ch.after):  # type: ignore[arg-type]
                events = [("d", ch.before, None), ("c", None, ch.after)]
            else:
                events = [("u", ch.before, ch.after)]
            for j, (op, before, after) in enumerate(events):
                image: Mapping = after if after is not None else before  # type: ignore[assignment]
                key_payload = {k: connect_value(table.column(k), image[k]) for k in table.primary_key}
                key = connect_document(key_schemas[ch.table], key_payload)
                kafka_ts = last_ts = max(last_ts, tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, n))
                n += 1
                query = query_text(table, database, op, before, after)
                if tx.snapshot:
                    source = {"version": version, "connector": "MYSQL", "name": connector_name, "ts_ms": None,
                              "db": database, "schema": None, "table": ch.table, "snapshot": "true",
                              "server_id": None, "gtid": None, "file": None, "pos": None, "row": None,
                              "thread": None, "query": query}
                    payload_ts = None
                else:
                    source = {"version": version, "connector": "MYSQL", "name": connector_name,
                              "ts_ms": tx.commit_ts_ms, "db": database, "schema": None, "table": ch.table,
                              "snapshot": "false", "server_id": str(server_id), "gtid": tx.gtid,
                              "file": ch.binlog_file, "pos": ch.binlog_pos, "row": ch.row,
                              "thread": tx.thread_id, "query": query}
                    payload_ts = kafka_ts - 5 - zlib.crc32(key) % 90
                payload = {"before": _image(table, before), "after": _image(table, after), "source": source,
                           "op": op, "ts_ms": payload_ts}
                value = connect_document(value_schemas[ch.table], payload)
                part = zlib.crc32(key) % partitions
                rows = 1 if j == len(events) - 1 else 0
                out.append(Message(key, value, kafka_ts, part, tx.commit_ts_ms, rows))
                if op == "d":
                    out.append(Message(key, None, kafka_ts, part, tx.commit_ts_ms))
    return out
