"""Iceberg catalog access for Spark and pyiceberg, and the Spark session the stage jobs use.

One pipeline's ``catalog`` block configures both engines on the same JDBC catalog:
Spark's ``SparkCatalog`` (``type=jdbc``, schema V1) and pyiceberg's ``SqlCatalog``. The tables
the pipeline keeps in it are described in :mod:`cdclake.lake`.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

from cdclake.config import REPO_ROOT, CatalogConfig, PipelineConfig
from cdclake.errors import CatalogLocked, ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)
T = TypeVar("T")

JDBC_JARS = {"sqlite": "/usr/share/java/sqlite-jdbc.jar", "postgresql": "/usr/share/java/postgresql.jar"}


def iceberg_jar() -> Path:
    """The Iceberg Spark runtime jar (Spark 3.5, Scala 2.12) shipped in snowpark-connect-deps-iceberg."""
    spec = importlib.util.find_spec("snowpark_connect_deps_iceberg")
    if spec is None or spec.origin is None:
        raise RuntimeError("package snowpark-connect-deps-iceberg is not installed (it ships the Iceberg Spark jar)")
    return Path(spec.origin).parent / "jars" / "iceberg-spark-runtime-3.5_2.12-1.10.2.jar"


def _kind(cat: CatalogConfig) -> str:
    # no uri yet (a DAG file parsed without its connections): one that a connection gives is PostgreSQL
    return "sqlite" if cat.uri and cat.uri.startswith("jdbc:sqlite:") else "postgresql"


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


#: The JVM options of the driver and the executors: UTC, and the throughput collector instead of
#: G1 (a batch job's heap fills and empties step by step; on two cores G1's concurrent work shares
#: the task threads' CPU). Measured in ``bench.run --formats dbz,splex`` runs (1M changes,
#: ``local[2]``, G1 and this collector alternating, the ratio to the same run's ``from_json``):
#: silver 0.74 and 0.64 (Debezium), 0.66 and 0.66 (SharePlex) with G1; 0.78 and 0.82, 0.80 and
#: 0.74 with this collector (kept: ``bench/results/2026-11-27-gc-g1.json`` and ``-gc-parallel.json``,
#: the second of each). The free-heap ratios keep the committed heap near what is live, and a full
#: collection gives the rest back; they cost a silver stage in a new JVM garbage collection
#: (bench/README.md, *Where silver's time goes*: Debezium's 1M-change silver 24.2 to 26.3 s with
#: them, 21.4 to 24.1 s without, for more resident memory).
JVM_OPTIONS = "-Duser.timezone=UTC -XX:+UseParallelGC -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30"


def jvm_conf(cfg: PipelineConfig) -> dict[str, str]:
    """``spark.driver.extraJavaOptions`` and ``spark.executor.extraJavaOptions``: :data:`JVM_OPTIONS`
    unless the pipeline's ``spark.conf`` sets them. A driver's options act only where they are
    given before its JVM starts (spark-submit's ``--conf``, a session PySpark launches)."""
    return {k: cfg.spark.conf.get(k, JVM_OPTIONS) for k in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")}


def spark_conf(cfg: PipelineConfig) -> dict[str, str]:
    """Spark settings for a pipeline (catalog, Iceberg extensions, UTC), for builder or spark-submit."""
    cat = cfg.catalog
    prefix = f"spark.sql.catalog.{cat.name}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.caseSensitive": "true",  # source column names are kept exactly
        "spark.sql.shuffle.partitions": str(cfg.spark.shuffle_partitions),
        "spark.executor.memory": cfg.spark.executor_memory,
        # A silver MERGE plan has a column-by-column expression per column; the driver keeps every
        # finished query's plan for the UI. Keep few, with plan text capped, so that a long session
        # (a backfill, the tests) does not fill the driver heap with old plans.
        "spark.sql.ui.retainedExecutions": "50",
        "spark.ui.retainedJobs": "200",
        "spark.ui.retainedStages": "200",
        "spark.ui.retainedTasks": "20000",
        "spark.sql.maxPlanStringLength": "200000",
        # A silver MERGE joins the whole table (the left side of a right outer join: every row,
        # every column) with the batch's keys, shuffling and sorting it. A Bloom filter of the
        # batch's keys drops the rows no change touches before that shuffle. Spark builds one only
        # for a table scan of at least the first size, from a batch of at most the second, and not
        # where a dynamic partition pruning filter on the same key came first: the silver tables
        # are bucketed by key, so that filter is planned, and a batch that touches every bucket
        # prunes nothing. Dropping a row the join would not have matched changes no result.
        "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "1MB",
        "spark.sql.optimizer.runtime.bloomFilter.creationSideThreshold": "1GB",
        "spark.sql.optimizer.dynamicPartitionPruning.enabled": "false",
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
        **jvm_conf(cfg),
    }
    if cfg.spark.executor_cores:
        conf["spark.executor.cores"] = str(cfg.spark.executor_cores)
    if cat.user:
        conf[f"{prefix}.jdbc.user"] = cat.user
    if cat.password_value():
        conf[f"{prefix}.jdbc.password"] = cat.password_value()
    conf.update(cfg.spark.conf)
    return conf


#: How long a reach into the catalog database retries, in seconds, while another connection holds
#: a lock on it (SQLite: another writer, or an exclusive lock) before :class:`CatalogLocked`.
CATALOG_LOCK_WAIT_S = 60.0
#: SQLite's own busy wait of each attempt, in seconds (pyiceberg's connections); the backoff of
#: :func:`with_retries` waits between attempts.
SQLITE_BUSY_TIMEOUT_S = 1.0
#: First and largest pause between two attempts of :func:`with_retries`, in seconds (doubling).
RETRY_FIRST_DELAY_S = 0.2
RETRY_MAX_DELAY_S = 5.0


def catalog_locked(exc: BaseException) -> bool:
    """True when ``exc``, or an exception it was raised from, says the catalog database is locked.

    Recognises SQLite's ``database is locked`` / ``database table is locked`` (Python's sqlite3,
    SQLAlchemy, the SQLite JDBC driver's ``SQLITE_BUSY``) and PostgreSQL's lock-not-available and
    deadlock errors (SQLSTATE 55P03, 40P01). A :class:`CatalogLocked` is a final verdict: False.
    """
    seen: set[int] = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen and not isinstance(e, CatalogLocked):
        seen.add(id(e))
        text = str(e).lower()
        if ("database is locked" in text or "database table is locked" in text or "sqlite_busy" in text
                or "lock not available" in text):
            return True
        code = getattr(getattr(e, "orig", None), "pgcode", None) or getattr(e, "pgcode", None)
        if code in ("55P03", "40P01"):
            return True
        e = e.__cause__ or e.__context__
    return False


def catalog_where(cat: CatalogConfig) -> str:
    """The catalog's name and database for messages: ``lake (jdbc:sqlite:/abs/catalog.db)``, no query string."""
    return f"{cat.name} ({cat.uri.split('?')[0]})"


def with_retries(fn: Callable[[], T], cat: CatalogConfig, what: str, *, transient: tuple = (),
                 wait_s: Optional[float] = None) -> T:
    """``fn()``, called again with backoff while it fails on a locked catalog or a ``transient`` error.

    ``cat``: the catalog ``fn`` reaches (named in messages). ``what``: what ``fn`` does, for the
    log and messages (e.g. ``"land gate"``). ``transient``: exception classes retried as well (a
    lock of the catalog database, :func:`catalog_locked`, always is). ``wait_s``: retry budget in
    seconds from the first call (default :data:`CATALOG_LOCK_WAIT_S`); pauses double from
    :data:`RETRY_FIRST_DELAY_S` up to :data:`RETRY_MAX_DELAY_S`, each retry logged as a warning.

    Returns what ``fn`` returns. Raises :class:`CatalogLocked` (one line naming the catalog, how long
    it waited and how many tries) when the catalog is still locked at the end of the budget, the
    last exception itself when another transient error outlasts it, and any other exception at once.
    """
    budget = CATALOG_LOCK_WAIT_S if wait_s is None else wait_s
    start = time.monotonic()
    delay, tries = RETRY_FIRST_DELAY_S, 0
    while True:
        tries += 1
        try:
            return fn()
        except CatalogLocked:
            raise
        except Exception as exc:
            locked = catalog_locked(exc)
            if not locked and not (transient and isinstance(exc, transient)):
                raise
            waited = time.monotonic() - start
            if waited + delay > budget:
                if locked:
                    raise CatalogLocked(
                        f"catalog {catalog_where(cat)} is locked by another connection: {what} gave up after "
                        f"waiting {waited:.1f}s ({tries} tries): {describe(exc)}") from exc
                log.error("%s: giving up after %.1fs (%d tries): %s", what, waited, tries, describe(exc))
                raise
            log.warning("%s: %s; retry %d in %.1fs", what,
                        f"catalog {catalog_where(cat)} is locked" if locked else describe(exc), tries, delay)
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY_S)


def pyiceberg_catalog(cat: CatalogConfig):
    """pyiceberg ``SqlCatalog`` on the same catalog as Spark (creates its tables when missing).

    Opening it reads the catalog database: a locked database is retried (:func:`with_retries`,
    raises :class:`CatalogLocked`). Raises :class:`ConfigError` for a missing catalog directory.
    """
    from pyiceberg.catalog.sql import SqlCatalog

    check_catalog(cat)
    uri = pyiceberg_uri(cat)
    return with_retries(lambda: SqlCatalog(cat.name, uri=uri, warehouse=cat.warehouse), cat, "opening the catalog")


def pyiceberg_uri(cat: CatalogConfig) -> str:
    """The SQLAlchemy URI of the catalog database for pyiceberg's ``SqlCatalog`` (it holds the
    catalog's user and password: never log it; :func:`catalog_where` is the printable form)."""
    if _kind(cat) == "sqlite":
        path = cat.uri.removeprefix("jdbc:sqlite:")
        return f"sqlite:///{path}{'&' if '?' in path else '?'}timeout={SQLITE_BUSY_TIMEOUT_S:g}"
    from urllib.parse import quote

    rest = cat.uri.removeprefix("jdbc:postgresql://")
    auth = f"{quote(cat.user, safe='')}:{quote(cat.password_value() or '', safe='')}@" if cat.user else ""
    return f"postgresql+psycopg2://{auth}{rest}"


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
    """Create a namespace in the pipeline's catalog when missing.

    Two threads (silver merges tables at the same time) may both find it missing: the one whose
    create fails because the other's came first goes on; any other error propagates."""
    from cdclake.types import quote_ident

    qualified_ns = f"{cfg.catalog.name}.{quote_ident(namespace)}"
    try:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {qualified_ns}")
    except Exception:
        if not spark.catalog.databaseExists(qualified_ns):
            raise


def temp_view(prefix: str, name: str) -> str:
    """The name of a temporary view of table ``name``'s rows: ``prefix`` (unquoted letters, digits
    and underscores), ``_`` and 16 hex digits of the name's SHA-1. Steps run for several tables at
    the same time each use their table's view, and any table name gives a plain identifier."""
    import hashlib

    return f"{prefix}_{hashlib.sha1(name.encode('utf-8')).hexdigest()[:16]}"


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
