"""``python -m cdclake inspect``: a topic of every wire format on the embedded broker is named by its
format, a topic holding both Qlik envelopes gets ``format: auto``, and the pipeline file inspect
prints runs as written: one run (land, normalize, silver) of that file over every topic gives
silver tables equal to the simulated source.

Also the value-based type guesses (:func:`cdclake.inspection.guess_type`) and the command's
errors.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import yaml
from conftest import STATE, write_pipeline
from pipeline import H0, run_window

from cdclake import sim
from cdclake.config import load_pipeline
from cdclake.inspection import guess_type, main
from cdclake.sim.compare import compare_table
from cdclake.sim.wire import WIRE_FORMATS
from cdclake.types import quote_ident


#: Producer settings: batches (the order of a partition kept by idempotence), for a quicker set-up.
BATCHED = {"batch.num.messages": 10_000, "enable.idempotence": True}


@pytest.mark.parametrize("values, raw, want", [
    (["1", "-20"], [], "bigint"),
    (["1.5", "2.25"], [], "double"),
    (["1.50", "2.25", "3"], [], "decimal(38,2)"),
    (["1.5", "2.25"], ["1.50", "2.25"], "decimal(38,2)"),
    (["16.318", "2.197"], [], "double"),
    (["1e5", "2"], [], "double"),
    (["2024-01-01", "1999-12-31"], [], "date"),
    (["2024-01-01 00:00:23.650", "2024-01-01T00:00:01.123456789"], [], "timestamp_ntz"),  # no zone: wall clock
    (["2024-01-01 00:00:23.650Z", "2024-01-01T00:00:01.123456789"], [], "timestamp"),  # a zone: an instant
    (["2024-01-01 00:00:00", "2024-02-01T00:00:00.000"], [], "date"),
    (["S3NfQiRtlg8=", "5SkGHvpaejo="], [], "binary"),
    (["0x4B735F42246D960F"], [], "binary"),
    (["paid", "sent"], [], "string"),
    (["true", "false"], [], "boolean"),
    (["Light Tent", "x"], [], "string"),
    ([], [], None),
])
def test_guess_type(values, raw, want):
    assert guess_type(values, raw) == want


@pytest.fixture(scope="module")
def inspected(stack, spark):
    u = uuid.uuid4().hex[:6]
    src = sim.SimulatedSource(seed=37, start=H0, hours=1)
    history = src.run()
    topics = {}
    for wf in WIRE_FORMATS:
        topic = f"insp.{wf.tag}.{u}"
        sim.create_topic(stack["bootstrap"], topic, wf.partitions)
        sim.produce(stack["bootstrap"], topic, wf.messages(history, src.tables), BATCHED)
        topics[wf.format] = topic
    # one topic holding the same history in both Qlik envelopes: read with format auto (its metadata
    # messages through the schema registry), the same rows twice over
    wire = {w.format: w for w in WIRE_FORMATS}
    mixed = [m for pair in zip(wire["qlik-json"].messages(history, src.tables), wire["qlik-avro"].messages(
        history, src.tables)) for m in pair]
    topics["auto"] = f"insp.mixed.{u}"
    sim.create_topic(stack["bootstrap"], topics["auto"], 1)
    sim.produce(stack["bootstrap"], topics["auto"], mixed, BATCHED)
    ns = f"inspected_{u}"
    base = write_pipeline(f"_base_{u}", [{"topic": topics["canal-json"], "format": "auto"}], silver={"namespace": ns})
    argv = ["--pipeline", str(base), "--sample", "5000"] + [a for t in topics.values() for a in ("--topic", t)]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    base.unlink()
    text = out.getvalue()
    path = STATE / "inspected" / f"inspected_{u}.yaml"  # not in $CDC_PIPELINES_DIR, which DAG tests load
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    result = run_window(spark, path, 0, 1)
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN lake.{quote_ident(ns)}").collect()]
    return {"code": code, "text": text, "topics": topics, "src": src, "ns": ns, "tables": tables, "path": path,
            "result": result}


def test_inspect_names_the_format_of_every_topic(inspected):
    assert inspected["code"] == 0
    doc = yaml.safe_load(inspected["text"])
    formats = {s["topic"]: s["format"] for s in doc["sources"]}
    assert formats == {t: f for f, t in inspected["topics"].items()}
    for fmt, topic in inspected["topics"].items():
        assert f"# topic {topic}: " in inspected["text"]
    assert inspected["text"].count("#   format: ") == len(WIRE_FORMATS) + 1
    assert "guess from the values seen: confirm" in inspected["text"]
    load_pipeline(inspected["path"])  # a valid pipeline file as printed


@pytest.mark.parametrize("fmt", [w.format for w in WIRE_FORMATS] + ["auto"])
def test_the_printed_pipeline_gives_silver_equal_to_the_source(spark, inspected, fmt):
    topic, src = inspected["topics"][fmt], inspected["src"]
    n = inspected["result"]["normalize"][topic]
    assert n["quarantined"] == 0 and n["changes"] > 0, (fmt, n)
    prefix = topic.replace(".", "_") + "_"
    for table in ("customers", "products", "orders"):
        (name,) = [t for t in inspected["tables"] if t.startswith(prefix) and t.endswith(f"__{table}")]
        rows = [r.asDict() for r in spark.table(f"lake.{quote_ident(inspected['ns'])}.{quote_ident(name)}").collect()]
        diffs = compare_table(src.final_state()[table], rows, list(src.tables[table].primary_key))
        assert not diffs, (fmt, table, diffs)


def test_the_command_line(stack, inspected):
    """``python -m cdclake inspect`` prints the same pipeline file for one topic; errors exit 1 or 2."""
    env = {**os.environ, "CDC_KAFKA_BOOTSTRAP": stack["bootstrap"]}
    topic = inspected["topics"]["maxwell-json"]
    done = subprocess.run([sys.executable, "-m", "cdclake", "inspect", "--topic", topic], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (source,) = yaml.safe_load(done.stdout)["sources"]
    assert source["format"] == "maxwell-json" and source["options"]["column_types"]["orders"]["amount"] == "decimal(38,2)"
    missing = subprocess.run([sys.executable, "-m", "cdclake", "inspect", "--topic", "no.such.topic"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    usage = subprocess.run([sys.executable, "-m", "cdclake"], env=env, capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_what_inspect_reports_without_a_broker():
    """Unknown values and tombstones counted (the reasons shown), a topic of two formats gets
    ``format: auto``, AWS DMS keys and before image field found from the messages."""
    from helpers import landed

    from cdclake.inspection import inspect_records, pipeline_text
    from cdclake.record import KafkaRecord

    src = sim.SimulatedSource(seed=5, start=H0, hours=1)
    history = src.run()
    wire = {w.format: w for w in WIRE_FORMATS}
    bad = [KafkaRecord("t", 9, 0, 0, None, b"garbage"), KafkaRecord("t", 9, 1, 0, b"k", None)]
    seen = inspect_records("t", landed(wire["canal-json"].messages(history, src.tables), topic="t")[:50] + bad)
    assert seen.format == "canal-json" and seen.formats["unknown"] == 1 and seen.formats["tombstone"] == 1
    text = pipeline_text([seen])
    assert "matches no known format: 7 bytes starting b'garbage'" in text and "partition 9: offsets 0..1" in text
    mixed = landed(wire["canal-json"].messages(history, src.tables)[:20] + wire["ogg-json"].messages(
        history, src.tables)[:20], topic="t")
    assert inspect_records("t", mixed).format == "auto"
    dms = inspect_records("t", landed(wire["aws-dms-json"].messages(history, src.tables), topic="t"))
    assert not dms.errors
    assert dms.options["before_image_field"] == "before-image"
    assert dms.options["primary_keys"] == {"products": ["id"], "customers": ["id"], "orders": ["id"]}
    doc = yaml.safe_load(pipeline_text([dms]))
    assert doc["sources"][0]["options"]["column_types"]["products"] == {
        "id": "bigint", "price": "decimal(38,2)", "weight": "double", "stock": "bigint", "code": "binary"}


def test_maxwell_without_position_gets_the_kafka_order_option_and_why(tmp_path):
    """A Maxwell topic as Maxwell ships it (``output_binlog_position`` off: no row carries
    ``position``): the report says positions are absent, and the printed source sets
    ``options: {without_position: kafka-order}`` with a comment saying why that order is binlog
    order (Maxwell's default partitioning by database keeps each key in one partition); the file
    loads and its options build the parser. A topic with positions gets no such option."""
    import json

    from helpers import landed

    from cdclake.formats import get_parser
    from cdclake.inspection import inspect_records, pipeline_text
    from cdclake.sim.render import Message

    src = sim.SimulatedSource(seed=5, start=H0, hours=1)
    history = src.run()
    (wire,) = [w for w in WIRE_FORMATS if w.format == "maxwell-json"]
    messages = wire.messages(history, src.tables)
    stripped = []
    for m in messages:
        doc = json.loads(m.value)
        doc.pop("position", None) if doc["type"] in ("insert", "update", "delete") else None
        stripped.append(Message(m.key, json.dumps(doc).encode(), m.timestamp_ms, m.partition))
    base = {"kafka": {"bootstrap_servers": "127.0.0.1:9"}, "catalog": {"uri": "jdbc:sqlite:/tmp/x.db",
                                                                        "warehouse": "file:///tmp/w"}}

    seen = inspect_records("t", landed(stripped, topic="t"))
    assert seen.format == "maxwell-json" and not seen.errors
    rows = sum(1 for m in stripped if json.loads(m.value)["type"] in ("insert", "update", "delete"))
    assert seen.without_position == {"maxwell-json": rows} and seen.changes["maxwell-json"] == rows
    text = pipeline_text([seen], base)
    assert (f"#   source positions: absent from {rows} of {rows} maxwell-json changes (snapshot rows left out): "
            "ordered by Kafka partition and offset") in text
    comment = [line.strip() for line in text.splitlines() if line.startswith("      # ")]
    assert "output_binlog_position is off by default" in " ".join(comment)
    assert "producer_partition_by=database" in " ".join(comment), comment
    (source,) = yaml.safe_load(text)["sources"]
    assert source["options"]["without_position"] == "kafka-order"
    path = tmp_path / "maxwell.yaml"
    path.write_text(text)
    cfg = load_pipeline(path)
    assert cfg.sources[0].options["without_position"] == "kafka-order"
    assert get_parser(cfg.sources[0].format, cfg.sources[0].parser_options()).kafka_order

    with_positions = inspect_records("t", landed(messages, topic="t"))
    assert not with_positions.without_position and "without_position" not in with_positions.options
    assert "absent from" not in pipeline_text([with_positions], base)
