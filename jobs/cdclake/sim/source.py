"""A deterministic simulated MySQL OLTP database: the committed history of a small shop.

Three related tables (``customers``, ``products``, ``orders``) change through a stream of
transactions that look like an application's: a bulk load at the start of the first hour,
then orders placed (order rows inserted, product stock and customer balance updated in the
same transaction), orders advancing ``pending → paid → shipped → delivered``, cancellations,
purges of finished orders, sign-ups, profile edits (NULL ⇄ value), price changes and restocks.

The same ``seed``, ``start``, ``hours`` and ``tx_per_hour`` always give the same history.

Every history is guaranteed to contain (tests rely on these):

- a bulk load (``Transaction.snapshot``) of all products and the first customers, first;
- multi-row and multi-table transactions; inserts, updates and deletes interleaved;
- a customer email updated to NULL and later from NULL; order notes set and cleared;
- one customer deleted (with its orders) and later re-inserted under the same key with
  different values;
- per hour, one order updated at least three times within that hour;
- per interior hour boundary, one commit in the last 150 ms before it;
- binlog coordinates that rotate files across ``mysql-bin.000009`` → ``mysql-bin.000010``,
  positions restarting low (194) in each new file; ``(file number, pos, row)`` strictly
  increases in commit order.

Commit times are in ``[start, start + hours)``, strictly increasing, and the last one is at least
1 s before the end (so a rendered Kafka timestamp, at most 1 s later, stays inside the range).
Primary keys never change. Values are Python values: int, str, None, ``Decimal`` with the
column's scale, float, and naive ``datetime`` in UTC with millisecond precision.
"""
from __future__ import annotations

import datetime as _dt
import random
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Optional

from cdclake.positions import binlog_file_number
from cdclake.types import to_text

HOUR_MS = 3_600_000
BINLOG_PREFIX = "mysql-bin"
#: Sequence number of the first binlog file of every history.
FIRST_BINLOG_FILE = 7
#: Position of the first transaction in a binlog file (after the 4-byte magic number, the
#: Format_description event and the Previous_gtids event).
FIRST_EVENT_POS = 194
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
            Column("created_at", "datetime(3)", "timestamp", False),
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
            Column("ordered_at", "datetime(3)", "timestamp", False),
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


# ---------------------------------------------------------------------------------------------
# binlog event sizes (approximate, MySQL 5.7/8.0 row-based replication with GTIDs)

_GTID_EVENT = 65
_BEGIN_EVENT = 80
_XID_EVENT = 31
_ROWS_HEADER = 30
_MAX_ROWS_EVENT = 8192  # binlog-row-event-max-size
_FIXED_SIZES = {"bigint": 8, "int": 4, "double": 8, "timestamp": 7, "date": 3}


def _row_image_size(table: Table, row: Mapping[str, object]) -> int:
    size = (len(table.columns) + 7) // 8
    for c in table.columns:
        v = row.get(c.name)
        if v is None:
            continue
        if c.ctype in _FIXED_SIZES:
            size += _FIXED_SIZES[c.ctype]
        elif c.ctype.startswith("decimal"):
            size += 6
        elif isinstance(v, bytes):
            size += 1 + len(v)
        else:
            size += 1 + len(str(v).encode("utf-8"))
    return size


def _change_size(table: Table, before: Optional[Mapping], after: Optional[Mapping]) -> int:
    return sum(_row_image_size(table, img) for img in (before, after) if img is not None)


# ---------------------------------------------------------------------------------------------
# names and values

_FIRST = ["Ada", "Bruno", "Chloé", "Dmitri", "Emma", "Farid", "Grace", "Hiro", "Ines", "José",
          "Kai", "Léa", "Mia", "Noah", "Olga", "Priya", "Quinn", "Rafael", "Sven", "Tomás",
          "Uma", "Viktor", "Wen", "Xavier", "Yara", "Zoë", "Łukasz", "Søren"]
_LAST = ["Anders", "Baker", "Chen", "Dubois", "Evans", "Fischer", "García", "Hughes", "Ito",
         "Jensen", "Kowalski", "López", "Müller", "Nakamura", "O'Brien", "Petrov", "Rossi",
         "Schmidt", "Tanaka", "Ueda", "Varga", "Weber", "Yilmaz", "Zhang"]
_ADJ = ["Compact", "Deluxe", "Eco", "Heavy", "Light", "Mini", "Pro", "Smart", "Solid", "Ultra"]
_NOUN = ["Blender", "Chair", "Desk Lamp", "Drill", "Kettle", "Backpack", "Headphones", "Monitor",
         "Scooter", "Tent", "Toaster", "Umbrella", "Wallet", "Watch", "Keyboard", "Bike Helmet"]
_NOTES = ["leave at the door", "gift wrap, please", "call before delivery", "fragile",
          "deliver after 6pm", "ring twice", "use the side entrance", "no plastic bags",
          "birthday present \U0001F381", "back door, \"beware of the dog\""]
_NEXT_STATUS = {"pending": "paid", "paid": "shipped", "shipped": "delivered"}
CENT = Decimal("0.01")


class SimulatedSource:
    """A deterministic simulated MySQL database ``shop`` and its committed history.

    ``start`` must be an hour-aligned datetime (aware UTC or naive UTC); the history covers
    ``hours`` hours with about ``tx_per_hour`` transactions each (≥ 20). Defaults give about
    400 row changes per hour (about 1,200 in three hours, the bulk load included).
    """

    def __init__(self, seed: int, start: _dt.datetime, hours: int, tx_per_hour: int = 120):
        if start.tzinfo is not None:
            start = start.astimezone(_dt.timezone.utc).replace(tzinfo=None)
        if (start.minute, start.second, start.microsecond) != (0, 0, 0):
            raise ValueError(f"start {start} is not aligned to an hour")
        if hours < 1:
            raise ValueError("hours must be at least 1")
        if tx_per_hour < 20:
            raise ValueError("tx_per_hour must be at least 20")
        self.seed = seed
        self.start = start.replace(tzinfo=_dt.timezone.utc)
        self.hours = hours
        self.tx_per_hour = tx_per_hour
        self.database = DATABASE
        self.start_ms = datetime_to_ms(start)
        self.end_ms = self.start_ms + hours * HOUR_MS
        self._history: Optional[list[Transaction]] = None

    # -- public API --------------------------------------------------------------------------

    @property
    def tables(self) -> dict[str, Table]:
        """The table definitions, in dependency order (customers, products, orders)."""
        return dict(TABLES)

    def run(self) -> list[Transaction]:
        """The committed history, in commit order (computed once, then cached)."""
        if self._history is None:
            self._history = _Generator(self).generate()
        return list(self._history)

    def changes(self) -> Iterator[tuple[Transaction, RowChange]]:
        """Every row change with its transaction, in commit order."""
        for tx in self.run():
            for ch in tx.changes:
                yield tx, ch

    def final_state(self) -> State:
        """``{table: {pk_tuple: {column: value}}}`` after the whole history."""
        return replay(self.run())

    def state_at(self, ts_ms: int) -> State:
        """The state with every transaction committed strictly before ``ts_ms`` applied."""
        return replay(self.run(), until_ms=ts_ms)

    def hour_bounds(self) -> list[tuple[int, int]]:
        """``[(start_ms, end_ms), ...]`` of each simulated hour."""
        return [(self.start_ms + h * HOUR_MS, self.start_ms + (h + 1) * HOUR_MS) for h in range(self.hours)]


class _Generator:
    """Builds one history; all randomness comes from one ``random.Random(seed)``."""

    def __init__(self, src: SimulatedSource):
        self.src = src
        self.rng = random.Random(src.seed)
        self.state: State = {name: {} for name in TABLES}
        self.reserved: set[tuple[str, tuple]] = set()
        self.next_customer = 1
        self.next_order = 1_000_001
        self.scratch: dict[str, object] = {}

    # -- helpers -----------------------------------------------------------------------------

    def _dt(self, ms: int) -> _dt.datetime:
        return ms_to_datetime(ms)

    def _name(self) -> str:
        return f"{self.rng.choice(_FIRST)} {self.rng.choice(_LAST)}"

    def _email(self, name: str, n: int) -> str:
        base = name.lower().replace(" ", ".").replace("'", "")
        base = base.encode("ascii", "ignore").decode("ascii") or "user"
        return f"{base}{n}@{self.rng.choice(['example.com', 'mail.test', 'shop.invalid'])}"

    def _money(self, lo: float, hi: float) -> Decimal:
        return (Decimal(self.rng.randint(int(lo * 100), int(hi * 100))) / 100).quantize(CENT)

    def _pick(self, table: str, pred: Callable[[dict], bool] = lambda r: True) -> Optional[dict]:
        rows = [r for k, r in self.state[table].items() if (table, k) not in self.reserved and pred(r)]
        return self.rng.choice(rows) if rows else None

    def _picks(self, table: str, n: int, pred: Callable[[dict], bool] = lambda r: True) -> list[dict]:
        rows = [r for k, r in self.state[table].items() if (table, k) not in self.reserved and pred(r)]
        return self.rng.sample(rows, min(n, len(rows)))

    def _insert(self, out: list, table: str, row: dict) -> dict:
        apply_change(self.state, table, "insert", None, row)
        out.append((table, "insert", None, dict(row)))
        return row

    def _update(self, out: list, table: str, row: Mapping, **changes) -> dict:
        before = dict(row)
        after = dict(row)
        after.update(changes)
        if after == before:
            raise AssertionError("an update must change at least one column")
        apply_change(self.state, table, "update", before, after)
        out.append((table, "update", before, dict(after)))
        return after

    def _delete(self, out: list, table: str, row: Mapping) -> None:
        apply_change(self.state, table, "delete", dict(row), None)
        out.append((table, "delete", dict(row), None))

    def _new_customer_row(self, cid: int, ts_ms: int) -> dict:
        name = self._name()
        email = None if self.rng.random() < 0.2 else self._email(name, cid)
        return {"id": cid, "name": name, "email": email, "balance": self._money(0, 2500),
                "created_at": self._dt(ts_ms), "birth_date": self._birth_date()}

    def _birth_date(self) -> Optional[_dt.date]:
        if self.rng.random() < 0.25:
            return None
        return _dt.date(1940, 1, 1) + _dt.timedelta(days=self.rng.randint(0, 365 * 65))

    def _code(self) -> bytes:
        """8 raw bytes (any value 0-255: not text in any charset)."""
        return bytes(self.rng.randint(0, 255) for _ in range(8))

    # -- transaction kinds -------------------------------------------------------------------

    def tx_new_order(self, ts: int, lines: Optional[int] = None, reserve: bool = False,
                     note: object = "random") -> list:
        out: list = []
        cust = self._pick("customers")
        if cust is None:
            return self.tx_signup(ts)
        lines = lines or self.rng.choice([1, 1, 1, 2, 2, 3])
        products = self._picks("products", lines, lambda r: r["stock"] >= 3)
        if not products:
            return self.tx_restock(ts)
        orders, total = [], Decimal("0.00")
        if note == "random":
            note = None if self.rng.random() < 0.75 else self.rng.choice(_NOTES)
        for p in products:
            qty = self.rng.randint(1, 3)
            amount = (p["price"] * qty).quantize(CENT)
            if self.rng.random() < 0.1:
                amount = (amount * Decimal("0.9")).quantize(CENT)
            oid = self.next_order
            self.next_order += 1
            orders.append({"id": oid, "customer_id": cust["id"], "product_id": p["id"], "quantity": qty,
                           "status": "pending", "amount": amount, "ordered_at": self._dt(ts), "note": note})
            total += amount
        for o in orders:
            self._insert(out, "orders", o)
            if reserve:
                self.reserved.add(("orders", (o["id"],)))
        for o, p in zip(orders, products):
            self._update(out, "products", self.state["products"][(p["id"],)], stock=p["stock"] - o["quantity"])
        self._update(out, "customers", cust, balance=(cust["balance"] - total).quantize(CENT))
        self.scratch["last_orders"] = [o["id"] for o in orders]
        return out

    def tx_advance(self, ts: int) -> list:
        out: list = []
        rows = self._picks("orders", self.rng.choice([1, 1, 2, 3, 4]), lambda r: r["status"] in _NEXT_STATUS)
        if not rows:
            return self.tx_new_order(ts)
        rows.sort(key=lambda r: r["id"])
        for r in rows:
            changes: dict = {"status": _NEXT_STATUS[r["status"]]}
            if self.rng.random() < 0.15:
                changes["note"] = None if r["note"] is not None else self.rng.choice(_NOTES)
            self._update(out, "orders", r, **changes)
        return out

    def tx_cancel(self, ts: int) -> list:
        out: list = []
        o = self._pick("orders", lambda r: r["status"] in ("pending", "paid"))
        cust = o and self.state["customers"].get((o["customer_id"],))
        prod = o and self.state["products"].get((o["product_id"],))
        if o is None or cust is None or prod is None:
            return self.tx_advance(ts)
        self._update(out, "orders", o, status="cancelled", note=self.rng.choice([None, "cancelled by customer"]))
        self._update(out, "products", prod, stock=prod["stock"] + o["quantity"])
        self._update(out, "customers", cust, balance=(cust["balance"] + o["amount"]).quantize(CENT))
        return out

    def tx_purge(self, ts: int) -> list:
        out: list = []
        rows = self._picks("orders", self.rng.randint(1, 3), lambda r: r["status"] in ("cancelled", "delivered"))
        if not rows:
            return self.tx_advance(ts)
        for r in sorted(rows, key=lambda r: r["id"]):
            self._delete(out, "orders", r)
        return out

    def tx_customer_edit(self, ts: int) -> list:
        out: list = []
        c = self._pick("customers")
        if c is None:
            return self.tx_signup(ts)
        roll = self.rng.random()
        if roll < 0.5:
            email = None if c["email"] is not None and self.rng.random() < 0.4 else self._email(c["name"], self.rng.randint(1, 999))
            if email == c["email"]:
                email = None if email else self._email(c["name"], 1000)
            self._update(out, "customers", c, email=email)
        elif roll < 0.75:
            name = c["name"]
            while name == c["name"]:
                name = self._name() + ("" if self.rng.random() < 0.5 else " Jr.")
            self._update(out, "customers", c, name=name)
        elif roll < 0.9:
            self._update(out, "customers", c, balance=(c["balance"] + self._money(5, 500)).quantize(CENT))
        else:
            born = c["birth_date"]
            while born == c["birth_date"]:
                born = self._birth_date()
            self._update(out, "customers", c, birth_date=born)
        return out

    def tx_signup(self, ts: int) -> list:
        out: list = []
        for _ in range(self.rng.choice([1, 1, 1, 2])):
            cid = self.next_customer
            self.next_customer += 1
            self._insert(out, "customers", self._new_customer_row(cid, ts))
        return out

    def tx_price_change(self, ts: int) -> list:
        out: list = []
        rows = sorted(self._picks("products", self.rng.randint(1, 5)), key=lambda r: r["id"])
        for r in rows:
            factor = Decimal(self.rng.choice(["0.85", "0.9", "0.95", "1.05", "1.1", "1.2"]))
            price = max((r["price"] * factor).quantize(CENT), CENT)
            if price == r["price"]:
                price += CENT
            changes: dict = {"price": price}
            if self.rng.random() < 0.2:
                changes["weight"] = max(round(r["weight"] + self.rng.choice([-0.125, 0.25, 0.5]), 3), 0.05)
            if self.rng.random() < 0.15:
                changes["code"] = self._code()
            self._update(out, "products", r, **changes)
        return out

    def tx_restock(self, ts: int) -> list:
        out: list = []
        rows = sorted(self._picks("products", self.rng.randint(1, 3)), key=lambda r: r["id"])
        for r in rows:
            self._update(out, "products", r, stock=r["stock"] + self.rng.randint(10, 60))
        return out

    _WEIGHTS = (("new_order", 34), ("advance", 26), ("cancel", 6), ("purge", 6), ("customer_edit", 10),
                ("signup", 8), ("price_change", 5), ("restock", 5))

    def tx_random(self, ts: int) -> tuple[str, list]:
        kinds, weights = zip(*self._WEIGHTS)
        kind = self.rng.choices(kinds, weights)[0]
        return kind, getattr(self, f"tx_{kind}")(ts)

    # -- scripted transactions ---------------------------------------------------------------

    def s_hot_insert(self, ts: int, hour: int) -> list:
        self.scratch["last_orders"] = []
        out = self.tx_new_order(ts, lines=1, reserve=True, note=None)
        assert self.scratch["last_orders"], "no order could be placed"
        self.scratch[f"hot{hour}"] = self.scratch["last_orders"][0]  # type: ignore[index]
        return out

    def _hot(self, hour: int) -> dict:
        return self.state["orders"][(self.scratch[f"hot{hour}"],)]

    def s_hot_paid(self, ts: int, hour: int) -> list:
        out: list = []
        self._update(out, "orders", self._hot(hour), status="paid", note="express delivery")
        return out

    def s_hot_note(self, ts: int, hour: int) -> list:
        out: list = []
        self._update(out, "orders", self._hot(hour), note="express delivery; " + self.rng.choice(_NOTES))
        return out

    def s_hot_shipped(self, ts: int, hour: int) -> list:
        out: list = []
        self._update(out, "orders", self._hot(hour), status="shipped", note=None)
        return out

    def s_hot_delivered(self, ts: int, hour: int) -> list:
        out: list = []
        o = self._hot(hour)
        self._update(out, "orders", o, status="delivered")
        self.reserved.discard(("orders", (o["id"],)))
        return out

    def s_email_to_null(self, ts: int, hour: int) -> list:
        out: list = []
        c = self._pick("customers", lambda r: r["email"] is not None)
        assert c is not None
        self._update(out, "customers", c, email=None)
        self.reserved.add(("customers", (c["id"],)))
        self.scratch["null_email"] = c["id"]
        return out

    def s_email_from_null(self, ts: int, hour: int) -> list:
        out: list = []
        cid = self.scratch["null_email"]
        c = self.state["customers"][(cid,)]
        self._update(out, "customers", c, email=self._email(c["name"], 7000 + int(cid)))  # type: ignore[arg-type]
        self.reserved.discard(("customers", (cid,)))
        return out

    def s_delete_customer(self, ts: int, hour: int) -> list:
        out: list = []
        busy = {self.state["orders"][k[1]]["customer_id"] for k in self.reserved
                if k[0] == "orders" and k[1] in self.state["orders"]}
        c = self._pick("customers", lambda r: r["id"] not in busy)
        assert c is not None
        for o in [o for o in self.state["orders"].values() if o["customer_id"] == c["id"]]:
            self._delete(out, "orders", o)
        self._delete(out, "customers", c)
        self.scratch["deleted_customer"] = dict(c)
        self.reserved.add(("customers", (c["id"],)))
        return out

    def s_reinsert_customer(self, ts: int, hour: int) -> list:
        out: list = []
        old = self.scratch["deleted_customer"]
        assert isinstance(old, dict)
        row = self._new_customer_row(old["id"], ts)
        row["name"] = old["name"] + " (returning)"
        row["email"] = None if old["email"] is not None else self._email(old["name"], 9000 + old["id"])
        row["balance"] = (old["balance"] + Decimal("1.23")).quantize(CENT)
        self._insert(out, "customers", row)
        self.reserved.discard(("customers", (old["id"],)))
        return out

    # -- the history -------------------------------------------------------------------------

    def _bulk_load(self, ts0: int) -> list[tuple[int, str, list]]:
        """Products in one transaction, the first customers in batches of 50."""
        txs: list[tuple[int, str, list]] = []
        out: list = []
        for pid in range(1, 41):
            row = {"id": pid, "name": f"{self.rng.choice(_ADJ)} {self.rng.choice(_NOUN)}",
                   "price": self._money(2, 400), "weight": round(self.rng.uniform(0.05, 25.0), 3),
                   "stock": self.rng.randint(20, 400), "code": self._code()}
            self._insert(out, "products", row)
        txs.append((ts0, "bulk_load", out))
        for batch in range(3):
            out = []
            for _ in range(50):
                cid = self.next_customer
                self.next_customer += 1
                row = self._new_customer_row(cid, ts0 - self.rng.randint(1, 400) * 86_400_000 - self.rng.randint(0, 86_399_999))
                self._insert(out, "customers", row)
            txs.append((ts0 + 40 * (batch + 1), "bulk_load", out))
        return txs

    def generate(self) -> list[Transaction]:
        src, rng = self.src, self.rng
        n = src.tx_per_hour
        logical: list[tuple[int, str, list]] = self._bulk_load(src.start_ms + 1_000)
        last_bulk = logical[-1][0]
        scripts: dict[tuple[int, int], tuple[str, Callable[[int, int], list]]] = {}

        def at(hour: int, frac: float, name: str, fn: Callable[[int, int], list]) -> None:
            slot = (hour, int(frac * n))
            assert slot not in scripts, f"two scripted transactions share slot {slot}"
            scripts[slot] = (name, fn)

        for h in range(src.hours):
            at(h, 0.10, "hot_insert", self.s_hot_insert)
            at(h, 0.20, "hot_paid", self.s_hot_paid)
            at(h, 0.30, "hot_note", self.s_hot_note)
            at(h, 0.40, "hot_shipped", self.s_hot_shipped)
            at(h, 0.50, "hot_delivered", self.s_hot_delivered)
        at(0, 0.15, "email_to_null", self.s_email_to_null)
        at(0, 0.65, "email_from_null", self.s_email_from_null)
        at(0, 0.35, "delete_customer", self.s_delete_customer)
        at(min(1, src.hours - 1), 0.85, "reinsert_customer", self.s_reinsert_customer)

        for h in range(src.hours):
            h0 = src.start_ms + h * HOUR_MS
            lo = (last_bulk + 1_000 - h0) if h == 0 else 0
            interior = h < src.hours - 1
            hi = HOUR_MS - 1_000  # keeps every commit ≥ 1 s before the hour ends
            count = n - 1 if interior else n
            offsets = sorted(rng.sample(range(lo, hi), count))
            if interior:
                offsets.append(HOUR_MS - 150)  # a commit just before the boundary
            for i, off in enumerate(offsets):
                ts = h0 + off
                if (h, i) in scripts:
                    kind, fn = scripts[(h, i)]
                    changes = fn(ts, h)
                else:
                    kind, changes = self.tx_random(ts)
                if changes:
                    logical.append((ts, kind, changes))
        return self._physical(logical)

    def _physical(self, logical: list[tuple[int, str, list]]) -> list[Transaction]:
        """Assign GTIDs, threads and binlog coordinates (rotating files by size)."""
        rng = self.rng
        server_uuid = "%08x-%04x-11ee-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16),
                                                   0x8000 | rng.getrandbits(14), rng.getrandbits(48))
        gtid_seq = rng.randint(1_000, 9_000)
        threads = [rng.randint(10, 500) for _ in range(6)]

        # Group each transaction's changes into rows events: runs of the same table and op.
        planned = []
        total = 0
        for ts, kind, changes in logical:
            events: list[list] = []
            for ch in changes:
                table = TABLES[ch[0]]
                size = _change_size(table, ch[2], ch[3])
                if events and events[-1][0] == (ch[0], ch[1]) and events[-1][1] + size <= _MAX_ROWS_EVENT:
                    events[-1][1] += size
                    events[-1][2].append(ch)
                else:
                    events.append([(ch[0], ch[1]), _ROWS_HEADER + size, [ch]])
            tx_size = _GTID_EVENT + _BEGIN_EVENT + _XID_EVENT + sum(
                40 + len(DATABASE) + len(e[0][0]) + len(TABLES[e[0][0]].columns) + e[1] for e in events)
            planned.append((ts, kind, events, tx_size))
            total += tx_size
        # About six files per history, so every history crosses 000009 → 000010.
        max_binlog_size = max(4_096, total // 5)

        out: list[Transaction] = []
        file_no, pos = FIRST_BINLOG_FILE, FIRST_EVENT_POS
        for ts, kind, events, tx_size in planned:
            fname = f"{BINLOG_PREFIX}.{file_no:06d}"
            gtid = f"{server_uuid}:{gtid_seq}"
            gtid_seq += 1
            tx_pos = pos
            p = pos + _GTID_EVENT + _BEGIN_EVENT
            changes = []
            for (tname, _op), size, rows in events:
                p += 40 + len(DATABASE) + len(tname) + len(TABLES[tname].columns)  # Table_map event
                for i, (table, op, before, after) in enumerate(rows):
                    key = TABLES[table].key_of(after if after is not None else before)
                    changes.append(RowChange(table, op, before, after, key, fname, p, i))
                p += size
            pos = p + _XID_EVENT
            assert pos - tx_pos == tx_size
            out.append(Transaction(tx_id=gtid, gtid=gtid, commit_ts_ms=ts, changes=tuple(changes),
                                   binlog_file=fname, binlog_pos=tx_pos, thread_id=rng.choice(threads),
                                   snapshot=(kind == "bulk_load"), kind=kind))
            if pos >= max_binlog_size:
                file_no += 1
                pos = FIRST_EVENT_POS
        return out
