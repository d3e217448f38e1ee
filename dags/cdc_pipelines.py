"""One DAG per pipeline file in ``config/pipelines/`` (or ``$CDC_PIPELINES_DIR``): ``cdc_<file stem>``.

window → land (job, gate) → normalize (job, gate) → silver (job, gate). Params ``start``/``end``
(ISO-8601 hours, UTC) backfill a range; ``topics`` narrows the sources. No business logic here:
the window rule, the jobs and the gates live in ``jobs/cdclake``.
"""
from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, TaskGroup, get_current_context, task
from cdc_operators import gate, stage_job

from cdclake.config import load_pipelines
from cdclake.window import resolve_run_window

STAGES = ("land", "normalize", "silver")


@task(task_id="window")
def window() -> dict:
    """The run's window: params, else the data interval, else the hour before run_after."""
    ctx = get_current_context()
    return resolve_run_window(ctx["params"], ctx.get("data_interval_start"), ctx.get("data_interval_end"),
                              ctx["dag_run"].run_after)


for cfg in load_pipelines():
    with DAG(
        dag_id=cfg.dag_id,
        description=f"CDC pipeline {cfg.name}: {', '.join(cfg.topics())} -> raw -> bronze -> silver",
        schedule=cfg.airflow.schedule,
        start_date=dt.datetime.fromisoformat(cfg.airflow.start_date),
        catchup=False,
        max_active_runs=1,
        default_args={"retries": cfg.airflow.retries, "retry_delay": dt.timedelta(seconds=cfg.airflow.retry_delay_s)},
        params={
            "start": Param(None, type=["null", "string"], description="Window start, ISO-8601 hour in UTC (backfill)"),
            "end": Param(None, type=["null", "string"], description="Window end (exclusive), ISO-8601 hour in UTC"),
            "topics": Param([], type="array", description="Topics to process (default: all of the pipeline)"),
        },
        tags=["cdc", cfg.name],
        doc_md=__doc__,
    ) as dag:
        previous = window()
        for stage in STAGES:
            with TaskGroup(stage) as group:
                stage_job(stage, cfg) >> gate(stage, cfg)
            previous >> group
            previous = group
    globals()[cfg.dag_id] = dag
