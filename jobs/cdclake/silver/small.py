"""Silver for small batches without a Spark job per table: one pass reads every small table's
changes, and each table is collapsed, merged and committed in the driver.

A window of many tables with a few changes each spends its time in Spark's fixed costs (about
twenty small jobs per table: the collapse, the MERGE, the tombstone MERGE, their planning). Here
one Spark query reads the bronze rows of every table whose batch has at most
``silver.file_merge_max_changes`` changes (:func:`read_small_batches`, one job); then, per table,
in the driver:

1. the changes are keyed and collapsed as :func:`cdclake.silver.merge.collapse` does
   (:func:`cdclake.silver.rowmerge.collapse_rows`), with the key's recorded tombstones among its changes
   (:func:`cdclake.silver.keys.with_tombstones`);
2. the silver rows of the batch's keys are read from the files of their buckets, with their file
   and position (:meth:`cdclake.silver.files.TableFiles.read`);
3. each key is merged column by column exactly as :func:`cdclake.silver.merge.merge_sql`'s
   statement does (:func:`cdclake.silver.rowmerge.merge_row`), which stays the reference the tests compare with;
4. rows that changed are written: a table whose touched buckets hold at most
   ``silver.file_rewrite_max_rows`` rows has those buckets rewritten in one pyiceberg overwrite
   (:meth:`cdclake.silver.files.TableFiles.rewrite`); a larger one gets its new rows and the
   position deletes of the rows they replace in one Iceberg ``RowDelta``
   (:meth:`cdclake.silver.files.TableFiles.commit`). A rerun, whose rows come out as they are,
   commits nothing. Then the tombstones, in one rewrite of the tombstone table.

With at least ``silver.file_merge_task_tables`` such tables, steps 1 to 4 run in one Spark job
instead of driver threads (:func:`merge_in_tasks`): its Python workers, one per core, merge and
commit tables in parallel with pyiceberg, where driver threads would share one interpreter's
lock. A task leaves to the driver a table it would have to create or evolve, one without its
tombstone table and a position-delete commit (Spark's DDL, Iceberg's Java ``RowDelta``), before
writing anything. (In hard-delete mode the driver makes a table's tombstone table with the table,
not at its first delete, so that tasks take its later hours.)

A table this path does not take (a truncate, a key change, SCD2 history, a value it cannot
convert exactly as Spark's ``CAST`` would, a float or array column in the batch, changes without
a source position, a table not written by this pipeline's layout) raises
:class:`cdclake.errors.NotFileLevel` before anything is written, and is merged by Spark's MERGE
as before (:func:`cdclake.silver.apply_table`).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Optional

from cdclake import types as T
from cdclake.config import PipelineConfig
from cdclake.errors import NotFileLevel
from cdclake.faults import kill_point
from cdclake.lake import (KEY_CHANGES_PROPERTY, LAST_CHANGE_COLUMNS, META_COLUMNS, SOFT_DELETE_COLUMN, SourceTable,
                         ensure_tombstone_table, tombstone_namespace)
from cdclake.silver.rowmerge import collapse_rows, keyed_change, lazy_converter, merge_row, same_row, tombstone_change
from cdclake.results import TableResult
from cdclake.silver.files import FILE_COLUMN, POS_COLUMN, TableFiles
from cdclake.silver.snapshots import (NEWEST_TS_MS, commit_properties, commit_tag, pyiceberg_lineage, recorded,
                                      tag_max_age_ms)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

def silver_types(files: TableFiles) -> dict[str, str]:
    """Column → Spark SQL type of a table's schema (:func:`cdclake.types.spark_type` names);
    raises :class:`NotFileLevel` for a type the silver stage does not make."""
    from pyiceberg import types as it

    simple = {it.BooleanType: "boolean", it.IntegerType: "int", it.LongType: "bigint", it.FloatType: "float",
              it.DoubleType: "double", it.StringType: "string", it.BinaryType: "binary", it.DateType: "date",
              it.TimestamptzType: "timestamp", it.TimestampType: "timestamp_ntz"}

    def name(t) -> str:
        if type(t) in simple:
            return simple[type(t)]
        if isinstance(t, it.DecimalType):
            return f"decimal({t.precision},{t.scale})"
        if isinstance(t, it.ListType):
            return f"array<{name(t.element_type)}>"
        raise NotFileLevel(f"column type {t}")

    return {f.name: name(f.field_type) for f in files.schema.fields if not f.name.startswith("_cdc_")}


def needs_evolution(current: dict[str, str], types: dict[str, str]) -> bool:
    """Whether the batch's ``types`` add a column to, or widen one of, the table's ``current``
    types (:func:`cdclake.silver.tables.ensure_silver_table` then evolves it)."""
    for c, t in types.items():
        st = T.spark_type(t)
        if c not in current or T.widen(current[c], st) != current[c]:
            return True
    return False


def read_small_batches(spark: "SparkSession", bronze: "DataFrame",
                       tables: dict[SourceTable, list[str]]) -> dict[SourceTable, list[dict]]:
    """The bronze rows of each source table in ``tables`` (source table → its Kafka topics), in
    one Spark query read into the driver as Arrow: per table, dicts of ``op``, ``after``,
    ``before`` (dicts or None), ``source_position`` (list of Decimal), ``kafka_partition``,
    ``kafka_offset``, ``row_in_record`` and ``source_ts_ms`` (ms)."""
    from pyspark.sql import functions as F

    ids = [(i, st.database, st.schema, st.table, topic) for i, (st, topics) in enumerate(tables.items())
           for topic in topics]
    wanted = spark.createDataFrame(ids, "_tid int, _db string, _sc string, _tb string, _tp string")
    on = (F.col("source_database").eqNullSafe(F.col("_db")) & F.col("source_schema").eqNullSafe(F.col("_sc"))
          & (F.col("source_table") == F.col("_tb")) & (F.col("kafka_topic") == F.col("_tp")))
    cols = ["op", "after", "before", "source_position", "kafka_partition", "kafka_offset", "row_in_record",
            "source_ts_ms"]
    rows = bronze.join(F.broadcast(wanted), on).select("_tid", *cols)
    out: dict[SourceTable, list[dict]] = {st: [] for st in tables}
    order = list(tables)
    batches = rows._collect_as_arrow()
    for batch in batches:
        data = batch.to_pydict()
        for i in range(batch.num_rows):
            r = {c: data[c][i] for c in cols}
            for image in ("after", "before"):
                if r[image] is not None:
                    r[image] = dict(r[image])
            out[order[data["_tid"][i]]].append(r)
    return out


def _tombstones(spark: "SparkSession", cfg: PipelineConfig, pycat, st: SourceTable) -> Optional[TableFiles]:
    return TableFiles.load(spark, pycat, cfg.catalog.name, tombstone_namespace(cfg), st.silver_name)


def merge_small_table(spark: Optional["SparkSession"], cfg: PipelineConfig, pycat, st: SourceTable, name: str,
                      pk: list[str], types: dict[str, str], rows: list[dict], result: TableResult,
                      ensure_table: Callable[[], None], driver_pid: Optional[int] = None,
                      snapshot: Optional[dict] = None) -> TableResult:
    """Merge one source table's bronze ``rows`` (:func:`read_small_batches`) into its silver
    table ``name`` (quoted) at the file level; ``pk`` and ``types`` as the batch summary gives
    them; ``ensure_table`` creates or evolves the table with Spark
    (:func:`cdclake.silver.tables.ensure_silver_table`). Fills and returns ``result``.

    ``spark`` None (in a Spark task, :func:`merge_in_tasks`): what needs the driver's Spark (a
    table to create or evolve, a tombstone table to create, a position-delete commit) raises
    :class:`NotFileLevel` before anything is written; the kill point then stops ``driver_pid``.
    ``snapshot``: the batch's snapshot summary properties
    (:attr:`cdclake.silver.summary.BatchSummary.snapshot`), raised to the table's running maxima
    (:func:`cdclake.silver.snapshots.commit_properties`) and committed with the merge.
    Raises :class:`NotFileLevel` before writing anything when the batch or the table is one this
    path does not take; Iceberg's and Spark's errors propagate."""
    namespace = cfg.silver.namespace
    files = TableFiles.load(spark, pycat, cfg.catalog.name, namespace, st.silver_name)
    wanted_meta = set(META_COLUMNS) | ({SOFT_DELETE_COLUMN} if cfg.silver.delete_mode == "soft" else set())
    if (files is None or needs_evolution(silver_types(files), types)
            or not wanted_meta <= {f.name for f in files.schema.fields}):
        ensure_table()
        files = TableFiles.load(spark, pycat, cfg.catalog.name, namespace, st.silver_name)
    if files.property(KEY_CHANGES_PROPERTY) == "true":
        raise NotFileLevel("the table has merged key changes")
    if files.bucket_source != pk[0]:
        raise NotFileLevel("the table is not bucketed by its first key column")
    current = silver_types(files)
    conv = {c: lazy_converter(current[c]) for c in current}
    changes = [c for c in (keyed_change(r, pk) for r in rows) if c is not None]
    keys = {c["k"] for c in changes}
    hard = cfg.silver.delete_mode == "hard"
    tombs = _tombstones(spark, cfg, pycat, st) if hard else None
    if hard and tombs is None and spark is not None:
        # made with the table, not at its first delete: a task (no Spark) then merges its later hours
        ensure_tombstone_table(spark, cfg, st)
        tombs = _tombstones(spark, cfg, pycat, st)
    stored = {}
    if tombs is not None:
        for t in tombs.read().to_pylist():
            if not t["key"]:
                raise NotFileLevel("the table has a recorded truncate")
            stored[tuple(t["key"])] = t
        changes += [tombstone_change(stored[k]) for k in keys if k in stored]
    src = collapse_rows(changes)
    if spark is None and tombs is None and hard and any(s["op"] == "delete" for s in src):
        raise NotFileLevel("its tombstone table is created by the driver")
    typed = {}
    for s in src:
        k = tuple(conv[c](v) for c, v in zip(pk, s["k"]))
        if k in typed:
            raise NotFileLevel("two key texts of one key value")
        typed[k] = s
    touched = set(files.buckets_of([k[0] for k in typed]))
    existing = {}
    live = files.read(touched).to_pylist()
    for t in live:
        k = tuple(t[c] for c in pk)
        if k in typed:
            if k in existing:
                raise NotFileLevel("two silver rows of one key")
            existing[k] = t
    data_cols = [c for c in current if c not in pk]
    new_rows, replaced = [], set()
    for k, s in typed.items():
        t = existing.get(k)
        row = merge_row(t, s, pk, data_cols, conv, not hard)
        if t is not None:
            place = (t[FILE_COLUMN], t[POS_COLUMN])
            if row is not None:
                row = {c: v for c, v in row.items() if c not in (FILE_COLUMN, POS_COLUMN)}
                if same_row(row, t):
                    continue  # a rerun, a duplicate: nothing to write
            replaced.add(place)
        if row is not None:
            new_rows.append(row)
    props = commit_properties(snapshot, recorded(pyiceberg_lineage(files.table))) if snapshot else None
    if len(live) <= cfg.silver.file_rewrite_max_rows:
        if new_rows or replaced:
            kept = [{c: v for c, v in r.items() if c not in (FILE_COLUMN, POS_COLUMN)} for r in live
                    if (r[FILE_COLUMN], r[POS_COLUMN]) not in replaced]
            tag = commit_tag(cfg, props, iter(files.table.metadata.refs))
            if files.rewrite(kept + new_rows, "merge", props, tag, tag_max_age_ms(cfg)) and tag:
                result.hour_tag = tag
    else:
        files.commit(new_rows, replaced, "merge", props)
    result.silver_name = st.silver_name
    if props and NEWEST_TS_MS in props:
        result.newest_source_ts_ms = int(props[NEWEST_TS_MS])
    kill_point("silver.merged", driver_pid)
    result.upserts = sum(1 for s in src if s["op"] == "upsert")
    result.deletes = sum(1 for s in src if s["op"] == "delete")
    if hard and result.deletes:
        try:
            record_tombstones(spark, cfg, pycat, st, tombs, stored, [s for s in src if s["op"] == "delete"])
        except NotFileLevel as exc:  # silver is committed: a rerun of the window records them
            raise RuntimeError(f"recording tombstones at the file level: {exc}") from exc
    return result


def record_tombstones(spark: "SparkSession", cfg: PipelineConfig, pycat, st: SourceTable, tombs: Optional[TableFiles],
                      stored: dict[tuple, dict], deleted: list[dict]) -> None:
    """:func:`cdclake.silver.tables.record_tombstones` at the file level, in one commit that
    rewrites the tombstone table (:meth:`cdclake.silver.files.TableFiles.rewrite`): each deleted
    key's tombstone is inserted or, when newer than the recorded one, replaces it; then tombstones
    older than the retention (measured from the newest) are dropped."""
    if tombs is None:
        ensure_tombstone_table(spark, cfg, st)
        tombs = _tombstones(spark, cfg, pycat, st)
        stored = {}
    live = dict(stored)
    changed = False
    for s in deleted:
        last = dict(zip(LAST_CHANGE_COLUMNS, s["last"]))
        order = (tuple(last["_cdc_position"]), last["_cdc_kafka_partition"], last["_cdc_kafka_offset"])
        t = live.get(s["k"])
        if t is not None and not (tuple(t["_cdc_position"]), t["_cdc_kafka_partition"], t["_cdc_kafka_offset"]) < order:
            continue
        live[s["k"]] = {"key": list(s["k"]), **{c: last[c] for c in ("_cdc_position", "_cdc_kafka_partition",
                                                                     "_cdc_kafka_offset", "_cdc_source_ts_ms")}}
        changed = True
    ages = [t["_cdc_source_ts_ms"] for t in live.values() if t["_cdc_source_ts_ms"] is not None]
    if ages:
        cutoff = max(ages) - cfg.silver.tombstone_retention_hours * 3_600_000
        old = [k for k, t in live.items() if t["_cdc_source_ts_ms"] is not None and t["_cdc_source_ts_ms"] < cutoff]
        for k in old:
            del live[k]
        changed = changed or bool(old)
    if changed:
        tombs.rewrite([{c: v for c, v in t.items() if c not in (FILE_COLUMN, POS_COLUMN)} for t in live.values()],
                      "tombstones")


def small_batch(cfg: PipelineConfig, summary, history: bool) -> bool:
    """Whether a table's batch (its :class:`cdclake.silver.summary.BatchSummary`) is one the
    file-level merge may take: at most ``silver.file_merge_max_changes`` changes, none a truncate
    or a key change, every change under one primary key, no SCD2 history, merge-on-read tables."""
    return (0 < summary.rows <= cfg.silver.file_merge_max_changes and summary.changes == summary.rows
            and summary.moves is False and not history and cfg.silver.write_mode == "merge-on-read")


#: Tasks per core of :func:`merge_in_tasks`: tables are dealt to more tasks than cores, so that
#: a core whose tables finish early takes another task.
TASKS_PER_CORE = 4
_TASK_CATALOGS: dict = {}


def _task_catalog(cfg: PipelineConfig):
    """pyiceberg's catalog of ``cfg`` in this Python worker, opened once per worker process."""
    from cdclake.catalog import pyiceberg_catalog

    key = cfg.catalog.model_dump_json()
    if key not in _TASK_CATALOGS:
        _TASK_CATALOGS[key] = pyiceberg_catalog(cfg.catalog)
    return _TASK_CATALOGS[key]


def _driver_only() -> None:
    raise NotFileLevel("the table is created or evolved by the driver")


def merge_part(cfg: PipelineConfig, driver_pid: int, part: list[tuple]) -> list[tuple]:
    """In a Spark task: :func:`merge_small_table` for each ``(i, st, name, pk, types, snapshot, rows)`` of
    ``part``, without Spark (``spark`` None). Returns ``(i, TableResult or None, error or None)``
    per table: a result when merged; neither when it needs the driver or Spark's MERGE
    (:class:`NotFileLevel`, raised before anything is written); the error's line when it failed."""
    from cdclake.catalog import describe

    pycat = _task_catalog(cfg)
    out = []
    for i, st, name, pk, types, snapshot, rows in part:
        result = TableResult(table=name)
        try:
            out.append((i, merge_small_table(None, cfg, pycat, st, name, pk, types, rows, result, _driver_only,
                                             driver_pid, snapshot), None))
        except NotFileLevel:
            out.append((i, None, None))
        except Exception as exc:  # named in the driver's SilverError, as a driver thread's failure is
            out.append((i, None, describe(exc)))
    return out


def merge_in_tasks(spark: "SparkSession", cfg: PipelineConfig, work: list[tuple]) -> list[tuple]:
    """:func:`merge_part` over ``work`` (``(i, st, name, pk, types, snapshot, rows)`` per table) in one Spark
    job of up to :data:`TASKS_PER_CORE` tasks per core: Python workers merge and commit tables in
    parallel, where driver threads share one interpreter's lock. Tables are dealt to the tasks
    largest first. Returns :func:`merge_part`'s tuples, one per table."""
    import os

    sc = spark.sparkContext
    n = max(1, min(len(work), TASKS_PER_CORE * sc.defaultParallelism))
    order = sorted(work, key=lambda w: -len(w[-1]))
    parts = [order[j::n] for j in range(n)]
    pid = os.getpid()
    sc.setJobDescription(f"silver: file-level merge of {len(work)} tables")
    try:
        return sc.parallelize(parts, n).flatMap(lambda part: merge_part(cfg, pid, part)).collect()
    finally:
        sc.setJobDescription(None)


def merge_small_tables(spark: "SparkSession", cfg: PipelineConfig, bronze: "DataFrame", items: list,
                       merge_one: Callable, threads: int, prepare: Optional[Callable] = None) -> tuple[list, list]:
    """Merge the tables ``items`` (``(source table, batch summary)`` pairs whose batches are
    :func:`small_batch`) at the file level: their rows read by one query
    (:func:`read_small_batches`), then ``merge_one(st, summary, rows, pycat)`` for each (``pycat``:
    pyiceberg's catalog, one for the run) (the silver
    stage's wrapper of :func:`merge_small_table`, returning ``(TableResult or None, error line
    or None)``), ``threads`` at a time.

    With ``prepare`` (``st, summary -> (st, quoted name, pk, types)``, the silver stage's) and at
    least ``silver.file_merge_task_tables`` tables, they are merged in Spark tasks first
    (:func:`merge_in_tasks`); the tables a task leaves to the driver (a table to create or
    evolve, a position-delete commit) then go through ``merge_one``.

    Returns ``(done, rest)``: the outcomes of the tables merged or failed here, and the items
    this path did not take (:class:`NotFileLevel`), for Spark's MERGE."""
    if not items:
        return [], []
    from cdclake.catalog import pyiceberg_catalog

    batches = read_small_batches(spark, bronze, {st: summary.topics for st, summary in items})
    tasked: list = []
    least = cfg.silver.file_merge_task_tables
    if prepare is not None and least and len(items) >= least:
        work = []
        for i, (st, summary) in enumerate(items):
            try:
                work.append((i, *prepare(st, summary), summary.snapshot, batches[st]))
            except Exception:  # the driver's path meets it again and names it
                continue
        left = set(range(len(items)))
        for i, result, error in merge_in_tasks(spark, cfg, work):
            st, summary = items[i]
            if result is None and error is None:
                continue
            left.discard(i)
            if result is not None:
                result.changes, result.topics = summary.changes, list(summary.topics)
                log.info("silver %s: %d changes -> %d keys upserted, %d deleted (file level, in a Spark task)",
                         result.table, result.changes, result.upserts, result.deletes)
            else:
                log.error("silver table for %s (topics %s) failed in a Spark task: %s", st, summary.topics, error)
                error = f"{st} -> {st.silver_name}: {error}"
            tasked.append(((result, error), None))
        items = [items[i] for i in sorted(left)]
        if not items:
            return [d for d, _ in tasked], []
    pycat = pyiceberg_catalog(cfg.catalog)

    def one(item):
        st, summary = item
        try:
            return merge_one(st, summary, batches[st], pycat), None
        except NotFileLevel as exc:
            log.info("silver %s: merged with Spark (%s)", st, exc)
            return None, item

    try:
        if threads > 1 and len(items) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="silver-files") as pool:
                outcomes = list(pool.map(one, items))
        else:
            outcomes = [one(item) for item in items]
    finally:
        pycat.engine.dispose()
    outcomes = tasked + outcomes
    return [d for d, rest in outcomes if rest is None], [rest for _, rest in outcomes if rest is not None]
