"""Stage 3, silver: order, deduplicate and MERGE each source table's changes into an Iceberg table.

One aggregation of the window's bronze rows lists its source tables and tells, for each, its
change count, latest truncate, primary key, column types and column order
(:func:`cdclake.silver.summary.summarize_batch`). Then, for every source table (``silver.parallel_tables``
of them at the same time, each by its own driver thread):

1. Changes are keyed by the primary key (a delete by its before image, others by the after
   image; an update that changes the key, a *move*, also deletes the old key) and ordered by
   ``(source_position, kafka_partition, kafka_offset, row_in_record)``: the source's own order,
   arrival order only to break ties (:mod:`cdclake.silver.order`). A move's after image is
   completed with the old row's other columns (:func:`cdclake.silver.keys.carry_over`), as the
   source moves the whole row, along chains of moves too. A change of a key older than a move of
   that key merged by an earlier batch arrives late: the landed changes of the keys on the move's
   chain are replayed with the batch (:func:`cdclake.silver.keys.replay_rows`), so the late change
   reaches the key the row lives under now.
2. Each key's changes collapse into one (:func:`cdclake.silver.merge.collapse`): the latest
   change decides delete or upsert; the latest insert, snapshot, delete, move, tombstone or
   truncate is the key's *reset*; the image is built column by column from the latest change
   since the reset carrying each column, and remembers which change that was. A key whose latest
   change is a reset, or carries the columns of every image of the key (full row images), takes
   its image from that change alone; only the others are collapsed column by column.
3. One ``MERGE INTO`` per table applies the result column by column
   (:func:`cdclake.silver.merge.merge_sql`). Every silver row carries the order of its latest
   change (``_cdc_position``, ``_cdc_kafka_partition``, ``_cdc_kafka_offset``), of its latest
   reset (``_cdc_reset``) and of every column whose value came from an older change
   (``_cdc_column_positions``; a null entry: no change since the reset set it). A value replaces
   the silver value only when it comes from a newer change, and neither counts when older than
   the latest reset. So duplicates and reruns change nothing, a partial update arriving late
   still sets its columns unless a newer change set them, and a late insert fills only what newer
   updates left unset.
   A truncate deletes every row older than it and is remembered (the tombstone with an empty key),
   so later batches drop changes older than it too. In hard-delete mode every delete also leaves a
   tombstone (:func:`cdclake.silver.tables.record_tombstones`), which later batches read back as a
   reset of its key (:func:`cdclake.silver.keys.with_tombstones`), so a rerun of an earlier hour
   cannot bring a deleted row back.

Silver tables live in ``<catalog>.<silver.namespace>`` and are named
``<table_prefix><database>__<schema>__<table>`` (missing parts left out), shortened to 255
characters when longer (:mod:`cdclake.lake`: :class:`cdclake.lake.SourceTable`). Tombstone and
history tables take the silver table's name in their own namespaces. New tables record their
source table in the property ``cdc.source-table`` (JSON ``[prefix, database, schema, table]``); a
255-character name held by another source table stops the table (:class:`SilverError`) instead of
mixing two tables' rows.

Names from messages (database, schema, table, column) are accepted as :mod:`cdclake.names` says,
reach SQL only quoted (``quote_ident``, ``sql_string``) and never become paths: every table this
module creates (silver, tombstones, history) gets an explicit location
``<warehouse>/<namespace>/<slug>-<hash>`` (:func:`cdclake.lake.table_location`), its partition
field is named ``_cdc_bucket``, and its key columns are stored as JSON in
``cdc.primary-key-columns`` (beside the comma-joined ``cdc.primary-key``). Tables created before
keep their names and locations.

Tables are created on first sight with typed columns (``cdclake.types``), bucketed by the first
key column, Iceberg format 2, merge-on-read by default. New columns are added; types evolve only
by Iceberg's promotions (int → bigint, float → double, decimal(P,S) → decimal(P',S) with P' > P;
:func:`cdclake.types.widen`) and a narrower type keeps the silver one; any other type change (a
decimal scale change, bigint → string ...) stops that table with :class:`SchemaChangeError`, naming
table, column and both types, while other tables proceed (:mod:`cdclake.silver.tables`). Columns
whose names start with ``_cdc_`` are reserved.

With ``sources[].history``, the SCD type 2 history of the keys a window touches is recomputed
beside silver (:mod:`cdclake.silver.history`); with ``silver.complete_transactions``, changes of
incomplete transactions are held back (:mod:`cdclake.silver.transactions`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Optional

from cdclake.catalog import describe, ensure_namespace, materialize, qualified
from cdclake.config import PipelineConfig
from cdclake.errors import NotFileLevel, SchemaChangeError, SilverError
from cdclake.lake import BRONZE_TABLE, SHAPES_TABLE, SourceTable, silver_table, table_exists, tombstone_table, window_filter
from cdclake.results import SilverResult, TableResult
from cdclake.silver.history import apply_history
from cdclake.silver.keys import carry_over, keyed_rows_with_moves, replay_rows, with_tombstones
from cdclake.silver.merge import merge_into, merge_source, merge_view
from cdclake.silver.small import merge_small_table, merge_small_tables, small_batch
from cdclake.silver.snapshots import (NEWEST_TS_MS, batch_properties, commit_properties, java_lineage, java_table,
                                      ledger_end_offsets, recorded, spark_commit_properties, tag_tables)
from cdclake.silver.summary import BatchSummary, batch_schema, summarize_batch
from cdclake.silver.tables import (after_truncate, apply_truncates, ensure_silver_table, has_key_changes,
                                   mark_key_changes, new_table_options, open_silver_table, record_tombstones)
from cdclake.silver.transactions import complete_changes
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SchemaChangeError", "SilverError", "SilverResult", "SourceTable", "TableResult", "apply_table",
           "build_silver", "ensure_silver_table", "silver_table", "tombstone_table"]

log = logging.getLogger(__name__)


def _keyed_batch(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, name: str, rows: "DataFrame",
                 result: TableResult, schema: Optional[tuple[list[str], dict[str, str]]] = None,
                 reread: bool = False, moves: Optional[bool] = None) -> tuple[list[str], dict[str, str], "DataFrame", bool]:
    """``(pk, types, keyed, moved)`` of a batch's bronze ``rows``: its key and column types
    (``schema``, else :func:`cdclake.silver.summary.batch_schema` of ``rows``), with silver table
    ``name`` created or evolved to hold them; its rows keyed (:func:`cdclake.silver.keys.keyed_rows`;
    in hard-delete mode with the recorded tombstones of its keys); whether they hold a key change
    (:func:`cdclake.silver.keys.keyed_rows_with_moves`).

    ``keyed`` is computed once when it has a key change or ``reread`` (it is read again, by
    :func:`cdclake.silver.keys.replay_rows`); otherwise its tombstones are joined in by the one
    query that reads it, the collapse. ``moves``: whether ``rows`` hold a key change under their
    key, when the batch summary knows it (:attr:`cdclake.silver.summary.BatchSummary.moves`);
    False spares computing the keyed rows before the collapse (and asking them).
    """
    pk, types = schema or batch_schema(rows, name)
    types = ensure_silver_table(spark, cfg, name, pk, types, result, **new_table_options(cfg, st))
    keyed, moved = keyed_rows_with_moves(rows, pk, None if reread else moves)
    if cfg.silver.delete_mode == "hard":
        keyed = with_tombstones(spark, cfg, st, keyed, len(pk))
        if moved or reread:
            keyed = materialize(keyed)
    return pk, types, keyed, moved


def apply_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, changes: "DataFrame",
                landed: Optional["DataFrame"] = None, history: bool = False,
                summary: Optional[BatchSummary] = None) -> TableResult:
    """Merge one source table's changes (bronze rows) into its silver table.

    ``landed``: every landed bronze change of the table (all hours). With it, changes of a key
    that an earlier batch's key change moved are replayed with that key change
    (:func:`cdclake.silver.keys.replay_rows`); with ``history`` too, the SCD type 2 history of the
    keys the changes touch is recomputed (:mod:`cdclake.silver.history`). ``summary``: what
    :func:`cdclake.silver.summary.summarize_batch` says of ``changes`` (computed here when not
    given). Raises :class:`SchemaChangeError` for an incompatible type change,
    :class:`SilverError` when the silver table's name belongs to another source table
    (:data:`cdclake.lake.SOURCE_TABLE_PROPERTY`); Spark errors propagate.
    """
    st, name = open_silver_table(spark, cfg, st)
    result = TableResult(table=name, silver_name=st.silver_name)
    if summary is None:
        summary = next(iter(summarize_batch(changes).values()), BatchSummary())
    result.changes, result.topics = summary.changes, list(summary.topics)
    truncated_at = apply_truncates(spark, cfg, st, name, summary.truncate, result)  # this batch's or an earlier one
    rows = after_truncate(changes, truncated_at)
    if truncated_at is None:  # the summary's rows are the batch's rows
        if not summary.rows:
            return result
        schema = summary.schema(name)
    else:
        rows = materialize(rows)
        if not rows.take(1):
            return result
        schema = None
    new_table = not table_exists(spark, name)  # created for this batch: its MERGE is an INSERT
    # only a table with a merged key change can have a late change sit under it
    had_key_changes = not new_table and has_key_changes(spark, name)
    replay = landed is not None and had_key_changes
    pk, types, keyed, moved = _keyed_batch(spark, cfg, st, name, rows, result, schema, reread=replay,
                                           moves=summary.moves if truncated_at is None else None)
    if replay:
        extra = replay_rows(spark, cfg, name, keyed, rows, after_truncate(landed, truncated_at), pk, types)
        if extra is not None:
            rows = materialize(rows.unionByName(extra))
            pk, types, keyed, moved = _keyed_batch(spark, cfg, st, name, rows, result)
    if moved:
        if not had_key_changes:
            mark_key_changes(spark, name)
        keyed = materialize(carry_over(spark, name, keyed, pk, types))
    src = merge_source(keyed, len(pk), truncated_at, list(types), by_column=summary.partial)
    props = None
    if summary.snapshot:  # the MERGE's commit records the window (cdclake.silver.snapshots)
        jt = java_table(spark, cfg, cfg.silver.namespace, st.silver_name)
        props = commit_properties(summary.snapshot, recorded(java_lineage(jt)) if jt is not None else None)
        result.newest_source_ts_ms = int(props[NEWEST_TS_MS]) if NEWEST_TS_MS in props else None
    with spark_commit_properties(spark, props or {}):
        counts = merge_into(spark, cfg, name, src, pk, types, into_empty=new_table)
    result.upserts, result.deletes = counts["upsert"], counts["delete"]
    if cfg.silver.delete_mode == "hard" and result.deletes:
        record_tombstones(spark, cfg, st, merge_view(name), len(pk))
    spark.catalog.dropTempView(merge_view(name))
    if history and landed is not None:
        result.history_versions = apply_history(spark, cfg, st.silver_name, rows, landed, pk, types, result)
    log.info("silver %s: %d changes -> %d keys upserted, %d deleted%s", name, result.changes, result.upserts,
             result.deletes, " (truncated)" if result.truncated else "")
    return result


def apply_small_table(spark: "SparkSession", cfg: PipelineConfig, st: SourceTable, summary: BatchSummary,
                      rows: list[dict], pycat) -> TableResult:
    """:func:`apply_table` for a small batch at the file level (:mod:`cdclake.silver.small`):
    ``rows`` are the table's bronze rows as :func:`cdclake.silver.small.read_small_batches` reads
    them, ``pycat`` pyiceberg's catalog, ``summary`` what :func:`cdclake.silver.summary.summarize_batch` says of them. Raises
    :class:`cdclake.errors.NotFileLevel` before writing anything for a batch or table that path
    does not take; otherwise as :func:`apply_table`."""
    st, name = open_silver_table(spark, cfg, st, namespace_ready=True)
    result = TableResult(table=name)
    result.changes, result.topics = summary.changes, list(summary.topics)
    pk, types = summary.schema(name)
    merge_small_table(spark, cfg, pycat, st, name, pk, types, rows, result,
                      lambda: ensure_silver_table(spark, cfg, name, pk, types, result, **new_table_options(cfg, st)),
                      snapshot=summary.snapshot)
    log.info("silver %s: %d changes -> %d keys upserted, %d deleted (file level)", name, result.changes,
             result.upserts, result.deletes)
    return result


def build_silver(spark: "SparkSession", cfg: PipelineConfig, window: Window) -> SilverResult:
    """Merge the window's bronze changes of the selected topics into silver, table by table:
    ``silver.parallel_tables`` tables at a time, each by a driver thread of its own, whose Spark
    jobs run beside the other tables' (a table's steps touch only its own silver, tombstone and
    history tables and temporary views; source tables of one silver name are merged in turn).
    Returns a :class:`cdclake.results.SilverResult`: one :class:`TableResult` per merged table, in
    the order of :func:`cdclake.silver.summary.summarize_batch` (grouped by silver name).

    Each table's commit records the window, the ledger's end offsets and the newest source
    position and time applied in its snapshot summary, and each table the window changed is
    tagged ``cdc-<YYYYMMDDHH>`` of the window's last hour (``silver.hourly_tags``;
    :mod:`cdclake.silver.snapshots`).

    Raises :class:`SilverError` listing the tables that failed, after all others are merged.
    """
    from pyspark.sql import functions as F

    topics = list(window.topics or cfg.topics())
    prefixes = {s.topic: s.table_prefix for s in cfg.sources}
    with_history = {s.topic for s in cfg.sources if s.history}
    every = spark.table(qualified(cfg, BRONZE_TABLE))
    if cfg.silver.complete_transactions:
        bronze, _held = complete_changes(spark, cfg, every, window, topics)
    else:
        bronze = every.where(window_filter(window, topics))

    def one(st: SourceTable, summary: BatchSummary) -> tuple[Optional[TableResult], Optional[str]]:
        st_topics = summary.topics
        same = (F.col("source_database").eqNullSafe(F.lit(st.database)) & F.col("source_schema").eqNullSafe(F.lit(st.schema))
                & (F.col("source_table") == F.lit(st.table)) & F.col("kafka_topic").isin(st_topics))
        try:
            return apply_table(spark, cfg, st, bronze.where(same), every.where(same),
                               history=bool(with_history & set(st_topics)), summary=summary), None
        except Exception as exc:
            log.error("silver table for %s (topics %s) failed: %s", st, st_topics, describe(exc), exc_info=True)
            return None, f"{st} -> {st.silver_name}: {describe(exc)}"

    # source tables whose silver names are equal (names shortened to 255 characters) are merged
    # one after the other, by one thread: the first creates the table, the next finds it taken
    groups: dict[str, list] = {}
    summaries = summarize_batch(bronze, prefixes, qualified(cfg, SHAPES_TABLE))
    ends = ledger_end_offsets(cfg, window, topics) if summaries else {}
    for st, summary in summaries.items():
        summary.snapshot = batch_properties(window, summary.topics, ends, summary.newest_position, summary.newest_ts_ms)
        groups.setdefault(st.silver_name, []).append((st, summary))
    # small batches first, at the file level (tables it does not take go on to Spark's MERGE)
    small = [g[0] for g in groups.values() if len(g) == 1
             and small_batch(cfg, g[0][1], bool(with_history & set(g[0][1].topics)))]

    def one_small(st: SourceTable, summary: BatchSummary, rows: list, pycat) -> tuple[Optional[TableResult], Optional[str]]:
        try:
            return apply_small_table(spark, cfg, st, summary, rows, pycat), None
        except NotFileLevel:
            raise
        except Exception as exc:
            log.error("silver table for %s (topics %s) failed: %s", st, summary.topics, describe(exc), exc_info=True)
            return None, f"{st} -> {st.silver_name}: {describe(exc)}"

    if small:
        ensure_namespace(spark, cfg, cfg.silver.namespace)
    def prepare(st: SourceTable, summary: BatchSummary) -> tuple:
        st, name = open_silver_table(spark, cfg, st, namespace_ready=True)
        return (st, name, *summary.schema(name))

    first, rest = merge_small_tables(spark, cfg, bronze, small, one_small, cfg.silver.parallel_tables, prepare)
    taken = {st.silver_name for st, _ in small} - {st.silver_name for st, _ in rest}
    groups = {k: g for k, g in groups.items() if k not in taken}

    def in_turn(group: list) -> list:
        return [one(st, summary) for st, summary in group]

    if cfg.silver.parallel_tables > 1 and len(groups) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(cfg.silver.parallel_tables, len(groups)), thread_name_prefix="silver") as pool:
            done = [d for ds in pool.map(in_turn, groups.values()) for d in ds]
    else:
        done = [d for group in groups.values() for d in in_turn(group)]
    done = first + done
    errors = [e for _, e in done if e is not None]
    if errors:
        raise SilverError(f"{len(errors)} table(s) not merged: " + "; ".join(errors))
    results = tuple(r for r, _ in done if r is not None)
    if cfg.silver.hourly_tags:
        tag_tables(spark, cfg, sorted({r.silver_name for r in results if r.changes and r.silver_name and not r.hour_tag}), window)
    return SilverResult(results)
