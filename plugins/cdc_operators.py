"""Airflow operators of the CDC pipeline (this folder is on Airflow's sys.path).

- :class:`GateOperator` runs a stage's Great Expectations suite (``cdclake.gates``) and fails
  the task with a readable summary, naming the failed expectations and the Data Docs page.
- :class:`StageJobOperator` runs a stage job (or the maintenance job) in ``jobs/`` with spark-submit; a job that exits
  with the bad-input code fails its task at once, without retries; :func:`stage_job` builds it
  from the pipeline's settings. It reports the stage's inputs and outputs to OpenLineage
  (``apache-airflow-providers-openlineage``; :func:`openlineage_dataset`).
- The silver gate adds an asset event per silver (and history) table the run changed to the
  alias :func:`silver_tables_alias` (Assets ``iceberg://<catalog>/<namespace>/<table>``).
- :class:`FreshnessOperator` checks every silver table's lag against the pipeline's
  ``freshness.max_lag`` (``cdclake.freshness``) and fails the task naming the late tables, so the
  failure callback fires even when every stage succeeded; :func:`freshness_check` builds it.
- :func:`failure_callback` resolves the pipeline's ``airflow.on_failure_callback``.
- :func:`airflow_connection` resolves a connection the pipeline names (``kafka.connection``,
  ``catalog.connection``) through Airflow (secrets backends, ``AIRFLOW_CONN_<ID>``, the
  metadata database) at run time and registers its secrets with Airflow's secrets masker. The
  gate uses it in the worker; a stage job gets it in spark-submit's environment
  (``CDC_CONNECTION_<ID>``), set when the task runs, never in a template field.
"""
from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import sys
from pathlib import Path
from typing import Callable, Optional, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "jobs"
WINDOW = "ti.xcom_pull(task_ids='window')"


def airflow_connection(conn_id: str) -> Optional[dict]:
    """The connection ``conn_id`` from Airflow (``BaseHook.get_connection``), as the dict
    ``cdclake.config.parse_connection`` gives, or None when Airflow does not know it.

    Its password and the secret settings of its extra are registered with Airflow's secrets
    masker, so that task logs show ``***`` for them.
    """
    from airflow.exceptions import AirflowNotFoundException
    from airflow.sdk import BaseHook
    from airflow.sdk.log import mask_secret

    from cdclake.config import SECRET_SETTING_RE

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    extra = conn.extra_dejson
    if conn.password:
        mask_secret(conn.password)
    for key, value in extra.items():
        if SECRET_SETTING_RE.search(str(key)) and value:
            mask_secret(value)
    return {"conn_type": conn.conn_type, "host": conn.host, "port": conn.port, "login": conn.login,
            "password": conn.password, "schema": conn.schema, "extra": extra}


def connection_env(conn_ids: Sequence[str]) -> dict[str, str]:
    """``CDC_CONNECTION_<ID>`` variables (JSON) handing the connections ``conn_ids`` to a stage
    job; each value is registered with the secrets masker. Raises ``AirflowFailException`` (not
    retried) naming a connection Airflow does not know."""
    from airflow.sdk.exceptions import AirflowFailException
    from airflow.sdk.log import mask_secret

    from cdclake.config import CONNECTION_ENV_PREFIX

    env = {}
    for conn_id in conn_ids:
        conn = airflow_connection(conn_id)
        if conn is None:
            raise AirflowFailException(f"connection {conn_id!r} (named by the pipeline) is not defined in Airflow")
        value = json.dumps({k: v for k, v in conn.items() if v not in (None, "", {})})
        mask_secret(value)
        env[CONNECTION_ENV_PREFIX + conn_id.upper()] = value
    return env


class GateOperator(BaseOperator):
    """Validate one stage's output for the run's window; fail the task when the gate fails.

    :param stage: ``land``, ``normalize`` or ``silver``.
    :param pipeline: path of the pipeline YAML file.
    :param start, end: window bounds (ISO-8601 hours, templated).
    :param topics: comma-separated topics (templated; empty for all).
    :param asset_alias: the name of an ``AssetAlias`` among the task's ``outlets`` (the silver
        gate's, :func:`silver_tables_alias`): once the gate passes, it adds one asset event per
        table the window's latest silver run changed (``cdclake.lineage.window_changes``: Asset
        ``iceberg://<catalog>/<namespace>/<table>``, extra: pipeline, table, window_start,
        window_end, changes, keys_upserted, keys_deleted, topics) and returns their URIs as
        ``asset_events``; an unchanged table gets no event.
    Raises ``AirflowException`` with the failed expectations (``cdclake.gates.GateFailed``).
    """

    template_fields: Sequence[str] = ("start", "end", "topics")
    ui_color = "#e8f4d4"

    def __init__(self, *, stage: str, pipeline: str, start: str, end: str, topics: str = "",
                 asset_alias: Optional[str] = None, **kwargs):
        super().__init__(**kwargs)
        self.stage, self.pipeline, self.start, self.end, self.topics = stage, pipeline, start, end, topics
        self.asset_alias = asset_alias

    def execute(self, context):
        from airflow.exceptions import AirflowException

        from cdclake.config import load_pipeline
        from cdclake.gates import GateFailed, run_gate
        from cdclake.window import make_window

        cfg = load_pipeline(self.pipeline, connections=airflow_connection)
        window = make_window(self.start, self.end, self.topics or None, known_topics=cfg.topics())
        try:
            result = run_gate(self.stage, cfg, window).as_dict()  # a plain dict in XCom
        except GateFailed as exc:
            raise AirflowException(str(exc)) from None
        if self.asset_alias:
            result["asset_events"] = self.add_asset_events(context, cfg, window)
        return result

    def add_asset_events(self, context, cfg, window) -> list[str]:
        """Add an asset event per table the window's latest silver run changed to the alias
        :attr:`asset_alias`; the tables' Asset URIs."""
        from airflow.sdk import Asset, AssetAlias

        from cdclake.lineage import window_changes

        events = context["outlet_events"][AssetAlias(self.asset_alias)]
        changed = window_changes(cfg, window)
        for table in changed:
            events.add(Asset(table.uri), extra=table.extra(cfg.name))
            self.log.info("asset event: %s %s", table.uri, table.extra(cfg.name))
        return [t.uri for t in changed]


class StageJobOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` of a stage job (``jobs/<stage>.py``).

    A job that exits with :data:`cdclake.errors.BAD_INPUT` (2: a bad pipeline file, window or
    catalog directory; the job's last log line says which) fails its task at once: a retry would
    fail the same way. Any other failure raises the provider's ``AirflowException``, which Airflow
    retries (``airflow.retries``). The exit code is spark-submit's: the job's own in client deploy
    mode.

    :param connections: ids of the connections the pipeline names. They are resolved when the
        task runs and handed to spark-submit's environment (:func:`connection_env`), not through
        ``env_vars``, a template field the UI shows. YARN and Kubernetes would put environment
        variables on the spark-submit command line, so the task refuses them there.
    :param stage: ``land``, ``normalize`` or ``silver``: the task reports the stage's inputs and
        outputs to OpenLineage (:meth:`get_openlineage_facets_on_complete`); another value
        (``maintenance``) reports none.
    """

    def __init__(self, *, connections: Sequence[str] = (), stage: str = "", **kwargs):
        super().__init__(**kwargs)
        self.connections = list(connections)
        self.stage = stage

    def get_openlineage_facets_on_complete(self, task_instance):
        """The run's inputs and outputs for ``apache-airflow-providers-openlineage`` (its
        ``OperatorLineage``), read after the job succeeded: ``cdclake.lineage.stage_datasets``
        over the window of the rendered ``--pipeline/--start/--end/--topics`` arguments, each an
        OpenLineage ``Dataset`` with a ``schema`` facet (a lake table's Iceberg schema) and, for a
        lake table, ``catalog`` (framework iceberg, type jdbc, catalog name, warehouse) and
        ``storage`` (iceberg, parquet) facets. Kafka topics: ``kafka://<host>:<port>``, topic."""
        from airflow.providers.openlineage.extractors import OperatorLineage

        from cdclake.config import load_pipeline
        from cdclake.lineage import stage_datasets
        from cdclake.window import make_window

        args = dict(zip(self.application_args[::2], self.application_args[1::2])) if self.application_args else {}
        if not self.stage or "--start" not in args:
            return OperatorLineage()
        cfg = load_pipeline(args["--pipeline"], connections=airflow_connection)
        window = make_window(args["--start"], args["--end"], args.get("--topics") or None, known_topics=cfg.topics())
        inputs, outputs = stage_datasets(cfg, self.stage, window)
        return OperatorLineage(inputs=[openlineage_dataset(cfg, d) for d in inputs],
                               outputs=[openlineage_dataset(cfg, d) for d in outputs])

    def _get_hook(self):
        hook = super()._get_hook()
        if self.connections:
            from airflow.sdk.exceptions import AirflowFailException

            if hook._is_yarn or hook._is_kubernetes:
                raise AirflowFailException("the pipeline's connections are handed to the job in spark-submit's "
                                           "environment, which YARN and Kubernetes put on the command line; "
                                           "use the cluster's own secrets there")
            hook._env_vars = {**(hook._env_vars or {}), **connection_env(self.connections)}
        return hook

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


def openlineage_dataset(cfg, dataset):
    """An OpenLineage ``Dataset`` of a ``cdclake.lineage.LineageDataset``: its namespace and name,
    a ``schema`` facet of its fields and, for a lake table, ``catalog`` and ``storage`` facets
    (OpenLineage's CatalogDatasetFacet and StorageDatasetFacet)."""
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.generated.catalog_dataset import CatalogDatasetFacet
    from openlineage.client.generated.schema_dataset import SchemaDatasetFacet, SchemaDatasetFacetFields
    from openlineage.client.generated.storage_dataset import StorageDatasetFacet

    facets = {}
    if dataset.fields:
        facets["schema"] = SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=n, type=t) for n, t in dataset.fields])
    if dataset.table:
        facets["catalog"] = CatalogDatasetFacet(framework="iceberg", type="jdbc", name=cfg.catalog.name,
                                                warehouseUri=cfg.catalog.warehouse, source="spark")
        facets["storage"] = StorageDatasetFacet(storageLayer="iceberg", fileFormat="parquet")
    return Dataset(namespace=dataset.namespace, name=dataset.name, facets=facets)


def silver_tables_alias(cfg) -> str:
    """The name of the ``AssetAlias`` the pipeline's silver gate adds its asset events to:
    ``<dag_id>.silver_tables``."""
    return f"{cfg.dag_id}.silver_tables"


class FreshnessOperator(BaseOperator):
    """Check the freshness SLAs of a pipeline's silver tables now (``cdclake.freshness.check_freshness``).

    :param pipeline: path of the pipeline YAML file.
    Returns ``[{"table", "newest_source_ts" (ISO-8601 or None), "lag_s", "max_lag_s"}]`` (XCom).
    Raises ``AirflowFailException`` (not retried: a retry minutes later finds the same lag) with
    the one line of ``cdclake.errors.FreshnessError`` naming each late table, its lag and its SLA.
    """

    ui_color = "#fde8d4"

    def __init__(self, *, pipeline: str, **kwargs):
        super().__init__(**kwargs)
        self.pipeline = pipeline

    def execute(self, context):
        from airflow.sdk.exceptions import AirflowFailException

        from cdclake.config import load_pipeline
        from cdclake.freshness import FreshnessError, check_freshness

        cfg = load_pipeline(self.pipeline, connections=airflow_connection)
        try:
            tables = check_freshness(cfg)
        except FreshnessError as exc:
            raise AirflowFailException(str(exc)) from None
        return [{"table": t.table, "newest_source_ts": t.newest_source_ts.isoformat() if t.newest_source_ts else None,
                 "lag_s": t.lag_s, "max_lag_s": t.max_lag_s} for t in tables]


def freshness_check(cfg, **kwargs) -> FreshnessOperator:
    """The ``freshness`` task of a pipeline (:class:`FreshnessOperator`), never retried, with the
    pipeline's ``airflow.execution_timeout_s.gate``."""
    return FreshnessOperator(task_id="freshness", pipeline=cfg.path, retries=0,
                             execution_timeout=dt.timedelta(seconds=cfg.airflow.execution_timeout_s.gate), **kwargs)


def failure_callback(cfg) -> Optional[Callable]:
    """The callable ``airflow.on_failure_callback`` names (``"module:function"``), or None.

    Raises ``ImportError`` or ``AttributeError`` (shown as the DAG file's import error) when it
    cannot be imported.
    """
    if not cfg.airflow.on_failure_callback:
        return None
    module, _, name = cfg.airflow.on_failure_callback.partition(":")
    return getattr(importlib.import_module(module), name)


def default_args(cfg) -> dict:
    """The ``default_args`` of a pipeline's DAGs: ``airflow.retries``, ``retry_delay_s`` and
    ``on_failure_callback`` (:func:`failure_callback`)."""
    return {"retries": cfg.airflow.retries, "retry_delay": dt.timedelta(seconds=cfg.airflow.retry_delay_s),
            **({"on_failure_callback": failure_callback(cfg)} if cfg.airflow.on_failure_callback else {})}


def stage_job(stage: str, cfg, window: bool = True, **kwargs) -> StageJobOperator:
    """The :class:`StageJobOperator` running ``jobs/<stage>.py`` over the run's window, with the
    pipeline's ``airflow.execution_timeout_s.<stage>``, ``airflow.pool`` and connections. ``window``
    false: a job without a window (``maintenance``, ``reconcile``), given ``--pipeline`` only.
    ``task_id`` (in ``kwargs``): default ``run``."""
    from cdclake.catalog import jvm_conf, spark_jars
    from cdclake.config import connection_ids

    args = ["--pipeline", cfg.path]
    if window:
        args += ["--start", "{{ %s['start'] }}" % WINDOW, "--end", "{{ %s['end'] }}" % WINDOW,
                 "--topics", "{{ %s['topics'] }}" % WINDOW]

    if cfg.airflow.pool:
        kwargs.setdefault("pool", cfg.airflow.pool)
    return StageJobOperator(
        task_id=kwargs.pop("task_id", "run"),
        stage=stage,
        execution_timeout=dt.timedelta(seconds=getattr(cfg.airflow.execution_timeout_s, stage)),
        application=str(JOBS / f"{stage}.py"),
        conn_id=cfg.airflow.spark_conn_id,
        connections=connection_ids(cfg),
        name=f"cdc-{cfg.name}-{stage}",
        jars=",".join(spark_jars(cfg.catalog)),
        conf=jvm_conf(cfg),  # before the driver's JVM starts: the job's session is too late for them
        driver_memory=cfg.spark.driver_memory,
        executor_memory=cfg.spark.executor_memory,
        executor_cores=cfg.spark.executor_cores,
        application_args=args,
        env_vars={"PYTHONPATH": os.pathsep.join(filter(None, [str(JOBS), os.environ.get("PYTHONPATH")])),
                  "PYSPARK_PYTHON": sys.executable, "TZ": "UTC", "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
                  **({"CDC_STATE_DIR": os.environ["CDC_STATE_DIR"]} if "CDC_STATE_DIR" in os.environ else {})},
        **kwargs,
    )


def gate(stage: str, cfg, **kwargs) -> GateOperator:
    """The gate task of ``stage`` over the run's window (never retried: a gate judges data), with
    the pipeline's ``airflow.execution_timeout_s.gate``. The silver gate's outlet is the alias
    :func:`silver_tables_alias`, to which it adds an asset event per silver (and history) table
    the run changed: each table is an Asset of the DAG once it has had an event."""
    if stage == "silver":
        from airflow.sdk import AssetAlias

        kwargs.setdefault("asset_alias", silver_tables_alias(cfg))
        kwargs.setdefault("outlets", [AssetAlias(kwargs["asset_alias"])])
    return GateOperator(task_id="gate", stage=stage, pipeline=cfg.path, start="{{ %s['start'] }}" % WINDOW,
                        end="{{ %s['end'] }}" % WINDOW, topics="{{ %s['topics'] }}" % WINDOW, retries=0,
                        execution_timeout=dt.timedelta(seconds=cfg.airflow.execution_timeout_s.gate), **kwargs)
