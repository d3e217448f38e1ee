"""One key's changes collapsed and merged in Python, as the silver stage's Spark queries do:
the twins of :func:`cdclake.silver.merge.collapse` (:func:`collapse_rows`) and of the statement
of :func:`cdclake.silver.merge.merge_sql` (:func:`merge_row`), which stay the reference the tests
compare with (``tests/test_silver_properties.py``, ``both_paths``), and the conversion of a
canonical text into its silver value (:func:`converter`, equal to :func:`cdclake.types.sql_cast`
where it converts at all). Used by the file-level merge (:mod:`cdclake.silver.small`).
"""
from __future__ import annotations

import base64
import datetime as dt
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, Callable, Optional

from cdclake import types as T
from cdclake.errors import NotFileLevel
from cdclake.lake import LAST_CHANGE_COLUMNS, SOFT_DELETE_COLUMN
from cdclake.silver.order import STORED_ROW

#: A change's order as Python values: ``(position, Kafka partition, Kafka offset)`` (position a
#: tuple of Decimal), with the row in its record as a fourth element inside a batch.
Order = tuple

_INT = re.compile(r"-?\d+\Z")
_DEC = re.compile(r"-?\d+(\.\d+)?\Z")
_FLOAT = re.compile(r"-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\Z|-?inf\Z|nan\Z")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}\Z")
_TS = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?\Z")
_LIMITS = {"int": 2 ** 31, "bigint": 2 ** 63}


def converter(ctype: str) -> Callable[[Optional[str]], Any]:
    """The Python value of a canonical text (:mod:`cdclake.types`) in silver type ``ctype``: the
    value Spark's conversion (:func:`cdclake.types.sql_cast`) gives, as pyarrow writes it. A text
    not in its type's canonical form (where Spark would return null or round differently), and
    the types ``float`` and ``array<T>``, raise :class:`NotFileLevel`."""
    st = T.spark_type(ctype)

    def strict(pattern, make):
        def conv(text):
            if text is None:
                return None
            if not pattern.match(text):
                raise NotFileLevel(f"{st} text {text[:40]!r}")
            try:
                return make(text)
            except (ValueError, InvalidOperation) as exc:
                raise NotFileLevel(f"{st} text {text[:40]!r}") from exc
        return conv

    if st == "string":
        return lambda text: text
    if st in _LIMITS:
        limit = _LIMITS[st]

        def integer(text: str) -> int:
            v = int(text)
            if not -limit <= v < limit:
                raise ValueError("out of range")
            return v
        return strict(_INT, integer)
    if st == "boolean":
        return strict(re.compile(r"(true|false)\Z"), lambda text: text == "true")
    if st == "double":
        return strict(_FLOAT, float)
    decimal = T.decimal_precision_scale(st)
    if decimal is not None:
        precision, scale = decimal
        quantum = Decimal(1).scaleb(-scale)

        def dec(text: str) -> Decimal:
            v = Decimal(text).quantize(quantum, rounding=ROUND_HALF_UP)
            if len(v.as_tuple().digits) > precision and v != 0:
                raise ValueError("precision")
            return v
        return strict(_DEC, dec)
    if st == "date":
        return strict(_DATE, dt.date.fromisoformat)
    if st == "timestamp":
        return strict(_TS, lambda text: dt.datetime.fromisoformat(text).replace(tzinfo=dt.timezone.utc))
    if st == "timestamp_ntz":
        return strict(_TS, dt.datetime.fromisoformat)
    if st == "binary":
        return strict(re.compile(r"[A-Za-z0-9+/]*={0,2}\Z"), lambda text: base64.b64decode(text, validate=True))
    raise NotFileLevel(f"column type {st}")


def _o3(order: Order) -> Order:
    return order[:3]


def greatest(*orders: Optional[Order]) -> Optional[Order]:
    """The latest of ``orders``, nulls skipped (SQL ``greatest``); None when all are None."""
    present = [o for o in orders if o is not None]
    return max(present) if present else None


def keyed_change(row: dict, pk: list[str]) -> Optional[dict]:
    """A bronze row (``op``, ``after``, ``before``, ``source_position``, ``kafka_partition``,
    ``kafka_offset``, ``row_in_record``, ``source_ts_ms``; images as dicts) as one keyed change,
    as :func:`cdclake.silver.keys.keyed_rows_with_moves` keys it for a batch without key changes:
    ``k`` (the key texts), ``kind``, ``img``, ``before``, ``ord`` (with its row), ``tomb``
    (False) and ``last`` (the :data:`cdclake.lake.LAST_CHANGE_COLUMNS`). None for a truncate or
    a row without an op, which the silver stage leaves out."""
    op = row["op"]
    if op is None or op == "truncate":
        return None
    delete = op == "delete"
    image = row["before"] if delete else row["after"]
    if image is None:
        raise NotFileLevel(f"a {op} without its image")
    key = tuple(image.get(k) for k in pk)
    if any(v is None for v in key):
        raise NotFileLevel("a change with a null key column")
    position = tuple(row["source_position"])
    if not position:
        raise NotFileLevel("changes without a source position")
    order = (position, row["kafka_partition"], row["kafka_offset"], row["row_in_record"])
    if any(x is None for x in order[1:]) or any(x is None for x in position):
        raise NotFileLevel("a change whose order has a null part")
    return {"k": key, "kind": "delete" if delete else "update" if op == "update" else "insert",
            "img": None if delete else dict(row["after"]), "before": row["before"], "ord": order, "tomb": False,
            "last": (list(position), row["kafka_partition"], row["kafka_offset"], op, row["source_ts_ms"])}


def tombstone_change(tomb: dict) -> dict:
    """A recorded tombstone (a row of :data:`cdclake.lake.TOMBSTONE_SCHEMA`) as the keyed delete
    :func:`cdclake.silver.keys.with_tombstones` adds for it."""
    position = tuple(tomb["_cdc_position"])
    return {"k": tuple(tomb["key"]), "kind": "delete", "img": None, "before": None,
            "ord": (position, tomb["_cdc_kafka_partition"], tomb["_cdc_kafka_offset"], STORED_ROW), "tomb": True,
            "last": (list(position), tomb["_cdc_kafka_partition"], tomb["_cdc_kafka_offset"], "delete",
                     tomb["_cdc_source_ts_ms"])}


def collapse_rows(changes: list[dict]) -> list[dict]:
    """One entry per key: the net effect of its keyed changes (:func:`keyed_change`), as
    :func:`cdclake.silver.merge.collapse_exploded` computes it: ``k``, ``op`` (``upsert`` or
    ``delete``), ``reset`` and ``last_order`` (orders without row, or None), ``img`` (column →
    text of the latest change since the reset carrying it), ``ords`` (column → that change's
    order), ``before`` (the latest change's before image when it is a delete), ``tomb`` and
    ``last`` (its :data:`cdclake.lake.LAST_CHANGE_COLUMNS`). Keys whose latest change is a
    recorded tombstone are left out (:func:`cdclake.silver.merge.merge_source`)."""
    by_key: dict[tuple, list[dict]] = {}
    for c in changes:
        by_key.setdefault(c["k"], []).append(c)
    out = []
    for key, rows in by_key.items():
        rows.sort(key=lambda c: c["ord"])
        last = rows[-1]
        if last["tomb"]:
            continue
        resets = [c["ord"] for c in rows if c["kind"] != "update"]
        reset = resets[-1] if resets else None
        img: dict[str, Optional[str]] = {}
        ords: dict[str, Order] = {}
        for c in rows:
            if c["kind"] != "delete" and (reset is None or c["ord"] >= reset):
                for col, v in c["img"].items():
                    img[col], ords[col] = v, _o3(c["ord"])
        out.append({"k": key, "op": "delete" if last["kind"] == "delete" else "upsert",
                    "reset": None if reset is None else _o3(reset), "last_order": _o3(last["ord"]),
                    "img": img, "ords": ords, "before": last["before"] if last["kind"] == "delete" else None,
                    "last": last["last"]})
    return out


def _stored_order(struct: Optional[dict]) -> Optional[Order]:
    if struct is None:
        return None
    if struct["p"] is None or struct["kp"] is None or struct["ko"] is None:
        raise NotFileLevel("a stored order with a null field")
    return (tuple(struct["p"]), struct["kp"], struct["ko"])


def _struct(order: Optional[Order]) -> Optional[dict]:
    return None if order is None else {"p": list(order[0]), "kp": order[1], "ko": order[2]}


def _positions(orders: dict[str, Optional[Order]], last: Order) -> list[tuple]:
    """``_cdc_column_positions``: the entries whose order is not the row's own (null-safe)."""
    return [(c, _struct(o)) for c, o in orders.items() if o != last]


def merge_row(t: Optional[dict], s: dict, pk: list[str], data_cols: list[str], conv: dict[str, Callable],
              soft: bool) -> Optional[dict]:
    """The silver row after merging the collapsed change ``s`` (:func:`collapse_rows`) into the
    silver row ``t`` (a dict of the table's columns; None: no row has the key), exactly as the
    statement of :func:`cdclake.silver.merge.merge_sql` sets it: None when the row is deleted or
    none is inserted, else the row's columns. ``conv``: column → :func:`converter`."""
    s_reset, s_last = s["reset"], s["last_order"]
    ords, img = s["ords"], s["img"]

    def fresh(c: str):
        o = ords.get(c)
        return conv[c](img[c]) if o is not None and (s_reset is None or o >= s_reset) else None

    def last_change(values) -> dict:
        return dict(zip(LAST_CHANGE_COLUMNS, values))

    if t is None:
        if s["op"] == "delete" and not soft:
            return None
        row = {k: conv[k](v) for k, v in zip(pk, s["k"])}
        if s["op"] == "delete":
            before = s["before"] or {}
            row.update({c: conv[c](before.get(c)) for c in data_cols})
        else:
            row.update({c: fresh(c) for c in data_cols})
        row.update(last_change(s["last"]))
        row["_cdc_reset"] = _struct(s_reset)
        row["_cdc_column_positions"] = _positions({c: ords.get(c) for c in data_cols}, s_last)
        if soft:
            row[SOFT_DELETE_COLUMN] = s["op"] == "delete"
        return row
    if t["_cdc_position"] is None:
        raise NotFileLevel("a silver row without a position")
    t_last = (tuple(t["_cdc_position"]), t["_cdc_kafka_partition"], t["_cdc_kafka_offset"])
    stored = {c: _stored_order(o) for c, o in (t["_cdc_column_positions"] or [])}
    reset = greatest(_stored_order(t["_cdc_reset"]), s_reset)
    newer = t_last < s_last

    def t_order(c: str) -> Optional[Order]:
        return stored[c] if c in stored else t_last

    if s["op"] == "delete" and newer:
        if not soft:
            return None
        row = dict(t)
        row[SOFT_DELETE_COLUMN] = True
        row["_cdc_reset"] = _struct(reset)
        row.update(last_change(s["last"]))
        row["_cdc_column_positions"] = _positions({c: t_order(c) for c in data_cols}, s_last)
        return row
    row = dict(t)
    orders: dict[str, Optional[Order]] = {}
    for c in data_cols:
        ot, os_ = t_order(c), ords.get(c)
        t_ok = ot is not None and (reset is None or ot >= reset)
        s_ok = os_ is not None and (reset is None or os_ >= reset)
        if s_ok and (not t_ok or os_ >= ot):
            row[c], orders[c] = conv[c](img[c]), os_
        elif t_ok:
            orders[c] = ot
        else:
            row[c], orders[c] = None, None
    if newer:
        row.update(last_change(s["last"]))
        if soft:
            row[SOFT_DELETE_COLUMN] = s["op"] == "delete"
    row["_cdc_reset"] = _struct(reset)
    row["_cdc_column_positions"] = _positions(orders, greatest(t_last, s_last))
    return row


def lazy_converter(ctype: str) -> Callable[[Optional[str]], Any]:
    """:func:`converter` of ``ctype``, made on first use (a column no value of the batch reaches
    may have a type this path does not convert)."""
    made: list = []

    def conv(text):
        if text is None:
            return None
        if not made:
            made.append(converter(ctype))
        return made[0](text)
    return conv


def same_row(new: dict, old: dict) -> bool:
    """Whether merged row ``new`` (:func:`merge_row`) holds what silver row ``old`` holds: the
    same value in every column of ``new``, column positions compared as sets of entries."""
    for c, v in new.items():
        w = old.get(c)
        if c == "_cdc_column_positions":
            v, w = (sorted((k, _stored_order(o)) for k, o in (x or [])) for x in (v, w))
        if v != w:
            return False
    return True
