"""A simulated MySQL database of N tables, for the cost per table (``bench.run --tables``).

:class:`TablesSource` is a database ``shop`` of ``n`` tables, each with the columns and primary key
of one of the simulated shop's three tables in turn (:data:`cdclake.sim.model.TABLES`: every
column type the simulator has, a decimal, a timestamp without a zone, a date, a binary, nullable
columns), named after it: ``customers_00001``, ``products_00002``, ``orders_00003``,
``customers_00004`` ... Its history holds ``hours`` hours (at least two) with ``changes`` row
changes per table in each:

- the first hour creates the tables' rows: mostly inserts (:data:`FIRST_HOUR_MIX`), the way a
  table's first rows arrive (the warm hour, run before the measured one);
- every later hour changes them as an hour of production traffic does (:data:`HOUR_MIX`):
  inserts of new keys, updates of one or two columns of existing rows, deletes of existing rows
  (a row may change several times in an hour, inside a transaction or across them).

Transactions hold one to five changes, usually of different tables, in a random order of the
hour's changes; commits are spread over the hour, every one at least 1 s from its ends (so a
rendered Kafka timestamp, at most 0.9 s later, stays in the hour). GTIDs and binlog coordinates
come from :func:`cdclake.sim.binlog.assign_binlog_coordinates`, so every renderer of
:mod:`cdclake.sim` applies unchanged; :meth:`TablesSource.final_state` replays the history
(:func:`cdclake.sim.model.replay`), the state every silver table must equal. The same arguments
always give the same history.
"""
from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Optional

from bench.source import _KeyIndex
from cdclake.sim.binlog import assign_binlog_coordinates
from cdclake.sim.model import (HOUR_MS, TABLES, Column, State, Table, Transaction, apply_change, datetime_to_ms,
                               ms_to_datetime, replay)
from cdclake.types import decimal_precision_scale

#: Share of inserts, updates and deletes of the first hour's row changes (a table's first rows).
FIRST_HOUR_MIX = (("insert", 0.9), ("update", 0.1), ("delete", 0.0))
#: Share of inserts, updates and deletes of every later hour's row changes.
HOUR_MIX = (("insert", 0.25), ("update", 0.6), ("delete", 0.15))
#: Changes per transaction, drawn uniformly.
TX_SIZES = (1, 1, 2, 2, 3, 4, 5)
_WORDS = ("Ada", "Bruno", "Chloé", "Dmitri", "Grace", "Hiro", "José", "Łukasz", "Søren", "Zoë", "blue", "kettle",
          "pending", "shipped", "gift wrap, please", "back door, \"beware of the dog\"")


def table_definitions(n: int) -> dict[str, Table]:
    """``n`` table definitions, ``{name: Table}`` in order: the shop's three shapes in turn,
    named ``<shape>_<i:05d>`` (i from 1)."""
    shapes = list(TABLES.values())
    out = {}
    for i in range(1, n + 1):
        shape = shapes[(i - 1) % len(shapes)]
        name = f"{shape.name}_{i:05d}"
        out[name] = Table(name, shape.columns, shape.primary_key)
    return out


class TablesSource:
    """The database of ``n`` tables and its history (see the module docstring).

    ``start``: an hour-aligned aware UTC datetime, the first hour's start; ``changes``: row changes
    per table and hour (at least 1); ``hours``: at least 2. ``tables``, :meth:`run`,
    :meth:`final_state` as :class:`cdclake.sim.SimulatedSource` has them.
    """

    def __init__(self, n: int, changes: int, seed: int, start: dt.datetime, hours: int = 2):
        if n < 1 or changes < 1 or hours < 2:
            raise ValueError("a TablesSource needs at least 1 table, 1 change per table and 2 hours")
        if (start.minute, start.second, start.microsecond) != (0, 0, 0):
            raise ValueError(f"start {start} is not aligned to an hour")
        self.n, self.changes, self.seed, self.hours = n, changes, seed, hours
        self.start = start
        self.start_ms = datetime_to_ms(start)
        self.tables = table_definitions(n)
        self._history: Optional[list[Transaction]] = None

    def run(self) -> list[Transaction]:
        """The committed history, in commit order (computed once)."""
        if self._history is None:
            self._history = _generate(self)
        return list(self._history)

    def final_state(self) -> State:
        """``{table: {pk_tuple: {column: value}}}`` after the whole history."""
        return replay(self.run(), tables=self.tables)

    def hour_of(self, tx: Transaction) -> int:
        """The index of the hour ``tx`` committed in (0 for the first)."""
        return (tx.commit_ts_ms - self.start_ms) // HOUR_MS


def _value(col: Column, rng: random.Random, ts_ms: int) -> object:
    """A random value of ``col``'s type (None for about one value in five of a nullable column)."""
    if col.nullable and rng.random() < 0.2:
        return None
    t = col.ctype
    if t == "bigint":
        return rng.randint(1, 10**12)
    if t == "int":
        return rng.randint(0, 10**6)
    if t == "double":
        return round(rng.uniform(0.05, 1000.0), 3)
    if t == "date":
        return dt.date(1940, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 65))
    if t in ("timestamp", "timestamp_ntz"):
        return ms_to_datetime(ts_ms - rng.randint(0, 400 * 86_400_000))
    if t == "binary":
        return rng.randbytes(8)
    ps = decimal_precision_scale(t)
    if ps:
        p, s = ps
        return Decimal(rng.randint(0, 10 ** min(p, 8) - 1)).scaleb(-s)
    return f"{rng.choice(_WORDS)} {rng.randint(1, 99_999)}"


def _row(table: Table, key: int, rng: random.Random, ts_ms: int) -> dict:
    row = {c.name: _value(c, rng, ts_ms) for c in table.columns}
    row[table.primary_key[0]] = key
    return row


def _updated(table: Table, row: dict, rng: random.Random, ts_ms: int) -> dict:
    """``row`` with one or two of its non-key columns given new values (at least one differs)."""
    others = [c for c in table.columns if c.name not in table.primary_key]
    after = dict(row)
    while after == row:
        for c in rng.sample(others, rng.choice((1, 1, 2))):
            after[c.name] = _value(c, rng, ts_ms)
    return after


def _generate(src: TablesSource) -> list[Transaction]:
    rng = random.Random(src.seed)
    tables = src.tables
    state: State = {name: {} for name in tables}
    keys = {name: _KeyIndex() for name in tables}
    next_key = {name: 1 for name in tables}
    logical: list[tuple[int, str, list]] = []
    for hour in range(src.hours):
        ops, weights = zip(*(FIRST_HOUR_MIX if hour == 0 else HOUR_MIX))
        todo = [name for name in tables for _ in range(src.changes)]
        rng.shuffle(todo)
        groups: list[list[str]] = []
        while todo:
            size = rng.choice(TX_SIZES)
            groups.append(todo[:size])
            del todo[:size]
        h0 = src.start_ms + hour * HOUR_MS
        stamps = sorted(rng.sample(range(h0 + 1_000, h0 + HOUR_MS - 1_000), len(groups)))
        for ts, group in zip(stamps, groups):
            changes = []
            for name in group:
                table, op = tables[name], rng.choices(ops, weights)[0]
                idx = keys[name]
                if op != "insert" and not len(idx):
                    op = "insert"
                if op == "insert":
                    before, after = None, _row(table, next_key[name], rng, ts)
                    next_key[name] += 1
                else:
                    before = state[name][idx.keys[rng.randrange(len(idx))]]
                    after = _updated(table, before, rng, ts) if op == "update" else None
                apply_change(state, name, op, before, after, tables)
                key = table.key_of(after if after is not None else before)
                (idx.add if after is not None else idx.remove)(key)
                changes.append((name, op, None if before is None else dict(before), after))
            logical.append((ts, "first_hour" if hour == 0 else "traffic", changes))
    return assign_binlog_coordinates(logical, rng, tables)
