"""Iceberg catalog access for Spark and pyiceberg, and the Spark session the stage jobs use.

One pipeline's ``catalog`` block configures both engines on the same JDBC catalog:
Spark's ``SparkCatalog`` (``type=jdbc``, schema V1) and pyiceberg's ``SqlCatalog``.
Table names used by the pipeline (all inside the configured catalog):

=============================  ====================================================
``raw.kafka_records``          landed Kafka records, partitioned by topic and hour
``raw.land_manifest``          offset range read per topic, partition and hour
``bronze.changes``             canonical change records (``cdclake.record``)
``bronze.quarantine``          records that could not be parsed, with the reason
``bronze.control_events``      DDL, tombstones, heartbeats: recognised, not rows
``bronze.schema_registry``     table definitions from metadata messages (Qlik Replicate)
``<silver.namespace>.<name>``  one table per source table (``cdclake.silver``)
=============================  ====================================================
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cdclake.config import REPO_ROOT, CatalogConfig, ConfigError, PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

RAW_TABLE = "raw.kafka_records"
MANIFEST_TABLE = "raw.land_manifest"
BRONZE_TABLE = "bronze.changes"
QUARANTINE_TABLE = "bronze.quarantine"
CONTROL_TABLE = "bronze.control_events"
REGISTRY_TABLE = "bronze.schema_registry"
JDBC_JARS = {"sqlite": "/usr/share/java/sqlite-jdbc.jar", "postgresql": "/usr/share/java/postgresql.jar"}


def iceberg_jar() -> Path:
    """The Iceberg Spark runtime jar (Spark 3.5, Scala 2.12) shipped in snowpark-connect-deps-iceberg."""
    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    if spec is None or spec.origin is None:
        raise RuntimeError("package snowpark-connect-deps-iceberg is not installed (it ships the Iceberg Spark jar)")
    return Path(spec.origin).parent / "jars" / "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"


def _kind(cat: CatalogConfig) -> str:
    return "sqlite" if cat.uri.startswith("jdbc:sqlite:") else "postgresql"


def check_catalog(cat: CatalogConfig) -> None:
    """Fail early, in one line, when the catalog's SQLite directory or the warehouse is missing.

    Raises :class:`ConfigError`.
    """
    if _kind(cat) == "sqlite":
        db = Path(cat.uri.removeprefix("jdbc:sqlite:"))
        if not db.parent.is_dir():
            raise ConfigError(f"catalog directory {db.parent} does not exist (catalog.uri {cat.uri})")
    if cat.warehouse.startswith("file:"):
        wh = Path(cat.warehouse.removeprefix("file://").removeprefix("file:"))
        if not wh.is_dir():
            raise ConfigError(f"warehouse directory {wh} does not exist (catalog.warehouse {cat.warehouse})")
    jar = JDBC_JARS[_kind(cat)]
    if not Path(jar).exists():
        raise ConfigError(f"JDBC driver {jar} is missing (install Debian's "
                          f"{'libxerial-sqlite-jdbc-java' if _kind(cat) == 'sqlite' else 'libpostgresql-jdbc-java'})")


def spark_jars(cat: CatalogConfig) -> list[str]:
    """Jars a Spark job needs for the catalog: Iceberg runtime and the JDBC driver."""
    return [str(iceberg_jar()), JDBC_JARS[_kind(cat)]]


def spark_conf(cfg: PipelineConfig) -> dict[str, str]:
    """Spark settings for a pipeline (catalog, Iceberg extensions, UTC), for builder or spark-submit."""
    cat = cfg.catalog
    prefix = f"spark.sql.catalog.{cat.name}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.caseSensitive": "true",  # source column names are kept exactly
        "spark.sql.shuffle.partitions": "4",
        # A silver MERGE plan has a column-by-column expression per column; the driver keeps every
        # finished query's plan for the UI. Keep few, with plan text capped, so that a long session
        # (a backfill, the tests) does not fill the driver heap with old plans.
        "spark.sql.ui.retainedExecutions": "50",
        "spark.ui.retainedJobs": "200",
        "spark.ui.retainedStages": "200",
        "spark.ui.retainedTasks": "20000",
        "spark.sql.maxPlanStringLength": "200000",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.defaultCatalog": cat.name,
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": cat.uri,
        f"{prefix}.warehouse": cat.warehouse,
        f"{prefix}.jdbc.schema-version": "V1",
        # pyiceberg creates the catalog tables; Spark must not hold SQLite locks to create them.
        f"{prefix}.jdbc.init-catalog-tables": "false",
        f"{prefix}.cache-enabled": "false",
        # executors' Python workers import the library from the same path (local mode and clusters
        # whose nodes share the image); spark-submit's --py-files would work as well
        "spark.executorEnv.PYTHONPATH": str(REPO_ROOT / "jobs"),
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    }
    if cat.user:
        conf[f"{prefix}.jdbc.user"] = cat.user
    if cat.password:
        conf[f"{prefix}.jdbc.password"] = cat.password
    conf.update(cfg.spark.conf)
    return conf


def pyiceberg_catalog(cat: CatalogConfig):
    """pyiceberg ``SqlCatalog`` on the same catalog as Spark (creates its tables when missing)."""
    from pyiceberg.catalog.sql import SqlCatalog

    check_catalog(cat)
    if _kind(cat) == "sqlite":
        uri = "sqlite:///" + cat.uri.removeprefix("jdbc:sqlite:")
    else:
        rest = cat.uri.removeprefix("jdbc:postgresql://")
        from urllib.parse import quote

        auth = f"{quote(cat.user, safe='')}:{quote(cat.password or '', safe='')}@" if cat.user else ""
        uri = f"postgresql+psycopg2://{auth}{rest}"
    return SqlCatalog(cat.name, uri=uri, warehouse=cat.warehouse)


def spark_session(cfg: PipelineConfig, app_name: str = "cdclake") -> "SparkSession":
    """The Spark session for a pipeline's jobs: its catalog as default, UTC, Iceberg extensions.

    Inside ``spark-submit`` the submitted conf wins; run directly (tests, benchmarks) it starts
    ``cfg.spark.master`` with ``cfg.spark.driver_memory``. Creates the catalog tables first
    (pyiceberg) so that Spark never needs to. Raises :class:`ConfigError` for a missing
    catalog directory.
    """
    from pyspark.sql import SparkSession

    pyiceberg_catalog(cfg.catalog).engine.dispose()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers need this interpreter's packages
    builder = SparkSession.builder.appName(app_name)
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # not inside spark-submit: start our own JVM
        builder = (builder.master(cfg.spark.master)
                   .config("spark.driver.memory", cfg.spark.driver_memory)

                   .config("spark.jars", ",".join(spark_jars(cfg.catalog))))
    for k, v in spark_conf(cfg).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def qualified(cfg: PipelineConfig, table: str) -> str:
    """``<catalog>.<namespace>.<table>`` for Spark SQL (pipeline-owned names, no quoting needed)."""
    return f"{cfg.catalog.name}.{table}"


def ensure_namespace(spark: "SparkSession", cfg: PipelineConfig, namespace: str) -> None:
    """Create a namespace in the pipeline's catalog when missing."""
    from cdclake.types import quote_ident

    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cfg.catalog.name}.{quote_ident(namespace)}")


def materialize(df: "DataFrame") -> "DataFrame":
    """``df`` computed once and cut from its lineage (an eager local checkpoint, memory and disk).

    The silver stage builds each step from the one before and reads most steps more than once
    (unions of a frame with a filter of itself, joins with its own keys). Without a cut, every read
    repeats the step's whole plan, so plans grow with each step and Spark spends its time and
    driver heap analysing them. The blocks are freed when the frame is garbage collected (Spark's
    context cleaner). A lost executor loses them: the stage fails and is retried as a whole.
    """
    return df.localCheckpoint(eager=True)


def describe(exc: BaseException) -> str:
    """One line for an exception, for logs and ``SilverError`` messages.

    A JVM error reached through py4j is described by its Java exception and, when it has one, its root
    cause (``SparkException: Job aborted ... <- java.lang.OutOfMemoryError: ...``), not by py4j's
    ``An error occurred while calling o123.count``.
    """
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            text = f"{java.getClass().getName()}: {java.getMessage()}"
            root, seen = java.getCause(), 0
            while root is not None and root.getCause() is not None and seen < 20:
                root, seen = root.getCause(), seen + 1
            if root is not None:
                text = text.strip().splitlines()[0] + f" <- {root.getClass().getName()}: {root.getMessage()}"
        except Exception:
            text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
