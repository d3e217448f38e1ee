"""The stage and gate result types (``cdclake.results``): the run metrics rows each gives, and each
read as the plain value it stands for. No Spark, no services."""
from __future__ import annotations

import datetime as dt
import types

import pytest

from cdclake.metrics import METRIC_COLUMNS, metric_rows
from cdclake.results import (GateResult, LandResult, NormalizeResult, SilverResult, StageResult, TableResult,
                             TopicCounts)
from cdclake.window import Window

UTC = dt.timezone.utc
WINDOW = Window(dt.datetime(2024, 1, 1, tzinfo=UTC), dt.datetime(2024, 1, 1, 1, tzinfo=UTC))
RUN_AT = dt.datetime(2024, 1, 1, 2, tzinfo=UTC)
#: the figures of metric_rows that are the stage's own (the rest are the same for every stage)
OWN = [c for c in METRIC_COLUMNS if c not in ("run_at", "pipeline", "stage", "kafka_topic", "window_start",
                                              "window_end", "newest_source_ts", "lag_s", "duration_s")]


def _cfg(*topics: str):
    return types.SimpleNamespace(name="results", topics=lambda: list(topics))


def _figures(rows: list[dict]) -> list[dict]:
    return [{"kafka_topic": r["kafka_topic"], **{c: r[c] for c in OWN if r[c] is not None}} for r in rows]


def test_land_rows_and_reading():
    result = LandResult({"b": 3, "a": 0}, {"b": 1, "a": 0})
    assert result == {"a": 0, "b": 3} and {"a": 0, "b": 3} == result and result["b"] == 3
    assert sum(result.values()) == 3 and result.get("c", 0) == 0 and not result.lag_from_bronze
    rows = metric_rows(_cfg("b", "a"), "land", WINDOW, result, RUN_AT, 2.0)
    assert _figures(rows) == [{"kafka_topic": "b", "records_landed": 3, "future_stamped": 1},
                              {"kafka_topic": "a", "records_landed": 0, "future_stamped": 0}]
    assert all(r["stage"] == "land" and r["duration_s"] == 2.0 and r["lag_s"] is None for r in rows)
    (uncounted,) = metric_rows(_cfg("b"), "land", WINDOW, LandResult({"b": 3}), RUN_AT, 2.0)
    assert uncounted["future_stamped"] is None


def test_normalize_rows_and_reading():
    result = NormalizeResult({"a": TopicCounts(raw=5, changes=6, quarantined=1, control=1)})
    assert result == {"a": {"raw": 5, "changes": 6, "quarantined": 1, "control": 1}}
    assert result["a"]["quarantined"] == result["a"].quarantined == 1 and dict(result["a"])["raw"] == 5
    newest = {"a": dt.datetime(2024, 1, 1, 1, 30, tzinfo=UTC)}
    rows = metric_rows(_cfg("a", "z"), "normalize", WINDOW, result, RUN_AT, 1.0, newest)
    assert _figures(rows) == [
        {"kafka_topic": "a", "records_parsed": 5, "change_rows": 6, "quarantined": 1, "control": 1},
        {"kafka_topic": "z", "records_parsed": 0, "change_rows": 0, "quarantined": 0, "control": 0}]
    assert rows[0]["lag_s"] == 1800.0 and rows[1]["lag_s"] is None and result.lag_from_bronze


def test_silver_rows_and_reading():
    orders = TableResult("lake.s.orders", changes=5, upserts=4, deletes=1, topics=["b", "a"])
    items = TableResult("lake.s.items", changes=2, upserts=2, topics=["a"])
    result = SilverResult((orders, items))
    assert len(result) == 2 and result[0] is orders and [t.table for t in result] == ["lake.s.orders", "lake.s.items"]
    rows = metric_rows(_cfg("c", "b", "a"), "silver", WINDOW, result, RUN_AT, 1.0)
    assert _figures(rows) == [
        {"kafka_topic": "a", "silver_table": "lake.s.items", "changes_merged": 2, "keys_upserted": 2, "keys_deleted": 0},
        {"kafka_topic": "a", "silver_table": "lake.s.orders", "changes_merged": 5, "keys_upserted": 4,
         "keys_deleted": 1},
        {"kafka_topic": "b", "silver_table": "lake.s.orders", "changes_merged": 5, "keys_upserted": 4,
         "keys_deleted": 1},
        {"kafka_topic": "c", "changes_merged": 0}]


def test_gate_result_reads_as_its_dict():
    result = GateResult(stage="land", window="w", frames={"offsets": 4, "ledger": 2}, data_docs="/d/gate.html")
    assert result["frames"] == {"offsets": 4, "ledger": 2} and result["data_docs"] == "/d/gate.html"
    assert result.as_dict() == {"stage": "land", "window": "w", "frames": {"offsets": 4, "ledger": 2},
                                "data_docs": "/d/gate.html"} == result
    assert not isinstance(result, StageResult)


def test_results_are_frozen_and_others_have_no_metrics():
    with pytest.raises(AttributeError):
        LandResult({"a": 1}).records = {}  # type: ignore[misc]
    for result in (LandResult({}), NormalizeResult({}), SilverResult()):
        assert isinstance(result, StageResult)
    with pytest.raises(TypeError, match="no run metrics for stage 'land'"):
        metric_rows(_cfg("a"), "land", WINDOW, {"a": 1}, RUN_AT, 1.0)
