"""Table maintenance: compaction, snapshot expiry, orphan files and retention, with Iceberg's own procedures.

:func:`maintain` is the daily maintenance of a pipeline (the ``cdc_<name>_maintenance`` DAG,
``jobs/maintenance.py``), configured by its ``maintenance`` section
(:class:`cdclake.config.MaintenanceConfig`). Merge-on-read silver tables gain position-delete
files with every MERGE, and every table gains a snapshot per run; it runs, in order:

1. retention: ``DELETE`` of the pipeline's topics' landed hours older than
   ``raw_retention_hours`` from ``raw.kafka_records`` and older than ``bronze_retention_hours``
   from ``bronze.changes``, ``bronze.quarantine`` and ``bronze.control_events`` (None: kept
   forever). Never silver, history or tombstone tables; nor the offset ledger
   (``raw.land_manifest``), which land needs;
2. ``rewrite_data_files`` (when ``rewrite_data_files``) on the silver, history, tombstone and
   bronze tables: files of a partition are compacted when there are two or more, and every data
   file with a delete file is rewritten with its deletes applied;
3. ``rewrite_position_delete_files`` on the merge-on-read silver, history and tombstone tables:
   compacts the position deletes left and drops those whose data files are gone;
4. ``remove_hourly_tags`` on the silver tables: the hourly tags ``cdc-<YYYYMMDDHH>``
   (:mod:`cdclake.silver.snapshots`) whose hour ended more than ``hourly_tag_retention_hours``
   ago (None: none removed), so that their snapshots can expire;
5. ``expire_snapshots`` on every table above and the raw tables: snapshots older than
   ``snapshot_retention_hours``, keeping the ``retain_last_snapshots`` latest; a snapshot a
   retained hourly tag references is kept (Iceberg keeps every referenced snapshot);
6. ``remove_orphan_files`` (:func:`remove_orphan_files`'s procedure) on the same tables, for files
   older than ``orphan_file_age_hours`` (at least 24).

Orphan files: a write killed before its commit (an out-of-memory kill, a lost node, SIGKILL at a
:mod:`cdclake.faults` point) leaves the data and manifest files it had written in the table's
directory, referenced by no snapshot. Its rerun writes the data again, so the table is right, but
the files stay: :func:`remove_orphan_files` deletes them with Iceberg's own orphan-file removal.

It must only run when no write is in flight on those tables: a running write's files are not
referenced by any snapshot yet and look exactly like orphans until it commits. Two guards:

- ``older_than``: only files last modified before it are candidates. A file older than the
  longest write can take cannot belong to a write in flight; Iceberg's default is three days and
  its procedure refuses less than 24 hours.
- the writer lock (:mod:`cdclake.locks`): while it runs, it holds the lock of the pipeline's
  topics and of every topic of the other pipeline files (``$CDC_PIPELINES_DIR``) on the same
  catalog, so that no stage run of those pipelines writes meanwhile. The raw and bronze tables
  are shared by every pipeline of a catalog: a writer outside those files (another pipelines
  directory on the same catalog) is not kept out, so an ``older_than`` under the longest write is
  safe only when no such writer runs.

:func:`maintain` holds the same lock (stage ``maintenance``) for all its steps: compaction and
snapshot expiry commit to the tables too.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from cdclake.config import PipelineConfig
from cdclake.window import UTC

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The shortest interval Iceberg's ``remove_orphan_files`` procedure accepts.
PROCEDURE_MIN_AGE = dt.timedelta(hours=24)


def catalog_topics(cfg: PipelineConfig) -> list[str]:
    """``cfg``'s topics and those of every other pipeline file on the same catalog (name and URI), sorted.

    Pipeline files that do not load are skipped with a warning.
    """
    from cdclake.config import load_pipeline, pipelines_dir
    from cdclake.errors import ConfigError

    topics = set(cfg.topics())
    for f in sorted(pipelines_dir().glob("*.y*ml")):
        try:
            other = load_pipeline(f)
        except ConfigError as exc:
            log.warning("remove_orphan_files: skipping pipeline file %s: %s", f, exc)
            continue
        if (other.catalog.name, other.catalog.uri) == (cfg.catalog.name, cfg.catalog.uri):
            topics.update(other.topics())
    return sorted(topics)


def remove_orphan_files(spark: "SparkSession", cfg: PipelineConfig, tables: Iterable["str | tuple[str, str]"],
                        older_than: dt.datetime, lock_topics: Optional[Iterable[str]] = None) -> dict[str, list[str]]:
    """Delete the files under each table's location that no snapshot of it references.

    ``tables``: tables of ``cfg``'s catalog, as ``"<namespace>.<table>"`` (split at the first dot,
    e.g. ``raw.kafka_records``) or ``(namespace, table)``;
    ``older_than``: an aware datetime, only files last modified before it are removed (see the
    module docstring: it must only run when no write is in flight on those tables).
    ``lock_topics``: the topics whose writer lock is held meanwhile (default
    :func:`catalog_topics`). Returns ``{"<namespace>.<table>": [removed file locations]}``.

    Runs Iceberg's ``CALL <catalog>.system.remove_orphan_files(table => ..., older_than => TIMESTAMP
    ...)`` when ``older_than`` is at least 24 hours ago. Iceberg's procedure refuses a shorter
    interval, so for one (after a killed run, to clean up at once) it runs the same Iceberg action
    (``SparkActions.deleteOrphanFiles(table).olderThan(ms)``) through the JVM. Raises
    ``ValueError`` for a naive ``older_than``, :class:`cdclake.locks.WriterLockBusy` when a writer
    holds one of the topics past ``locks.wait_s``; Spark errors propagate.
    """
    from cdclake.locks import WriterLock

    if older_than.tzinfo is None:
        raise ValueError("older_than must be timezone-aware (UTC)")
    older_than = older_than.astimezone(UTC)
    tables = [_parts(t) for t in tables]
    out: dict[str, list[str]] = {}
    with WriterLock(cfg, "remove_orphan_files", topics=list(lock_topics) if lock_topics is not None
                    else catalog_topics(cfg)):
        for parts in tables:
            removed = out[".".join(parts)] = _remove_orphans(spark, cfg, parts, older_than)
            log.info("remove_orphan_files %s: %d file(s) older than %s removed", ".".join(parts), len(removed),
                     older_than.isoformat())
    return out


def _parts(table: "str | tuple[str, str]") -> tuple[str, str]:
    """``(namespace, table)`` of ``"<namespace>.<table>"`` (split at the first dot) or of a pair."""
    return tuple(table.split(".", 1)) if isinstance(table, str) else tuple(table)


def _ident(parts: tuple[str, str]) -> str:
    """The quoted ``namespace.table`` (without the catalog) of ``parts``."""
    from cdclake.types import quote_ident

    return ".".join(quote_ident(p) for p in parts)


def _remove_orphans(spark: "SparkSession", cfg: PipelineConfig, parts: tuple[str, str],
                    older_than: dt.datetime) -> list[str]:
    """Remove one table's orphan files last modified before ``older_than`` (aware, UTC); the caller
    holds the writer lock. Returns the removed file locations."""
    from cdclake.types import sql_string

    ident = _ident(parts)
    if dt.datetime.now(UTC) - older_than < PROCEDURE_MIN_AGE:
        jvm = spark.sparkContext._jvm
        tbl = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            spark._jsparkSession, f"{cfg.catalog.name}.{ident}")
        res = (jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
               .deleteOrphanFiles(tbl).olderThan(int(older_than.timestamp() * 1000)).execute())
        removed = [str(x) for x in res.orphanFileLocations()]
    else:
        rows = spark.sql(f"CALL {cfg.catalog.name}.system.remove_orphan_files(table => {sql_string(ident)}, "
                         f"older_than => {_timestamp(older_than)})").collect()
        removed = [r["orphan_file_location"] for r in rows]
    return removed


def _timestamp(t: dt.datetime) -> str:
    """A Spark SQL ``TIMESTAMP`` literal of aware ``t`` in UTC (the sessions' time zone)."""
    return f"TIMESTAMP '{t.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S.%f')}'"


#: Tables whose landed hours ``maintenance.raw_retention_hours`` removes.
RAW_RETENTION_TABLES = ("raw.kafka_records",)
#: Tables whose landed hours ``maintenance.bronze_retention_hours`` removes.
BRONZE_RETENTION_TABLES = ("bronze.changes", "bronze.quarantine", "bronze.control_events")
#: ``rewrite_data_files`` options: compact a partition's files when it has two or more; rewrite
#: every data file that has a delete file (its deletes applied) and drop the deletes left dangling.
#: The new files take the commit's sequence number (not the rewrite's starting one), so that the
#: position deletes of the last commit before the rewrite are older than every file they could
#: apply to and go as dangling too. That is safe because no writer commits meanwhile (the
#: writer lock).
REWRITE_DATA_OPTIONS = {"min-input-files": "2", "delete-file-threshold": "1", "remove-dangling-deletes": "true",
                        "use-starting-sequence-number": "false"}
#: Table properties of which one set to ``merge-on-read`` gives a table position-delete files.
_MOR_PROPERTIES = ("write.delete.mode", "write.update.mode", "write.merge.mode")


def namespace_tables(spark: "SparkSession", cfg: PipelineConfig, namespace: str) -> list[tuple[str, str]]:
    """``[(namespace, table)]`` of every table in ``namespace`` of ``cfg``'s catalog (``SHOW
    TABLES``), sorted; empty when the namespace does not exist."""
    from cdclake.types import quote_ident

    cat = cfg.catalog.name
    if namespace not in {r[0] for r in spark.sql(f"SHOW NAMESPACES IN {cat}").collect()}:
        return []
    rows = spark.sql(f"SHOW TABLES IN {cat}.{quote_ident(namespace)}").collect()
    return sorted((namespace, r["tableName"]) for r in rows if not r["isTemporary"])


def maintained_tables(spark: "SparkSession", cfg: PipelineConfig) -> dict[str, list[tuple[str, str]]]:
    """The tables :func:`maintain` works on, by kind, each as ``(namespace, table)``.

    ``silver``, ``history``, ``tombstones``: every table of the namespaces ``silver.namespace``,
    ``<namespace>_history`` and ``<namespace>_tombstones`` (a namespace shared by several
    pipelines of the catalog: theirs too); ``bronze``: the existing tables of namespace
    ``bronze``; ``raw``: of namespace ``raw``.
    """
    from cdclake.lake import history_namespace, tombstone_namespace

    return {"silver": namespace_tables(spark, cfg, cfg.silver.namespace),
            "history": namespace_tables(spark, cfg, history_namespace(cfg)),
            "tombstones": namespace_tables(spark, cfg, tombstone_namespace(cfg)),
            "bronze": namespace_tables(spark, cfg, "bronze"),
            "raw": namespace_tables(spark, cfg, "raw")}


def _merge_on_read(spark: "SparkSession", cfg: PipelineConfig, parts: tuple[str, str]) -> bool:
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {cfg.catalog.name}.{_ident(parts)}").collect()}
    return any(props.get(k) == "merge-on-read" for k in _MOR_PROPERTIES)


def _call(spark: "SparkSession", cfg: PipelineConfig, procedure: str, parts: tuple[str, str], args: str = "") -> dict:
    """Run ``CALL <catalog>.system.<procedure>(table => '<ns>.<table>'[, args])``; its first output row as a dict."""
    from cdclake.types import sql_string

    rows = spark.sql(f"CALL {cfg.catalog.name}.system.{procedure}(table => {sql_string(_ident(parts))}"
                     f"{', ' + args if args else ''})").collect()
    return rows[0].asDict() if rows else {}


def _step(out: list[dict], parts: tuple[str, str], procedure: str, run: Callable[[], dict]) -> None:
    """Run one step, log it and append ``{"table", "procedure", **result, "duration_s"}`` to ``out``."""
    started = time.monotonic()
    result = run()
    step = {"table": ".".join(parts), "procedure": procedure, **result,
            "duration_s": round(time.monotonic() - started, 3)}
    log.info("maintenance %s %s: %s", step["table"], procedure,
             ", ".join(f"{k} {v}" for k, v in step.items() if k not in ("table", "procedure")))
    out.append(step)


def _retention(spark: "SparkSession", cfg: PipelineConfig, parts: tuple[str, str], cutoff: dt.datetime) -> dict:
    """Delete the rows of ``cfg``'s topics landed before hour ``cutoff``; ``{"cutoff", "rows_deleted"}``."""
    from cdclake.types import sql_string

    name = f"{cfg.catalog.name}.{_ident(parts)}"
    where = (f"kafka_topic IN ({', '.join(sql_string(t) for t in cfg.topics())}) "
             f"AND landed_hour < {_timestamp(cutoff)}")
    n = spark.sql(f"SELECT count(*) AS n FROM {name} WHERE {where}").collect()[0]["n"]
    if n:  # whole hour partitions of the topics: Iceberg drops their files without rewriting any
        spark.sql(f"DELETE FROM {name} WHERE {where}")
    return {"cutoff": cutoff.isoformat(), "rows_deleted": int(n)}


def _topics_filter(cfg: PipelineConfig) -> str:
    """``'kafka_topic IN (...)'`` of ``cfg``'s topics as a SQL string literal (a procedure's ``where``)."""
    from cdclake.types import sql_string

    return sql_string(f"kafka_topic IN ({', '.join(sql_string(t) for t in cfg.topics())})")


def maintain(spark: "SparkSession", cfg: PipelineConfig, now: Optional[dt.datetime] = None) -> list[dict]:
    """Run the daily maintenance of ``cfg``'s tables (the module docstring lists the steps) and
    return one dict per step, in the order run.

    ``now``: the time the cutoffs are counted from (aware; default the current time, UTC). Each
    step is ``{"table": "<namespace>.<table>", "procedure": ..., **result}``, logged as it ends;
    ``procedure`` and its result:

    - ``delete`` (retention): ``cutoff`` (ISO-8601 hour: rows with ``landed_hour`` before it were
      deleted, for ``cfg``'s topics only), ``rows_deleted``;
    - ``rewrite_data_files`` (of the bronze hour tables, only the partitions of ``cfg``'s
      topics): Iceberg's output, ``rewritten_data_files_count``,
      ``added_data_files_count``, ``rewritten_bytes_count``, ``failed_data_files_count``,
      ``removed_delete_files_count``;
    - ``rewrite_position_delete_files``: ``rewritten_delete_files_count``,
      ``added_delete_files_count``, ``rewritten_bytes_count``, ``added_bytes_count``;
    - ``expire_snapshots``: ``deleted_data_files_count``, ``deleted_position_delete_files_count``,
      ``deleted_equality_delete_files_count``, ``deleted_manifest_files_count``,
      ``deleted_manifest_lists_count``, ``deleted_statistics_files_count`` (files deleted with
      the expired snapshots);
    - ``remove_orphan_files``: ``orphan_files_removed``;
    - ``remove_hourly_tags``: ``tags_removed`` (their names, oldest first);

    and ``duration_s``, the step's seconds.

    Retention cutoffs are whole hours: ``landed_hour < floor_hour(now - <retention hours>)``, so
    only whole hour partitions go. Snapshot expiry: ``older_than => now -
    snapshot_retention_hours``, ``retain_last => retain_last_snapshots``. Hourly tags: those whose
    hour ends at or before ``now - hourly_tag_retention_hours``. Orphan files: those last
    modified before ``now - orphan_file_age_hours`` and at least 24 hours before the current time.

    Holds the writer lock of :func:`catalog_topics` (stage ``maintenance``) throughout. Raises
    ``ValueError`` for a naive ``now``, :class:`cdclake.locks.WriterLockBusy` when a stage run
    holds one of the topics past ``locks.wait_s``, :class:`cdclake.errors.WriterLockLost`; Spark
    errors of a procedure propagate (the steps before it are done).
    """
    from cdclake.locks import WriterLock

    m = cfg.maintenance
    wall = dt.datetime.now(UTC)
    now = wall if now is None else now
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    now = now.astimezone(UTC)
    hour = lambda t: t.replace(minute=0, second=0, microsecond=0)  # noqa: E731
    out: list[dict] = []
    with WriterLock(cfg, "maintenance", topics=catalog_topics(cfg)):
        tables = maintained_tables(spark, cfg)
        mor = [t for kind in ("silver", "history", "tombstones") for t in tables[kind] if _merge_on_read(spark, cfg, t)]
        for hours, names in ((m.raw_retention_hours, RAW_RETENTION_TABLES),
                             (m.bronze_retention_hours, BRONZE_RETENTION_TABLES)):
            if hours is None:
                continue
            cutoff = hour(now - dt.timedelta(hours=hours))
            for parts in (_parts(n) for n in names):
                if parts in tables["raw"] + tables["bronze"]:
                    _step(out, parts, "delete", lambda: _retention(spark, cfg, parts, cutoff))
        if m.rewrite_data_files:
            options = ", ".join(f"'{k}', '{v}'" for k, v in REWRITE_DATA_OPTIONS.items())
            mine = _topics_filter(cfg)
            for parts in tables["silver"] + tables["history"] + tables["tombstones"] + tables["bronze"]:
                # the bronze hour tables are shared by every pipeline of the catalog: only this
                # pipeline's topics' partitions are compacted (Iceberg's `where`)
                where = f", where => {mine}" if ".".join(parts) in BRONZE_RETENTION_TABLES else ""
                _step(out, parts, "rewrite_data_files",
                      lambda: _call(spark, cfg, "rewrite_data_files", parts, f"options => map({options}){where}"))
        for parts in mor:
            _step(out, parts, "rewrite_position_delete_files",
                  lambda: _call(spark, cfg, "rewrite_position_delete_files", parts))
        if m.hourly_tag_retention_hours is not None:
            from cdclake.silver.snapshots import remove_hour_tags

            tags_before = now - dt.timedelta(hours=m.hourly_tag_retention_hours)
            for parts in tables["silver"]:
                _step(out, parts, "remove_hourly_tags",
                      lambda: {"tags_removed": remove_hour_tags(spark, cfg, *parts, tags_before)})
        every = [t for kind in ("silver", "history", "tombstones", "bronze", "raw") for t in tables[kind]]
        expire = (f"older_than => {_timestamp(now - dt.timedelta(hours=m.snapshot_retention_hours))}, "
                  f"retain_last => {m.retain_last_snapshots}")
        for parts in every:
            _step(out, parts, "expire_snapshots", lambda: _call(spark, cfg, "expire_snapshots", parts, expire))
        orphans_before = min(now - dt.timedelta(hours=m.orphan_file_age_hours), wall - PROCEDURE_MIN_AGE)
        for parts in every:
            _step(out, parts, "remove_orphan_files",
                  lambda: {"orphan_files_removed": len(_remove_orphans(spark, cfg, parts, orphans_before))})
    return out
