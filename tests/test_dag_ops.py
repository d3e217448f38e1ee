"""The DAG's operational settings, run for real: params refused at trigger, limits, pool, callback.

- The Trigger form's params: ``start``/``end`` are date-time fields that refuse a value that is
  not an ISO-8601 hour, ``topics`` a choice among the pipeline's topics; a bad value is refused
  when the run is created, before any task runs.
- ``airflow.execution_timeout_s``, ``airflow.pool`` and ``airflow.on_failure_callback`` reach
  the tasks.
- A stage job that exits with the bad-input code (2: here a catalog directory that does not
  exist) fails its task at once although the pipeline allows retries, and the pipeline's failure
  callback runs (it writes a file): ``dag.test()`` with spark-submit, no mocks. A window that
  ends before it starts fails the ``window`` task without retries, and no job runs.
"""
from __future__ import annotations

import copy
import datetime as dt
import importlib.util
import os
import subprocess
import sys

import pytest
from conftest import REPO, STATE, write_pipeline

from cdclake.airflow_local import airflow_bin, env, migrate

CALLBACK = '''
import json, os
def record(context):
    ti = context["ti"]
    with open(os.environ["CDC_TEST_CALLBACK_FILE"], "a") as f:
        f.write(json.dumps({"task": ti.task_id, "try": ti.try_number}) + "\\n")
'''


@pytest.fixture(scope="module")
def ops_dag(stack, tmp_path_factory):
    """A pipeline with retries, a pool, timeouts and a failure callback, whose catalog directory
    does not exist; the DAG file imported with it alone."""
    tmp = tmp_path_factory.mktemp("dag-ops")
    (tmp / "cdc_test_callback.py").write_text(CALLBACK)
    sys.path.insert(0, str(tmp))
    os.environ["CDC_TEST_CALLBACK_FILE"] = str(tmp / "failures.jsonl")
    pipelines = STATE / "ops-pipelines"
    pipelines.mkdir(exist_ok=True)
    saved = os.environ["CDC_PIPELINES_DIR"]
    os.environ["CDC_PIPELINES_DIR"] = str(pipelines)
    path = write_pipeline("opstest", [{"topic": "ops.a", "format": "debezium-json"},
                                      {"topic": "ops.b", "format": "canal-json"}],
                          catalog={"name": "lake", "uri": f"jdbc:sqlite:{tmp}/missing/catalog.db",
                                   "warehouse": f"file://{tmp}/warehouse"},
                          airflow={"retries": 2, "retry_delay_s": 1, "pool": "cdc_ops", "pool_slots": 2,
                                   "execution_timeout_s": {"land": 1200, "gate": 300},
                                   "on_failure_callback": "cdc_test_callback:record"})
    path.rename(pipelines / "opstest.yaml")
    migrate()  # and the pool the pipeline names
    spec = importlib.util.spec_from_file_location("cdc_pipelines_ops", REPO / "dags" / "cdc_pipelines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module.cdc_opstest, tmp / "failures.jsonl"
    os.environ["CDC_PIPELINES_DIR"] = saved
    sys.path.remove(str(tmp))


def _validated(dag, **conf):
    params = copy.deepcopy(dag.params)
    for k, v in conf.items():
        params[k] = v
    return params.validate()


@pytest.mark.parametrize("conf", [
    {"start": "2024-01-01T03:00:00Z", "end": "2024-01-01T05:00:00+00:00"},
    {"start": "2024-01-01T03", "end": "2024-01-01 04:00"},
    {"topics": ["ops.b"]},
    {"topics": ["ops.a", "ops.b"]},
    {},
])
def test_good_params_are_taken(ops_dag, conf):
    dag, _ = ops_dag
    assert _validated(dag, **conf)["topics"] == conf.get("topics", [])


@pytest.mark.parametrize("conf", [
    {"start": "yesterday", "end": "2024-01-01T05:00:00Z"},
    {"start": "2024-01-01T03:30:00Z", "end": "2024-01-01T05:00:00Z"},
    {"start": "2024-01-01T03:00:00Z", "end": 5},
    {"topics": ["ops.c"]},
    {"topics": ["ops.a", "ops.a"]},
    {"topics": "ops.a"},
])
def test_bad_params_are_refused_when_the_run_is_created(ops_dag, conf):
    from airflow.exceptions import ParamValidationError

    dag, _ = ops_dag
    with pytest.raises(ParamValidationError):
        _validated(dag, **conf)
    with pytest.raises(ParamValidationError):
        dag.test(run_conf=conf)


def test_form_fields(ops_dag):
    dag, _ = ops_dag
    schema = {k: dag.params.get_param(k).schema for k in ("start", "end", "topics")}
    assert schema["start"]["format"] == schema["end"]["format"] == "date-time"
    assert schema["topics"]["items"]["enum"] == schema["topics"]["examples"] == ["ops.a", "ops.b"]
    # the Trigger form's multi-select sends null once every topic is removed: the whole pipeline
    assert _validated(dag, topics=None)["topics"] is None


def test_limits_pool_and_callback_reach_the_tasks(ops_dag):
    dag, _ = ops_dag
    land, normalize, gate = (dag.get_task(t) for t in ("land.run", "normalize.run", "land.gate"))
    assert land.execution_timeout == dt.timedelta(seconds=1200)
    assert normalize.execution_timeout == dt.timedelta(seconds=3600)  # the default
    assert gate.execution_timeout == dt.timedelta(seconds=300)
    assert land.pool == normalize.pool == "cdc_ops"
    assert land.retries == 2 and gate.retries == 0
    assert land.on_failure_callback and land.on_failure_callback[0].__name__ == "record"


def test_the_pool_is_created_with_its_slots(ops_dag):
    import json

    out = subprocess.run([airflow_bin(), "pools", "get", "cdc_ops", "-o", "json"], env=env(), check=True,
                         capture_output=True, text=True).stdout
    assert json.loads(out)[0]["slots"] in (2, "2"), out


def test_bad_input_fails_at_once_and_calls_back(ops_dag):
    """The land job exits 2 (no catalog directory): failed on its first try, not up for retry."""
    dag, calls = ops_dag
    run = dag.test(run_conf={"start": "2024-01-01T00:00:00Z", "end": "2024-01-01T01:00:00Z"})
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) in ("failed", "DagRunState.FAILED"), (run.state, states)
    assert states["window"] == "success" and states["land.run"] == "failed", states
    assert states["normalize.run"] == "upstream_failed", states
    assert calls.read_text().splitlines() == ['{"task": "land.run", "try": 1}'], calls.read_text()


def test_a_bad_window_fails_before_any_job(ops_dag):
    dag, _ = ops_dag
    run = dag.test(run_conf={"start": "2024-01-01T05:00:00Z", "end": "2024-01-01T01:00:00Z"})
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states["window"] == "failed" and states["land.run"] == "upstream_failed", states
