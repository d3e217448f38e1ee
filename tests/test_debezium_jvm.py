"""The JVM reading of ``debezium-json`` (:mod:`cdclake.formats.debezium_spark`) against the Python parser.

For every raw record the JVM path either leaves it to the Python parser or gives exactly the
bronze row the Python parser gives: same images in the same column order, key, types, position,
transaction and Kafka coordinates. Inputs: the simulated source's Debezium messages (which the JVM
must read, all but tombstones), variants of them that are valid but unusual, and variants that
are malformed in the ways Spark's JSON reader and Python's ``json`` disagree about.
"""
from __future__ import annotations

import base64
import copy
import datetime as dt
import json

import pytest

from cdclake.formats.debezium import DebeziumJsonParser
from cdclake.formats.debezium_spark import split
from cdclake.land import RAW_SCHEMA
from cdclake.normalize import classify
from cdclake.sim import SimulatedSource, debezium_json

HOUR = dt.datetime(2024, 5, 1, 0, 0)


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _messages():
    src = SimulatedSource(seed=11, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=2)
    return [(m.key, m.value) for m in debezium_json(src.run(), src.tables)]


def _set(path, value):
    """A value mutation: set ``payload.<path>`` (dotted) to ``value``."""
    def apply(doc):
        node = doc["payload"]
        *parents, last = path.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
        return doc
    return apply


def _first(messages, op, table=None):
    for key, value in messages:
        if value is None:
            continue
        doc = json.loads(value)
        if doc["payload"]["op"] == op and (table is None or doc["payload"]["source"]["table"] == table):
            return key, doc
    raise LookupError(op)


def _variants(messages):
    """(name, key bytes, value bytes) of unusual and malformed records built from real ones."""
    out = []
    ins_key, ins = _first(messages, "c", "customers")
    upd_key, upd = _first(messages, "u", "products")
    del_key, dele = _first(messages, "d")
    snap_key, snap = _first(messages, "r")
    ord_key, ordr = _first(messages, "c", "orders")

    def doc_variant(name, key, doc, *mutations):
        d = copy.deepcopy(doc)
        for m in mutations:
            d = m(d)
        out.append((name, key, _dumps(d)))

    # valid, unusual values: each must be read exactly (in the JVM or by Python)
    for name, value in (("negative decimal", "/zg="), ("zero decimal", "AA=="), ("big decimal", "f////////w=="), ("most negative decimal", "gAAAAAAAAQ==")):
        doc_variant(name, ins_key, ins, _set("after.balance", value))
    doc_variant("ms timestamp", ins_key, ins, _set("after.created_at", 1700000000123))
    doc_variant("pre-1970 timestamp", ins_key, ins, _set("after.created_at", -1234567))
    doc_variant("pre-1970 date", ins_key, ins, _set("after.birth_date", -4000))
    doc_variant("null date", ins_key, ins, _set("after.birth_date", None))
    doc_variant("position as text", ins_key, ins, _set("source.pos", "123"))
    doc_variant("integer transaction id", ins_key, ins, _set("transaction.id", 77))
    doc_variant("no transaction", ins_key, ins, _set("transaction", None))
    doc_variant("unicode text", ins_key, ins, _set("after.name", "Zoë \u2028 \"q\" \\ ü"))
    doc_variant("emoji", ins_key, ins, _set("after.name", "🎉"))
    doc_variant("double 12", upd_key, upd, _set("after.weight", 12))
    doc_variant("double 0.1", upd_key, upd, _set("after.weight", 0.1))
    doc_variant("binary text", upd_key, upd, _set("after.code", "AAEC"))
    doc_variant("empty file name", ins_key, ins, _set("source.file", ""))
    doc_variant("ts in payload only", ins_key, ins, _set("source.ts_ms", None))
    doc_variant("empty ts", ins_key, ins, _set("source.ts_ms", ""))
    # malformed or shapes the JVM must leave to Python
    for name, value in (("decimal as number", 12.5), ("decimal as int", 1234), ("decimal bad padding", "QUJ"),
                        ("decimal loose bits", "AB=="), ("decimal too long", "AQIDBAUGBwgJ"), ("decimal bool", True)):
        doc_variant(name, ins_key, ins, _set("after.balance", value))
    for name, value in (("timestamp as text", "1700000000000"), ("timestamp float", 1.7e12), ("timestamp bool", True)):
        doc_variant(name, ins_key, ins, _set("after.created_at", value))
    doc_variant("date as text", ins_key, ins, _set("after.birth_date", "19000"))
    doc_variant("id as text", ins_key, ins, _set("after.id", "5"))
    doc_variant("id as float", ins_key, ins, _set("after.id", 5.0))
    doc_variant("huge id", ins_key, ins, _set("after.id", 10**30))
    for name, value in (("string exp", 1e-05), ("string float", 1.5), ("string object", {"b": 1, "a": 2}),
                        ("string list", [1]), ("string bool", True), ("string int", 42), ("string toast",
                        "__debezium_unavailable_value"), ("string like float", "1.50"), ("string quote", '"x')):
        doc_variant(name, ins_key, ins, _set("after.name", value))
    for name, value in (("double big", 1e20), ("double text", "12.5"), ("double long", 0.1 + 0.2),
                        ("double tiny", 1e-5)):
        doc_variant(name, upd_key, upd, _set("after.weight", value))
    doc_variant("binary number", upd_key, upd, _set("after.code", 1.5))
    for name, value in (("op x", "x"), ("op missing", None), ("op truncate", "t"), ("op m", "m")):
        doc_variant(name, ins_key, ins, _set("op", value))
    doc_variant("heartbeat type", ins_key, ins, _set("message_type", "1"))
    doc_variant("cdl type 0", ins_key, ins, _set("message_type", "0"))
    doc_variant("unique key", ins_key, ins, _set("unique", {"email": "x"}))
    for name, value in (("table int", 5), ("table empty", ""), ("table null", None)):
        doc_variant(name, ins_key, ins, _set("source.table", value))
    doc_variant("db int", ins_key, ins, _set("source.db", 5))
    doc_variant("file int", ins_key, ins, _set("source.file", 5))
    doc_variant("file zero", ins_key, ins, _set("source.file", 0))
    doc_variant("file without number", ins_key, ins, _set("source.file", "binlog"))
    for name, value in (("pos negative", -1), ("pos float", 1.5), ("pos bool", True), ("pos empty", ""),
                        ("pos padded", " 5")):
        doc_variant(name, ins_key, ins, _set("source.pos", value))
    doc_variant("ts text", ins_key, ins, _set("source.ts_ms", "abc"))
    for name, value in (("tx id bool", True), ("tx id float", 1e20), ("tx id object", {"a": 1})):
        doc_variant(name, ins_key, ins, _set("transaction.id", value))
    doc_variant("transaction string", ins_key, ins, _set("transaction", '{"id":"x"}'))
    doc_variant("after as string", ins_key, ins, lambda d: _set("after", json.dumps(d["payload"]["after"]))(d))
    doc_variant("source as string", ins_key, ins, lambda d: _set("source", json.dumps(d["payload"]["source"]))(d))
    doc_variant("sqlserver lsn", ins_key, ins, _set("source.change_lsn", "00000027:00000758:0003"))
    doc_variant("postgres", ins_key, ins, _set("source.connector", "postgresql"))
    doc_variant("no connector", ins_key, ins, lambda d: (d["payload"]["source"].pop("connector"), d)[1])
    doc_variant("extra column", ins_key, ins, _set("after.extra", "x"))
    doc_variant("missing column", ins_key, ins, lambda d: (d["payload"]["after"].pop("email"), d)[1])
    doc_variant("reordered columns", ins_key, ins,
                lambda d: _set("after", dict(reversed(list(d["payload"]["after"].items()))))(d))
    doc_variant("null key column", ins_key, ins, _set("after.id", None))
    doc_variant("insert without after", ins_key, ins, _set("after", None))
    doc_variant("delete without before", del_key, dele, _set("before", None))
    doc_variant("delete key from before only", del_key, dele, _set("before.id", None))
    doc_variant("payload only", ins_key, ins, lambda d: d["payload"])
    doc_variant("extra top-level key", ins_key, ins, lambda d: dict(d, extra=1))
    doc_variant("variable scale decimal", ins_key, ins, lambda d: (
        d["schema"]["fields"][1]["fields"][3].update(name="io.debezium.data.VariableScaleDecimal"), d)[1])
    doc_variant("schema null", ins_key, ins, lambda d: dict(d, schema=None))
    value = _dumps(ins)
    out.append(("trailing garbage", ins_key, value + b' {"x":1}'))
    out.append(("duplicate payload", ins_key, value[:-1] + b',"payload":{"op":"d"}}'))
    out.append(("invalid UTF-8 in payload", ins_key, value.replace(b'"after":{', b'"after":{"x\xff":1,', 1)))
    out.append(("invalid UTF-8 in schema", ins_key, value.replace(b'"optional":', b'"opt\xfeional":', 1)))
    out.append(("BOM", ins_key, b"\xef\xbb\xbf" + value))
    out.append(("truncated", ins_key, value[:-20]))
    out.append(("NaN weight", upd_key, _dumps(upd).replace(b'"weight":', b'"weight":NaN,"w":', 1)))
    out.append(("empty value", ins_key, b""))
    out.append(("no key", None, value))
    out.append(("plain key", json.dumps({"id": 1}).encode(), value))
    out.append(("key trailing garbage", ins_key + b"x", value))
    out.append(("key invalid UTF-8", ins_key.replace(b'"optional"', b'"opt\xffional"', 1), value))
    out.append(("key empty payload", _dumps(dict(json.loads(ins_key), payload={})), value))
    out.append(("delete key as text", _dumps(dict(json.loads(del_key), payload={"id": "7"})), _dumps(dele)))
    out.append(("snapshot", snap_key, _dumps(snap)))
    out.append(("order", ord_key, _dumps(ordr)))
    return out


def _raw_rows(records):
    return [("dbz", 0, i, 1714521600000 + i, key, value, [], HOUR) for i, (key, value) in enumerate(records)]


def _staged(row) -> tuple:
    return tuple(row)


@pytest.fixture(scope="module")
def outcome(spark):
    messages = _messages()
    variants = _variants(messages)
    records = messages + [(k, v) for _, k, v in variants]
    rows = _raw_rows(records)
    raw = spark.createDataFrame(rows, RAW_SCHEMA)
    part = split(raw, {})
    assert part is not None
    from pyspark.sql import functions as F

    def pairs(c):
        return [F.map_keys(c), F.map_values(c)]

    jvm = {r.kafka_offset: tuple(r) for r in part.changes.select(
        "source_format", "source_database", "source_schema", "source_table", "op", *pairs("before"), *pairs("after"),
        "primary_key", *pairs("column_types"), "source_position", "source_ts_ms", "tx_id", "tx_seq",
        "row_in_record", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp_ms", "landed_hour",
        "tx_last", "tx_size").collect()}
    rest = [r.kafka_offset for r in part.rest.select("kafka_offset").collect()]
    part.cached.unpersist()
    python = {}
    for kind, row in classify(DebeziumJsonParser({}), raw.collect()):
        python.setdefault(row[2] if kind != "change" else row[19], []).append((kind, row))
    names = {len(messages) + i: name for i, (name, _, _) in enumerate(variants)}
    return {"messages": messages, "names": names, "jvm": jvm, "rest": rest, "python": python, "n": len(records)}


def test_every_record_takes_exactly_one_path(outcome):
    jvm, rest = set(outcome["jvm"]), outcome["rest"]
    assert len(rest) == len(set(rest))
    assert not jvm & set(rest)
    assert jvm | set(rest) == set(range(outcome["n"]))


def test_records_read_in_the_jvm_equal_the_python_parser(outcome):
    wrong = []
    for offset, row in outcome["jvm"].items():
        expected = outcome["python"][offset]
        name = outcome["names"].get(offset, "simulated")
        if [k for k, _ in expected] != ["change"]:
            wrong.append(f"{name} (offset {offset}): JVM read a change, Python gives {expected}")
        elif row != _staged(expected[0][1]):
            diff = [(i, a, b) for i, (a, b) in enumerate(zip(row, expected[0][1])) if a != b]
            wrong.append(f"{name} (offset {offset}): {diff}")
    assert not wrong, "\n".join(wrong)


def test_the_simulated_source_is_read_in_the_jvm(outcome):
    """Every change message the simulated MySQL connector sends takes the JVM path, but tombstones
    and text with characters beyond the Basic Multilingual Plane (Spark re-serializes them as
    escapes, so the value no longer reads back as sent)."""
    changes = [i for i, (_, v) in enumerate(outcome["messages"])
               if v is not None and all(ord(c) < 0x10000 for c in v.decode())]
    missed = [i for i in changes if i not in outcome["jvm"]]
    assert changes and not missed, f"{len(missed)} of {len(changes)} left to Python, e.g. offset {missed[:3]}"


@pytest.mark.parametrize("name", ["negative decimal", "zero decimal", "big decimal", "ms timestamp",
                                  "pre-1970 timestamp", "pre-1970 date", "null date", "position as text",
                                  "integer transaction id", "no transaction", "unicode text", "double 12",
                                  "double 0.1", "binary text", "empty file name", "ts in payload only", "empty ts",
                                  "snapshot", "order"])
def test_valid_unusual_values_are_read_in_the_jvm(outcome, name):
    offset = next(o for o, n in outcome["names"].items() if n == name)
    assert offset in outcome["jvm"], f"{name}: left to Python: {outcome['python'][offset]}"


def test_malformed_records_are_left_to_python(outcome):
    """Variants the Python parser quarantines or reads as control records never take the JVM path."""
    read = [outcome["names"][o] for o in outcome["jvm"] if o in outcome["names"]
            and outcome["python"][o][0][0] != "change"]
    assert not read
    quarantined = [n for o, n in outcome["names"].items() if outcome["python"][o][0][0] == "quarantine"]
    assert len(quarantined) > 30, quarantined
