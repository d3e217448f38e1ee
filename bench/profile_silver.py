"""Silver alone, again and again, on the bronze rows a benchmark run left: where its time goes.

``make bench-silver-profile`` (``python -m bench.profile_silver --formats canal --rounds 2``) opens
the lake of the last ``make bench`` run (``.state/bench``: its ``bench.yaml``, catalog and
warehouse), and for each round drops the format's silver, tombstone and history tables and runs
:func:`cdclake.silver.build_silver` for the measured hour, exactly as the benchmark does. It
prints each round's wall time and, for the last round, the Spark jobs grouped by the step that
ran them (a computed step is named by the line that called :func:`cdclake.catalog.materialize`,
other jobs by Spark's call site), their seconds, and the share of the round with 0, 1, 2 ...
tasks running (:mod:`bench.timeline`). The first round runs on a cold JVM; quote the later ones.

``--jfr N``: the last round also runs under the JDK's Flight Recorder (``jcmd JFR.start``,
method samples every 10 ms of every JVM thread), and the N methods seen most often are printed,
on top of the stack (self) and anywhere in it (total), as shares of the samples of Spark's task
threads: where the executors' CPU goes inside the Spark jobs.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Optional

def _name_jobs(catalog_module) -> None:
    """Give every job a computed step runs the description ``file:line function`` of its caller."""
    original = catalog_module.materialize

    def materialize(df):
        caller = inspect.stack()[1]
        sc = df.sparkSession.sparkContext
        sc.setJobDescription(f"{Path(caller.filename).name}:{caller.lineno} {caller.function}")
        try:
            return original(df)
        finally:
            sc.setJobDescription(None)

    catalog_module.materialize = materialize


def jobs_by_step(event_log: Path, start_ms: float, end_ms: float) -> list[tuple[str, int, float]]:
    """``(step, jobs, seconds)`` of the jobs that ran in ``[start_ms, end_ms]``, longest first."""
    started, step, by = {}, {}, defaultdict(lambda: [0, 0.0])
    with open(event_log, encoding="utf-8") as f:
        for line in f:
            if '"SparkListenerJob' not in line:
                continue
            e = json.loads(line)
            if e["Event"] == "SparkListenerJobStart":
                props = e.get("Properties") or {}
                started[e["Job ID"]] = e["Submission Time"]
                step[e["Job ID"]] = (props.get("spark.job.description") or props.get("callSite.short")
                                     or e["Stage Infos"][0]["Stage Name"])
            elif e["Event"] == "SparkListenerJobEnd" and e["Job ID"] in started:
                a, b = started.pop(e["Job ID"]), e["Completion Time"]
                if a >= start_ms and b <= end_ms:
                    by[step[e["Job ID"]]][0] += 1
                    by[step[e["Job ID"]]][1] += (b - a) / 1000
    return sorted(((s, n, t) for s, (n, t) in by.items()), key=lambda x: -x[2])


def _jdk_tool(name: str) -> str:
    """The JDK's tool ``name`` (``jcmd``, ``jfr``): under ``JAVA_HOME`` when it is there, else on the PATH."""
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / name) if home and (Path(home) / "bin" / name).exists() else name


def _jcmd(pid: str, *command: str) -> None:
    """Run ``jcmd <pid> <command>`` against the Spark JVM (raises CalledProcessError when it fails)."""
    subprocess.run([_jdk_tool("jcmd"), pid, *command], check=True, capture_output=True)


def jfr_hot_methods(recording: Path, top: int) -> list[str]:
    """The ``top`` methods seen most often in the execution samples of Spark's task threads
    (``Executor task launch worker``) of a Flight Recorder file, self and total, as lines."""
    out = subprocess.run([_jdk_tool("jfr"), "print", "--json", "--stack-depth", "64",
                          "--events", "jdk.ExecutionSample", str(recording)],
                         check=True, capture_output=True, text=True).stdout
    samples = json.loads(out)["recording"]["events"]
    own, anywhere, n = defaultdict(int), defaultdict(int), 0
    for e in samples:
        thread = (e["values"].get("sampledThread") or {}).get("javaName") or ""
        if not thread.startswith("Executor task launch worker"):
            continue
        frames = [f"{f['method']['type']['name']}.{f['method']['name']}"
                  for f in (e["values"].get("stackTrace") or {}).get("frames", [])]
        if not frames:
            continue
        n += 1
        own[frames[0]] += 1
        for m in set(frames):
            anywhere[m] += 1
    lines = [f"JVM samples of task threads: {n}", "  self:"]
    lines += [f"  {100 * c / n:5.1f} %  {m}" for m, c in sorted(own.items(), key=lambda x: -x[1])[:top]]
    lines.append("  total (methods under 90 %, below the task runner's own frames):")
    inner = [(m, c) for m, c in anywhere.items() if c < 0.9 * n and "$$Lambda" not in m]
    lines += [f"  {100 * c / n:5.1f} %  {m}" for m, c in sorted(inner, key=lambda x: -x[1])[:top]]
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--state", default=os.environ.get("CDC_STATE_DIR", ".state/bench"),
                   help="the benchmark's state directory (default .state/bench)")
    p.add_argument("--formats", default="canal", help="format tags whose hour to merge (default canal)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2], whatever the run used)")
    p.add_argument("--jfr", type=int, default=0, metavar="N",
                   help="record the last round with the JDK's Flight Recorder and print its N hottest methods")
    args = p.parse_args(argv)
    os.environ["TZ"] = "UTC"
    time.tzset()
    state = Path(args.state).resolve()
    if not (state / "bench.yaml").exists():
        print(f"no benchmark lake in {state}: run make bench first (it keeps its lake there)", file=sys.stderr)
        return 2

    import yaml

    import cdclake.catalog as catalog

    _name_jobs(catalog)
    from bench.pipeline import HOUR, topic_of
    from bench.run import MEASURED_START
    from bench.timeline import occupancy, read_event_log
    from cdclake.config import load_pipeline
    from cdclake.lake import history_namespace, tombstone_namespace
    from cdclake.silver import build_silver
    from cdclake.window import Window

    events = Path(tempfile.mkdtemp(prefix="silver-profile-"))
    doc = yaml.safe_load((state / "bench.yaml").read_text())
    doc["spark"]["master"] = args.master
    doc["spark"].setdefault("conf", {}).update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri()})
    path = events / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    cfg = load_pipeline(path)
    spark = catalog.spark_session(cfg, app_name="silver-profile")
    cores = spark.sparkContext.defaultParallelism
    spans: dict[str, tuple[float, float]] = {}
    pid = str(spark.sparkContext._jvm.ProcessHandle.current().pid())
    for tag in args.formats.split(","):
        window = Window(MEASURED_START, MEASURED_START + HOUR, (topic_of(tag),))
        for i in range(args.rounds):
            for ns in (cfg.silver.namespace, tombstone_namespace(cfg), history_namespace(cfg)):
                if spark.catalog.databaseExists(f"{cfg.catalog.name}.{ns}"):
                    for r in spark.sql(f"SHOW TABLES IN {cfg.catalog.name}.`{ns}`").collect():
                        if r["tableName"].startswith(f"{tag}_"):
                            spark.sql(f"DROP TABLE {cfg.catalog.name}.`{ns}`.`{r['tableName']}` PURGE")
            spark.sparkContext._jvm.System.gc()
            record = args.jfr and i == args.rounds - 1
            if record:
                _jcmd(pid, "JFR.start", "name=silver", "settings=profile")
            t0 = time.time()
            results = build_silver(spark, cfg, window)
            t1 = time.time()
            if record:
                _jcmd(pid, "JFR.stop", "name=silver", f"filename={events / tag}.jfr")
            spans[tag] = (t0 * 1000, t1 * 1000)
            print(f"{tag} round {i + 1}: {t1 - t0:.1f} s, "
                  + ", ".join(f"{r.table}: {r.changes} changes" for r in results), flush=True)
    spark.stop()
    log = next(f for f in events.iterdir() if f != path and f.suffix != ".jfr")  # the one event log
    tasks, jobs = read_event_log(log)
    for tag, (a, b) in spans.items():
        steps = jobs_by_step(log, a, b)
        t = occupancy(tasks, jobs, int(a), int(b), cores)
        print(f"\n{tag}, last round: {(b - a) / 1000:.1f} s, {sum(n for _, n, _ in steps)} Spark jobs, "
              f"{sum(s for _, _, s in steps):.1f} s in jobs, core use {t['core_use']}, running {t['running_share']}")
        for s, n, sec in steps:
            print(f"  {sec:6.2f} s {n:3d} jobs  {s}")
        if args.jfr:
            print("\n".join(jfr_hot_methods(events / f"{tag}.jfr", args.jfr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
