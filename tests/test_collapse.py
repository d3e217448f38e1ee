"""Silver's collapse of a batch to one change per key equals its reference.

:func:`cdclake.silver.merge.collapse` takes a key's image from its latest change alone when that
is a reset or carries the columns of every image of the key, and sends the other keys to
:func:`cdclake.silver.merge.collapse_by_column`, which reads each key's reset, latest change and
image in one aggregation by key, one ``max_by`` per column. The reference is
:func:`cdclake.silver.merge.collapse_exploded`, the same rule in relational steps: a window for
the reset, ``max_by`` for the latest change, and one row per key and column (``explode`` of the
images) for the image. Both run on random batches of keyed changes (inserts, updates, deletes,
moves, tombstones, partial images including inserts and moves without a column, null values,
nulls and ties inside positions, duplicate deliveries) and must give the same rows.
"""
from __future__ import annotations

import random
from decimal import Decimal

import pytest

from cdclake.silver import merge
from cdclake.silver.merge import collapse, collapse_by_column, collapse_exploded

KEYED_SCHEMA = (
    "_k0 string, _k1 string, _kind string, _img map<string,string>, _before map<string,string>, "
    "_ord struct<p:array<decimal(38,0)>,kp:int,ko:bigint,row:int>, _tomb boolean, "
    "_cdc_position array<decimal(38,0)>, _cdc_kafka_partition int, _cdc_kafka_offset bigint, _cdc_op string, "
    "_cdc_source_ts_ms bigint")
COLUMNS = ["a", "b", "c", "d"]


def _position(rng: random.Random) -> list:
    shape = rng.random()
    if shape < 0.05:
        return None
    if shape < 0.1:
        return [Decimal(rng.randint(0, 3)), None]
    return [Decimal(rng.randint(0, 5)) for _ in range(rng.choice([1, 2, 2, 3]))]


def _image(rng: random.Random, key: tuple, partial: bool) -> dict:
    cols = [c for c in COLUMNS if not partial or rng.random() < 0.6]
    img = {c: rng.choice([None, "x", "y", str(rng.randint(0, 99))]) for c in cols}
    img["id"], img["id2"] = key
    return img


def random_batch(seed: int, keys: int = 25, changes: int = 160, partial_updates: float = 0.5) -> list[dict]:
    """Keyed changes as :func:`cdclake.silver.keys.keyed_rows` gives them; orders unique but for
    exact duplicates (a change delivered twice at the same coordinates). ``partial_updates``: the
    share of updates whose image leaves columns out."""
    rng = random.Random(seed)
    out, used = [], set()
    for n in range(changes):
        key = (str(rng.randint(0, keys)), rng.choice(["p", "q"]))
        kind = rng.choices(["insert", "update", "delete", "move"], [3, 6, 2, 1])[0]
        tomb = kind == "delete" and rng.random() < 0.15
        partial = kind != "delete" and rng.random() < (partial_updates if kind == "update" else 0.2)
        pos = _position(rng)
        order = {"p": pos, "kp": rng.randint(0, 2), "ko": rng.randint(0, 40), "row": rng.choice([-1, 0, 0, 1])}
        ident = (key, repr(order))
        if ident in used:
            continue
        used.add(ident)
        row = {"_k0": key[0], "_k1": key[1], "_kind": kind,
               "_img": None if kind == "delete" else _image(rng, key, partial),
               "_before": _image(rng, key, rng.random() < 0.3) if kind != "insert" and rng.random() < 0.8 else None,
               "_ord": order, "_tomb": tomb, "_cdc_position": pos, "_cdc_kafka_partition": order["kp"],
               "_cdc_kafka_offset": order["ko"], "_cdc_op": "delete" if kind == "delete" else kind,
               "_cdc_source_ts_ms": rng.choice([None, 1_700_000_000_000 + n])}
        out.append(row)
        if rng.random() < 0.1:
            out.append(dict(row))  # the same change again
    return out


def _rows(frame) -> list:
    def plain(v):
        if isinstance(v, dict):
            return tuple(sorted((k, plain(x)) for k, x in v.items()))
        if hasattr(v, "asDict"):
            return tuple((k, plain(x)) for k, x in v.asDict().items())
        if isinstance(v, list):
            return tuple(plain(x) for x in v)
        return v

    return sorted((plain(r) for r in frame.collect()), key=repr)


ALL = ["id", "id2", *COLUMNS]


def _only(frame, columns: list[str]):
    """``frame`` with ``_img`` and ``_ords`` narrowed to ``columns``."""
    from pyspark.sql import functions as F

    cols = F.array(*[F.lit(c) for c in columns])
    return (frame.withColumn("_img", F.map_filter("_img", lambda k, v: F.array_contains(cols, k)))
            .withColumn("_ords", F.map_filter("_ords", lambda k, v: F.array_contains(cols, k))))


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_collapse_equals_the_exploded_reference(spark, seed):
    batch = spark.createDataFrame(random_batch(seed), KEYED_SCHEMA)
    want = _rows(collapse_exploded(batch, 2))
    assert len(want) > 20
    assert _rows(collapse(batch, 2, ALL)) == want
    assert _rows(collapse(batch, 2, ALL, by_column=True)) == want
    assert _rows(collapse_by_column(batch, 2, ALL)) == want


def _counting(monkeypatch) -> list:
    """Record the keyed rows :func:`collapse` hands to :func:`collapse_by_column`."""
    seen: list = []

    def by_column(rows, nkeys, columns=None):
        seen.append(rows.count())
        return collapse_by_column(rows, nkeys, columns)

    monkeypatch.setattr(merge, "collapse_by_column", by_column)
    return seen


@pytest.mark.parametrize("seed", [11, 12])
def test_full_images_collapse_from_the_latest_change_alone(spark, monkeypatch, seed):
    """Inserts and updates all carrying every column: no key needs the column-by-column collapse."""
    batch = spark.createDataFrame(random_batch(seed, partial_updates=0.0), KEYED_SCHEMA)
    batch = batch.where("_kind = 'delete' OR size(_img) = 6")
    seen = _counting(monkeypatch)
    assert _rows(collapse(batch, 2, ALL)) == _rows(collapse_exploded(batch, 2))
    assert seen == []


def test_only_keys_with_partial_images_collapse_column_by_column(spark, monkeypatch):
    batch = spark.createDataFrame(random_batch(13, keys=40, changes=300), KEYED_SCHEMA)
    seen = _counting(monkeypatch)
    assert _rows(collapse(batch, 2, ALL)) == _rows(collapse_exploded(batch, 2))
    assert len(seen) == 1 and 0 < seen[0] < batch.count()


def test_collapse_of_some_columns_leaves_the_others_out(spark):
    batch = spark.createDataFrame(random_batch(7), KEYED_SCHEMA)
    some = ["id", "b", "d", "not-in-any-image"]
    want = _rows(_only(collapse_exploded(batch, 2), some))
    assert _rows(collapse(batch, 2, some)) == want
    assert _rows(collapse_by_column(batch, 2, some)) == want


def test_collapse_of_a_single_key_column_batch(spark):
    batch = spark.createDataFrame(random_batch(9, keys=5, changes=60), KEYED_SCHEMA).drop("_k1")
    assert _rows(collapse(batch, 1, ALL)) == _rows(collapse_exploded(batch, 1))


def test_null_keys_collapse_like_any_other(spark):
    """A key column whose value is null (an image without it) groups like a value, in every form."""
    rows = random_batch(14, keys=6, changes=120)
    for r in rows[::3]:
        r["_k1"] = None
    batch = spark.createDataFrame(rows, KEYED_SCHEMA)
    want = _rows(collapse_exploded(batch, 2))
    assert any(r[1] == ("_k1", None) and r[5] != ("_img", ()) for r in want)
    assert _rows(collapse(batch, 2, ALL)) == want
    assert _rows(collapse_by_column(batch, 2, ALL)) == want


def test_a_table_wider_than_the_column_aggregates_collapses_exploded(spark, monkeypatch):
    monkeypatch.setattr(merge, "MAX_COLUMN_AGGREGATES", 3)
    batch = spark.createDataFrame(random_batch(8), KEYED_SCHEMA)
    assert "Generate" in collapse_by_column(batch, 2, ALL)._jdf.queryExecution().analyzed().toString()
    assert _rows(collapse(batch, 2, ALL)) == _rows(collapse_exploded(batch, 2))


def test_only_a_latest_delete_keeps_its_before_image(spark):
    """Every form of the collapse outputs a before image only for a key whose latest change is a
    delete, and then that delete's own; a key whose latest change is an update has none."""
    rows = random_batch(15)
    batch = spark.createDataFrame(rows, KEYED_SCHEMA)
    latest: dict = {}  # key -> (order as Spark sorts it, change); a null position sorts first: left out
    for r in rows:
        o, k = r["_ord"], (r["_k0"], r["_k1"])
        if o["p"] is None:
            continue
        at = (tuple((0,) if x is None else (1, x) for x in o["p"]), o["kp"], o["ko"], o["row"])
        if k not in latest or at > latest[k][0]:
            latest[k] = (at, r)
    for out in (collapse(batch, 2, ALL), collapse_by_column(batch, 2, ALL), collapse_exploded(batch, 2)):
        got = {(r["_k0"], r["_k1"]): r for r in out.collect()}
        assert any(r["_op"] == "delete" and r["_before"] for r in got.values())
        for k, r in got.items():
            if r["_op"] != "delete":
                assert r["_before"] is None, k
            elif k in latest and latest[k][1]["_kind"] == "delete":
                assert r["_before"] == latest[k][1]["_before"], k
