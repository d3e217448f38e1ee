"""The writer lock: two runs never write one topic at once, a waiting run goes after the holder,
and a lock whose holder is gone (killed process, silent host) is taken over.

Stage jobs run as real processes through ``jobs/land.py`` (each starts its own Spark JVM); the
holder rows are read from, and written into, the real catalog database.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest
from conftest import REPO, produce, write_pipeline
from pipeline import hour, ms

from cdclake.config import load_pipeline
from cdclake.locks import LOCK_TABLE, WriterLock, WriterLockBusy, holders
from cdclake.window import Window

WINDOW = ["--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]
TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def start_job(stage: str, path, env: dict | None = None) -> subprocess.Popen:
    """``jobs/<stage>.py`` for hour 0 as a process of its own (stderr captured)."""
    return subprocess.Popen([sys.executable, str(REPO / "jobs" / f"{stage}.py"), "--pipeline", str(path), *WINDOW],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    _out, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def log_time(stderr: str, text: str) -> str:
    """The time stamp of the first log line of ``stderr`` containing ``text``."""
    for line in stderr.splitlines():
        if text in line and TIME.match(line):
            return TIME.match(line).group(1)
    raise AssertionError(f"no log line with {text!r} in:\n{stderr[-3000:]}")


def wait_for_holder(cfg, topic: str, pid: int, proc: subprocess.Popen, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = [r for r in holders(cfg) if r["topic"] == topic and r["pid"] == pid]
        if rows:
            return rows[0]
        assert proc.poll() is None, f"job ended before it held the lock: {proc.communicate()[1][-3000:]}"
        time.sleep(0.1)
    raise AssertionError(f"pid {pid} never held the lock of {topic}")


def test_second_writer_fails_fast_or_waits(stack, spark, unique, caplog):
    """Three runs of three pipelines naming one topic. A (a land job) holds the lock; B (a land job,
    ``wait_s: 0``) exits 1 at once naming A; C (``wait_s: 120``, in the test's Spark session to
    save a JVM) waits and lands after A is done; the raw table holds every record once."""
    import datetime as dt
    import logging

    from cdclake.land import land

    topic = f"locks.{unique}"
    produce(stack["bootstrap"], topic, [(i % 2, ms(hour(0)) + i, f"k{i}", f'{{"i": {i}}}') for i in range(30)], partitions=2)
    src = [{"topic": topic, "format": "debezium-json"}]
    path_a = write_pipeline(f"locks_a_{unique}", src)
    path_b = write_pipeline(f"locks_b_{unique}", src, locks={"wait_s": 0})
    cfg = load_pipeline(path_a)
    cfg_c = load_pipeline(write_pipeline(f"locks_c_{unique}", src, locks={"wait_s": 120}))

    a = start_job("land", path_a, {"AIRFLOW_CTX_DAG_ID": f"cdc_locks_a_{unique}", "AIRFLOW_CTX_DAG_RUN_ID": "manual__1"})
    wait_for_holder(cfg, topic, a.pid, a)
    b_code, b_err = finish(start_job("land", path_b))
    assert a.poll() is None, "A was done before B and C tried: nothing was tested"
    w = Window(hour(0), hour(1))
    with caplog.at_level(logging.INFO, logger="cdclake.locks"), WriterLock(cfg_c, "land", w):
        c_took = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
        landed = land(spark, cfg_c, w)
    a_code, a_err = finish(a)

    assert a_code == 0, a_err[-3000:]
    assert b_code == 1, b_err[-3000:]
    (line,) = [ln for ln in b_err.splitlines() if ln.startswith("error: ")]
    assert line.startswith(f"error: topic {topic} in catalog lake is being written by pipeline locks_a_{unique} "
                           f"stage land window [2024-01-01T00:00:00Z, 2024-01-01T01:00:00Z) on host "
                           f"{socket.gethostname()} pid {a.pid} (Airflow dag cdc_locks_a_{unique} run manual__1) since "), line
    assert f"locks_b_{unique} land gave up after waiting 0s (locks.wait_s 0)" in line, line
    assert "land done" not in b_err and "SparkContext" not in b_err  # B never started Spark, never wrote

    assert [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()][0].endswith(
        f"held by pipeline locks_a_{unique} stage land window [2024-01-01T00:00:00Z, 2024-01-01T01:00:00Z) on host "
        f"{socket.gethostname()} pid {a.pid} (Airflow dag cdc_locks_a_{unique} run manual__1)")  # C waited for A ...
    assert c_took >= log_time(a_err, "writer lock released")  # ... and wrote after A was done
    assert landed == {topic: 30}
    assert not [r for r in holders(cfg) if r["topic"] == topic]

    from pyiceberg.expressions import EqualTo

    from cdclake.catalog import pyiceberg_catalog
    from cdclake.lake import RAW_TABLE

    raw = pyiceberg_catalog(cfg.catalog).load_table(RAW_TABLE).scan(
        row_filter=EqualTo("kafka_topic", topic), selected_fields=("kafka_partition", "kafka_offset")).to_pandas()
    assert len(raw) == 30 and len(raw.drop_duplicates()) == 30


def insert_holder(cfg, topic: str, **values) -> None:
    """A lock row as another run would have left it."""
    import sqlalchemy as sa

    from cdclake.catalog import pyiceberg_catalog

    now = int(time.time() * 1000)
    row = {"catalog_name": cfg.catalog.name, "topic": topic, "owner": "other", "pipeline": "other", "stage": "land",
           "run_window": "[2024-01-01T00:00:00Z, 2024-01-01T01:00:00Z)", "host": socket.gethostname(), "pid": 1,
           "pid_start": None, "dag_id": None, "run_id": None, "acquired_ms": now, "renewed_ms": now, **values}
    engine = pyiceberg_catalog(cfg.catalog).engine
    WriterLock(cfg, "setup", topics=[topic], wait_s=0)._connect()  # the lock table exists
    with engine.begin() as conn:
        conn.execute(sa.text(f"INSERT INTO {LOCK_TABLE} ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"), row)
    engine.dispose()


def test_dead_or_stale_holder_is_taken_over_at_once(stack, unique):
    """A holder on this host whose process is gone, and a holder elsewhere not renewed for
    ``stale_s``, are taken over with no wait; a live holder elsewhere is not."""
    dead, stale, live = (f"locks.{x}.{unique}" for x in ("dead", "stale", "live"))
    cfg = load_pipeline(write_pipeline(f"locks_t_{unique}", [{"topic": t, "format": "debezium-json"}
                                                               for t in (dead, stale, live)], locks={"wait_s": 0, "stale_s": 5}))
    gone = subprocess.Popen(["true"])
    gone.wait()
    insert_holder(cfg, dead, pid=gone.pid)
    insert_holder(cfg, stale, host="elsewhere", pid=os.getpid(), renewed_ms=int(time.time() * 1000) - 10_000)
    insert_holder(cfg, live, host="elsewhere", pid=os.getpid(), dag_id="cdc_x", run_id="scheduled__2024")

    t0 = time.monotonic()
    with WriterLock(cfg, "land", Window(hour(0), hour(1)), topics=[dead, stale]) as lock:
        assert time.monotonic() - t0 < 2
        mine = {r["topic"]: r for r in holders(cfg) if r["owner"] == lock.owner}
        assert set(mine) == {dead, stale} and mine[dead]["pid"] == os.getpid()
    assert not any(r["topic"] in (dead, stale) for r in holders(cfg))  # released

    with pytest.raises(WriterLockBusy, match=rf"^topic {re.escape(live)} in catalog lake is being written by pipeline "
                                             r"other stage land window .* on host elsewhere pid \d+ "
                                             r"\(Airflow dag cdc_x run scheduled__2024\) since "):
        WriterLock(cfg, "land", Window(hour(0), hour(1)), topics=[dead, live]).acquire()
    assert not any(r["topic"] == dead for r in holders(cfg))  # what it had taken is given back


def test_heartbeat_keeps_a_long_run_s_lock(stack, unique):
    """A holder renews its rows while it runs: past ``stale_s`` it still holds them."""
    topic = f"locks.beat.{unique}"
    cfg = load_pipeline(write_pipeline(f"locks_h_{unique}", [{"topic": topic, "format": "debezium-json"}],
                                       locks={"wait_s": 0, "stale_s": 5}))
    with WriterLock(cfg, "silver", Window(hour(0), hour(1))) as lock:
        assert lock.heartbeat_s() == 1.25
        time.sleep(6.5)
        (row,) = [r for r in holders(cfg) if r["topic"] == topic]
        assert time.time() * 1000 - row["renewed_ms"] < 2500 and row["owner"] == lock.owner
        other = WriterLock(cfg, "silver", Window(hour(0), hour(1)), stale_s=5)
        other.host = "elsewhere"  # a run on another host cannot see this process: only the renewals tell
        with pytest.raises(WriterLockBusy, match=f"stage silver .* pid {os.getpid()} "):
            other.acquire()
    assert not lock.lost
