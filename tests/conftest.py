"""Shared test setup: real parts only.

One embedded Kafka-protocol broker, one SQLite Iceberg catalog with a local warehouse, one Spark
session (local[2]) and one Airflow home for the whole run, all in a temporary state directory.
Tests keep out of each other's way with their own topic names and silver namespaces.
"""
from __future__ import annotations

import csv
import json
import logging
import os
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "jobs"
if str(JOBS) not in sys.path:
    sys.path.insert(0, str(JOBS))
if str(REPO / "plugins") not in sys.path:
    sys.path.insert(0, str(REPO / "plugins"))

# The shared test helpers (krec, parse, one, sample, landed: tests/helpers.py) assert too: their
# failures get pytest's assertion messages, as the test modules' own do.
pytest.register_assert_rewrite("helpers")

#: ``shared/`` beside the clone: seeds and conformance vectors, read in place.


def _shared_dir() -> Path:
    """The vendor documents and conformance vectors, kept outside the repository: ``CDC_SHARED_DIR``;
    else ``shared/`` beside this checkout; else beside the local repository this checkout was
    cloned from (``git clone . /tmp/x`` runs the suite against the same documents)."""
    if os.environ.get("CDC_SHARED_DIR"):
        return Path(os.environ["CDC_SHARED_DIR"])
    beside = REPO.parent / "shared"
    if beside.is_dir():
        return beside
    import subprocess

    url = subprocess.run(["git", "-C", str(REPO), "config", "--get", "remote.origin.url"],
                         capture_output=True, text=True).stdout.strip().removeprefix("file://")
    origin = Path(url).parent / "shared" if url.startswith("/") else None
    return origin if origin is not None and origin.is_dir() else beside


SHARED = _shared_dir()
CONFORMANCE = SHARED / "conformance"
SEEDS = SHARED / "seeds"

# Everything this run creates lives in one temporary state directory; set before Airflow loads.
STATE = Path(tempfile.mkdtemp(prefix="cdclake-test-"))
os.environ["CDC_STATE_DIR"] = str(STATE)
os.environ["CDC_PIPELINES_DIR"] = str(STATE / "pipelines")
(STATE / "pipelines").mkdir()
os.environ["TZ"] = "UTC"
time.tzset()
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(JOBS), os.environ.get("PYTHONPATH", "")) if p)

from cdclake.embedded import airflow_env  # noqa: E402

logging.getLogger("py4j").setLevel(logging.WARNING)

for _k, _v in airflow_env(STATE).items():
    os.environ[_k] = _v


@pytest.fixture(scope="session")
def stack():
    """The embedded broker and catalog for this run: ``{"bootstrap": ..., "state": Path}``."""
    from cdclake import embedded

    env = embedded.up(STATE)
    yield {"bootstrap": env["CDC_KAFKA_BOOTSTRAP"], "state": STATE}
    embedded.stop_broker(STATE)


def write_pipeline(name: str, sources: list[dict], **sections) -> Path:
    """Write a pipeline YAML on the run's stack into ``$CDC_PIPELINES_DIR`` and return its path."""
    import yaml

    doc = {
        "kafka": {"bootstrap_servers": "${CDC_KAFKA_BOOTSTRAP}", "timeout_s": 10},
        "catalog": {"name": "lake", "uri": "jdbc:sqlite:${CDC_STATE_DIR}/catalog.db",
                    "warehouse": "file://${CDC_STATE_DIR}/warehouse"},
        "sources": sources,
        **sections,
    }
    path = STATE / "pipelines" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def spark(stack):
    """The run's Spark session (local[2]) on the run's catalog."""
    from cdclake.catalog import spark_session
    from cdclake.config import load_pipeline

    cfg = load_pipeline(write_pipeline("_session", [{"topic": "_session", "format": "debezium-json"}]))
    (STATE / "pipelines" / "_session.yaml").unlink()
    session = spark_session(cfg, app_name="cdclake-tests")
    yield session
    session.stop()


@pytest.fixture
def unique():
    """A short unique suffix for topic and namespace names."""
    return uuid.uuid4().hex[:8]


def produce(bootstrap: str, topic: str, records: list[tuple], partitions: int = 1, create: bool = True) -> None:
    """Create ``topic`` (unless ``create`` is false: append to it) and produce ``(partition,
    timestamp_ms, key, value)`` tuples (bytes or str), optionally with a fifth item: the record's
    headers as ``(name, bytes or None)`` pairs."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    if create:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic]
        fut.result(timeout=10)
    prod = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors = []
    for part, ts, key, value, *headers in records:
        enc = lambda v: v.encode() if isinstance(v, str) else v  # noqa: E731
        prod.produce(topic, value=enc(value), key=enc(key), partition=part, timestamp=ts,
                     headers=(headers[0] or None) if headers else None,
                     on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert prod.flush(30) == 0
    assert not errors, errors


def json_edit(value: bytes, *path_and_value) -> bytes:
    """``value`` (JSON bytes) with ``doc[p0][p1]... = v`` for the path and the value given last."""
    *path, new = path_and_value
    doc = json.loads(value)
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = new
    return json.dumps(doc).encode()


def f32(x) -> float:
    """``x`` rounded to a 32-bit float (Flink's products.weight is a FLOAT)."""
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def products(state: dict) -> dict[int, tuple]:
    """Flink's ``products`` table of a reference-model state (one table): id → (name, description,
    weight as a 32-bit float), the shape of :func:`flink_expected`."""
    (table,) = state.values()
    return {int(r["id"]): (r["name"], r["description"], f32(r["weight"])) for r in table.values()}


def flink_expected(name: str) -> dict[int, tuple]:
    """A final state from ``flink/expected/``: ``{id: (name, description, weight as float32)}``."""
    with open(CONFORMANCE / "flink" / "expected" / name, newline="", encoding="utf-8") as fh:
        return {int(r["id"]): (r["name"], r["description"], f32(r["weight"])) for r in csv.DictReader(fh)}


def json_lines(path: Path) -> list[str]:
    """Lines of a conformance file that parse as JSON (licence comment lines skipped)."""
    out = []
    for line in path.read_text().splitlines():
        try:
            json.loads(line)
        except ValueError:
            continue
        out.append(line)
    return out


def pytest_configure(config):
    config.addinivalue_line("markers", "extended: slow end-to-end tests run by make test-extended, not make test")


#: The modules that take longest (measured in a whole ``make test``), longest first: ``make test``
#: runs modules in two processes (pytest-xdist, ``--dist loadfile --no-loadscope-reorder``), which
#: take them in collection order, so the long ones start first and the short ones fill in around
#: them. (Without ``--no-loadscope-reorder`` xdist orders modules by their number of tests.)
SLOW_FIRST = ("test_production", "test_silver_properties", "test_silver_snapshots", "test_real_debezium", "test_conformance_paimon",
              "test_inspect", "test_faults", "test_silver_semantics", "test_formats_pipeline", "test_real_sources",
              "test_hostile_names", "test_qlik_pipeline", "test_transactions", "test_gates", "test_collapse",
              "test_dag_ops", "test_maintenance", "test_locks", "test_fuzz", "test_ledger", "test_conformance_flink",
              "test_future_skew", "test_types", "test_run_errors")


def pytest_collection_modifyitems(session, config, items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.module.__name__.rsplit(".", 1)[-1], len(rank)))
