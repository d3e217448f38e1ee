"""Silver's batch summary: every source table of a batch's bronze rows with its change count,
latest truncate, primary key, column types and column order, from one aggregation
(:func:`summarize_batch`); from the change shapes normalize writes where the rows name them
(:mod:`cdclake.lake.shapes`), else from the rows' own maps.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Optional

from cdclake import types as T
from cdclake.catalog import materialize
from cdclake.errors import SchemaChangeError
from cdclake.lake import SourceTable
from cdclake.silver.keys import key_change
from cdclake.silver.order import BRONZE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass
class BatchSummary:
    """One source table's changes in a batch, as one aggregation of the batch's bronze rows tells
    them (:func:`summarize_batch`).

    ``changes``: bronze rows, truncates included; ``rows``: those that are not truncates;
    ``truncate``: ``(position, partition, offset)`` of the latest truncate, or None;
    ``primary_key``: the key of the latest change that is not a truncate; ``typed``: every
    ``(column, canonical type)`` pair of the changes' column types, in the order of the latest
    change carrying each; ``columns``: every column of an after or before image in source order
    (by the first change carrying it, then its place in that image); ``topics``: the Kafka topics
    the changes came from; ``moves``: whether a change is a key change (an update of a key
    column, :func:`cdclake.silver.keys.key_change`) under ``primary_key``, known (True or False)
    when every change that is not a truncate has that key, else None; ``partial``: most changes
    with an after image carry fewer columns than the batch's after images of the table carry
    together (partial images: SharePlex updates, Qlik ``columnMask``), as :func:`partial_images`
    tells from the images' column lists. ``newest_position``: the source position (a tuple of
    integers) of the batch's latest change in the source's order, truncates included (None: no
    change); ``newest_ts_ms``: the greatest source commit time of its changes (ms since the
    epoch; None: none carries one), both recorded in the silver commit's snapshot summary
    (:mod:`cdclake.silver.snapshots`). ``snapshot``: that commit's properties of the batch, set by
    the silver stage (:func:`cdclake.silver.snapshots.batch_properties`; empty: none).
    """

    changes: int = 0
    rows: int = 0
    truncate: Optional[tuple] = None
    primary_key: list[str] = field(default_factory=list)
    typed: list[tuple[str, str]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    moves: Optional[bool] = None
    partial: bool = False
    newest_position: Optional[tuple] = None
    newest_ts_ms: Optional[int] = None
    snapshot: dict = field(default_factory=dict)

    def schema(self, table: Optional[str] = None) -> tuple[list[str], dict[str, str]]:
        """Primary key and column types (widened over the batch), in source order; see :func:`batch_schema`."""
        types: dict[str, str] = {c: "string" for c in self.columns}
        seen: dict[str, str] = {}
        for c, t in self.typed:
            t = T.spark_type(t)
            if c in seen:
                w = T.widen(seen[c], t)
                if w is None:
                    raise SchemaChangeError(f"silver table {table or '?'}: column {c!r} changes type from {seen[c]} to "
                                            f"{t} inside the batch (Iceberg promotes only int to bigint, float to double "
                                            "and a decimal's precision at the same scale)")
                t = w
            seen[c] = t
        types.update(seen)
        pk = list(self.primary_key)
        for k in pk:
            types.setdefault(k, "string")
        return pk, types


#: The columns that name a source table in a batch summary's shapes (:func:`_shapes`).
_IDS = ["_prefix", "source_database", "source_schema", "source_table"]


def _prefix(prefixes: Optional[dict[str, str]]):
    """The silver table prefix of a bronze row's ``kafka_topic`` (``prefixes``: topic → prefix; a
    topic not in it has none, ``""``), as a Column."""
    from pyspark.sql import functions as F

    pairs = [x for topic, prefix in sorted((prefixes or {}).items()) for x in (F.lit(topic), F.lit(prefix))]
    return F.coalesce(F.create_map(*pairs)[F.col("kafka_topic")], F.lit("")) if pairs else F.lit("")


def _shapes(changes: "DataFrame", prefixes: Optional[dict[str, str]]) -> "DataFrame":
    """The batch reduced to its distinct shapes per source table: ``_prefix``, ``source_database``,
    ``source_schema``, ``source_table``, ``_trunc`` (a truncate), ``types`` (the column types'
    entries), ``after`` and ``before`` (the images' column names) and ``primary_key``, with ``n``
    (changes), ``last`` and ``first`` (the latest and first order), ``topics`` and ``moves``
    (whether a change is a key change under its own primary key; null when none has a key),
    ``newest_ts`` (the greatest ``source_ts_ms``). The
    primary key is a grouping key rather than three aggregates over every row (the key of the
    latest, the least and the greatest), which cost more than the few groups it adds."""
    from pyspark.sql import functions as F

    order = BRONZE.column(row=True)
    prefix = _prefix(prefixes)
    return (changes.select(prefix.alias("_prefix"), "source_database", "source_schema", "source_table", "kafka_topic",
                           (F.col("op") == "truncate").alias("_trunc"), "column_types", "after", "before",
                           "primary_key", "source_ts_ms", order.alias("_ord"),
                           F.when(F.col("primary_key").isNotNull(), key_change(F.col("primary_key"))).alias("_moved"))
            .groupBy(*_IDS, "_trunc", F.map_entries("column_types").alias("types"), F.map_keys("after").alias("after"),
                     F.map_keys("before").alias("before"), "primary_key")
            .agg(F.count("*").alias("n"), F.max("_ord").alias("last"), F.min("_ord").alias("first"),
                 F.collect_set("kafka_topic").alias("topics"), F.max("_moved").alias("moves"),
                 F.max("source_ts_ms").alias("newest_ts")))


def order_key(value) -> tuple:
    """A Python sort key that orders values as Spark SQL orders them ascending: null first, structs
    (``Row``) field by field, arrays element by element and a prefix first, numbers (decimal,
    int) and text by value. For orders (:mod:`cdclake.silver.order`) read back with ``collect``."""
    if value is None:
        return (0,)
    if isinstance(value, (list, tuple)):  # arrays, and structs (Row is a tuple)
        return (1, tuple(order_key(v) for v in value))
    return (1, value)


def _shaped(changes: "DataFrame", prefixes: Optional[dict[str, str]], shapes: str) -> Optional[list[dict]]:
    """:func:`_shapes`'s rows from the batch's flat columns and the change shapes its rows name
    (:mod:`cdclake.lake.shapes`): one aggregation by source table, truncate flag and ``shape_id``
    (``moves``: the greatest ``key_change``), each shape read from ``shapes`` (the qualified name
    of ``bronze.change_shapes``). None when a row has no shape id (written before normalize wrote
    them, or by other means) or a shape is not in ``shapes``: the rows' maps must be read."""
    from pyspark.sql import functions as F

    from cdclake.lake import read_shapes

    if not {"shape_id", "key_change"} <= set(changes.columns):
        return None
    order = BRONZE.column(row=True)
    prefix = _prefix(prefixes)
    groups = (changes.select(prefix.alias("_prefix"), "source_database", "source_schema", "source_table", "kafka_topic",
                             (F.col("op") == "truncate").alias("_trunc"), "shape_id", "key_change", "source_ts_ms",
                             order.alias("_ord"))
              .groupBy(*_IDS, "_trunc", "shape_id")
              .agg(F.count("*").alias("n"), F.max("_ord").alias("last"), F.min("_ord").alias("first"),
                   F.collect_set("kafka_topic").alias("topics"), F.max("key_change").alias("moves"),
                   F.max("source_ts_ms").alias("newest_ts"))).collect()
    ids = {r["shape_id"] for r in groups}
    if None in ids:
        return None
    found = read_shapes(changes.sparkSession, shapes, sorted(ids))
    if len(found) < len(ids):
        log.warning("silver: %d change shapes named by bronze rows are not in %s; the rows' maps are read instead",
                    len(ids) - len(found), shapes)
        return None
    out = []
    for r in groups:
        pk, tk, tv, after, before = found[r["shape_id"]]
        out.append({**r.asDict(), "primary_key": pk, "after": after, "before": before,
                    "types": None if tk is None else [{"key": k, "value": v} for k, v in zip(tk, tv)]})
    return out


def summarize_batch(changes: "DataFrame", prefixes: Optional[dict[str, str]] = None,
                    shapes: Optional[str] = None) -> dict[SourceTable, BatchSummary]:
    """Every source table of a batch's bronze rows with its :class:`BatchSummary`, from one pass.

    ``prefixes``: Kafka topic → silver table prefix (``sources[].table_prefix``; a topic not in it
    has none), which with the database, schema and table names a :class:`cdclake.lake.SourceTable`.
    The changes mostly repeat a few images' column lists and type maps: one aggregation reduces
    the batch to its distinct ones per source table and primary key (with the latest and first
    order of each), one Spark query whose few rows the driver reads; counts, truncates,
    keys, types and column order of every table come from those rows, ordered as Spark orders the
    orders (:func:`order_key`). :func:`summarize_batch_in_spark` computes the same in Spark (the
    reference the tests compare with).

    ``shapes``: the qualified name of ``bronze.change_shapes``. Given, and when every row names
    its change shape (``shape_id``, written by normalize: :mod:`cdclake.lake.shapes`), the one
    aggregation reads only the rows' flat columns, and each distinct shape is read once from that
    table (:func:`_shaped`), not from every row's maps; the summary is the same.
    """
    rows = _shaped(changes, prefixes, shapes) if shapes else None
    return _summaries(rows if rows is not None else _shapes(changes, prefixes).collect())


def _summaries(shapes: Iterable) -> dict[SourceTable, BatchSummary]:
    """:func:`summarize_batch` of a batch's shapes (:func:`_shapes`'s rows, or :func:`_shaped`'s)."""
    out: dict[tuple, BatchSummary] = {}
    latest: dict[tuple, tuple] = {}  # table -> (key of its latest data change's order, primary key)
    truncate: dict[tuple, tuple] = {}  # table -> (key of the latest truncate's order, order)
    topics: dict[tuple, set] = {}
    typed: dict[tuple, tuple] = {}  # (table, column, type) -> key of the latest order carrying it
    placed: dict[tuple, tuple] = {}  # (table, column) -> key of the first (order, image, place) carrying it
    moves: dict[tuple, list] = {}  # table -> [(primary key, key change)] of its data changes' shapes
    images: dict[tuple, list] = {}  # table -> [(after image's column list, changes)] of its data changes' shapes
    newest: dict[tuple, tuple] = {}  # table -> (key of its latest order, that order)
    for r in shapes:
        ids = tuple(r[c] for c in _IDS)
        summary = out.setdefault(ids, BatchSummary())
        summary.changes += int(r["n"])
        if r["newest_ts"] is not None and (summary.newest_ts_ms is None or r["newest_ts"] > summary.newest_ts_ms):
            summary.newest_ts_ms = int(r["newest_ts"])
        if r["last"] is not None and (ids not in newest or order_key(r["last"]) > newest[ids][0]):
            newest[ids] = (order_key(r["last"]), r["last"])
        topics.setdefault(ids, set()).update(r["topics"])
        trunc = r["_trunc"]  # null (no op): neither a truncate nor a data change, as in SQL
        if trunc is True:
            k = order_key(r["last"])
            if ids not in truncate or k > truncate[ids][0]:
                truncate[ids] = (k, r["last"])
        if trunc is not False:
            continue
        summary.rows += int(r["n"])
        moves.setdefault(ids, []).append((r["primary_key"], r["moves"]))
        images.setdefault(ids, []).append((r["after"], int(r["n"])))
        last, first = order_key(r["last"]), order_key(r["first"])
        if ids not in latest or last > latest[ids][0]:
            latest[ids] = (last, r["primary_key"])
        for entry in r["types"] or []:
            at = (ids, entry["key"], entry["value"])
            if at not in typed or last > typed[at]:
                typed[at] = last
        for img, names in ((0, r["after"]), (1, r["before"])):
            for place, c in enumerate(names or []):
                k = (first, img, place)
                if (ids, c) not in placed or k < placed[(ids, c)]:
                    placed[(ids, c)] = k
    for ids, summary in out.items():
        summary.truncate = tuple(truncate[ids][1])[:3] if ids in truncate else None
        summary.primary_key = list(latest[ids][1] or []) if ids in latest else []
        summary.topics = sorted(topics[ids])
        summary.moves = known_moves(summary.primary_key, moves.get(ids, []))
        summary.partial = partial_images(images.get(ids, []))
        summary.newest_position = newest_position(newest[ids][1]) if ids in newest else None
    for (ids, c, t), _ in sorted(typed.items(), key=lambda kv: (kv[1], kv[0][1], kv[0][2] or "")):
        out[ids].typed.append((c, t))
    for (ids, c), _ in sorted(placed.items(), key=lambda kv: kv[1]):
        out[ids].columns.append(c)
    return {SourceTable(*k): v for k, v in sorted(out.items(), key=lambda kv: SourceTable(*kv[0]).silver_name)}


def newest_position(order) -> Optional[tuple]:
    """:attr:`BatchSummary.newest_position` of a change's order as collected (its first field,
    the source position, as a tuple of integers)."""
    return None if order is None or order[0] is None else tuple(int(v) for v in order[0])


def known_moves(pk: list[str], shapes: list[tuple]) -> Optional[bool]:
    """:attr:`BatchSummary.moves` of a table from its data changes' shapes, ``(primary key, key
    change)`` each: whether one is a key change, when every shape's key is ``pk``."""
    if not pk or any(key is None or list(key) != pk or moved is None for key, moved in shapes):
        return None
    return any(moved for _, moved in shapes)


def partial_images(shapes: list[tuple]) -> bool:
    """:attr:`BatchSummary.partial` of a table from its data changes' shapes, ``(after image's
    column names or None, changes)`` each: whether the changes whose image lacks a column of the
    union of all images' columns are more than half of those with an image."""
    lists = [(frozenset(names), n) for names, n in shapes if names is not None]
    every = frozenset().union(*(names for names, _ in lists))
    lacking = sum(n for names, n in lists if names != every)
    return 2 * lacking > sum(n for _, n in lists)


def summarize_batch_in_spark(changes: "DataFrame", prefixes: Optional[dict[str, str]] = None) -> dict[SourceTable, BatchSummary]:
    """:func:`summarize_batch` computed by Spark queries over the materialized shapes (three
    small queries, about ten Spark jobs): the reference the tests compare it with."""
    from pyspark.sql import functions as F

    ids = _IDS
    shapes = materialize(_shapes(changes, prefixes))
    data = F.when(~F.col("_trunc"), F.col("last"))  # max_by passes over rows whose ordering is null
    on_data = ~F.col("_trunc")
    tables = shapes.groupBy(*ids).agg(
        F.sum("n").alias("changes"), F.sum(F.when(~F.col("_trunc"), F.col("n"))).alias("rows"),
        F.max(F.when(F.col("_trunc"), F.col("last"))).alias("truncate"), F.max_by("primary_key", data).alias("pk"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("topics")))).alias("topics"),
        F.collect_list(F.when(on_data, F.struct("primary_key", "moves"))).alias("moves"),
        F.collect_list(F.when(on_data, F.struct("after", "n"))).alias("images"),
        F.max("last").alias("newest"), F.max("newest_ts").alias("newest_ts")).collect()
    out: dict[tuple, BatchSummary] = {}
    for r in tables:
        pk = list(r["pk"] or [])
        out[tuple(r[c] for c in ids)] = BatchSummary(
            changes=int(r["changes"]), rows=int(r["rows"] or 0),
            truncate=None if r["truncate"] is None else tuple(r["truncate"])[:3],
            primary_key=pk, topics=list(r["topics"]), moves=known_moves(pk, [tuple(m) for m in r["moves"]]),
            partial=partial_images([(i["after"], int(i["n"])) for i in r["images"]]),
            newest_position=newest_position(r["newest"]),
            newest_ts_ms=None if r["newest_ts"] is None else int(r["newest_ts"]))
    shaped = shapes.where(~F.col("_trunc"))
    # types in the order of the latest change carrying each (column, type) pair
    for r in (shaped.select(*ids, F.explode("types").alias("ct"), "last")
              .groupBy(*ids, F.col("ct.key").alias("c"), F.col("ct.value").alias("t"))
              .agg(F.max("last").alias("o")).orderBy("o").collect()):
        out[tuple(r[c] for c in ids)].typed.append((r["c"], r["t"]))
    # columns in source order: by the first change that carries them, then by place in its image
    placed = shaped.select(*ids, F.col("first").alias("o"), F.lit(0).alias("img"), F.posexplode("after").alias("p", "c"))
    placed = placed.unionByName(shaped.select(*ids, F.col("first").alias("o"), F.lit(1).alias("img"),
                                              F.posexplode("before").alias("p", "c")))
    for r in (placed.groupBy(*ids, "c").agg(F.min(F.struct("o", "img", "p")).alias("first")).orderBy("first")
              .select(*ids, "c").collect()):
        out[tuple(r[c] for c in ids)].columns.append(r["c"])
    return {SourceTable(*k): v for k, v in sorted(out.items(), key=lambda kv: SourceTable(*kv[0]).silver_name)}


def batch_schema(changes: "DataFrame", table: Optional[str] = None) -> tuple[list[str], dict[str, str]]:
    """Primary key (of the latest change) and column types (widened over the batch), in source order.

    ``changes``: one source table's bronze rows, truncates left out. Columns come in the order of
    the first change carrying them and their place in its image (the message's column order).
    Columns without a type are ``string``. Raises :class:`SchemaChangeError` for an incompatible
    type change inside the batch (:func:`cdclake.types.widen`), naming ``table`` (the silver
    table), the column and both types.
    """
    summaries = list(summarize_batch(changes).values())
    return summaries[0].schema(table) if summaries else ([], {})
