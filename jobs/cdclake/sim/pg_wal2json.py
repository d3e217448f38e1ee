"""A real PostgreSQL change stream (wal2json) rendered as Debezium PostgreSQL connector messages.

Input: the rows ``pg_logical_slot_get_changes`` returns for a slot created with the ``wal2json``
output plugin and the options ``format-version 2``, ``include-xids 1``, ``include-lsn 1``,
``include-timestamp 1`` and ``include-types 1``, as documented in wal2json's README
(https://github.com/eulerto/wal2json, sections "Parameters" and "Examples", format 2): one JSON
object per line, ``action`` ``B`` (begin) / ``C`` (commit) with ``xid``, ``lsn`` (the commit LSN),
``nextlsn`` and ``timestamp`` (the commit time), and ``I``/``U``/``D`` changes with ``schema``,
``table``, ``lsn`` (the change's own LSN), ``columns`` (the new row: ``name``, ``type``,
``value``) and ``identity`` (the old key, or the whole old row with REPLICA IDENTITY FULL).
Numbers are printed unquoted (read here with :class:`decimal.Decimal` so that no digit is lost),
``bytea`` as hex, dates and timestamps as PostgreSQL's ISO text; an unchanged TOASTed column is
left out of an update's ``columns``.

Output: what Debezium's PostgreSQL connector writes for those changes through Kafka Connect's
JsonConverter with ``schemas.enable`` (Debezium documentation, "Debezium connector for
PostgreSQL", https://debezium.io/documentation/reference/stable/connectors/postgresql.html,
sections "Data change events" and "Data type mappings"), with ``decimal.handling.mode`` precise,
``time.precision.mode`` adaptive, ``binary.handling.mode`` bytes and
``provide.transaction.metadata`` on:

- key ``{"schema", "payload"}`` of the primary key columns; value ``{"schema", "payload"}`` with
  ``before``, ``after``, ``source``, ``op`` (``c``/``u``/``d``), ``ts_ms``, ``transaction``;
- ``source``: ``version``, ``connector`` ``postgresql``, ``name``, ``ts_ms`` (commit time),
  ``snapshot`` ``false``, ``db``, ``sequence`` (JSON text ``["<last commit LSN>", "<LSN>"]``,
  LSNs as decimal text: the commit LSN of the transaction decoded before this one, and the
  change's own LSN), ``schema``, ``table``, ``txId``, ``lsn`` (int64), ``xmin`` null;
- ``before``: the old row with REPLICA IDENTITY FULL; with the default identity null for an
  update and, for a delete, the key columns (every other column null);
- a change of the primary key is a delete of the old key (followed by its tombstone) and a create
  of the new key, as the connector emits it; every delete is followed by a tombstone;
- an unchanged TOASTed column of an update is ``__debezium_unavailable_value`` (Base64 of it for
  ``bytea``), the connector's ``unavailable.value.placeholder``; with REPLICA IDENTITY FULL the old
  row's value is used instead;
- column types: ``smallint`` int16, ``integer`` int32, ``bigint`` int64, ``real`` float32,
  ``double precision`` float64, ``boolean``, ``numeric(p,s)`` Connect ``Decimal`` (Base64 of the
  unscaled two's-complement integer, parameters ``scale`` and ``connect.decimal.precision``),
  ``numeric`` without precision ``io.debezium.data.VariableScaleDecimal`` (``{"scale", "value"}``),
  ``date`` ``io.debezium.time.Date`` (int32 days since 1970-01-01), ``timestamp``
  ``io.debezium.time.MicroTimestamp`` (int64 µs), ``timestamp with time zone``
  ``io.debezium.time.ZonedTimestamp`` (ISO-8601 text in UTC, ``Z``), ``bytea`` bytes (Base64),
  anything else string.

:func:`describe_tables` reads the column list, types, nullability, primary key and replica
identity of tables from a DB-API cursor (psycopg2), since wal2json omits TOASTed columns and
Debezium's schema names every column.
"""
from __future__ import annotations

import base64
import datetime as _dt
import json
import zlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Iterable, Mapping, Optional, Sequence

from cdclake.sim.render import (TRANSACTION_SCHEMA, Message, debezium_source_schema, decimal_to_base64,
                                 delivery_delay_ms)

DEBEZIUM_PG_VERSION = "2.5.4.Final"
#: Debezium's ``unavailable.value.placeholder`` (default).
UNAVAILABLE = "__debezium_unavailable_value"
_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@dataclass(frozen=True)
class PgColumn:
    """A column: ``name``, ``type`` (PostgreSQL's ``format_type`` text, as wal2json prints it, e.g.
    ``numeric(12,2)``, ``timestamp with time zone``) and ``nullable``."""

    name: str
    type: str
    nullable: bool = True


@dataclass(frozen=True)
class PgTable:
    """A table: ``schema``, ``name``, ``columns`` in table order, ``primary_key`` column names and
    ``replica_identity`` (``pg_class.relreplident``: ``d`` default, ``f`` full, ``n``, ``i``)."""

    schema: str
    name: str
    columns: tuple
    primary_key: tuple
    replica_identity: str = "d"

    def column(self, name: str) -> PgColumn:
        """The column called ``name`` (``KeyError`` when there is none)."""
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


@dataclass
class PgTransaction:
    """One decoded transaction: ``xid``, ``commit_lsn`` and ``end_lsn`` (integers), ``commit_ts_ms``
    (epoch ms) and its ``changes`` (wal2json's change objects, in LSN order)."""

    xid: int
    commit_lsn: int
    end_lsn: int
    commit_ts_ms: int
    changes: list = field(default_factory=list)


def lsn_int(text: str) -> int:
    """A PostgreSQL LSN ``X/Y`` (hex) as an integer: ``0/16B3748`` → 23803720."""
    hi, lo = str(text).split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def parse_timestamp(text: str) -> _dt.datetime:
    """PostgreSQL's ISO text of a ``timestamp with time zone`` (``2024-01-01 08:00:00.5+00``,
    offsets ``+HH``, ``+HH:MM``) as an aware datetime; ``ValueError`` for anything else."""
    value = _dt.datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no offset")
    return value


def ms_since_epoch(value: _dt.datetime) -> int:
    """An aware datetime as whole milliseconds since the epoch (floor)."""
    delta = value - _EPOCH
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def read_wal2json(rows: Iterable[str]) -> list[PgTransaction]:
    """wal2json format-version 2 output (one JSON text per row) as transactions in commit order.

    Needs ``include-xids``, ``include-lsn`` and ``include-timestamp``. Raises ``ValueError`` for a
    change outside a B…C pair or an unknown ``action``. Messages (``M``) and truncates (``T``)
    are not expected here and are refused.
    """
    out: list[PgTransaction] = []
    current: Optional[PgTransaction] = None
    for text in rows:
        obj = json.loads(text, parse_float=Decimal)
        action = obj.get("action")
        if action == "B":
            if current is not None:
                raise ValueError(f"BEGIN of xid {obj.get('xid')} inside xid {current.xid}")
            current = PgTransaction(int(obj["xid"]), lsn_int(obj["lsn"]), lsn_int(obj["nextlsn"]),
                                    ms_since_epoch(parse_timestamp(obj["timestamp"])))
        elif action == "C":
            if current is None or int(obj["xid"]) != current.xid:
                raise ValueError(f"COMMIT of xid {obj.get('xid')} without its BEGIN")
            out.append(current)
            current = None
        elif action in ("I", "U", "D"):
            if current is None:
                raise ValueError(f"change {action} outside a transaction")
            current.changes.append(obj)
        else:
            raise ValueError(f"unexpected wal2json action {action!r}")
    if current is not None:
        raise ValueError(f"xid {current.xid} has no COMMIT")
    return out


_DESCRIBE_SQL = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,
       coalesce(a.attnum = ANY (i.indkey), false), c.relreplident
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
WHERE n.nspname = %s AND c.relname = %s
ORDER BY a.attnum
"""


def describe_tables(cursor, schema: str, tables: Sequence[str]) -> dict[str, PgTable]:
    """``{table: PgTable}`` for ``tables`` of ``schema``, read from the catalog through a DB-API
    cursor (``%s`` parameters, as psycopg2's). The primary key keeps the table's column order
    (the tests' keys are single columns or in table order). ``KeyError`` for a missing table."""
    out = {}
    for name in tables:
        cursor.execute(_DESCRIBE_SQL, (schema, name))
        rows = cursor.fetchall()
        if not rows:
            raise KeyError(f"{schema}.{name}")
        out[name] = PgTable(schema, name, tuple(PgColumn(r[0], r[1], bool(r[2])) for r in rows),
                            tuple(r[0] for r in rows if r[3]), rows[0][4])
    return out


# ---------------------------------------------------------------------------------------------
# Connect schemas and values


def _base_type(pg_type: str) -> str:
    return pg_type.split("(", 1)[0].strip()


def _numeric_precision_scale(pg_type: str) -> Optional[tuple[int, int]]:
    if "(" not in pg_type:
        return None
    args = pg_type.split("(", 1)[1].rstrip(")").split(",")
    return int(args[0]), int(args[1]) if len(args) > 1 else 0


_SIMPLE = {"smallint": "int16", "integer": "int32", "bigint": "int64", "real": "float", "double precision": "double",
           "boolean": "boolean", "bytea": "bytes"}


def connect_field(col: PgColumn) -> dict:
    """The Connect field schema Debezium gives column ``col`` (see the module docstring)."""
    base = _base_type(col.type)
    if base == "numeric":
        ps = _numeric_precision_scale(col.type)
        if ps is None:
            f: dict = {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "scale"},
                                                     {"type": "bytes", "optional": False, "field": "value"}],
                       "optional": col.nullable, "name": "io.debezium.data.VariableScaleDecimal", "version": 1,
                       "doc": "Variable scaled decimal"}
        else:
            f = {"type": "bytes", "optional": col.nullable, "name": "org.apache.kafka.connect.data.Decimal",
                 "version": 1, "parameters": {"scale": str(ps[1]), "connect.decimal.precision": str(ps[0])}}
    elif base == "date":
        f = {"type": "int32", "optional": col.nullable, "name": "io.debezium.time.Date", "version": 1}
    elif col.type == "timestamp with time zone":
        f = {"type": "string", "optional": col.nullable, "name": "io.debezium.time.ZonedTimestamp", "version": 1}
    elif col.type == "timestamp without time zone":
        f = {"type": "int64", "optional": col.nullable, "name": "io.debezium.time.MicroTimestamp", "version": 1}
    else:
        f = {"type": _SIMPLE.get(col.type, "string"), "optional": col.nullable}
    f["field"] = col.name
    return f


def zoned_timestamp(value: _dt.datetime) -> str:
    """Debezium's ``ZonedTimestamp`` text of an aware datetime: ISO-8601 in UTC with ``Z``, the
    fraction without trailing zeros (``2024-01-01T08:00:00.1234Z``)."""
    utc = value.astimezone(_dt.timezone.utc)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += "." + f"{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def variable_scale_decimal(value: Decimal) -> dict:
    """``io.debezium.data.VariableScaleDecimal``: ``{"scale": s, "value": Base64 of the unscaled
    two's-complement integer}`` (``3.14159`` → scale 5, unscaled 314159)."""
    sign, digits, exponent = value.as_tuple()
    scale = max(-int(exponent), 0)
    return {"scale": scale, "value": decimal_to_base64(value, scale)}


def connect_value(col: PgColumn, value: object) -> object:
    """wal2json's JSON value of ``col`` as Debezium's JSON value (``ValueError`` for special values
    such as ``NaN`` or ``infinity`` that the tests do not use)."""
    if value is None:
        return None
    base = _base_type(col.type)
    if base == "numeric":
        if not isinstance(value, (Decimal, int)):
            raise ValueError(f"numeric {value!r} is not a number")
        ps = _numeric_precision_scale(col.type)
        return variable_scale_decimal(Decimal(value)) if ps is None else decimal_to_base64(Decimal(value), ps[1])
    if base == "date":
        return (_dt.date.fromisoformat(str(value)) - _EPOCH_DATE).days
    if col.type == "timestamp with time zone":
        return zoned_timestamp(parse_timestamp(str(value)))
    if col.type == "timestamp without time zone":
        naive = _dt.datetime.fromisoformat(str(value)).replace(tzinfo=_dt.timezone.utc)
        delta = naive - _EPOCH
        return (delta.days * 86400 + delta.seconds) * 10**6 + delta.microseconds
    if base == "bytea":
        return base64.b64encode(bytes.fromhex(str(value).removeprefix("\\x"))).decode("ascii")
    if base in ("real", "double precision"):
        return float(value)  # type: ignore[arg-type]
    if isinstance(value, Decimal):
        return str(value)
    return value


def _placeholder(col: PgColumn) -> str:
    if _base_type(col.type) == "bytea":
        return base64.b64encode(UNAVAILABLE.encode()).decode("ascii")
    return UNAVAILABLE


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


#: The PostgreSQL connector's ``source`` block (``sequence``, LSN, transaction id).
_SOURCE_SCHEMA = debezium_source_schema("postgresql", "true,last,false,incremental", [
    {"type": "string", "optional": True, "field": "sequence"},
    {"type": "string", "optional": False, "field": "schema"},
    {"type": "string", "optional": False, "field": "table"},
    {"type": "int64", "optional": True, "field": "txId"},
    {"type": "int64", "optional": True, "field": "lsn"},
    {"type": "int64", "optional": True, "field": "xmin"},
])


def value_schema(table: PgTable, server_name: str) -> dict:
    """The Connect schema of a Debezium PostgreSQL change event value for ``table``."""
    prefix = f"{server_name}.{table.schema}.{table.name}"
    row = {"type": "struct", "fields": [connect_field(c) for c in table.columns], "optional": True,
           "name": f"{prefix}.Value"}
    return {"type": "struct",
            "fields": [dict(row, field="before"), dict(row, field="after"), _SOURCE_SCHEMA,
                       {"type": "string", "optional": False, "field": "op"},
                       {"type": "int64", "optional": True, "field": "ts_ms"}, TRANSACTION_SCHEMA],
            "optional": False, "name": f"{prefix}.Envelope", "version": 1}


def key_schema(table: PgTable, server_name: str) -> dict:
    """The Connect schema of the Kafka key: a struct of the primary key columns."""
    return {"type": "struct", "fields": [dict(connect_field(table.column(k)), optional=False)
                                         for k in table.primary_key],
            "optional": False, "name": f"{server_name}.{table.schema}.{table.name}.Key"}


def _image(table: PgTable, columns: Optional[list], fallback: Optional[dict] = None) -> Optional[dict]:
    """A row image from wal2json ``columns`` (absent columns: ``fallback``'s value, else the
    placeholder); None when ``columns`` is None."""
    if columns is None:
        return None
    given = {c["name"]: c.get("value") for c in columns}
    out = {}
    for col in table.columns:
        if col.name in given:
            out[col.name] = connect_value(col, given[col.name])
        elif fallback is not None and col.name in fallback:
            out[col.name] = fallback[col.name]
        else:
            out[col.name] = _placeholder(col)
    return out


def debezium_pg_json(transactions: Sequence[PgTransaction], tables: Mapping[str, PgTable], database: str,
                     server_name: str = "pg", partitions: int = 1,
                     last_commit_lsn: Optional[int] = None) -> list[Message]:
    """The Debezium PostgreSQL messages (key and value with their Connect schemas) of decoded
    ``transactions``, in decoding order, each delete followed by its tombstone.

    ``tables`` maps a table name to its :class:`PgTable` (:func:`describe_tables`);
    ``last_commit_lsn`` is the commit LSN before the first transaction (``sequence[0]`` of its
    changes; None → null). A message's Kafka timestamp is the commit time plus
    :func:`cdclake.sim.render.delivery_delay_ms`, never decreasing along the list; its partition
    is ``crc32(key bytes) % partitions``; ``Message.rows`` counts the row changes it carries.
    Raises ``KeyError`` for a change of a table not in ``tables``.
    """
    out: list[Message] = []
    prev_commit = last_commit_lsn
    last_ts = 0
    for tx in transactions:
        per_table: dict[str, int] = {}
        order = 0
        for i, ch in enumerate(tx.changes):
            table = tables[ch["table"]]
            full = table.replica_identity == "f"
            identity = ch.get("identity")
            old = _image(table, identity) if identity is not None and full else None
            new = _image(table, ch.get("columns"), old) if ch["action"] != "D" else None
            old_key = ({c["name"]: connect_value(table.column(c["name"]), c.get("value")) for c in identity
                        if c["name"] in table.primary_key} if identity is not None else None)
            if ch["action"] == "I":
                events = [("c", None, new)]
            elif ch["action"] == "D":
                before = old if old is not None else {c.name: (old_key or {}).get(c.name) for c in table.columns}
                events = [("d", before, None)]
            else:
                new_key = {k: new[k] for k in table.primary_key}  # type: ignore[index]
                if old_key is not None and old_key != new_key:
                    before = old if old is not None else {c.name: old_key.get(c.name) for c in table.columns}
                    events = [("d", before, None), ("c", None, new)]
                else:
                    events = [("u", old, new)]
            lsn = lsn_int(ch["lsn"])
            source = {"version": DEBEZIUM_PG_VERSION, "connector": "postgresql", "name": server_name,
                      "ts_ms": tx.commit_ts_ms, "snapshot": "false", "db": database,
                      "sequence": json.dumps([None if prev_commit is None else str(prev_commit), str(lsn)]),
                      "schema": table.schema, "table": table.name, "txId": tx.xid, "lsn": lsn, "xmin": None}
            for op, before, after in events:
                image = after if after is not None else before
                key_payload = {k: image[k] for k in table.primary_key}  # type: ignore[index]
                key = _dumps({"schema": key_schema(table, server_name), "payload": key_payload})
                order += 1
                per_table[table.name] = per_table.get(table.name, 0) + 1
                kafka_ts = last_ts = max(last_ts, tx.commit_ts_ms + delivery_delay_ms(str(tx.xid), i))
                payload = {"before": before, "after": after, "source": source, "op": op,
                           "ts_ms": kafka_ts - 3,
                           "transaction": {"id": f"{tx.xid}:{tx.commit_lsn}", "total_order": order,
                                           "data_collection_order": per_table[table.name]}}
                part = zlib.crc32(key) % partitions
                value = _dumps({"schema": value_schema(table, server_name), "payload": payload})
                out.append(Message(key, value, kafka_ts, part, tx.commit_ts_ms, 1))
                if op == "d":
                    out.append(Message(key, None, kafka_ts, part, tx.commit_ts_ms))
        prev_commit = tx.commit_lsn
    return out
