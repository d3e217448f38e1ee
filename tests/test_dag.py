"""The Airflow DAG, run for real with ``dag.test()``: spark-submit jobs and gates over generated traffic.

The DAG's shape is checked in ``make test``; the whole run is marked ``extended`` (``make
test-extended``): ``test_production.py`` runs the DAG in ``make test`` under Airflow's scheduler,
``test_formats_pipeline.py`` runs these formats through the same library calls, and ``make demo``
runs every format through this DAG.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest
from conftest import REPO, STATE, write_pipeline
from pipeline import H0

from cdclake.sim import SimulatedSource, create_topic, produce
from cdclake.sim.compare import compare_table
from cdclake.sim.wire import WIRE_FORMATS
from cdclake.types import quote_ident

#: The formats the DAG runs here, one per path inside the stage jobs: a JSON envelope parsed in
#: the Python workers (Debezium), a schema-aware parser that needs the schema registry written by
#: normalize's driver first (Qlik Avro), and Avro decoded with fastavro (DTS). Every format runs
#: through the same library calls in ``test_formats_pipeline.py``, and ``make demo`` runs all of
#: them through this DAG.
DAG_FORMATS = [wf for wf in WIRE_FORMATS if wf.format in ("debezium-json", "qlik-avro", "dts-avro")]


@pytest.fixture(scope="module")
def dag_module(stack, spark):
    """A pipeline of its own with every wire format, Airflow's metadata DB migrated, the DAG file imported."""
    pipelines = STATE / "dag-pipelines"
    pipelines.mkdir(exist_ok=True)
    os.environ["CDC_PIPELINES_DIR"] = str(pipelines)
    src = SimulatedSource(seed=23, start=H0, hours=2)
    history = src.run()
    sources = []
    for wf in DAG_FORMATS:
        topic = f"dagtest.{wf.tag}"
        create_topic(stack["bootstrap"], topic, wf.partitions)
        produce(stack["bootstrap"], topic, wf.messages(history, src.tables))
        sources.append({"topic": topic, "format": wf.format, "table_prefix": f"{wf.tag}_", **wf.options})
    path = write_pipeline("dagtest", sources, silver={"namespace": "dagtest"}, airflow={"retries": 0})
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


@pytest.mark.extended
def test_dag_run_equals_source(dag_module, spark):
    """After the DAG, each format's silver tables equal the source, with the source's column types."""
    module, src, path = dag_module
    assert len(DAG_FORMATS) == 3, [wf.format for wf in DAG_FORMATS]
    run = module.cdc_dagtest.test(run_conf={"start": "2024-01-01T00:00:00Z", "end": "2024-01-01T02:00:00Z"})
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    tables = [r["tableName"] for r in spark.sql("SHOW TABLES IN lake.dagtest").collect()]
    for wf in DAG_FORMATS:
        for t, table in src.tables.items():
            (name,) = [n for n in tables if n.startswith(f"{wf.tag}_") and n.endswith(f"__{t}")]
            df = spark.table(f"lake.dagtest.{quote_ident(name)}")
            types = dict(df.dtypes)
            assert all(types[c.name] == c.ctype for c in table.columns), (wf.format, t, types)
            rows = [r.asDict() for r in df.collect()]
            diffs = compare_table(src.final_state()[t], rows, list(table.primary_key))
            assert not diffs, (wf.format, t, diffs)
