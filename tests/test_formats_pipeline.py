"""Every supported format through the whole pipeline: the simulated shop rendered in each vendor's
wire format, landed, normalized and merged; silver must equal the source's final state, with the
source's column types (decimal, timestamp, date and binary compared by value).
"""
from __future__ import annotations

import pytest
from conftest import write_pipeline
from pipeline import H0, run_window

from cdclake import sim
from cdclake.sim.compare import compare_table
from cdclake.sim.wire import WIRE_FORMATS
from cdclake.types import quote_ident

SPARK_TYPE = {"bigint": "bigint", "int": "int", "double": "double", "string": "string", "timestamp": "timestamp",
              "timestamp_ntz": "timestamp_ntz", "date": "date", "binary": "binary"}


FORMATS = WIRE_FORMATS


def with_bad_records(msgs: list) -> list:
    """``msgs`` with two bad records in the middle: a truncated copy of a real value, and garbage."""
    i = len(msgs) // 2
    m = next(x for x in msgs[i:] if x.value)
    bad = [sim.Message(m.key, m.value[: len(m.value) // 2], m.timestamp_ms, m.partition),
           sim.Message(None, b"\xff\x00 not a change record", m.timestamp_ms, m.partition)]
    return msgs[:i] + bad + msgs[i:]


@pytest.fixture(scope="module")
def run(stack, spark):
    import uuid

    u = uuid.uuid4().hex[:6]
    src = sim.SimulatedSource(seed=31, start=H0, hours=2)
    history = src.run()
    sources = []
    for wf in FORMATS:
        topic = f"fmt.{wf.tag}.{u}"
        sim.create_topic(stack["bootstrap"], topic, wf.partitions)
        msgs = wf.messages(history, src.tables)
        sim.produce(stack["bootstrap"], topic, with_bad_records(msgs))
        sources.append({"topic": topic, "format": wf.format, "table_prefix": f"{wf.tag}_", **wf.options})
    path = write_pipeline(f"formats_{u}", sources, silver={"namespace": f"formats_{u}"})
    result = run_window(spark, path, 0, 2, gates=True)
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN lake.{quote_ident(f'formats_{u}')}").collect()]
    return {"src": src, "ns": f"formats_{u}", "result": result, "tables": tables, "topics": [s["topic"] for s in sources]}


def silver_table(run, tag: str, table: str) -> str:
    (name,) = [t for t in run["tables"] if t.startswith(f"{tag}_") and t.endswith(f"__{table}")]
    return f"lake.{quote_ident(run['ns'])}.{quote_ident(name)}"


def test_bad_records_quarantined_with_reason_and_counts_balance(spark, run):
    """Each topic got a truncated and a garbage record: both quarantined, naming format and field."""
    for topic, wf in zip(run["topics"], FORMATS):
        n = run["result"]["normalize"][topic]
        assert n["quarantined"] == 2 and n["changes"] > 0, (topic, n)
        for q in spark.table("lake.bronze.quarantine").where(f"kafka_topic = '{topic}'").collect():
            assert q.reason.startswith(f"{wf.format}: field '"), q.reason
            assert q.value is not None
    assert set(run["result"]["gates"]) == {"land", "normalize", "silver"}  # raw = bronze + quarantine + control


@pytest.mark.parametrize("fmt,tag", [(f.format, f.tag) for f in FORMATS])
@pytest.mark.parametrize("table", ["customers", "products", "orders"])
def test_silver_equals_source_with_types(spark, run, fmt, tag, table):
    src = run["src"]
    df = spark.table(silver_table(run, tag, table))
    types = dict(df.dtypes)
    for col in src.tables[table].columns:
        want = col.ctype if col.ctype.startswith("decimal") else SPARK_TYPE[col.ctype]
        assert types[col.name] == want, (fmt, table, col.name, types[col.name], want)
    rows = [r.asDict() for r in df.collect()]
    diffs = compare_table(src.final_state()[table], rows, list(src.tables[table].primary_key))
    assert not diffs, (fmt, table, diffs)
