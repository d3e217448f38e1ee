"""Qlik Replicate through the pipeline: metadata messages kept across hours in the schema registry.

Data messages are decoded with metadata landed in an earlier hour, across a table-version change;
the registry is shared by every topic of a format in the catalog (a schema id names one table
version wherever it is published), so each test renders its own task name, hence its own ids;
a data message whose metadata has not been landed yet is quarantined with that reason and decoded
when its hour is rerun after the metadata lands.
"""
from __future__ import annotations

import pytest
from conftest import write_pipeline
from pipeline import H0, hour, ms, run_window, silver_rows

from cdclake.config import load_pipeline
from cdclake.errors import GateFailed
from cdclake.gates import run_gate
from cdclake.land import land
from cdclake.normalize import normalize
from cdclake.sim import SimulatedSource, create_topic, produce
from cdclake.sim.compare import compare_table
from cdclake.sim.render import Message
from cdclake.sim.render_qlik import qlik_avro, qlik_json
from cdclake.window import Window

TABLES = ("customers", "products", "orders")


def is_metadata(m: Message) -> bool:
    return b'"type":"MD"' in m.value[:40] or m.value[5:8] == b"\x04MD"


def check(spark, path, prefix, src):
    for t in TABLES:
        rows = silver_rows(spark, path, f"{prefix}shop__{t}")
        assert not compare_table(src.final_state()[t], rows, list(src.tables[t].primary_key)), t


def test_data_decoded_with_metadata_from_an_earlier_hour(stack, spark, unique):
    src = SimulatedSource(seed=41, start=H0, hours=2)
    msgs = qlik_json(src.run(), src.tables, task=f"task-{unique}")  # schema ids of this test only
    md = [m for m in msgs if is_metadata(m)]
    assert len(md) == 4 and all(m.timestamp_ms < ms(hour(1)) for m in md)  # 3 tables + 1 version change
    topic = f"qlik.hourly.{unique}"
    create_topic(stack["bootstrap"], topic, 1)
    produce(stack["bootstrap"], topic, msgs)
    path = write_pipeline(f"qlikh_{unique}", [{"topic": topic, "format": "qlik-json", "table_prefix": "q_"}],
                          silver={"namespace": f"qlikh_{unique}"})
    for h in (0, 1):
        result = run_window(spark, path, h, h + 1)
        assert result["normalize"][topic]["quarantined"] == 0
    assert result["normalize"][topic]["control"] == 0  # hour 1 holds data messages only
    check(spark, path, "q_", src)
    registry = spark.table("lake.bronze.schema_registry").where(f"kafka_topic = '{topic}'")
    assert registry.count() == 4 and registry.where("table_version = 2").count() == 1


def test_data_before_its_metadata_is_quarantined_then_decoded_on_rerun(stack, spark, unique):
    src = SimulatedSource(seed=43, start=H0, hours=2)
    msgs = qlik_avro(src.run(), src.tables, task=f"task-{unique}")  # schema ids of this test only
    md = [m for m in msgs if is_metadata(m)]
    data = [m for m in msgs if not is_metadata(m)]
    late = ms(hour(1))  # the metadata messages arrive only after the first hour's data
    first = [m for m in data if m.timestamp_ms < late]
    rest = [m for m in data if m.timestamp_ms >= late]
    delayed = [Message(m.key, m.value, late, m.partition) for m in md]
    topic = f"qlik.late.{unique}"
    create_topic(stack["bootstrap"], topic, 1)
    produce(stack["bootstrap"], topic, first + delayed + rest)
    path = write_pipeline(f"qlikl_{unique}", [{"topic": topic, "format": "qlik-avro", "table_prefix": "q_"}],
                          silver={"namespace": f"qlikl_{unique}"})

    # the counts still balance (nothing is lost), but the whole hour quarantined is past the quarantine
    # budget: the normalize gate fails, naming the reason, so the hour is not passed over in silence
    cfg = load_pipeline(path)
    w0 = Window(hour(0), hour(1))
    r0 = {"land": land(spark, cfg, w0), "normalize": normalize(spark, cfg, w0)}
    assert r0["normalize"][topic]["quarantined"] == len(first) and r0["normalize"][topic]["changes"] == 0
    run_gate("land", cfg, w0)
    with pytest.raises(GateFailed) as err:
        run_gate("normalize", cfg, w0)
    assert f"{len(first)} of {len(first)} records quarantined (100%), over normalize.max_quarantine_share 0.5" \
        in str(err.value) and f"top reasons: {len(first)}× qlik-avro: field 'messageSchemaId': schema … was never seen" \
        in str(err.value), str(err.value)
    reasons = {r.reason for r in spark.table("lake.bronze.quarantine").where(f"kafka_topic = '{topic}'").collect()}
    assert all(x.startswith("qlik-avro: field 'messageSchemaId': schema ") and "was never seen" in x for x in reasons)

    r1 = run_window(spark, path, 1, 2)
    assert r1["normalize"][topic]["quarantined"] == 0 and r1["normalize"][topic]["control"] == len(md)
    r0 = run_window(spark, path, 0, 1, gates=True)  # rerun of the first hour after its metadata landed
    assert r0["normalize"][topic]["quarantined"] == 0 and r0["normalize"][topic]["changes"] == len(first)
    check(spark, path, "q_", src)
