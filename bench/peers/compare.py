"""Equality of our silver rows and a peer's rows, value by value, by primary key.

Rows are lists of dicts from any engine: Spark ``Row.asDict()``, pyiceberg / pyarrow
``to_pylist()``, pandas records, JSON. Values are normalized per column type before comparing:

=============  ==========================================================================
type           normalized to
=============  ==========================================================================
decimal(p,s)   ``Decimal`` quantized to scale ``s`` (from Decimal, int, str, or float via repr)
timestamp      naive UTC ``datetime`` (aware values converted; ISO strings parsed; pandas
               ``Timestamp`` accepted), truncated to ``timestamp_precision`` digits if given
date           ``date`` (ISO strings, datetimes, days since epoch)
binary         ``bytes`` (bytearray, memoryview; a str is taken as Base64, the canonical text)
int types      ``int``; float / double ``float`` (NaN equals NaN; ``float_tolerance`` relative)
boolean        ``bool`` (``"true"``/``"1"``)
string         ``str``
=============  ==========================================================================

Columns whose names start with ``_cdc_`` and columns not listed in ``columns`` are ignored.
Type names are canonical (``cdclake.types``) or Flink/SQL spellings (``DECIMAL(12, 2)``,
``TIMESTAMP(3)``, ``VARCHAR(20)``, ``BYTES``).
"""
from __future__ import annotations

import base64
import datetime as dt
import math
import re
from decimal import Decimal
from typing import Any, Iterable, Mapping, Optional

_DECIMAL_RE = re.compile(r"^(?:decimal|numeric|dec)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?")
_EPOCH = dt.date(1970, 1, 1)


def kind(t: str) -> tuple[str, Optional[int]]:
    """``(kind, scale_or_precision)``: kind is decimal, timestamp, date, binary, int, float,
    boolean or string; the number is a decimal's scale or a timestamp's precision (else None)."""
    s = t.strip().lower()
    m = _DECIMAL_RE.match(s)
    if m:
        return "decimal", int(m.group(2) or 0)
    if s.startswith("timestamp"):
        m = re.match(r"timestamp(?:_ltz)?\s*\(\s*(\d)\s*\)", s)
        return "timestamp", int(m.group(1)) if m else None
    base = re.sub(r"\s*\(.*$", "", s).split()[0] if s else "string"
    if base == "date":
        return "date", None
    if base in ("binary", "bytes", "varbinary", "blob"):
        return "binary", None
    if base in ("tinyint", "smallint", "int", "integer", "bigint", "long"):
        return "int", None
    if base in ("float", "real", "double"):
        return "float", None
    if base in ("boolean", "bool"):
        return "boolean", None
    return "string", None


def _to_datetime(v: Any) -> dt.datetime:
    if hasattr(v, "to_pydatetime"):  # pandas Timestamp
        v = v.to_pydatetime()
    if isinstance(v, str):
        v = dt.datetime.fromisoformat(v.strip().replace(" ", "T", 1))
    elif isinstance(v, (int, float)) and not isinstance(v, bool):  # epoch microseconds
        v = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=int(v))
    elif isinstance(v, dt.date) and not isinstance(v, dt.datetime):
        v = dt.datetime(v.year, v.month, v.day)
    if v.tzinfo is not None:
        v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v


def normalize(value: Any, t: str, timestamp_precision: Optional[int] = None) -> Any:
    """``value`` in the comparable form of type ``t`` (None stays None)."""
    if value is None:
        return None
    k, n = kind(t)
    if k == "decimal":
        if isinstance(value, float):
            d = Decimal(repr(value))
        elif isinstance(value, (Decimal, int)) and not isinstance(value, bool):
            d = Decimal(value)
        else:
            d = Decimal(str(value).strip())
        return d.quantize(Decimal(1).scaleb(-n)) if d.is_finite() else d
    if k == "timestamp":
        v = _to_datetime(value)
        if timestamp_precision is not None and timestamp_precision < 6:
            step = 10 ** (6 - timestamp_precision)
            v = v.replace(microsecond=v.microsecond - v.microsecond % step)
        return v
    if k == "date":
        if isinstance(value, dt.datetime):
            return _to_datetime(value).date()
        if isinstance(value, dt.date):
            return value
        if isinstance(value, str):
            return dt.date.fromisoformat(value.strip()[:10])
        return _EPOCH + dt.timedelta(days=int(value))
    if k == "binary":
        if isinstance(value, str):
            return base64.b64decode(value)
        return bytes(value)
    if k == "int":
        return int(value)
    if k == "float":
        return float(value)
    if k == "boolean":
        if isinstance(value, str):
            return value.strip().lower() in ("true", "1", "t", "yes")
        return bool(value)
    return value if isinstance(value, str) else str(value)


def _equal(a: Any, b: Any, k: str, tol: float) -> bool:
    if k == "float" and a is not None and b is not None:
        if math.isnan(a) and math.isnan(b):
            return True
        return a == b or (tol > 0 and math.isclose(a, b, rel_tol=tol, abs_tol=0.0))
    return a == b


def compare_rows(ours: Iterable[Mapping[str, Any]], theirs: Iterable[Mapping[str, Any]],
                 columns: Mapping[str, str], primary_key: list[str], limit: int = 5,
                 timestamp_precision: Optional[int] = None, float_tolerance: float = 0.0) -> dict:
    """Compare two row sets of one table by primary key.

    ``columns`` maps column name to type (only those columns are compared).
    ``timestamp_precision`` truncates both sides' timestamps (e.g. 3 when one side keeps
    milliseconds only). Returns ``{"equal": bool, "ours": n, "theirs": n, "missing": n (keys only
    in ours), "extra": n (keys only in theirs), "different": n (keys whose values differ),
    "duplicate_keys": n, "diffs": [first ``limit`` differences as text]}``.
    """
    kinds = {c: kind(t)[0] for c, t in columns.items()}

    def index(rows: Iterable[Mapping[str, Any]]) -> tuple[dict, int, int]:
        out: dict[tuple, dict] = {}
        dups = n = 0
        for r in rows:
            n += 1
            row = {c: normalize(r.get(c), t, timestamp_precision) for c, t in columns.items()}
            key = tuple(row[k] for k in primary_key)
            if key in out:
                dups += 1
            out[key] = row
        return out, n, dups

    a, n_a, dup_a = index(ours)
    b, n_b, dup_b = index(theirs)
    missing = sorted(set(a) - set(b), key=repr)
    extra = sorted(set(b) - set(a), key=repr)
    diffs: list[str] = []
    if dup_a or dup_b:
        diffs.append(f"duplicate keys: {dup_a} in ours, {dup_b} in theirs")
    for key in missing[:limit]:
        diffs.append(f"key {key}: in ours, missing from theirs")
    for key in extra[:limit]:
        diffs.append(f"key {key}: in theirs, not in ours")
    different = 0
    for key in sorted(set(a) & set(b), key=repr):
        ra, rb = a[key], b[key]
        bad = [c for c in columns if not _equal(ra[c], rb[c], kinds[c], float_tolerance)]
        if bad:
            different += 1
            if len(diffs) < 3 * limit:
                diffs.append(f"key {key}: " + ", ".join(f"{c} ours {ra[c]!r} theirs {rb[c]!r}" for c in bad))
    equal = not (missing or extra or different or dup_a or dup_b)
    return {"equal": equal, "ours": n_a, "theirs": n_b, "missing": len(missing), "extra": len(extra),
            "different": different, "duplicate_keys": dup_a + dup_b, "diffs": diffs[: 3 * limit]}


def compare_tables(ours: Mapping[str, Iterable[Mapping[str, Any]]], theirs: Mapping[str, Iterable[Mapping[str, Any]]],
                   schemas: Mapping[str, Mapping[str, Any]], **kwargs: Any) -> dict:
    """:func:`compare_rows` for several tables. ``schemas``: ``{table: {"columns": {...},
    "primary_key": [...]}}`` (the shape of a peer's ``input_spec["tables"]``). Returns
    ``{"equal": bool, "tables": {table: result}}``; a table missing on one side counts as empty."""
    results = {t: compare_rows(ours.get(t, ()), theirs.get(t, ()), s["columns"], list(s["primary_key"]), **kwargs)
               for t, s in schemas.items()}
    return {"equal": all(r["equal"] for r in results.values()), "tables": results}


def expected_rows(state: Mapping[tuple, Mapping[str, Any]]) -> list[dict]:
    """Rows of one table of ``SimulatedSource.final_state()`` (``{pk: row}``) as a list of dicts."""
    return [dict(r) for r in state.values()]
