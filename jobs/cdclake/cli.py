"""Shared command line of the stage jobs: ``--pipeline FILE --start ISO --end ISO [--topics a,b]``
(the maintenance job: ``--pipeline FILE``).

Exit codes (:func:`cdclake.errors.exit_code`): 0 done; 2 bad input (config, window, catalog
directory); 1 the stage failed (broker unreachable, landed records gone from Kafka, tables not
merged, gate failed, another run holds the writer lock of a topic past ``locks.wait_s``, the catalog
database stayed locked). Errors print one line ``error: <cause>`` on stderr (the traceback of an
unexpected one goes to the log before it).

The writing stages (land, normalize, silver) hold the writer lock of their topics
(:mod:`cdclake.locks`) from before the Spark session starts until the stage ends. After a stage
succeeds, its run metrics are appended to ``bronze.run_metrics`` (:mod:`cdclake.metrics`).
"""
from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from typing import Callable, Optional

from cdclake.catalog import describe
from cdclake.config import PipelineConfig, load_pipeline
from cdclake.errors import KafkaUnavailable, exit_code, expected, task_error, task_failure
from cdclake.window import Window, make_window

log = logging.getLogger("cdclake")


#: Jobs that run over a pipeline's tables, not over an hour window: ``--pipeline FILE`` (and,
#: for ``reconcile``, ``--table NAME``, repeatable).
WINDOWLESS = ("maintenance", "reconcile")


def parse_args(stage: str, argv: list[str]) -> argparse.Namespace:
    if stage in WINDOWLESS:
        p = argparse.ArgumentParser(prog=f"{stage}.py", description=f"Run the {stage} job of a CDC pipeline.")
        p.add_argument("--pipeline", required=True, help="pipeline YAML file")
        if stage == "reconcile":
            p.add_argument("--table", action="append", default=[],
                           help="silver table (in silver.namespace) to reconcile; repeatable (default: "
                                "reconcile.tables, else every silver table)")
        return p.parse_args(argv)
    p = argparse.ArgumentParser(prog=f"{stage}.py", description=f"Run the {stage} stage of a CDC pipeline for an hour window.")
    p.add_argument("--pipeline", required=True, help="pipeline YAML file")
    p.add_argument("--start", required=True, help="window start, ISO-8601 hour (UTC), e.g. 2024-01-01T00:00:00Z")
    p.add_argument("--end", required=True, help="window end (exclusive), ISO-8601 hour (UTC)")
    p.add_argument("--topics", default="", help="comma-separated subset of the pipeline's topics (default: all)")
    return p.parse_args(argv)


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "great_expectations", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def load(args: argparse.Namespace) -> tuple[PipelineConfig, Optional[Window]]:
    """The pipeline and the window of the arguments (None for a job of :data:`WINDOWLESS`)."""
    cfg = load_pipeline(args.pipeline)
    if not hasattr(args, "start"):
        return cfg, None
    return cfg, make_window(args.start, args.end, args.topics, known_topics=cfg.topics())


def main(stage: str, run: Callable[[PipelineConfig, Optional[Window]], object], argv: list[str] | None = None) -> int:
    """Parse arguments, run ``run(cfg, window)``, map errors to a one-line message and exit code.

    A job of :data:`WINDOWLESS` (``maintenance``) takes ``--pipeline`` only and gets ``window`` None.

    For a writing stage (:data:`cdclake.locks.WRITING_STAGES`) ``run`` runs inside the writer lock
    of the window's topics; a busy or lost lock exits 1 with ``error: <the lock's message>``.
    """
    from cdclake.catalog import check_catalog
    from cdclake.locks import WRITING_STAGES, writer_lock

    setup_logging()
    args = parse_args(stage, sys.argv[1:] if argv is None else argv)
    try:
        cfg, window = load(args)
        if getattr(args, "table", None):
            run = functools.partial(run, tables=list(args.table))
        check_catalog(cfg.catalog)
        log.info("%s: pipeline %s, window %s, topics %s", stage, cfg.name, window if window is not None else "-",
                 list((window.topics if window is not None else None) or cfg.topics()))
        if stage in WRITING_STAGES:
            with writer_lock(cfg, stage, window):
                result = run(cfg, window)
        else:
            result = run(cfg, window)
        log.info("%s done: %s", stage, result)
        return 0
    except Exception as exc:
        if expected(exc):
            print(f"error: {exc}", file=sys.stderr)
            return exit_code(exc)
        log.error("stage %s failed", stage, exc_info=True)
        unavailable = task_error(exc, KafkaUnavailable)  # raised in a Spark task reading Kafka
        if unavailable is not None:
            print(f"error: cannot read Kafka at {cfg.kafka.bootstrap_servers}: {unavailable}", file=sys.stderr)
        else:
            print(f"error: {stage} failed: {task_failure(exc) or describe(exc)}", file=sys.stderr)
        return exit_code(exc)


def run_stage(spark, stage: str, fn: Callable, cfg: PipelineConfig, window: Window):
    """Run the library stage ``fn(spark, cfg, window)`` and return what it returns (its result type
    of :mod:`cdclake.results`); once it has succeeded, log and append its run metrics
    (:func:`cdclake.metrics.record_run`: one row per topic in ``bronze.run_metrics``, ``duration_s``
    the stage's seconds) in the same session. A failure to record the metrics is a logged warning,
    never the stage's failure."""
    from cdclake.metrics import record_run

    started = time.monotonic()
    result = fn(spark, cfg, window)
    record_run(spark, cfg, stage, window, result, time.monotonic() - started)
    return result


def spark_stage(stage: str, fn: Callable) -> Callable[[PipelineConfig, Window], object]:
    """Wrap a library stage ``fn(spark, cfg, window)`` so it gets the pipeline's Spark session and
    records its run metrics (:func:`run_stage`)."""

    def run(cfg: PipelineConfig, window: Window):
        from cdclake.catalog import spark_session

        spark = spark_session(cfg, app_name=f"cdc-{cfg.name}-{stage}")
        try:
            return run_stage(spark, stage, fn, cfg, window)
        finally:
            spark.stop()

    return run


def maintenance_job() -> Callable[[PipelineConfig, Optional[Window]], object]:
    """The run of ``jobs/maintenance.py``: :func:`cdclake.maintenance.maintain` of the pipeline in
    its own Spark session (no window, no run metrics); returns the steps' dicts."""

    def run(cfg: PipelineConfig, window: Optional[Window] = None):
        from cdclake.catalog import spark_session
        from cdclake.maintenance import maintain

        spark = spark_session(cfg, app_name=f"cdc-{cfg.name}-maintenance")
        try:
            steps = maintain(spark, cfg)
        finally:
            spark.stop()
        return f"{len(steps)} step(s)"

    return run


def reconcile_job() -> Callable[..., object]:
    """The run of ``jobs/reconcile.py`` and ``python -m cdclake reconcile``:
    :func:`cdclake.reconcile.reconcile` of the pipeline's tables (``tables``: the ``--table``
    arguments, else ``reconcile.tables``, else every silver table) in its own Spark session.
    Drift raises :class:`cdclake.errors.DriftFound`: exit 1 with ``error: drift found: ...``."""

    def run(cfg: PipelineConfig, window: Optional[Window] = None, tables: Optional[list[str]] = None):
        from cdclake.catalog import spark_session
        from cdclake.reconcile import reconcile

        spark = spark_session(cfg, app_name=f"cdc-{cfg.name}-reconcile")
        try:
            results = reconcile(spark, cfg, tables)
        finally:
            spark.stop()
        return "; ".join(f"{r.silver_table} {r.status}" for r in results) or "no silver tables"

    return run
