"""The DAG on a real Spark standalone cluster: a master and a worker from the pip package on loopback.

``spark_default`` points at the cluster (client deploy mode, the one Spark's standalone manager
allows for Python applications); the stage jobs' executors run on the worker, with the executor
memory, cores and shuffle partitions of the pipeline file; after the run, silver equals the
source. The cluster is started and stopped by :mod:`cdclake.cluster`, as ``make cluster`` does.
"""
from __future__ import annotations

import importlib.util
import json
import os
import urllib.request

import pytest
from conftest import REPO, STATE, write_pipeline
from pipeline import H0

from cdclake import cluster
from cdclake.airflow_local import migrate, spark_connection
from cdclake.embedded import free_port
from cdclake.sim import SimulatedSource, create_topic, produce
from cdclake.sim.compare import compare_table
from cdclake.sim.wire import WIRE_FORMATS
from cdclake.types import quote_ident


@pytest.fixture(scope="module")
def standalone(stack):
    state = STATE / "cluster-test"
    state.mkdir(exist_ok=True)
    web = free_port()
    url = cluster.start(state, port=free_port(), web_port=web, cores=2, memory="1536m")
    assert cluster.master_url(state) == url and cluster.alive_workers(web) == 1
    yield url, web
    assert cluster.stop(state)
    assert cluster.master_url(state) is None


def test_dag_on_a_standalone_cluster_equals_source(standalone, stack, spark):
    url, web = standalone
    (wf,) = [w for w in WIRE_FORMATS if w.format == "debezium-json"]
    src = SimulatedSource(seed=31, start=H0, hours=1)
    history = src.run()
    topic = "clustertest.dbz"
    create_topic(stack["bootstrap"], topic, wf.partitions)
    produce(stack["bootstrap"], topic, wf.messages(history, src.tables))
    pipelines = STATE / "cluster-pipelines"
    pipelines.mkdir(exist_ok=True)
    path = write_pipeline("clustertest", [{"topic": topic, "format": wf.format, **wf.options}],
                          silver={"namespace": "clustertest"}, airflow={"retries": 0},
                          spark={"driver_memory": "1g", "executor_memory": "1g", "executor_cores": 2,
                                 "shuffle_partitions": 3})
    path.rename(pipelines / "clustertest.yaml")
    saved = {k: os.environ.get(k) for k in ("CDC_PIPELINES_DIR", "AIRFLOW_CONN_SPARK_DEFAULT")}
    os.environ["CDC_PIPELINES_DIR"] = str(pipelines)
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_connection(url)
    try:
        migrate()
        spec = importlib.util.spec_from_file_location("cdc_pipelines_cluster", REPO / "dags" / "cdc_pipelines.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        run = module.cdc_clustertest.test(run_conf={"start": "2024-01-01T00:00:00Z", "end": "2024-01-01T01:00:00Z"})
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    # the three stage jobs ran as applications of the cluster, with the pipeline's executor settings
    with urllib.request.urlopen(f"http://127.0.0.1:{web}/json/", timeout=5) as r:
        apps = json.load(r)["completedapps"]
    names = sorted(a["name"] for a in apps if a["name"].startswith("cdc-clustertest-"))
    assert names == ["cdc-clustertest-land", "cdc-clustertest-normalize", "cdc-clustertest-silver"], names
    assert {a["memoryperexecutor"] for a in apps if a["name"] in names} == {1024}
    tables = [r["tableName"] for r in spark.sql("SHOW TABLES IN lake.clustertest").collect()]
    for t, table in src.tables.items():
        (name,) = [n for n in tables if n.endswith(f"__{t}")]
        rows = [r.asDict() for r in spark.table(f"lake.clustertest.{quote_ident(name)}").collect()]
        assert not compare_table(src.final_state()[t], rows, list(table.primary_key)), t
