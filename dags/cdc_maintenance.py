"""One maintenance DAG per pipeline file in ``config/pipelines/`` (or ``$CDC_PIPELINES_DIR``): ``cdc_<file stem>_maintenance``.

One task, ``run``: ``jobs/maintenance.py`` (``cdclake.maintenance.maintain``) compacts data and
position-delete files, expires snapshots, removes orphan files and deletes raw and bronze hours
past retention, as the pipeline's ``maintenance`` section says, holding the writer lock of the
catalog's topics meanwhile (stage runs of those topics wait for it, and it for them). Scheduled by
``maintenance.schedule`` (default ``@daily``), without catchup, one run at a time, in the
pipeline's ``airflow.pool`` with ``airflow.execution_timeout_s.maintenance``. No business logic
here: it lives in ``jobs/cdclake``.
"""
from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG
from cdc_operators import default_args, stage_job

from cdclake.config import load_pipelines

for cfg in load_pipelines(resolve=False):  # no secrets at parse time: the tasks resolve connections
    with DAG(
        dag_id=f"{cfg.dag_id}_maintenance",
        description=f"Table maintenance of CDC pipeline {cfg.name}: compaction, snapshot expiry, orphan files, retention",
        schedule=cfg.maintenance.schedule,
        start_date=dt.datetime.fromisoformat(cfg.airflow.start_date),
        catchup=False,
        max_active_runs=1,
        default_args=default_args(cfg),
        tags=["cdc", cfg.name, "maintenance"],
        doc_md=__doc__,
    ) as dag:
        stage_job("maintenance", cfg, window=False)
    globals()[dag.dag_id] = dag
