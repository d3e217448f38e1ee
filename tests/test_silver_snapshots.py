"""Snapshots by hour and freshness SLAs of silver tables, on a simulated shop over two topics:
topic ``a`` has changes in hours 0 and 1, topic ``b`` only in hour 0 (it goes silent).

- Each window's silver commit records in its snapshot summary the window, the offset ledger's end
  offsets of the table's topics and the newest source position and time applied (running maxima),
  whichever path merged it: Spark's MERGE (window 0), the file level in Spark tasks (window 1), a rerun.
- Each changed table is tagged ``cdc-<YYYYMMDDHH>`` of the window's last hour; Spark's
  ``VERSION AS OF 'cdc-...'`` and pyiceberg read each hour's state; a rerun of an older hour
  leaves the tags; the maintenance job removes tags past ``maintenance.hourly_tag_retention_hours``
  and Iceberg's ``expire_snapshots`` keeps the snapshots of those retained.
- Freshness: the silver run metrics carry each table's newest source time; the check fails naming
  the silent topic's tables, their lag and the SLA (per-table overrides win); in Airflow, the
  ``freshness`` task fails and the pipeline's failure callback runs (``dag.test()``, no mocks).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sys

import pytest
from conftest import write_pipeline
from pipeline import all_rows, hour, ledger_rows

from cdclake import sim
from cdclake.catalog import pyiceberg_catalog
from cdclake.config import load_pipeline
from cdclake.errors import FreshnessError
from cdclake.freshness import check_freshness, table_freshness
from cdclake.land import land
from cdclake.metrics import metric_rows
from cdclake.normalize import normalize
from cdclake.silver import build_silver
from cdclake.silver.snapshots import (LEDGER_END_OFFSETS, NEWEST_POSITION, NEWEST_TS_MS, WINDOW_END, WINDOW_START,
                                      hour_tag)
from cdclake.types import quote_ident
from cdclake.window import UTC, Window

TABLES = ("customers", "orders", "products")


def _produce(stack, topic: str, seed: int, hours: int) -> int:
    src = sim.SimulatedSource(seed=seed, start=hour(0), hours=hours, tx_per_hour=20)
    msgs = sim.debezium_json(src.run(), src.tables)
    sim.create_topic(stack["bootstrap"], topic, 1 + max(m.partition for m in msgs))
    sim.produce(stack["bootstrap"], topic, msgs)
    return max(m.timestamp_ms for m in msgs)


@pytest.fixture(scope="module")
def two_hours(stack, spark):
    """Windows 0 (Spark's MERGE) and 1 (the file level, in Spark tasks) of the two topics; each
    table's rows after each."""
    import uuid

    u = uuid.uuid4().hex[:6]
    a, b = f"snap.a.{u}", f"snap.b.{u}"
    _produce(stack, a, 7, 2)
    _produce(stack, b, 8, 1)
    path = write_pipeline(f"snap_{u}", [{"topic": a, "format": "debezium-json", "table_prefix": "a_"},
                                        {"topic": b, "format": "debezium-json", "table_prefix": "b_"}],
                          silver={"namespace": f"snap_{u}"}, maintenance={"hourly_tag_retention_hours": 24})
    cfg = load_pipeline(path)
    results, states = [], []
    # window 0: Spark's MERGE; window 1: the file level in Spark tasks (pyiceberg commits in Python workers)
    paths = ({"file_merge_max_changes": 0}, {"file_merge_task_tables": 1})
    for i in range(2):
        w = Window(hour(i), hour(i + 1))
        run_cfg = cfg.model_copy(update={"silver": cfg.silver.model_copy(update=paths[i])})
        land(spark, cfg, w)
        normalize(spark, cfg, w)
        results.append(build_silver(spark, run_cfg, w))
        states.append({t: all_rows(spark, table(cfg, t)) for t in names(cfg)})
    return {"cfg": cfg, "path": path, "a": a, "b": b, "results": results, "states": states}


def names(cfg) -> list[str]:
    return [f"{p}_shop__{t}" for p in ("a", "b") for t in TABLES]


def table(cfg, name: str) -> str:
    return f"{cfg.catalog.name}.{quote_ident(cfg.silver.namespace)}.{quote_ident(name)}"


def _bronze_newest(spark, cfg, topic: str, name: str, end: int) -> tuple[int, tuple]:
    """The newest source_ts_ms and source position of ``name``'s bronze changes landed before hour ``end``."""
    from pyspark.sql import functions as F

    rows = (spark.table(f"{cfg.catalog.name}.bronze.changes")
            .where((F.col("kafka_topic") == topic) & (F.col("source_table") == name.split("__")[-1])
                   & (F.col("landed_hour") < F.lit(hour(end))))
            .select("source_ts_ms", "source_position").collect())
    return max(r["source_ts_ms"] for r in rows), max(tuple(int(v) for v in r["source_position"]) for r in rows)


def test_each_commit_records_window_ledger_and_newest(spark, two_hours):
    cfg, a, b = two_hours["cfg"], two_hours["a"], two_hours["b"]
    cat = pyiceberg_catalog(cfg.catalog)
    try:
        for name in names(cfg):
            topic = a if name.startswith("a_") else b
            t = cat.load_table((cfg.silver.namespace, name))
            summary = t.current_snapshot().summary.additional_properties
            last = 1 if topic == a else 0  # b went silent: its tables' last silver commit is window 0's
            assert (summary[WINDOW_START], summary[WINDOW_END]) == (hour(last).isoformat(), hour(last + 1).isoformat())
            ledger = {str(p): end for p, h, _, end, _ in ledger_rows(spark, cfg, topic) if h == hour(last)}
            assert json.loads(summary[LEDGER_END_OFFSETS]) == {topic: ledger}
            ts, position = _bronze_newest(spark, cfg, topic, name, last + 1)
            assert int(summary[NEWEST_TS_MS]) == ts
            assert tuple(int(v) for v in json.loads(summary[NEWEST_POSITION])) == position
    finally:
        cat.engine.dispose()


def test_run_metrics_carry_each_tables_freshness(two_hours):
    cfg = two_hours["cfg"]
    result = two_hours["results"][1]
    run_at = hour(2) + dt.timedelta(minutes=10)
    rows = metric_rows(cfg, "silver", Window(hour(1), hour(2)), result, run_at, 1.0,
                       {two_hours["a"]: hour(0), two_hours["b"]: None})
    by_table = {r["silver_table"]: r for r in rows if r["silver_table"]}
    assert len(by_table) == 3 and all("`a_shop__" in k for k in by_table)
    for r in result:
        row = by_table[r.table]
        assert row["newest_source_ts"] == dt.datetime.fromtimestamp(r.newest_source_ts_ms / 1000, UTC)
        assert row["newest_source_ts"] >= hour(1)  # the table's own, not the topic's given above
        assert row["lag_s"] == (run_at - row["newest_source_ts"]).total_seconds()


def test_hourly_tags_read_each_hours_state(spark, two_hours):
    cfg, states = two_hours["cfg"], two_hours["states"]
    assert hour_tag(Window(hour(0), hour(3))) == "cdc-2024010102"
    assert any(states[0][n] != states[1][n] for n in names(cfg) if n.startswith("a_"))
    cat = pyiceberg_catalog(cfg.catalog)
    try:
        for name in names(cfg):
            t = cat.load_table((cfg.silver.namespace, name))
            tags = {n for n, ref in t.metadata.refs.items() if ref.snapshot_ref_type == "tag"}
            silent = name.startswith("b_")
            assert tags == ({"cdc-2024010100"} if silent else {"cdc-2024010100", "cdc-2024010101"}), (name, tags)
            assert t.metadata.refs["cdc-2024010100"].max_ref_age_ms == 24 * 3_600_000
            for i in (0, 1):
                if silent and i == 1:
                    continue
                tag = f"cdc-202401010{i}"
                spark_rows = all_rows_as_of(spark, table(cfg, name), tag)
                assert spark_rows == states[i][name], (name, tag)
                snap = t.snapshot_by_name(tag)
                assert t.scan(snapshot_id=snap.snapshot_id).to_arrow().num_rows == len(states[i][name])
    finally:
        cat.engine.dispose()


def all_rows_as_of(spark, name: str, tag: str) -> list:
    from pipeline import all_rows as rows_of

    view = f"as_of_{abs(hash((name, tag)))}"
    spark.sql(f"SELECT * FROM {name} VERSION AS OF '{tag}'").createOrReplaceTempView(view)
    try:
        return rows_of(spark, view)
    finally:
        spark.catalog.dropTempView(view)


def test_freshness_check_names_the_silent_topics_tables(two_hours):
    cfg = two_hours["cfg"]
    now = hour(2) + dt.timedelta(minutes=10)
    lagging = cfg.model_copy(update={"freshness": cfg.freshness.model_validate({"max_lag": "1h"})})
    fresh = {f.table: f for f in table_freshness(lagging, now)}
    assert len(fresh) == 6
    with pytest.raises(FreshnessError) as err:
        check_freshness(lagging, now)
    line = str(err.value)
    assert "\n" not in line and "3 silver table(s)" in line and "max_lag 1h00m" in line, line
    for name in names(cfg):
        f = fresh[f"{cfg.silver.namespace}.{name}"]
        assert f.late == name.startswith("b_"), f
        assert (name in line) == name.startswith("b_"), line
        assert f.lag_s == (now - f.newest_source_ts).total_seconds()
    # a per-table SLA wins over the pipeline's
    override = cfg.model_copy(update={"freshness": cfg.freshness.model_validate(
        {"max_lag": 3600, "tables": {"b_shop__orders": "3h"}})})
    with pytest.raises(FreshnessError) as err:
        check_freshness(override, now)
    assert "2 silver table(s)" in str(err.value) and "b_shop__orders" not in str(err.value)
    assert check_freshness(cfg, now)  # no SLA: nothing is late


def test_rerun_of_an_older_hour_keeps_tags_and_freshness(spark, two_hours):
    cfg = two_hours["cfg"]
    cat = pyiceberg_catalog(cfg.catalog)
    try:
        before = {n: dict(cat.load_table((cfg.silver.namespace, n)).metadata.refs) for n in names(cfg)}
        before_fresh = table_freshness(cfg, hour(3), cat)
        w = Window(hour(0), hour(1))
        build_silver(spark, cfg, w)
        for n in names(cfg):
            refs = dict(cat.load_table((cfg.silver.namespace, n)).metadata.refs)
            if n.startswith("a_"):  # a later hour is tagged: the older hour's tag stays where it was
                assert refs["cdc-2024010100"] == before[n]["cdc-2024010100"]
                assert refs["cdc-2024010101"] == before[n]["cdc-2024010101"]
        assert table_freshness(cfg, hour(3), cat) == before_fresh  # running maxima
        assert {t: all_rows(spark, table(cfg, t)) for t in names(cfg)} == two_hours["states"][1]
    finally:
        cat.engine.dispose()


CALLBACK = '''
import json, os
def record(context):
    ti = context["ti"]
    with open(os.environ["CDC_TEST_FRESHNESS_CALLBACK_FILE"], "a") as f:
        f.write(json.dumps({"task": ti.task_id, "try": ti.try_number}) + "\\n")
'''


def test_freshness_task_fails_and_calls_back_in_airflow(two_hours, tmp_path):
    """The pipeline DAG run by Airflow (``dag.test()``, no mocks) over hour 1 of topic ``a``, which
    the fixture has already run through every stage: the stages and gates are marked successful
    instead of being run again (``mark_success_pattern``), then the ``freshness`` task runs and
    fails (the SLA is set between the two topics' lags now, so the silent topic's tables are
    late) and the pipeline's failure callback runs, for that task alone."""
    import importlib.util

    from conftest import REPO

    from cdclake.airflow_local import migrate

    cfg = two_hours["cfg"]
    (tmp_path / "cdc_test_freshness_callback.py").write_text(CALLBACK)
    sys.path.insert(0, str(tmp_path))
    calls = tmp_path / "calls.jsonl"
    os.environ["CDC_TEST_FRESHNESS_CALLBACK_FILE"] = str(calls)
    newest = {f.table: f.newest_source_ts for f in table_freshness(cfg)}
    silent = max(ts for t, ts in newest.items() if ".b_" in t)
    fresh = min(ts for t, ts in newest.items() if ".a_" in t)
    assert fresh - silent > dt.timedelta(minutes=20)
    max_lag = int((dt.datetime.now(UTC) - (silent + (fresh - silent) / 2)).total_seconds())
    sources = [{"topic": s.topic, "format": s.format, "table_prefix": s.table_prefix} for s in cfg.sources]
    path = write_pipeline(f"{cfg.name}_sla", sources, silver={"namespace": cfg.silver.namespace},
                          freshness={"max_lag": max_lag},
                          airflow={"retries": 2, "on_failure_callback": "cdc_test_freshness_callback:record"})
    try:
        migrate()
        spec = importlib.util.spec_from_file_location("cdc_pipelines_fresh", REPO / "dags" / "cdc_pipelines.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sla = load_pipeline(path)
        dag = getattr(module, sla.dag_id)
        assert dag.get_task("freshness").upstream_task_ids == {"silver.gate"}
        assert "freshness" not in getattr(module, cfg.dag_id).task_ids  # no SLA, no task
        run = dag.test(run_conf={"start": hour(1).isoformat(), "end": hour(2).isoformat(), "topics": [two_hours["a"]]},
                       mark_success_pattern=r"(?!freshness$).*")
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
        assert states.pop("freshness") == "failed", states
        assert set(states.values()) == {"success"}, states
        assert calls.read_text().splitlines() == ['{"task": "freshness", "try": 1}'], calls.read_text()
    finally:
        sys.path.remove(str(tmp_path))
        path.unlink()


def test_maintenance_removes_tags_past_retention_and_keeps_tagged_snapshots(spark, two_hours):
    from cdclake.maintenance import maintain

    cfg = two_hours["cfg"]
    quiet = cfg.model_copy(update={"maintenance": cfg.maintenance.model_copy(update={"rewrite_data_files": False})})
    # retention 24 h: at 01:30 on Jan 2 the hour 00 (ended 01:00) is past it, hour 01 (ended 02:00) is not
    steps = maintain(spark, quiet, now=hour(25) + dt.timedelta(minutes=30))
    removed = {s["table"]: s["tags_removed"] for s in steps if s["procedure"] == "remove_hourly_tags"}
    ns = cfg.silver.namespace
    assert {k: v for k, v in removed.items() if k.startswith(f"{ns}.")} == {
        f"{ns}.{n}": ["cdc-2024010100"] for n in names(cfg)}
    # expire every snapshot Iceberg may: the tagged ones stay readable
    stamp = (dt.datetime.now(UTC) + dt.timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
    for n in names(cfg):
        spark.sql(f"CALL {cfg.catalog.name}.system.expire_snapshots(table => '{ns}.{n}', "
                  f"older_than => TIMESTAMP '{stamp}', retain_last => 1)").collect()
    for n in names(cfg):
        if n.startswith("a_"):
            assert all_rows_as_of(spark, table(cfg, n), "cdc-2024010101") == two_hours["states"][1][n]
        with pytest.raises(Exception, match="cdc-2024010100"):
            spark.sql(f"SELECT * FROM {table(cfg, n)} VERSION AS OF 'cdc-2024010100'").collect()
