"""Assets and lineage names of a pipeline's tables (``cdclake.lineage``), without a run.

- Which tables a silver run changed, read from run metrics rows: the window's latest silver run
  only, a table whose changes merged are 0 has none (no asset event), another pipeline's or
  window's rows are ignored, a topic with ``history: true`` changed the history table too.
- The names: Asset URIs ``iceberg://<catalog>/<namespace>/<table>`` (percent-encoded), the Spark
  names of the run metrics split back into parts, Kafka topics as OpenLineage names them
  (``kafka://host:port``), table locations as ``file`` and a path.

A real run's run metrics, asset events and lineage: ``test_run_metrics.py`` (the library) and
``test_production.py`` (Airflow's scheduler, a downstream DAG, OpenLineage's file transport).
"""
from __future__ import annotations

import datetime as dt

import pytest
import yaml

from cdclake.config import load_pipeline
from cdclake.lineage import asset_uri, changed_tables, kafka_dataset, location_name, split_quoted
from cdclake.window import UTC, Window

H = dt.datetime(2024, 1, 1, tzinfo=UTC)
W = Window(H, H + dt.timedelta(hours=1))


@pytest.fixture()
def cfg(tmp_path):
    doc = {"kafka": {"bootstrap_servers": "PLAINTEXT://broker1:9092, broker2:9092"},
           "catalog": {"name": "lake", "uri": f"jdbc:sqlite:{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/w"},
           "sources": [{"topic": "shop.dbz", "format": "debezium-json", "table_prefix": "dbz_"},
                       {"topic": "shop.hist", "format": "debezium-json", "table_prefix": "h_", "history": True}],
           "silver": {"namespace": "silver"}}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_pipeline(path)


def row(cfg, run_at: dt.datetime, topic: str, table, merged: int, window: Window = W, **kw) -> dict:
    """A silver run metrics row (timestamps naive UTC, as the table gives them)."""
    naive = lambda t: t.astimezone(UTC).replace(tzinfo=None)  # noqa: E731
    return {"run_at": naive(run_at), "pipeline": kw.get("pipeline", cfg.name), "stage": kw.get("stage", "silver"),
            "kafka_topic": topic, "window_start": naive(window.start), "window_end": naive(window.end),
            "silver_table": table, "changes_merged": merged, "keys_upserted": merged, "keys_deleted": 0}


def test_only_the_latest_run_and_changed_tables(cfg):
    first, second = H + dt.timedelta(hours=2), H + dt.timedelta(hours=3)
    rows = [
        row(cfg, first, "shop.dbz", "lake.silver.`dbz_shop__orders`", 7),  # an earlier run of the window
        row(cfg, second, "shop.dbz", "lake.silver.`dbz_shop__customers`", 3),
        row(cfg, second, "shop.dbz", "lake.silver.`dbz_shop__products`", 0),  # unchanged: no event
        row(cfg, second, "shop.dbz", "lake.silver.`dbz_shop__x`", 5, pipeline="other"),
        row(cfg, second, "shop.dbz", "lake.silver.`dbz_shop__y`", 5, stage="normalize"),
        row(cfg, second, "shop.dbz", "lake.silver.`dbz_shop__z`", 5, window=Window(W.end, W.end + dt.timedelta(hours=1))),
        row(cfg, second, "shop.hist", None, 0),  # a topic without changes
    ]
    (changed,) = changed_tables(cfg, W, rows)
    assert (changed.namespace, changed.table, changed.changes, changed.topics) == (
        "silver", "dbz_shop__customers", 3, ("shop.dbz",))
    assert changed.uri == "iceberg://lake/silver/dbz_shop__customers"
    assert changed.extra(cfg.name) == {
        "pipeline": cfg.name, "table": "silver.dbz_shop__customers", "window_start": "2024-01-01T00:00:00+00:00",
        "window_end": "2024-01-01T01:00:00+00:00", "changes": 3, "keys_upserted": 3, "keys_deleted": 0,
        "topics": ["shop.dbz"]}
    assert changed_tables(cfg, W, rows[:1])[0].table == "dbz_shop__orders"
    assert changed_tables(cfg, W, []) == []


def test_a_history_topic_changes_the_history_table(cfg):
    rows = [row(cfg, H, "shop.hist", "lake.silver.`h_shop__customers`", 2)]
    assert [(c.namespace, c.uri) for c in changed_tables(cfg, W, rows)] == [
        ("silver", "iceberg://lake/silver/h_shop__customers"),
        ("silver_history", "iceberg://lake/silver_history/h_shop__customers")]


def test_a_narrowed_window_reads_its_topics_only(cfg):
    rows = [row(cfg, H, "shop.dbz", "lake.silver.`dbz_shop__customers`", 2),
            row(cfg, H, "shop.hist", "lake.silver.`h_shop__customers`", 2)]
    narrowed = Window(W.start, W.end, ("shop.hist",))
    assert [c.table for c in changed_tables(cfg, narrowed, rows) if c.namespace == "silver"] == ["h_shop__customers"]


def test_names(cfg):
    assert split_quoted("lake.silver.`a.b``c`") == ["lake", "silver", "a.b`c"]
    assert asset_uri(cfg, "silver", "db/x y") == "iceberg://lake/silver/db%2Fx%20y"
    assert kafka_dataset(cfg, "shop.dbz") == kafka_dataset(cfg, "shop.dbz")
    assert (kafka_dataset(cfg, "shop.dbz").namespace, kafka_dataset(cfg, "shop.dbz").name) == (
        "kafka://broker1:9092", "shop.dbz")
    assert location_name("file:///w/silver/t") == location_name("/w/silver/t") == ("file", "/w/silver/t")
    assert location_name("s3://bucket/w/silver/t") == ("s3://bucket", "/w/silver/t")
