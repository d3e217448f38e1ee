"""The simulated MySQL shop's data model: tables, row changes, transactions and state replay.

``TABLES`` defines the tables of database ``shop`` (``customers``, ``products``, ``orders``),
each a ``Table`` of ordered ``Column(name, mysql_type, ctype, nullable)`` with its primary key.
A committed history is a list of ``Transaction`` (transaction id/GTID, commit time, binlog file
and position), each holding its ``RowChange`` (op, before/after image, primary key, binlog file,
position and row). A state is ``{table: {primary-key tuple: {column: value}}}``:
``apply_change`` and ``replay`` build it from row changes, ``as_text`` renders its values in the
canonical text of :mod:`cdclake.types`. Times are epoch milliseconds, UTC (``ms_to_datetime``,
``datetime_to_ms``). :mod:`cdclake.sim.source` generates the history, :mod:`cdclake.sim.binlog`
its binlog coordinates.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Optional

from cdclake.positions import binlog_file_number
from cdclake.types import to_text

#: Milliseconds in an hour.
HOUR_MS = 3_600_000
#: The simulated MySQL database (schema) name.
DATABASE = "shop"


class Column(NamedTuple):
    """One column: ``(name, mysql_type, ctype, nullable)``.

    ``mysql_type`` is MySQL's column type text as Canal reports it (``bigint(20)``,
    ``decimal(12,2)``, ``datetime(3)``); ``ctype`` is the canonical type of
    :mod:`cdclake.types` (``bigint``, ``decimal(12,2)``, ``timestamp`` ...).
    """

    name: str
    mysql_type: str
    ctype: str
    nullable: bool


class Table(NamedTuple):
    """A table definition: name, ordered columns and primary-key column names."""

    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...]

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(f"table {self.name!r} has no column {name!r}")

    def key_of(self, row: Mapping[str, object]) -> tuple:
        """The primary-key tuple of a row image."""
        return tuple(row[k] for k in self.primary_key)

    def create_sql(self) -> str:
        """A MySQL ``CREATE TABLE`` statement for this definition."""
        cols = [
            f"`{c.name}` {c.mysql_type}{'' if c.nullable else ' NOT NULL'}" for c in self.columns
        ]
        pk = ", ".join(f"`{k}`" for k in self.primary_key)
        return f"CREATE TABLE `{self.name}` ({', '.join(cols)}, PRIMARY KEY ({pk})) ENGINE=InnoDB"


TABLES: dict[str, Table] = {
    "customers": Table(
        "customers",
        (
            Column("id", "bigint(20)", "bigint", False),
            Column("name", "varchar(100)", "string", False),
            Column("email", "varchar(200)", "string", True),
            Column("balance", "decimal(12,2)", "decimal(12,2)", False),
            Column("created_at", "datetime(3)", "timestamp_ntz", False),
            Column("birth_date", "date", "date", True),
        ),
        ("id",),
    ),
    "products": Table(
        "products",
        (
            Column("id", "int(11)", "int", False),
            Column("name", "varchar(100)", "string", False),
            Column("price", "decimal(10,2)", "decimal(10,2)", False),
            Column("weight", "double", "double", False),
            Column("stock", "int(11)", "int", False),
            Column("code", "varbinary(8)", "binary", False),
        ),
        ("id",),
    ),
    "orders": Table(
        "orders",
        (
            Column("id", "bigint(20)", "bigint", False),
            Column("customer_id", "bigint(20)", "bigint", False),
            Column("product_id", "int(11)", "int", False),
            Column("quantity", "int(11)", "int", False),
            Column("status", "varchar(20)", "string", False),
            Column("amount", "decimal(12,2)", "decimal(12,2)", False),
            Column("ordered_at", "datetime(3)", "timestamp_ntz", False),
            Column("note", "varchar(200)", "string", True),
        ),
        ("id",),
    ),
}

State = dict[str, dict[tuple, dict[str, object]]]


@dataclass(frozen=True)
class RowChange:
    """One row change as the binlog records it (row-based, full images).

    ``op`` is ``insert``, ``update`` or ``delete``; ``before`` is None for an insert and
    ``after`` None for a delete. ``binlog_file``/``binlog_pos`` locate the rows event and
    ``row`` is the row's index inside that event.
    """

    table: str
    op: str
    before: Optional[dict]
    after: Optional[dict]
    key: tuple
    binlog_file: str
    binlog_pos: int
    row: int

    @property
    def position(self) -> tuple[int, int, int]:
        """``(binlog file number, pos, row)``: the binlog order, as ``cdclake.positions`` has it."""
        return (binlog_file_number(self.binlog_file), self.binlog_pos, self.row)

    @property
    def image(self) -> dict:
        """The row image that identifies the row: ``after``, or ``before`` for a delete."""
        return self.after if self.after is not None else self.before  # type: ignore[return-value]


@dataclass(frozen=True)
class Transaction:
    """One committed transaction, in commit order.

    ``tx_id`` is the GTID (``server_uuid:sequence``), as Debezium's MySQL connector reports a
    transaction id; ``gtid`` is the same text. ``binlog_file``/``binlog_pos`` locate the
    transaction's first event (the GTID event). ``snapshot`` marks the bulk load at the start of
    the history. ``kind`` names what the transaction does (``bulk_load``, ``new_order`` ...).
    """

    tx_id: str
    gtid: str
    commit_ts_ms: int
    changes: tuple[RowChange, ...]
    binlog_file: str
    binlog_pos: int
    thread_id: int
    snapshot: bool = False
    kind: str = ""

    @property
    def commit_time(self) -> _dt.datetime:
        """The commit time as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.commit_ts_ms / 1000, tz=_dt.timezone.utc)


# ---------------------------------------------------------------------------------------------
# state helpers


def apply_change(state: State, table: str, op: str, before: Optional[Mapping], after: Optional[Mapping],
                 tables: Mapping[str, Table] = TABLES, check: bool = True) -> None:
    """Apply one row change to ``state`` (``{table: {pk: row}}``) in place.

    With ``check`` a change that does not fit the state (insert of an existing key, update or
    delete of a missing one, ``before`` differing from the current row) raises ValueError.
    """
    t = tables[table]
    rows = state.setdefault(table, {})
    if op in ("insert", "snapshot"):
        key = t.key_of(after)  # type: ignore[arg-type]
        if check and key in rows:
            raise ValueError(f"{table}: insert of existing key {key}")
        rows[key] = dict(after)  # type: ignore[arg-type]
    elif op == "update":
        key = t.key_of(after)  # type: ignore[arg-type]
        if check and (key not in rows or (before is not None and rows[key] != dict(before))):
            raise ValueError(f"{table}: update of key {key} does not match the current row")
        rows[key] = dict(after)  # type: ignore[arg-type]
    elif op == "delete":
        key = t.key_of(before)  # type: ignore[arg-type]
        if check and (key not in rows or rows[key] != dict(before)):  # type: ignore[arg-type]
            raise ValueError(f"{table}: delete of key {key} does not match the current row")
        rows.pop(key, None)
    else:
        raise ValueError(f"unknown op {op!r}")


def replay(history: Iterable[Transaction], until_ms: Optional[int] = None,
           tables: Mapping[str, Table] = TABLES) -> State:
    """The state after applying every transaction committed before ``until_ms`` (all when None)."""
    state: State = {name: {} for name in tables}
    for tx in history:
        if until_ms is not None and tx.commit_ts_ms >= until_ms:
            break
        for ch in tx.changes:
            apply_change(state, ch.table, ch.op, ch.before, ch.after, tables)
    return state


def as_text(state: State, tables: Mapping[str, Table] = TABLES) -> dict[str, dict[tuple, dict[str, Optional[str]]]]:
    """``state`` with every value in the canonical text form of its column (``cdclake.types``).

    Keys stay typed tuples. This is what bronze images hold for the same rows.
    """
    out: dict[str, dict[tuple, dict[str, Optional[str]]]] = {}
    for name, rows in state.items():
        cols = {c.name: c.ctype for c in tables[name].columns}
        out[name] = {k: {c: to_text(v, cols[c]) for c, v in row.items()} for k, row in rows.items()}
    return out


def ms_to_datetime(ms: int) -> _dt.datetime:
    """Naive UTC datetime for epoch milliseconds (millisecond precision)."""
    return _dt.datetime(1970, 1, 1) + _dt.timedelta(milliseconds=ms)


def datetime_to_ms(value: _dt.datetime) -> int:
    """Epoch milliseconds of a datetime (naive values are UTC)."""
    if value.tzinfo is not None:
        value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    delta = value - _dt.datetime(1970, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
