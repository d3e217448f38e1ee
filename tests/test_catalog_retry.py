"""A locked catalog database is waited for, then reported in one line; a gate retries its reads
after transient errors but never a failed expectation.

The lock is SQLite's own: another connection holding ``BEGIN EXCLUSIVE`` on the catalog file.
"""
from __future__ import annotations

import logging
import sqlite3
import threading
import time

import pytest
from conftest import STATE, produce, write_pipeline
from pipeline import hour, ms

from cdclake import catalog, gates
from cdclake.catalog import CatalogLocked
from cdclake.config import load_pipeline
from cdclake.gates import GateFailed, run_gate
from cdclake.window import Window

W = Window(hour(0), hour(1))


@pytest.fixture(scope="module")
def normalized(stack, spark):
    """A topic landed and normalized for hour 0 (the normalize gate passes on it)."""
    import uuid

    from cdclake.land import land
    from cdclake.normalize import normalize

    u = uuid.uuid4().hex[:8]
    topic = f"catretry.{u}"
    rows = [(0, ms(hour(0)) + i, f'{{"id": {i}}}', f'{{"op": "c", "after": {{"id": {i}}}, "source": {{"table": "t", "ts_ms": {i}}}}}')
            for i in range(10)]
    produce(stack["bootstrap"], topic, rows)
    cfg = load_pipeline(write_pipeline(f"catretry_{u}", [{"topic": topic, "format": "debezium-json", "primary_key": ["id"]}],
                                       silver={"namespace": f"catretry_{u}"}))
    land(spark, cfg, W)
    normalize(spark, cfg, W)
    import pyiceberg.catalog.sql  # noqa: F401  (imported before the lock: the attempts start at once)

    return topic, cfg


def exclusive_lock() -> sqlite3.Connection:
    """A connection holding an exclusive lock on the run's catalog database (readers are locked out too)."""
    con = sqlite3.connect(STATE / "catalog.db", isolation_level=None, check_same_thread=False)
    con.execute("BEGIN EXCLUSIVE")
    return con


def messages(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_locked_catalog_fails_in_one_line_after_retries(normalized, monkeypatch, caplog):
    _topic, cfg = normalized
    monkeypatch.setattr(catalog, "CATALOG_LOCK_WAIT_S", 3.0)
    monkeypatch.setattr(gates, "GATE_RETRY_S", 3.0)
    con = exclusive_lock()
    t0 = time.monotonic()
    try:
        with caplog.at_level(logging.INFO), pytest.raises(CatalogLocked) as err:
            run_gate("normalize", cfg, W)
    finally:
        con.execute("ROLLBACK")
        con.close()
    waited = time.monotonic() - t0
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"catalog lake (jdbc:sqlite:{STATE}/catalog.db) is locked by another connection: "), text
    m = __import__("re").search(r"gave up after waiting ([\d.]+)s \((\d+) tries\): .*database is locked", text)
    assert m and float(m.group(1)) >= 3.0 and int(m.group(2)) >= 2, text
    assert waited >= 3.0
    assert len(messages(caplog, "is locked; retry")) >= 1


def test_lock_released_after_a_while_gate_passes(normalized, caplog):
    """Released after 2.5 s (more than one attempt's busy wait of 1 s): the gate passes."""
    _topic, cfg = normalized
    con = exclusive_lock()
    release = threading.Timer(2.5, lambda: (con.execute("ROLLBACK"), con.close()))
    t0 = time.monotonic()
    release.start()
    try:
        with caplog.at_level(logging.INFO):
            summary = run_gate("normalize", cfg, W)
    finally:
        release.join()
    assert time.monotonic() - t0 >= 2.5
    assert summary["frames"]["counts"] == 1
    assert len(messages(caplog, "is locked; retry")) >= 1  # waited through the backoff, not a failure


def test_failed_expectation_is_not_retried(normalized, spark, caplog):
    topic, cfg = normalized
    spark.sql(f"DELETE FROM lake.bronze.changes WHERE kafka_topic = '{topic}' AND kafka_offset = 3")
    with caplog.at_level(logging.INFO), pytest.raises(GateFailed, match="column_A=raw, column_B=accounted"):
        run_gate("normalize", cfg, W)
    assert len(messages(caplog, "normalize gate for")) == 1  # "building frames, attempt 1" only
    assert messages(caplog, "attempt 1") and not messages(caplog, "attempt 2") and not messages(caplog, "; retry ")
