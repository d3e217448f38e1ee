"""Airflow as users run it: the UI in a real browser and the REST API, on a pipeline of its own.

One Airflow start for the module (``cdclake.airflow_local.start``: API server, scheduler, DAG
processor) over a pipeline of simulated Debezium JSON traffic:

- in Chromium (Playwright, headless), log in, open the DAG, fill the Trigger form (``start``,
  ``end``, ``topics``), wait for the run to succeed and compare silver with the source; open the
  log of the failed task of a run whose window ends before it starts. The screenshots go to
  ``docs/screenshots/`` (the README shows them).
- through the REST API, trigger a run with a conf, then backfill two hours
  (``POST /api/v2/backfills``) and compare silver with the source after each.

The pipeline's schedule fires hourly on 1 January only: the hours of the backfill are there, and
no scheduled run starts while the module runs.

Four full DAG runs take minutes on 2 cores, so this module runs in ``make test-extended``
(marker ``extended``), not in ``make test``.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, STATE, write_pipeline
from pipeline import hour, ms

from cdclake.sim import TABLES, SimulatedSource, create_topic, produce

pytestmark = pytest.mark.extended
from cdclake.sim.compare import compare_table
from cdclake.sim.render import state_before
from cdclake.sim.wire import WIRE_FORMATS
from cdclake.types import quote_ident

BASE = "http://127.0.0.1:8080"
NAME = "uitest"
DAG_ID = f"cdc_{NAME}"
TOPIC = "uitest.dbz"
CHROMIUM = "/usr/bin/chromium"
SHOTS = REPO / "docs" / "screenshots"
(WF,) = [wf for wf in WIRE_FORMATS if wf.format == "debezium-json"]


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

    def wait_run(self, run_id: str, timeout_s: float = 420) -> str:
        """Wait until the run ``run_id`` finishes; its state."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.call("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                return state
            assert time.monotonic() < deadline, f"run {run_id} still {state} after {timeout_s:.0f}s"
            time.sleep(3)


@contextlib.contextmanager
def running_airflow(bootstrap: str):
    """The pipeline ``uitest`` alone in ``$CDC_PIPELINES_DIR`` with four hours of traffic from
    2024-01-01T00:00Z, Airflow started on it, the DAG parsed and unpaused; yields
    ``(Api, state)``, ``state(h)`` the source as seen through the messages before hour ``h``,
    and stops Airflow at the end."""
    from cdclake import airflow_local

    pipelines = STATE / "ui-pipelines"
    pipelines.mkdir(exist_ok=True)
    saved = os.environ["CDC_PIPELINES_DIR"]
    os.environ["CDC_PIPELINES_DIR"] = str(pipelines)
    src = SimulatedSource(seed=41, start=hour(0), hours=4, tx_per_hour=20)
    history = src.run()
    create_topic(bootstrap, TOPIC, WF.partitions)
    messages = WF.messages(history, src.tables)
    produce(bootstrap, TOPIC, messages)
    path = write_pipeline(NAME, [{"topic": TOPIC, "format": WF.format, "table_prefix": f"{WF.tag}_", **WF.options}],
                          silver={"namespace": NAME}, airflow={"retries": 0, "schedule": "0 * 1 1 *"})
    path.rename(pipelines / path.name)
    try:
        airflow_local.start(timeout_s=240)
        home = Path(os.environ["AIRFLOW_HOME"])
        password = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
        api = Api(password)
        deadline = time.monotonic() + 300
        while True:
            try:
                dag = api.call("GET", f"/api/v2/dags/{DAG_ID}")
                break
            except urllib.error.HTTPError as exc:
                assert exc.code == 404 and time.monotonic() < deadline, f"DAG {DAG_ID} not parsed: {exc}"
                time.sleep(2)
        # Unpausing creates the run of the latest scheduled hour (catchup is off): it exists already, done.
        latest = dag["next_dagrun_logical_date"]
        if latest:
            run = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": latest, "conf": {}})
            api.call("PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/{run['dag_run_id']}", {"state": "success"})
        api.call("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
        yield api, lambda h: state_before(history, messages, ms(hour(h)), src.tables)
    finally:
        airflow_local.stop()
        os.environ["CDC_PIPELINES_DIR"] = saved


@pytest.fixture(scope="module")
def airflow(stack):
    """Airflow running on the module's pipeline: ``(Api, state)`` (:func:`running_airflow`)."""
    with running_airflow(stack["bootstrap"]) as out:
        yield out


def assert_silver_equals_source(spark, state, until_hour: int) -> None:
    """Each silver table equals the source as its messages before hour ``until_hour`` show it
    (a window can end inside a transaction committed just before the hour)."""
    expected = state(until_hour)
    for t, table in TABLES.items():
        (name,) = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN lake.{NAME}").collect()
                   if r["tableName"].startswith(f"{WF.tag}_") and r["tableName"].endswith(f"__{t}")]
        rows = [r.asDict() for r in spark.table(f"lake.{NAME}.{quote_ident(name)}").collect()]
        diffs = compare_table(expected[t], rows, list(table.primary_key))
        assert not diffs, (t, until_hour, diffs[:5])


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


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, headless, driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


def test_trigger_form_run_and_failed_task_log(airflow, browser, spark):
    """Log in, trigger the hour 00:00-01:00 of the pipeline's topic from the Trigger form, see the
    run succeed and silver equal the source; then read the log of a failed task in the UI."""
    api, state = airflow
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    login(page, api.password)
    page.goto(f"{BASE}/dags/{DAG_ID}")
    page.get_by_role("heading", name=DAG_ID).wait_for()
    shot(page, "airflow-dag")

    page.get_by_role("button", name="Trigger").first.click()
    form = page.get_by_role("dialog").filter(has=page.get_by_role("heading", name="Trigger Dag"))
    pick_time(page, form, "Window start", "2024/01/01", "00:00")
    pick_time(page, form, "Window end", "2024/01/01", "01:00")
    form.get_by_role("textbox", name="Enter each string on a new line").fill(TOPIC)
    shot(page, "airflow-trigger")
    with page.expect_response(lambda r: r.url.endswith(f"/dags/{DAG_ID}/dagRuns") and r.request.method == "POST") as posted:
        form.get_by_role("button", name="Trigger").click()
    run = posted.value.json()
    assert run["conf"]["topics"] == [TOPIC] and run["conf"]["start"].startswith("2024-01-01T00:00"), run["conf"]
    assert api.wait_run(run["dag_run_id"]) == "success"
    assert_silver_equals_source(spark, state, 1)
    page.goto(f"{BASE}/dags/{DAG_ID}/runs/{run['dag_run_id']}")
    page.get_by_role("link", name="silver").first.wait_for()
    page.wait_for_timeout(1500)
    shot(page, "airflow-run")

    # A window that ends before it starts passes the form's checks and fails the window task.
    bad = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                   {"logical_date": None, "conf": {"start": "2024-01-01T02:00:00Z", "end": "2024-01-01T01:00:00Z"}})
    assert api.wait_run(bad["dag_run_id"]) == "failed"
    page.goto(f"{BASE}/dags/{DAG_ID}/runs/{bad['dag_run_id']}/tasks/window")
    page.get_by_text("bad window").first.wait_for(timeout=60_000)
    page.wait_for_timeout(1000)
    shot(page, "airflow-failed-task-log")
    page.close()


def test_rest_run_and_backfill(airflow, spark):
    """A run with a conf through ``POST /api/v2/dags/{dag_id}/dagRuns`` (hour 01:00), then a
    backfill through ``POST /api/v2/backfills`` of the scheduled hours 03:00 and 04:00 (windows
    02:00-03:00 and 03:00-04:00): every run succeeds, silver equals the source after each."""
    api, state = airflow
    run = api.call("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                   {"logical_date": None, "conf": {"start": "2024-01-01T01:00:00Z", "end": "2024-01-01T02:00:00Z"}})
    assert api.wait_run(run["dag_run_id"]) == "success"
    assert_silver_equals_source(spark, state, 2)

    backfill = api.call("POST", "/api/v2/backfills", {
        "dag_id": DAG_ID, "from_date": "2024-01-01T03:00:00Z", "to_date": "2024-01-01T04:00:00Z",
        "max_active_runs": 1, "run_backwards": False, "reprocess_behavior": "none"})
    deadline = time.monotonic() + 600
    while not api.call("GET", f"/api/v2/backfills/{backfill['id']}")["completed_at"]:
        assert time.monotonic() < deadline, "the backfill did not complete"
        time.sleep(3)
    runs = [r for r in api.runs() if r["run_type"] == "backfill"]
    assert sorted((r["logical_date"][:16], r["state"]) for r in runs) == [
        ("2024-01-01T03:00", "success"), ("2024-01-01T04:00", "success")], runs
    assert_silver_equals_source(spark, state, 4)
