"""Shared command line of the stage jobs: ``--pipeline FILE --start ISO --end ISO [--topics a,b]``.

Exit codes: 0 done; 2 bad input (config, window, catalog directory); 1 the stage failed
(broker unreachable, landed records gone from Kafka, tables not merged, gate failed). Errors print one line
``error: <cause>`` on stderr (the traceback goes to the log before it).
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable

from cdclake.catalog import describe
from cdclake.config import ConfigError, PipelineConfig, load_pipeline
from cdclake.window import Window, WindowError, make_window

log = logging.getLogger("cdclake")


def parse_args(stage: str, argv: list[str]) -> argparse.Namespace:
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


def load(args: argparse.Namespace) -> tuple[PipelineConfig, Window]:
    cfg = load_pipeline(args.pipeline)
    return cfg, make_window(args.start, args.end, args.topics, known_topics=cfg.topics())


def main(stage: str, run: Callable[[PipelineConfig, Window], object], argv: list[str] | None = None) -> int:
    """Parse arguments, run ``run(cfg, window)``, map errors to a one-line message and exit code."""
    from cdclake.catalog import check_catalog
    from cdclake.kafka_ranges import KafkaUnavailable
    from cdclake.land import LandingShrinks

    setup_logging()
    args = parse_args(stage, sys.argv[1:] if argv is None else argv)
    try:
        cfg, window = load(args)
        check_catalog(cfg.catalog)
        log.info("%s: pipeline %s, window %s, topics %s", stage, cfg.name, window, list(window.topics or cfg.topics()))
        result = run(cfg, window)
        log.info("%s done: %s", stage, result)
        return 0
    except (ConfigError, WindowError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KafkaUnavailable, LandingShrinks) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        log.error("stage %s failed", stage, exc_info=True)
        print(f"error: {stage} failed: {describe(exc)}", file=sys.stderr)
        return 1


def spark_stage(stage: str, fn: Callable) -> Callable[[PipelineConfig, Window], object]:
    """Wrap a library stage ``fn(spark, cfg, window)`` so it gets the pipeline's Spark session."""

    def run(cfg: PipelineConfig, window: Window):
        from cdclake.catalog import spark_session

        spark = spark_session(cfg, app_name=f"cdc-{cfg.name}-{stage}")
        try:
            return fn(spark, cfg, window)
        finally:
            spark.stop()

    return run
