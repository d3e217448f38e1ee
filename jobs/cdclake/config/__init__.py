"""Pipeline configuration: one YAML file per pipeline, validated on load.

Files live in ``config/pipelines/`` (override with ``CDC_PIPELINES_DIR``); the DAG id is
``cdc_<file stem>``. Values may use ``${VAR}`` or ``${VAR:-default}``; a variable is looked up in
the process environment, then in the embedded stack's env file ``$CDC_STATE_DIR/stack.env``
(written by ``python -m cdclake.embedded up``). Example::

    kafka:
      bootstrap_servers: ${CDC_KAFKA_BOOTSTRAP}
    catalog:
      name: lake
      uri: jdbc:sqlite:${CDC_STATE_DIR}/catalog.db
      warehouse: file://${CDC_STATE_DIR}/warehouse
    sources:
      - topic: shop.debezium
        format: debezium-json
        primary_key: [id]          # optional: overrides what messages/keys say
        options: {}                # format options

Secrets may come from a connection instead of the file: ``kafka.connection: <conn_id>``,
``catalog.connection: <conn_id>`` and a ``debezium-avro`` source's
``options.schema_registry.connection: <conn_id>`` (host → ``url``, login and password →
``basic_auth_user_info``) name one, in Airflow's connection format (:func:`parse_connection`).
A connection fills what the file leaves empty; a field set in both is a :class:`ConfigError`
naming the field (:func:`apply_connections`). The connection is looked up by ``connections``
(in Airflow, the operators resolve it through Airflow's secrets backends), else in the
environment: ``CDC_CONNECTION_<CONN_ID>`` (set by the stage job operator for its spark-submit),
then ``AIRFLOW_CONN_<CONN_ID>`` (:func:`env_connection`). Secret values never show in the
config's ``repr``/``str``: ``catalog.password`` is a ``SecretStr`` and the secret settings of
``kafka.client`` and a schema registry's ``basic_auth_user_info`` are shown as ``**********``.

The package's modules, whose public names are all importable from here: :mod:`cdclake.config.models`
(the sections of a pipeline file), :mod:`cdclake.config.loading` (:func:`load_pipeline`),
:mod:`cdclake.config.connections` (connections in Airflow's format) and
:mod:`cdclake.config.environment` (paths and ``${VAR}`` expansion).

Errors: :class:`ConfigError` with a one-line message naming the file and the bad key.
"""
from __future__ import annotations

from cdclake.config.connections import (AIRFLOW_CONN_PREFIX, CONNECTION_ENV_PREFIX, Connections, apply_connections,
                                        connection_ids, env_connection, parse_connection)
from cdclake.config.environment import REPO_ROOT, pipelines_dir, stack_value, state_dir
from cdclake.config.loading import load_pipeline, load_pipelines
from cdclake.config.models import (MASK, SECRET_SETTING_RE, AirflowConfig, CatalogConfig, FreshnessConfig, GatesConfig,
                                   KafkaConfig, LandConfig, LocksConfig, MaintenanceConfig, NormalizeConfig, PipelineConfig,
                                   ReconcileConfig, SilverConfig, SourceConfig, SparkConfig, StageTimeouts)
from cdclake.errors import ConfigError

__all__ = [
    "AIRFLOW_CONN_PREFIX", "CONNECTION_ENV_PREFIX", "ConfigError", "Connections", "MASK", "REPO_ROOT",
    "SECRET_SETTING_RE", "AirflowConfig", "CatalogConfig", "FreshnessConfig", "GatesConfig", "KafkaConfig", "LandConfig",
    "LocksConfig", "MaintenanceConfig", "NormalizeConfig", "PipelineConfig", "ReconcileConfig", "SilverConfig",
    "SourceConfig", "SparkConfig", "StageTimeouts", "apply_connections", "connection_ids", "env_connection", "load_pipeline", "load_pipelines",
    "parse_connection", "pipelines_dir", "stack_value", "state_dir",
]
