"""Daily table maintenance with Iceberg's procedures, on the run's SQLite JDBC catalog.

A merge-on-read silver table (with its tombstones) gets three hours of changes in two MERGEs:
updates and deletes leave position-delete files, and each MERGE a snapshot. ``maintain`` then
compacts, expires snapshots, removes orphan files and deletes raw and bronze hours past
retention; silver keeps its rows exactly. The hours are the last few before now, so that the
retention cutoffs and the snapshot expiry are counted from one ``now``.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import json

from conftest import REPO, write_pipeline

from cdclake.config import load_pipeline
from cdclake.land import land
from cdclake.maintenance import maintain
from cdclake.normalize import normalize
from cdclake.silver import build_silver
from cdclake.sim import Message, create_topic, produce
from cdclake.types import quote_ident
from cdclake.window import Window

UTC = dt.timezone.utc


def event(op: str, id_: int, value: str | None, pos: int) -> bytes:
    """A schemaless Debezium MySQL event for table ``shop.t`` at binlog position ``pos``."""
    src = {"connector": "mysql", "db": "shop", "table": "t", "file": "mysql-bin.000001", "pos": pos, "row": 0,
           "ts_ms": 1704067200000 + pos, "snapshot": "false"}
    after = None if op == "d" else {"id": id_, "v": value}
    before = {"id": id_, "v": "x"} if op in ("u", "d") else None
    return json.dumps({"before": before, "after": after, "source": src, "op": op, "ts_ms": src["ts_ms"]}).encode()


def changes_by_hour() -> list[list[tuple[str, int, str | None]]]:
    """Three hours of changes (260 in all): 120 inserts; 60 updates and 20 deletes; 30 updates, 10
    deletes and 20 inserts."""
    return [
        [("c", i, f"v{i}") for i in range(120)],
        [("u", i, f"w{i}") for i in range(60)] + [("d", i, None) for i in range(100, 120)],
        [("u", i, f"z{i}") for i in range(30, 60)] + [("d", i, None) for i in range(60, 70)]
        + [("c", i, f"n{i}") for i in range(200, 220)],
    ]


def table(cfg, ns: str, name: str) -> str:
    return f"{cfg.catalog.name}.{quote_ident(ns)}.{quote_ident(name)}"


def count(spark, sql: str) -> int:
    return spark.sql(sql).collect()[0][0]


def hours_of(spark, cfg, tbl: str, topic: str) -> dict[dt.datetime, int]:
    rows = spark.sql(f"SELECT landed_hour, count(*) AS n FROM {cfg.catalog.name}.{tbl} "
                     f"WHERE kafka_topic = '{topic}' GROUP BY landed_hour").collect()
    return {r["landed_hour"].replace(tzinfo=UTC): r["n"] for r in rows}


def test_maintain_compacts_expires_and_applies_retention(stack, spark, unique):
    topic, ns, other = f"maint.{unique}", f"maint_{unique}", f"maint.other.{unique}"
    h0 = dt.datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - dt.timedelta(hours=5)
    hours = [h0 + dt.timedelta(hours=i) for i in range(3)]
    create_topic(stack["bootstrap"], topic, 1)
    msgs, pos = [], 100
    for h, changes in zip(hours, changes_by_hour()):
        for i, (op, id_, v) in enumerate(changes):
            pos += 10
            msgs.append(Message(json.dumps({"id": id_}).encode(), event(op, id_, v, pos),
                                int(h.timestamp() * 1000) + 1000 + i, 0))
    produce(stack["bootstrap"], topic, msgs)
    # now: 7.5 hours after h0. Snapshots older than now - 1 h (all of them) are expired down to
    # the last one; raw keeps landed hours from h0 + 1 h on, bronze from h0 + 2 h on.
    now = h0 + dt.timedelta(hours=7, minutes=30)
    path = write_pipeline(ns, [{"topic": topic, "format": "debezium-json", "primary_key": ["id"]}],
                          silver={"namespace": ns, "buckets": 2, "file_merge_max_changes": 0},  # MERGEs leave delete files
                          maintenance={"snapshot_retention_hours": 1, "retain_last_snapshots": 1,
                                       "raw_retention_hours": 6, "bronze_retention_hours": 5,
                                       "hourly_tag_retention_hours": 1})
    cfg = load_pipeline(path)
    every = Window(hours[0], hours[-1] + dt.timedelta(hours=1))
    land(spark, cfg, every)
    normalize(spark, cfg, every)
    # two MERGEs: the inserts, then the updates and deletes (position deletes), a snapshot each
    build_silver(spark, cfg, Window(hours[0], hours[1]))
    build_silver(spark, cfg, Window(hours[1], every.end))
    # a row of a topic of no pipeline here, in the oldest hour: retention leaves it alone
    spark.sql(f"INSERT INTO {cfg.catalog.name}.raw.kafka_records VALUES ('{other}', 0, 0, 0, NULL, NULL, NULL, "
              f"TIMESTAMP '{h0:%Y-%m-%d %H:%M:%S}')")

    silver = table(cfg, ns, "shop__t")
    tombstones = table(cfg, f"{ns}_tombstones", "shop__t")
    before = sorted(map(tuple, spark.table(silver).collect()), key=str)
    assert len(before) == 120 - 20 - 10 + 20
    assert count(spark, f"SELECT count(*) FROM {silver}.delete_files") > 0
    assert count(spark, f"SELECT count(*) FROM {silver}.snapshots") >= 2
    assert set(hours_of(spark, cfg, "raw.kafka_records", topic)) == set(hours)
    assert set(hours_of(spark, cfg, "bronze.changes", topic)) == set(hours)

    steps = maintain(spark, cfg, now=now)

    by = {(s["table"], s["procedure"]): s for s in steps}
    silver_key = f"{ns}.shop__t"
    # silver content unchanged, its position deletes applied and gone, one snapshot left
    assert sorted(map(tuple, spark.table(silver).collect()), key=str) == before
    assert by[(silver_key, "rewrite_data_files")]["rewritten_data_files_count"] > 0
    assert by[(silver_key, "rewrite_data_files")]["removed_delete_files_count"] > 0
    assert (silver_key, "rewrite_position_delete_files") in by
    assert count(spark, f"SELECT count(*) FROM {silver}.delete_files") == 0
    for t in (silver, tombstones, f"{cfg.catalog.name}.raw.kafka_records",
              f"{cfg.catalog.name}.bronze.changes"):
        assert count(spark, f"SELECT count(*) FROM {t}.snapshots") == 1, t
    assert by[(silver_key, "expire_snapshots")]["deleted_manifest_lists_count"] >= 2
    # the two windows' hourly tags are past their retention: removed first, so their snapshots expire
    assert by[(silver_key, "remove_hourly_tags")]["tags_removed"] == [f"cdc-{h:%Y%m%d%H}" for h in (hours[0], hours[2])]
    assert by[(silver_key, "remove_orphan_files")]["orphan_files_removed"] == 0
    # retention: raw from h0 + 1 h, bronze from h0 + 2 h; silver and tombstones never
    assert set(hours_of(spark, cfg, "raw.kafka_records", topic)) == set(hours[1:])
    assert set(hours_of(spark, cfg, "raw.kafka_records", other)) == {h0}
    assert set(hours_of(spark, cfg, "bronze.changes", topic)) == set(hours[2:])
    assert by[("raw.kafka_records", "delete")]["rows_deleted"] == 120
    assert by[("bronze.changes", "delete")]["rows_deleted"] == 120 + 80
    deleted = {s["table"] for s in steps if s["procedure"] == "delete"}
    assert deleted == {"raw.kafka_records", "bronze.changes", "bronze.quarantine", "bronze.control_events"}
    assert count(spark, f"SELECT count(*) FROM {tombstones}") > 0


def test_maintenance_dag(stack):
    path = write_pipeline("maintdag", [{"topic": "maintdag.t", "format": "debezium-json"}],
                          maintenance={"schedule": "0 3 * * *"}, airflow={"pool": "cdc_spark"})
    try:
        spec = importlib.util.spec_from_file_location("cdc_maintenance_under_test", REPO / "dags" / "cdc_maintenance.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        path.unlink()
    dag = module.cdc_maintdag_maintenance
    assert (dag.schedule, dag.max_active_runs, dag.catchup) == ("0 3 * * *", 1, False)
    (run,) = dag.tasks
    assert run.pool == "cdc_spark"
    assert run.application.endswith("jobs/maintenance.py")
    assert run.application_args == ["--pipeline", str(path.resolve())]
    assert run.execution_timeout == dt.timedelta(hours=6)
