"""Silver alone, again and again, on the bronze rows a benchmark run left: where its time goes.

``make bench-silver-profile`` (``python -m bench.profile_silver --formats canal --rounds 2``) opens
the lake of the last ``make bench`` run (``.state/bench``: its ``bench.yaml``, catalog and
warehouse), and for each round drops the format's silver, tombstone and history tables and runs
:func:`cdclake.silver.build_silver` for the measured hour, exactly as the benchmark does. It
prints each round's wall time and, for the last round, the Spark jobs grouped by the step that
ran them (a computed step is named by the line that called :func:`cdclake.catalog.materialize`,
other jobs by Spark's call site), their seconds, their tasks' CPU seconds and what they spilled
to disk, and the share of the round with 0, 1, 2 ... tasks running (:mod:`bench.timeline`). The
first round runs on a cold JVM; quote the later ones. Each round's line also gives what the JVM
spent beside the tasks in it (:func:`jvm_counters`): HotSpot's compiling time, the collectors' time
and the classes Spark's code generation compiled.

``--floor``: every round also times a reference beside silver, the plainest Spark query for the
same hour (:func:`latest_images`): for each table silver made, its bronze rows of the hour
reduced to each key's latest change, whose after image is written as the table's typed columns
into a new Iceberg table (namespace ``<silver namespace>_floor``, bucketed as silver), as many
tables at a time as silver (``silver.parallel_tables``). Where every change carries the whole row
and no key changes (the Debezium and Canal hours) it gives silver's rows without the ``_cdc_``
columns (the rows that differ are counted, outside the timing); with partial images (SharePlex)
it skips completing them and its rows differ. What silver does beyond it: the batch summary,
each column's latest change and its order, the reset, tombstones, the upsert and delete counts,
and the MERGE's column-by-column rule with the ``_cdc_`` columns.

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
from concurrent.futures import ThreadPoolExecutor
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


def jvm_counters(spark) -> tuple[float, float, int]:
    """``(JIT s, GC s, generated classes)`` of the Spark JVM so far: HotSpot's compiling time
    (``CompilationMXBean``, summed over its compiler threads, so it can exceed wall time), its
    collectors' time (``GarbageCollectorMXBean``) and the classes Spark's code generation has
    compiled (``CodegenMetrics``; with a ``local`` master the tasks run in this JVM too)."""
    jvm = spark.sparkContext._jvm
    beans = jvm.java.lang.management.ManagementFactory
    gc_ms = sum(b.getCollectionTime() for b in beans.getGarbageCollectorMXBeans())
    generated = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()
    return beans.getCompilationMXBean().getTotalCompilationTime() / 1000, gc_ms / 1000, int(generated)


def jobs_by_step(event_log: Path, start_ms: float, end_ms: float) -> list[tuple[str, int, float, float, float]]:
    """``(step, jobs, seconds, task CPU seconds, MB spilled to disk)`` of the jobs that ran in
    ``[start_ms, end_ms]``, longest first. Task CPU (the executors' own accounting, summed over
    the steps' tasks) moves less than wall time when the machine is shared."""
    started, step, stages = {}, {}, {}
    by = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    cpu, spill = defaultdict(float), defaultdict(float)  # stage -> task CPU s, disk MB spilled
    with open(event_log, encoding="utf-8") as f:
        for line in f:
            if '"SparkListenerTaskEnd"' in line:
                e = json.loads(line)
                m = e.get("Task Metrics") or {}
                cpu[e["Stage ID"]] += m.get("Executor CPU Time", 0) / 1e9
                spill[e["Stage ID"]] += m.get("Disk Bytes Spilled", 0) / 1e6
                continue
            if '"SparkListenerJob' not in line:
                continue
            e = json.loads(line)
            if e["Event"] == "SparkListenerJobStart":
                props = e.get("Properties") or {}
                started[e["Job ID"]] = e["Submission Time"]
                stages[e["Job ID"]] = e.get("Stage IDs", [])
                step[e["Job ID"]] = (props.get("spark.job.description") or props.get("callSite.short")
                                     or e["Stage Infos"][0]["Stage Name"])
            elif e["Event"] == "SparkListenerJobEnd" and e["Job ID"] in started:
                a, b = started.pop(e["Job ID"]), e["Completion Time"]
                if a >= start_ms and b <= end_ms:
                    at = by[step[e["Job ID"]]]
                    at[0] += 1
                    at[1] += (b - a) / 1000
                    at[2] += sum(cpu[s] for s in stages[e["Job ID"]])
                    at[3] += sum(spill[s] for s in stages[e["Job ID"]])
    return sorted(((s, n, t, c, d) for s, (n, t, c, d) in by.items()), key=lambda x: -x[2])


def latest_images(spark, cfg, window, results, namespace: str) -> tuple[float, int, int]:
    """``--floor``'s reference for the silver tables of ``results`` (:class:`cdclake.silver.TableResult`
    of :func:`cdclake.silver.build_silver` over ``window``), as many tables at a time as silver
    merges (see the module docstring). Returns ``(seconds, rows written, rows differing)``: the
    last counts rows in either table and not the other (silver's ``_cdc_`` columns left out),
    after the timing. Each silver table's source table and key come from its properties
    (:data:`cdclake.lake.SOURCE_TABLE_PROPERTY`, :data:`cdclake.lake.PRIMARY_KEY_PROPERTY`), its
    columns and types from its schema; the tables in ``namespace`` are replaced."""
    from pyspark.sql import functions as F

    from cdclake.catalog import ensure_namespace, qualified
    from cdclake.lake import BRONZE_TABLE, PRIMARY_KEY_PROPERTY, SOURCE_TABLE_PROPERTY, window_filter
    from cdclake.silver.order import BRONZE
    from cdclake.types import quote_ident, sql_cast, sql_string

    ensure_namespace(spark, cfg, namespace)
    bronze = spark.table(qualified(cfg, BRONZE_TABLE)).where(window_filter(window, list(window.topics)))
    plans = []
    for r in results:
        props = {p["key"]: p["value"] for p in spark.sql(f"SHOW TBLPROPERTIES {r.table}").collect()}
        _prefix, database, schema, table = json.loads(props[SOURCE_TABLE_PROPERTY])
        pk = json.loads(props[PRIMARY_KEY_PROPERTY])
        cols = [f for f in spark.table(r.table).schema.fields if not f.name.startswith("_cdc_")]
        name = f"{cfg.catalog.name}.{quote_ident(namespace)}.{quote_ident(r.table.rsplit('.', 1)[-1].strip('`'))}"
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
        plans.append((name, database, schema, table, pk, cols))

    def one(plan) -> None:
        name, database, schema, table, pk, cols = plan
        rows = bronze.where(F.col("source_database").eqNullSafe(F.lit(database))
                            & F.col("source_schema").eqNullSafe(F.lit(schema))
                            & (F.col("source_table") == F.lit(table)) & (F.col("op") != "truncate"))
        image = F.when(F.col("op") == "delete", F.col("before")).otherwise(F.col("after"))
        latest = (rows.groupBy(*[image[k].alias(f"_k{i}") for i, k in enumerate(pk)])
                  .agg(F.max_by(F.struct("op", "after"), BRONZE.column(row=True)).alias("_last"))
                  .where(F.col("_last.op") != "delete")
                  .select(*[F.expr(sql_cast(f"_last.after[{sql_string(f.name)}]", f.dataType.simpleString()))
                            .alias(f.name) for f in cols]))
        columns = ", ".join(f"{quote_ident(f.name)} {f.dataType.simpleString()}" for f in cols)
        bucket = f"bucket({cfg.silver.buckets}, {quote_ident(pk[0])})"
        spark.sql(f"CREATE TABLE {name} ({columns}) USING iceberg PARTITIONED BY ({bucket}) "
                  "TBLPROPERTIES ('format-version'='2')")
        latest.writeTo(name).append()

    t0 = time.time()
    with ThreadPoolExecutor(max(1, min(cfg.silver.parallel_tables, len(plans)))) as pool:
        list(pool.map(one, plans))
    seconds = time.time() - t0
    written = differ = 0
    for r, (name, *_rest, cols) in zip(results, plans):
        floor, silver = spark.table(name), spark.table(r.table).select(*[f.name for f in cols])
        written += floor.count()
        differ += silver.exceptAll(floor).count() + floor.exceptAll(silver).count()
    return seconds, written, differ


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
    p.add_argument("--floor", action="store_true",
                   help="time each round's reference too: every key's latest after image written as typed columns")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for this session, over the run's (repeatable): to compare one setting's effect")
    args = p.parse_args(argv)
    extra = dict(c.split("=", 1) for c in args.conf)
    from bench.pipeline import kept_lake

    state = kept_lake(args.state)
    if state is None:
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
    doc["spark"].setdefault("conf", {}).update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
                                                **extra})
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
            before = jvm_counters(spark)
            t0 = time.time()
            results = build_silver(spark, cfg, window)
            t1 = time.time()
            jit, gc, generated = (b - a for a, b in zip(before, jvm_counters(spark)))
            if record:
                _jcmd(pid, "JFR.stop", "name=silver", f"filename={events / tag}.jfr")
            spans[tag] = (t0 * 1000, t1 * 1000)
            print(f"{tag} round {i + 1}: {t1 - t0:.1f} s (JIT {jit:.1f} s, GC {gc:.1f} s, {generated} generated "
                  "classes), " + ", ".join(f"{r.table}: {r.changes} changes" for r in results), flush=True)
            if args.floor:
                floor_ns = f"{cfg.silver.namespace}_floor"
                seconds, written, differ = latest_images(spark, cfg, window, results, floor_ns)
                print(f"{tag} round {i + 1} floor: {seconds:.1f} s, {written} rows, {differ} differing from "
                      f"silver's; silver took {(t1 - t0) / seconds:.2f}x the floor", flush=True)
    spark.stop()
    log = next(f for f in events.iterdir() if f != path and f.suffix != ".jfr")  # the one event log
    tasks, jobs = read_event_log(log)
    for tag, (a, b) in spans.items():
        steps = jobs_by_step(log, a, b)
        t = occupancy(tasks, jobs, int(a), int(b), cores)
        print(f"\n{tag}, last round: {(b - a) / 1000:.1f} s, {sum(x[1] for x in steps)} Spark jobs, "
              f"{sum(x[2] for x in steps):.1f} s in jobs, {sum(x[3] for x in steps):.1f} s task CPU, "
              f"core use {t['core_use']}, running {t['running_share']}")
        for s, n, sec, cpu, spilled in steps:
            print(f"  {sec:6.2f} s {n:3d} jobs {cpu:6.2f} s CPU {spilled:7.1f} MB spilled  {s}")
        if args.jfr:
            print("\n".join(jfr_hot_methods(events / f"{tag}.jfr", args.jfr)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
