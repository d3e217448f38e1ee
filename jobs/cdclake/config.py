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

Errors: :class:`ConfigError` with a one-line message naming the file and the bad key.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional
from urllib.parse import parse_qsl, unquote, urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from cdclake.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
#: librdkafka settings whose values are secrets (shown masked in the config's repr).
SECRET_SETTING_RE = re.compile(r"password|secret|token|\.pem$|oauthbearer\.config", re.I)
MASK = "**********"
#: Environment variable prefixes of a connection: the value the stage job operator resolved and
#: handed to its job, then Airflow's own (``airflow connections`` format: JSON or URI).
CONNECTION_ENV_PREFIX = "CDC_CONNECTION_"
AIRFLOW_CONN_PREFIX = "AIRFLOW_CONN_"


def state_dir() -> Path:
    """The directory holding embedded state (broker, catalog, warehouse, Airflow home).

    ``$CDC_STATE_DIR``, default ``<repo>/.state``.
    """
    return Path(os.environ.get("CDC_STATE_DIR") or REPO_ROOT / ".state").resolve()


def pipelines_dir() -> Path:
    """The directory of pipeline YAML files: ``$CDC_PIPELINES_DIR``, default ``<repo>/config/pipelines``."""
    return Path(os.environ.get("CDC_PIPELINES_DIR") or REPO_ROOT / "config" / "pipelines").resolve()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KafkaConfig(_Model):
    """Where the CDC topics are. ``client`` holds extra librdkafka settings (e.g. SASL).

    ``connection``: a connection id whose host gives ``bootstrap_servers``, whose extra JSON gives
    ``client`` settings and whose login/password give ``sasl.username``/``sasl.password``.
    """

    bootstrap_servers: Optional[str] = None
    client: dict[str, Any] = Field(default_factory=dict)
    connection: Optional[str] = None
    timeout_s: float = 10.0
    max_records_per_task: int = 250_000

    @model_validator(mode="after")
    def _servers(self) -> "KafkaConfig":
        if not self.bootstrap_servers and not self.connection:
            raise ValueError("kafka needs bootstrap_servers or a connection")
        return self

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            if name == "client":
                value = {k: MASK if SECRET_SETTING_RE.search(str(k)) else v for k, v in value.items()}
            yield name, value


class CatalogConfig(_Model):
    """The Iceberg catalog shared by Spark and pyiceberg (JDBC catalog: SQLite or PostgreSQL)."""

    name: str = "lake"
    uri: Optional[str] = None
    warehouse: str
    user: Optional[str] = None
    password: Optional[SecretStr] = None
    connection: Optional[str] = None

    @field_validator("uri")
    @classmethod
    def _jdbc(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not v.startswith("jdbc:sqlite:") and not v.startswith("jdbc:postgresql:"):
            raise ValueError("must be a jdbc:sqlite:/abs/path or jdbc:postgresql://host/db URI")
        return v

    @model_validator(mode="after")
    def _has_uri(self) -> "CatalogConfig":
        if not self.uri and not self.connection:
            raise ValueError("catalog needs a uri or a connection")
        return self

    def password_value(self) -> Optional[str]:
        """The password in clear (for the JDBC driver and pyiceberg), or None."""
        return self.password.get_secret_value() if self.password is not None else None


class SourceConfig(_Model):
    """One CDC topic and the format its values are in.

    ``history: true`` keeps an SCD type 2 history table beside each of the topic's silver tables.
    """

    topic: str
    format: str
    primary_key: Optional[list[str]] = None
    primary_keys: dict[str, list[str]] = Field(default_factory=dict)
    table_prefix: str = ""
    history: bool = False
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        from cdclake.formats import formats

        if v not in formats():
            raise ValueError(f"unknown format {v!r}; known formats: {', '.join(formats())}")
        return v

    def __repr_args__(self):
        for name, value in super().__repr_args__():
            if name == "options" and isinstance(value.get("schema_registry"), dict):
                registry = value["schema_registry"]
                value = dict(value, schema_registry={k: MASK if k == "basic_auth_user_info" else v
                                                     for k, v in registry.items()})
            yield name, value

    def parser_options(self) -> dict[str, Any]:
        """Options handed to the parser factory: ``options`` plus the configured keys."""
        opts = dict(self.options)
        if self.primary_key:
            opts["primary_key"] = list(self.primary_key)
        if self.primary_keys:
            opts["primary_keys"] = {k: list(v) for k, v in self.primary_keys.items()}
        return opts


class LandConfig(_Model):
    """How land reads Kafka.

    ``grace_s``: settle time in seconds. A run whose window ended less than ``grace_s`` ago waits
    until then before it reads, so that producers still writing records stamped inside the window
    (a batch in flight at the hour, a lagging connector) are done. A record that arrives later
    still lands, in the next landed hour (the offset ledger, :mod:`cdclake.land`).

    ``max_future_skew_s``: a record stamped more than this many seconds after the time land reads
    it (a producer whose clock runs fast) does not end its hour's offset range: it lands with its
    neighbours, keeps its own timestamp, and is reported (a warning naming topic, partition,
    offset and skew, and the ``future_stamped`` run metric). Default 300 s.
    """

    grace_s: float = Field(300.0, ge=0)
    max_future_skew_s: float = Field(300.0, ge=0)


class NormalizeConfig(_Model):
    """Limits on one raw record; a record past a limit is quarantined with the limit as its reason.

    ``max_value_bytes``: largest Kafka value (and key) parsed, in bytes (default 16 MiB).
    ``max_nesting_depth``: deepest nesting of objects and arrays in a JSON value (and key) of the
    ``*-json`` formats (default 64). Reasons name the field and the limit, e.g.
    ``debezium-json: field 'value': nested deeper than 64 levels (normalize.max_nesting_depth)``.

    The quarantine budget, per topic and landed hour: the normalize gate fails when more than
    ``max_quarantined`` records (default 1000) or more than ``max_quarantine_share`` of the
    hour's records (default 0.5) were quarantined, naming the top reasons with their counts.
    """

    max_value_bytes: int = Field(16 * 1024 * 1024, ge=1)
    max_nesting_depth: int = Field(64, ge=2)
    max_quarantined: int = Field(1000, ge=0)
    max_quarantine_share: float = Field(0.5, ge=0, le=1)


class LocksConfig(_Model):
    """The writer lock: one run at a time writes a topic's partitions in a catalog.

    ``wait_s``: how long a run waits for another run holding one of its topics before it fails
    with a message naming that run. ``stale_s``: a holder that has not renewed its lock for this
    many seconds (a killed process on another host) is taken over; a holder on this host whose
    process is gone is taken over at once.
    """

    wait_s: float = Field(300.0, ge=0)
    stale_s: float = Field(120.0, ge=5)


class SilverConfig(_Model):
    """How silver tables are written.

    ``delete_mode``: ``hard`` removes deleted rows and records a tombstone (key and position) in
    ``<namespace>_tombstones.<table>`` for ``tombstone_retention_hours`` of source time, so that
    late or re-run older changes cannot bring a deleted row back; ``soft`` keeps deleted rows with
    ``_cdc_deleted = true``.

    ``complete_transactions``: apply a transaction's changes only once the whole transaction has
    landed, where the format marks transaction boundaries (Qlik ``transactionLastEvent``,
    SharePlex ``idx``/``size``, DTS ``COMMIT``; see :mod:`cdclake.silver.transactions`).

    ``parallel_tables``: how many source tables of a window are merged at the same time (each
    by its own driver thread, its Spark jobs beside the others'): one table's steps leave cores
    idle (one-task stages, the driver between jobs) that another table's jobs then use. 1 merges
    them one after the other.
    """

    namespace: str = "silver"
    complete_transactions: bool = False
    delete_mode: Literal["hard", "soft"] = "hard"
    tombstone_retention_hours: int = Field(24 * 7, ge=1)
    buckets: int = Field(8, ge=1)
    write_mode: Literal["merge-on-read", "copy-on-write"] = "merge-on-read"
    parallel_tables: int = Field(2, ge=1)


class GatesConfig(_Model):
    """Great Expectations gates: where Data Docs go when a gate fails."""

    enabled: bool = True
    data_docs_dir: Optional[str] = None

    def docs_dir(self) -> Path:
        return Path(self.data_docs_dir) if self.data_docs_dir else state_dir() / "data_docs"


class SparkConfig(_Model):
    """Spark settings for the stage jobs (master comes from the Airflow connection in DAG runs).

    ``executor_memory`` and ``executor_cores`` size each executor on a cluster (local mode runs
    the tasks in the driver); ``shuffle_partitions`` is ``spark.sql.shuffle.partitions``. ``conf``
    is applied last, over everything the pipeline sets.
    """

    master: str = "local[2]"
    driver_memory: str = "2g"
    executor_memory: str = "1g"
    executor_cores: Optional[int] = Field(None, ge=1)
    shuffle_partitions: int = Field(4, ge=1)
    conf: dict[str, str] = Field(default_factory=dict)


class StageTimeouts(_Model):
    """``airflow.execution_timeout_s``: seconds a task of each kind may run before Airflow stops
    it (and retries it, for a stage job: ``airflow.retries``); ``maintenance``: the maintenance
    job (default 6 hours)."""

    land: int = Field(3600, ge=1)
    normalize: int = Field(3600, ge=1)
    silver: int = Field(3600, ge=1)
    gate: int = Field(1800, ge=1)
    maintenance: int = Field(6 * 3600, ge=1)


class AirflowConfig(_Model):
    """DAG settings.

    ``pool``: the Airflow pool of the stage jobs (the Spark jobs), which bounds how many run at
    once across pipelines; it must exist (``airflow pools set <pool> <slots> <description>``;
    ``make airflow`` and the compose stack create it with ``pool_slots`` slots), as Airflow never
    schedules a task of a missing pool. None: Airflow's ``default_pool``.
    ``on_failure_callback``: ``"module:function"`` (importable where the DAG files are parsed),
    called by Airflow with the task's context when a task of the pipeline fails for good.
    """

    schedule: Optional[str] = "@hourly"
    start_date: str = "2024-01-01T00:00:00+00:00"
    retries: int = Field(2, ge=0)
    retry_delay_s: int = Field(60, ge=0)
    spark_conn_id: str = "spark_default"
    execution_timeout_s: StageTimeouts = Field(default_factory=StageTimeouts)
    pool: Optional[str] = None
    pool_slots: int = Field(1, ge=1)
    on_failure_callback: Optional[str] = Field(None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class MaintenanceConfig(_Model):
    """Daily table maintenance (:func:`cdclake.maintenance.maintain`, DAG ``cdc_<name>_maintenance``).

    ``schedule``: the maintenance DAG's schedule (a cron expression or preset, default ``@daily``;
    None: only when triggered).
    ``snapshot_retention_hours``: snapshots older than this many hours are expired (Iceberg
    ``expire_snapshots``), which deletes the files only they referenced; time travel reaches back
    this far (default 72).
    ``retain_last_snapshots``: the number of latest snapshots of each table kept whatever their
    age (default 5).
    ``orphan_file_age_hours``: files no snapshot references and last modified more than this many
    hours ago are deleted (Iceberg ``remove_orphan_files``); at least 24, so that the files of a
    write still in flight outside the writer lock are never taken for orphans (default 72).
    ``raw_retention_hours``: landed hours of ``raw.kafka_records`` older than this many hours are
    deleted for the pipeline's topics (None, the default: kept forever). A window whose raw hours
    are gone can no longer be normalized again (land reads them again from Kafka while Kafka keeps
    them).
    ``bronze_retention_hours``: the same for ``bronze.changes``, ``bronze.quarantine`` and
    ``bronze.control_events`` (None, the default: kept forever). With
    ``silver.complete_transactions`` it must exceed the longest a transaction stays incomplete: the
    silver stage reads a transaction's changes from every landed hour. Silver, history and
    tombstone tables are never subject to retention.
    ``rewrite_data_files``: compact small data files (and apply position deletes) with Iceberg
    ``rewrite_data_files`` on the silver, history, tombstone and bronze tables (default true).
    """

    schedule: Optional[str] = "@daily"
    snapshot_retention_hours: int = Field(72, ge=1)
    retain_last_snapshots: int = Field(5, ge=1)
    orphan_file_age_hours: int = Field(72, ge=24)
    raw_retention_hours: Optional[int] = Field(None, ge=1)
    bronze_retention_hours: Optional[int] = Field(None, ge=1)
    rewrite_data_files: bool = True


class PipelineConfig(_Model):
    """One pipeline file. ``name`` defaults to the file stem."""

    name: str
    kafka: KafkaConfig
    catalog: CatalogConfig
    sources: list[SourceConfig] = Field(min_length=1)
    land: LandConfig = Field(default_factory=LandConfig)
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    locks: LocksConfig = Field(default_factory=LocksConfig)
    silver: SilverConfig = Field(default_factory=SilverConfig)
    gates: GatesConfig = Field(default_factory=GatesConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    airflow: AirflowConfig = Field(default_factory=AirflowConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)
    path: Optional[str] = None

    @field_validator("sources")
    @classmethod
    def _unique_topics(cls, v: list[SourceConfig]) -> list[SourceConfig]:
        seen = set()
        for s in v:
            if s.topic in seen:
                raise ValueError(f"topic {s.topic!r} is listed twice")
            seen.add(s.topic)
        return v

    @property
    def dag_id(self) -> str:
        return f"cdc_{self.name}"

    def source(self, topic: str) -> SourceConfig:
        for s in self.sources:
            if s.topic == topic:
                return s
        raise ConfigError(f"{self.path}: topic {topic!r} is not a source of pipeline {self.name!r}")

    def topics(self) -> list[str]:
        return [s.topic for s in self.sources]


def stack_value(name: str) -> Optional[str]:
    """``$name`` from the environment, else from the embedded stack's ``stack.env`` (what ``make
    stack`` and the demo write: ``CDC_KAFKA_BOOTSTRAP``, ``CDC_SCHEMA_REGISTRY_URL`` ...), else None."""
    return os.environ.get(name) or _stack_env().get(name)


def _stack_env() -> dict[str, str]:
    env_file = state_dir() / "stack.env"
    out: dict[str, str] = {"CDC_STATE_DIR": str(state_dir())}
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def _expand(obj: Any, where: str, lookup: dict[str, str]) -> Any:
    if isinstance(obj, dict):
        return {k: _expand(v, f"{where}.{k}" if where else str(k), lookup) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_expand(v, f"{where}[{i}]", lookup) for i, v in enumerate(obj)]
    if isinstance(obj, str):

        def sub(m: re.Match) -> str:
            name, default = m.group(1), m.group(2)
            val = os.environ.get(name) or lookup.get(name)
            if val is None:
                if default is None:
                    raise ConfigError(f"key '{where}': environment variable {name} is not set (and no default given)")
                return default
            return val

        return _VAR_RE.sub(sub, obj)
    return obj


Connections = Callable[[str], Optional[Mapping[str, Any]]]


def parse_connection(value: str, conn_id: str, where: str = "") -> dict[str, Any]:
    """A connection in Airflow's serialized forms, JSON or URI, as a dict of ``conn_type``,
    ``host``, ``port``, ``login``, ``password``, ``schema`` and ``extra`` (a dict).

    Parses as ``airflow.sdk.Connection.from_json``/``from_uri`` do, e.g.
    ``{"conn_type": "generic", "host": "b1:9092,b2:9092", "login": "u", "password": "p",
    "extra": {"security.protocol": "SASL_SSL"}}`` or
    ``generic://u:p@b1%3A9092%2Cb2%3A9092?security.protocol=SASL_SSL`` (a URI's host is
    percent-encoded when it holds several servers). Raises :class:`ConfigError` without echoing
    the value, which may hold a secret.
    """
    what = f"connection {conn_id!r}{f' ({where})' if where else ''}"
    text = value.strip()
    if text.startswith("{"):
        try:
            fields = json.loads(text)
        except ValueError:
            raise ConfigError(f"{what} is not valid JSON") from None
        if not isinstance(fields, dict):
            raise ConfigError(f"{what} is not a JSON object")
    else:
        try:
            fields = _connection_from_uri(text)
        except ValueError:
            raise ConfigError(f"{what} is neither a JSON object nor a connection URI") from None
    extra = fields.get("extra") or {}
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except ValueError:
            raise ConfigError(f"{what}: its extra is not valid JSON") from None
    if not isinstance(extra, dict):
        raise ConfigError(f"{what}: its extra is not a JSON object")
    port = fields.get("port")
    try:
        port = int(port) if port not in (None, "") else None
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: port is not an integer") from None
    return {"conn_type": fields.get("conn_type"), "host": fields.get("host") or None, "port": port,
            "login": fields.get("login") or None, "password": fields.get("password") or None,
            "schema": fields.get("schema") or None, "extra": extra}


def _connection_from_uri(uri: str) -> dict[str, Any]:
    if "://" not in uri:
        raise ValueError(uri)
    scheme, rest = uri.split("://", 1)
    parts = urlsplit("//" + rest)
    host = unquote(parts.hostname or "")
    if "/" in host:  # as Airflow: a host holding a path is taken from the netloc as written
        host = unquote(parts.netloc.rsplit("@", 1)[-1].split(":", 1)[0])
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra = query["__extra__"] if "__extra__" in query else query
    return {"conn_type": "postgres" if scheme == "postgresql" else scheme.replace("-", "_"), "host": host,
            "port": parts.port, "login": unquote(parts.username) if parts.username else None,
            "password": unquote(parts.password) if parts.password else None,
            "schema": unquote(parts.path[1:]) if parts.path[1:] else None, "extra": extra}


def env_connection(conn_id: str) -> Optional[dict[str, Any]]:
    """The connection ``conn_id`` from the environment, or None: ``CDC_CONNECTION_<CONN_ID>``
    (handed over by the stage job operator), else ``AIRFLOW_CONN_<CONN_ID>`` (Airflow's own
    variable, JSON or URI). ``<CONN_ID>`` is the id upper-cased, as Airflow spells it."""
    for prefix in (CONNECTION_ENV_PREFIX, AIRFLOW_CONN_PREFIX):
        name = prefix + conn_id.upper()
        if os.environ.get(name):
            return parse_connection(os.environ[name], conn_id, name)
    return None


def _empty(v: Any) -> bool:
    return v is None or v == "" or v == {}


def _fill(section: dict, key: str, value: Any, where: str, conn_id: str) -> None:
    if _empty(value):
        return
    if not _empty(section.get(key)):
        raise ConfigError(f"key '{where}': set in the file and by connection {conn_id!r}; set it in one place only")
    section[key] = value


def apply_connections(raw: dict, connections: Optional[Connections] = None) -> dict:
    """``raw`` (an expanded pipeline mapping) with the values of the connections it names.

    ``kafka.connection``: host → ``bootstrap_servers``; extra → ``client`` settings; login and
    password → ``client`` ``sasl.username`` and ``sasl.password``. ``catalog.connection``: login
    and password → ``user`` and ``password``; host, port (default 5432) and schema →
    ``uri`` ``jdbc:postgresql://host:port/schema``, when the file has no ``uri``. The connection
    fills what the file leaves empty; a field set in both raises :class:`ConfigError` naming it.
    ``connections`` looks a connection up by id (None: :func:`env_connection`); a connection it
    does not find raises :class:`ConfigError` naming it.
    """
    lookup = connections or env_connection
    out = dict(raw)
    for section_name in ("kafka", "catalog"):
        section = out.get(section_name)
        if not isinstance(section, dict) or not section.get("connection"):
            continue
        conn_id = str(section["connection"])
        conn = lookup(conn_id)
        if conn is None:
            raise ConfigError(f"key '{section_name}.connection': connection {conn_id!r} is not defined (neither "
                              f"{CONNECTION_ENV_PREFIX}{conn_id.upper()} nor {AIRFLOW_CONN_PREFIX}{conn_id.upper()} "
                              "is set, nor is it in Airflow)")
        section = out[section_name] = dict(section)
        if section_name == "kafka":
            _fill(section, "bootstrap_servers", conn.get("host"), "kafka.bootstrap_servers", conn_id)
            client = section["client"] = dict(section.get("client") or {})
            settings = dict(conn.get("extra") or {})
            for key, field in (("sasl.username", "login"), ("sasl.password", "password")):
                if not _empty(conn.get(field)):
                    if not _empty(settings.get(key)):
                        raise ConfigError(f"connection {conn_id!r}: {key} is given as its {field} and in its extra; "
                                          "give it once")
                    settings[key] = conn[field]
            for key, value in settings.items():
                _fill(client, key, value, f"kafka.client.{key}", conn_id)
        else:
            _fill(section, "user", conn.get("login"), "catalog.user", conn_id)
            _fill(section, "password", conn.get("password"), "catalog.password", conn_id)
            if _empty(section.get("uri")) and conn.get("host"):
                schema = conn.get("schema") or ""
                section["uri"] = f"jdbc:postgresql://{conn['host']}:{conn.get('port') or 5432}/{schema}"
    sources = list(out["sources"]) if isinstance(out.get("sources"), list) else []
    for i, source in enumerate(sources):
        registry = _registry_section(source)
        if registry is None or not registry.get("connection"):
            continue
        where = f"sources[{i}].options.schema_registry"
        conn_id = str(registry["connection"])
        conn = lookup(conn_id)
        if conn is None:
            raise ConfigError(f"key '{where}.connection': connection {conn_id!r} is not defined (neither "
                              f"{CONNECTION_ENV_PREFIX}{conn_id.upper()} nor {AIRFLOW_CONN_PREFIX}{conn_id.upper()} "
                              "is set, nor is it in Airflow)")
        registry = dict(registry)
        host = conn.get("host")
        if host:
            scheme = conn.get("conn_type") if conn.get("conn_type") in ("http", "https") else "http"
            url = host if "://" in host else f"{scheme}://{host}" + (f":{conn['port']}" if conn.get("port") else "")
            _fill(registry, "url", url, f"{where}.url", conn_id)
        if not _empty(conn.get("login")):
            _fill(registry, "basic_auth_user_info", f"{conn['login']}:{conn.get('password') or ''}",
                  f"{where}.basic_auth_user_info", conn_id)
        sources[i] = dict(source, options=dict(source["options"], schema_registry=registry))
        out["sources"] = sources
    return out


def _registry_section(source: Any) -> Optional[dict]:
    """A source's ``options.schema_registry`` mapping (``debezium-avro``), or None."""
    options = source.get("options") if isinstance(source, dict) else None
    registry = options.get("schema_registry") if isinstance(options, dict) else None
    return registry if isinstance(registry, dict) else None


def connection_ids(cfg: "PipelineConfig") -> list[str]:
    """The connection ids a pipeline names (``kafka.connection``, ``catalog.connection``, a source's
    ``options.schema_registry.connection``)."""
    registries = [_registry_section(s.model_dump()) for s in cfg.sources]
    return list(dict.fromkeys(c for c in (cfg.kafka.connection, cfg.catalog.connection,
                                          *(str(r["connection"]) for r in registries if r and r.get("connection")))
                              if c))


def load_pipeline(path: str | os.PathLike, *, connections: Optional[Connections] = None,
                  resolve: bool = True) -> PipelineConfig:
    """Load, expand and validate one pipeline file.

    ``resolve``: fill in the connections the file names (:func:`apply_connections`, looked up
    by ``connections``, default the environment); False leaves them unresolved (DAG parsing,
    which needs no secrets: ``bootstrap_servers`` or ``uri`` may then be None).
    Raises :class:`ConfigError` naming the file and the first bad key.
    """
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: pipeline file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level")
    raw.setdefault("name", p.stem)
    try:
        expanded = _expand(raw, "", _stack_env())
        if resolve:
            expanded = apply_connections(expanded, connections)
        cfg = PipelineConfig.model_validate({**expanded, "path": str(p.resolve())})
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{p}: key '{key}': {msg}") from None
    if resolve and not cfg.kafka.bootstrap_servers:
        raise ConfigError(f"{p}: key 'kafka.bootstrap_servers': not set, and connection {cfg.kafka.connection!r} "
                          "has no host")
    if resolve and not cfg.catalog.uri:
        raise ConfigError(f"{p}: key 'catalog.uri': not set, and connection {cfg.catalog.connection!r} has no host")
    return cfg


def load_pipelines(directory: str | os.PathLike | None = None, *, resolve: bool = True) -> list[PipelineConfig]:
    """All pipelines in ``directory`` (default :func:`pipelines_dir`), sorted by file name
    (``resolve``: as :func:`load_pipeline`)."""
    d = Path(directory) if directory else pipelines_dir()
    return [load_pipeline(f, resolve=resolve) for f in sorted(d.glob("*.y*ml"))]
