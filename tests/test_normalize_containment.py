"""One bad Kafka record is quarantined, never stops a run: normalize contains every record.

- Through Spark: a ``qlik-json`` value nested 100,000 levels deep (a metadata and a data message)
  passes the schema registry extraction and the parse of its hour; it is quarantined, by the
  nesting limit (``normalize.max_nesting_depth``) or, with the limit raised out of the way, by
  the ``RecursionError`` its decoding raises, and the rest of the hour is applied.
- Without Spark, through :func:`cdclake.normalize.parse_batches` on Arrow batches of the raw
  schema: the limits give their reasons (value and key, size and depth, exactly at the limit and
  one past it); :func:`cdclake.normalize.json_nesting_depth` is the depth ``json.loads`` sees; a
  change or control row that Arrow cannot hold (a lone surrogate from a ``\\ud800`` escape)
  quarantines its whole record, naming the column, and the rest of the batch is kept.

The Arrow schemas are built here without the JVM (:func:`arrow_schema`), exactly as
:func:`cdclake.normalize.tagged_arrow_schema` builds them (``tests/test_fuzz.py`` checks the two
are equal).
"""
from __future__ import annotations

import json

from conftest import json_edit, write_pipeline
from hypothesis import given, settings
from hypothesis import strategies as st
from parse_harness import LANDED, kinds, run_batch
from pipeline import H0, hour, ms

from cdclake.config import load_pipeline
from cdclake.gates import run_gate
from cdclake.land import land
from cdclake.normalize import (MAX_NESTING_DEPTH, classify_records, json_deeper_than, json_nesting_depth, normalize,
                               quarantine_reason, registry_row)
from cdclake.formats import get_parser
from cdclake.record import KafkaRecord, SchemaEntry
from cdclake.sim import SimulatedSource, canal_json, create_topic, debezium_json, produce
from cdclake.sim.render import Message
from cdclake.sim.render_qlik import qlik_json
from cdclake.window import Window

DEEP = 100_000


def deep_qlik_values() -> list[bytes]:
    """A metadata and a data message of ``qlik-json`` whose ``message`` holds arrays ``DEEP`` levels deep."""
    nest = b"[" * DEEP + b"]" * DEEP
    metadata = b'{"magic":"atMSG","type":"MD","message":{"schemaId":"DEEP","lineage":' + nest + b"}}"
    data = (b'{"magic":"atMSG","type":"DT","messageSchemaId":"DEEP","message":{"headers":{"operation":"INSERT"},'
            b'"data":' + nest + b"}}")
    return [metadata, data]


def _deep_hour(stack, spark, unique, name, **sections):
    src = SimulatedSource(seed=5, start=H0, hours=1)
    msgs = qlik_json(src.run(), src.tables, task=f"task-{name}-{unique}")
    middle = ms(H0) + 1_800_000
    deep = [Message(None, v, middle, 0) for v in deep_qlik_values()]
    stream = sorted(msgs + deep, key=lambda m: m.timestamp_ms)
    topic = f"qlik.{name}.{unique}"
    create_topic(stack["bootstrap"], topic, 1)
    produce(stack["bootstrap"], topic, stream)
    path = write_pipeline(f"{name}_{unique}", [{"topic": topic, "format": "qlik-json"}],
                          silver={"namespace": f"{name}_{unique}"}, **sections)
    cfg = load_pipeline(path)
    window = Window(hour(0), hour(1))
    land(spark, cfg, window)
    stats = normalize(spark, cfg, window)[topic]
    for gate in ("land", "normalize"):
        run_gate(gate, cfg, window)
    rows = sum(m.rows for m in msgs)
    metadata = sum(1 for m in msgs if m.rows == 0)
    assert stats == {"raw": len(stream), "changes": rows, "quarantined": 2, "control": metadata}, stats
    quarantined = spark.table("lake.bronze.quarantine").where(f"kafka_topic = '{topic}'").collect()
    assert sorted(bytes(q.value) for q in quarantined) == sorted(deep_qlik_values())
    return [q.reason for q in quarantined]


def test_deep_qlik_json_is_quarantined_by_the_nesting_limit(stack, spark, unique):
    reasons = _deep_hour(stack, spark, unique, "qdeep")
    assert reasons == ["qlik-json: field 'value': nested deeper than 64 levels (normalize.max_nesting_depth)"] * 2


def test_deep_qlik_json_past_a_raised_limit_is_quarantined_not_fatal(stack, spark, unique):
    reasons = _deep_hour(stack, spark, unique, "qdeepx", normalize={"max_nesting_depth": 10 * DEEP})
    assert all(r.startswith("qlik-json: field 'value': unexpected RecursionError: ") for r in reasons), reasons


# ---------------------------------------------------------------------------------------------
# Arrow batches without the JVM

# ---------------------------------------------------------------------------------------------
# nesting depth

def _depth(obj) -> int:
    if isinstance(obj, dict):
        return 1 + max(map(_depth, obj.values()), default=0)
    if isinstance(obj, list):
        return 1 + max(map(_depth, obj), default=0)
    return 0


_TEXT = st.text(alphabet=st.sampled_from('ab"\\{}[]\n\u00e9\U0001f600'), max_size=6)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | _TEXT,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=25)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_JSON, st.booleans(), st.sampled_from([None, 1, 2]))
def test_nesting_depth_is_the_depth_json_reads(obj, ascii_only, indent):
    text = json.dumps(obj, ensure_ascii=ascii_only, indent=indent).encode("utf-8")
    assert json_nesting_depth(text) == _depth(json.loads(text))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_JSON, st.booleans(), st.sampled_from([None, 1]), st.integers(0, 8))
def test_deeper_than_is_exact_for_json(obj, ascii_only, indent, limit):
    text = json.dumps(obj, ensure_ascii=ascii_only, indent=indent).encode("utf-8")
    assert json_deeper_than(text, limit) == (_depth(json.loads(text)) > limit)
    wide = json.dumps([obj, [obj, {"a": obj}], obj] * 5, ensure_ascii=ascii_only).encode("utf-8")  # siblings
    assert json_deeper_than(wide, limit) == (_depth(json.loads(wide)) > limit)


def test_nesting_depth_of_text_that_is_not_json():
    assert json_nesting_depth(b"") == 0
    assert json_nesting_depth(b"[[[") == 3                       # truncated
    assert json_nesting_depth(b'[["abc') == 2                    # a string left open runs to the end
    assert json_nesting_depth(b'["[[[') == 1
    assert json_nesting_depth(b"]]][[") == 0
    assert json_nesting_depth(b'["\\\\", [[]]]') == 3             # an escaped backslash ends no string
    assert json_nesting_depth(b'["\\"[[", []]') == 2            # an escaped quote ends no string
    assert json_nesting_depth(b"\xff[\xfe[\\]") == 2


# ---------------------------------------------------------------------------------------------
# limits

def _debezium_messages():
    src = SimulatedSource(seed=3, start=H0, hours=1)
    return [m for m in debezium_json(src.run(), src.tables) if m.value]


DBZ = _debezium_messages()


def _nested(doc: bytes, depth: int) -> bytes:
    """Debezium message ``doc`` nested ``depth`` levels deep: arrays in one more member of its payload."""
    inner = b"[" * (depth - 2) + b"]" * (depth - 2)
    assert doc.count(b'"payload":{') == 1
    return doc.replace(b'"payload":{', b'"payload":{"deep":' + inner + b",")


def test_limits_quarantine_with_their_reason():
    parser = get_parser("debezium-json")
    good = DBZ[1]
    big = good.value[:-1] + b', "pad": "' + b"x" * 5000 + b'"}'
    records = [(good.key, good.value), (good.key, big), (b'"' + b"k" * 5000 + b'"', good.value),
               (good.key, _nested(good.value, 64)), (good.key, _nested(good.value, 65)),
               (b"[" * 65 + b"]" * 65, good.value),
               (good.key, good.value.replace(b'"payload":{', b'"payload":{"s":"\\"' + b"[" * 500 + b'",'))]
    out = run_batch(parser, records, max_value_bytes=4096)
    assert [kinds(o) for o in out] == [["change"], ["quarantine"], ["quarantine"], ["change"], ["quarantine"],
                                       ["quarantine"], ["change"]]
    assert out[1][0]["reason"] == (f"debezium-json: field 'value': {len(big)} bytes, more than the limit of 4096 "
                                   "bytes (normalize.max_value_bytes)")
    assert out[2][0]["reason"] == ("debezium-json: field 'key': 5002 bytes, more than the limit of 4096 bytes "
                                   "(normalize.max_value_bytes)")
    deeper = "nested deeper than 64 levels (normalize.max_nesting_depth)"
    assert out[4][0]["reason"] == f"debezium-json: field 'value': {deeper}"
    assert out[5][0]["reason"] == f"debezium-json: field 'key': {deeper}"
    assert out[4][0]["value"] == records[4][1] and out[5][0]["key"] == records[5][0]
    assert MAX_NESTING_DEPTH == 64


def test_depth_limit_is_for_json_formats_only():
    value = b"atMSG" + b"[" * 200
    (rows,) = run_batch(get_parser("qlik-avro"), [(None, value)])
    assert kinds(rows) == ["quarantine"] and rows[0]["reason"].startswith("qlik-avro: field 'value': not decodable")
    (rows,) = run_batch(get_parser("qlik-json"), [(None, value)], max_nesting_depth=10)
    assert rows[0]["reason"] == "qlik-json: field 'value': nested deeper than 10 levels (normalize.max_nesting_depth)"


def test_default_limits_in_classify_records():
    rec = KafkaRecord("t", 0, 0, 0, None, _nested(DBZ[0].value, 65))
    ((kind, row),) = list(classify_records(get_parser("debezium-json"), [(("t", 0, 0, 0, LANDED), rec)]))
    assert kind == "quarantine" and row[6] == ("debezium-json: field 'value': nested deeper than 64 levels "
                                               "(normalize.max_nesting_depth)")


# ---------------------------------------------------------------------------------------------
# rows Arrow cannot hold

def test_a_row_arrow_cannot_hold_quarantines_its_record_only():
    parser = get_parser("debezium-json")
    ins = [m for m in DBZ if b'"op":"c"' in m.value][:3]
    bad = json_edit(ins[1].value, "payload", "after", "name", "caf\udce9")   # a lone surrogate, escaped in JSON
    assert b"\\udce9" in bad
    out = run_batch(parser, [(ins[0].key, ins[0].value), (ins[1].key, bad), (ins[2].key, ins[2].value)])
    assert [kinds(o) for o in out] == [["change"], ["quarantine"], ["change"]]
    reason = out[1][0]["reason"]
    assert reason.startswith("debezium-json: field 'after': cannot be written as list<element: string> "
                             "(UnicodeEncodeError: "), reason
    assert out[1][0]["value"] == bad and out[1][0]["key"] == ins[1].key


def test_a_multi_row_record_goes_whole_to_quarantine():
    src = SimulatedSource(seed=3, start=H0, hours=1)
    multi = [m for m in canal_json(src.run(), src.tables) if m.rows > 1]
    doc = json.loads(multi[0].value)
    doc["data"][-1][next(iter(doc["data"][-1]))] = "\ud800"
    bad = json.dumps(doc).encode()
    out = run_batch(get_parser("canal-json"), [(None, bad), (None, multi[1].value)])
    assert kinds(out[0]) == ["quarantine"] and out[0][0]["reason"].startswith("canal-json: field '")
    assert kinds(out[1]) == ["change"] * multi[1].rows


# ---------------------------------------------------------------------------------------------
# schema registry rows and reasons

def test_registry_rows_fit_the_registry_columns():
    from cdclake.normalize import RawRow

    r = RawRow("t", 0, 7, 0, LANDED, None, b"{}", [])
    good = SchemaEntry("qlik-json", "ID", 2, "shop", "orders", "{}")
    assert registry_row(good, r) == ("qlik-json", "ID", 2, "shop", "orders", "{}", "t", 0, 7, LANDED)
    assert registry_row(SchemaEntry("qlik-json", "ID", None, None, None, "{}"), r)[2:5] == (None, None, None)
    for bad in (SchemaEntry("qlik-json", "ID", 2**31, "shop", "orders", "{}"),      # int column: 32 bits
                SchemaEntry("qlik-json", "ID", True, "shop", "orders", "{}"),
                SchemaEntry("qlik-json", 7, 2, "shop", "orders", "{}"),
                SchemaEntry("qlik-json", "ID", 2, "shop", "caf\udce9", "{}"),      # UTF-8 cannot hold it
                SchemaEntry("qlik-json", "ID", 2, "shop", "orders", None)):
        try:
            registry_row(bad, r)
        except (TypeError, ValueError):
            continue
        raise AssertionError(f"{bad} was accepted")


def test_quarantine_reasons_are_short_utf8_text():
    assert quarantine_reason("fmt: field 'x': short") == "fmt: field 'x': short"
    long = quarantine_reason("fmt: field 'x': " + "y" * 10_000)
    assert len(long) < 2100 and long.endswith("... (8016 more characters)")
    assert quarantine_reason("fmt: field 'x': \ud800") == "fmt: field 'x': \\ud800"
