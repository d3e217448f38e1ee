"""Collapse a batch to one change per key, and the MERGE that applies it to silver column by column.

Each key's changes collapse into one (:func:`collapse`): the latest change decides delete or
upsert; the latest insert, snapshot, delete, move, tombstone or truncate is the key's *reset*;
the image is built column by column from the latest change since the reset carrying each column,
and remembers which change that was. One ``MERGE INTO`` per table applies the result
(:func:`merge_sql`): a value replaces the silver value only when it comes from a newer change, and
neither counts when older than the latest reset.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from cdclake import types as T
from cdclake.catalog import materialize, temp_view
from cdclake.config import PipelineConfig
from cdclake.faults import kill_point
from cdclake.lake import LAST_CHANGE_COLUMNS, META_COLUMNS, ORDER_TYPE, SOFT_DELETE_COLUMN
from cdclake.silver.keys import check_kafka_order, kafka_order_stats
from cdclake.silver.order import UNORDERED_PARTITIONS, in_struct, latest_change, literal, unordered_partitions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The temporary view holding a table's collapsed batch while it is merged (the name's start:
#: :func:`merge_view` adds the table's, as tables may be merged at the same time).
MERGE_VIEW = "_cdc_merge_source"


def merge_view(name: str) -> str:
    """The temporary view of silver table ``name``'s collapsed batch (:func:`cdclake.catalog.temp_view`)."""
    return temp_view(MERGE_VIEW, name)


#: Widest table whose batch collapses with one aggregate per column (:func:`collapse`); a wider
#: one collapses through its exploded images (:func:`collapse_exploded`), which any width suits.
MAX_COLUMN_AGGREGATES = 256


def collapse(rows: "DataFrame", nkeys: int, columns: Optional[list[str]] = None,
             by_column: bool = False) -> "DataFrame":
    """One row per key: the net effect for that key of the batch's changes, keyed
    (:func:`cdclake.silver.keys.keyed_rows`); output as :func:`collapse_by_column`'s.

    Most keys need nothing but their latest change: when it is a reset (insert, snapshot, delete,
    move, tombstone), nothing older counts; when it is an update whose image carries the same
    columns as every image of the key in the batch (full row images, as Debezium, Canal and most
    formats send), it is the latest change carrying each of those columns and no change carries
    another. One aggregation by key (one shuffle) finds each key's latest change, its reset and
    the least and greatest column list of its images; such keys take their image (restricted to
    ``columns``) and every column's order from the latest change. Only the other keys (an update
    with a partial image is the latest, or the images' column lists differ) collapse column by
    column (:func:`collapse_by_column`), on their own changes. The result is the same; the tests
    compare it with :func:`collapse_exploded`.

    ``by_column``: every key collapses column by column at once (one aggregation, no second pass
    over the rows), the faster form when most keys' latest change carries a partial image
    (:attr:`cdclake.silver.summary.BatchSummary.partial`). The result is the same either way.

    Computed once (:func:`cdclake.catalog.materialize`): the returned frame is a filter and a
    projection of computed rows, cheap to read more than once.
    """
    from pyspark.sql import functions as F

    if by_column and columns is not None and len(columns) <= MAX_COLUMN_AGGREGATES:
        return materialize(collapse_by_column(rows, nkeys, columns))
    rows = deletes_before(rows)
    keys = [f"_k{i}" for i in range(nkeys)]
    o3 = in_struct("_ord").column()
    per_key = materialize(rows.groupBy(*keys).agg(
        F.max_by(F.struct("_kind", "_before", "_tomb", *LAST_CHANGE_COLUMNS, "_img", o3.alias("_o3")),
                 F.col("_ord")).alias("_last"),
        F.max(F.when(F.col("_kind") != "update", F.col("_ord"))).alias("_rst"), F.max("_ord").alias("_lord"),
        F.min(F.map_keys("_img")).alias("_cmin"), F.max(F.map_keys("_img")).alias("_cmax"), *unordered_partitions()))
    latest_only = (F.col("_last._kind") != "update") | (F.col("_last._img").isNotNull()
                                                        & (F.col("_cmin") == F.col("_cmax")))
    img = F.col("_last._img")
    if columns is not None:
        wanted = F.array(*[F.lit(c) for c in columns]) if columns else F.array().cast("array<string>")
        img = F.map_filter(img, lambda k, v: F.array_contains(wanted, k))
    # this filter also lets Spark build its runtime Bloom filter of the batch's keys for the
    # MERGE's scan of the table: Spark builds one only from a side holding a filter it deems
    # selective over a scan, and without this one most MERGEs get none (tests/test_silver_semantics.py)
    whole = per_key.where(latest_only).withColumn("_img", img)
    out = _collapsed(whole, keys, F.col("_img"), F.transform_values("_img", lambda k, v: F.col("_last._o3")))
    partial = per_key.where(~latest_only).select(*keys)
    if not partial.take(1):
        return out
    same_key = [rows[k].eqNullSafe(partial[k]) for k in keys]
    return materialize(out.unionByName(collapse_by_column(rows.join(partial, same_key, "left_semi"), nkeys, columns)))


def collapse_by_column(rows: "DataFrame", nkeys: int, columns: Optional[list[str]] = None) -> "DataFrame":
    """One row per key: the net effect for that key of the batch's changes, keyed
    (:func:`cdclake.silver.keys.keyed_rows`), column by column.

    Changes are ordered by ``(source_position, kafka_partition, kafka_offset, row_in_record)``.
    The latest insert, snapshot, delete or move of a key is its *reset*: changes older than it no
    longer count. Output columns: ``_k0.._kN``, ``_op`` (``delete`` when the latest change is a
    delete, else ``upsert``), ``_reset`` (order of the reset, :data:`cdclake.lake.ORDER_TYPE`, or
    null), ``_img`` (map<string,string>: per column, the value of the latest change since the
    reset that carries it), ``_ords`` (map<string, order>: the order of that change per column),
    ``_last_order`` (order of the latest change), ``_before`` (the before image of the latest
    change when it is a delete, else null: :func:`deletes_before`),
    ``_tomb`` (the latest change is a recorded tombstone: nothing new), the
    :data:`cdclake.lake.LAST_CHANGE_COLUMNS` of the latest change, and ``_kp_lo``/``_kp_hi``
    (the least and greatest Kafka partition of its changes without a source position, null when
    none: :func:`cdclake.silver.order.unordered_partitions`).

    ``columns``: every column an image may carry that counts (the silver table's; ``_img`` and
    ``_ords`` hold no other). Given, and at most :data:`MAX_COLUMN_AGGREGATES`, the batch collapses
    in one aggregation by key, one shuffle, no array: per column, the latest change that carries
    it *or is a reset*. That change is never older than the key's reset, and it is a reset that
    does not carry the column (a delete, an insert without it) exactly when no change since the
    reset carries the column: the column is then left out. Otherwise (and as the reference the
    tests compare with): :func:`collapse_exploded`, the same result.
    """
    from pyspark.sql import functions as F

    if columns is None or len(columns) > MAX_COLUMN_AGGREGATES:
        return collapse_exploded(rows, nkeys)
    rows = deletes_before(rows)
    keys = [f"_k{i}" for i in range(nkeys)]
    is_reset = F.col("_kind") != "update"
    o3 = in_struct("_ord").column()

    def latest(c: str):
        carried = F.map_contains_key("_img", c)  # null for a delete (no image): a reset
        return F.max_by(F.struct(carried.alias("has"), F.col("_img")[c].alias("v"), o3.alias("o")),
                        F.when(carried | is_reset, F.col("_ord")))

    per_key = rows.groupBy(*keys).agg(
        F.max_by(F.struct("_kind", "_before", "_tomb", *LAST_CHANGE_COLUMNS), F.col("_ord")).alias("_last"),
        F.max(F.when(is_reset, F.col("_ord"))).alias("_rst"), F.max("_ord").alias("_lord"), *unordered_partitions(),
        *[latest(c).alias(f"_c{i}") for i, c in enumerate(columns)])
    # the carried ones (a column no change of the key carries, or its reset left out, has no entry)
    kept = F.filter(F.array(*[F.struct(F.lit(c).alias("c"), F.col(f"_c{i}.has").alias("has"),
                                       F.col(f"_c{i}.v").alias("v"), F.col(f"_c{i}.o").alias("o"))
                              for i, c in enumerate(columns)]), lambda e: e["has"])
    img = F.map_from_entries(F.transform(kept, lambda e: F.struct(e["c"], e["v"])))
    ords = F.map_from_entries(F.transform(kept, lambda e: F.struct(e["c"], e["o"])))
    return _collapsed(per_key, keys, img, ords)


def deletes_before(rows: "DataFrame") -> "DataFrame":
    """Keyed ``rows`` with ``_before`` kept for deletes only (null otherwise).

    The collapse outputs the before image of a key's latest change only when that change is a
    delete (:func:`merge_sql` reads it only then); an update's before image is as wide as its
    after image, and left in it would double the bytes the aggregation by key sorts."""
    from pyspark.sql import functions as F

    return rows.withColumn("_before", F.when(F.col("_kind") == "delete", F.col("_before")))


def _collapsed(per_key: "DataFrame", keys: list[str], img, ords) -> "DataFrame":
    """:func:`collapse`'s output columns from one row per key with ``_last``, ``_rst``, ``_lord``
    and the columns ``img`` and ``ords`` (null: no column)."""
    from pyspark.sql import functions as F

    def short(c: str):
        return F.when(F.col(c).isNotNull(), in_struct(c).column())

    return per_key.select(
        *keys, F.when(F.col("_last._kind") == "delete", "delete").otherwise("upsert").alias("_op"),
        short("_rst").alias("_reset"), short("_lord").alias("_last_order"),
        F.coalesce(img, F.create_map().cast("map<string,string>")).alias("_img"),
        F.coalesce(ords, F.create_map().cast(f"map<string,{ORDER_TYPE}>")).alias("_ords"),
        F.col("_last._before").alias("_before"), F.col("_last._tomb").alias("_tomb"),
        *[F.col(f"_last.{c}").alias(c) for c in LAST_CHANGE_COLUMNS], *UNORDERED_PARTITIONS)


def collapse_exploded(rows: "DataFrame", nkeys: int) -> "DataFrame":
    """:func:`collapse` through each change's exploded image, for any number of columns: the reset
    of each key by a window, the latest change by key, the latest value since the reset by key and
    column, then joined (four shuffles)."""
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    rows = deletes_before(rows)
    keys = [f"_k{i}" for i in range(nkeys)]
    w = W.partitionBy(*keys)
    rows = rows.withColumn("_rst", F.max(F.when(F.col("_kind") != "update", F.col("_ord"))).over(w))
    last = rows.groupBy(*keys).agg(
        F.max_by(F.struct("_kind", "_before", "_tomb", *LAST_CHANGE_COLUMNS), F.col("_ord")).alias("_last"),
        F.max("_rst").alias("_rst"), F.max("_ord").alias("_lord"), *unordered_partitions())
    o3 = in_struct("_ord").column()
    img = (rows.where((F.col("_kind") != "delete") & (F.col("_rst").isNull() | (F.col("_ord") >= F.col("_rst"))))
           .select(*keys, "_ord", o3.alias("_o3"), F.explode("_img").alias("_c", "_v"))
           .groupBy(*keys, "_c").agg(F.max_by(F.struct("_v", "_o3"), "_ord").alias("_x"))
           .groupBy(*keys).agg(F.map_from_entries(F.collect_list(F.struct("_c", "_x._v"))).alias("_img"),
                               F.map_from_entries(F.collect_list(F.struct("_c", "_x._o3"))).alias("_ords")))
    img = img.select(*[F.col(k).alias(f"_j{i}") for i, k in enumerate(keys)], "_img", "_ords")
    same_key = [F.col(k).eqNullSafe(F.col(f"_j{i}")) for i, k in enumerate(keys)]  # a key may hold a null
    return _collapsed(last.join(img, same_key, "left"), keys, F.col("_img"), F.col("_ords"))


def merge_sql(cfg: PipelineConfig, name: str, view: str, pk: list[str], types: dict[str, str],
              into_empty: bool = False) -> str:
    """The ``MERGE INTO`` statement applying a collapsed batch (view ``view``, :func:`collapse`) to ``name``.

    Column by column: a value from the batch replaces the silver value when it comes from a newer
    change than the silver value did (``_cdc_column_positions``, else the row's position), and
    neither counts when it is older than the latest reset of the key (``_cdc_reset`` or the
    batch's). So a late partial update still sets its columns unless a newer change set them, and
    a late insert fills only what newer updates did not set. A delete newer than everything in
    silver deletes the row (soft-delete mode: flags it). Every identifier is quoted; column names
    reach SQL only as quoted identifiers or string literals.

    ``into_empty``: ``name`` holds no row (created for this batch), so no row can match; the
    statement is then the ``INSERT INTO ... SELECT`` of exactly the rows and values the MERGE's
    ``WHEN NOT MATCHED`` branch would insert, without the MERGE's join with the table.
    """
    q, lit = T.quote_ident, T.sql_string
    on = " AND ".join(f"t.{q(k)} = {T.sql_cast(f's._k{i}', types[k])}" for i, k in enumerate(pk))
    t_last = latest_change("t").sql()
    newer = f"(t._cdc_position IS NULL OR {t_last} < s._last_order)"
    reset = "greatest(t._cdc_reset, s._reset)"
    data_cols = [c for c in types if c not in pk]

    def t_order(c: str) -> str:
        """The order of the change that set silver's value of column ``c``."""
        return (f"(CASE WHEN map_contains_key(t._cdc_column_positions, {lit(c)}) "
                f"THEN t._cdc_column_positions[{lit(c)}] ELSE {t_last} END)")

    def chosen(c: str) -> tuple[str, str]:
        """(value, order) of column ``c`` after the merge of a matched row."""
        ot = t_order(c)
        os_ = f"s._ords[{lit(c)}]"
        t_ok = f"({ot} IS NOT NULL AND ({reset} IS NULL OR {ot} >= {reset}))"
        s_ok = f"({os_} IS NOT NULL AND ({reset} IS NULL OR {os_} >= {reset}))"
        take_s = f"({s_ok} AND (NOT {t_ok} OR {os_} >= {ot}))"  # a tie is the same change again
        value = f"CASE WHEN {take_s} THEN {T.sql_cast(f's._img[{lit(c)}]', types[c])} WHEN {t_ok} THEN t.{q(c)} END"
        order = f"CASE WHEN {take_s} THEN {os_} WHEN {t_ok} THEN {ot} END"
        return value, order

    def positions(orders: dict[str, str], last: str) -> str:
        """Per-column positions to store: those that differ from the row's own (null: never set)."""
        if not orders:
            return f"CAST(map() AS MAP<STRING,{ORDER_TYPE}>)"
        entries = ", ".join(f"{lit(c)}, {o}" for c, o in orders.items())
        return f"map_filter(map({entries}), (k, v) -> NOT (v <=> {last}))"

    new_last = f"greatest({t_last}, s._last_order)"
    picked = {c: chosen(c) for c in data_cols}
    sets = [f"t.{q(c)} = {v}" for c, (v, _) in picked.items()]
    sets += [f"t.{c} = CASE WHEN {newer} THEN s.{c} ELSE t.{c} END" for c in LAST_CHANGE_COLUMNS]
    sets += [f"t._cdc_reset = {reset}",
             f"t._cdc_column_positions = {positions({c: o for c, (_, o) in picked.items()}, new_last)}"]

    def fresh(c: str) -> str:
        return (f"CASE WHEN s._ords[{lit(c)}] IS NOT NULL AND (s._reset IS NULL OR s._ords[{lit(c)}] >= s._reset) "
                f"THEN {T.sql_cast(f's._img[{lit(c)}]', types[c])} END")

    insert_cols = [q(c) for c in types] + list(META_COLUMNS)
    insert_vals = [T.sql_cast(f"s._k{pk.index(c)}", types[c]) if c in pk else fresh(c) for c in types]
    insert_vals += [f"s.{c}" for c in LAST_CHANGE_COLUMNS]
    insert_vals += ["s._reset", positions({c: f"s._ords[{lit(c)}]" for c in data_cols}, "s._last_order")]
    soft = cfg.silver.delete_mode == "soft"
    if soft:
        sets.append(f"t.{SOFT_DELETE_COLUMN} = CASE WHEN {newer} THEN s._op = 'delete' ELSE t.{SOFT_DELETE_COLUMN} END")
        insert_cols.append(SOFT_DELETE_COLUMN)
        insert_vals.append("s._op = 'delete'")
        # a row first seen deleted shows the delete's before image
        insert_vals = [T.sql_cast(f"s._k{pk.index(c)}", types[c]) if c in pk else
                       f"CASE WHEN s._op = 'delete' THEN {T.sql_cast(f's._before[{lit(c)}]', types[c])} ELSE {fresh(c)} END"
                       for c in types] + insert_vals[len(types):]
        on_delete = (f"WHEN MATCHED AND s._op = 'delete' AND {newer} THEN UPDATE SET "
                     + ", ".join([f"t.{SOFT_DELETE_COLUMN} = true", f"t._cdc_reset = {reset}"]
                                 + [f"t.{c} = s.{c}" for c in LAST_CHANGE_COLUMNS]
                                 # the flagged row's values keep the positions they had (a key
                                 # change from this key carries them: carry_over)
                                 + [f"t._cdc_column_positions = "
                                    f"{positions({c: t_order(c) for c in data_cols}, 's._last_order')}"]))
        not_matched = "WHEN NOT MATCHED THEN"
    else:
        on_delete = f"WHEN MATCHED AND s._op = 'delete' AND {newer} THEN DELETE"
        not_matched = "WHEN NOT MATCHED AND s._op = 'upsert' THEN"
    if into_empty:  # no row can match: what the MERGE would insert, appended without the join
        where = "" if soft else " WHERE s._op = 'upsert'"
        return f"INSERT INTO {name} ({', '.join(insert_cols)}) SELECT {', '.join(insert_vals)} FROM {view} s{where}"
    return (f"MERGE INTO {name} t USING {view} s ON {on} "
            f"{on_delete} "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(sets)} "
            f"{not_matched} INSERT ({', '.join(insert_cols)}) VALUES ({', '.join(insert_vals)})")


def merge_source(keyed: "DataFrame", nkeys: int, truncated_at: Optional[tuple],
                 columns: Optional[list[str]] = None, by_column: bool = False) -> "DataFrame":
    """What to merge: the collapsed batch (:func:`collapse`, of ``columns``, ``by_column``)
    without the keys whose latest change is a recorded tombstone, the latest truncate
    ``truncated_at`` (``(position, partition, offset)``, or None) a reset of every key. The
    collapse is computed once (:func:`collapse`); what this adds is a filter and a projection of
    its rows."""
    from pyspark.sql import functions as F

    # a key whose changes without a position span partitions stays, for check_kafka_order to name
    src = collapse(keyed, nkeys, columns, by_column).where(~F.col("_tomb") | (F.col("_kp_lo") != F.col("_kp_hi")))
    if truncated_at is not None:  # a truncate is a reset of every key
        src = src.withColumn("_reset", F.greatest(F.col("_reset"), literal(truncated_at).column()))
    return src


def merge_into(spark: "SparkSession", cfg: PipelineConfig, name: str, src: "DataFrame", pk: list[str],
               types: dict[str, str], into_empty: bool = False) -> dict[str, int]:
    """MERGE ``src`` (:func:`merge_source`) into silver table ``name`` (:func:`merge_sql`; an
    INSERT when ``into_empty``: the table was created for this batch), leaving it in the view
    :func:`merge_view` of ``name``; return the keys it upserts and deletes, ``{"upsert": n, "delete": n}``."""
    from pyspark.sql import functions as F

    stats = src.groupBy("_op").agg(F.count("*").alias("n"), *kafka_order_stats(len(pk))).collect()
    check_kafka_order(spark, name, src, stats, pk, types, into_empty)  # changes without positions: one partition
    counts = {r["_op"]: r["n"] for r in stats}
    view = merge_view(name)
    src.createOrReplaceTempView(view)
    spark.sql(merge_sql(cfg, name, view, pk, types, into_empty))
    kill_point("silver.merged")
    return {op: int(counts.get(op, 0)) for op in ("upsert", "delete")}
