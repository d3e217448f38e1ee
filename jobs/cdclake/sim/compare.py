"""Compare silver tables with the simulated source's state, value by value.

Silver values arrive as Python objects from Spark (``Row``) or pyiceberg (Arrow ``to_pylist``):
Decimal, int, float, str, bytes, and datetimes (aware UTC from pyiceberg, naive from Spark in a
UTC session). Expected values come from :meth:`SimulatedSource.final_state` (naive UTC datetimes).
"""
from __future__ import annotations

import datetime as dt
from typing import Iterable, Mapping


def _norm(v: object) -> object:
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return v


def compare_table(expected: Mapping[tuple, Mapping[str, object]], rows: Iterable[Mapping[str, object]],
                  primary_key: list[str], limit: int = 5) -> list[str]:
    """Differences between ``expected`` (``{pk tuple: row}``) and silver ``rows`` (``_cdc_*`` ignored).

    Returns at most ``limit`` human-readable lines; empty when equal.
    """
    actual = {}
    for r in rows:
        data = {k: _norm(v) for k, v in r.items() if not k.startswith("_cdc_")}
        actual[tuple(data[k] for k in primary_key)] = data
    diffs = []
    for key in sorted(set(expected) | set(actual), key=str):
        exp, got = expected.get(key), actual.get(key)
        if exp is None:
            diffs.append(f"key {key}: in silver, not in the source")
        elif got is None:
            diffs.append(f"key {key}: in the source, missing from silver")
        else:
            bad = {c: (exp[c], got.get(c)) for c in exp if _norm(exp[c]) != got.get(c)}
            if bad:
                diffs.append(f"key {key}: " + ", ".join(f"{c} expected {e!r} got {g!r}" for c, (e, g) in bad.items()))
        if len(diffs) >= limit:
            break
    return diffs
