"""The Airflow DAG, run for real with ``dag.test()``: spark-submit jobs and gates over generated traffic."""
from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest
from conftest import REPO, STATE, write_pipeline
from pipeline import H0, silver_rows

from cdclake.sim import SimulatedSource, create_topic, debezium_json, produce
from cdclake.sim.compare import compare_table


@pytest.fixture(scope="module")
def dag_module(stack, spark):
    """A pipeline of its own, Airflow's metadata DB migrated, the DAG file imported."""
    pipelines = STATE / "dag-pipelines"
    pipelines.mkdir(exist_ok=True)
    os.environ["CDC_PIPELINES_DIR"] = str(pipelines)
    src = SimulatedSource(seed=23, start=H0, hours=2)
    topic = "dagtest.shop"
    create_topic(stack["bootstrap"], topic, partitions=2)
    produce(stack["bootstrap"], topic, debezium_json(src.run(), src.tables, partitions=2))
    path = write_pipeline("dagtest", [{"topic": topic, "format": "debezium-json", "table_prefix": "dbz_"}],
                          silver={"namespace": "dagtest"}, airflow={"retries": 0})
    path.rename(pipelines / "dagtest.yaml")
    subprocess.run([str(REPO / ".venv" / "bin" / "airflow") if (REPO / ".venv/bin/airflow").exists() else "airflow",
                    "db", "migrate"], check=True, capture_output=True, env=os.environ)
    spec = importlib.util.spec_from_file_location("cdc_pipelines_under_test", REPO / "dags" / "cdc_pipelines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module, src, pipelines / "dagtest.yaml"
    os.environ["CDC_PIPELINES_DIR"] = str(STATE / "pipelines")


def test_dag_shape(dag_module):
    module, _, _ = dag_module
    dag = module.cdc_dagtest
    assert (dag.schedule, dag.max_active_runs, dag.catchup) == ("@hourly", 1, False)
    assert dag.get_task("land.gate").retries == 0  # a gate judges data: retrying cannot help
    assert {t.task_id for t in dag.tasks} == {"window", "land.run", "land.gate", "normalize.run", "normalize.gate",
                                              "silver.run", "silver.gate"}
    assert dag.get_task("normalize.run").upstream_task_ids == {"land.gate"}


def test_dag_run_equals_source(dag_module, spark):
    module, src, path = dag_module
    run = module.cdc_dagtest.test(run_conf={"start": "2024-01-01T00:00:00Z", "end": "2024-01-01T02:00:00Z"})
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    for t in ("customers", "products", "orders"):
        diffs = compare_table(src.final_state()[t], silver_rows(spark, path, f"dbz_shop__{t}"), list(src.tables[t].primary_key))
        assert not diffs, (t, diffs)
