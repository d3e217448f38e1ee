"""The pipeline as production runs it, driven as users drive it: one module, one Airflow.

Airflow (``cdclake.airflow_local.start``: API server, scheduler, DAG processor) keeps its
metadata in a PostgreSQL database; the pipeline's Iceberg catalog is a JDBC catalog in another
PostgreSQL database; ``spark_default`` points at a Spark standalone cluster (a master and a
worker from the pip package on loopback, as ``make cluster`` starts it; client deploy mode). The
pipeline reads three hours of simulated Debezium JSON traffic (one format: silver's cost grows
with its tables, and ``test_dag.py`` runs the DAG on the other paths inside the stage jobs). Then:

- in Chromium (Playwright, headless): log in, open the DAG, fill the Trigger form (``start``,
  ``end``, and ``topics`` chosen in its multi-select of the pipeline's topics) for the hour 00:00-01:00, wait for the run to succeed and compare
  silver with the source;
- through the REST API: a dag run with a conf for the hour 01:00-02:00 after the offset ledger
  was edited by hand (a range that overlaps the first hour's): the land gate fails that run; in
  the browser, open the failed gate task's log (the failed expectation and the Data Docs page)
  and that Data Docs page;
- with the ledger repaired, Airflow 3's backfill endpoint (``POST /api/v2/backfills``) over the
  scheduled hour 02:00 (window 01:00-02:00, the failed hour again): the run succeeds and silver
  equals the source (one hour: each run costs three ``spark-submit`` applications on the cluster);
- Assets and lineage: the trigger form's run adds an asset event for each silver table it changed
  (window and counts as extra), and Airflow's scheduler then runs the downstream DAG
  ``cdc_demo_consumer``, scheduled on one of them (``$CDC_DEMO_CONSUMER_ASSET``); the browser
  shows that table's Asset graph; OpenLineage's file transport received the run's events, whose
  inputs and outputs name the Kafka topic and the raw, bronze and silver tables with their schemas;
- the production parts did the work: the stage jobs are completed applications of the cluster
  with the pipeline's executor memory, the runs are rows of the PostgreSQL metadata database,
  the silver tables are in the PostgreSQL catalog.

The screenshots go to ``docs/screenshots/`` (``docs/operations.md`` and the README show them). The
pipeline's schedule fires hourly on 1 January only: the hours of the backfill are there, and no
scheduled run starts while the module runs. Needs the PostgreSQL server at ``127.0.0.1:5432``
(user ``postgres``, trust auth), the JDBC driver and Chromium (``make deps``): a missing part
fails, it is not skipped.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from conftest import REPO, STATE, write_pipeline
from pipeline import hour, ms

from cdclake import cluster
from cdclake.catalog import JDBC_JARS, pyiceberg_catalog
from cdclake.config import load_pipeline
from cdclake.embedded import free_port
from cdclake.gates import docs_path
from cdclake.lake import MANIFEST_TABLE
from cdclake.lake.naming import table_location
from cdclake.sim import TABLES, SimulatedSource, create_topic, produce
from cdclake.sim.compare import compare_table
from cdclake.sim.render import state_before
from cdclake.sim.wire import WIRE_FORMATS
from cdclake.window import Window

BASE = "http://127.0.0.1:8080"
NAME = "prodtest"
DAG_ID = f"cdc_{NAME}"
#: The formats of the pipeline, one topic ``prodtest.<tag>`` each; the first is the one the failing run reads.
FORMATS = [wf for wf in WIRE_FORMATS if wf.format == "debezium-json"]
TOPICS = [f"prodtest.{wf.tag}" for wf in FORMATS]
TOPIC = TOPICS[0]
CHROMIUM = "/usr/bin/chromium"
SHOTS = REPO / "docs" / "screenshots"
PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
#: The hand-made ledger range of the failing run: its own hour, overlapping the first hour's range
#: (the land gate checks a window's ranges against the hour before it and the hour after it).
BOGUS_HOUR = "2024-01-01T01:00:00+00:00"
CONSUMER = "cdc_demo_consumer"
#: The silver table the downstream DAG is scheduled on, and its Asset.
CONSUMED_TABLE = f"{FORMATS[0].tag}_shop__customers"
CONSUMED = f"iceberg://lake/{NAME}/{CONSUMED_TABLE}"
#: OpenLineage's file transport writes the events here, one JSON document a line.
LINEAGE_FILE = STATE / "openlineage.jsonl"


class Api:
    """A small client of Airflow's REST API (``/api/v2``) with a JWT from ``POST /auth/token``."""

    def __init__(self, password: str):
        self.password = password
        self.token = self.call("POST", "/auth/token", {"username": "admin", "password": password},
                               auth=False)["access_token"]

    def call(self, method: str, path: str, body=None, auth: bool = True):
        """``method path`` with a JSON body; the decoded JSON answer. Raises ``HTTPError``."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(BASE + path, method=method, headers=headers,
                                     data=None if body is None else json.dumps(body).encode())
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read()
        return json.loads(text) if text else None

    def runs(self) -> list[dict]:
        """The DAG's runs."""
        return self.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?limit=100")["dag_runs"]

    def wait_run(self, run_id: str, timeout_s: float = 1200) -> str:
        """Wait until the run ``run_id`` finishes; its state."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            assert time.monotonic() < deadline, f"run {run_id} still {state} after {timeout_s:.0f}s"
            time.sleep(2)


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


@contextlib.contextmanager
def databases(*roles: str):
    """A PostgreSQL database per role (``{role: name}``), dropped at the end, on failure too."""
    jar = Path(JDBC_JARS["postgresql"])
    if not jar.exists():
        pytest.fail(f"PostgreSQL JDBC driver {jar} is missing: run `make deps` (Debian's libpostgresql-jdbc-java)",
                    pytrace=False)
    u = uuid.uuid4().hex[:10]
    names = {role: f"cdclake_test_{role}_{u}" for role in roles}
    conn = _admin()
    try:
        with conn.cursor() as cur:
            for name in names.values():
                cur.execute(f'CREATE DATABASE "{name}"')
        yield names
    finally:
        with conn.cursor() as cur:
            for name in names.values():
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


@contextlib.contextmanager
def environ(**values: str):
    """``os.environ`` with ``values`` set, restored at the end."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def prod(stack):
    """The pipeline ``prodtest`` alone in ``$CDC_PIPELINES_DIR`` with three hours of traffic from
    2024-01-01T00:00Z in each format of :data:`FORMATS`; its catalog in PostgreSQL, Airflow's metadata in PostgreSQL, a standalone
    cluster; Airflow started on it, the DAG parsed and unpaused. Yields a dict: ``api``,
    ``state(tag, h)`` (the source as seen through the format's messages before hour ``h``), ``cfg``,
    ``airflow_db`` and ``web`` (the cluster's web UI port)."""
    from cdclake import airflow_local

    pipelines = STATE / "prod-pipelines"
    pipelines.mkdir(exist_ok=True)
    src = SimulatedSource(seed=41, start=hour(0), hours=3, tx_per_hour=20)
    history = src.run()
    messages = {}
    for wf, topic in zip(FORMATS, TOPICS):
        create_topic(stack["bootstrap"], topic, wf.partitions)
        messages[wf.tag] = wf.messages(history, src.tables)
        produce(stack["bootstrap"], topic, messages[wf.tag])
    with databases("catalog", "airflow") as dbs, contextlib.ExitStack() as stop:
        warehouse = STATE / f"warehouse-{dbs['catalog']}"
        warehouse.mkdir()
        catalog = {"name": "lake", "uri": f"jdbc:postgresql://{PG_HOST}:{PG_PORT}/{dbs['catalog']}",
                   "user": PG_USER, "warehouse": f"file://{warehouse}"}
        path = write_pipeline(NAME, [{"topic": topic, "format": wf.format, "table_prefix": f"{wf.tag}_", **wf.options}
                                     for wf, topic in zip(FORMATS, TOPICS)],
                              catalog=catalog, silver={"namespace": NAME},
                              airflow={"retries": 0, "schedule": "0 * 1 1 *"},
                              spark={"driver_memory": "1g", "executor_memory": "1g", "executor_cores": 2,
                                     "shuffle_partitions": 3})
        path = path.rename(pipelines / path.name)
        web = free_port()
        # in the state directory make cluster uses: airflow_local points spark_default at it
        cluster.start(STATE, port=free_port(), web_port=web, cores=2, memory="1536m")
        stop.callback(cluster.stop, STATE)
        assert cluster.alive_workers(web) == 1
        stop.enter_context(environ(
            CDC_PIPELINES_DIR=str(pipelines), CDC_DEMO_CONSUMER_ASSET=CONSUMED,
            AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps({"type": "file", "log_file_path": str(LINEAGE_FILE),
                                                        "append": True}),
            AIRFLOW__OPENLINEAGE__NAMESPACE=NAME, AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT="60",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{dbs['airflow']}",
            AIRFLOW__CORE__EXECUTOR="LocalExecutor"))
        airflow_local.start(timeout_s=240)
        stop.callback(airflow_local.stop)
        home = Path(os.environ["AIRFLOW_HOME"])
        password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        api = Api(password)
        deadline = time.monotonic() + 300
        while True:
            try:
                api.call("GET", f"/api/v2/dags/{CONSUMER}")
                dag = api.call("GET", f"/api/v2/dags/{DAG_ID}")
                break
            except urllib.error.HTTPError as exc:
                assert exc.code == 404 and time.monotonic() < deadline, f"DAGs {DAG_ID}, {CONSUMER} not parsed: {exc}"
                time.sleep(2)
        api.call("PATCH", f"/api/v2/dags/{CONSUMER}", {"is_paused": False})
        # Unpausing creates the run of the latest scheduled hour (catchup is off): it exists already, done.
        latest = dag["next_dagrun_logical_date"]
        if latest:
            run = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": latest, "conf": {}})
            api.call("PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}", {"state": "success"})
        api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
        yield {"api": api, "state": lambda tag, h: state_before(history, messages[tag], ms(hour(h)), src.tables),
               "cfg": load_pipeline(path), "airflow_db": dbs["airflow"], "web": web}


def assert_silver_equals_source(prod, until_hour: int) -> None:
    """Each silver table in the PostgreSQL catalog equals the source as its format's messages before
    hour ``until_hour`` show it (a window can end inside a transaction committed just before the
    hour), column for column."""
    cat = pyiceberg_catalog(prod["cfg"].catalog)
    try:
        names = [ident[-1] for ident in cat.list_tables(NAME)]
        for wf in FORMATS:
            expected = prod["state"](wf.tag, until_hour)
            for t, table in TABLES.items():
                (name,) = [n for n in names if n.startswith(f"{wf.tag}_") and n.endswith(f"__{t}")]
                tbl = cat.load_table((NAME, name))
                assert [f.name for f in tbl.schema().fields if not f.name.startswith("_cdc_")] == [
                    c.name for c in table.columns], (wf.format, t)
                diffs = compare_table(expected[t], tbl.scan().to_arrow().to_pylist(), list(table.primary_key))
                assert not diffs, (wf.format, t, until_hour, diffs[:5])
    finally:
        cat.engine.dispose()


def edit_ledger(cfg, add: bool) -> None:
    """Add (or remove) a hand-made ledger range: partition 0 of the topic, offsets [0, 1) in
    :data:`BOGUS_HOUR`, overlapping the range the first hour took (removing takes every range of
    that hour: land re-read the hand-made one as the hour's range)."""
    import datetime as dt

    import pyarrow as pa
    from pyiceberg.expressions import EqualTo

    cat = pyiceberg_catalog(cfg.catalog)
    try:
        tbl = cat.load_table(MANIFEST_TABLE)
        when = dt.datetime.fromisoformat(BOGUS_HOUR)
        if add:
            row = {"kafka_topic": TOPIC, "kafka_partition": 0, "landed_hour": when, "start_offset": 0,
                   "end_offset": 1, "records": 1, "landed_at": when}
            tbl.append(pa.Table.from_pylist([row], schema=tbl.schema().as_arrow()))
        else:
            tbl.delete(EqualTo("landed_hour", BOGUS_HOUR))
    finally:
        cat.engine.dispose()


def shot(page, name: str) -> None:
    """Screenshot ``page`` to ``docs/screenshots/<name>.png``, reduced to a 64-colour palette (small files)."""
    from PIL import Image

    path = SHOTS / f"{name}.png"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=path)
    Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)


def login(page, password: str) -> None:
    """Sign in to the UI as ``admin``."""
    page.goto(BASE + "/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(BASE + "/")


def pick_time(page, form, label: str, day: str, hhmm: str) -> None:
    """Set the date-time field ``label`` of the Trigger form through its picker (``YYYY/MM/DD``, ``HH:mm``)."""
    form.get_by_role("group").filter(has_text=label).get_by_text("Select date and time").click()
    picker = page.get_by_role("dialog").last
    picker.get_by_role("textbox", name=label).fill(day)
    picker.get_by_role("textbox", name="HH:mm").fill(hhmm)
    picker.get_by_role("textbox", name="HH:mm").press("Enter")
    form.get_by_role("heading", name="Trigger Dag").click()  # closes the picker


def choose_topics(page, form, topics: list[str]) -> None:
    """Choose ``topics`` in the Trigger form's ``Topics`` multi-select (the pipeline's topics are
    its options: typing a topic that is not one finds no option)."""
    box = form.get_by_role("group").filter(has_text="Topics to process").last.get_by_role("combobox")
    for topic in topics:
        box.click()
        box.press_sequentially(topic)
        page.get_by_role("option", name=topic, exact=True).click()


@pytest.fixture(scope="module")
def page(prod):
    """A page of Debian's Chromium, headless, driven by Playwright, signed in."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        pg = b.new_page(viewport={"width": 1280, "height": 900})
        login(pg, prod["api"].password)
        yield pg
        b.close()


def test_trigger_form_run(prod, page):
    """Trigger the hour 00:00-01:00 of the pipeline's topic from the Trigger form: the run succeeds
    and silver equals the source."""
    api = prod["api"]
    page.goto(f"{BASE}/dags/{DAG_ID}")
    page.get_by_role("heading", name=DAG_ID).wait_for()
    shot(page, "airflow-dag")

    page.get_by_role("button", name="Trigger").first.click()
    form = page.get_by_role("dialog").filter(has=page.get_by_role("heading", name="Trigger Dag"))
    pick_time(page, form, "Window start", "2024/01/01", "00:00")
    pick_time(page, form, "Window end", "2024/01/01", "01:00")
    choose_topics(page, form, TOPICS)
    shot(page, "airflow-trigger")
    with page.expect_response(lambda r: r.url.endswith(f"/dags/{DAG_ID}/dagRuns") and r.request.method == "POST") as posted:
        form.get_by_role("button", name="Trigger").click()
    run = posted.value.json()
    assert run["conf"]["topics"] == TOPICS and run["conf"]["start"].startswith("2024-01-01T00:00"), run["conf"]
    assert api.wait_run(run["dag_run_id"]) == "success"
    assert_silver_equals_source(prod, 1)
    page.goto(f"{BASE}/dags/{DAG_ID}/runs/{run['dag_run_id']}")
    page.get_by_role("link", name="silver").first.wait_for()
    page.wait_for_timeout(1500)
    shot(page, "airflow-run")


def test_assets_and_the_downstream_dag(prod, page):
    """The trigger form's run (00:00-01:00) added an asset event per silver table it changed, with
    the window and counts as extra; the scheduler then ran ``cdc_demo_consumer``, scheduled on
    one of them, which got that event; the Asset's page shows the graph producer -> table -> consumer."""
    api = prod["api"]
    events = api.call("GET", f"/api/v2/assets/events?source_dag_id={DAG_ID}&limit=100")["asset_events"]
    assert sorted(e["uri"] for e in events) == sorted(
        f"iceberg://lake/{NAME}/{FORMATS[0].tag}_shop__{t}" for t in TABLES), events
    for e in events:
        assert e["source_task_id"] == "silver.gate", e
        assert (e["extra"]["window_start"], e["extra"]["window_end"]) == (
            "2024-01-01T00:00:00+00:00", "2024-01-01T01:00:00+00:00"), e
        assert e["extra"]["changes"] > 0 and e["extra"]["topics"] == [TOPIC], e
    deadline = time.monotonic() + 300
    while True:
        runs = api.call("GET", f"/api/v2/dags/{CONSUMER}/dagRuns?limit=10")["dag_runs"]
        if runs and runs[0]["state"] in ("success", "failed"):
            break
        assert time.monotonic() < deadline, f"{CONSUMER} did not run after the pipeline's run: {runs}"
        time.sleep(2)
    assert [(r["run_type"], r["state"]) for r in runs] == [("asset_triggered", "success")], runs
    xcom = api.call("GET", f"/api/v2/dags/{CONSUMER}/dagRuns/{runs[0]['dag_run_id']}/taskInstances/report/"
                           "xcomEntries/return_value?deserialize=true&stringify=false")["value"]
    (got,) = xcom
    assert got["uri"] == CONSUMED and got["window_start"] == "2024-01-01T00:00:00+00:00", got

    (asset,) = [a for a in api.call("GET", "/api/v2/assets?limit=100")["assets"] if a["uri"] == CONSUMED]
    page.goto(f"{BASE}/assets/{asset['id']}")
    page.get_by_text(CONSUMER).first.wait_for(timeout=60_000)
    page.get_by_text(DAG_ID).first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    shot(page, "airflow-assets")

    # the DAG's own page: its graph with the DAG's dependencies shows the tables the alias resolved to
    graph = api.call("GET", f"/ui/structure/structure_data?dag_id={DAG_ID}&external_dependencies=true")
    tables = {n["label"] for n in graph["nodes"] if n.get("type") == "asset"}
    assert tables == {e["uri"] for e in events}, graph["nodes"]
    page.evaluate(f"""() => {{ localStorage.setItem('dependencies-{DAG_ID}', JSON.stringify('immediate'));
                              localStorage.setItem('default_dag_view', JSON.stringify('graph')); }}""")
    page.goto(f"{BASE}/dags/{DAG_ID}")
    page.get_by_text(CONSUMED.rsplit("/", 1)[1]).first.wait_for(timeout=60_000)
    page.wait_for_timeout(1500)
    shot(page, "airflow-dag-assets")


def lineage_events() -> list[dict]:
    """The OpenLineage events the file transport wrote (one JSON document a line)."""
    return [json.loads(line) for line in LINEAGE_FILE.read_text().splitlines() if line.strip()]


def test_lineage_of_the_run(prod):
    """OpenLineage's COMPLETE events of the trigger form's stage tasks name their datasets: land
    the Kafka topic (``kafka://host:port``) -> raw; normalize raw -> bronze; silver bronze -> the
    silver tables the run changed; lake tables by location (namespace ``file``) with schema,
    catalog and storage facets."""
    assert LINEAGE_FILE.exists(), f"no OpenLineage events in {LINEAGE_FILE}"
    complete = {e["job"]["name"]: e for e in lineage_events() if e["eventType"] == "COMPLETE"
                and e["job"]["name"].startswith(f"{DAG_ID}.") and e["job"]["name"].endswith(".run")}
    assert set(complete) == {f"{DAG_ID}.{s}.run" for s in ("land", "normalize", "silver")}, sorted(complete)
    warehouse = prod["cfg"].catalog.warehouse.removeprefix("file://")

    def names(e, side):
        return [(d["namespace"], d["name"].removeprefix(warehouse)) for d in e[side]]

    land, norm, silver = (complete[f"{DAG_ID}.{s}.run"] for s in ("land", "normalize", "silver"))
    assert names(land, "inputs") == [(f"kafka://{prod['cfg'].kafka.bootstrap_servers}", TOPIC)]
    assert names(land, "outputs") == [("file", "/raw/kafka_records"), ("file", "/raw/land_manifest")]
    assert names(norm, "inputs") == [("file", "/raw/kafka_records")]
    assert names(norm, "outputs") == [("file", f"/bronze/{t}") for t in ("changes", "quarantine", "control_events")]
    assert names(silver, "inputs") == [("file", "/bronze/changes")]
    assert sorted(n for _, n in names(silver, "outputs")) == sorted(
        table_location(prod["cfg"], NAME, f"{FORMATS[0].tag}_shop__{t}").removeprefix(f"file://{warehouse}")
        for t in TABLES)
    out = silver["outputs"][0]
    assert {"id", "_cdc_op"} <= {f["name"] for f in out["facets"]["schema"]["fields"]}, out
    assert out["facets"]["catalog"]["framework"] == "iceberg" and out["facets"]["catalog"]["name"] == "lake"
    assert out["facets"]["storage"]["storageLayer"] == "iceberg"
    (LINEAGE_FILE.parent / "openlineage-silver-complete.json").write_text(json.dumps(silver, indent=2))


def test_failed_gate_in_the_ui(prod, page):
    """A REST dag run with a conf (01:00-02:00) after a range overlapping the first hour's was
    written into the offset ledger by hand: land runs, its gate fails the run naming the ledger's
    ``overlaps`` and the Data Docs page; the UI shows that log, and the Data Docs page shows the failure."""
    api, cfg = prod["api"], prod["cfg"]
    edit_ledger(cfg, add=True)
    try:
        bad = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": {
            "start": "2024-01-01T01:00:00Z", "end": "2024-01-01T02:00:00Z", "topics": [TOPIC]}})
        assert bad["conf"]["start"] == "2024-01-01T01:00:00Z", bad
        assert api.wait_run(bad["dag_run_id"]) == "failed"
    finally:
        edit_ledger(cfg, add=False)
    tasks = {t["task_id"]: t["state"] for t in api.call(
        "GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{bad['dag_run_id']}/taskInstances")["task_instances"]}
    assert tasks["land.run"] == "success" and tasks["land.gate"] == "failed", tasks
    assert tasks.get("normalize.run") in ("upstream_failed", None), tasks
    page.goto(f"{BASE}/dags/{DAG_ID}/runs/{bad['dag_run_id']}/tasks/land.gate")
    page.get_by_text("land gate failed").first.wait_for(timeout=60_000)
    page.get_by_text("overlaps").first.wait_for()
    page.wait_for_timeout(1000)
    shot(page, "airflow-failed-gate")
    report = docs_path(cfg, "land", Window(hour(1), hour(2))) / "gate.html"
    page.goto(report.as_uri(), wait_until="domcontentloaded")
    page.get_by_text("FAILED: 1 of").wait_for()
    shot(page, "gate-data-docs")


def test_rest_backfill(prod):
    """Airflow 3's backfill endpoint over the scheduled hour 02:00 (window 01:00-02:00, the hour
    whose gate failed): the run succeeds, silver equals the source."""
    api = prod["api"]
    backfill = api.call("POST", "/api/v2/backfills", {
        "dag_id": DAG_ID, "from_date": "2024-01-01T02:00:00Z", "to_date": "2024-01-01T02:00:00Z",
        "max_active_runs": 1, "run_backwards": False, "reprocess_behavior": "none"})
    deadline = time.monotonic() + 2400
    while not api.call("GET", f"/api/v2/backfills/{backfill['id']}")["completed_at"]:
        assert time.monotonic() < deadline, "the backfill did not complete"
        time.sleep(3)
    runs = [r for r in api.runs() if r["run_type"] == "backfill"]
    assert [(r["logical_date"][:16], r["state"]) for r in runs] == [("2024-01-01T02:00", "success")], runs
    assert_silver_equals_source(prod, 2)


def test_the_production_parts_did_the_work(prod):
    """The stage jobs ran as applications of the standalone cluster with the pipeline's executor
    memory; Airflow's runs are rows of its PostgreSQL metadata database."""
    import psycopg2

    with urllib.request.urlopen(f"http://127.0.0.1:{prod['web']}/json/", timeout=5) as r:
        apps = [a for a in json.load(r)["completedapps"] if a["name"].startswith(f"cdc-{NAME}-")]
    names = sorted({a["name"] for a in apps})
    assert names == [f"cdc-{NAME}-land", f"cdc-{NAME}-normalize", f"cdc-{NAME}-silver"], names
    assert {a["memoryperexecutor"] for a in apps} == {1024}
    conn = psycopg2.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=prod["airflow_db"])
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT run_type, state, count(*) FROM dag_run WHERE dag_id = %s GROUP BY 1, 2", (DAG_ID,))
            counts = {(t, s): n for t, s, n in cur.fetchall()}
    finally:
        conn.close()
    assert counts.get(("backfill", "success")) == 1 and counts.get(("manual", "failed")) == 1, counts
