"""Stage 3, silver: order, deduplicate and MERGE each source table's changes into an Iceberg table.

For every source table in the window's bronze rows:

1. Changes are keyed by the primary key (a delete by its before image, others by the after
   image; an update that changes the key also deletes the old key) and ordered by
   ``(source_position, kafka_partition, kafka_offset, row_in_record)``: the source's own order,
   arrival order only to break ties.
2. Each key's changes collapse into one: the last change decides delete or upsert; the image is
   built column by column from the latest change carrying each column, starting at the last
   insert/snapshot/delete of that key. When the batch holds such a reset the image replaces the
   silver row (absent columns become null); when it holds only updates, absent columns keep their
   silver values (partial images: Canal ``old``, PostgreSQL TOAST, ...).
3. One ``MERGE INTO`` per table applies the result, but only where the change is newer than the
   change that produced the silver row (every silver row carries ``_cdc_position``,
   ``_cdc_kafka_partition``, ``_cdc_kafka_offset``), so reruns and duplicates change nothing.
   A truncate deletes every row older than it and is remembered (the tombstone with an empty key),
   so later batches drop changes older than it too. In hard-delete mode every delete also leaves a
   tombstone (:func:`record_tombstones`), and changes not newer than a key's tombstone are
   dropped before the MERGE, so a rerun of an earlier hour cannot bring a deleted row back.

Silver tables live in ``<catalog>.<silver.namespace>`` and are named
``<table_prefix><database>__<schema>__<table>`` (missing parts left out). They are created on first
sight with typed columns (``cdclake.types``), bucketed by the first key column, Iceberg format 2,
merge-on-read by default. New columns are added; widened types evolve; an incompatible type
change stops that table with :class:`SchemaChangeError` while other tables proceed. Columns whose
names start with ``_cdc_`` are reserved.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from cdclake import types as T
from cdclake.catalog import BRONZE_TABLE, ensure_namespace, qualified
from cdclake.config import PipelineConfig
from cdclake.land import window_filter
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

META_COLUMNS = {
    "_cdc_position": "array<decimal(38,0)>",
    "_cdc_kafka_partition": "int",
    "_cdc_kafka_offset": "bigint",
    "_cdc_op": "string",
    "_cdc_source_ts_ms": "bigint",
}
SOFT_DELETE_COLUMN = "_cdc_deleted"
_ORDER = ("source_position", "kafka_partition", "kafka_offset", "row_in_record")


class SilverError(RuntimeError):
    """One or more tables could not be merged; the others were. The message lists them."""


class SchemaChangeError(SilverError):
    """An incompatible column type change (e.g. bigint → string) for one table."""


@dataclass(frozen=True)
class SourceTable:
    """A source table as bronze names it, plus the topic's silver table prefix."""

    prefix: str
    database: Optional[str]
    schema: Optional[str]
    table: str

    @property
    def silver_name(self) -> str:
        return self.prefix + "__".join(p for p in (self.database, self.schema, self.table) if p)

    def __str__(self) -> str:
        return ".".join(p for p in (self.database, self.schema, self.table) if p)


@dataclass
class TableResult:
    """What one table's merge did: key counts of the deduplicated batch."""

    table: str
    changes: int = 0
    upserts: int = 0
    deletes: int = 0
    truncated: bool = False
    added_columns: list[str] = field(default_factory=list)
    history_versions: int = 0


def silver_table(cfg: PipelineConfig, st: SourceTable) -> str:
    """Fully qualified, quoted Spark name of the silver table of ``st``."""
    return f"{cfg.catalog.name}.{T.quote_ident(cfg.silver.namespace)}.{T.quote_ident(st.silver_name)}"


def _table_exists(spark: "SparkSession", name: str) -> bool:
    try:
        spark.table(name).schema
        return True
    except Exception as exc:  # AnalysisException: TABLE_OR_VIEW_NOT_FOUND
        if "TABLE_OR_VIEW_NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
            return False
        raise


def batch_schema(changes: "DataFrame") -> tuple[list[str], dict[str, str]]:
    """Primary key (of the latest change) and column types (widened over the batch), in source order.

    Columns come in the order of the first change carrying them and their place in its image (the
    message's column order). Columns without a type are ``string``. Raises :class:`SchemaChangeError` for an
    incompatible type change inside the batch.
    """
    from pyspark.sql import functions as F

    latest = changes.orderBy(*[F.col(c).desc() for c in _ORDER]).select("primary_key").first()
    pk = list(latest["primary_key"] or [])
    typed = (changes.select(F.explode("column_types").alias("c", "t"), *_ORDER).groupBy("c", "t")
             .agg(F.max(F.struct(*_ORDER)).alias("o")).orderBy("o").collect())
    # columns in source order: by the first change that carries them, then by place in its image
    order = F.struct(*_ORDER)
    placed = changes.select(order.alias("o"), F.lit(0).alias("img"), F.posexplode(F.map_keys("after")).alias("p", "c"))
    placed = placed.unionByName(changes.select(order.alias("o"), F.lit(1).alias("img"),
                                               F.posexplode(F.map_keys("before")).alias("p", "c")))
    names = (placed.groupBy("c").agg(F.min(F.struct("o", "img", "p")).alias("first")).orderBy("first")
             .select("c").collect())
    types: dict[str, str] = {r["c"]: "string" for r in names}
    seen: dict[str, str] = {}
    for r in typed:
        c, t = r["c"], T.spark_type(r["t"])
        if c in seen:
            w = T.widen(seen[c], t)
            if w is None:
                raise SchemaChangeError(f"column {c!r} changes type from {seen[c]} to {t} inside the batch")
            t = w
        seen[c] = t
    types.update(seen)
    for k in pk:
        types.setdefault(k, "string")
    return pk, types


def ensure_silver_table(spark: "SparkSession", cfg: PipelineConfig, name: str, pk: list[str],
                        types: dict[str, str], result: TableResult,
                        meta: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Create the silver (or history) table, or evolve it to hold ``types``; return its column types.

    ``meta`` are the ``_cdc_*`` columns (default :data:`META_COLUMNS`, plus ``_cdc_deleted`` in
    soft-delete mode). Raises :class:`SchemaChangeError` naming table, column and both types for
    an incompatible change (narrowing is ignored: the wider silver type stays).
    """
    q = T.quote_ident
    if meta is None:
        meta = dict(META_COLUMNS, **({SOFT_DELETE_COLUMN: "boolean"} if cfg.silver.delete_mode == "soft" else {}))
    if not _table_exists(spark, name):
        cols = [f"{q(c)} {T.spark_type(t)}" for c, t in types.items()] + [f"{c} {t}" for c, t in meta.items()]
        mode = cfg.silver.write_mode
        spark.sql(
            f"CREATE TABLE {name} ({', '.join(cols)}) USING iceberg "
            f"PARTITIONED BY (bucket({cfg.silver.buckets}, {q(pk[0])})) TBLPROPERTIES ("
            f"'format-version'='2', 'write.merge.mode'='{mode}', 'write.update.mode'='{mode}', "
            f"'write.delete.mode'='{mode}', 'cdc.primary-key'={T.sql_string(','.join(pk))})")
        log.info("created silver table %s with key %s and %d columns", name, pk, len(types))
        return dict(types)
    current = {f.name: f.dataType.simpleString() for f in spark.table(name).schema.fields if f.name not in meta}
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
            raise SchemaChangeError(f"silver table {name}: column {c!r} cannot change type from {old} to {t}")
        if wider != old:
            spark.sql(f"ALTER TABLE {name} ALTER COLUMN {q(c)} TYPE {wider}")
            current[c] = wider
            log.info("silver table %s: widened column %s from %s to %s", name, c, old, wider)
    return current


def collapse(changes: "DataFrame", pk: list[str]) -> "DataFrame":
    """One row per key: the net effect of the batch's changes for that key.

    Output columns: ``_k0.._kN`` (key text), ``_op`` (``delete``/``upsert``), ``_replace``
    (boolean: the batch holds an insert, snapshot or delete of the key), ``_img``
    (map<string,string>: latest value per column since the last reset; for a key whose last change
    is a delete, that delete's before image), ``_cdc_*`` metadata of the last change.
    """
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    keys = [f"_k{i}" for i in range(len(pk))]
    order = F.struct(*_ORDER)
    meta = [F.col("source_position").alias("_cdc_position"), F.col("kafka_partition").alias("_cdc_kafka_partition"),
            F.col("kafka_offset").alias("_cdc_kafka_offset"), F.col("op").alias("_cdc_op"),
            F.col("source_ts_ms").alias("_cdc_source_ts_ms")]
    kind = F.when(F.col("op") == "delete", "delete").when(F.col("op") == "update", "update").otherwise("insert")
    main = changes.select(
        *[F.when(F.col("op") == "delete", F.col("before")[k]).otherwise(F.col("after")[k]).alias(n) for k, n in zip(pk, keys)],
        kind.alias("_kind"), F.when(F.col("op") == "delete", F.col("before")).otherwise(F.col("after")).alias("_img"),
        order.alias("_ord"), *meta)
    # an update that changes the key deletes the old key at the same position
    key_changed = F.lit(False)
    for k in pk:
        key_changed = key_changed | ~F.col("before")[k].eqNullSafe(F.col("after")[k])
    old_keys = changes.where((F.col("op") == "update") & F.col("before").isNotNull() & key_changed
                             & F.forall(F.array(*[F.col("before")[k] for k in pk]), lambda v: v.isNotNull()))
    old = old_keys.select(*[F.col("before")[k].alias(n) for k, n in zip(pk, keys)], F.lit("delete").alias("_kind"),
                          F.lit(None).cast("map<string,string>").alias("_img"), order.alias("_ord"), *meta)
    rows = main.unionByName(old)
    w = W.partitionBy(*keys)
    rows = rows.withColumn("_reset", F.max(F.when(F.col("_kind") != "update", F.col("_ord"))).over(w))
    last = rows.groupBy(*keys).agg(
        F.max_by(F.struct("_kind", "_img", "_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset", "_cdc_op",
                          "_cdc_source_ts_ms"), F.col("_ord")).alias("_last"),
        F.max(F.col("_reset").isNotNull()).alias("_replace"))
    img = (rows.where((F.col("_kind") != "delete") & (F.col("_reset").isNull() | (F.col("_ord") >= F.col("_reset"))))
           .select(*keys, "_ord", F.explode("_img").alias("_c", "_v"))
           .groupBy(*keys, "_c").agg(F.max_by("_v", "_ord").alias("_v"))
           .groupBy(*keys).agg(F.map_from_entries(F.collect_list(F.struct("_c", "_v"))).alias("_img")))
    out = last.join(img, keys, "left").select(
        *keys, F.when(F.col("_last._kind") == "delete", "delete").otherwise("upsert").alias("_op"), "_replace",
        # a key whose last change is a delete keeps the delete's before image (soft-delete mode shows it)
        F.coalesce(F.when(F.col("_last._kind") == "delete", F.col("_last._img")).otherwise(F.col("_img")),
                   F.create_map().cast("map<string,string>")).alias("_img"),
        *[F.col(f"_last.{c}").alias(c) for c in META_COLUMNS])
    return out


TOMBSTONE_SCHEMA = ("key array<string>, _cdc_position array<decimal(38,0)>, _cdc_kafka_partition int, "
                    "_cdc_kafka_offset bigint, _cdc_source_ts_ms bigint")


def tombstone_table(cfg: PipelineConfig, st: SourceTable) -> str:
    """Quoted name of the tombstone table of ``st``: ``<namespace>_tombstones.<silver name>``.

    Columns: key array<string> (primary-key values in canonical text), and the ``_cdc_*``
    position columns and source time (ms) of the delete.
    """
    return (f"{cfg.catalog.name}.{T.quote_ident(cfg.silver.namespace + '_tombstones')}."
            f"{T.quote_ident(st.silver_name)}")


def without_tombstoned(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, src: "DataFrame",
                       nkeys: int) -> "DataFrame":
    """Drop collapsed changes that are not newer than a recorded delete of the same key."""
    from pyspark.sql import functions as F

    name = tombstone_table(cfg, st)
    if not _table_exists(spark, name):
        return src
    tomb = spark.table(name).select(F.col("key").alias("_tkey"), F.struct(
        F.col("_cdc_position").alias("p"), F.col("_cdc_kafka_partition").alias("kp"),
        F.col("_cdc_kafka_offset").alias("ko")).alias("_tord"))
    keyed = src.withColumn("_tkey", F.array(*[F.col(f"_k{i}") for i in range(nkeys)]))
    order = F.struct(F.col("_cdc_position").alias("p"), F.col("_cdc_kafka_partition").alias("kp"),
                     F.col("_cdc_kafka_offset").alias("ko"))
    return (keyed.join(tomb, "_tkey", "left").where(F.col("_tord").isNull() | (order > F.col("_tord")))
            .drop("_tkey", "_tord"))


def _ensure_tombstone_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable) -> str:
    ensure_namespace(spark, cfg, cfg.silver.namespace + "_tombstones")
    name = tombstone_table(cfg, st)
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({TOMBSTONE_SCHEMA}) USING iceberg "
              "TBLPROPERTIES ('format-version'='2', 'write.merge.mode'='merge-on-read', "
              "'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read')")
    return name


def record_truncate(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, at: tuple) -> None:
    """Remember a truncate (position, Kafka partition, offset) as the tombstone row with an empty key.

    Changes older than the latest truncate are dropped in every later batch too, so a late insert
    cannot bring back a row the truncate removed.
    """
    name = _ensure_tombstone_table(spark, cfg, st)
    pos = ", ".join(f"CAST({int(x)} AS DECIMAL(38,0))" for x in at[0])
    spark.sql(f"MERGE INTO {name} t USING (SELECT CAST(array() AS ARRAY<STRING>) AS key, array({pos}) AS _cdc_position, "
              f"CAST({int(at[1])} AS INT) AS _cdc_kafka_partition, CAST({int(at[2])} AS BIGINT) AS _cdc_kafka_offset, "
              "CAST(NULL AS BIGINT) AS _cdc_source_ts_ms) s ON size(t.key) = 0 "
              "WHEN MATCHED AND struct(t._cdc_position, t._cdc_kafka_partition, t._cdc_kafka_offset) < "
              "struct(s._cdc_position, s._cdc_kafka_partition, s._cdc_kafka_offset) THEN UPDATE SET * "
              "WHEN NOT MATCHED THEN INSERT *")


def stored_truncate(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable):
    """The latest recorded truncate of ``st`` as ``(position, partition, offset)``, or None."""
    name = tombstone_table(cfg, st)
    if not _table_exists(spark, name):
        return None
    row = spark.sql(f"SELECT _cdc_position, _cdc_kafka_partition, _cdc_kafka_offset FROM {name} "
                    "WHERE size(key) = 0").first()
    return None if row is None else (row[0], row[1], row[2])


def record_tombstones(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, view: str, nkeys: int) -> None:
    """Upsert a tombstone for every delete of the batch; drop those older than the retention."""
    name = _ensure_tombstone_table(spark, cfg, st)
    key = "array(" + ", ".join(f"s._k{i}" for i in range(nkeys)) + ")"
    meta = ["_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset", "_cdc_source_ts_ms"]
    newer = ("struct(t._cdc_position, t._cdc_kafka_partition, t._cdc_kafka_offset) < "
             "struct(s._cdc_position, s._cdc_kafka_partition, s._cdc_kafka_offset)")
    spark.sql(f"MERGE INTO {name} t USING (SELECT * FROM {view} WHERE _op = 'delete') s ON t.key = {key} "
              f"WHEN MATCHED AND {newer} THEN UPDATE SET {', '.join(f't.{c} = s.{c}' for c in meta)} "
              f"WHEN NOT MATCHED THEN INSERT (key, {', '.join(meta)}) VALUES ({key}, {', '.join('s.' + c for c in meta)})")
    horizon = spark.sql(f"SELECT max(_cdc_source_ts_ms) AS m FROM {name}").first()["m"]
    if horizon is not None:
        cutoff = int(horizon) - cfg.silver.tombstone_retention_hours * 3_600_000
        spark.sql(f"DELETE FROM {name} WHERE _cdc_source_ts_ms < {cutoff} AND size(key) > 0")


def merge_sql(cfg: PipelineConfig, name: str, view: str, pk: list[str], types: dict[str, str]) -> str:
    """The ``MERGE INTO`` statement applying a collapsed batch (view ``view``) to table ``name``.

    Every identifier is quoted; column names reach SQL only as quoted identifiers or string
    literals.
    """
    q, lit = T.quote_ident, T.sql_string
    on = " AND ".join(f"t.{q(k)} = {T.sql_cast(f's._k{i}', types[k])}" for i, k in enumerate(pk))
    newer = ("struct(t._cdc_position, t._cdc_kafka_partition, t._cdc_kafka_offset) < "
             "struct(s._cdc_position, s._cdc_kafka_partition, s._cdc_kafka_offset)")
    newer = f"(t._cdc_position IS NULL OR {newer})"

    def value(c: str, keep_old: bool) -> str:
        cast = T.sql_cast(f"s._img[{lit(c)}]", types[c])
        if not keep_old:
            return cast
        return f"CASE WHEN s._replace OR map_contains_key(s._img, {lit(c)}) THEN {cast} ELSE t.{q(c)} END"

    data_cols = [c for c in types if c not in pk]
    sets = [f"t.{q(c)} = {value(c, True)}" for c in data_cols] + [f"t.{c} = s.{c}" for c in META_COLUMNS]
    insert_cols = [q(c) for c in types] + list(META_COLUMNS)
    insert_vals = [T.sql_cast(f"s._k{pk.index(c)}", types[c]) if c in pk else value(c, False) for c in types] + \
                  [f"s.{c}" for c in META_COLUMNS]
    soft = cfg.silver.delete_mode == "soft"
    if soft:
        sets.append(f"t.{SOFT_DELETE_COLUMN} = false")
        insert_cols.append(SOFT_DELETE_COLUMN)
        insert_vals.append("s._op = 'delete'")
        on_delete = (f"WHEN MATCHED AND s._op = 'delete' AND {newer} THEN UPDATE SET "
                     + ", ".join([f"t.{SOFT_DELETE_COLUMN} = true"] + [f"t.{c} = s.{c}" for c in META_COLUMNS]))
        not_matched = "WHEN NOT MATCHED THEN"
    else:
        on_delete = f"WHEN MATCHED AND s._op = 'delete' AND {newer} THEN DELETE"
        not_matched = "WHEN NOT MATCHED AND s._op = 'upsert' THEN"
    return (f"MERGE INTO {name} t USING {view} s ON {on} "
            f"{on_delete} "
            f"WHEN MATCHED AND s._op = 'upsert' AND {newer} THEN UPDATE SET {', '.join(sets)} "
            f"{not_matched} INSERT ({', '.join(insert_cols)}) VALUES ({', '.join(insert_vals)})")


def apply_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, changes: "DataFrame",
                history_from: Optional["DataFrame"] = None) -> TableResult:
    """Merge one source table's changes (bronze rows) into its silver table.

    With ``history_from`` (every landed bronze change of the table), also recompute the SCD type 2
    history of the keys the changes touch (:mod:`cdclake.history`).
    """
    from pyspark.sql import functions as F

    name = silver_table(cfg, st)
    result = TableResult(table=name)
    ensure_namespace(spark, cfg, cfg.silver.namespace)
    changes = changes.persist()
    try:
        result.changes = changes.count()
        rows = changes.where(F.col("op") != "truncate")
        trunc = changes.where(F.col("op") == "truncate").agg(F.max(F.struct(*_ORDER)).alias("o")).first()["o"]
        if trunc is not None:
            result.truncated = True
            trunc = tuple(trunc)[:3]
            record_truncate(spark, cfg, st, trunc)
            if _table_exists(spark, name):
                pos = ", ".join(f"CAST({int(x)} AS DECIMAL(38,0))" for x in trunc[0])
                spark.sql(f"DELETE FROM {name} WHERE struct(_cdc_position, _cdc_kafka_partition, _cdc_kafka_offset) < "
                          f"named_struct('_cdc_position', array({pos}), '_cdc_kafka_partition', CAST({int(trunc[1])} AS INT), "
                          f"'_cdc_kafka_offset', CAST({int(trunc[2])} AS BIGINT))")
        last_truncate = stored_truncate(spark, cfg, st)  # this batch's or an earlier batch's
        if last_truncate is not None:
            at = F.struct(F.lit(list(last_truncate[0])).cast("array<decimal(38,0)>").alias("source_position"),
                          F.lit(last_truncate[1]).cast("int").alias("kafka_partition"),
                          F.lit(last_truncate[2]).cast("bigint").alias("kafka_offset"))
            rows = rows.where(F.struct(*_ORDER[:3]) > at)
        if not rows.take(1):
            return result
        pk, types = batch_schema(rows)
        types = ensure_silver_table(spark, cfg, name, pk, types, result)
        src = collapse(rows, pk)
        hard = cfg.silver.delete_mode == "hard"
        if hard:
            src = without_tombstoned(spark, cfg, st, src, len(pk))
        src = src.persist()
        try:
            counts = {r["_op"]: r["n"] for r in src.groupBy("_op").agg(F.count("*").alias("n")).collect()}
            result.upserts, result.deletes = int(counts.get("upsert", 0)), int(counts.get("delete", 0))
            view = "_cdc_merge_source"
            src.createOrReplaceTempView(view)
            spark.sql(merge_sql(cfg, name, view, pk, types))
            if hard:
                record_tombstones(spark, cfg, st, view, len(pk))
            if history_from is not None:
                from cdclake.history import apply_history

                result.history_versions = apply_history(spark, cfg, st.silver_name, rows, history_from, pk, types, result)
        finally:
            src.unpersist()
    finally:
        changes.unpersist()
    log.info("silver %s: %d changes -> %d keys upserted, %d deleted%s", name, result.changes, result.upserts,
             result.deletes, " (truncated)" if result.truncated else "")
    return result


def source_tables(bronze: "DataFrame", prefixes: dict[str, str]) -> list[tuple[SourceTable, list[str]]]:
    """Distinct source tables in ``bronze`` with the topics they came from."""
    from pyspark.sql import functions as F

    rows = (bronze.groupBy("source_database", "source_schema", "source_table", "kafka_topic").agg(F.count("*"))
            .collect())
    out: dict[SourceTable, list[str]] = {}
    for r in rows:
        st = SourceTable(prefixes.get(r["kafka_topic"], ""), r["source_database"], r["source_schema"], r["source_table"])
        out.setdefault(st, []).append(r["kafka_topic"])
    return sorted(out.items(), key=lambda kv: kv[0].silver_name)


def build_silver(spark: "SparkSession", cfg: PipelineConfig, window: Window) -> list[TableResult]:
    """Merge the window's bronze changes of the selected topics into silver, table by table.

    Raises :class:`SilverError` listing the tables that failed, after all others are merged.
    """
    from pyspark.sql import functions as F

    topics = list(window.topics or cfg.topics())
    prefixes = {s.topic: s.table_prefix for s in cfg.sources}
    with_history = {s.topic for s in cfg.sources if s.history}
    every = spark.table(qualified(cfg, BRONZE_TABLE))
    bronze = every.where(window_filter(window, topics))
    results, errors = [], []
    for st, st_topics in source_tables(bronze, prefixes):
        same = (F.col("source_database").eqNullSafe(F.lit(st.database)) & F.col("source_schema").eqNullSafe(F.lit(st.schema))
                & (F.col("source_table") == F.lit(st.table)) & F.col("kafka_topic").isin(st_topics))
        history_from = every.where(same) if with_history & set(st_topics) else None
        try:
            results.append(apply_table(spark, cfg, st, bronze.where(same), history_from))
        except Exception as exc:
            log.error("silver table for %s (topics %s) failed: %s", st, st_topics, exc)
            errors.append(f"{st} -> {st.silver_name}: {exc}".splitlines()[0])
    if errors:
        raise SilverError(f"{len(errors)} table(s) not merged: " + "; ".join(errors))
    return results
