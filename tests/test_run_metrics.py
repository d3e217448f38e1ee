"""Run metrics: every stage run appends one row per topic (silver: per topic and silver table) to
``bronze.run_metrics``, with the figures the stage returned, through the entry points' own call
(:func:`cdclake.cli.run_stage`) on a small simulated Debezium hour with one bad record.
"""
from __future__ import annotations

import datetime as dt
import logging

import pytest
from conftest import write_pipeline
from pipeline import H0, hour

from cdclake import sim
from cdclake.catalog import qualified
from cdclake.cli import run_stage
from cdclake.config import load_pipeline
from cdclake.land import land
from cdclake.lake import BRONZE_TABLE, RUN_METRICS_TABLE, window_filter
from cdclake.metrics import METRIC_COLUMNS, record_run
from cdclake.normalize import normalize
from cdclake.silver import build_silver
from cdclake.window import Window

STAGES = (("land", land), ("normalize", normalize), ("silver", build_silver))


@pytest.fixture(scope="module")
def hour0(stack, spark):
    """One hour of a small shop in Debezium JSON, plus one garbage record, run through the three stages twice."""
    import uuid

    u = uuid.uuid4().hex[:6]
    src = sim.SimulatedSource(seed=5, start=H0, hours=1, tx_per_hour=20)
    msgs = sim.debezium_json(src.run(), src.tables)
    m = msgs[len(msgs) // 2]
    msgs.insert(len(msgs) // 2, sim.Message(None, b"\xff not a change record", m.timestamp_ms, m.partition))
    topic = f"metrics.dbz.{u}"
    sim.create_topic(stack["bootstrap"], topic, 1 + max(m.partition for m in msgs))
    sim.produce(stack["bootstrap"], topic, msgs)
    cfg = load_pipeline(write_pipeline(f"metrics_{u}", [{"topic": topic, "format": "debezium-json",
                                                          "table_prefix": "dbz_"}], silver={"namespace": f"metrics_{u}"}))
    w = Window(hour(0), hour(1))
    runs = []
    for _ in range(2):
        started = dt.datetime.now(dt.timezone.utc)
        results = {stage: run_stage(spark, stage, fn, cfg, w) for stage, fn in STAGES}
        runs.append({"started": started, "results": results})
    rows = [r.asDict() for r in spark.table(qualified(cfg, RUN_METRICS_TABLE)).where(f"kafka_topic = '{topic}'")
            .orderBy("run_at", "stage", "silver_table").collect()]
    return {"cfg": cfg, "topic": topic, "window": w, "runs": runs, "rows": rows}


def of_run(hour0, i: int, stage: str) -> list[dict]:
    """The metrics rows of stage ``stage`` of run ``i`` (runs are told apart by run_at)."""
    start = hour0["runs"][i]["started"].replace(tzinfo=None)
    end = hour0["runs"][i + 1]["started"].replace(tzinfo=None) if i + 1 < len(hour0["runs"]) else dt.datetime.max
    return [r for r in hour0["rows"] if r["stage"] == stage and start <= r["run_at"] < end]


def test_figures_equal_the_stage_results(spark, hour0):
    topic, w = hour0["topic"], hour0["window"]
    res = hour0["runs"][0]["results"]
    (landed,) = of_run(hour0, 0, "land")
    assert landed["records_landed"] == res["land"][topic] > 0
    assert landed["window_start"] == w.start.replace(tzinfo=None) and landed["window_end"] == w.end.replace(tzinfo=None)
    assert landed["change_rows"] is None and landed["silver_table"] is None and landed["lag_s"] is None
    assert landed["pipeline"] == hour0["cfg"].name and landed["duration_s"] > 0

    (norm,) = of_run(hour0, 0, "normalize")
    n = res["normalize"][topic]
    assert (norm["records_parsed"], norm["change_rows"], norm["quarantined"], norm["control"]) == (
        n["raw"], n["changes"], n["quarantined"], n["control"])
    assert norm["records_parsed"] == landed["records_landed"] and norm["quarantined"] == 1
    assert norm["records_landed"] is None and norm["changes_merged"] is None

    silver = of_run(hour0, 0, "silver")
    want = sorted((t.table, t.changes, t.upserts, t.deletes) for t in res["silver"])
    assert len(want) == 3  # customers, products, orders
    assert sorted((r["silver_table"], r["changes_merged"], r["keys_upserted"], r["keys_deleted"]) for r in silver) == want
    assert sum(r["changes_merged"] for r in silver) == n["changes"]  # every change row went to one table
    assert all(r["records_parsed"] is None and r["quarantined"] is None for r in silver)

    # lag: from the newest source commit time of the window's bronze changes (normalize: the
    # topic's; silver: each table's own freshness) to when the stage finished
    from pyspark.sql import functions as F

    bronze = spark.table(qualified(hour0["cfg"], BRONZE_TABLE)).where(window_filter(w, [topic]))
    newest = {"": bronze.agg(F.max("source_ts_ms")).first()[0]}
    newest.update({r[0]: r[1] for r in bronze.groupBy("source_table").agg(F.max("source_ts_ms")).collect()})
    for r in [norm, *silver]:
        table = (r["silver_table"] or "").rsplit("__", 1)[-1].strip("`")
        assert r["newest_source_ts"] == dt.datetime.fromtimestamp(newest[table] / 1000, dt.timezone.utc).replace(tzinfo=None)
        assert r["lag_s"] == pytest.approx((r["run_at"] - r["newest_source_ts"]).total_seconds(), abs=1e-3)
        assert r["run_at"] >= landed["run_at"]


def test_a_rerun_appends_rows(hour0):
    assert len(hour0["rows"]) == 2 * (1 + 1 + 3)
    for stage in ("land", "normalize", "silver"):
        first, second = of_run(hour0, 0, stage), of_run(hour0, 1, stage)
        assert len(first) == len(second) == (3 if stage == "silver" else 1)
        assert {r["run_at"] for r in first}.isdisjoint({r["run_at"] for r in second})
    (a,), (b,) = of_run(hour0, 0, "normalize"), of_run(hour0, 1, "normalize")
    assert [a[c] for c in ("records_parsed", "change_rows", "quarantined", "control")] == [
        b[c] for c in ("records_parsed", "change_rows", "quarantined", "control")]


def test_the_tables_the_latest_silver_run_changed(hour0):
    """The silver gate's asset events and silver's lineage outputs: the tables of the window's
    latest silver run, read back from ``bronze.run_metrics`` (``cdclake.lineage``), with the
    run's counts; every stage's lineage names its lake tables with their Iceberg schemas."""
    from cdclake.lineage import stage_datasets, window_changes

    cfg, w, topic = hour0["cfg"], hour0["window"], hour0["topic"]
    latest = hour0["runs"][1]["results"]["silver"]
    changed = window_changes(cfg, w)
    assert sorted((f"lake.`{c.namespace}`.`{c.table}`", c.changes, c.upserts, c.deletes) for c in changed) == sorted(
        (t.table, t.changes, t.upserts, t.deletes) for t in latest)
    assert all(c.uri == f"iceberg://lake/{cfg.silver.namespace}/{c.table}" and c.topics == (topic,) for c in changed)
    assert window_changes(cfg, Window(hour(5), hour(6))) == []  # no silver run of that window

    land_in, land_out = stage_datasets(cfg, "land", w)
    assert [(d.namespace, d.name) for d in land_in] == [(f"kafka://{cfg.kafka.bootstrap_servers}", topic)]
    assert [d.table for d in land_out] == ["raw.kafka_records", "raw.land_manifest"]
    norm_in, norm_out = stage_datasets(cfg, "normalize", w)
    assert [d.table for d in norm_in] == ["raw.kafka_records"]
    assert [d.table for d in norm_out] == ["bronze.changes", "bronze.quarantine", "bronze.control_events"]
    silver_in, silver_out = stage_datasets(cfg, "silver", w)
    assert [d.table for d in silver_in] == ["bronze.changes"]
    assert sorted(d.table for d in silver_out) == sorted(f"{c.namespace}.{c.table}" for c in changed)
    for d in land_out + norm_in + silver_out:
        assert d.namespace == "file" and d.name.startswith(cfg.catalog.warehouse.removeprefix("file://")), d
    assert ("kafka_offset", "long") in land_out[0].fields
    assert dict(silver_in[0].fields)["before"] == "map<string, string>"
    assert "_cdc_op" in dict(silver_out[0].fields)


def test_a_failure_to_record_only_warns(spark, hour0, caplog):
    """A stage result the metrics cannot read is a warning; record_run returns None and raises nothing."""
    with caplog.at_level(logging.WARNING, logger="cdclake.metrics"):
        assert record_run(spark, hour0["cfg"], "silver", hour0["window"], [object()], 1.0) is None
    assert any("run metrics of silver" in r.getMessage() for r in caplog.records)


def test_one_log_line_per_row(spark, hour0, caplog):
    res = hour0["runs"][0]["results"]
    with caplog.at_level(logging.INFO, logger="cdclake.metrics"):
        rows = record_run(spark, hour0["cfg"], "normalize", hour0["window"], res["normalize"], 2.5)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run metrics: normalize")]
    assert len(rows) == len(lines) == 1
    assert f"topic {hour0['topic']} window 2024-01-01T00:00:00+00:00..2024-01-01T01:00:00+00:00" in lines[0]
    assert f"quarantined={res['normalize'][hour0['topic']]['quarantined']}" in lines[0]
    assert "duration_s=2.500" in lines[0] and set(METRIC_COLUMNS) == set(rows[0])


def test_the_readme_query(spark, hour0):
    """The query of throughput and lag in docs/operations.md gives the latest run's figures of the hour."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    (sql,) = re.findall(r"\*\*Run metrics\.\*\*.*?```sql\n(.*?)```", readme, re.S)
    res = hour0["runs"][1]["results"]
    topic = hour0["topic"]
    (row,) = [r for r in spark.sql(sql.strip().rstrip(";")).collect() if r.kafka_topic == topic]
    assert (row.landed, row.change_rows, row.quarantined, row.merged) == (
        res["land"][topic], res["normalize"][topic]["changes"], res["normalize"][topic]["quarantined"],
        sum(t.changes for t in res["silver"]))
    assert row.silver_lag_s > 0
