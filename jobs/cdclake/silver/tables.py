"""The silver table itself: its schema from a batch, creation and evolution, and its tombstones.

A silver table is created on first sight with typed columns (:mod:`cdclake.types`) and the
metadata columns :data:`cdclake.lake.META_COLUMNS`, bucketed by the first key column in the
partition field ``_cdc_bucket``, Iceberg format 2, merge-on-read by default, at its own location
(:func:`cdclake.lake.table_location`). New columns are added; types evolve only by Iceberg's
promotions (:func:`cdclake.types.widen`). A truncate deletes every row older than it and is
remembered as the tombstone with an empty key; in hard-delete mode every delete leaves a
tombstone (:data:`cdclake.lake.TOMBSTONE_SCHEMA`).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from cdclake import types as T
from cdclake.catalog import ensure_namespace, materialize
from cdclake.config import PipelineConfig
from cdclake.errors import SchemaChangeError, SilverError
from cdclake.lake import (KEY_CHANGES_PROPERTY, MAX_NAME_CHARS, META_COLUMNS, PRIMARY_KEY_PROPERTY, SOFT_DELETE_COLUMN,
                          SOURCE_TABLE_PROPERTY, SourceTable, ensure_tombstone_table, resolve_legacy_name, silver_table,
                          table_exists, table_location, tombstone_table)
from cdclake.results import TableResult
from cdclake.silver.keys import key_change
from cdclake.silver.order import BRONZE, latest_change, literal

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def open_silver_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable,
                      namespace_ready: bool = False) -> tuple[SourceTable, str]:
    """``(st, name)``: the source table (:func:`cdclake.lake.resolve_legacy_name`) and the quoted
    name of its silver table, whose namespace is created when missing (unless ``namespace_ready``:
    the caller made sure of it).

    Raises :class:`SilverError` when the silver table records another source table than ``st``
    (:func:`check_owner`).
    """
    if not namespace_ready:
        ensure_namespace(spark, cfg, cfg.silver.namespace)
    st = resolve_legacy_name(st, lambda n: table_exists(
        spark, f"{cfg.catalog.name}.{T.quote_ident(cfg.silver.namespace)}.{T.quote_ident(n)}"))
    name = silver_table(cfg, st)
    check_owner(spark, name, st)
    return st, name


def check_owner(spark: "SparkSession", name: str, st: SourceTable) -> None:
    """Raise :class:`SilverError` when silver table ``name`` records another source table than ``st``.

    Only a name of :data:`MAX_NAME_CHARS` characters can be both a source table's own name and
    another's shortened one (:func:`cdclake.lake.short_name`); only those are looked at.
    """
    if len(st.silver_name) != MAX_NAME_CHARS or not table_exists(spark, name):
        return
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    owner = props.get(SOURCE_TABLE_PROPERTY)
    if owner is not None and owner != st.identity():
        raise SilverError(f"silver table {name} holds source table {owner}, not {st.identity()}: two source "
                          "tables have this silver name")


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
    pairs = [x for topic, prefix in sorted((prefixes or {}).items()) for x in (F.lit(topic), F.lit(prefix))]
    prefix = F.coalesce(F.create_map(*pairs)[F.col("kafka_topic")], F.lit("")) if pairs else F.lit("")
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


def summarize_batch(changes: "DataFrame", prefixes: Optional[dict[str, str]] = None) -> dict[SourceTable, BatchSummary]:
    """Every source table of a batch's bronze rows with its :class:`BatchSummary`, from one pass.

    ``prefixes``: Kafka topic → silver table prefix (``sources[].table_prefix``; a topic not in it
    has none), which with the database, schema and table names a :class:`cdclake.lake.SourceTable`.
    The changes mostly repeat a few images' column lists and type maps: one aggregation reduces
    the batch to its distinct ones per source table and primary key (with the latest and first
    order of each), one Spark query whose few rows the driver reads; counts, truncates,
    keys, types and column order of every table come from those rows, ordered as Spark orders the
    orders (:func:`order_key`). :func:`summarize_batch_in_spark` computes the same in Spark (the
    reference the tests compare with).
    """
    out: dict[tuple, BatchSummary] = {}
    latest: dict[tuple, tuple] = {}  # table -> (key of its latest data change's order, primary key)
    truncate: dict[tuple, tuple] = {}  # table -> (key of the latest truncate's order, order)
    topics: dict[tuple, set] = {}
    typed: dict[tuple, tuple] = {}  # (table, column, type) -> key of the latest order carrying it
    placed: dict[tuple, tuple] = {}  # (table, column) -> key of the first (order, image, place) carrying it
    moves: dict[tuple, list] = {}  # table -> [(primary key, key change)] of its data changes' shapes
    images: dict[tuple, list] = {}  # table -> [(after image's column list, changes)] of its data changes' shapes
    newest: dict[tuple, tuple] = {}  # table -> (key of its latest order, that order)
    for r in _shapes(changes, prefixes).collect():
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


def ensure_silver_table(spark: "SparkSession", cfg: PipelineConfig, name: str, pk: list[str],
                        types: dict[str, str], result: TableResult,
                        meta: Optional[dict[str, str]] = None, location: Optional[str] = None,
                        properties: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Create the silver (or history) table, or evolve it to hold ``types``; return its column types.

    ``name``: the quoted Spark name; ``pk``: key columns; ``types``: column → canonical type.
    ``meta`` are the ``_cdc_*`` columns (default :data:`cdclake.lake.META_COLUMNS`, plus
    ``_cdc_deleted`` in soft-delete mode). A new table is created at ``location``
    (:func:`cdclake.lake.table_location`; None: the catalog's default, for pipeline-owned names
    only) with ``properties`` added to its own (format 2, write modes, ``cdc.primary-key`` and
    :data:`cdclake.lake.PRIMARY_KEY_PROPERTY`), then bucketed by ``pk[0]`` in the partition field
    ``_cdc_bucket``. An existing table keeps its location.
    Raises :class:`SchemaChangeError` naming table, column and both types for a type change
    Iceberg cannot make (:func:`cdclake.types.widen`; a narrower type keeps the silver type).
    """
    q = T.quote_ident
    if meta is None:
        meta = dict(META_COLUMNS, **({SOFT_DELETE_COLUMN: "boolean"} if cfg.silver.delete_mode == "soft" else {}))
    if not table_exists(spark, name):
        cols = [f"{q(c)} {T.spark_type(t)}" for c, t in types.items()] + [f"{c} {t}" for c, t in meta.items()]
        mode = cfg.silver.write_mode
        props = {"format-version": "2", "write.merge.mode": mode, "write.update.mode": mode,
                 "write.delete.mode": mode, "cdc.primary-key": ",".join(pk),
                 PRIMARY_KEY_PROPERTY: json.dumps(pk, ensure_ascii=False), **(properties or {})}
        spark.sql(
            f"CREATE TABLE {name} ({', '.join(cols)}) USING iceberg "
            + (f"LOCATION {T.sql_string(location)} " if location else "")
            + "TBLPROPERTIES (" + ", ".join(f"{T.sql_string(k)}={T.sql_string(v)}" for k, v in props.items()) + ")")
        # named by the pipeline: Iceberg would name it after the column, and put that in data file paths
        spark.sql(f"ALTER TABLE {name} ADD PARTITION FIELD bucket({cfg.silver.buckets}, {q(pk[0])}) AS _cdc_bucket")
        log.info("created silver table %s with key %s and %d columns", name, pk, len(types))
        return dict(types)
    fields = spark.table(name).schema.fields
    for c, t in meta.items():  # tables made by an earlier version lack newer metadata columns
        if c not in {f.name for f in fields}:
            spark.sql(f"ALTER TABLE {name} ADD COLUMN {c} {t}")
            log.info("silver table %s: added metadata column %s", name, c)
    current = {f.name: f.dataType.simpleString() for f in fields if f.name not in meta}
    for c, t in types.items():
        t = T.spark_type(t)
        if c not in current:
            spark.sql(f"ALTER TABLE {name} ADD COLUMN {q(c)} {t}")
            current[c] = t
            result.added_columns.append(c)
            log.info("silver table %s: added column %s %s", name, c, t)
            continue
        old = current[c]
        wider = T.widen(old, t)
        if wider is None:
            raise SchemaChangeError(f"silver table {name}: column {c!r} cannot change type from {old} to {t} "
                                    "(Iceberg promotes only int to bigint, float to double and a decimal's "
                                    "precision at the same scale)")
        if wider != old:
            element = T.array_element(wider)  # a list's element type is promoted as its own field
            target = f"{q(c)}.element TYPE {element}" if element is not None else f"{q(c)} TYPE {wider}"
            spark.sql(f"ALTER TABLE {name} ALTER COLUMN {target}")
            current[c] = wider
            log.info("silver table %s: widened column %s from %s to %s", name, c, old, wider)
    return current


def new_table_options(cfg: PipelineConfig, st: SourceTable) -> dict:
    """Location and properties of the silver table of ``st`` when it is created (keyword
    arguments of :func:`ensure_silver_table`)."""
    return {"location": table_location(cfg, cfg.silver.namespace, st.silver_name),
            "properties": {SOURCE_TABLE_PROPERTY: st.identity()}}


def has_key_changes(spark: "SparkSession", name: str) -> bool:
    """Whether silver table ``name`` exists and has :data:`cdclake.lake.KEY_CHANGES_PROPERTY` set."""
    if not table_exists(spark, name):
        return False
    rows = spark.sql(f"SHOW TBLPROPERTIES {name}").collect()
    return any(r["key"] == KEY_CHANGES_PROPERTY and r["value"] == "true" for r in rows)


def mark_key_changes(spark: "SparkSession", name: str) -> None:
    """Set :data:`cdclake.lake.KEY_CHANGES_PROPERTY` on silver table ``name`` (a key change was merged)."""
    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({T.sql_string(KEY_CHANGES_PROPERTY)}='true')")


def record_truncate(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, at: tuple) -> None:
    """Remember a truncate (position, Kafka partition, offset) as the tombstone row with an empty key.

    Changes older than the latest truncate are dropped in every later batch too, so a late insert
    cannot bring back a row the truncate removed.
    """
    name = ensure_tombstone_table(spark, cfg, st)
    o = literal(at)
    spark.sql(f"MERGE INTO {name} t USING (SELECT CAST(array() AS ARRAY<STRING>) AS key, "
              f"{o.source_position} AS _cdc_position, {o.kafka_partition} AS _cdc_kafka_partition, "
              f"{o.kafka_offset} AS _cdc_kafka_offset, CAST(NULL AS BIGINT) AS _cdc_source_ts_ms) s ON size(t.key) = 0 "
              f"WHEN MATCHED AND {latest_change('t').sql()} < {latest_change('s').sql()} THEN UPDATE SET * "
              "WHEN NOT MATCHED THEN INSERT *")


def stored_truncate(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable):
    """The latest recorded truncate of ``st`` as ``(position, partition, offset)``, or None."""
    name = tombstone_table(cfg, st)
    if not table_exists(spark, name):
        return None
    row = spark.sql(f"SELECT _cdc_position, _cdc_kafka_partition, _cdc_kafka_offset FROM {name} "
                    "WHERE size(key) = 0").first()
    return None if row is None else (row[0], row[1], row[2])


def apply_truncates(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, name: str, trunc: Optional[tuple],
                    result: TableResult) -> Optional[tuple]:
    """Apply the batch's latest truncate ``trunc`` (``(position, partition, offset)``, or None:
    :attr:`BatchSummary.truncate`) and return the latest truncate of ``st`` or None.

    A truncate is recorded (:func:`record_truncate`) and deletes every row of silver table
    ``name`` older than it (``result.truncated`` is set). Returns ``(position, partition,
    offset)`` of the latest truncate recorded, this batch's or an earlier one's
    (:func:`stored_truncate`).
    """
    if trunc is not None:
        result.truncated = True
        record_truncate(spark, cfg, st, trunc)
        if table_exists(spark, name):
            spark.sql(f"DELETE FROM {name} WHERE {latest_change().sql()} < {literal(trunc).sql()}")
    return stored_truncate(spark, cfg, st)


def after_truncate(changes: "DataFrame", truncated_at: Optional[tuple]) -> "DataFrame":
    """The bronze rows of ``changes`` that are not truncates and are newer than ``truncated_at``
    (``(position, partition, offset)``; None: no truncate)."""
    from pyspark.sql import functions as F

    rows = changes.where(F.col("op") != "truncate")
    if truncated_at is not None:
        rows = rows.where(BRONZE.column() > literal(truncated_at).column())
    return rows


def record_tombstones(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, view: str, nkeys: int) -> None:
    """Upsert a tombstone for every delete of the batch; drop those older than the retention.

    Silver calls it for a batch with deletes only: the retention is measured from the newest
    tombstone, so a batch without deletes would find nothing new to drop.
    """
    name = ensure_tombstone_table(spark, cfg, st)
    key = "array(" + ", ".join(f"s._k{i}" for i in range(nkeys)) + ")"
    meta = ["_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset", "_cdc_source_ts_ms"]
    newer = f"{latest_change('t').sql()} < {latest_change('s').sql()}"
    spark.sql(f"MERGE INTO {name} t USING (SELECT * FROM {view} WHERE _op = 'delete') s ON t.key = {key} "
              f"WHEN MATCHED AND {newer} THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in meta)} "
              f"WHEN NOT MATCHED THEN INSERT (key, {', '.join(meta)}) VALUES ({key}, {', '.join('s.' + c for c in meta)})")
    # the newest source time and the oldest of a key's tombstone: a DELETE only when one is past the retention
    ages = spark.sql(f"SELECT max(_cdc_source_ts_ms) AS m, min(CASE WHEN size(key) > 0 THEN _cdc_source_ts_ms END) "
                     f"AS oldest FROM {name}").first()
    if ages["m"] is not None:
        cutoff = int(ages["m"]) - cfg.silver.tombstone_retention_hours * 3_600_000
        if ages["oldest"] is not None and int(ages["oldest"]) < cutoff:
            spark.sql(f"DELETE FROM {name} WHERE _cdc_source_ts_ms < {cutoff} AND size(key) > 0")
