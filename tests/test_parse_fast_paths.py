"""The parsers' fast paths give exactly what the general rules give, errors included.

- ``text_converter(t)(v) == general_text(v, t)`` (``coerce_text`` by its general rules), for every
  canonical type and a spread of JSON values, well-formed or not;
- ``connect_converter(s)(v) == connect_text(v, s)`` for Connect field schemas (logical types
  included) and ``canal_converter(t)(v) == canal_text(v, t)``;
- ``EnvelopeReader.load`` reads what ``unwrap_envelope(load_json(...))`` reads, for the
  simulated Debezium messages (which, after their first sighting, take the envelope path) and
  for unusual and malformed variants of them (text after the document, a second payload,
  invalid UTF-8, a BOM, truncation ...);
- a ``debezium-json`` / ``canal-json`` parser that has seen every message (envelopes and table
  plans kept) gives the same result for each record as a new parser reading it first.
"""
from __future__ import annotations

import base64
import copy
import datetime as dt
import json

import pytest

from cdclake.formats.json_values import EnvelopeReader, load_json, unwrap_envelope
from cdclake.formats.text import general_text, text_converter
from cdclake.formats.canal import canal_converter, canal_text
from cdclake.formats.connect import connect_converter, connect_text
from cdclake.formats import get_parser
from cdclake.record import KafkaRecord, ParseError
from cdclake.sim import SimulatedSource, canal_json, debezium_json


def outcome(fn, *args):
    """``("ok", result)`` or ``("error", exception type, message)``."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # the comparison includes the errors
        return ("error", type(exc).__name__, str(exc))


TYPES = ["string", "boolean", "smallint", "int", "bigint", "float", "double", "decimal(10,2)", "decimal(38,0)",
         "decimal(5,5)", "decimal(38,38)", "date", "timestamp", "binary", "time", "decimal"]
VALUES = [None, "", " ", "abc", "12", " 12 ", "-7", "1_000", "٣", "1e3", "12.5", "12.50", "-0.001", "1E+2", "NaN",
          "inf", "-Infinity", "true", "False", "yes", "0", "1", "2024-01-02", "2024-01-02 03:04:05",
          "2024-01-02T03:04:05.1234567+02:00", "0000-00-00 00:00:00", "2024-13-40", "AAEC", "99999999999999999999999999999.5",
          "1" * 40, 0, 1, -1, 12, 2**63, -(2**70), 10**40, True, False, 1.5, 0.1 + 0.2, 1e20, 1e-7, -0.0, 12.0,
          float("nan"), float("inf"), 1e308 * 10, {"b": 1, "a": [1, 2]}, [1, "x"], [], {}]


@pytest.mark.parametrize("ctype", TYPES)
def test_text_converter_is_the_general_rule(ctype):
    conv = text_converter(ctype)
    for value in VALUES:
        assert outcome(conv, value) == outcome(general_text, value, ctype), (ctype, value)


def _schema(ctype, name=None, **params):
    s = {"type": ctype, "optional": True, "field": "c"}
    if name:
        s["name"] = name
    if params:
        s["parameters"] = params
    return s


CONNECT_SCHEMAS = [
    _schema("int32"), _schema("int64"), _schema("int16"), _schema("float64"), _schema("float32"), _schema("boolean"),
    _schema("string"), _schema("bytes"), _schema("array"), _schema("struct"), _schema("nope"),
    _schema("bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "10"}),
    _schema("bytes", "org.apache.kafka.connect.data.Decimal", scale="0"),
    _schema("bytes", "org.apache.kafka.connect.data.Decimal", scale="40", **{"connect.decimal.precision": "50"}),
    _schema("bytes", "org.apache.kafka.connect.data.Decimal", scale="x"),
    {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": [1], "field": "c"},
    _schema("struct", "io.debezium.data.VariableScaleDecimal"),
    _schema("int64", "io.debezium.time.Timestamp"), _schema("int64", "io.debezium.time.MicroTimestamp"),
    _schema("int64", "io.debezium.time.NanoTimestamp"), _schema("int64", "org.apache.kafka.connect.data.Timestamp"),
    _schema("int32", "io.debezium.time.Date"), _schema("int32", "org.apache.kafka.connect.data.Date"),
    _schema("int64", "io.debezium.time.MicroTime"), _schema("int32", "io.debezium.time.Time"),
    _schema("string", "io.debezium.time.ZonedTimestamp"), _schema("string", "io.debezium.data.Json"),
    _schema("string", "io.debezium.data.Enum"),
]
CONNECT_VALUES = VALUES + [base64.b64encode(b"\x01\x02").decode(), "/zg=", "AA==", "f////////w==", "gAAAAAAAAQ==",
                           base64.b64encode((10**35).to_bytes(15, "big")).decode(), "QUJ", "AB==", "A-B_",
                           {"scale": 2, "value": "MDk="}, {"scale": "x", "value": "MDk="}, 1700000000123, -1234567,
                           -4000, 19000, 86_399_999_999, "2024-01-02T03:04:05Z"]


@pytest.mark.parametrize("schema", CONNECT_SCHEMAS, ids=lambda s: f"{s['type']}-{s.get('name', '')}")
def test_connect_converter_is_connect_text(schema):
    conv = connect_converter(schema)
    for value in CONNECT_VALUES:
        assert outcome(conv, value) == outcome(connect_text, value, schema), (schema, value)


def test_decimal_fast_path_over_many_values():
    """Base64 unscaled values of every length up to 17 bytes, both signs, at several scales."""
    values = []
    for n in range(1, 18):
        for x in (1, 7, 2 ** (8 * n - 1) - 1, 10 ** (2 * n) // 3):
            for v in (x, -x):
                try:
                    values.append(base64.b64encode(v.to_bytes(n, "big", signed=True)).decode())
                except OverflowError:
                    pass
    for scale, precision in ((0, 38), (2, 12), (5, 38), (18, 38), (30, 38)):
        schema = _schema("bytes", "org.apache.kafka.connect.data.Decimal", scale=str(scale),
                         **{"connect.decimal.precision": str(precision)})
        conv = connect_converter(schema)
        for value in values:
            assert outcome(conv, value) == outcome(connect_text, value, schema), (scale, value)


@pytest.mark.parametrize("ctype", [None, "binary"] + TYPES)
def test_canal_converter_is_canal_text(ctype):
    conv = canal_converter(ctype)
    for value in VALUES + ["\u00ff\u0000x", "ü"]:
        assert outcome(conv, value) == outcome(canal_text, value, ctype), (ctype, value)


# --- the envelope path and whole parsers -------------------------------------------------------

def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _simulated(render):
    src = SimulatedSource(seed=11, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=2)
    return [(m.key, m.value) for m in render(src.run(), src.tables)]


@pytest.fixture(scope="module")
def debezium_messages():
    return _simulated(debezium_json)


def _first(messages, op):
    for key, value in messages:
        if value is not None and json.loads(value)["payload"]["op"] == op:
            return key, json.loads(value)
    raise LookupError(op)


def _variants(messages):
    """(key, value) records built from real Debezium messages: valid but unusual, or malformed."""
    ins_key, ins = _first(messages, "c")
    upd_key, upd = _first(messages, "u")
    value = _dumps(ins)
    out = []

    def doc(key, d, **payload):
        d = copy.deepcopy(d)
        d["payload"].update(payload)
        out.append((key, _dumps(d)))

    doc(ins_key, ins, op="x")
    doc(ins_key, ins, op=None)
    doc(ins_key, ins, op="t")
    doc(ins_key, ins, message_type="1")
    doc(ins_key, ins, after=None)
    doc(ins_key, ins, after="text")
    doc(ins_key, ins, source={"table": 5})
    doc(upd_key, upd, before={**upd["payload"]["before"], "extra": [1]})
    doc(ins_key, ins, after={**ins["payload"]["after"], "name": "__debezium_unavailable_value"})
    doc(ins_key, ins, after={k: (v if k != "id" else "5") for k, v in ins["payload"]["after"].items()})
    doc(ins_key, ins, after={k: (True if isinstance(v, int) else v) for k, v in ins["payload"]["after"].items()})
    doc(ins_key, ins, after=dict(reversed(list(ins["payload"]["after"].items()))))
    out += [
        (ins_key, value + b' {"x":1}'),                                  # text after the document
        (ins_key, value + b"  "),                                         # whitespace after it (valid)
        (ins_key, value[:-1] + b',"payload":{"op":"d"}}'),                # a second payload
        (ins_key, value[:-1] + b',"extra":1}'),                           # a third member
        (ins_key, value[:-1] + b"  }"),                                   # whitespace before the end (valid)
        (ins_key, value.replace(b'"after":{', b'"after":{"x\xff":1,', 1)),  # invalid UTF-8 in the payload
        (ins_key, value.replace(b'"optional":', b'"opt\xfeional":', 1)),   # ... in the schema
        (ins_key, b"\xef\xbb\xbf" + value),                               # a BOM
        (ins_key, value[:-20]),                                           # truncated
        (ins_key, value[:-1] + b"]"),                                     # wrong closing bracket
        (ins_key, value.replace(b'"payload":', b'"payload": \n', 1)),     # whitespace around the payload (valid)
        (ins_key, json.dumps(ins, indent=1).encode()),                    # pretty-printed (valid)
        (ins_key, _dumps({"payload": ins["payload"], "schema": ins["schema"]})),  # members swapped (valid)
        (ins_key, _dumps(dict(ins, schema=None))),
        (ins_key, _dumps(dict(ins, payload=None))),
        (ins_key, _dumps(ins["payload"])),                                # no envelope
        (ins_key, b'{"schema":' + _dumps(ins["schema"]) + b',"payload":'),  # the envelope alone
        (ins_key, b'{"schema":' + _dumps(ins["schema"]) + b',"payload":}'),
        (ins_key, b'{"schema":' + _dumps(ins["schema"]) + b',"payload":1,"x":2}'),
        (ins_key, b'{"schema":' + _dumps(ins["schema"]) + b',"payload":NaN}'),
        (ins_key, b""),
        (None, value),
    ]
    return out


def _reference_load(raw):
    return unwrap_envelope(load_json("debezium-json", raw))


def test_envelope_reader_reads_what_a_whole_read_gives(debezium_messages):
    values = [v for _, v in debezium_messages if v]
    variants = [v for _, v in _variants(debezium_messages) if v]
    reader = EnvelopeReader("debezium-json")
    for raw in values:  # learn
        reader.load(raw)
    envelopes = set()
    for raw in values + variants:
        want = outcome(_reference_load, raw)
        got = outcome(reader.load, raw)
        if want[0] == "ok":
            assert got[0] == "ok" and got[1][:2] == want[1], raw[:80]
            if raw in values:
                envelopes.add(got[1][2])
        else:
            assert got == want, raw[:80]
    # every simulated message is read through a learnt envelope, one per table
    assert None not in envelopes and len(envelopes) == 3


def test_a_value_with_a_second_schema_member_teaches_no_envelope(debezium_messages):
    """``{"schema": S1, "payload": P, "schema": S2}`` read whole has schema S2 (the last member
    wins): its prefix ``{"schema": S1, "payload":`` must not be kept with S2, or every later
    ordinary S1 message would be read with S2's types."""
    raw = next(v for _, v in debezium_messages if v)
    doc = json.loads(raw)
    other = copy.deepcopy(doc["schema"])
    other["fields"] = other["fields"][:1]
    twice = raw[:-1] + b',"schema":' + _dumps(other) + b"}"
    reader = EnvelopeReader("debezium-json")
    assert reader.load(twice)[:2] == _reference_load(twice)
    assert reader.load(raw)[:2] == _reference_load(raw) == (doc["payload"], doc["schema"])


def test_envelope_reader_keeps_at_most_max_envelopes(debezium_messages):
    reader = EnvelopeReader("debezium-json", max_envelopes=1)
    got = [reader.load(v)[2] for _, v in debezium_messages if v]
    assert set(got) == {0, None}


def _compare_parsers(fmt, records, options=None):
    """Each record's result from a parser that has seen all records, against a new parser's."""
    warm = get_parser(fmt, options)
    for r in records:
        outcome(warm.parse, r)
    differ = []
    for r in records:
        got, want = outcome(warm.parse, r), outcome(get_parser(fmt, options).parse, r)
        if got != want:
            differ.append((r.offset, got, want))
    assert not differ, differ[:3]


def _krecords(pairs):
    return [KafkaRecord("t", 0, i, 0, k, v) for i, (k, v) in enumerate(pairs)]


def test_debezium_parser_with_kept_envelopes_and_plans_equals_a_new_one(debezium_messages):
    records = _krecords(debezium_messages + _variants(debezium_messages))
    _compare_parsers("debezium-json", records)
    _compare_parsers("debezium-json", records, {"column_types": {"name": "int", "shop.customers": {"email": "date"}},
                                                 "primary_keys": {"customers": ["email"]}})


def test_canal_parser_with_kept_plans_equals_a_new_one():
    pairs = _simulated(canal_json)
    doc = json.loads(next(v for _, v in pairs if v and b'"UPDATE"' in v))
    odd = [dict(doc, mysqlType={**doc["mysqlType"], "name": "int"}), dict(doc, mysqlType={"id": ["x"]}),
           dict(doc, mysqlType=None), dict(doc, data=[{**doc["data"][0], "id": "x"}])]
    records = _krecords(pairs + [(None, _dumps(d)) for d in odd])
    _compare_parsers("canal-json", records)
    _compare_parsers("canal-json", records, {"column_types": {"name": "bigint"}, "primary_key": ["name"]})


def test_a_shipped_parser_starts_without_what_it_learned(debezium_messages):
    import pickle

    parser = get_parser("debezium-json", {"primary_key": ["id"]})
    records = _krecords(debezium_messages)
    for r in records:
        outcome(parser.parse, r)
    copy_ = pickle.loads(pickle.dumps(parser))
    assert not copy_._plans and not copy_._reader._known
    assert [outcome(copy_.parse, r) for r in records[:50]] == [outcome(parser.parse, r) for r in records[:50]]


def test_quarantine_reasons_are_unchanged_by_the_envelope_path(debezium_messages):
    parser = get_parser("debezium-json", {})
    key, value = next((k, v) for k, v in debezium_messages if v)
    parser.parse(KafkaRecord("t", 0, 0, 0, key, value))
    bad = value.replace(b'"after":{', b'"after":{"x\xff":1,', 1)
    with pytest.raises(ParseError, match="not UTF-8"):
        parser.parse(KafkaRecord("t", 0, 1, 0, key, bad))
    with pytest.raises(ParseError, match="not valid JSON"):
        parser.parse(KafkaRecord("t", 0, 2, 0, key, value[:-1] + b',"payload":{"op":"x"}'))


@pytest.mark.parametrize("tag", ["arcion", "cdl"])
def test_other_connect_parsers_with_kept_envelopes_equal_a_new_one(tag):
    """Arcion and CDL read their Connect envelopes through the same reader."""
    from cdclake.sim.wire import WIRE_FORMATS

    wf = next(w for w in WIRE_FORMATS if w.tag == tag)
    pairs = _simulated(wf.render)
    options = dict(wf.options.get("options") or {})
    value = next(v for _, v in pairs if v)
    odd = [value + b" x", value[:-1] + b',"payload":null}', value.replace(b'"payload":', b'"payload": ', 1)]
    records = _krecords(pairs + [(None, v) for v in odd])
    _compare_parsers(wf.format, records, options)
    parser = get_parser(wf.format, options)
    for r in records:
        outcome(parser.parse, r)
    assert parser._reader._known, "the simulated messages are read through kept envelopes"


def test_read_key_with_a_kept_envelope_reader_equals_a_whole_read(debezium_messages):
    from cdclake.formats.json_values import read_key

    keys = [k for k, _ in debezium_messages if k]
    odd = [keys[0] + b"x", keys[0][:-1], b"[1]", b"5", b"null", b'{"schema":null,"payload":{}}', b"\xff",
           keys[0].replace(b'"payload":', b'"payload":[1],"x":', 1), b"", None]
    reader = EnvelopeReader("debezium-json")
    for k in keys:
        read_key(k, reader)
    assert reader._known
    for k in keys + odd:
        assert outcome(read_key, k, reader) == outcome(read_key, k), k
