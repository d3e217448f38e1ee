"""Three hours of simulated shop traffic, in Debezium JSON and Canal JSON, through every stage.

The simulated MySQL source (``cdclake.sim``) knows its own state; silver must equal it after
every hour, reruns of an hour must leave silver unchanged, and a malformed record must land in
quarantine while the rest of its hour is applied and the gates' counts still balance.

Those three run in ``make test-extended`` (marker ``extended``): ``make test`` has the same
coverage elsewhere, at less cost: silver after every hour against the source as its messages
show it in ``test_production.py`` (four hourly runs), every format with bad records quarantined
and the gates' counts balanced in ``test_formats_pipeline.py``, reruns in
``test_hostile_names.py`` and ``test_silver_semantics.py``. The large hour read in row groups
runs in ``make test``.
"""
from __future__ import annotations

import pytest
from conftest import write_pipeline
from pipeline import H0, hour, ms, run_window, silver_rows

from cdclake.sim import SimulatedSource, canal_json, create_topic, debezium_json, produce, state_before
from cdclake.sim.compare import compare_table

TABLES = ("customers", "products", "orders")


@pytest.fixture(scope="module")
def shop(stack, spark):
    import uuid

    u = uuid.uuid4().hex[:6]
    src = SimulatedSource(seed=11, start=H0, hours=3)
    history = src.run()
    streams = {"dbz": debezium_json(history, src.tables), "canal": canal_json(history, src.tables)}
    topics = {"dbz": f"shop.dbz.{u}", "canal": f"shop.canal.{u}"}
    for tag, msgs in streams.items():
        create_topic(stack["bootstrap"], topics[tag], partitions=3 if tag == "dbz" else 1)
        produce(stack["bootstrap"], topics[tag], msgs)
    path = write_pipeline(f"shop_{u}", [
        {"topic": topics["dbz"], "format": "debezium-json", "table_prefix": "dbz_"},
        {"topic": topics["canal"], "format": "canal-json", "table_prefix": "canal_"},
    ], silver={"namespace": f"shop_{u}"})
    return {"src": src, "history": history, "streams": streams, "topics": topics, "path": path}


def check_silver(spark, shop, expected_state, tags=("dbz", "canal")):
    for tag in tags:
        for t in TABLES:
            rows = silver_rows(spark, shop["path"], f"{tag}_shop__{t}")
            pk = list(shop["src"].tables[t].primary_key)
            diffs = compare_table(expected_state[t], rows, pk)
            assert not diffs, f"{tag} {t}: {diffs}"


@pytest.mark.extended
def test_hour_by_hour_equals_source(spark, shop):
    """Each hourly run leaves silver equal to the source as of the messages landed so far."""
    for h in range(3):
        result = run_window(spark, shop["path"], h, h + 1, gates=(h == 1))
        for topic in shop["topics"].values():
            assert result["normalize"][topic]["quarantined"] == 0
        for tag in ("dbz", "canal"):
            expected = state_before(shop["history"], shop["streams"][tag], ms(hour(h + 1)))
            check_silver(spark, shop, expected, tags=(tag,))
    check_silver(spark, shop, shop["src"].final_state())


@pytest.mark.extended
def test_rerun_of_an_hour_changes_nothing(spark, shop):
    before = {t: silver_rows(spark, shop["path"], f"dbz_shop__{t}", meta=True) for t in TABLES}
    run_window(spark, shop["path"], 0, 3)  # one window over hours landed one by one ...
    run_window(spark, shop["path"], 1, 2)  # ... and one hour inside a window landed at once
    after = {t: silver_rows(spark, shop["path"], f"dbz_shop__{t}", meta=True) for t in TABLES}
    assert after == before
    check_silver(spark, shop, shop["src"].final_state())


@pytest.mark.extended
def test_malformed_record_is_quarantined_and_the_rest_applied(stack, spark, unique):
    src = SimulatedSource(seed=5, start=hour(5), hours=1)
    msgs = debezium_json(src.run(), src.tables, partitions=1)
    topic = f"shop.bad.{unique}"
    create_topic(stack["bootstrap"], topic, partitions=1)
    from cdclake.sim import Message

    bad = Message(key=b'{"id": 1}', value=b'{"payload": {"op": "c", "after": {"id": 1', timestamp_ms=msgs[10].timestamp_ms,
                  partition=0)
    produce(stack["bootstrap"], topic, msgs[:10] + [bad] + msgs[10:])
    path = write_pipeline(f"bad_{unique}", [{"topic": topic, "format": "debezium-json", "table_prefix": "dbz_"}],
                          silver={"namespace": f"bad_{unique}"})
    result = run_window(spark, path, 5, 6, gates=True)
    assert result["normalize"][topic]["quarantined"] == 1
    q = spark.table("lake.bronze.quarantine").where(f"kafka_topic = '{topic}'").collect()
    assert q[0]["kafka_offset"] == 10 and q[0]["reason"].startswith("debezium-json:")
    assert q[0]["value"] == bad.value
    for t in TABLES:
        rows = silver_rows(spark, path, f"dbz_shop__{t}")
        assert not compare_table(src.final_state()[t], rows, list(src.tables[t].primary_key))


def dbz_insert(i: int, db: str, table: str, after: dict, t0: int):
    """A Debezium JSON insert (no schema envelope) of key ``id`` = ``i`` into ``db.table``, at
    binlog position ``4 + i`` and timestamp ``t0 + i`` (ms), for partition 0."""
    import json

    from cdclake.sim import Message

    return Message(key=json.dumps({"id": i}).encode(),
                   value=json.dumps({"payload": {"op": "c", "after": after, "source": {
                       "connector": "mysql", "db": db, "table": table, "file": "mysql-bin.000001", "pos": 4 + i,
                       "row": 0}}}).encode(),
                   timestamp_ms=t0 + i, partition=0)


def test_a_large_hour_is_read_in_row_groups_and_every_record_normalized_once(stack, spark, unique):
    """An hour of 2,000 records of 6 kB that do not compress (12 MB) is landed in row groups of
    ``RAW_ROW_GROUP_BYTES`` (of Arrow data); normalize reads them in several tasks, and every
    record becomes exactly one bronze row."""
    import base64
    import os

    from cdclake.catalog import qualified
    from cdclake.config import load_pipeline
    from cdclake.lake import RAW_ROW_GROUP_BYTES, RAW_TABLE, hour_table, plan_splits
    from cdclake.normalize import PARSE_TASK_RECORDS
    from cdclake.window import Window

    topic = f"big.{unique}"
    create_topic(stack["bootstrap"], topic, partitions=1)
    t0 = ms(hour(7))
    msgs = [dbz_insert(i, "big", "t", {"id": i, "blob": base64.b64encode(os.urandom(4500)).decode()}, t0)
            for i in range(2000)]
    produce(stack["bootstrap"], topic, msgs)
    path = write_pipeline(f"big_{unique}", [{"topic": topic, "format": "debezium-json", "table_prefix": "big_"}],
                          silver={"namespace": f"big_{unique}"})
    result = run_window(spark, path, 7, 8)
    assert result["land"][topic] == 2000
    assert result["normalize"][topic] == {"raw": 2000, "changes": 2000, "quarantined": 0, "control": 0}
    cfg = load_pipeline(path)
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {qualified(cfg, RAW_TABLE)}").collect()}
    assert props["write.parquet.row-group-size-bytes"] == str(RAW_ROW_GROUP_BYTES)
    splits = plan_splits(cfg, hour_table(cfg, RAW_TABLE), Window(hour(7), hour(8)), [topic], 2, PARSE_TASK_RECORDS)
    assert len(splits) >= 2 and all(groups for split in splits for _, groups in split)
    bronze = spark.table("lake.bronze.changes").where(f"kafka_topic = '{topic}'")
    assert bronze.count() == bronze.select("kafka_offset").distinct().count() == 2000
    assert len(silver_rows(spark, path, "big_big__t")) == 2000


def test_bronze_files_hold_each_table_s_changes_together(stack, spark, unique):
    """Normalize writes each bronze file's changes ordered by source table, in row groups of
    ``BRONZE_ROW_GROUP_BYTES``, so that silver's read of one table skips the row groups of the
    others: the changes of three tables delivered interleaved come out grouped by table in every
    data file of the hour, and every change is in bronze once."""
    import pyarrow.parquet as pq

    from cdclake.catalog import qualified
    from cdclake.config import load_pipeline
    from cdclake.lake import BRONZE_ROW_GROUP_BYTES, BRONZE_TABLE

    topic = f"interleaved.{unique}"
    create_topic(stack["bootstrap"], topic, partitions=1)
    t0 = ms(hour(9))
    tables = ["c", "a", "b"]
    msgs = [dbz_insert(i, "mix", tables[i % 3], {"id": i, "n": i * 7}, t0) for i in range(900)]
    produce(stack["bootstrap"], topic, msgs)
    path = write_pipeline(f"mix_{unique}", [{"topic": topic, "format": "debezium-json", "table_prefix": "mix_"}],
                          silver={"namespace": f"mix_{unique}"})
    result = run_window(spark, path, 9, 10)
    assert result["normalize"][topic] == {"raw": 900, "changes": 900, "quarantined": 0, "control": 0}
    cfg = load_pipeline(path)
    bronze = qualified(cfg, BRONZE_TABLE)
    props = {r["key"]: r["value"] for r in spark.sql(f"SHOW TBLPROPERTIES {bronze}").collect()}
    assert props["write.parquet.row-group-size-bytes"] == str(BRONZE_ROW_GROUP_BYTES)
    files = [r.file_path for r in spark.sql(f"SELECT file_path, partition FROM {bronze}.files").collect()
             if r.partition.kafka_topic == topic]
    assert files
    seen = []
    for f in files:
        column = pq.read_table(f.removeprefix("file:"), columns=["source_table"]).column(0).to_pylist()
        assert column == sorted(column), f
        seen += column
    assert sorted(seen) == sorted(tables[i % 3] for i in range(900))
    for t in tables:
        assert len(silver_rows(spark, path, f"mix_mix__{t}")) == 300
