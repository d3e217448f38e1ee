"""SCD type 2 history beside silver: one row per version of a key, exact under late arrival and reruns.

Enabled per source with ``sources[].history: true``. The history table of a silver table
``<ns>.<name>`` is ``<ns>_history.<name>``: the source's key and value columns (typed like silver)
plus

==============================  ======================  ============================================
column                          type                    meaning
==============================  ======================  ============================================
``_cdc_op``                     string                  the change that made this version
``_cdc_valid_from_position``    array<decimal(38,0)>    its source position
``_cdc_valid_from_ts_ms``       bigint                  its source time (ms)
``_cdc_valid_to_position``      array<decimal(38,0)>    the next version's position (null: none yet)
``_cdc_valid_to_ts_ms``         bigint                  the next version's source time (ms)
``_cdc_is_current``             boolean                 the key's latest version and not a delete
``_cdc_kafka_partition``,       int, bigint             where the change came from
``_cdc_kafka_offset``
==============================  ======================  ============================================

A new history table gets a location of its own (:func:`cdclake.lake.table_location`), never a
path made of the source's names; an existing one keeps its location. Names and metadata columns
are :mod:`cdclake.lake`'s (:func:`cdclake.lake.history_table`, :data:`cdclake.lake.HISTORY_META`).

A delete is a version too (its values are the before image; never current). Versions are not
appended incrementally: for every key a window touches, the key's whole history is recomputed
from all of its bronze changes (every landed hour) and merged on (key, position, Kafka
coordinates), so a late change slots in between the versions it belongs between and a rerun
changes nothing. Exact duplicates (same position and images) count once. Keys linked by key
changes (either way, transitively) are recomputed together, in source order: a key change starts
the new key from the old key's row (:func:`_versions`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cdclake import types as T
from cdclake.catalog import ensure_namespace, materialize, temp_view
from cdclake.config import PipelineConfig
from cdclake.lake import HISTORY_META, history_namespace, history_table, table_location
from cdclake.results import TableResult
from cdclake.silver.keys import MAX_CHAIN
from cdclake.silver.tables import ensure_silver_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_VERSION_SCHEMA = ("key array<string>, img map<string,string>, op string, pos array<decimal(38,0)>, ts bigint, "
                   "kp int, ko bigint, to_pos array<decimal(38,0)>, to_ts bigint, is_current boolean")


def keyed_changes(changes: "DataFrame", pk: list[str]) -> "DataFrame":
    """Bronze changes as ``(key array<string>, op, img, pos, ts, kp, ko, row, moved_from, before)``, one row per key affected.

    A delete is keyed and imaged by its before image; an update that changes the key also gives
    a delete of the old key (imaged by the before image) at the same position. The new key's row
    of such a key change has ``moved_from`` (the old key) and ``before`` (the before image); both
    are null on every other row.
    """
    from pyspark.sql import functions as F

    def key_of(image: str):
        return F.array(*[F.col(image)[k] for k in pk])

    cols = [F.col("source_position").alias("pos"), F.col("source_ts_ms").alias("ts"),
            F.col("kafka_partition").alias("kp"), F.col("kafka_offset").alias("ko"), F.col("row_in_record").alias("row")]
    is_delete = F.col("op") == "delete"
    is_move = ((F.col("op") == "update") & F.col("before").isNotNull() & ~key_of("before").eqNullSafe(key_of("after"))
               & F.forall(key_of("before"), lambda v: v.isNotNull()))
    no_key, no_map = F.lit(None).cast("array<string>"), F.lit(None).cast("map<string,string>")
    main = changes.where(F.col("op") != "truncate").select(
        F.when(is_delete, key_of("before")).otherwise(key_of("after")).alias("key"), F.col("op"),
        F.when(is_delete, F.col("before")).otherwise(F.col("after")).alias("img"), *cols,
        F.when(is_move, key_of("before")).alias("moved_from"), F.when(is_move, F.col("before")).alias("before"))
    old = changes.where(is_move).select(key_of("before").alias("key"), F.lit("delete").alias("op"),
                                        F.col("before").alias("img"), *cols, no_key.alias("moved_from"),
                                        no_map.alias("before"))
    return main.unionByName(old)


def _versions(item):
    """Fold the changes of a group of keys linked by key changes into versions.

    Yields ``(key, img, op, pos, ts, kp, ko, to_pos, to_ts, is_current)`` per version. Changes are
    applied in source order (a key change's new key before its old key's delete at the same
    position); a partial update keeps the key's previous values, and a key change starts the new
    key from the old key's row, overlaid with the after image (the before image fills what
    neither has), as :func:`cdclake.silver.keys.carry_over` does for silver.
    """
    _, changes = item
    ordered = sorted(changes, key=lambda c: (list(c["pos"] or []), c["kp"], c["ko"], c["row"],
                                             c["moved_from"] is None))
    seen: dict[tuple, set] = {}
    state: dict[tuple, dict] = {}
    versions: dict[tuple, list] = {}
    for c in ordered:
        key = tuple(c["key"])
        ident = (tuple(c["pos"] or ()), c["op"], tuple(sorted((c["img"] or {}).items())))
        if ident in seen.setdefault(key, set()):  # the same change delivered twice
            continue
        seen[key].add(ident)
        img = dict(c["img"] or {})
        if c["moved_from"] is not None:
            img = {**(c["before"] or {}), **(state.get(tuple(c["moved_from"])) or {}), **img}
        elif c["op"] == "update" and state.get(key) is not None:
            img = {**state[key], **img}  # partial images keep the previous version's values
        state[key] = None if c["op"] == "delete" else img
        versions.setdefault(key, []).append([key, img, c["op"], c["pos"], c["ts"], c["kp"], c["ko"]])
    out = []
    for vs in versions.values():
        for i, v in enumerate(vs):
            nxt = vs[i + 1] if i + 1 < len(vs) else None
            out.append((*v, nxt[3] if nxt else None, nxt[4] if nxt else None, nxt is None and v[2] != "delete"))
    return out


def _groups(spark: "SparkSession", keyed: "DataFrame", touched: "DataFrame") -> tuple["DataFrame", dict]:
    """The keys whose versions to recompute and the group of each key linked by key changes.

    Returns ``(keys, group)``: ``keys`` (column ``key``) is ``touched`` plus every key linked to
    them by key changes, either way (the old keys their rows came from, the new keys their rows
    went to; transitively, up to :data:`cdclake.silver.keys.MAX_CHAIN` links), so a late change of an
    old key reaches the versions of the new key; ``group`` maps a key (tuple) that a key change
    links to the smallest key of its group (keys not in it are a group of their own).
    """
    from pyspark.sql import functions as F

    moves = materialize(keyed.where(F.col("moved_from").isNotNull()).select("key", "moved_from"))
    keys = materialize(touched)
    for _ in range(MAX_CHAIN):
        into = moves.join(keys, "key", "left_semi").select(F.col("moved_from").alias("key"))
        out_of = moves.join(keys.select(F.col("key").alias("moved_from")), "moved_from", "left_semi").select("key")
        more = into.unionByName(out_of).join(keys, "key", "left_anti").distinct()
        if not more.take(1):
            break
        keys = materialize(keys.unionByName(more))
    parent: dict[tuple, tuple] = {}

    def root(k: tuple) -> tuple:
        while parent.get(k, k) != k:
            k = parent[k]
        return k

    for r in moves.join(keys, "key", "left_semi").collect():
        a, b = root(tuple(r["key"])), root(tuple(r["moved_from"]))
        if a != b:
            parent[max(a, b)] = min(a, b)
    return keys, {k: root(k) for k in parent}


def apply_history(spark: "SparkSession", cfg: PipelineConfig, silver_name: str, window_changes: "DataFrame",
                  all_changes: "DataFrame", pk: list[str], types: dict[str, str], result: TableResult) -> int:
    """Recompute the history of every key in ``window_changes`` from ``all_changes`` and merge it.

    Both frames are bronze rows of one source table (``all_changes``: every landed hour). Keys
    that a key change links are folded together (:func:`_versions`), so that a new key's first
    version holds the row the key change moved. ``result``: the silver table's, whose
    ``added_columns`` the history table's new columns join. Returns the number of version rows merged.
    """
    from pyspark.sql import functions as F

    touched = keyed_changes(window_changes, pk).select("key").distinct()
    keyed = keyed_changes(all_changes, pk)
    keys, group = _groups(spark, keyed, touched)
    every = keyed.join(F.broadcast(keys), "key", "left_semi")
    links = spark.sparkContext.broadcast(group)
    grouped = (every.rdd.map(lambda r: (links.value.get(tuple(r["key"]), tuple(r["key"])), r.asDict()))
               .groupByKey().flatMap(_versions))
    versions = spark.createDataFrame(grouped.map(lambda v: (list(v[0]),) + tuple(v[1:])), _VERSION_SCHEMA)
    ensure_namespace(spark, cfg, history_namespace(cfg))
    name = history_table(cfg, silver_name)
    location = table_location(cfg, history_namespace(cfg), silver_name)
    types = ensure_silver_table(spark, cfg, name, pk, types, result, meta=HISTORY_META, location=location)
    q, lit = T.quote_ident, T.sql_string
    select = [f"{T.sql_cast(f'key[{i}]', types[k])} AS {q(k)}" for i, k in enumerate(pk)]
    select += [f"{T.sql_cast(f'img[{lit(c)}]', t)} AS {q(c)}" for c, t in types.items() if c not in pk]
    select += ["op AS _cdc_op", "pos AS _cdc_valid_from_position", "ts AS _cdc_valid_from_ts_ms",
               "to_pos AS _cdc_valid_to_position", "to_ts AS _cdc_valid_to_ts_ms", "is_current AS _cdc_is_current",
               "kp AS _cdc_kafka_partition", "ko AS _cdc_kafka_offset"]
    raw_view, view = temp_view("_cdc_versions_raw", name), temp_view("_cdc_versions", name)  # tables merge at once
    versions.createOrReplaceTempView(raw_view)
    staged = spark.sql(f"SELECT {', '.join(select)} FROM {raw_view}").persist()
    staged.createOrReplaceTempView(view)
    n = staged.count()
    on = " AND ".join([f"h.{q(k)} = s.{q(k)}" for k in pk] + [
        "h._cdc_valid_from_position = s._cdc_valid_from_position",
        "h._cdc_kafka_partition = s._cdc_kafka_partition", "h._cdc_kafka_offset = s._cdc_kafka_offset"])
    spark.sql(f"MERGE INTO {name} h USING {view} s ON {on} "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.catalog.dropTempView(view)
    spark.catalog.dropTempView(raw_view)
    staged.unpersist()  # dropping the view leaves its cached rows in memory
    log.info("history %s: %d versions of %d keys merged", name, n, keys.count())
    return n
