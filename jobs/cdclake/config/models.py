"""The sections of a pipeline file as pydantic models, validated on load: Kafka, catalog, sources,
land, normalize, locks, silver, gates, Spark, Airflow, maintenance, reconcile and freshness, and the whole
:class:`PipelineConfig`. Secret settings are masked in their ``repr``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from cdclake.config.environment import state_dir
from cdclake.errors import ConfigError

#: librdkafka settings whose values are secrets (shown masked in the config's repr).
SECRET_SETTING_RE = re.compile(r"password|secret|token|\.pem$|oauthbearer\.config", re.I)
MASK = "**********"


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

    ``file_merge_max_changes``: a table whose batch has at most this many changes is merged in
    the driver at the file level, without a Spark job of its own (:mod:`cdclake.silver.small`;
    tables it does not take, and larger batches, get Spark's MERGE). 0 merges every table with
    Spark. ``file_rewrite_max_rows``: such a table whose touched buckets hold at most this many
    rows has them rewritten (copy-on-write, which keeps their file count down); a larger one gets
    position deletes (merge-on-read). ``file_merge_task_tables``: a window with at least this many
    such tables merges them in Spark tasks, whose Python workers run in parallel (driver threads
    share one interpreter); a table to create or evolve, or one needing position deletes, is then
    merged by the driver. 0 merges them in the driver always.

    ``hourly_tags``: after a window's commits, tag each silver table it changed ``cdc-<YYYYMMDDHH>``
    of the window's last hour, so that ``VERSION AS OF 'cdc-2024010114'`` reads the table as of
    the end of that hour (:mod:`cdclake.silver.snapshots`; retention
    ``maintenance.hourly_tag_retention_hours``). Default true.
    """

    namespace: str = "silver"
    complete_transactions: bool = False
    delete_mode: Literal["hard", "soft"] = "hard"
    tombstone_retention_hours: int = Field(24 * 7, ge=1)
    buckets: int = Field(8, ge=1)
    write_mode: Literal["merge-on-read", "copy-on-write"] = "merge-on-read"
    parallel_tables: int = Field(2, ge=1)
    file_merge_max_changes: int = Field(20_000, ge=0)
    file_rewrite_max_rows: int = Field(50_000, ge=0)
    file_merge_task_tables: int = Field(32, ge=0)
    hourly_tags: bool = True


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
    job (default 6 hours); ``reconcile``: the reconciliation job (default 2 hours)."""

    land: int = Field(3600, ge=1)
    normalize: int = Field(3600, ge=1)
    silver: int = Field(3600, ge=1)
    gate: int = Field(1800, ge=1)
    maintenance: int = Field(6 * 3600, ge=1)
    reconcile: int = Field(2 * 3600, ge=1)


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
    ``hourly_tag_retention_hours``: the silver tables' hourly tags (``cdc-<YYYYMMDDHH>``,
    ``silver.hourly_tags``) whose hour ended more than this many hours ago are removed before
    snapshots expire, and each tag gets Iceberg's ``max-ref-age-ms`` of as long; a tagged
    snapshot is never expired (default 168, a week; None: tags are kept until removed by hand).
    """

    schedule: Optional[str] = "@daily"
    snapshot_retention_hours: int = Field(72, ge=1)
    retain_last_snapshots: int = Field(5, ge=1)
    orphan_file_age_hours: int = Field(72, ge=24)
    raw_retention_hours: Optional[int] = Field(None, ge=1)
    bronze_retention_hours: Optional[int] = Field(None, ge=1)
    rewrite_data_files: bool = True
    hourly_tag_retention_hours: Optional[int] = Field(24 * 7, ge=1)


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def duration_s(value: Any) -> Optional[float]:
    """Seconds of a duration setting: a number (seconds) or text such as ``90``, ``90s``, ``15m``,
    ``2h``, ``1d``, ``500ms``; None stays None. Raises ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DURATION_RE.match(str(value))
        if m is None:
            raise ValueError(f"{value!r} is not a duration (a number of seconds, or e.g. 90s, 15m, 2h, 1d)")
        seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if seconds <= 0:
        raise ValueError(f"{value!r}: a duration must be positive")
    return seconds


class FreshnessConfig(_Model):
    """Freshness SLAs of the silver tables (:mod:`cdclake.freshness`).

    A silver table's freshness is the newest source commit time applied to it, as its last
    silver commit recorded (``cdc.newest-source-ts-ms`` in the snapshot summary); its lag is the
    time from then to now. ``max_lag``: the most lag allowed for every silver table of the
    pipeline, a duration (seconds, or text: ``90s``, ``15m``, ``2h``, ``1d``); None (the default):
    no SLA. ``tables``: per silver table name (unquoted, in ``silver.namespace``), a ``max_lag``
    of its own, which wins over the pipeline's. When a table's lag exceeds its SLA, the pipeline
    DAG's ``freshness`` task (after silver's gate) fails naming the tables, their lag and the SLA,
    so ``airflow.on_failure_callback`` fires even though every stage succeeded (a topic that went
    silent upstream). Read in seconds: :attr:`max_lag_s`, :meth:`table_max_lag_s`.
    """

    max_lag: Optional[Any] = None
    tables: dict[str, Any] = Field(default_factory=dict)

    @field_validator("max_lag")
    @classmethod
    def _max_lag(cls, v: Any) -> Optional[float]:
        return duration_s(v)

    @field_validator("tables")
    @classmethod
    def _tables(cls, v: dict) -> dict[str, float]:
        return {str(k): duration_s(d) for k, d in v.items()}

    @property
    def max_lag_s(self) -> Optional[float]:
        """The pipeline's SLA in seconds (None: none)."""
        return self.max_lag

    def table_max_lag_s(self, table: str) -> Optional[float]:
        """The SLA of silver table ``table`` in seconds: its own, else the pipeline's (None: none)."""
        return self.tables.get(table, self.max_lag)

    @property
    def enabled(self) -> bool:
        """Whether any SLA is set."""
        return self.max_lag is not None or bool(self.tables)


class ReconcileConfig(_Model):
    """Reconciliation of silver tables against their source database (:mod:`cdclake.reconcile`,
    ``python -m cdclake reconcile``, the ``reconcile`` task of the maintenance DAG).

    ``connection``: the Airflow connection id of the source database (``conn_type`` ``postgres``
    or ``mysql``; host, port, login, password; its ``schema`` names the PostgreSQL database to
    read, else the database the silver table's ``cdc.source-table`` names).
    ``tables``: the silver tables the daily task reconciles (names in ``silver.namespace``; empty:
    every silver table of the namespace). ``source_tables``: ``{silver table: "schema.table"}``
    (PostgreSQL) or ``"database.table"`` (MySQL/MariaDB) where the source table is not the one
    ``cdc.source-table`` names.
    ``buckets``: hash buckets of the primary key compared per round (a differing bucket is split
    into this many again). ``fetch_rows``: differing buckets holding at most this many rows (on
    the larger side) are fetched by key from both sides and compared row by row.
    ``max_samples``: drifted keys kept in the result row (default 100).
    ``kafka_timeout_s``: seconds without a record before reading a topic partition to its end
    (for the in-flight keys) fails.
    """

    connection: str
    tables: list[str] = Field(default_factory=list)
    source_tables: dict[str, str] = Field(default_factory=dict)
    buckets: int = Field(64, ge=2, le=4096)
    fetch_rows: int = Field(20_000, ge=1)
    max_samples: int = Field(100, ge=0)
    kafka_timeout_s: float = Field(30.0, gt=0)


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
    reconcile: Optional[ReconcileConfig] = None
    freshness: FreshnessConfig = Field(default_factory=FreshnessConfig)
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
