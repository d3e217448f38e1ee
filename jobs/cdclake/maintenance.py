"""Table maintenance: remove the files a killed write left behind.

A write killed before its commit (an out-of-memory kill, a lost node, SIGKILL at a
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
"""
from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Iterable, Optional

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
    from cdclake.types import quote_ident, sql_string

    if older_than.tzinfo is None:
        raise ValueError("older_than must be timezone-aware (UTC)")
    older_than = older_than.astimezone(UTC)
    tables = list(tables)
    recent = dt.datetime.now(UTC) - older_than < PROCEDURE_MIN_AGE
    out: dict[str, list[str]] = {}
    with WriterLock(cfg, "remove_orphan_files", topics=list(lock_topics) if lock_topics is not None
                    else catalog_topics(cfg)):
        for table in tables:
            parts = tuple(table.split(".", 1)) if isinstance(table, str) else tuple(table)
            table = ".".join(parts)
            ident = ".".join(quote_ident(p) for p in parts)
            if recent:
                jvm = spark.sparkContext._jvm
                tbl = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
                    spark._jsparkSession, f"{cfg.catalog.name}.{ident}")
                res = (jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)
                       .deleteOrphanFiles(tbl).olderThan(int(older_than.timestamp() * 1000)).execute())
                removed = [str(x) for x in res.orphanFileLocations()]
            else:
                stamp = older_than.strftime("%Y-%m-%d %H:%M:%S.%f")
                rows = spark.sql(f"CALL {cfg.catalog.name}.system.remove_orphan_files(table => {sql_string(ident)}, "
                                 f"older_than => TIMESTAMP '{stamp}')").collect()
                removed = [r["orphan_file_location"] for r in rows]
            out[table] = removed
            log.info("remove_orphan_files %s: %d file(s) older than %s removed", table, len(removed),
                     older_than.isoformat())
    return out
