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
from parse_harness import CONNECT_SCHEMAS, CONNECT_VALUES, TYPES, VALUES, connect_schema, dumps, outcome, variants

from cdclake.formats.json_values import EnvelopeReader, load_json, unwrap_envelope
from cdclake.formats.text import general_text, text_converter
from cdclake.formats.canal import canal_converter, canal_text
from cdclake.formats.connect import connect_converter, connect_text
from cdclake.formats import get_parser
from cdclake.record import KafkaRecord, ParseError
from cdclake.sim import SimulatedSource, canal_json, debezium_json


@pytest.mark.parametrize("ctype", TYPES)
def test_text_converter_is_the_general_rule(ctype):
    conv = text_converter(ctype)
    for value in VALUES:
        assert outcome(conv, value) == outcome(general_text, value, ctype), (ctype, value)


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
        schema = connect_schema("bytes", "org.apache.kafka.connect.data.Decimal", scale=str(scale),
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

def _simulated(render):
    src = SimulatedSource(seed=11, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=2)
    return [(m.key, m.value) for m in render(src.run(), src.tables)]


@pytest.fixture(scope="module")
def debezium_messages():
    return _simulated(debezium_json)


def _reference_load(raw):
    return unwrap_envelope(load_json("debezium-json", raw))


def test_envelope_reader_reads_what_a_whole_read_gives(debezium_messages):
    values = [v for _, v in debezium_messages if v]
    odd = [v for _, v in variants(debezium_messages) if v]
    reader = EnvelopeReader("debezium-json")
    for raw in values:  # learn
        reader.load(raw)
    envelopes = set()
    for raw in values + odd:
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
    twice = raw[:-1] + b',"schema":' + dumps(other) + b"}"
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
    records = _krecords(debezium_messages + variants(debezium_messages))
    _compare_parsers("debezium-json", records)
    _compare_parsers("debezium-json", records, {"column_types": {"name": "int", "shop.customers": {"email": "date"}},
                                                 "primary_keys": {"customers": ["email"]}})


def test_canal_parser_with_kept_plans_equals_a_new_one():
    pairs = _simulated(canal_json)
    doc = json.loads(next(v for _, v in pairs if v and b'"UPDATE"' in v))
    odd = [dict(doc, mysqlType={**doc["mysqlType"], "name": "int"}), dict(doc, mysqlType={"id": ["x"]}),
           dict(doc, mysqlType=None), dict(doc, data=[{**doc["data"][0], "id": "x"}])]
    records = _krecords(pairs + [(None, dumps(d)) for d in odd])
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
