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

The table, row change and transaction types and the state replay live in
:mod:`cdclake.sim.model`; the GTIDs and binlog coordinates are assigned by
:mod:`cdclake.sim.binlog`.
"""
from __future__ import annotations

import datetime as _dt
import random
from decimal import Decimal
from typing import Callable, Iterator, Mapping, Optional

from cdclake.sim.binlog import assign_binlog_coordinates
from cdclake.sim.model import (
    DATABASE,
    HOUR_MS,
    TABLES,
    RowChange,
    State,
    Table,
    Transaction,
    apply_change,
    datetime_to_ms,
    ms_to_datetime,
    replay,
)


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
#: Prices stay at most this (products.price is decimal(10,2), orders.amount decimal(12,2)): the
#: random walk of price changes over millions of transactions would otherwise outgrow the columns.
MAX_PRICE = Decimal("9999.99")


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
            price = min(max((r["price"] * factor).quantize(CENT), CENT), MAX_PRICE)
            if price == r["price"]:
                price += CENT if price < MAX_PRICE else -CENT
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
        return assign_binlog_coordinates(logical, self.rng)
