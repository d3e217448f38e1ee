"""One maintenance DAG per pipeline file in ``config/pipelines/`` (or ``$CDC_PIPELINES_DIR``): ``cdc_<file stem>_maintenance``.

Task ``run``: ``jobs/maintenance.py`` (``cdclake.maintenance.maintain``) compacts data and
position-delete files, expires snapshots, removes orphan files and deletes raw and bronze hours
past retention, as the pipeline's ``maintenance`` section says, holding the writer lock of the
catalog's topics meanwhile (stage runs of those topics wait for it, and it for them). When the
pipeline file has a ``reconcile`` section, task ``reconcile`` follows: ``jobs/reconcile.py``
(``cdclake.reconcile.reconcile``) compares each silver table with its source database and fails,
never retried, when it finds drift. Scheduled by
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
        run = stage_job("maintenance", cfg, window=False)
        if cfg.reconcile is not None:
            run >> stage_job("reconcile", cfg, window=False, task_id="reconcile", retries=0)
    globals()[dag.dag_id] = dag
