"""Silver's collapse of a batch to one change per key, in one aggregation, equals its reference.

:func:`cdclake.silver.merge.collapse` gathers each key's changes into one sorted array and reads
the reset, the latest change and the image column by column from it. The reference here is the
earlier form of the same rule in plain relational steps: a window for the reset, ``max_by`` for
the latest change, and one row per key and column (``explode`` of the images) for the image.
Both run on random batches of keyed changes (inserts, updates, deletes, moves, tombstones,
partial images, null values, nulls and ties inside positions, duplicate deliveries) and must give
the same rows.
"""
from __future__ import annotations

import random
from decimal import Decimal

import pytest

from cdclake.lake import LAST_CHANGE_COLUMNS, ORDER_TYPE
from cdclake.silver.merge import collapse
from cdclake.silver.order import in_struct

KEYED_SCHEMA = (
    "_k0 string, _k1 string, _kind string, _img map<string,string>, _before map<string,string>, "
    "_ord struct<p:array<decimal(38,0)>,kp:int,ko:bigint,row:int>, _tomb boolean, "
    "_cdc_position array<decimal(38,0)>, _cdc_kafka_partition int, _cdc_kafka_offset bigint, _cdc_op string, "
    "_cdc_source_ts_ms bigint")
COLUMNS = ["a", "b", "c", "d"]


def reference_collapse(rows, nkeys: int):
    """The collapse rule as a window, ``max_by`` and one row per key and column."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    keys = [f"_k{i}" for i in range(nkeys)]
    w = W.partitionBy(*keys)
    rows = rows.withColumn("_rst", F.max(F.when(F.col("_kind") != "update", F.col("_ord"))).over(w))
    last = rows.groupBy(*keys).agg(
        F.max_by(F.struct("_kind", "_before", "_tomb", *LAST_CHANGE_COLUMNS), F.col("_ord")).alias("_last"),
        F.max("_rst").alias("_rst"), F.max("_ord").alias("_lord"))
    o3 = in_struct("_ord").column()
    img = (rows.where((F.col("_kind") != "delete") & (F.col("_rst").isNull() | (F.col("_ord") >= F.col("_rst"))))
           .select(*keys, "_ord", o3.alias("_o3"), F.explode("_img").alias("_c", "_v"))
           .groupBy(*keys, "_c").agg(F.max_by(F.struct("_v", "_o3"), "_ord").alias("_x"))
           .groupBy(*keys).agg(F.map_from_entries(F.collect_list(F.struct("_c", "_x._v"))).alias("_img"),
                               F.map_from_entries(F.collect_list(F.struct("_c", "_x._o3"))).alias("_ords")))

    def short(c: str):
        return F.when(F.col(c).isNotNull(), in_struct(c).column())

    return last.join(img, keys, "left").select(
        *keys, F.when(F.col("_last._kind") == "delete", "delete").otherwise("upsert").alias("_op"),
        short("_rst").alias("_reset"), short("_lord").alias("_last_order"),
        F.coalesce("_img", F.create_map().cast("map<string,string>")).alias("_img"),
        F.coalesce("_ords", F.create_map().cast(f"map<string,{ORDER_TYPE}>")).alias("_ords"),
        F.col("_last._before").alias("_before"), F.col("_last._tomb").alias("_tomb"),
        *[F.col(f"_last.{c}").alias(c) for c in LAST_CHANGE_COLUMNS])


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


def random_batch(seed: int, keys: int = 25, changes: int = 160) -> list[dict]:
    """Keyed changes as :func:`cdclake.silver.keys.keyed_rows` gives them; orders unique but for
    exact duplicates (a change delivered twice at the same coordinates)."""
    rng = random.Random(seed)
    out, used = [], set()
    for n in range(changes):
        key = (str(rng.randint(0, keys)), rng.choice(["p", "q"]))
        kind = rng.choices(["insert", "update", "delete", "move"], [3, 6, 2, 1])[0]
        tomb = kind == "delete" and rng.random() < 0.15
        partial = kind == "update" and rng.random() < 0.5
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


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_collapse_in_one_aggregation_equals_the_reference(spark, seed):
    batch = spark.createDataFrame(random_batch(seed), KEYED_SCHEMA)
    got, want = _rows(collapse(batch, 2)), _rows(reference_collapse(batch, 2))
    assert len(want) > 20
    assert got == want


def test_collapse_of_a_single_key_column_batch(spark):
    batch = spark.createDataFrame(random_batch(9, keys=5, changes=60), KEYED_SCHEMA).drop("_k1")
    assert _rows(collapse(batch, 1)) == _rows(reference_collapse(batch, 1))
