"""A downstream consumer of a pipeline's silver table: ``cdc_demo_consumer``, scheduled on its Asset.

The pipeline's silver gate adds an asset event for each silver table its run changed (Asset
``iceberg://<catalog>/<namespace>/<table>``, extra: pipeline, table, window_start, window_end,
changes, keys_upserted, keys_deleted, topics); Airflow's scheduler then runs this DAG, whose task
logs and returns the triggering events. The Asset is the demo pipeline's
(``config/pipelines/demo.yaml``) ``dbz_shop__customers`` table, or the URI in
``$CDC_DEMO_CONSUMER_ASSET`` (what the production test points at its own pipeline's table). No
business logic here: the Asset's name comes from ``cdclake.lineage.asset_uri``.
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from airflow.sdk import DAG, Asset, get_current_context, task

from cdclake.config import load_pipeline
from cdclake.lineage import asset_uri

DEMO_PIPELINE = Path(__file__).resolve().parents[1] / "config" / "pipelines" / "demo.yaml"
DEMO_TABLE = "dbz_shop__customers"


def consumed_uri() -> str:
    """``$CDC_DEMO_CONSUMER_ASSET``, else the Asset URI of the demo pipeline's :data:`DEMO_TABLE`."""
    if os.environ.get("CDC_DEMO_CONSUMER_ASSET"):
        return os.environ["CDC_DEMO_CONSUMER_ASSET"]
    cfg = load_pipeline(DEMO_PIPELINE, resolve=False)
    return asset_uri(cfg, cfg.silver.namespace, DEMO_TABLE)


@task(task_id="report")
def report() -> list[dict]:
    """The triggering asset events: ``[{"uri": ..., **extra}]`` (window and counts), each logged.
    An event added through an alias is listed under the Asset and under the alias: taken once."""
    out, seen = [], set()
    for events in get_current_context()["triggering_asset_events"].values():
        for event in events:
            if (event.asset.uri, event.timestamp) in seen:
                continue
            seen.add((event.asset.uri, event.timestamp))
            out.append({"uri": event.asset.uri, **(event.extra or {})})
            print(f"{event.asset.uri} changed: {event.extra}")
    return out


with DAG(
    dag_id="cdc_demo_consumer",
    description="Runs after a CDC pipeline run changed the silver table it is scheduled on",
    schedule=[Asset(consumed_uri())],
    start_date=dt.datetime(2024, 1, 1),
    catchup=False,
    tags=["cdc", "demo"],
    doc_md=__doc__,
) as dag:
    report()
