"""One DAG per pipeline file in ``config/pipelines/`` (or ``$CDC_PIPELINES_DIR``): ``cdc_<file stem>``.

window → land (job, gate) → normalize (job, gate) → silver (job, gate) [→ freshness, when the
pipeline sets ``freshness.max_lag``: fails when a silver table lags past it]. Params ``start``/``end``
(ISO-8601 hours, UTC) backfill a range; ``topics`` narrows the sources. A value of the wrong shape
or an unknown topic is refused when the run is triggered; a window that is not whole hours or
ends before it starts fails the ``window`` task, without retries, before any job runs. Task
limits, the pool of the jobs and the failure callback come from the pipeline's ``airflow``
section. Every silver (and history) table is an Asset ``iceberg://<catalog>/<namespace>/<table>``:
the silver gate adds an event (window and counts as extra) for each table the run changed, through
the alias ``cdc_<name>.silver_tables``, so the tables are listed among the DAG's Assets and a
downstream DAG can be scheduled on one. No business logic here: the window rule, the jobs and the
gates live in ``jobs/cdclake``.
"""
from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, TaskGroup, get_current_context, task
from cdc_operators import default_args, freshness_check, gate, stage_job

from cdclake.config import load_pipelines
from cdclake.window import resolve_run_window

STAGES = ("land", "normalize", "silver")
#: An ISO-8601 time on a whole hour, as the Trigger form's date-time field and users write it:
#: ``2024-01-01T03:00:00Z``, ``2024-01-01T03:00:00+00:00``, ``2024-01-01T03`` (UTC when naive).
ISO_HOUR = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}(:00(:00(\.0+)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$"


@task(task_id="window")
def window() -> dict:
    """The run's window: params, else the data interval, else the hour before run_after. A bad
    window (``cdclake.errors.WindowError``) fails the task at once, without retries."""
    from airflow.sdk.exceptions import AirflowFailException

    from cdclake.errors import WindowError

    ctx = get_current_context()
    try:
        return resolve_run_window(ctx["params"], ctx.get("data_interval_start"), ctx.get("data_interval_end"),
                                  ctx["dag_run"].run_after)
    except WindowError as exc:
        raise AirflowFailException(f"bad window: {exc}") from None


def params(topics: list[str]) -> dict:
    """The DAG's params: ``start`` and ``end`` (date-time fields, an ISO-8601 hour or empty) and
    ``topics`` (a choice among the pipeline's ``topics``; empty or null: all). The Trigger form
    renders ``topics`` as a multi-select of the pipeline's topics (an array param with
    ``examples``), which sends null once every choice is removed."""
    return {
        "start": Param(None, type=["null", "string"], format="date-time", pattern=ISO_HOUR, title="Window start",
                       description="Backfill from this hour (UTC, ISO-8601, e.g. 2024-01-01T03:00:00Z); "
                                   "empty with end empty: the scheduled hour"),
        "end": Param(None, type=["null", "string"], format="date-time", pattern=ISO_HOUR, title="Window end",
                     description="Backfill up to this hour, exclusive (UTC, ISO-8601)"),
        "topics": Param([], type=["null", "array"], items={"type": "string", "enum": list(topics)},
                        examples=list(topics), uniqueItems=True, title="Topics",
                        description="Topics to process (none chosen: all of the pipeline)"),
    }


for cfg in load_pipelines(resolve=False):  # no secrets at parse time: the tasks resolve connections
    with DAG(
        dag_id=cfg.dag_id,
        description=f"CDC pipeline {cfg.name}: {', '.join(cfg.topics())} -> raw -> bronze -> silver",
        schedule=cfg.airflow.schedule,
        start_date=dt.datetime.fromisoformat(cfg.airflow.start_date),
        catchup=False,
        max_active_runs=1,
        default_args=default_args(cfg),
        params=params(cfg.topics()),
        tags=["cdc", cfg.name],
        doc_md=__doc__,
    ) as dag:
        previous = window()
        for stage in STAGES:
            with TaskGroup(stage) as group:
                stage_job(stage, cfg) >> gate(stage, cfg)
            previous >> group
            previous = group
        if cfg.freshness.enabled:  # every silver table's lag against freshness.max_lag
            previous >> freshness_check(cfg)
    globals()[cfg.dag_id] = dag
