"""The Airflow DAG on a PostgreSQL Iceberg catalog: the production catalog, run end to end.

The same DAG as ``test_dag.py``, one wire format (Debezium JSON) and one hour, with the pipeline's
JDBC catalog in a PostgreSQL database of its own (created here, dropped at the end). It needs a
PostgreSQL server at ``127.0.0.1:5432`` that lets user ``postgres`` in without a password, Debian's
``libpostgresql-jdbc-java`` (``make deps``) and ``psycopg2-binary`` (``requirements.txt``): a missing
part fails the test, it is not skipped.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import REPO, STATE, write_pipeline
from pipeline import H0

from cdclake.catalog import JDBC_JARS, pyiceberg_catalog
from cdclake.config import load_pipeline
from cdclake.sim import SimulatedSource, create_topic, produce
from cdclake.sim.compare import compare_table
from cdclake.sim.wire import WIRE_FORMATS

PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
(DEBEZIUM,) = [wf for wf in WIRE_FORMATS if wf.format == "debezium-json"]
NAMESPACE = "pgcatalog"


def _admin():
    """An autocommit connection to the server's ``postgres`` database (CREATE/DROP DATABASE)."""
    import psycopg2

    try:
        conn = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=5)
    except psycopg2.OperationalError as exc:
        why = " ".join(str(exc).split())
    else:
        conn.autocommit = True
        return conn
    pytest.fail(f"PostgreSQL is not reachable at {PG_HOST}:{PG_PORT} as user {PG_USER} (this test needs a "
                f"running server with trust auth for local TCP): {why}", pytrace=False)


@pytest.fixture(scope="module")
def catalog_db():
    """A PostgreSQL database of its own for the Iceberg catalog; dropped at the end, on failure too."""
    jar = Path(JDBC_JARS["postgresql"])
    if not jar.exists():
        pytest.fail(f"PostgreSQL JDBC driver {jar} is missing: run `make deps` (Debian's libpostgresql-jdbc-java)",
                    pytrace=False)
    name = f"cdclake_test_{uuid.uuid4().hex[:12]}"
    conn = _admin()
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


@pytest.fixture(scope="module")
def pg_dag_module(stack, catalog_db):
    """A Debezium pipeline whose catalog is in ``catalog_db``, one hour produced, the DAG file imported."""
    pipelines = STATE / "pg-pipelines"
    pipelines.mkdir(exist_ok=True)
    warehouse = STATE / f"warehouse-{catalog_db}"
    warehouse.mkdir()
    os.environ["CDC_PIPELINES_DIR"] = str(pipelines)
    src = SimulatedSource(seed=29, start=H0, hours=1)
    history = src.run()
    topic = f"pgcatalog.{DEBEZIUM.tag}"
    create_topic(stack["bootstrap"], topic, DEBEZIUM.partitions)
    produce(stack["bootstrap"], topic, DEBEZIUM.messages(history, src.tables))
    sources = [{"topic": topic, "format": DEBEZIUM.format, "table_prefix": f"{DEBEZIUM.tag}_", **DEBEZIUM.options}]
    catalog = {"name": "lake", "uri": f"jdbc:postgresql://{PG_HOST}:{PG_PORT}/{catalog_db}", "user": PG_USER,
               "warehouse": f"file://{warehouse}"}
    path = write_pipeline("pgcatalog", sources, catalog=catalog, silver={"namespace": NAMESPACE},
                          airflow={"retries": 0})
    path = path.rename(pipelines / "pgcatalog.yaml")
    subprocess.run([str(REPO / ".venv" / "bin" / "airflow") if (REPO / ".venv/bin/airflow").exists() else "airflow",
                    "db", "migrate"], check=True, capture_output=True, env=os.environ)
    spec = importlib.util.spec_from_file_location("cdc_pipelines_pg_catalog", REPO / "dags" / "cdc_pipelines.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        yield module, src, path
    finally:
        os.environ["CDC_PIPELINES_DIR"] = str(STATE / "pipelines")


def test_dag_on_postgres_catalog_equals_source(pg_dag_module, catalog_db):
    """After the DAG, the silver tables in the PostgreSQL catalog equal the source, column for column."""
    module, src, path = pg_dag_module
    start = H0.astimezone(dt.timezone.utc)
    run = module.cdc_pgcatalog.test(run_conf={"start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                              "end": (start + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert str(run.state) in ("success", "DagRunState.SUCCESS"), run.state
    cfg = load_pipeline(path)
    assert cfg.catalog.uri.endswith(f"/{catalog_db}"), cfg.catalog.uri
    cat = pyiceberg_catalog(cfg.catalog)
    try:
        names = [ident[-1] for ident in cat.list_tables(NAMESPACE)]
        for t, table in src.tables.items():
            (name,) = [n for n in names if n.startswith(f"{DEBEZIUM.tag}_") and n.endswith(f"__{t}")]
            tbl = cat.load_table((NAMESPACE, name))
            columns = [f.name for f in tbl.schema().fields if not f.name.startswith("_cdc_")]
            assert columns == [c.name for c in table.columns], (t, columns)
            rows = tbl.scan().to_arrow().to_pylist()
            diffs = compare_table(src.final_state()[t], rows, list(table.primary_key))
            assert not diffs, (t, diffs)
    finally:
        cat.engine.dispose()
