"""A failing gate names what failed, writes Data Docs, and fails its Airflow task."""
from __future__ import annotations

import re

import pytest
from conftest import STATE, produce, write_pipeline
from pipeline import hour, ms, run_window

from cdclake.config import load_pipeline
from cdclake.gates import GateFailed, docs_path, run_gate
from cdclake.window import Window


@pytest.fixture
def landed(stack, spark, unique):
    topic = f"gates.{unique}"
    rows = [(0, ms(hour(0)) + i, f'{{"id": {i}}}', f'{{"op": "c", "after": {{"id": {i}}}, "source": {{"table": "t", "ts_ms": {i}}}}}')
            for i in range(20)]
    produce(stack["bootstrap"], topic, rows)
    path = write_pipeline(f"gates_{unique}", [{"topic": topic, "format": "debezium-json", "primary_key": ["id"]}],
                          silver={"namespace": f"gates_{unique}"}, gates={"data_docs_dir": str(STATE / f"docs_{unique}")})
    run_window(spark, path, 0, 1, gates=True)  # all three gates pass on intact data
    return topic, path


def test_land_gate_fails_when_a_landed_record_is_missing(spark, landed):
    topic, path = landed
    spark.sql(f"DELETE FROM lake.raw.kafka_records WHERE kafka_topic = '{topic}' AND kafka_offset = 7")
    cfg = load_pipeline(path)
    with pytest.raises(GateFailed) as err:
        run_gate("land", cfg, Window(hour(0), hour(1)))
    text = str(err.value)
    assert "land gate failed" in text and "offsets: expect_column_pair_values_to_be_equal column_A=landed" in text
    report = docs_path(cfg, "land", Window(hour(0), hour(1))) / "gate.html"
    assert (report.parent / "index.html").exists() and f"Data Docs: {report}" in text
    page = report.read_text(encoding="utf-8")  # static: every expectation, the failed one first
    assert "FAILED: 2 of 9 expectations" in page and page.index("FAILED</td>") < page.index("passed</td>"), page
    assert "<script" not in page and "http" not in page


def test_normalize_gate_fails_when_counts_do_not_balance(spark, landed):
    topic, path = landed
    spark.sql(f"DELETE FROM lake.bronze.changes WHERE kafka_topic = '{topic}' AND kafka_offset = 3")
    with pytest.raises(GateFailed, match="counts: expect_column_pair_values_to_be_equal column_A=raw, column_B=accounted"):
        run_gate("normalize", load_pipeline(path), Window(hour(0), hour(1)))


def test_normalize_gate_fails_when_a_record_is_both_a_change_and_quarantined(spark, landed):
    """A record in bronze and in quarantine is counted once as accounted for, and as an overlap."""
    from pyspark.sql import functions as F

    topic, path = landed
    quarantine = spark.table("lake.bronze.quarantine")
    record = spark.table("lake.bronze.changes").where(f"kafka_topic = '{topic}' AND kafka_offset = 5")
    record.select(*[(F.col(f.name) if f.name in record.columns else F.lit(None)).cast(f.dataType).alias(f.name)
                    for f in quarantine.schema.fields]).writeTo("lake.bronze.quarantine").append()
    with pytest.raises(GateFailed) as err:
        run_gate("normalize", load_pipeline(path), Window(hour(0), hour(1)))
    assert "counts: expect_column_values_to_be_in_set column=overlap" in str(err.value)
    assert "column_A=raw, column_B=accounted" not in str(err.value)


def test_silver_gate_names_the_table_holding_a_key_twice(spark, landed, unique, monkeypatch):
    """The silver gate validates every table of the window in one frame per key width; a key held
    twice fails it, naming the table and the key (here one id of ``t`` written again behind the
    pipeline's back), whether the tables' keys are read by threads or by worker processes (a
    window of many tables)."""
    from cdclake.gates import frames

    _, path = landed
    table = f"lake.gates_{unique}.t"
    spark.sql(f"INSERT INTO {table} SELECT * FROM {table} WHERE id = 5")
    for least in (frames.PROCESS_READ_TABLES, 1):
        monkeypatch.setattr(frames, "PROCESS_READ_TABLES", least)
        with pytest.raises(GateFailed) as err:
            run_gate("silver", load_pipeline(path), Window(hour(0), hour(1)))
        text = str(err.value)
        assert "keys:1 key column: expect_compound_columns_to_be_unique" in text, (least, text)
        assert f"'_table': 'gates_{unique}.t', 'key_1': '5'" in text, (least, text)


def test_gate_operator_fails_the_task(spark, landed):
    from airflow.exceptions import AirflowException
    from cdc_operators import GateOperator

    topic, path = landed
    spark.sql(f"DELETE FROM lake.raw.kafka_records WHERE kafka_topic = '{topic}' AND kafka_offset = 0")
    op = GateOperator(task_id="gate", stage="land", pipeline=str(path), start="2024-01-01T00:00:00Z",
                      end="2024-01-01T01:00:00Z", topics="")
    with pytest.raises(AirflowException, match="land gate failed"):
        op.execute({})


def test_every_gate_run_writes_data_docs(spark, landed):
    """Passing gates write their Data Docs too (the fixture's run passed all three), named in the result."""
    _, path = landed
    cfg = load_pipeline(path)
    window = Window(hour(0), hour(1))
    for stage in ("land", "normalize", "silver"):
        docs = docs_path(cfg, stage, window)
        assert docs == cfg.gates.docs_dir() / cfg.name / stage / "2024-01-01T00_2024-01-01T01"
        assert (docs / "index.html").exists() and "passed:" in (docs / "gate.html").read_text(encoding="utf-8")
        pages = list((docs / "validations").rglob("*.html"))  # results rendered into the page: no server needed
        assert pages and all("Success" in p.read_text(encoding="utf-8") for p in pages), stage
        links = re.findall(r'href="(validations/[^"]+)"', (docs / "gate.html").read_text(encoding="utf-8"))
        assert links and all((docs / link).exists() for link in links), links
    result = run_gate("land", cfg, window)
    assert result["data_docs"] == str(docs_path(cfg, "land", window) / "gate.html")


def test_normalize_gate_fails_past_the_quarantine_budget(stack, spark, unique):
    """A topic hour mostly quarantined (12 of 20 records: an unknown op) passes normalize itself but
    fails its gate, past either setting of the budget, naming the setting exceeded and the top
    reasons with their counts, in the task's message and on the gate's page; within the budget the
    same hour passes. (The settings only change the gate: one landing serves every case.)"""
    from cdclake.land import land
    from cdclake.normalize import normalize

    topic = f"budget.{unique}"
    rows = [(0, ms(hour(0)) + i, f'{{"id": {i}}}',
             f'{{"op": "{"x" if i < 10 else "y" if i < 12 else "c"}", "after": {{"id": {i}}}, '
             f'"source": {{"table": "t", "ts_ms": {i}}}}}') for i in range(20)]
    produce(stack["bootstrap"], topic, rows)
    window = Window(hour(0), hour(1))

    def pipeline(**settings):
        return load_pipeline(write_pipeline(f"budget_{unique}", [{"topic": topic, "format": "debezium-json",
                                                                   "primary_key": ["id"]}],
                                            silver={"namespace": f"budget_{unique}"}, normalize=settings,
                                            gates={"data_docs_dir": str(STATE / f"docs_{unique}")}))

    cfg = pipeline()
    land(spark, cfg, window)
    assert normalize(spark, cfg, window)[topic]["quarantined"] == 12
    for settings, exceeded in (({}, "normalize.max_quarantine_share 0.5"),
                               ({"max_quarantined": 5, "max_quarantine_share": 1.0}, "normalize.max_quarantined 5")):
        cfg = pipeline(**settings)
        with pytest.raises(GateFailed) as err:
            run_gate("normalize", cfg, window)
        text = str(err.value)
        assert "quarantine: expect_column_values_to_be_null column=over_budget" in text, text
        assert f"topic {topic} hour 2024-01-01T00:00Z: 12 of 20 records quarantined (60%), over {exceeded}" in text
        assert "top reasons: 12× debezium-json: field 'op': unknown operation '…'" in text  # 'x' and 'y': one kind
        page = (docs_path(cfg, "normalize", window) / "gate.html").read_text(encoding="utf-8")
        assert "12 of 20 records quarantined" in page and "over_budget" in page
    loose = pipeline(max_quarantined=12, max_quarantine_share=0.6)
    assert run_gate("normalize", loose, window)["frames"]["quarantine"] == 1


def test_the_silver_gates_read_of_keys_finds_columns_by_field_id_or_leaves_it_to_the_scan(tmp_path):
    """The silver gate reads a table's keys from its data files by Iceberg field id
    (:func:`cdclake.gates.frames._live_columns`), typed as the table's schema: a key promoted from
    int to bigint after a file was written, and renamed, reads as pyiceberg's scan reads it. A
    file without field ids (added from outside) leaves the read to pyiceberg's scan (None)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    from cdclake.gates.frames import _live_columns

    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    cat.create_namespace("n")
    table = cat.create_table("n.t", Schema(NestedField(1, "k", IntegerType(), required=False),
                                           NestedField(2, "v", StringType(), required=False)))
    table.append(pa.table({"k": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}))
    with table.update_schema() as update:
        update.update_column("k", LongType())
        update.rename_column("k", "key")
    table = cat.load_table("n.t")
    table.append(pa.table({"key": pa.array([3_000_000_000], pa.int64()), "v": ["c"]}))
    table = cat.load_table("n.t")
    got = _live_columns(table, ["key"])
    assert got.schema.field("key").type == pa.int64()
    assert sorted(got["key"].to_pylist()) == sorted(table.scan(selected_fields=("key",)).to_arrow()["key"].to_pylist()) \
        == [1, 2, 3_000_000_000]
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"key": pa.array([4], pa.int64()), "v": ["d"]}), plain)
    table.add_files([str(plain)])
    assert _live_columns(cat.load_table("n.t"), ["key"]) is None
