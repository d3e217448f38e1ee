"""A plain-Python reference model of silver: the source tables' state after a history of row changes.

The model knows nothing of Kafka, wire formats or Spark. It states what a silver table must hold
once every change of a history has been delivered, whatever the delivery order, duplicates or
hours were:

- Changes are applied in true commit order: the order of their source positions (typed tuples,
  compared element by element as numbers). Positions in one history are distinct.
- ``insert`` / ``snapshot``: the row under the after image's key is replaced by the after image.
- ``update``: the row under the before image's key is taken out and the columns present in the
  after image are laid over it (a partial image keeps the other columns' values); the result is
  stored under the after image's key, so a key change deletes the old key.
- ``delete``: the row under the key is removed.
- ``truncate``: the table is emptied.

Rows are dicts of typed Python values (int, str, ``Decimal``, naive UTC ``datetime``, None); a
final state lists every column of the table, null where no change gave it a value.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

OPS = ("insert", "snapshot", "update", "delete", "truncate")
#: Column types a schema may use (canonical names of ``cdclake.types``).
TYPES = ("int", "bigint", "string", "decimal(10,2)", "timestamp")

Row = dict[str, object]
State = dict[str, dict[tuple, Row]]


@dataclass(frozen=True)
class Column:
    """One column: name and canonical type (one of :data:`TYPES`)."""

    name: str
    ctype: str


@dataclass(frozen=True)
class TableSchema:
    """A source table: name, key columns (in key order), value columns."""

    name: str
    key: tuple[Column, ...]
    values: tuple[Column, ...]

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.key + self.values

    @property
    def key_names(self) -> list[str]:
        return [c.name for c in self.key]

    def key_of(self, row: Mapping[str, object]) -> tuple:
        """The key tuple of a row image (every key column must be present)."""
        return tuple(row[c.name] for c in self.key)


@dataclass(frozen=True)
class Change:
    """One committed row change.

    ``before`` is the row as it was (None for inserts, snapshots and truncates); ``after`` holds
    the columns the change carries (every column for inserts and snapshots, the key columns plus
    any subset of the others for updates; None for deletes and truncates). ``position`` is the
    source's own order; ``commit_ms`` the commit time in ms since the epoch.
    """

    table: str
    op: str
    position: tuple[int, ...]
    commit_ms: int
    before: Optional[Row] = None
    after: Optional[Row] = None

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}")


def apply_change(state: State, schemas: Mapping[str, TableSchema], change: Change) -> None:
    """Apply one change to ``state`` in place (see the module docstring for the rules).

    Raises ``ValueError`` for a change the model cannot apply: an update or delete of a key that
    is not there (an insert of a key that is there replaces the row).
    """
    schema = schemas[change.table]
    table = state.setdefault(change.table, {})
    if change.op == "truncate":
        table.clear()
        return
    if change.op in ("insert", "snapshot"):
        key = schema.key_of(change.after)
        table[key] = {c.name: change.after.get(c.name) for c in schema.columns}
        return
    if change.op == "delete":
        key = schema.key_of(change.before)
        if key not in table:
            raise ValueError(f"delete of missing key {key} in {change.table}")
        del table[key]
        return
    old_key = schema.key_of(change.before)
    new_key = schema.key_of(change.after)
    if old_key not in table:
        raise ValueError(f"update of missing key {old_key} in {change.table}")
    row = table.pop(old_key)
    row.update(change.after)
    table[new_key] = row


def final_state(changes: Iterable[Change], schemas: Mapping[str, TableSchema]) -> State:
    """The state of every table of ``schemas`` after applying ``changes`` in position order."""
    state: State = {name: {} for name in schemas}
    for change in sorted(changes, key=lambda c: c.position):
        apply_change(state, schemas, change)
    return state


def normalise(value: object) -> object:
    """A value in the form both sides are compared in: datetimes naive UTC (Decimals compare by value)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value


def same(expected: object, actual: object) -> bool:
    """``expected`` (model) and ``actual`` (silver) are the same typed value."""
    expected, actual = normalise(expected), normalise(actual)
    return expected == actual and type(expected) is type(actual)


def diff_table(expected: Mapping[tuple, Row], rows: Iterable[Mapping[str, object]], schema: TableSchema,
               limit: int = 8) -> list[str]:
    """Differences between a model table and silver rows (``_cdc_*`` columns ignored).

    Every column of ``schema`` is compared, typed: a silver value must equal the model's value
    (null where the model has none) and be of the same Python type (int, str, ``Decimal``,
    ``datetime``); silver must have no other columns. Returns at most ``limit`` readable lines;
    empty when equal.
    """
    actual: dict[tuple, Row] = {}
    dup: list[str] = []
    for r in rows:
        data = {k: normalise(v) for k, v in r.items() if not k.startswith("_cdc_")}
        key = tuple(data.get(c.name) for c in schema.key)
        if key in actual:
            dup.append(f"key {key!r}: more than one silver row")
        actual[key] = data
    diffs = dup[:limit]
    for key in sorted(set(expected) | set(actual), key=repr):
        if len(diffs) >= limit:
            break
        exp, got = expected.get(key), actual.get(key)
        if exp is None:
            diffs.append(f"key {key!r}: in silver, not in the model: {got!r}")
        elif got is None:
            diffs.append(f"key {key!r}: in the model, missing from silver: {exp!r}")
        else:
            bad = {c.name: (exp.get(c.name), got.get(c.name)) for c in schema.columns
                   if not same(exp.get(c.name), got.get(c.name))}
            extra = sorted(set(got) - {c.name for c in schema.columns})
            if extra:
                diffs.append(f"key {key!r}: silver has columns the source has not: {extra}")
            if bad:
                diffs.append(f"key {key!r}: " + ", ".join(f"{c} expected {e!r} got {g!r}" for c, (e, g) in bad.items()))
    return diffs
