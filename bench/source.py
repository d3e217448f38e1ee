"""A simulated shop source that scales to a million row changes an hour.

:class:`cdclake.sim.SimulatedSource` picks the row a transaction touches by scanning every row of
the table (``_pick``/``_picks`` build the list of eligible rows each time), which is quadratic in
the table size: fine for the demo's few hundred rows, hours for 200,000 keys.
:class:`FastSource` is the same shop (the same transaction kinds, weights, scripted cases, binlog
coordinates, ``Transaction``/``RowChange`` objects, so every renderer of :mod:`cdclake.sim` applies
unchanged); only the random choice of rows differs: keys are kept in an indexable list per table
and eligible rows are found by rejection sampling (falling back to a scan from a random place,
stopping at the rows it needs, when none is found).
The same ``seed``, ``start`` and ``tx_per_hour`` always give the same history.

:func:`history_for_events` sizes a one-hour history to a number of row changes.
"""
from __future__ import annotations

import datetime as dt
import math
from typing import Callable, Mapping, Optional

from cdclake.sim.model import Transaction
from cdclake.sim.source import SimulatedSource, _Generator

#: Row changes per transaction of the shop's mix (measured over large histories; the bulk load aside).
ROWS_PER_TX = 2.85
_TRIES = 256


class _KeyIndex:
    """The keys of one table in a list with O(1) append, removal and random access."""

    def __init__(self) -> None:
        self.keys: list[tuple] = []
        self.pos: dict[tuple, int] = {}

    def add(self, key: tuple) -> None:
        if key not in self.pos:
            self.pos[key] = len(self.keys)
            self.keys.append(key)

    def remove(self, key: tuple) -> None:
        i = self.pos.pop(key, None)
        if i is None:
            return
        last = self.keys.pop()
        if i < len(self.keys):
            self.keys[i] = last
            self.pos[last] = i

    def __len__(self) -> int:
        return len(self.keys)


class _FastGenerator(_Generator):
    """``_Generator`` with O(1) row picks (rejection sampling over an index of keys)."""

    def __init__(self, src: SimulatedSource):
        super().__init__(src)
        self.index = {name: _KeyIndex() for name in self.state}

    def _eligible(self, table: str, key: tuple, pred: Callable[[dict], bool]) -> bool:
        return (table, key) not in self.reserved and pred(self.state[table][key])

    def _scan(self, table: str, n: int, pred: Callable[[dict], bool]) -> list[dict]:
        """Up to ``n`` eligible rows, in index order from a random place, wrapping around once.

        Rejection sampling misses a rare kind of row (an order not yet delivered, once millions
        of orders are): scanning the whole table for it, as the library does, made a 5M-change
        history quadratic. This stops at the ``n``-th eligible row.
        """
        idx = self.index[table]
        start, out = self.rng.randrange(len(idx)), []
        for i in range(len(idx)):
            key = idx.keys[(start + i) % len(idx)]
            if self._eligible(table, key, pred):
                out.append(self.state[table][key])
                if len(out) == n:
                    break
        return out

    def _pick(self, table: str, pred: Callable[[dict], bool] = lambda r: True) -> Optional[dict]:
        idx = self.index[table]
        if len(idx) > 4 * _TRIES:
            for _ in range(_TRIES):
                key = idx.keys[self.rng.randrange(len(idx))]
                if self._eligible(table, key, pred):
                    return self.state[table][key]
            found = self._scan(table, 1, pred)
            return found[0] if found else None
        return super()._pick(table, pred)

    def _picks(self, table: str, n: int, pred: Callable[[dict], bool] = lambda r: True) -> list[dict]:
        idx = self.index[table]
        if len(idx) > 4 * _TRIES:
            found: dict[tuple, dict] = {}
            for _ in range(_TRIES):
                key = idx.keys[self.rng.randrange(len(idx))]
                if key not in found and self._eligible(table, key, pred):
                    found[key] = self.state[table][key]
                    if len(found) == n:
                        break
            if found:  # up to n rows: a rare kind of row may give fewer, as a small table does
                return list(found.values())
            return self._scan(table, n, pred)
        return super()._picks(table, n, pred)

    def _insert(self, out: list, table: str, row: dict) -> dict:
        row = super()._insert(out, table, row)
        self.index[table].add(self.src.tables[table].key_of(row))
        return row

    def _delete(self, out: list, table: str, row: Mapping) -> None:
        super()._delete(out, table, row)
        self.index[table].remove(self.src.tables[table].key_of(row))


class FastSource(SimulatedSource):
    """:class:`cdclake.sim.SimulatedSource` with a generator that scales (see the module docstring).

    ``max_rows`` trims the history after generation to whole transactions holding at most that
    many row changes.
    """

    def __init__(self, seed: int, start: dt.datetime, hours: int, tx_per_hour: int = 120,
                 max_rows: Optional[int] = None):
        super().__init__(seed, start, hours, tx_per_hour)
        self.max_rows = max_rows

    def run(self) -> list[Transaction]:
        if self._history is None:
            history = _FastGenerator(self).generate()
            if self.max_rows is not None:
                kept, n = [], 0
                for tx in history:
                    if n + len(tx.changes) > self.max_rows:
                        break
                    kept.append(tx)
                    n += len(tx.changes)
                history = kept
            self._history = history
        return list(self._history)


def history_for_events(events: int, start: dt.datetime, seed: int = 42) -> FastSource:
    """A one-hour :class:`FastSource` starting at ``start`` with about ``events`` row changes (never more)."""
    tx_per_hour = max(20, math.ceil(events / ROWS_PER_TX * 1.04))
    return FastSource(seed=seed, start=start, hours=1, tx_per_hour=tx_per_hour, max_rows=events)
