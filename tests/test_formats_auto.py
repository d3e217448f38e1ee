"""``format: auto``: each record read in the format detected in it (:mod:`cdclake.formats.detect`).

- Detection: every message the simulator renders in every wire format (:data:`WIRE_FORMATS`) is
  detected as its own format and matches no other rule; the vendor samples of ``tests/samples``
  too; unknown and malformed values are a ``ParseError`` of format ``auto``, field ``value``,
  whose reason says what was seen.
- ``auto`` gives, record for record, exactly what the named format gives (results and errors;
  a Kafka tombstone carries no format: its control record is format ``auto``, detail the key).
- The columnar fast path of ``auto`` (records grouped by detected format, each group read by its
  format's fast path) gives record by record what its per-record parse gives, on one topic
  holding every wire format and malformed values.
- Qlik under ``auto``: the metadata entries are the Qlik parser's, and the schema registry hands
  an ``auto`` parser the stored entries of both Qlik formats.
"""
from __future__ import annotations

import datetime as dt
import json
import pickle
from collections import defaultdict

import pyarrow as pa
import pytest
from helpers import landed, sample
from parse_harness import LANDED, RAW, TAGGED

from cdclake.config import SourceConfig
from cdclake.formats import FORMATS, all_formats, get_parser
from cdclake.formats.auto import AutoParser
from cdclake.formats.detect import detect, matches, rules
from cdclake.normalize import parse_batches
from cdclake.normalize.registry import schema_formats
from cdclake.record import ControlRecord, KafkaRecord, ParseError, SchemaAwareParser
from cdclake.sim import SimulatedSource
from cdclake.sim.wire import WIRE_FORMATS

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def rendered() -> dict:
    """``{format: [KafkaRecord]}``: one simulated hour in every wire format, landed."""
    src = SimulatedSource(seed=61, start=START, hours=1)
    history = src.run()
    return {w.format: landed(w.messages(history, src.tables), topic=f"shop.{w.tag}") for w in WIRE_FORMATS}


def options(fmt: str) -> dict:
    wire = {w.format: w for w in WIRE_FORMATS}[fmt]
    return SourceConfig(topic="t", format=fmt, **wire.options).parser_options()


def test_the_simulator_renders_every_format_once():
    assert sorted(w.spec.name for w in WIRE_FORMATS) == sorted(f.name for f in all_formats())


def test_every_format_has_one_rule():
    assert sorted(rules()) == sorted(f for f in FORMATS if f != "auto")
    assert all(callable(f.detect) and f.marks for f in all_formats())


@pytest.mark.parametrize("fmt", [w.format for w in WIRE_FORMATS])
def test_every_simulated_message_is_detected_as_its_format(rendered, fmt):
    values = [r.value for r in rendered[fmt] if r.value]
    assert values
    wrong = [(m, v[:120]) for v in values if (m := matches(v)) != [fmt]]
    assert not wrong, wrong[:3]


@pytest.mark.parametrize("vendor, name, fmt", [
    ("arcion", "insert.value.json", "arcion-json"), ("arcion", "update.value.json", "arcion-json"),
    ("arcion", "snapshot-insert.value.json", "arcion-json"), ("lindorm", "insert.json", "debezium-json"),
    ("lindorm", "with-schema.json", "debezium-json"), ("huawei-mrs", "cdl-json-1.0.json", "cdl-json"),
    ("huawei-mrs", "debezium-json-2.0.json", "debezium-json"), ("aws-dms", "data-insert.json", "aws-dms-json"),
    ("aws-dms", "control-create-table.json", "aws-dms-json"), ("maxwell", "insert.json", "maxwell-json"),
    ("maxwell", "table-create.json", "maxwell-json"), ("oracle-goldengate", "insert.json", "ogg-json"),
    ("alibaba-dts", "canal-delete.json", "canal-json"), ("alibaba-dts", "shareplex-insert.json", "shareplex-json"),
])
def test_vendor_samples_are_detected(vendor, name, fmt):
    assert matches(sample(vendor, name, binary=True)) == [fmt]


@pytest.mark.parametrize("value, seen", [
    (b'{"id": 1, "name": "x"}', "a JSON object with keys id, name"),
    (b"{}", "an empty JSON object"),
    (b"[1, 2]", "a JSON list"),
    (b"not json at all", "15 bytes starting b'not json'"),
    (b"\x00\x01\x02", "3 bytes starting b'\\x00\\x01\\x02'"),
    (b'{"schema": {}, "payload": {"x": 1}}', "payload keys: x"),
    (b"{" * 5000 + b"}" * 5000, "10000 bytes starting b'{{{{{{{{'"),
    (b'{"a": 1', "7 bytes starting"),
])
def test_unknown_values_are_quarantined_naming_what_was_seen(value, seen):
    parser = get_parser("auto")
    with pytest.raises(ParseError) as info:
        parser.parse(KafkaRecord("t", 0, 0, 0, None, value))
    assert info.value.format == "auto" and info.value.field == "value"
    assert str(info.value).startswith("auto: field 'value': matches no known format: ")
    assert seen in str(info.value)


def test_a_value_matching_several_formats_is_quarantined():
    value = json.dumps({"isDdl": False, "type": "INSERT", "data": [], "meta": {}, "op_type": "I", "table": "t",
                        "pos": "1"}).encode()
    with pytest.raises(ParseError) as info:
        detect(value)
    assert "matches several formats (canal-json, ogg-json, shareplex-json)" in str(info.value)


def _numbers_as_text(obj):
    if isinstance(obj, dict):
        return {k: _numbers_as_text(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_numbers_as_text(v) for v in obj]
    return f"{obj}!" if isinstance(obj, (int, float)) and not isinstance(obj, bool) else obj


def _same(a, b) -> bool:
    if isinstance(a, ParseError) or isinstance(b, ParseError):
        return type(a) is type(b) and str(a) == str(b)
    return a == b


@pytest.mark.parametrize("fmt", [w.format for w in WIRE_FORMATS])
def test_auto_gives_what_the_named_format_gives(rendered, fmt):
    records = rendered[fmt]
    named, auto = get_parser(fmt, options(fmt)), get_parser("auto", options(fmt))
    if isinstance(named, SchemaAwareParser):
        entries = [e for r in records for e in named.schema_entries(r)]
        assert entries and [e for r in records for e in auto.schema_entries(r)] == entries
        named, auto = named.with_schemas(entries), auto.with_schemas(entries)
    auto = pickle.loads(pickle.dumps(auto))
    # malformed versions of the format's messages (JSON: every number made text; binary: cut
    # short): each format's own error, through auto
    extra = [KafkaRecord(r.topic, r.partition, r.offset, r.timestamp_ms, r.key,
                         json.dumps(_numbers_as_text(json.loads(r.value))).encode()
                         if r.value[:1] == b"{" else r.value[:-3])
             for r in records[:40] if r.value]
    errors = 0
    for rec in records + extra:
        results = []
        for parser in (named, auto):
            try:
                results.append(parser.parse(rec))
            except ParseError as exc:
                results.append(exc)
        want, got = results
        if not rec.value:
            assert isinstance(got, ControlRecord) and got.kind == "tombstone" and got.source_format == "auto"
            # a tombstone names no format: its key in Confluent's framing is not decoded
            assert got.detail == want.detail or fmt in ("debezium-avro", "debezium-jsonschema")
            continue
        if isinstance(got, ParseError) and got.format == "auto":
            errors += 1
            continue  # a malformed value no longer of its format: auto's own reason
        assert _same(want, got), (rec, want, got)
    assert errors < len(extra) or fmt == "dts-avro"  # a DTS record cut short is no longer one


def raw_batches(records: list[KafkaRecord], size: int) -> list[pa.RecordBatch]:
    rows = [{"kafka_topic": "t", "kafka_partition": 0, "kafka_offset": i, "kafka_timestamp_ms": r.timestamp_ms,
             "key": r.key, "value": r.value, "headers": [], "landed_hour": LANDED} for i, r in enumerate(records)]
    return [pa.RecordBatch.from_pylist(rows[i:i + size], schema=RAW) for i in range(0, len(rows), size)]


def test_auto_fast_path_reads_a_mixed_topic_as_its_per_record_parse(rendered):
    """Every wire format's hour interleaved in one topic, plus malformed values: the same rows
    record by record with and without the fast path (``auto``'s fast path in the table of
    ``tests/test_columnar_fast_path.py``), and most records read by the fast path."""
    streams = [list(rs[:300]) for rs in rendered.values()]
    mixed: list[KafkaRecord] = []
    while any(streams):
        for s in streams:
            mixed.extend(s[:7])
            del s[:7]
    mixed += [KafkaRecord("t", 0, 0, 0, None, v) for v in (
        b"{}", b"[]", b"garbage", b'{"isDdl": true}', b'{"meta": {}, "data": 1}', b'{"op_type": "I", "table": "t", "pos": 1}',
        b"atMSG", b"\x00\x02", b'{"schema": null, "payload": {"op": "c", "source": {}}}')]
    opts = {**options("shareplex-json"), "before_image_field": "before-image"}
    parser = AutoParser(opts)
    parser = parser.with_schemas([e for r in mixed for e in parser.schema_entries(r)])
    outs = []
    for fast in (True, False):
        p = pickle.loads(pickle.dumps(parser))
        if not fast:
            p.FAST_PATH = False
        out, read_fast = defaultdict(list), 0
        for b in parse_batches({"t": p}, TAGGED, raw_batches(mixed, 300)):
            for row in b.to_pylist():
                read_fast += bool(row["_fast"] and row["_first"])
                out[row["kafka_offset"]].append({k: v for k, v in row.items() if k not in ("_fast", "quarantined_at")})
        outs.append((out, read_fast))
    (fast_rows, read_fast), (slow_rows, _) = outs
    assert fast_rows == slow_rows
    assert read_fast >= 0.6 * len(mixed), (read_fast, len(mixed))
    kinds = {r["_kind"] for rows in slow_rows.values() for r in rows}
    assert kinds == {"change", "quarantine", "control"}


def test_the_schema_registry_hands_auto_both_qlik_formats_entries():
    parser = get_parser("auto")
    assert isinstance(parser, SchemaAwareParser)
    assert schema_formats(parser) == ("qlik-avro", "qlik-json")
    assert schema_formats(get_parser("qlik-json")) == ("qlik-json",)
