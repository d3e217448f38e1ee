"""Airflow operators of the CDC pipeline (this folder is on Airflow's sys.path).

- :class:`GateOperator` runs a stage's Great Expectations suite (``cdclake.gates``) and fails
  the task with a readable summary, naming the failed expectations and the Data Docs page.
- :class:`StageJobOperator` runs a stage job in ``jobs/`` with spark-submit; a job that exits
  with the bad-input code fails its task at once, without retries; :func:`stage_job` builds it
  from the pipeline's settings.
- :func:`failure_callback` resolves the pipeline's ``airflow.on_failure_callback``.
"""
from __future__ import annotations

import datetime as dt
import importlib
import os
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "jobs"
WINDOW = "ti.xcom_pull(task_ids='window')"


class GateOperator(BaseOperator):
    """Validate one stage's output for the run's window; fail the task when the gate fails.

    :param stage: ``land``, ``normalize`` or ``silver``.
    :param pipeline: path of the pipeline YAML file.
    :param start, end: window bounds (ISO-8601 hours, templated).
    :param topics: comma-separated topics (templated; empty for all).
    Raises ``AirflowException`` with the failed expectations (``cdclake.gates.GateFailed``).
    """

    template_fields: Sequence[str] = ("start", "end", "topics")
    ui_color = "#e8f4d4"

    def __init__(self, *, stage: str, pipeline: str, start: str, end: str, topics: str = "", **kwargs):
        super().__init__(**kwargs)
        self.stage, self.pipeline, self.start, self.end, self.topics = stage, pipeline, start, end, topics

    def execute(self, context):
        from airflow.exceptions import AirflowException

        from cdclake.config import load_pipeline
        from cdclake.gates import GateFailed, run_gate
        from cdclake.window import make_window

        cfg = load_pipeline(self.pipeline)
        window = make_window(self.start, self.end, self.topics or None, known_topics=cfg.topics())
        try:
            return run_gate(self.stage, cfg, window)
        except GateFailed as exc:
            raise AirflowException(str(exc)) from None


class StageJobOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` of a stage job (``jobs/<stage>.py``).

    A job that exits with :data:`cdclake.errors.BAD_INPUT` (2: a bad pipeline file, window or
    catalog directory; the job's last log line says which) fails its task at once: a retry would
    fail the same way. Any other failure raises the provider's ``AirflowException``, which Airflow
    retries (``airflow.retries``). The exit code is spark-submit's: the job's own in client deploy
    mode.
    """

    def execute(self, context):
        from airflow.exceptions import AirflowException
        from airflow.sdk.exceptions import AirflowFailException

        from cdclake.errors import BAD_INPUT

        try:
            return super().execute(context)
        except AirflowException as exc:
            process = getattr(self._hook, "_submit_sp", None)
            if process is not None and process.returncode == BAD_INPUT:
                raise AirflowFailException(f"the {self.task_id} job exited with {BAD_INPUT} (bad input: pipeline file, "
                                           "window or catalog directory; its 'error:' line above says which), "
                                           "so it is not retried") from exc
            raise


def failure_callback(cfg) -> Optional[Callable]:
    """The callable ``airflow.on_failure_callback`` names (``"module:function"``), or None.

    Raises ``ImportError`` or ``AttributeError`` (shown as the DAG file's import error) when it
    cannot be imported.
    """
    if not cfg.airflow.on_failure_callback:
        return None
    module, _, name = cfg.airflow.on_failure_callback.partition(":")
    return getattr(importlib.import_module(module), name)


def stage_job(stage: str, cfg, **kwargs) -> StageJobOperator:
    """The :class:`StageJobOperator` running ``jobs/<stage>.py`` over the run's window, with the
    pipeline's ``airflow.execution_timeout_s`` and ``airflow.pool``."""
    from cdclake.catalog import spark_jars

    if cfg.airflow.pool:
        kwargs.setdefault("pool", cfg.airflow.pool)
    return StageJobOperator(
        task_id="run",
        execution_timeout=dt.timedelta(seconds=getattr(cfg.airflow.execution_timeout_s, stage)),
        application=str(JOBS / f"{stage}.py"),
        conn_id=cfg.airflow.spark_conn_id,
        name=f"cdc-{cfg.name}-{stage}",
        jars=",".join(spark_jars(cfg.catalog)),
        driver_memory=cfg.spark.driver_memory,
        executor_memory=cfg.spark.executor_memory,
        executor_cores=cfg.spark.executor_cores,
        application_args=["--pipeline", cfg.path, "--start", "{{ %s['start'] }}" % WINDOW,
                          "--end", "{{ %s['end'] }}" % WINDOW, "--topics", "{{ %s['topics'] }}" % WINDOW],
        env_vars={"PYTHONPATH": os.pathsep.join(filter(None, [str(JOBS), os.environ.get("PYTHONPATH")])),
                  "PYSPARK_PYTHON": sys.executable, "TZ": "UTC", "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
                  **({"CDC_STATE_DIR": os.environ["CDC_STATE_DIR"]} if "CDC_STATE_DIR" in os.environ else {})},
        **kwargs,
    )


def gate(stage: str, cfg, **kwargs) -> GateOperator:
    """The gate task of ``stage`` over the run's window (never retried: a gate judges data), with
    the pipeline's ``airflow.execution_timeout_s.gate``."""
    return GateOperator(task_id="gate", stage=stage, pipeline=cfg.path, start="{{ %s['start'] }}" % WINDOW,
                        end="{{ %s['end'] }}" % WINDOW, topics="{{ %s['topics'] }}" % WINDOW, retries=0,
                        execution_timeout=dt.timedelta(seconds=cfg.airflow.execution_timeout_s.gate), **kwargs)
