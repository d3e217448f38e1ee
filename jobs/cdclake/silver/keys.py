"""Changes keyed by primary key: key changes (moves), the columns they carry over, and replays.

An update that changes the primary key (a *move*) deletes the old key and moves the whole row to
the new key: its after image is completed with the old row's other columns (:func:`carry_over`),
along chains of moves too. A change of a key older than a move of that key merged by an earlier
batch arrives late: the landed changes of the keys on the move's chain are replayed with the
batch (:func:`replay_rows`), so the late change reaches the key the row lives under now.

A key whose changes without a source position come from more than one Kafka partition has no
known order: :func:`check_kafka_order` fails its table before the MERGE (see
:mod:`cdclake.silver.order`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from cdclake import types as T
from cdclake.catalog import materialize
from cdclake.config import PipelineConfig
from cdclake.errors import SilverError
from cdclake.lake import LAST_CHANGE_COLUMNS, SOFT_DELETE_COLUMN, SourceTable, table_exists, tombstone_table
from cdclake.silver.order import (BRONZE, KAFKA_ORDER_HINT, STORED_ROW, UNORDERED_PARTITIONS, in_struct,
                                  latest_change)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: Longest chain of key changes (k1 -> k2 -> k3 ...) followed in one batch; longer ones are logged.
MAX_CHAIN = 16


def keyed_rows(changes: "DataFrame", pk: list[str]) -> "DataFrame":
    """:func:`keyed_rows_with_moves` without the flag."""
    return keyed_rows_with_moves(changes, pk)[0]


def key_change(keys):
    """Whether a bronze change is a *move*: an update whose before image holds every key column
    (not null) and whose after image differs from it in one (null-safe). A Column, never null.

    ``keys``: the key's column names, either a list of ``str`` (a table's known key: the test is
    unrolled into one plain comparison per key column, which Spark compiles with the rest of the
    query) or an array column (a row's own ``primary_key``: the test runs as Spark's higher-order
    ``exists``/``forall`` over it, which Spark evaluates row by row without code generation). Both
    forms give the same flag for the same names; an empty list is never a move."""
    from functools import reduce

    from pyspark.sql import functions as F

    before, after = F.col("before"), F.col("after")
    update = (F.col("op") == "update") & before.isNotNull()
    if isinstance(keys, (list, tuple)):
        if not keys:
            return F.lit(False)
        differs = reduce(lambda a, b: a | b, [~before[k].eqNullSafe(after[k]) for k in keys])
        held = reduce(lambda a, b: a & b, [before[k].isNotNull() for k in keys])
        return update & differs & held
    return (update & F.exists(keys, lambda k: ~before[k].eqNullSafe(after[k]))
            & F.forall(keys, lambda k: before[k].isNotNull()))


def keyed_rows_with_moves(changes: "DataFrame", pk: list[str],
                          moves: Optional[bool] = None) -> tuple["DataFrame", bool]:
    """Bronze changes as one row per key they affect (the input of :func:`cdclake.silver.merge.collapse`)
    and whether the batch has a move.

    Columns: ``_k0.._kN`` (key text), ``_kind`` (``insert`` for inserts and snapshots, ``update``,
    ``delete``, ``move``: an update that changed the key, as seen by its new key), ``_img``
    (map<string,string>, the after image; null for deletes), ``_before`` (the before image),
    ``_ord`` (the full order, :mod:`cdclake.silver.order`), ``_tomb`` (false), the
    :data:`cdclake.lake.LAST_CHANGE_COLUMNS`, and ``_o0.._oN`` (for a move, the old key). A move
    also gives a ``delete`` row of its old key at the same order. A move delivered more than once
    (same position and keys) is kept once, with its first Kafka coordinates.

    Computed once (:func:`cdclake.catalog.materialize`): one pass over ``changes``, and a second
    over its result only when the batch has a move. Returns ``(rows, moved)``: ``moved`` says
    whether the batch has a move (:func:`has_moves`, asked once). Given ``moves=False`` (the
    batch's summary proves it has none: :attr:`cdclake.silver.summary.BatchSummary.moves`), the
    rows are returned as a projection of ``changes``, not computed: the one query that reads them
    (the collapse) computes them.
    """
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    keys = [f"_k{i}" for i in range(len(pk))]
    olds = [f"_o{i}" for i in range(len(pk))]
    is_delete = F.col("op") == "delete"
    moved = key_change(list(pk))
    kind = (F.when(is_delete, "delete").when(moved, "move").when(F.col("op") == "update", "update")
            .otherwise("insert"))
    meta = [F.col("source_position").alias("_cdc_position"), F.col("kafka_partition").alias("_cdc_kafka_partition"),
            F.col("kafka_offset").alias("_cdc_kafka_offset"), F.col("op").alias("_cdc_op"),
            F.col("source_ts_ms").alias("_cdc_source_ts_ms")]
    rows = changes.select(
        *[F.when(is_delete, F.col("before")[k]).otherwise(F.col("after")[k]).alias(n) for k, n in zip(pk, keys)],
        kind.alias("_kind"), F.when(is_delete, F.lit(None)).otherwise(F.col("after")).alias("_img"),
        F.col("before").alias("_before"), BRONZE.column(row=True).alias("_ord"), F.lit(False).alias("_tomb"), *meta,
        *[F.when(moved, F.col("before")[k]).alias(n) for k, n in zip(pk, olds)])
    if moves is False:
        return rows, False
    rows = materialize(rows)
    if not has_moves(rows):
        return rows, False
    # a key change delivered twice is one change: the second copy would find the old key deleted
    # by the first and carry nothing over (other duplicates are harmless: they set the same values)
    is_move = F.col("_kind") == "move"
    first = W.partitionBy("_ord.p", "_ord.row", *keys, *olds).orderBy("_ord")
    rows = rows.where(~is_move).unionByName(
        rows.where(is_move).withColumn("_n", F.row_number().over(first)).where("_n = 1").drop("_n"))
    old = rows.where(F.col("_kind") == "move").select(
        *[F.col(o).alias(k) for o, k in zip(olds, keys)], F.lit("delete").alias("_kind"),
        F.lit(None).cast("map<string,string>").alias("_img"), "_before", "_ord", "_tomb", *LAST_CHANGE_COLUMNS,
        *[F.lit(None).cast("string").alias(o) for o in olds])
    return materialize(rows.unionByName(old)), True


def with_tombstones(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, rows: "DataFrame",
                    nkeys: int) -> "DataFrame":
    """Add the recorded delete of every key in ``rows`` as a ``delete`` row with ``_tomb`` true.

    A tombstone is a reset like any delete: changes older than it are out (a late, older insert
    or update cannot bring the row back), and a key whose latest change is its own tombstone has
    nothing to apply.
    """
    from pyspark.sql import functions as F

    name = tombstone_table(cfg, st)
    if not table_exists(spark, name):
        return rows
    keys = [f"_k{i}" for i in range(nkeys)]
    wanted = rows.select(F.array(*keys).alias("key")).distinct()
    tomb = spark.table(name).where(F.size("key") > 0).join(wanted, "key").select(
        *[F.col("key")[i].alias(k) for i, k in enumerate(keys)], F.lit("delete").alias("_kind"),
        F.lit(None).cast("map<string,string>").alias("_img"), F.lit(None).cast("map<string,string>").alias("_before"),
        latest_change().column(row=True).alias("_ord"),
        F.lit(True).alias("_tomb"), "_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset",
        F.lit("delete").alias("_cdc_op"), "_cdc_source_ts_ms",
        *[F.lit(None).cast("string").alias(f"_o{i}") for i in range(nkeys)])
    return rows.unionByName(tomb)


def _key_text(pk: list[str], types: dict[str, str]) -> str:
    """SQL select list of a silver table's key columns as canonical text, named ``_k0.._kN``."""
    return ", ".join(f"{T.sql_text(T.quote_ident(k), types[k])} AS _k{i}" for i, k in enumerate(pk))


def carry_over(spark: "SparkSession", name: Optional[str], rows: "DataFrame", pk: list[str],
               types: dict[str, str]) -> "DataFrame":
    """Complete the image of every key change (``move`` row) with the old key's other columns.

    In the source, an update that changes the key moves the whole row: columns the after image
    leaves out keep their values. The old row as of the move is built column by column from the
    old key's changes older than the move (this batch's rows, and the silver row of table
    ``name``, whose per-column positions say how old each value is) since its last insert or
    delete, falling back to the move's before image for a column neither holds. The move's
    ``_img`` becomes that row overlaid with the after image. Rows that are not moves pass through.
    For a move already merged (its new key's silver ``_cdc_reset`` has the move's source position:
    the same change delivered again, a rerun, or a replay by :func:`replay_rows`), the new key's
    silver values fill what the old row no longer holds, ahead of the before image.

    A chain of moves in the batch (k1 -> k2, then k2 -> k3) is completed in order: pass *i* fills
    the *i*-th move of every chain from the images the earlier passes filled, up to
    :data:`MAX_CHAIN` moves.
    """
    from pyspark.sql import functions as F

    n = len(pk)
    keys, olds = [f"_k{i}" for i in range(n)], [f"_o{i}" for i in range(n)]
    is_move = F.col("_kind") == "move"
    if not rows.where(is_move).take(1):
        return rows
    stored_table = name is not None and table_exists(spark, name)
    no_map = F.lit(None).cast("map<string,string>")
    old_keys = materialize(rows.where(is_move).select(*[F.col(o).alias(k) for o, k in zip(olds, keys)]).distinct())
    stored = None
    if stored_table:
        q = T.quote_ident
        data_cols = [c for c in spark.table(name).columns if not c.startswith("_cdc_") and c in types]
        text = ", ".join(f"{T.sql_string(c)}, {T.sql_text(q(c), types[c])}" for c in data_cols if c not in pk)
        key_text = _key_text(pk, types)
        # a move delivered again (another Kafka partition or offset, a later hour, a rerun) after it
        # was merged: its new key's latest reset is this very change (same source position), and
        # the old row it carried from may be gone; the new key's values stand in for it
        current = spark.sql(f"SELECT {key_text}, _cdc_reset.p AS _applied, "
                            f"map_filter({f'map({text})' if text else 'CAST(map() AS MAP<STRING,STRING>)'}, (k, v) -> v IS NOT NULL) AS _cur "
                            f"FROM {name} WHERE _cdc_reset IS NOT NULL")
        again = (rows.where(is_move).join(current, keys, "left")
                 .withColumn("_cur", F.when(F.col("_applied") == F.col("_ord.p"), F.col("_cur"))).drop("_applied"))
        rows = rows.where(~is_move).withColumn("_cur", no_map).unionByName(again)
        # one entry per column with the position of its value; the reset is a row of its own
        silver = spark.sql(
            f"SELECT {key_text}, _cdc_reset, {latest_change().sql(row=True)} AS _row_ord, _cdc_column_positions, "
            f"map({text or ''}) AS _vals FROM {name}").join(old_keys, keys)
        entries = silver.select(*keys, F.explode("_vals").alias("_c", "_v"), "_row_ord", "_cdc_column_positions").select(
            *keys, "_c", "_v", F.when(F.array_contains(F.map_keys("_cdc_column_positions"), F.col("_c")),
                                      in_struct("_cdc_column_positions[_c]").column(row=True))
            .otherwise(F.col("_row_ord")).alias("_ord"), F.lit(False).alias("_is_reset"))
        resets = silver.where(F.col("_cdc_reset").isNotNull()).select(
            *keys, F.lit(None).cast("string").alias("_c"), F.lit(None).cast("string").alias("_v"),
            in_struct("_cdc_reset").column(row=True).alias("_ord"),
            F.lit(True).alias("_is_reset"))
        stored = materialize(entries.unionByName(resets).withColumn("_tomb", F.lit(False)))
    else:
        rows = rows.withColumn("_cur", no_map)
    rows = rows.withColumn("_after", F.col("_img"))
    passes = _chain_length(rows, n)
    for _ in range(passes):
        rows = _fill_moves(rows, stored, old_keys, n)
        if passes > 1:
            rows = materialize(rows)
    return rows.drop("_cur", "_after")


def _chain_length(rows: "DataFrame", n: int) -> int:
    """Moves in the longest chain of the batch's moves (a move whose old key is an earlier move's new key)."""
    from pyspark.sql import functions as F

    keys, olds = [f"_k{i}" for i in range(n)], [f"_o{i}" for i in range(n)]
    moves = materialize(rows.where(F.col("_kind") == "move").select(*keys, *olds, "_ord"))
    level, depth = moves, 1
    while depth < MAX_CHAIN:
        prev = level.select(*[F.col(k).alias(f"_p{i}") for i, k in enumerate(keys)], F.col("_ord").alias("_pord"))
        nxt = (moves.join(prev, [F.col(o) == F.col(f"_p{i}") for i, o in enumerate(olds)])
               .where(F.col("_ord") > F.col("_pord")).select(*keys, *olds, "_ord").distinct())
        if not nxt.take(1):
            return depth
        level, depth = materialize(nxt), depth + 1
    log.warning("a chain of more than %d key changes in one batch: moves after the %dth carry the columns the "
                "%dth filled", MAX_CHAIN, MAX_CHAIN, MAX_CHAIN)
    return depth


def _fill_moves(rows: "DataFrame", stored: Optional["DataFrame"], old_keys: "DataFrame", n: int) -> "DataFrame":
    """One pass of :func:`carry_over`: every move's ``_img`` from ``_before``, ``_cur``, the old row and ``_after``."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    keys, olds = [f"_k{i}" for i in range(n)], [f"_o{i}" for i in range(n)]
    moves = rows.where(F.col("_kind") == "move").select(*olds, F.col("_ord").alias("_mord"), *keys)
    # the old keys' changes in this batch, as (key, order, kind, image)
    batch = rows.join(old_keys, keys).select(*keys, "_ord", "_kind", "_img", "_tomb")
    flat = batch.select(*keys, F.explode_outer("_img").alias("_c", "_v"), "_ord",
                        (F.col("_kind") != "update").alias("_is_reset"), "_tomb")
    flat = flat.where(F.col("_c").isNotNull() | F.col("_is_reset"))
    if stored is not None:
        flat = flat.unionByName(stored)
    # per move: the old key's entries older than the move, since its last reset before the move
    joined = moves.select(*olds, "_mord", *[F.col(k).alias(f"_n{i}") for i, k in enumerate(keys)])
    # a stored reset of the old key at the move's own source position (its tombstone, or in
    # soft-delete mode the flagged row) is the move itself, not an older reset
    own = F.col("_is_reset") & (F.col("_ord.row") == STORED_ROW) & (F.col("_ord.p") == F.col("_mord.p"))
    cand = (joined.join(flat, [F.col(o) == F.col(k) for o, k in zip(olds, keys)])
            .where((F.col("_ord") < F.col("_mord")) & ~own))
    cand = cand.withColumn("_since", F.max(F.when(F.col("_is_reset"), F.col("_ord"))).over(W.partitionBy(*olds, "_mord")))
    carried = (cand.where(F.col("_c").isNotNull() & (F.col("_since").isNull() | (F.col("_ord") >= F.col("_since"))))
               .groupBy(*olds, "_mord", "_c").agg(F.max_by("_v", "_ord").alias("_v"))
               .groupBy(*olds, "_mord").agg(F.map_from_entries(F.collect_list(F.struct("_c", "_v"))).alias("_carry")))
    rows = rows.join(carried.withColumnRenamed("_mord", "_ord"), olds + ["_ord"], "left")

    def without(m, *higher):
        return F.map_filter(m, lambda k, v: ~F.exists(F.array(*[F.array_contains(F.map_keys(h), k) for h in higher]), lambda x: x))

    empty = F.create_map().cast("map<string,string>")
    before, carry, cur = (F.coalesce(F.col(c), empty) for c in ("_before", "_carry", "_cur"))
    after = F.col("_after")
    filled = F.map_concat(without(before, cur, carry, after), without(cur, carry, after), without(carry, after), after)
    return rows.withColumn("_img", F.when(F.col("_kind") == "move", filled).otherwise(F.col("_img"))).drop("_carry")


def replay_rows(spark: "SparkSession", cfg: PipelineConfig, name: str, keyed: "DataFrame", rows: "DataFrame",
                landed: "DataFrame", pk: list[str], types: dict[str, str]) -> Optional["DataFrame"]:
    """Landed bronze changes to apply again so that late changes of a moved key reach its new key.

    A change of key k1 older than a key change k1 -> k2 that an earlier batch merged arrives late:
    the old row it belongs to is gone (hard-delete mode: k1's tombstone is newer; soft-delete
    mode: k1's flagged row has a newer reset), but k2 took its columns from it. This finds such
    changes in ``keyed`` (:func:`keyed_rows` plus tombstones), follows the landed key changes from
    their keys (k1 -> k2 -> k3 ..., each newer than the one before, up to :data:`MAX_CHAIN`), and
    returns every landed change (bronze rows of ``landed``, the table's changes of every landed
    hour) of the keys on those chains that is not in ``rows`` already. Applied with the batch, the
    key changes are completed again (:func:`carry_over`) with the late change in place. Returns
    None when nothing is late under a key change. :func:`cdclake.silver.apply_table` calls it only
    for tables that have had a key change merged (:data:`cdclake.lake.KEY_CHANGES_PROPERTY`).
    """
    from pyspark.sql import functions as F

    n = len(pk)
    keys, olds = [f"_k{i}" for i in range(n)], [f"_o{i}" for i in range(n)]
    if cfg.silver.delete_mode == "hard":
        resets = keyed.where("_tomb").groupBy(*keys).agg(F.max("_ord").alias("_r"))
    elif table_exists(spark, name):
        resets = spark.sql(f"SELECT {_key_text(pk, types)}, {in_struct('_cdc_reset').sql(row=True)} AS _r "
                           f"FROM {name} WHERE {SOFT_DELETE_COLUMN}")
    else:
        return None
    late = (keyed.where(~F.col("_tomb") & (F.col("_kind") != "delete")).join(resets, keys)
            .where(F.col("_ord") < F.col("_r")).groupBy(*keys).agg(F.min("_ord").alias("_since")))
    late = materialize(late)
    if not late.take(1):
        return None
    moved = landed.where((F.col("op") == "update") & F.col("before").isNotNull())
    moves = materialize(keyed_rows(moved, pk).where(F.col("_kind") == "move").select(*keys, *olds, "_ord"))
    frontier, chain = late, [late.select(*keys)]
    for hop in range(MAX_CHAIN):
        step = (moves.join(frontier.select(*[F.col(k).alias(o) for k, o in zip(keys, olds)], "_since"), olds)
                .where(F.col("_ord") > F.col("_since")).groupBy(*keys).agg(F.min("_ord").alias("_since")))
        if not step.take(1):
            break
        frontier = materialize(step)
        chain.append(frontier.select(*keys))
    else:
        log.warning("silver %s: late changes follow more than %d key changes; the rest is not replayed", name, MAX_CHAIN)
    if len(chain) == 1:
        return None
    on_chain = chain[0]
    for c in chain[1:]:
        on_chain = on_chain.unionByName(c)
    on_chain = materialize(on_chain.select(F.array(*keys).alias("_ck")).distinct())
    after_key = F.array(*[F.col("after")[k] for k in pk])
    before_key = F.array(*[F.col("before")[k] for k in pk])
    coords = ["kafka_topic", "kafka_partition", "kafka_offset", "row_in_record"]
    extra = (landed.join(F.broadcast(on_chain), (after_key == F.col("_ck")) | (before_key == F.col("_ck")), "left_semi")
             .join(rows.select(*coords), coords, "left_anti"))
    extra = materialize(extra)
    count = extra.count()
    log.info("silver %s: %d late change(s) of key(s) moved by an earlier key change; replaying %d landed change(s) "
             "of %d key(s) on their chains", name, late.count(), count, on_chain.count())
    return extra if count else None


def has_moves(keyed: "DataFrame") -> bool:
    """Whether keyed rows (:func:`keyed_rows`) hold a key change (``_kind`` ``move``)."""
    from pyspark.sql import functions as F

    return bool(keyed.where(F.col("_kind") == "move").take(1))


def kafka_order_stats(nkeys: int) -> list:
    """Aggregates over a collapsed batch (:func:`cdclake.silver.merge.collapse`, its
    :data:`cdclake.silver.order.UNORDERED_PARTITIONS`) for :func:`check_kafka_order`, computed by
    the query that counts the batch's upserts and deletes: ``_unordered`` (a key has a change
    without a source position) and ``_spread`` (a key whose changes without one come from two
    partitions: its ``_k0.._kN``, least and greatest partition; null: none)."""
    from pyspark.sql import functions as F

    lo, hi = (F.col(c) for c in UNORDERED_PARTITIONS)
    spread = F.struct(*[F.col(f"_k{i}") for i in range(nkeys)], lo.alias("lo"), hi.alias("hi"))
    return [F.max(lo.isNotNull()).alias("_unordered"),
            F.first(F.when(lo != hi, spread), ignorenulls=True).alias("_spread")]


def _key_named(pk: list[str], values) -> str:
    return ", ".join(f"{k}={str(v)[:100]}" for k, v in zip(pk, values))


def check_kafka_order(spark: "SparkSession", name: str, src: "DataFrame", stats: list, pk: list[str],
                      types: dict[str, str], into_empty: bool = False) -> None:
    """Raise :class:`SilverError` when a key of the collapsed batch ``src`` (to be merged into
    silver table ``name``) has changes without a source position from more than one Kafka
    partition, whose order is unknown (:mod:`cdclake.silver.order`): in the batch (``stats``: the
    rows of :func:`kafka_order_stats`; hard-delete mode's tombstones are among a key's changes),
    or against the silver row, whose latest change was made without a position in another
    partition (read only when the batch has changes without a position and ``name`` has rows:
    not ``into_empty``). The message names the table, the key, the partitions and the settings
    that fix it (:data:`cdclake.silver.order.KAFKA_ORDER_HINT`)."""
    from pyspark.sql import functions as F

    spread = next((r["_spread"] for r in stats if r["_spread"] is not None), None)
    if spread is not None:
        raise SilverError(f"silver table {name}: key ({_key_named(pk, spread[:len(pk)])}) has changes without a "
                          f"source position in Kafka partitions {spread['lo']} and {spread['hi']}: their order is "
                          f"unknown, so none is applied; {KAFKA_ORDER_HINT}")
    if into_empty or not any(r["_unordered"] for r in stats):
        return
    keys = [f"_k{i}" for i in range(len(pk))]
    stored = spark.sql(f"SELECT {_key_text(pk, types)}, _cdc_kafka_partition AS _skp FROM {name} "
                       "WHERE size(_cdc_position) = 0")
    lo = UNORDERED_PARTITIONS[0]
    bad = (src.where(F.col(lo).isNotNull()).select(*keys, lo).join(stored, keys)
           .where(F.col("_skp") != F.col(lo)).first())
    if bad is not None:
        raise SilverError(f"silver table {name}: key ({_key_named(pk, [bad[k] for k in keys])}) has a change without "
                          f"a source position in Kafka partition {bad[lo]}, and its silver row was last changed "
                          f"without one in partition {bad['_skp']}: their order is unknown, so none is applied; "
                          f"{KAFKA_ORDER_HINT}")
