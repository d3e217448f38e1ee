"""The benchmark: one hour of CDC traffic per wire format through land, normalize and silver.

    PYTHONPATH=jobs CDC_STATE_DIR=$PWD/.state/bench .venv/bin/python -m bench.run [--events N] [--formats dbz,canal]

See ``bench/README.md`` for what is measured and how. Outputs ``bench/results/<date>.json`` and
``bench/results/<date>.png``.

Peers: :func:`bench.peers.harness.run_peers` calls ``bench.peers.<name>.run(input_spec) -> dict``
for every name in :data:`PEERS` whose module exists (else the peer is recorded as ``not run``),
after the Spark session has stopped; the ``input_spec`` dict is described in ``bench/README.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Callable, Optional

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if __package__ in (None, ""):  # python bench/run.py
    sys.path.insert(0, str(REPO_ROOT))
if str(REPO_ROOT / "jobs") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "jobs"))

from bench import data as bdata  # noqa: E402
from bench import tables as btables  # noqa: E402
from bench.peers.harness import PEERS, run_peers  # noqa: E402
from bench.sampler import RssSampler  # noqa: E402

log = logging.getLogger("bench")
ALL_FORMATS = ("dbz", "canal", "arcion", "cdl", "splex", "qlikj", "qlika", "dts")
WARM_START = dt.datetime(2024, 1, 1, 0, tzinfo=dt.timezone.utc)
MEASURED_START = dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone.utc)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=1_000_000, help="row changes in the measured hour (default 1,000,000)")
    p.add_argument("--formats", default=",".join(ALL_FORMATS),
                   help=f"comma-separated format tags (default all: {','.join(ALL_FORMATS)})")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--warmup-events", type=int, default=5_000,
                   help="row changes of the warm-up hour run through every format first (0: no warm-up)")
    p.add_argument("--merge-sizes", default="1000000,10000000", help="silver table sizes for merge scaling ('' to skip)")
    p.add_argument("--maintenance-rows", type=int, default=0,
                   help="rows of the table that 48 hourly merges then maintenance are measured on (default 0: "
                        "skipped; 1000000 took 23 minutes on 2 cores)")
    p.add_argument("--merge-batch", type=int, default=100_000, help="changes in the merge-scaling batch")
    p.add_argument("--driver-memory", default="3g", help="spark.driver.memory (local[2]: the JVM that runs the tasks)")
    p.add_argument("--master", default="local[2]")
    p.add_argument("--no-gates", action="store_true", help="skip the Great Expectations gates")
    p.add_argument("--no-from-json", action="store_true", help="skip Spark's from_json reference")
    p.add_argument("--peers", default=",".join(PEERS), help=f"peers to run (default {','.join(PEERS)}; '' for none)")
    p.add_argument("--gen-jobs", type=int, default=2, help="processes rendering wire formats (generation only)")
    p.add_argument("--rss-interval", type=float, default=0.2, help="seconds between RSS samples")
    p.add_argument("--out", default=str(BENCH_DIR / "results"), help="results directory")
    p.add_argument("--date", default=None, help="results file name (default: today, YYYY-MM-DD)")
    p.add_argument("--keep-lake", action="store_true", help="do not reset the bench catalog and warehouse first")
    p.add_argument("--scale", type=int, nargs="?", const=5, default=0, metavar="K",
                   help="then a K× larger hour of --scale-format (default K 5: the 5M-change hour), in a second run")
    p.add_argument("--scale-format", default="canal",
                   help="format of the --scale hour (default canal: a 5M Debezium topic, 17 GB, does not fit the "
                        "embedded broker beside Spark on 24 GB)")
    p.add_argument("--speedup", default="", metavar="TAGS",
                   help="then the same hour of these formats with --master local[1], in a second run: the parallel "
                        "speedup per stage (e.g. dbz,canal)")
    btables.add_arguments(p)
    args = p.parse_args(argv)
    btables.parse_arguments(p, args)
    args.formats = [t.strip() for t in args.formats.split(",") if t.strip()]
    unknown = [t for t in args.formats if t not in ALL_FORMATS]
    if unknown:
        p.error(f"unknown format tag(s) {unknown}; known: {','.join(ALL_FORMATS)}")
    args.speedup = [t.strip() for t in args.speedup.split(",") if t.strip()]
    if any(t not in ALL_FORMATS for t in args.speedup + [args.scale_format]):
        p.error(f"unknown format tag in --speedup or --scale-format; known: {','.join(ALL_FORMATS)}")
    args.merge_sizes = [int(x) for x in args.merge_sizes.split(",") if x.strip()]
    args.peers = [x.strip() for x in args.peers.split(",") if x.strip()]
    return args


# ---------------------------------------------------------------------------------------------
# second runs


def child_run(args: argparse.Namespace, date: str, events: int, formats: list[str], master: str,
              cpus: Optional[int] = None, from_json: bool = False) -> dict:
    """Run ``bench.run`` again in a child process (its own Spark session and broker, the same
    state directory, reset) for ``formats`` at ``events`` on ``master``, without merge scaling,
    peers or ``from_json``; return its results (``bench/results/<date>.json``), or ``{"error": ...}``.
    ``cpus``: the child and everything it starts run on the first ``cpus`` CPUs only."""
    cmd = [sys.executable, "-m", "bench.run", "--events", str(events), "--formats", ",".join(formats),
           "--master", master, "--driver-memory", args.driver_memory, "--merge-sizes", "", "--maintenance-rows", "0",
           "--peers", "",
           *([] if from_json else ["--no-from-json"]), "--warmup-events", str(args.warmup_events), "--seed", str(args.seed),
           "--gen-jobs", str(args.gen_jobs), "--out", args.out, "--date", date] + (["--no-gates"] if args.no_gates else [])
    log.info("second run: %s", " ".join(cmd[1:]))
    pin = (lambda: os.sched_setaffinity(0, set(range(cpus)))) if cpus else None
    done = subprocess.run(cmd, env=child_env(bench_state_dir()), cwd=REPO_ROOT, preexec_fn=pin)
    path = Path(args.out) / f"{date}.json"
    if not path.exists():
        return {"error": f"the run {' '.join(cmd[1:])} exited {done.returncode} without results"}
    out = json.loads(path.read_text())
    out["results_file"] = str(path)
    return out


def _stage_walls(fmt_result: dict) -> dict[str, Optional[float]]:
    stages = fmt_result.get("stages", {})
    walls = {s: stages.get(s, {}).get("wall_s") for s in ("land", "normalize", "silver")}
    walls["e2e"] = fmt_result.get("e2e", {}).get("wall_s")
    return walls


def scale_run(args: argparse.Namespace, date: str, results: dict) -> dict:
    """The ``--scale`` hour: ``K × --events`` changes of ``--scale-format``, against the same
    format's hour of this run. Returns its wall times per stage, peak RSS, and the ratios
    (the target: at most 5.5× for 5× the changes)."""
    tag, k = args.scale_format, args.scale
    child = child_run(args, f"{date}-scale", args.events * k, [tag], args.master)
    big = child.get("formats", {}).get(tag)
    if big is None:
        return {"format": tag, "factor": k, "error": child.get("error") or child.get("errors")}
    base = results["formats"].get(tag)
    walls, base_walls = _stage_walls(big), _stage_walls(base) if base else {}
    return {"format": tag, "factor": k, "events": big.get("e2e", {}).get("events"), "wall_s": walls,
            "peak_rss_mb": big.get("e2e", {}).get("peak_rss_mb"), "verify_ok": big.get("verify", {}).get("ok"),
            "ratio_to_base": {s: round(w / base_walls[s], 2) for s, w in walls.items()
                              if w and base_walls.get(s)},
            "errors": child.get("errors", []), "results_file": child.get("results_file")}


def speedup_run(args: argparse.Namespace, date: str, results: dict) -> dict:
    """The ``--speedup`` formats' hour again on ``local[1]`` and one CPU: per format and stage,
    the wall time on one core over this run's (the target: at least 1.8 for normalize and silver).

    The child runs on one CPU, with everything it starts (the JVM's garbage collector and compiler
    threads, the Python workers, the broker): ``local[1]`` alone runs one task at a time but lets
    the rest use the other cores, which is not a run on one core.

    Where this run measured Spark's ``from_json`` (``dbz`` among the formats), the child measures
    it too, and ``from_json`` gives its speedup: what Spark's own parse, a job of independent
    tasks with no driver work between them, gains from the second core on this machine."""
    with_from_json = "dbz" in args.speedup and bool(results.get("from_json"))
    child = child_run(args, f"{date}-local1", args.events, args.speedup, "local[1]", cpus=1, from_json=with_from_json)
    out: dict = {"master": args.master, "against": "local[1] on one CPU", "errors": child.get("errors", []),
                 "results_file": child.get("results_file"), "formats": {}}
    for tag in args.speedup:
        one, many = child.get("formats", {}).get(tag), results["formats"].get(tag)
        if not one or not many:
            out["formats"][tag] = {"error": "not measured in both runs"}
            continue
        w1, w2 = _stage_walls(one), _stage_walls(many)
        out["formats"][tag] = {"local1_s": w1, "local2_s": w2,
                               "speedup": {s: round(w1[s] / w2[s], 2) for s in w1 if w1[s] and w2.get(s)}}
    if with_from_json:
        one, many = child.get("from_json") or {}, results["from_json"]
        out["from_json"] = {name: {"local1_s": one[name]["wall_s"], "local2_s": many[name]["wall_s"],
                                   "speedup": round(one[name]["wall_s"] / many[name]["wall_s"], 2)}
                            for name in ("pipeline", "payload_only")
                            if isinstance(one.get(name), dict) and isinstance(many.get(name), dict)}
    return out


# ---------------------------------------------------------------------------------------------
# environment


def bench_state_dir() -> Path:
    """``$CDC_STATE_DIR``, default ``<repo>/.state/bench``; never the demo's ``<repo>/.state``."""
    state = Path(os.environ.get("CDC_STATE_DIR") or REPO_ROOT / ".state" / "bench").resolve()
    if state == (REPO_ROOT / ".state").resolve():
        raise SystemExit(f"error: CDC_STATE_DIR={state} is the demo's lake; point it at a bench-only directory "
                         "such as .state/bench")
    return state


def child_env(state: Path) -> dict:
    env = dict(os.environ)
    paths = [str(REPO_ROOT), str(REPO_ROOT / "jobs")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)), CDC_STATE_DIR=str(state), TZ="UTC",
               SPARK_LOCAL_IP="127.0.0.1")
    return env


def add_timelines(results: dict, sampler: RssSampler, event_log: Path, master: str,
                  stages: Optional[dict[str, dict]] = None) -> None:
    """Put each measured stage's Spark job timeline (:mod:`bench.timeline`) beside its figures and log it:
    ``stages`` is ``{span label: figures}`` (default every format's, ``<tag>/<stage>``:
    ``formats.<tag>.stages.<stage>.timeline``)."""
    from bench import timeline
    from bench.pipeline import STAGES

    cores = os.cpu_count() or 1
    if master.startswith("local[") and master[6:-1].isdigit():
        cores = int(master[6:-1])
    try:
        found = timeline.stage_timelines(event_log, sampler.intervals, cores)
    except Exception as exc:  # the figures stand without it
        results["errors"].append(f"timeline: {type(exc).__name__}: {exc}")
        return
    if stages is None:
        stages = {f"{tag}/{stage}": figs for tag, r in results["formats"].items()
                  for stage, figs in r.get("stages", {}).items()}
    for label, figs in stages.items():
        t = found.get(label)
        if t is not None:
            figs["timeline"] = t
            if label.rsplit("/", 1)[-1] in STAGES:
                log.info("%s: %s", label.replace("/", " "), timeline.describe(t))


class SparkRun:
    """What :func:`spark_run`'s body sets: ``spark``, the session it started (None until then)."""

    spark = None


@contextlib.contextmanager
def spark_run(results: dict, sampler: RssSampler, events_dir: Path, master: str,
              stages: Callable[[], Optional[dict[str, dict]]] = lambda: None):
    """Run the body, which starts its Spark session as ``run.spark`` (the :class:`SparkRun` it is
    given): an exception is logged with its traceback and added to ``results["errors"]``; then
    the session is stopped and the stages' Spark job timelines added (:func:`add_timelines` with
    ``stages()``, the event log of the session under ``events_dir``)."""
    run = SparkRun()
    try:
        yield run
    except Exception as exc:
        results["errors"].append(f"{type(exc).__name__}: {exc}")
        log.error("benchmark failed\n%s", traceback.format_exc())
    finally:
        if run.spark is not None:
            app_id = run.spark.sparkContext.applicationId
            run.spark.stop()
            add_timelines(results, sampler, events_dir / app_id, master, stages())


def reset_lake(state: Path) -> None:
    from cdclake.demo import reset_lake as reset

    reset(state, extra=("from_json", "bench.yaml", "stack.env"))


def broker_up(state: Path) -> tuple[str, Optional[int]]:
    """Start the embedded broker and catalog in a child process (the broker is then no child of ours)."""
    out = subprocess.run([sys.executable, "-m", "cdclake.embedded", "up"], env=child_env(state), cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    info = json.loads((state / "broker.json").read_text())
    return env["CDC_KAFKA_BOOTSTRAP"], info.get("pid")


def generate(state: Path, events: int, seed: int, start: dt.datetime, tags: list[str], source: str, jobs: int,
             export: bool) -> dict:
    out = state / f"summary-{source}.json"
    cmd = [sys.executable, "-m", "bench.data", "render", "--events", str(events), "--seed", str(seed),
           "--start", start.isoformat(), "--formats", ",".join(tags), "--source", source, "--jobs", str(jobs),
           "--summary-out", str(out)]
    if export:
        cmd += ["--export", str(bdata.DATA_DIR)]
    subprocess.run(cmd, env=child_env(state), cwd=REPO_ROOT, check=True)
    return json.loads(out.read_text())


def from_json_reference(measurements: list[dict]) -> dict:
    """The run's ``from_json`` reference from its measurements (each ``{"when": str, "pipeline":
    figures, "payload_only": figures}``, :func:`bench.pipeline.run_from_json`): per input, the
    measurement with the least wall time (the machine's speed drifts within a run; the faster one
    is the stricter reference for every ratio against it), with every measurement kept under
    ``measurements`` and the one chosen named by ``when``."""
    out: dict = {"measurements": measurements}
    for name in ("pipeline", "payload_only"):
        seen = [m for m in measurements if isinstance(m.get(name), dict)]
        if seen:
            best = min(seen, key=lambda m: m[name]["wall_s"])
            out[name] = {**best[name], "when": best["when"]}
    return out


def in_child(fn, *args):
    """``fn(*args)`` in a fresh Python process: the harness's own checks stay out of the driver's RSS."""
    import concurrent.futures
    import multiprocessing as mp

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        return ex.submit(fn, *args).result()


def produce(state: Path, bootstrap: str, topic: str, summary: dict, tag: str) -> dict:
    cache = Path(summary["cache"])
    info = summary["formats"][tag]
    out = subprocess.run([sys.executable, "-m", "bench.data", "produce", "--bootstrap", bootstrap, "--topic", topic,
                          "--file", str(cache / f"{tag}.bin"), "--partitions", str(info["partitions"])],
                         env=child_env(state), cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for noisy in ("py4j", "great_expectations", "pyiceberg", "cdclake"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ["TZ"] = "UTC"
    time.tzset()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    state = bench_state_dir()
    os.environ["CDC_STATE_DIR"] = str(state)
    state.mkdir(parents=True, exist_ok=True)
    # the tables' hours beside the formats' hour of the same day, not over it
    date = args.date or dt.date.today().isoformat() + ("-tables" if args.tables else "")
    out_dir = Path(args.out)
    t_start = time.monotonic()

    from bench import pipeline, report

    results: dict = {
        "date": date, "command": " ".join([Path(sys.executable).name, "-m", "bench.run"] + sys.argv[1:]),
        "machine": report.machine(),
        "config": {"events": args.events, "formats": args.formats, "seed": args.seed, "master": args.master,
                   "driver_memory": args.driver_memory, "warmup_events": args.warmup_events,
                   "merge_sizes": args.merge_sizes, "merge_batch": args.merge_batch, "maintenance_rows": args.maintenance_rows, "gates": not args.no_gates,
                   "rss_interval_s": args.rss_interval, "state_dir": str(state),
                   "measured_hour": MEASURED_START.isoformat(), "warmup_hour": WARM_START.isoformat()},
        "formats": {}, "peers": [], "errors": [],
    }
    json_path, png_path = out_dir / f"{date}.json", out_dir / f"{date}.png"

    if not args.keep_lake:
        reset_lake(state)
    bootstrap, broker_pid = broker_up(state)
    log.info("embedded broker at %s, lake in %s", bootstrap, state)
    if args.tables:  # the cost per table alone
        return btables.main(args, state, bootstrap, broker_pid, results, json_path)

    # -- input (not measured) --------------------------------------------------------------
    t0 = time.monotonic()
    tags = list(args.formats)
    render_tags = tags + ([bdata.PAYLOAD_TAG] if "dbz" in tags and not args.no_from_json else [])
    summary = generate(state, args.events, args.seed, MEASURED_START, render_tags, "fast", args.gen_jobs, export=True)
    warm = (generate(state, args.warmup_events, args.seed, WARM_START, tags, "sim", 1, export=False)
            if args.warmup_events > 0 else None)
    results["input"] = {
        "events": summary["events"], "transactions": summary["transactions"], "ops": summary["ops"],
        "distinct_keys": summary["distinct_keys"], "distinct_keys_total": summary["distinct_keys_total"],
        "final_rows": summary["expected_rows"], "cached": summary.get("cached"),
        "generation_s": round(time.monotonic() - t0, 1),
        "formats": {t: {k: v for k, v in f.items() if k not in ("per_partition", "exported")}
                    for t, f in summary["formats"].items()},
    }
    log.info("input: %d row changes, %d distinct keys (generation %.0f s, cached %s)", summary["events"],
             summary["distinct_keys_total"], results["input"]["generation_s"], summary.get("cached"))

    from cdclake.config import load_pipeline

    # Spark's event log, read after the session stops for each stage's job timeline (bench.timeline)
    events_dir = state / "spark-events"
    shutil.rmtree(events_dir, ignore_errors=True)
    events_dir.mkdir(parents=True)
    cfg = load_pipeline(pipeline.write_pipeline(
        state, bootstrap, tags, args.driver_memory, args.master,
        spark_conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": events_dir.as_uri()}))
    sampler = RssSampler(interval=args.rss_interval, exclude=[broker_pid] if broker_pid else [])
    with spark_run(results, sampler, events_dir, args.master) as run:
        # -- Spark start-up ---------------------------------------------------------------
        from cdclake.catalog import spark_session

        with sampler.span("spark_startup") as s:
            spark = run.spark = spark_session(cfg, app_name="cdc-bench")
            spark.range(1).count()
        results["spark_startup"] = {"wall_s": round(s.wall_s, 2), **s.as_dict()}
        log.info("Spark session up in %.1f s", s.wall_s)

        # -- warm-up hour (reported apart) ------------------------------------------------
        if warm is not None:
            wres: dict = {"events": warm["events"], "formats": {}}
            with sampler.span("warmup") as w:
                for tag in tags:
                    produce(state, bootstrap, pipeline.topic_of(tag, True), warm, tag)
                    wres["formats"][tag] = pipeline.run_format(spark, cfg, sampler, tag, WARM_START, warm["events"],
                                                               warm=True, gates=not args.no_gates)
                bdata.delete_topics(bootstrap, [pipeline.topic_of(t, True) for t in tags])
                if "dbz" in tags and not args.no_from_json:
                    pipeline.run_from_json(spark, cfg, sampler, WARM_START, state / "from_json" / "warm", None, warm=True)
            wres["wall_s"] = round(w.wall_s, 1)
            results["warmup"] = wres
            log.info("warm-up hour done in %.0f s", w.wall_s)

        # -- the measured hour, format by format ---------------------------------------
        want_from_json = "dbz" in tags and not args.no_from_json
        fj_runs: list[dict] = []

        def measure_from_json(when: str) -> dict:
            """Spark's from_json on the Debezium hour's values (:func:`bench.pipeline.run_from_json`)."""
            payload = Path(summary["cache"]) / bdata.PAYLOAD_FILE
            m = pipeline.run_from_json(spark, cfg, sampler, MEASURED_START, state / "from_json" / "hour", payload)
            shutil.rmtree(state / "from_json", ignore_errors=True)
            log.info("from_json %s: %s", when, ", ".join(f"{k} {v['wall_s']:.1f} s" for k, v in m.items()))
            return {"when": when, **m}

        for tag in tags:
            topic = pipeline.topic_of(tag)
            p = produce(state, bootstrap, topic, summary, tag)
            log.info("%s: produced %d messages to %s in %.0f s", tag, p["messages"], topic, p["produce_s"])
            r = pipeline.run_format(spark, cfg, sampler, tag, MEASURED_START, summary["events"], gates=not args.no_gates,
                                    after_land=lambda: bdata.delete_topics(bootstrap, [topic]))
            fi = summary["formats"][tag]
            r.update(format=fi["format"], kafka_records=p["messages"], value_bytes=fi["value_bytes"],
                     mean_value_bytes=fi["mean_value_bytes"], produce_s=p["produce_s"])
            land = r["stages"].get("land")
            if land:
                land["records_per_s"] = round(p["messages"] / land["wall_s"])
                land["mb_per_s"] = round(fi["value_bytes"] / 1e6 / land["wall_s"], 1)
                if r["counts"]["land"]["raw_records"] != p["messages"]:
                    results["errors"].append(f"{tag}: landed {r['counts']['land']['raw_records']} of {p['messages']} records")
            if "error" not in r:
                r["verify"] = in_child(pipeline.verify, cfg, tag, summary["tables"], Path(summary["cache"]) / "expected")
                if not r["verify"]["ok"]:
                    results["errors"].append(f"{tag}: silver differs from the source: {r['verify']}")
            else:
                results["errors"].append(f"{tag}: {r['error']}")
            results["formats"][tag] = r
            bdata.delete_topics(bootstrap, [topic])
            if tag == "dbz" and want_from_json and "error" not in r:
                fj_runs.append(measure_from_json("after the dbz hour"))
            log.info("%s: e2e %.1f s (%s events/s), silver %s", tag, r["e2e"]["wall_s"], r["e2e"]["events_per_s"],
                     "matches the source" if r.get("verify", {}).get("ok") else "NOT CHECKED OR DIFFERENT")
            report.write_json(results, json_path)  # partial results survive a crash

        done = [f for f in results["formats"].values() if f.get("e2e")]
        results["totals"] = {"formats": len(done), "events": sum(f["e2e"]["events"] for f in done),
                             "e2e_wall_s": round(sum(f["e2e"]["wall_s"] for f in done), 1),
                             "peak_rss_mb": max((f["e2e"]["peak_rss_mb"] for f in done), default=None)}

        # -- Spark's from_json reference, measured again after the other formats -----------
        if fj_runs and tags[-1] != "dbz":
            fj_runs.append(measure_from_json("after all formats"))
        if fj_runs:
            results["from_json"] = from_json_reference(fj_runs)
            results["from_json"]["normalize_debezium_events_per_s"] = results["formats"]["dbz"]["stages"]["normalize"]["events_per_s"]
            results["from_json"]["normalize_target_events_per_s"] = report.NORMALIZE_TARGET

        # -- merge scaling ----------------------------------------------------------------
        if args.merge_sizes:
            from bench.merge import merge_scaling

            results["merge"] = merge_scaling(spark, cfg, sampler, args.merge_sizes, args.merge_batch)

        # -- table maintenance: reads and merges after 48 hourly merges, before and after ------
        if args.maintenance_rows:
            from bench.merge import maintenance_effect

            results["maintenance"] = maintenance_effect(spark, cfg, sampler, args.maintenance_rows)

    # -- peers (after Spark has stopped) ---------------------------------------------------
    if args.peers:
        run_peers(args.peers, cfg, summary, state, tags, MEASURED_START, results, sampler)
    sampler.close()

    # -- second runs: a larger hour, one core (each a bench run of its own, after this one) ---
    if args.scale:
        results["scale"] = scale_run(args, date, results)
        if results["scale"].get("error"):
            results["errors"].append(f"scale: {results['scale']['error']}")
    if args.speedup:
        results["speedup"] = speedup_run(args, date, results)
        results["errors"] += [f"speedup {t}: {f['error']}" for t, f in results["speedup"]["formats"].items()
                              if "error" in f]

    results["wall_s"] = round(time.monotonic() - t_start, 1)
    results["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report.write_json(results, json_path)
    try:
        report.chart(results, png_path)
    except Exception as exc:
        results["errors"].append(f"chart: {type(exc).__name__}: {exc}")
        report.write_json(results, json_path)
    print(report.table(results))
    print(f"\nresults: {json_path}\nchart:   {png_path}")
    for e in results["errors"]:
        print(f"error: {e}"[:2000], file=sys.stderr)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
