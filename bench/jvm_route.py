"""The JVM parse route against today's Python route, on the benchmark's hour, in one Spark session.

    PYTHONPATH=jobs:. CDC_STATE_DIR=/tmp/x .venv/bin/python -m bench.jvm_route [--events N] [--formats dbz,canal]
        [--out bench/results/<date>-jvm-route.json]

For each format: the hour is generated, produced and landed as ``python -m bench.run`` does it
(:func:`bench.run.generate`, :func:`bench.run.produce`, :func:`cdclake.land.land` on the window
of the format's topic, after a warm-up hour through every format); then, ``--rounds`` times in
turn, today's ``normalize`` (:func:`cdclake.normalize.normalize`: the Python workers parse and
write bronze, quarantine and control, the driver commits them) and the JVM route
(:mod:`bench.jvm_dbz`, :mod:`bench.jvm_canal`: Spark SQL over the same raw rows, the rows it
cannot render exactly parsed by the same Python parser, everything written as Parquet); then
Spark's ``from_json`` reference (:func:`bench.pipeline.run_from_json` for Debezium,
:func:`canal_from_json` for Canal). Both routes' bronze rows are compared record by record in
Spark (:func:`bench.jvm_common.compare`). Wall times in seconds; each route's figure is the
least of its rounds (every round is kept). Writes the results JSON and prints a table.
"""
from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Optional

from bench import data as bdata
from bench import pipeline, report
from bench import run as brun
from bench.sampler import RssSampler

log = logging.getLogger("bench")
FORMATS = ("dbz", "canal")
HOUR = dt.timedelta(hours=1)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m bench.jvm_route", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000, help="row changes in the measured hour")
    p.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: dbz, canal")
    p.add_argument("--out", default=None, help="results JSON (default bench/results/<today>-jvm-route.json)")
    p.add_argument("--rounds", type=int, default=2, help="timed runs of each route, alternating (default 2)")
    p.add_argument("--warmup-events", type=int, default=5_000, help="row changes of the warm-up hour (0: none)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--driver-memory", default="3g")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--gen-jobs", type=int, default=2)
    args = p.parse_args(argv)
    args.formats = [t.strip() for t in args.formats.split(",") if t.strip()]
    if not args.formats or any(t not in FORMATS for t in args.formats):
        p.error(f"--formats: any of {','.join(FORMATS)}")
    args.out = Path(args.out or brun.BENCH_DIR / "results" / f"{dt.date.today().isoformat()}-jvm-route.json")
    return args


def canal_from_json(spark, cfg, sampler: RssSampler, window, topic: str, work: Path, parts: int = 4) -> dict:
    """Time Spark's ``from_json`` of the Canal hour's messages into flat columns, one row per row
    of ``data`` (:func:`bench.jvm_canal.from_json_columns`), written to Parquet; the values first
    copied (not timed) from the raw table into ``parts`` Parquet files, as
    :func:`bench.pipeline.run_from_json` does for Debezium. Returns ``{"pipeline": figures}``."""
    from pyspark.sql import functions as F

    from bench.jvm_canal import from_json_columns
    from cdclake.catalog import qualified
    from cdclake.lake import RAW_TABLE, window_filter

    copy, target = work / "in_canal", work / "out_canal"
    (spark.table(qualified(cfg, RAW_TABLE)).where(window_filter(window, [topic])).where(F.col("value").isNotNull())
     .select("value").repartition(parts).write.mode("overwrite").parquet(str(copy)))
    values = spark.read.parquet(str(copy)).select("value")
    n = values.count()
    with sampler.span("from_json/canal") as s:
        from_json_columns(values).write.mode("overwrite").parquet(str(target))
    out = {"pipeline": pipeline.figures(s, n, input_tasks=values.rdd.getNumPartitions())}
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    return out


def jvm_route(spark, cfg, tag: str, window, work: Path):
    """One run of the JVM route of ``tag`` over ``window``'s raw rows, output under ``work``:
    the route's :class:`bench.jvm_common.RouteStats`."""
    from bench import jvm_canal, jvm_dbz
    from cdclake.catalog import qualified
    from cdclake.formats import get_parser
    from cdclake.lake import RAW_TABLE, window_filter

    topic = window.topics[0]
    src = cfg.source(topic)
    opts = src.parser_options()
    if any(opts.get(k) for k in ("primary_key", "primary_keys", "column_types")):
        raise RuntimeError(f"{topic}: the JVM route reads no configured keys or column types")
    parser = get_parser(src.format, opts)
    raw = spark.read.table(qualified(cfg, RAW_TABLE)).where(window_filter(window, [topic]))
    module = jvm_dbz if tag == "dbz" else jvm_canal
    return module.route(spark, raw, parser, work, cfg.normalize.max_value_bytes)


def timed(sampler: RssSampler, spark, label: str, fn):
    """``(seconds, result)`` of ``fn()`` after :func:`bench.pipeline.release_memory`, under a span."""
    pipeline.release_memory(spark)
    with sampler.span(label) as s:
        out = fn()
    return round(s.wall_s, 2), out


def measure(spark, cfg, sampler: RssSampler, tag: str, window, work: Path, rounds: int) -> dict:
    """Both routes ``rounds`` times in turn over the landed window, then the comparison."""
    from bench.jvm_common import compare, route_bronze
    from cdclake.catalog import qualified
    from cdclake.lake import BRONZE_TABLE, window_filter
    from cdclake.normalize import normalize

    topic = window.topics[0]
    out: dict = {"python_route_rounds_s": [], "jvm_route_rounds_s": []}
    for i in range(rounds):
        s, result = timed(sampler, spark, f"{tag}/python_route/{i}", lambda: normalize(spark, cfg, window))
        out["python_route_rounds_s"].append(s)
        out["python_counts"] = pipeline._counts("normalize", result, [topic])
        log.info("%s round %d: Python route %.1f s %s", tag, i + 1, s, out["python_counts"])
        s, stats = timed(sampler, spark, f"{tag}/jvm_route/{i}", lambda: jvm_route(spark, cfg, tag, window, work))
        out["jvm_route_rounds_s"].append(s)
        out["jvm_counts"] = stats.as_dict()
        log.info("%s round %d: JVM route %.1f s %s", tag, i + 1, s,
                 {k: v for k, v in stats.as_dict().items() if k != "groups"})
    out["python_route_s"], out["jvm_route_s"] = min(out["python_route_rounds_s"]), min(out["jvm_route_rounds_s"])
    python_rows = spark.read.table(qualified(cfg, BRONZE_TABLE)).where(window_filter(window, [topic]))
    out["check"] = compare(python_rows, route_bronze(spark, work))
    out["control_equal"] = out["python_counts"].get("control") == out["jvm_counts"]["fallback_control"]
    return out


def run_format(spark, cfg, sampler, state: Path, bootstrap: str, summary: dict, tag: str, start: dt.datetime,
               args, warm: bool = False) -> dict:
    """Produce and land ``tag``'s hour, then measure (warm-up: one round each, no check, no figure
    kept but the land). Returns the format's figures."""
    from cdclake.land import land
    from cdclake.window import Window

    topic = pipeline.topic_of(tag, warm)
    window = Window(start, start + HOUR, (topic,))
    p = brun.produce(state, bootstrap, topic, summary, tag)
    s, landed = timed(sampler, spark, f"{tag}/land", lambda: land(spark, cfg, window))
    bdata.delete_topics(bootstrap, [topic])
    out = {"topic": topic, "kafka_records": p["messages"], "land_s": s,
           "landed": int(landed.get(topic, 0)) if hasattr(landed, "get") else None}
    work = state / "jvm_route" / (("warm_" if warm else "") + tag)
    if warm:
        from cdclake.normalize import normalize

        timed(sampler, spark, f"warm/{tag}/python_route", lambda: normalize(spark, cfg, window))
        timed(sampler, spark, f"warm/{tag}/jvm_route", lambda: jvm_route(spark, cfg, tag, window, work))
        shutil.rmtree(work, ignore_errors=True)
        return out
    out.update(measure(spark, cfg, sampler, tag, window, work, args.rounds))
    from cdclake.catalog import qualified
    from cdclake.lake import RAW_TABLE, window_filter

    out["raw_read_tasks"] = spark.read.table(qualified(cfg, RAW_TABLE)).where(window_filter(window, [topic])) \
        .rdd.getNumPartitions()
    shutil.rmtree(work, ignore_errors=True)
    fj_work = state / "from_json"
    if tag == "dbz":
        payload = Path(summary["cache"]) / bdata.PAYLOAD_FILE
        fj = pipeline.run_from_json(spark, cfg, sampler, start, fj_work / "hour", payload)
    else:
        fj = canal_from_json(spark, cfg, sampler, window, topic, fj_work)
    shutil.rmtree(fj_work, ignore_errors=True)
    out["from_json"] = fj
    out["from_json_s"] = fj["pipeline"]["wall_s"]
    out["ratio_jvm_to_python"] = round(out["jvm_route_s"] / out["python_route_s"], 2)
    return out


def table(results: dict) -> str:
    """The printed summary: one line per format."""
    head = (f"{'format':<8}{'python s':>10}{'JVM s':>9}{'JVM/Py':>8}{'from_json s':>13}{'rows':>10}"
            f"{'to Python':>11}{'equal':>7}{'mismatches':>12}")
    lines = [head]
    for tag, r in results["formats"].items():
        if "error" in r:
            lines.append(f"{tag:<8}error: {r['error'][:100]}")
            continue
        c = r["check"]
        lines.append(f"{tag:<8}{r['python_route_s']:>10.1f}{r['jvm_route_s']:>9.1f}{r['ratio_jvm_to_python']:>8.2f}"
                     f"{r['from_json_s']:>13.1f}{c['python_rows']:>10,}{r['jvm_counts']['fallback_records']:>11,}"
                     f"{str(c['equal']).lower():>7}{c['only_python'] + c['only_jvm']:>12,}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    """Run the measurement (see the module docstring); exit code 1 when a format failed."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "pyiceberg", "cdclake"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    state = brun.bench_state_dir()
    os.environ["CDC_STATE_DIR"] = str(state)
    state.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    results: dict = {"date": dt.date.today().isoformat(),
                     "command": " ".join(["python", "-m", "bench.jvm_route"] + sys.argv[1:]),
                     "machine": report.machine(),
                     "config": {"events": args.events, "formats": args.formats, "rounds": args.rounds,
                                "seed": args.seed, "master": args.master, "driver_memory": args.driver_memory,
                                "warmup_events": args.warmup_events},
                     "formats": {}, "errors": []}
    brun.reset_lake(state)
    bootstrap, broker_pid = brun.broker_up(state)
    tags = list(args.formats)
    render = tags + ([bdata.PAYLOAD_TAG] if "dbz" in tags else [])
    summary = brun.generate(state, args.events, args.seed, brun.MEASURED_START, render, "fast", args.gen_jobs,
                            export=False)
    warm = (brun.generate(state, args.warmup_events, args.seed, brun.WARM_START, tags, "sim", 1, export=False)
            if args.warmup_events > 0 else None)
    results["input"] = {"events": summary["events"], "generation_s": round(time.monotonic() - t0, 1),
                        "formats": {t: {k: v for k, v in f.items() if k not in ("per_partition", "exported")}
                                    for t, f in summary["formats"].items()}}
    from cdclake.catalog import spark_session
    from cdclake.config import load_pipeline

    cfg = load_pipeline(pipeline.write_pipeline(state, bootstrap, tags, args.driver_memory, args.master))
    sampler = RssSampler(interval=0.2, exclude=[broker_pid] if broker_pid else [])
    spark = spark_session(cfg, app_name="cdc-bench-jvm-route")
    spark.conf.set("spark.sql.chunkBase64String.enabled", "false")  # one line of Base64, as Python writes it
    try:
        if warm is not None:
            for tag in tags:
                run_format(spark, cfg, sampler, state, bootstrap, warm, tag, brun.WARM_START, args, warm=True)
        for tag in tags:
            try:
                results["formats"][tag] = run_format(spark, cfg, sampler, state, bootstrap, summary, tag,
                                                     brun.MEASURED_START, args)
            except Exception as exc:
                log.error("%s failed\n%s", tag, traceback.format_exc())
                results["formats"][tag] = {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
                results["errors"].append(f"{tag}: {type(exc).__name__}")
            report.write_json(results, args.out)
    finally:
        spark.stop()
        sampler.close()
    results["wall_s"] = round(time.monotonic() - t0, 1)
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report.write_json(results, args.out)
    print(table(results))
    print(f"\nresults: {args.out}")
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
