"""Run metrics: what each run of a stage landed, parsed, quarantined and merged, per topic.

After a stage succeeds, its entry point (:func:`cdclake.cli.run_stage`) appends one row per topic
(silver: per topic and silver table) to ``bronze.run_metrics`` (:data:`cdclake.lake.RUN_METRICS_SCHEMA`)
and logs the same figures, one line per row. Columns: run_at timestamp (UTC, when the stage
finished), pipeline string, stage string, kafka_topic string, window_start and window_end
timestamp, records_landed bigint (land), records_parsed, change_rows, quarantined, control bigint
(normalize), silver_table string, changes_merged, keys_upserted, keys_deleted bigint (silver),
newest_source_ts timestamp and lag_s double (seconds from it to run_at; normalize: the topic's
newest change in the window; silver: the table's freshness, the newest source commit time applied
to it so far as its silver commit recorded it, else the topic's as for normalize),
duration_s double (seconds the stage ran), future_stamped bigint (land: records stamped more than
``land.max_future_skew_s`` after they were read). Columns that do not apply to a stage are null.
The figures are read from the stage's result (:class:`cdclake.results.StageResult`: each result
type lists its own rows and figures), never from the stage's name.

The table is only appended to: a rerun of a window adds rows, told apart by ``run_at``. Writing
the metrics never fails a stage (:func:`record_run` logs a warning instead).
"""
from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Optional

from cdclake.catalog import describe, pyiceberg_catalog, qualified, with_retries
from cdclake.config import PipelineConfig
from cdclake.lake import BRONZE_TABLE, RUN_METRICS_SCHEMA, RUN_METRICS_TABLE, ensure_run_metrics_table, window_filter
from cdclake.results import StageResult
from cdclake.window import UTC, Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

#: The columns of a run metrics row, in table order.
METRIC_COLUMNS = list(RUN_METRICS_SCHEMA.names)


def newest_source_ts(spark: "SparkSession", cfg: PipelineConfig, window: Window,
                     topics: list[str]) -> dict[str, Optional[dt.datetime]]:
    """``{topic: newest source commit time (UTC) of the window's bronze changes}``: the maximum
    ``source_ts_ms`` of each topic's rows of ``bronze.changes`` in ``window`` (None: no change
    carries one). One aggregation of one column of the window's bronze files."""
    from pyspark.sql import functions as F

    out: dict[str, Optional[dt.datetime]] = {t: None for t in topics}
    rows = (spark.table(qualified(cfg, BRONZE_TABLE)).where(window_filter(window, topics))
            .groupBy("kafka_topic").agg(F.max("source_ts_ms").alias("newest")).collect())
    for r in rows:
        if r["newest"] is not None:
            out[r["kafka_topic"]] = dt.datetime.fromtimestamp(r["newest"] / 1000, UTC)
    return out


def metric_rows(cfg: PipelineConfig, stage: str, window: Window, result: StageResult, run_at: dt.datetime,
                duration_s: float, newest: Optional[dict[str, Optional[dt.datetime]]] = None) -> list[dict]:
    """The run metrics rows (dicts of :data:`METRIC_COLUMNS`) of one stage run.

    ``result``: what the stage returned, a :class:`cdclake.results.StageResult`
    (:class:`~cdclake.results.LandResult`, :class:`~cdclake.results.NormalizeResult`,
    :class:`~cdclake.results.SilverResult`), whose ``metric_values`` over the window's topics give
    the rows and each row's own figures (the type's docstring says which); the other figures of a
    row are null. ``stage``: the value of the ``stage`` column. ``run_at``: when the stage finished
    (aware, UTC); ``duration_s``: seconds it ran; ``newest``: ``{topic: newest source commit
    time}`` (:func:`newest_source_ts`), from which ``lag_s`` = seconds to ``run_at``; a row whose
    figures carry their own ``newest_source_ts`` (a silver table's freshness) takes that instead.
    Raises TypeError for a result that is not a stage result.
    """
    if not isinstance(result, StageResult):
        raise TypeError(f"no run metrics for stage {stage!r} in a {type(result).__name__}")
    topics = list(window.topics or cfg.topics())
    newest = newest or {}

    def row(topic: str, figures: dict) -> dict:
        figures = dict(figures)
        ts = figures.pop("newest_source_ts", None) or newest.get(topic)
        out = dict.fromkeys(METRIC_COLUMNS)
        out.update(run_at=run_at, pipeline=cfg.name, stage=stage, kafka_topic=topic, window_start=window.start,
                   window_end=window.end, duration_s=float(duration_s), newest_source_ts=ts,
                   lag_s=None if ts is None else (run_at - ts).total_seconds(), **figures)
        return out

    return [row(topic, figures) for topic, figures in result.metric_values(topics)]


def log_line(row: dict) -> str:
    """One log line of a run metrics row: stage, topic, window, then every figure that is not null."""
    figures = ", ".join(f"{k}={row[k]:.3f}" if isinstance(row[k], float) else
                        f"{k}={row[k].isoformat() if isinstance(row[k], dt.datetime) else row[k]}"
                        for k in METRIC_COLUMNS[6:] if row[k] is not None)
    return (f"run metrics: {row['stage']} topic {row['kafka_topic']} window {row['window_start'].isoformat()}.."
            f"{row['window_end'].isoformat()}: {figures}")


def write_metrics(spark: "SparkSession", cfg: PipelineConfig, rows: list[dict]) -> None:
    """Append ``rows`` (:func:`metric_rows`) to ``bronze.run_metrics``, created when missing: one commit.

    The few rows are written with pyiceberg, not Spark: a Spark write costs a stage job about two
    seconds of a cold JVM for one small file. A commit that another run's commit got in before is
    tried again on the new snapshot, as a locked catalog database is
    (:func:`cdclake.catalog.with_retries`).
    """
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException

    ensure_run_metrics_table(spark, cfg)
    if not rows:
        return
    cat = pyiceberg_catalog(cfg.catalog)

    def append() -> None:
        table = cat.load_table(RUN_METRICS_TABLE)
        schema = table.schema().as_arrow()
        table.append(pa.Table.from_pylist([{c: r[c] for c in METRIC_COLUMNS} for r in rows], schema=schema))

    try:
        with_retries(append, cfg.catalog, "writing run metrics", transient=(CommitFailedException,))
    finally:
        cat.engine.dispose()


def record_run(spark: "SparkSession", cfg: PipelineConfig, stage: str, window: Window, result: StageResult,
               duration_s: float, run_at: Optional[dt.datetime] = None) -> Optional[list[dict]]:
    """Log and append the run metrics of a stage that succeeded (:func:`metric_rows`); return the rows.

    The lag is read from the window's bronze changes (:func:`newest_source_ts`) when the result's
    ``lag_from_bronze`` says so (normalize, silver). ``run_at`` defaults to now (UTC). Never
    raises: any failure (a result that is not a stage result, reading the lag, writing the table)
    is logged as a warning and returns None; rows already logged stay logged.
    """
    run_at = run_at or dt.datetime.now(UTC)
    try:
        topics = list(window.topics or cfg.topics())
        newest = newest_source_ts(spark, cfg, window, topics) if getattr(result, "lag_from_bronze", False) else None
        rows = metric_rows(cfg, stage, window, result, run_at, duration_s, newest)
        for r in rows:
            log.info("%s", log_line(r))
        write_metrics(spark, cfg, rows)
        return rows
    except Exception as exc:
        log.warning("run metrics of %s for %s not recorded: %s", stage, window, describe(exc))
        return None
