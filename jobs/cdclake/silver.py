"""Stage 3, silver: order, deduplicate and MERGE each source table's changes into an Iceberg table.

For every source table in the window's bronze rows:

1. Changes are keyed by the primary key (a delete by its before image, others by the after
   image; an update that changes the key, a *move*, also deletes the old key) and ordered by
   ``(source_position, kafka_partition, kafka_offset, row_in_record)``: the source's own order,
   arrival order only to break ties. A move's after image is completed with the old row's other
   columns (:func:`carry_over`), as the source moves the whole row, along chains of moves too.
   A change of a key older than a move of that key merged by an earlier batch arrives late: the
   landed changes of the keys on the move's chain are replayed with the batch
   (:func:`replay_rows`), so the late change reaches the key the row lives under now.
2. Each key's changes collapse into one (:func:`collapse`): the latest change decides delete or
   upsert; the latest insert, snapshot, delete, move, tombstone or truncate is the key's *reset*;
   the image is built column by column from the latest change since the reset carrying each
   column, and remembers which change that was.
3. One ``MERGE INTO`` per table applies the result column by column (:func:`merge_sql`). Every
   silver row carries the order of its latest change (``_cdc_position``,
   ``_cdc_kafka_partition``, ``_cdc_kafka_offset``), of its latest reset (``_cdc_reset``) and of
   every column whose value came from an older change (``_cdc_column_positions``; a null entry:
   no change since the reset set it). A value replaces the silver value only when it comes from a
   newer change, and neither counts when older than the latest reset. So duplicates and reruns
   change nothing, a partial update arriving late still sets its columns unless a newer change
   set them, and a late insert fills only what newer updates left unset.
   A truncate deletes every row older than it and is remembered (the tombstone with an empty key),
   so later batches drop changes older than it too. In hard-delete mode every delete also leaves a
   tombstone (:func:`record_tombstones`), which later batches read back as a reset of its key
   (:func:`with_tombstones`), so a rerun of an earlier hour cannot bring a deleted row back.

Silver tables live in ``<catalog>.<silver.namespace>`` and are named
``<table_prefix><database>__<schema>__<table>`` (missing parts left out). A name longer than
:data:`MAX_NAME_CHARS` (255, what catalogs hold: PostgreSQL's Iceberg JDBC catalog keeps table
names in VARCHAR(255)) is shortened deterministically to its first 238 characters, ``~`` and the
first 16 hex digits of the SHA-256 of the whole name (UTF-8): 255 characters
(:attr:`SourceTable.silver_name`); a table an earlier version created under the whole name keeps
it. Tombstone and history tables take the silver table's name in their own namespaces. New
tables record their source table in the property ``cdc.source-table`` (JSON ``[prefix, database,
schema, table]``); a 255-character name held by another source table stops the table
(:class:`SilverError`) instead of mixing two tables' rows.

Names from messages (database, schema, table, column) are accepted as :mod:`cdclake.names` says,
reach SQL only quoted (``quote_ident``, ``sql_string``) and never become paths: every table this
module creates (silver, tombstones, history) gets an explicit location
``<warehouse>/<namespace>/<slug>-<hash>`` (:func:`table_location`), its partition field is named
``_cdc_bucket``, and its key columns are stored as JSON in ``cdc.primary-key-columns`` (beside the
comma-joined ``cdc.primary-key``). Tables created before keep their names and locations.

Tables are created on first sight with typed columns (``cdclake.types``), bucketed by the first
key column, Iceberg format 2, merge-on-read by default. New columns are added; types evolve only
by Iceberg's promotions (int → bigint, float → double, decimal(P,S) → decimal(P',S) with P' > P;
:func:`cdclake.types.widen`) and a narrower type keeps the silver one; any other type change (a
decimal scale change, bigint → string ...) stops that table with :class:`SchemaChangeError`, naming
table, column and both types, while other tables proceed. Columns whose names start with
``_cdc_`` are reserved.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Optional

from cdclake import types as T
from cdclake.catalog import BRONZE_TABLE, describe, ensure_namespace, materialize, qualified
from cdclake.config import PipelineConfig
from cdclake.errors import SchemaChangeError, SilverError
from cdclake.faults import kill_point
from cdclake.land import window_filter
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: The order of a change as silver stores it: source position, then Kafka partition and offset.
ORDER_TYPE = "struct<p:array<decimal(38,0)>,kp:int,ko:bigint>"
#: Metadata columns of every silver row (see the module docstring).
META_COLUMNS = {
    "_cdc_position": "array<decimal(38,0)>",
    "_cdc_kafka_partition": "int",
    "_cdc_kafka_offset": "bigint",
    "_cdc_op": "string",
    "_cdc_source_ts_ms": "bigint",
    "_cdc_reset": ORDER_TYPE,
    "_cdc_column_positions": f"map<string,{ORDER_TYPE}>",
}
#: The columns of :data:`META_COLUMNS` copied from the last change of a key.
LAST_CHANGE_COLUMNS = ("_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset", "_cdc_op", "_cdc_source_ts_ms")
SOFT_DELETE_COLUMN = "_cdc_deleted"
_ORDER = ("source_position", "kafka_partition", "kafka_offset", "row_in_record")


#: Longest table name the pipeline gives a table (characters): what catalogs hold.
MAX_NAME_CHARS = 255
#: Hex digits of the SHA-256 that end a shortened name and a table location.
NAME_HASH_DIGITS = 16
#: Table property naming the source table of a silver table (JSON [prefix, database, schema, table]).
SOURCE_TABLE_PROPERTY = "cdc.source-table"
#: Table property holding the primary key columns as a JSON array (``cdc.primary-key`` joins them with commas).
PRIMARY_KEY_PROPERTY = "cdc.primary-key-columns"


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:NAME_HASH_DIGITS]


def short_name(name: str) -> str:
    """``name`` when it has at most :data:`MAX_NAME_CHARS` characters, else its shortened form.

    Shortened: the first 238 characters, ``~``, and the first 16 hex digits of the SHA-256 of the
    whole name in UTF-8 (255 characters), e.g. ``short_name("a" * 300) == "a" * 238 + "~" + hex16``.
    """
    if len(name) <= MAX_NAME_CHARS:
        return name
    return name[:MAX_NAME_CHARS - NAME_HASH_DIGITS - 1] + "~" + _digest(name)


def table_location(cfg: PipelineConfig, namespace: str, name: str) -> str:
    """The location given to a new table ``name`` of ``namespace``: ``<warehouse>/<namespace>/<slug>-<hash>``.

    ``slug``: the first 40 ASCII letters, digits and underscores of ``name`` (other runs become
    one ``_``; ``t`` when none is left), ``hash``: the first 16 hex digits of the SHA-256 of
    ``name`` (UTF-8). So a name from a message never becomes a path, and the location is under
    the warehouse, in the namespace's directory (as Iceberg's default location would be).
    """
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", name)[:40].strip("_") or "t"
    return f"{cfg.catalog.warehouse.rstrip('/')}/{namespace}/{slug}-{_digest(name)}"


@dataclass(frozen=True)
class SourceTable:
    """A source table as bronze names it, plus the topic's silver table prefix.

    ``legacy_name``: the silver table was created by an earlier version under :attr:`full_name`
    though that is longer than :data:`MAX_NAME_CHARS` (see :func:`resolve_legacy_name`).
    """

    prefix: str
    database: Optional[str]
    schema: Optional[str]
    table: str
    legacy_name: bool = field(default=False, compare=False)

    @property
    def full_name(self) -> str:
        """``<prefix><database>__<schema>__<table>`` (missing parts left out), however long."""
        return self.prefix + "__".join(p for p in (self.database, self.schema, self.table) if p)

    @property
    def silver_name(self) -> str:
        """The silver table name: :attr:`full_name`, shortened by :func:`short_name` when too long."""
        return self.full_name if self.legacy_name else short_name(self.full_name)

    def identity(self) -> str:
        """The value of :data:`SOURCE_TABLE_PROPERTY`: JSON ``[prefix, database, schema, table]``."""
        return json.dumps([self.prefix, self.database, self.schema, self.table], ensure_ascii=False)

    def __str__(self) -> str:
        return ".".join(p for p in (self.database, self.schema, self.table) if p)


def resolve_legacy_name(st: SourceTable, exists: Callable[[str], bool]) -> SourceTable:
    """``st``, marked :attr:`SourceTable.legacy_name` when its silver table has its long name.

    An earlier version named every silver table :attr:`SourceTable.full_name`, however long (a
    catalog on an object store could hold such names). When that name is longer than
    :data:`MAX_NAME_CHARS` and ``exists(full_name)`` (the silver table of that name exists in the
    silver namespace), the table keeps it; otherwise ``st`` is returned unchanged.
    """
    if st.legacy_name or len(st.full_name) <= MAX_NAME_CHARS:
        return st
    return replace(st, legacy_name=True) if exists(st.full_name) else st


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


def batch_schema(changes: "DataFrame", table: Optional[str] = None) -> tuple[list[str], dict[str, str]]:
    """Primary key (of the latest change) and column types (widened over the batch), in source order.

    Columns come in the order of the first change carrying them and their place in its image (the
    message's column order). Columns without a type are ``string``. Raises :class:`SchemaChangeError` for an
    incompatible type change inside the batch (:func:`cdclake.types.widen`), naming ``table`` (the
    silver table), the column and both types.
    """
    from pyspark.sql import functions as F

    # The changes of a table mostly repeat a few images' column lists and type maps: reduce the
    # batch to its distinct ones, with the latest and first order of each (and the key of the
    # latest), in one pass, and explode only those (the same result as exploding every change, at
    # a fraction of the cost).
    order = F.struct(*_ORDER)
    shapes = materialize(changes.groupBy(F.map_entries("column_types").alias("types"),
                                         F.map_keys("after").alias("after"), F.map_keys("before").alias("before"))
                         .agg(F.max(order).alias("last"), F.min(order).alias("first"),
                              F.max_by("primary_key", order).alias("primary_key")))
    latest = shapes.orderBy(F.col("last").desc()).select("primary_key").first()
    pk = list(latest["primary_key"] or [])
    typed = (shapes.select(F.explode("types").alias("ct"), "last")
             .groupBy(F.col("ct.key").alias("c"), F.col("ct.value").alias("t"))
             .agg(F.max("last").alias("o")).orderBy("o").collect())
    # columns in source order: by the first change that carries them, then by place in its image
    placed = shapes.select(F.col("first").alias("o"), F.lit(0).alias("img"), F.posexplode("after").alias("p", "c"))
    placed = placed.unionByName(shapes.select(F.col("first").alias("o"), F.lit(1).alias("img"),
                                              F.posexplode("before").alias("p", "c")))
    names = (placed.groupBy("c").agg(F.min(F.struct("o", "img", "p")).alias("first")).orderBy("first")
             .select("c").collect())
    types: dict[str, str] = {r["c"]: "string" for r in names}
    seen: dict[str, str] = {}
    for r in typed:
        c, t = r["c"], T.spark_type(r["t"])
        if c in seen:
            w = T.widen(seen[c], t)
            if w is None:
                raise SchemaChangeError(f"silver table {table or '?'}: column {c!r} changes type from {seen[c]} to {t} "
                                        "inside the batch (Iceberg promotes only int to bigint, float to double "
                                        "and a decimal's precision at the same scale)")
            t = w
        seen[c] = t
    types.update(seen)
    for k in pk:
        types.setdefault(k, "string")
    return pk, types


def ensure_silver_table(spark: "SparkSession", cfg: PipelineConfig, name: str, pk: list[str],
                        types: dict[str, str], result: TableResult,
                        meta: Optional[dict[str, str]] = None, location: Optional[str] = None,
                        properties: Optional[dict[str, str]] = None) -> dict[str, str]:
    """Create the silver (or history) table, or evolve it to hold ``types``; return its column types.

    ``name``: the quoted Spark name; ``pk``: key columns; ``types``: column → canonical type.
    ``meta`` are the ``_cdc_*`` columns (default :data:`META_COLUMNS`, plus ``_cdc_deleted`` in
    soft-delete mode). A new table is created at ``location`` (:func:`table_location`; None: the
    catalog's default, for pipeline-owned names only) with ``properties`` added to its own
    (format 2, write modes, ``cdc.primary-key`` and :data:`PRIMARY_KEY_PROPERTY`), then bucketed
    by ``pk[0]`` in the partition field ``_cdc_bucket``. An existing table keeps its location.
    Raises :class:`SchemaChangeError` naming table, column and both types for a type change
    Iceberg cannot make (:func:`cdclake.types.widen`; a narrower type keeps the silver type).
    """
    q = T.quote_ident
    if meta is None:
        meta = dict(META_COLUMNS, **({SOFT_DELETE_COLUMN: "boolean"} if cfg.silver.delete_mode == "soft" else {}))
    if not _table_exists(spark, name):
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
            spark.sql(f"ALTER TABLE {name} ALTER COLUMN {q(c)} TYPE {wider}")
            current[c] = wider
            log.info("silver table %s: widened column %s from %s to %s", name, c, old, wider)
    return current


def _order3(prefix: str = ""):
    """The storage order struct ``(p, kp, ko)`` of bronze rows (or of ``prefix``-named columns)."""
    from pyspark.sql import functions as F

    return F.struct(F.col(prefix + "source_position").alias("p"), F.col(prefix + "kafka_partition").alias("kp"),
                    F.col(prefix + "kafka_offset").alias("ko"))


def keyed_rows(changes: "DataFrame", pk: list[str]) -> "DataFrame":
    """Bronze changes as one row per key they affect, the input of :func:`collapse`.

    Columns: ``_k0.._kN`` (key text), ``_kind`` (``insert`` for inserts and snapshots, ``update``,
    ``delete``, ``move``: an update that changed the key, as seen by its new key), ``_img``
    (map<string,string>, the after image; null for deletes), ``_before`` (the before image),
    ``_ord`` (struct p, kp, ko, row: the full order), ``_tomb`` (false), the
    :data:`LAST_CHANGE_COLUMNS`, and ``_o0.._oN`` (for a move, the old key). A move also gives a
    ``delete`` row of its old key at the same order. A move delivered more than once (same
    position and keys) is kept once, with its first Kafka coordinates.
    """
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    keys = [f"_k{i}" for i in range(len(pk))]
    olds = [f"_o{i}" for i in range(len(pk))]
    is_delete = F.col("op") == "delete"
    key_changed = F.lit(False)
    for k in pk:
        key_changed = key_changed | ~F.col("before")[k].eqNullSafe(F.col("after")[k])
    moved = ((F.col("op") == "update") & F.col("before").isNotNull() & key_changed
             & F.forall(F.array(*[F.col("before")[k] for k in pk]), lambda v: v.isNotNull()))
    kind = (F.when(is_delete, "delete").when(moved, "move").when(F.col("op") == "update", "update")
            .otherwise("insert"))
    meta = [F.col("source_position").alias("_cdc_position"), F.col("kafka_partition").alias("_cdc_kafka_partition"),
            F.col("kafka_offset").alias("_cdc_kafka_offset"), F.col("op").alias("_cdc_op"),
            F.col("source_ts_ms").alias("_cdc_source_ts_ms")]
    order = F.struct(F.col("source_position").alias("p"), F.col("kafka_partition").alias("kp"),
                     F.col("kafka_offset").alias("ko"), F.col("row_in_record").alias("row"))
    rows = changes.select(
        *[F.when(is_delete, F.col("before")[k]).otherwise(F.col("after")[k]).alias(n) for k, n in zip(pk, keys)],
        kind.alias("_kind"), F.when(is_delete, F.lit(None)).otherwise(F.col("after")).alias("_img"),
        F.col("before").alias("_before"), order.alias("_ord"), F.lit(False).alias("_tomb"), *meta,
        *[F.when(moved, F.col("before")[k]).alias(n) for k, n in zip(pk, olds)])
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
    return rows.unionByName(old)


def with_tombstones(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, rows: "DataFrame",
                    nkeys: int) -> "DataFrame":
    """Add the recorded delete of every key in ``rows`` as a ``delete`` row with ``_tomb`` true.

    A tombstone is a reset like any delete: changes older than it are out (a late, older insert
    or update cannot bring the row back), and a key whose latest change is its own tombstone has
    nothing to apply.
    """
    from pyspark.sql import functions as F

    name = tombstone_table(cfg, st)
    if not _table_exists(spark, name):
        return rows
    keys = [f"_k{i}" for i in range(nkeys)]
    wanted = rows.select(F.array(*keys).alias("key")).distinct()
    tomb = spark.table(name).where(F.size("key") > 0).join(wanted, "key").select(
        *[F.col("key")[i].alias(k) for i, k in enumerate(keys)], F.lit("delete").alias("_kind"),
        F.lit(None).cast("map<string,string>").alias("_img"), F.lit(None).cast("map<string,string>").alias("_before"),
        F.struct(F.col("_cdc_position").alias("p"), F.col("_cdc_kafka_partition").alias("kp"),
                 F.col("_cdc_kafka_offset").alias("ko"), F.lit(-1).alias("row")).alias("_ord"),
        F.lit(True).alias("_tomb"), "_cdc_position", "_cdc_kafka_partition", "_cdc_kafka_offset",
        F.lit("delete").alias("_cdc_op"), "_cdc_source_ts_ms",
        *[F.lit(None).cast("string").alias(f"_o{i}") for i in range(nkeys)])
    return rows.unionByName(tomb)


def _key_text(pk: list[str], types: dict[str, str]) -> str:
    """SQL select list of a silver table's key columns as canonical text, named ``_k0.._kN``."""
    return ", ".join(f"{T.sql_text(T.quote_ident(k), types[k])} AS _k{i}" for i, k in enumerate(pk))


#: Longest chain of key changes (k1 -> k2 -> k3 ...) followed in one batch; longer ones are logged.
MAX_CHAIN = 16


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
    stored_table = name is not None and _table_exists(spark, name)
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
        row_order = "named_struct('p', _cdc_position, 'kp', _cdc_kafka_partition, 'ko', _cdc_kafka_offset, 'row', -1)"
        # one entry per column with the position of its value; the reset is a row of its own
        silver = spark.sql(
            f"SELECT {key_text}, _cdc_reset, {row_order} AS _row_ord, _cdc_column_positions, "
            f"map({text or ''}) AS _vals FROM {name}").join(old_keys, keys)
        entries = silver.select(*keys, F.explode("_vals").alias("_c", "_v"), "_row_ord", "_cdc_column_positions").select(
            *keys, "_c", "_v", F.when(F.array_contains(F.map_keys("_cdc_column_positions"), F.col("_c")), F.struct(
                F.col("_cdc_column_positions")[F.col("_c")]["p"].alias("p"),
                F.col("_cdc_column_positions")[F.col("_c")]["kp"].alias("kp"),
                F.col("_cdc_column_positions")[F.col("_c")]["ko"].alias("ko"), F.lit(-1).alias("row")))
            .otherwise(F.col("_row_ord")).alias("_ord"), F.lit(False).alias("_is_reset"))
        resets = silver.where(F.col("_cdc_reset").isNotNull()).select(
            *keys, F.lit(None).cast("string").alias("_c"), F.lit(None).cast("string").alias("_v"),
            F.struct(F.col("_cdc_reset.p").alias("p"), F.col("_cdc_reset.kp").alias("kp"),
                     F.col("_cdc_reset.ko").alias("ko"), F.lit(-1).alias("row")).alias("_ord"),
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
    own = F.col("_is_reset") & (F.col("_ord.row") == -1) & (F.col("_ord.p") == F.col("_mord.p"))
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


#: Silver table property set once a key change has been merged (see :func:`replay_rows`).
KEY_CHANGES_PROPERTY = "cdc.key-changes"


def _has_key_changes(spark: "SparkSession", name: str) -> bool:
    """Whether silver table ``name`` exists and has :data:`KEY_CHANGES_PROPERTY` set."""
    if not _table_exists(spark, name):
        return False
    rows = spark.sql(f"SHOW TBLPROPERTIES {name}").collect()
    return any(r["key"] == KEY_CHANGES_PROPERTY and r["value"] == "true" for r in rows)


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
    None when nothing is late under a key change. :func:`apply_table` calls it only for tables
    that have had a key change merged (:data:`KEY_CHANGES_PROPERTY`).
    """
    from pyspark.sql import functions as F

    n = len(pk)
    keys, olds = [f"_k{i}" for i in range(n)], [f"_o{i}" for i in range(n)]
    if cfg.silver.delete_mode == "hard":
        resets = keyed.where("_tomb").groupBy(*keys).agg(F.max("_ord").alias("_r"))
    elif _table_exists(spark, name):
        resets = spark.sql(f"SELECT {_key_text(pk, types)}, named_struct('p', _cdc_reset.p, 'kp', _cdc_reset.kp, "
                           f"'ko', _cdc_reset.ko, 'row', -1) AS _r FROM {name} WHERE {SOFT_DELETE_COLUMN}")
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


def collapse(rows: "DataFrame", nkeys: int) -> "DataFrame":
    """One row per key: the net effect of the batch's changes (:func:`keyed_rows`) for that key.

    Changes are ordered by ``(source_position, kafka_partition, kafka_offset, row_in_record)``.
    The latest insert, snapshot, delete or move of a key is its *reset*: changes older than it no
    longer count. Output columns: ``_k0.._kN``, ``_op`` (``delete`` when the latest change is a
    delete, else ``upsert``), ``_reset`` (order struct p, kp, ko of the reset, or null),
    ``_img`` (map<string,string>: per column, the value of the latest change since the reset
    that carries it), ``_ords`` (map<string, order>: the order of that change per column),
    ``_last`` (order of the latest change), ``_before`` (the latest delete's before image),
    ``_tomb`` (the latest change is a recorded tombstone: nothing new), and the
    :data:`LAST_CHANGE_COLUMNS` of the latest change.
    """
    from pyspark.sql import Window as W
    from pyspark.sql import functions as F

    keys = [f"_k{i}" for i in range(nkeys)]
    w = W.partitionBy(*keys)
    rows = rows.withColumn("_rst", F.max(F.when(F.col("_kind") != "update", F.col("_ord"))).over(w))
    last = rows.groupBy(*keys).agg(
        F.max_by(F.struct("_kind", "_before", "_tomb", *LAST_CHANGE_COLUMNS), F.col("_ord")).alias("_last"),
        F.max("_rst").alias("_rst"), F.max("_ord").alias("_lord"))
    o3 = F.struct(F.col("_ord.p").alias("p"), F.col("_ord.kp").alias("kp"), F.col("_ord.ko").alias("ko"))
    img = (rows.where((F.col("_kind") != "delete") & (F.col("_rst").isNull() | (F.col("_ord") >= F.col("_rst"))))
           .select(*keys, "_ord", o3.alias("_o3"), F.explode("_img").alias("_c", "_v"))
           .groupBy(*keys, "_c").agg(F.max_by(F.struct("_v", "_o3"), "_ord").alias("_x"))
           .groupBy(*keys).agg(F.map_from_entries(F.collect_list(F.struct("_c", "_x._v"))).alias("_img"),
                               F.map_from_entries(F.collect_list(F.struct("_c", "_x._o3"))).alias("_ords")))

    def short(c: str):
        return F.when(F.col(c).isNotNull(), F.struct(F.col(f"{c}.p").alias("p"), F.col(f"{c}.kp").alias("kp"),
                                                      F.col(f"{c}.ko").alias("ko")))

    return last.join(img, keys, "left").select(
        *keys, F.when(F.col("_last._kind") == "delete", "delete").otherwise("upsert").alias("_op"),
        short("_rst").alias("_reset"), short("_lord").alias("_last_order"),
        F.coalesce("_img", F.create_map().cast("map<string,string>")).alias("_img"),
        F.coalesce("_ords", F.create_map().cast(f"map<string,{ORDER_TYPE}>")).alias("_ords"),
        F.col("_last._before").alias("_before"), F.col("_last._tomb").alias("_tomb"),
        *[F.col(f"_last.{c}").alias(c) for c in LAST_CHANGE_COLUMNS])


TOMBSTONE_SCHEMA = ("key array<string>, _cdc_position array<decimal(38,0)>, _cdc_kafka_partition int, "
                    "_cdc_kafka_offset bigint, _cdc_source_ts_ms bigint")


def tombstone_table(cfg: PipelineConfig, st: SourceTable) -> str:
    """Quoted name of the tombstone table of ``st``: ``<namespace>_tombstones.<silver name>``.

    Columns: key array<string> (primary-key values in canonical text), and the ``_cdc_*``
    position columns and source time (ms) of the delete.
    """
    return (f"{cfg.catalog.name}.{T.quote_ident(cfg.silver.namespace + '_tombstones')}."
            f"{T.quote_ident(st.silver_name)}")


def _ensure_tombstone_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable) -> str:
    ensure_namespace(spark, cfg, cfg.silver.namespace + "_tombstones")
    name = tombstone_table(cfg, st)
    location = table_location(cfg, cfg.silver.namespace + "_tombstones", st.silver_name)
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({TOMBSTONE_SCHEMA}) USING iceberg "
              f"LOCATION {T.sql_string(location)} "
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
    """The ``MERGE INTO`` statement applying a collapsed batch (view ``view``, :func:`collapse`) to ``name``.

    Column by column: a value from the batch replaces the silver value when it comes from a newer
    change than the silver value did (``_cdc_column_positions``, else the row's position), and
    neither counts when it is older than the latest reset of the key (``_cdc_reset`` or the
    batch's). So a late partial update still sets its columns unless a newer change set them, and
    a late insert fills only what newer updates did not set. A delete newer than everything in
    silver deletes the row (soft-delete mode: flags it). Every identifier is quoted; column names
    reach SQL only as quoted identifiers or string literals.
    """
    q, lit = T.quote_ident, T.sql_string
    on = " AND ".join(f"t.{q(k)} = {T.sql_cast(f's._k{i}', types[k])}" for i, k in enumerate(pk))
    t_last = "named_struct('p', t._cdc_position, 'kp', t._cdc_kafka_partition, 'ko', t._cdc_kafka_offset)"
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
    return (f"MERGE INTO {name} t USING {view} s ON {on} "
            f"{on_delete} "
            f"WHEN MATCHED THEN UPDATE SET {', '.join(sets)} "
            f"{not_matched} INSERT ({', '.join(insert_cols)}) VALUES ({', '.join(insert_vals)})")


def _new_table(cfg: PipelineConfig, st: SourceTable) -> dict:
    """Location and properties of the silver table of ``st`` when it is created."""
    return {"location": table_location(cfg, cfg.silver.namespace, st.silver_name),
            "properties": {SOURCE_TABLE_PROPERTY: st.identity()}}


def _check_owner(spark: "SparkSession", name: str, st: SourceTable) -> None:
    """Raise :class:`SilverError` when silver table ``name`` records another source table than ``st``.

    Only a name of :data:`MAX_NAME_CHARS` characters can be both a source table's own name and
    another's shortened one (:func:`short_name`); only those are looked at.
    """
    if len(st.silver_name) != MAX_NAME_CHARS or not _table_exists(spark, name):
        return
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {name}").collect()}
    owner = props.get(SOURCE_TABLE_PROPERTY)
    if owner is not None and owner != st.identity():
        raise SilverError(f"silver table {name} holds source table {owner}, not {st.identity()}: two source "
                          "tables have this silver name")


def apply_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, changes: "DataFrame",
                landed: Optional["DataFrame"] = None, history: bool = False) -> TableResult:
    """Merge one source table's changes (bronze rows) into its silver table.

    ``landed``: every landed bronze change of the table (all hours). With it, changes of a key
    that an earlier batch's key change moved are replayed with that key change
    (:func:`replay_rows`); with ``history`` too, the SCD type 2 history of the keys the changes
    touch is recomputed (:mod:`cdclake.history`). Raises :class:`SchemaChangeError` for an
    incompatible type change, :class:`SilverError` when the silver table's name belongs to another
    source table (:data:`SOURCE_TABLE_PROPERTY`); Spark errors propagate.
    """
    from pyspark.sql import functions as F

    ensure_namespace(spark, cfg, cfg.silver.namespace)
    st = resolve_legacy_name(st, lambda n: _table_exists(
        spark, f"{cfg.catalog.name}.{T.quote_ident(cfg.silver.namespace)}.{T.quote_ident(n)}"))
    name = silver_table(cfg, st)
    result = TableResult(table=name)
    _check_owner(spark, name, st)
    changes = materialize(changes)
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
        truncated_at = F.struct(F.lit(list(last_truncate[0])).cast("array<decimal(38,0)>").alias("source_position"),
                                F.lit(last_truncate[1]).cast("int").alias("kafka_partition"),
                                F.lit(last_truncate[2]).cast("bigint").alias("kafka_offset"))
        rows = rows.where(F.struct(*_ORDER[:3]) > truncated_at)
    if not rows.take(1):
        return result
    pk, types = batch_schema(rows, name)
    types = ensure_silver_table(spark, cfg, name, pk, types, result, **_new_table(cfg, st))
    hard = cfg.silver.delete_mode == "hard"
    keyed = keyed_rows(rows, pk)
    if hard:
        keyed = with_tombstones(spark, cfg, st, keyed, len(pk))
    keyed = materialize(keyed)
    extra = None
    had_key_changes = _has_key_changes(spark, name)  # only then can a late change sit under a merged one
    if landed is not None and had_key_changes:  # the same changes as the batch's: no truncate, none older than the last one
        replay_from = landed.where(F.col("op") != "truncate")
        if last_truncate is not None:
            replay_from = replay_from.where(F.struct(*_ORDER[:3]) > truncated_at)
        extra = replay_rows(spark, cfg, name, keyed, rows, replay_from, pk, types)
    if extra is not None:
        rows = materialize(rows.unionByName(extra))
        pk, types = batch_schema(rows, name)
        types = ensure_silver_table(spark, cfg, name, pk, types, result, **_new_table(cfg, st))
        keyed = keyed_rows(rows, pk)
        if hard:
            keyed = with_tombstones(spark, cfg, st, keyed, len(pk))
        keyed = materialize(keyed)
    moves = bool(keyed.where(F.col("_kind") == "move").take(1))
    if moves and not had_key_changes:
        spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ({T.sql_string(KEY_CHANGES_PROPERTY)}='true')")
    if moves:
        keyed = materialize(carry_over(spark, name, keyed, pk, types))
    src = collapse(keyed, len(pk)).where(~F.col("_tomb"))
    if last_truncate is not None:  # a truncate is a reset of every key
        at = F.struct(F.lit(list(last_truncate[0])).cast("array<decimal(38,0)>").alias("p"),
                      F.lit(last_truncate[1]).cast("int").alias("kp"),
                      F.lit(last_truncate[2]).cast("bigint").alias("ko"))
        src = src.withColumn("_reset", F.greatest(F.col("_reset"), at))
    src = materialize(src)
    counts = {r["_op"]: r["n"] for r in src.groupBy("_op").agg(F.count("*").alias("n")).collect()}
    result.upserts, result.deletes = int(counts.get("upsert", 0)), int(counts.get("delete", 0))
    view = "_cdc_merge_source"
    src.createOrReplaceTempView(view)
    spark.sql(merge_sql(cfg, name, view, pk, types))
    kill_point("silver.merged")
    if hard:
        record_tombstones(spark, cfg, st, view, len(pk))
    if history and landed is not None:
        from cdclake.history import apply_history

        result.history_versions = apply_history(spark, cfg, st.silver_name, rows, landed, pk, types, result)
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
    if cfg.silver.complete_transactions:
        from cdclake.transactions import complete_changes

        bronze, _held = complete_changes(spark, cfg, every, window, topics)
    else:
        bronze = every.where(window_filter(window, topics))
    results, errors = [], []
    for st, st_topics in source_tables(bronze, prefixes):
        same = (F.col("source_database").eqNullSafe(F.lit(st.database)) & F.col("source_schema").eqNullSafe(F.lit(st.schema))
                & (F.col("source_table") == F.lit(st.table)) & F.col("kafka_topic").isin(st_topics))
        try:
            results.append(apply_table(spark, cfg, st, bronze.where(same), every.where(same),
                                       history=bool(with_history & set(st_topics))))
        except Exception as exc:
            log.error("silver table for %s (topics %s) failed: %s", st, st_topics, describe(exc), exc_info=True)
            errors.append(f"{st} -> {st.silver_name}: {describe(exc)}")
    if errors:
        raise SilverError(f"{len(errors)} table(s) not merged: " + "; ".join(errors))
    return results
