"""Tests of the ``debezium-avro`` and ``debezium-jsonschema`` parsers: Debezium events in Avro, and
in JSON with JSON Schema, through the Confluent wire format and a schema registry.

Samples: Debezium's documentation prints no Avro-serialised event (Avro is binary; "Avro
serialization" shows the converter settings only), so the samples here are rendered: Debezium's
own JSON change events with their Kafka Connect schemas (Apache Flink's flink-json vectors of
the MySQL and PostgreSQL connectors, read in place from the shared conformance directory, and
documents written here for each operation, control event and logical type) are written as Avro
the way Confluent's AvroConverter writes them (:func:`cdclake.sim.render_debezium_avro.avro_schema`),
(and as its JSON Schema converter writes them: :func:`cdclake.sim.render_debezium_avro.json_schema`),
registered in the stand-in registry (:mod:`cdclake.sim.registry`) and framed in the wire format.
Each must parse to exactly what ``debezium-json`` gives for the JSON document (apart from the
format's name): the Avro path reuses the JSON path's steps, so equality is the specification.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pytest
from conftest import CONFORMANCE, flink_expected, products
from helpers import krec
from reference_model import apply_changes, changes

from cdclake.formats import get_parser
from cdclake.formats.debezium.avro import SchemaRegistryUnavailable, wire_parts, wire_value
from cdclake.record import ChangeRecord, ControlRecord, ParseError, parse_all
from cdclake.sim.registry import Registry, registry_url
from cdclake.sim.render_debezium_avro import AvroWriter, JsonSchemaWriter, avro_schema

FMT = "debezium-avro"
FLINK = CONFORMANCE / "flink"
URL = registry_url()
OPTIONS = {"schema_registry": {"url": URL}}
WRITER = AvroWriter(URL)
WRITERS = {FMT: WRITER, "debezium-jsonschema": JsonSchemaWriter(URL)}
BOTH = pytest.mark.parametrize("fmt", sorted(WRITERS))


def avro(doc, subject: str = "t-value", fmt: str = FMT) -> bytes:
    """A Connect JSON document (``{"schema", "payload"}``, dict or text) as a wire-format value of
    ``fmt`` (Avro, or JSON with JSON Schema)."""
    return WRITERS[fmt].write(subject, json.loads(doc) if isinstance(doc, (str, bytes)) else doc)


def parser(fmt: str = FMT, **options):
    return get_parser(fmt, {**OPTIONS, **options})


def renamed(result, fmt: str = FMT):
    """A ``debezium-json`` result as ``debezium-avro`` gives it (the format's name)."""
    if isinstance(result, list):
        return [dataclasses.replace(c, source_format=fmt) for c in result]
    if isinstance(result, ControlRecord):
        return dataclasses.replace(result, source_format=fmt)
    return result


def both(doc, key_doc=None, fmt: str = FMT, **options):
    """``(the format's result, debezium-json's result renamed)`` of one JSON document and key."""
    value_json = json.dumps(doc).encode()
    key_json = None if key_doc is None else json.dumps(key_doc).encode()
    a = parser(fmt, **options).parse(krec(avro(doc, fmt=fmt), None if key_doc is None else avro(key_doc, "t-key", fmt)))
    j = get_parser("debezium-json", options).parse(krec(value_json, key_json))
    return a, renamed(j, fmt)


# --- Apache Flink's Debezium vectors, re-serialised with Avro -------------------------------------

FLINK_WITH_SCHEMA = ["debezium-data-schema-include.txt", "debezium-postgres-data-schema-include.txt"]


@BOTH
@pytest.mark.parametrize("name", FLINK_WITH_SCHEMA)
def test_flink_debezium_vectors_read_as_their_json(fmt, name):
    lines = [ln for ln in (FLINK / name).read_text(encoding="utf-8").splitlines() if ln.startswith("{")]
    assert len(lines) == 16
    pa, pj = parser(fmt, primary_key=["id"]), get_parser("debezium-json", {"primary_key": ["id"]})
    avro_results = list(parse_all(pa, [krec(avro(ln, "dbserver1.inventory.products-value", fmt), offset=i)
                                       for i, ln in enumerate(lines)]))
    json_results = list(parse_all(pj, [krec(ln, offset=i) for i, ln in enumerate(lines)]))
    assert [renamed(r, fmt) for _, r in json_results] == [r for _, r in avro_results]
    pairs = changes(avro_results)
    assert len(pairs) == 16 and all(c.source_format == fmt for _, c in pairs)
    assert products(apply_changes(pairs)) == flink_expected("debezium.final-state.derived.csv")
    assert pairs[0][1].column_types == {"id": "int", "name": "string", "description": "string", "weight": "double"}
    if "postgres" in name:
        assert pairs[-1][1].source_position == (34133800, 34133800) and pairs[-1][1].tx_id == "608"
    else:
        assert pairs[-1][1].source_position == (3, 2443, 0)


# --- documents for every operation and control event -----------------------------------------------

ROW = {"type": "struct", "name": "srv.inv.items.Value", "optional": True, "fields": [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "name", "type": "string", "optional": True},
]}
SOURCE = {"type": "struct", "name": "io.debezium.connector.mysql.Source", "field": "source", "optional": False,
          "fields": [{"field": f, "type": t, "optional": o} for f, t, o in (
              ("version", "string", False), ("connector", "string", False), ("name", "string", False),
              ("ts_ms", "int64", False), ("db", "string", False), ("table", "string", True),
              ("server_id", "int64", False), ("gtid", "string", True), ("file", "string", False),
              ("pos", "int64", False), ("row", "int32", False))]}
TRANSACTION = {"type": "struct", "field": "transaction", "optional": True, "fields": [
    {"field": "id", "type": "string", "optional": False}, {"field": "total_order", "type": "int64", "optional": False},
    {"field": "data_collection_order", "type": "int64", "optional": False}]}


def envelope(row: dict = ROW) -> dict:
    return {"type": "struct", "name": row["name"].rsplit(".", 1)[0] + ".Envelope", "optional": False, "fields": [
        dict(row, field="before"), dict(row, field="after"), SOURCE,
        {"field": "op", "type": "string", "optional": False}, {"field": "ts_ms", "type": "int64", "optional": True},
        TRANSACTION]}


KEY_SCHEMA = {"type": "struct", "name": "srv.inv.items.Key", "optional": False,
              "fields": [{"field": "id", "type": "int32", "optional": False}]}


def event(op: str, before=None, after=None, pos: int = 154, row: int = 0, table: str = "items",
          schema: dict = None, tx: bool = True) -> dict:
    source = {"version": "2.7.0.Final", "connector": "mysql", "name": "srv", "ts_ms": 1700000000000, "db": "inv",
              "table": table, "server_id": 1, "gtid": None, "file": "mysql-bin.000003", "pos": pos, "row": row}
    transaction = {"id": "gtid:7", "total_order": 2, "data_collection_order": 1} if tx else None
    return {"schema": schema or envelope(), "payload": {"before": before, "after": after, "source": source, "op": op,
                                                         "ts_ms": 1700000000100, "transaction": transaction}}


def key(i: int) -> dict:
    return {"schema": KEY_SCHEMA, "payload": {"id": i}}


@pytest.mark.parametrize("op,before,after", [
    ("r", None, {"id": 1, "name": "a"}), ("c", None, {"id": 1, "name": "a"}),
    ("u", {"id": 1, "name": "a"}, {"id": 1, "name": "b"}), ("d", {"id": 1, "name": "b"}, None),
    ("t", None, None)])
@BOTH
def test_every_operation_reads_as_its_json(fmt, op, before, after):
    a, j = both(event(op, before, after), key(1), fmt)
    assert a == j
    if op != "t":
        (c,) = a
        assert c.op == {"r": "snapshot", "c": "insert", "u": "update", "d": "delete"}[op]
        assert (c.source_format, c.source_database, c.source_table, c.primary_key) == (fmt, "inv", "items", ["id"])
        assert c.source_position == (3, 154, 0) and c.tx_id == "gtid:7" and c.tx_seq == 2
    else:
        assert a[0].op == "truncate"


@BOTH
def test_delete_without_before_is_keyed_by_the_registry_kafka_key(fmt):
    (c,) = parser(fmt).parse(krec(avro(event("d"), fmt=fmt), avro(key(42), "t-key", fmt)))
    assert c.op == "delete" and c.before == {"id": "42"} and c.primary_key == ["id"]


def test_positions_order_by_binlog_file_pos_and_row():
    results = [parser().parse(krec(avro(event("c", None, {"id": i, "name": "x"}, pos=p, row=r)), avro(key(i), "t-key")))
               for i, (p, r) in enumerate([(900, 1), (154, 0), (900, 0)])]
    positions = [res[0].source_position for res in results]
    assert sorted(positions) == [(3, 154, 0), (3, 900, 0), (3, 900, 1)]


@BOTH
def test_tombstone_names_the_registry_key(fmt):
    result = parser(fmt).parse(krec(None, avro(key(7), "t-key", fmt)))
    assert result == ControlRecord("tombstone", fmt, detail='{"id": 7}')
    assert parser(fmt).parse(krec(b"", b"\x01raw")).kind == "tombstone"


@BOTH
def test_transaction_metadata_heartbeat_and_schema_change_are_control_records(fmt):
    tx_schema = {"type": "struct", "name": "io.debezium.connector.common.TransactionMetadataValue", "optional": False,
                 "fields": [{"field": "status", "type": "string", "optional": False},
                            {"field": "id", "type": "string", "optional": False},
                            {"field": "event_count", "type": "int64", "optional": True},
                            {"field": "ts_ms", "type": "int64", "optional": False}]}
    begin = {"schema": tx_schema, "payload": {"status": "BEGIN", "id": "gtid:7", "event_count": None, "ts_ms": 1}}
    end = {"schema": tx_schema, "payload": {"status": "END", "id": "gtid:7", "event_count": 2, "ts_ms": 2}}
    heartbeat = {"schema": {"type": "struct", "name": "io.debezium.connector.common.Heartbeat", "optional": False,
                            "fields": [{"field": "ts_ms", "type": "int64", "optional": False}]},
                 "payload": {"ts_ms": 1700000000000}}
    ddl = {"schema": {"type": "struct", "name": "io.debezium.connector.mysql.SchemaChangeValue", "optional": False,
                      "fields": [SOURCE, {"field": "databaseName", "type": "string", "optional": True},
                                 {"field": "ddl", "type": "string", "optional": True}]},
           "payload": {"source": event("c")["payload"]["source"], "databaseName": "inv",
                       "ddl": "ALTER TABLE items ADD COLUMN x INT"}}
    for doc, kind in ((begin, "transaction"), (end, "transaction"), (heartbeat, "heartbeat"), (ddl, "ddl")):
        a, j = both(doc, fmt=fmt)
        assert isinstance(a, ControlRecord) and a.kind == kind and a == j
    a, j = both(event("m"), fmt=fmt)
    assert a == j and a.kind == "metadata"


# --- logical types: the same canonical types and texts as the JSON path ----------------------------

TYPED_ROW = {"type": "struct", "name": "srv.inv.typed.Value", "optional": True, "fields": [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "small", "type": "int16", "optional": True},
    {"field": "tiny", "type": "int8", "optional": True},
    {"field": "big", "type": "int64", "optional": True},
    {"field": "f32", "type": "float", "optional": True},
    {"field": "f64", "type": "double", "optional": True},
    {"field": "flag", "type": "boolean", "optional": True},
    {"field": "raw", "type": "bytes", "optional": True},
    {"field": "price", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
    {"field": "anynum", "type": "struct", "optional": True, "name": "io.debezium.data.VariableScaleDecimal",
     "version": 1, "fields": [{"field": "scale", "type": "int32", "optional": False},
                              {"field": "value", "type": "bytes", "optional": False}]},
    {"field": "d", "type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1},
    {"field": "cd", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date", "version": 1},
    {"field": "t", "type": "int64", "optional": True, "name": "io.debezium.time.MicroTime", "version": 1},
    {"field": "ct", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Time", "version": 1},
    {"field": "ts", "type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1},
    {"field": "cts", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp",
     "version": 1},
    {"field": "mts", "type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp", "version": 1},
    {"field": "nts", "type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp", "version": 1},
    {"field": "zts", "type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1},
    {"field": "js", "type": "string", "optional": True, "name": "io.debezium.data.Json", "version": 1},
    {"field": "e", "type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
     "parameters": {"allowed": "a,b"}},
]}
TYPED_VALUES = {"id": 1, "small": -300, "tiny": 7, "big": 2**62, "f32": 1.100000023841858, "f64": 2.5, "flag": True,
                "raw": "AAEC/w==", "price": "MDk=", "anynum": {"scale": 3, "value": "AeI="}, "d": 19000, "cd": -1,
                "t": 3723000004, "ct": 3723004, "ts": 1700000000123, "cts": 1700000000123, "mts": 1700000000123456,
                "nts": 1700000000123456789, "zts": "2024-01-01T10:00:00+02:00", "js": '{"a": [1]}', "e": "b"}


@BOTH
def test_logical_types_read_as_the_json_path_reads_them(fmt):
    schema = envelope(TYPED_ROW)
    json_doc = event("c", None, TYPED_VALUES, table="typed", schema=schema)
    json_doc["payload"]["after"] = dict(TYPED_VALUES, f32=1.1)  # JsonConverter writes a float32's own digits
    (j,) = renamed(get_parser("debezium-json").parse(krec(json.dumps(json_doc), json.dumps(key(1)))), fmt)
    written = json_doc if fmt != FMT else event("c", None, TYPED_VALUES, table="typed", schema=schema)
    (a,) = parser(fmt).parse(krec(avro(written, fmt=fmt), avro(key(1), "t-key", fmt)))
    assert a == j
    assert a.column_types["price"] == "decimal(10,2)" and a.after["price"] == "123.45"
    assert a.column_types["small"] == a.column_types["tiny"] == "smallint" and a.column_types["f32"] == "float"
    assert a.after["f32"] == "1.1" and a.after["anynum"] == "0.482" and a.column_types["raw"] == "binary"
    assert a.after["ts"] == a.after["cts"] == "2023-11-14 22:13:20.123000" and a.after["d"] == "2022-01-08"
    assert a.after["zts"] == "2024-01-01 08:00:00"


def test_avro_logical_types_without_connect_names():
    """Avro's own ``decimal``, ``date``, ``timestamp-millis`` and ``timestamp-micros`` read as the
    Connect types they stand for, when no ``connect.name`` says more."""
    value_schema = {"type": "record", "name": "Envelope", "namespace": "x", "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
            {"name": "id", "type": "int"},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 3}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
            {"name": "db", "type": "string"}, {"name": "table", "type": "string"}, {"name": "ts_ms", "type": "long"}]}},
        {"name": "op", "type": "string"}]}
    import io

    import fastavro
    from confluent_kafka.schema_registry import Schema

    sid = WRITER._client.register_schema("plain-value", Schema(json.dumps(value_schema), "AVRO"))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(value_schema), {
        "before": None, "after": {"id": 1, "amount": b"\xff\x85", "day": 1, "at": 1500, "at_us": 1500},
        "source": {"db": "d", "table": "t", "ts_ms": 5}, "op": "c"})
    (c,) = parser(primary_key=["id"]).parse(krec(wire_value(sid, buf.getvalue())))
    assert c.column_types == {"id": "int", "amount": "decimal(6,3)", "day": "date", "at": "timestamp_ntz",
                              "at_us": "timestamp_ntz"}
    assert c.after == {"id": "1", "amount": "-0.123", "day": "1970-01-02", "at": "1970-01-01 00:00:01.500000",
                       "at_us": "1970-01-01 00:00:00.001500"}
    assert c.source_position == (5,)


# --- malformed input: a ParseError naming the format and the field ---------------------------------


def test_malformed_values_are_parse_errors_naming_format_and_field():
    good = avro(event("c", None, {"id": 1, "name": "a"}))
    string_id = WRITER._client.register_schema("s-value", __import__(
        "confluent_kafka.schema_registry", fromlist=["Schema"]).Schema('"string"', "AVRO"))
    json_id = WRITER._client.register_schema("j-value", __import__(
        "confluent_kafka.schema_registry", fromlist=["Schema"]).Schema('{"type": "object"}', "JSON"))
    sid, body = wire_parts(FMT, good)
    cases = {
        b"\x00\x00": ("value", "truncated: 2 bytes"),
        b"\x01" + good[1:]: ("value", "magic byte 0x01 is not 0"),
        b"{\"op\": \"c\"}": ("value", "magic byte 0x7b"),
        wire_value(99999, body): ("value", "schema id 99999 is not in the schema registry"),
        good[: len(good) - 3]: ("value", "cannot decode Avro value with schema id"),
        good + b"\x00": ("value", "1 bytes after the record"),
        wire_value(sid, b""): ("value", "cannot decode Avro value"),
        wire_value(string_id, b"\x02a"): ("schema", "is not an Avro record"),
        wire_value(json_id, b"{}"): ("value", "is a JSON schema, not Avro"),
        avro(event("x", None, {"id": 1, "name": "a"})): ("op", "unknown operation 'x'"),
        avro(event("c", None, {"id": 1, "name": "a"}, table="")): ("source.table", "missing table name"),
        avro(event("c")): ("after", "insert has no after image"),
    }
    for value, (field, text) in cases.items():
        with pytest.raises(ParseError) as info:
            parser().parse(krec(value, avro(key(1), "t-key")))
        assert info.value.format == FMT and info.value.field == field, (value, str(info.value))
        assert str(info.value).startswith(f"{FMT}: field '{field}': ") and text in str(info.value), str(info.value)


@BOTH
def test_delete_with_an_unreadable_key_is_a_parse_error_naming_before(fmt):
    for bad_key in (None, b"\x00\x00\x01\x86\xa0", b"\x07garbage", avro(event("c"), "t-key", fmt)[:8]):
        with pytest.raises(ParseError) as info:
            parser(fmt).parse(krec(avro(event("d"), fmt=fmt), bad_key))
        assert info.value.format == fmt and info.value.field in ("before", "primary_key"), str(info.value)


def test_unreachable_registry_fails_the_run_instead_of_quarantining():
    reg = Registry()
    url = reg.url
    reg.close()
    p = get_parser(FMT, {"schema_registry": {"url": url}})
    p._registry_conf["max.retries"] = 0  # the client's own retries (3, with backoff) only make the test slow
    with pytest.raises(SchemaRegistryUnavailable):
        p.parse(krec(avro(event("c", None, {"id": 1, "name": "a"}))))


def test_options_need_a_registry_url():
    for options in ({}, {"schema_registry": {}}, {"schema_registry": "http://x"}):
        with pytest.raises(ValueError, match="schema_registry"):
            get_parser(FMT, options)
    p = get_parser(FMT, {"schema_registry": {"url": URL, "basic_auth_user_info": "u:p"}})
    assert p._registry_conf == {"url": URL, "basic.auth.user.info": "u:p"}


@BOTH
def test_pickled_parser_makes_its_client_and_decoders_again(fmt):
    p = parser(fmt)
    value = avro(event("c", None, {"id": 1, "name": "a"}), fmt=fmt)
    first = p.parse(krec(value, avro(key(1), "t-key", fmt)))
    assert p._client is not None and p._decoders
    copy_ = pickle.loads(pickle.dumps(p))
    assert copy_._client is None and copy_._decoders == {}
    assert copy_.parse(krec(value, avro(key(1), "t-key", fmt))) == first


def test_registry_keeps_one_id_per_schema_and_serves_the_client():
    reg = Registry()
    try:
        w = AvroWriter(reg.url)
        one, two = w.write("a-value", key(1)), AvroWriter(reg.url).write("b-value", key(2))
        assert wire_parts(FMT, one)[0] == wire_parts(FMT, two)[0] == 1
        assert reg.schema(1) == ("AVRO", json.dumps(avro_schema(KEY_SCHEMA)))
        assert reg.schema(2) is None
    finally:
        reg.close()


def test_every_record_of_a_deep_copy_is_unchanged_by_parsing():
    doc = event("u", {"id": 1, "name": "a"}, {"id": 1, "name": "b"})
    before = copy.deepcopy(doc)
    (c,) = parser().parse(krec(avro(doc), avro(key(1), "t-key")))
    assert doc == before and isinstance(c, ChangeRecord)


def test_a_registry_connection_fills_url_and_basic_auth_and_stays_masked(monkeypatch, tmp_path):
    import yaml

    from cdclake.config import connection_ids, load_pipeline

    monkeypatch.setenv("AIRFLOW_CONN_SR_BASIC", "https://sr-user:sr-pa%24%24@registry.example:8085")
    doc = {"kafka": {"bootstrap_servers": "b:9092"},
           "catalog": {"name": "lake", "uri": "jdbc:sqlite:/tmp/x.db", "warehouse": "file:///tmp/w"},
           "sources": [{"topic": "a", "format": FMT, "options": {"schema_registry": {"connection": "sr_basic"}}}]}
    path = tmp_path / "sr.yaml"
    path.write_text(yaml.safe_dump(doc))
    cfg = load_pipeline(path)
    registry = cfg.sources[0].options["schema_registry"]
    assert registry["url"] == "https://registry.example:8085"
    assert registry["basic_auth_user_info"] == "sr-user:sr-pa$$"
    assert "sr-pa$$" not in repr(cfg) and "sr-pa$$" not in str(cfg.sources[0])
    assert connection_ids(cfg) == ["sr_basic"]
    assert get_parser(FMT, cfg.sources[0].parser_options())._registry_conf["basic.auth.user.info"] == "sr-user:sr-pa$$"
    doc["sources"][0]["options"]["schema_registry"]["url"] = "http://other:8081"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(Exception, match="schema_registry.url"):
        load_pipeline(path)


def test_json_schema_malformed_values_are_parse_errors_naming_format_and_field():
    fmt = "debezium-jsonschema"
    good = avro(event("c", None, {"id": 1, "name": "a"}), fmt=fmt)
    sid, body = wire_parts(fmt, good)
    avro_id, _ = wire_parts(FMT, avro(event("c", None, {"id": 1, "name": "a"})))
    cases = {
        b"\x00\x00\x00": ("value", "truncated: 3 bytes"),
        b"\x02" + good[1:]: ("value", "magic byte 0x02 is not 0"),
        body: ("value", "magic byte 0x7b"),
        wire_value(99999, body): ("value", "schema id 99999 is not in the schema registry"),
        wire_value(avro_id, body): ("value", "is a AVRO schema, not JSON Schema"),
        good[:-3]: ("value", "is not valid JSON"),
        good + b" {}": ("value", "is not valid JSON"),
        wire_value(sid, b"\xff" + body): ("value", "is not UTF-8 text"),
        wire_value(sid, b"[1]"): ("value", "value is a JSON list, not an object"),
        wire_value(sid, body.replace(b'"op":"c"', b'"op":"x"')): ("op", "unknown operation 'x'"),
        wire_value(sid, body.replace(b'"pos":154', b'"pos":-1')): ("source.pos", "out of range"),
    }
    for value, (field, text) in cases.items():
        with pytest.raises(ParseError) as info:
            parser(fmt).parse(krec(value, avro(key(1), "t-key", fmt)))
        assert info.value.format == fmt and info.value.field == field, (value, str(info.value))
        assert str(info.value).startswith(f"{fmt}: field '{field}': ") and text in str(info.value), str(info.value)


def test_json_schema_decimals_as_numbers_are_read_exactly_at_their_scale():
    fmt = "debezium-jsonschema"
    row = {"type": "struct", "name": "srv.inv.money.Value", "optional": True, "fields": [
        {"field": "id", "type": "int32", "optional": False},
        {"field": "amount", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "38"}}]}
    value = avro(event("c", None, {"id": 1, "amount": "MDk="}, table="money", schema=envelope(row)), fmt=fmt)
    sid, body = wire_parts(fmt, value)
    assert b'"amount":123.45' in body
    for number, text in ((b"123.45", "123.45"), (b"-0.5", "-0.50"), (b"7", "7.00"), (b"1E+2", "100.00"),
                         (b"1234567890123456789012345.5", "1234567890123456789012345.50")):
        (c,) = parser(fmt).parse(krec(wire_value(sid, body.replace(b"123.45", number)), avro(key(1), "t-key", fmt)))
        assert c.after["amount"] == text and c.column_types["amount"] == "decimal(38,2)"
    with pytest.raises(ParseError) as info:
        parser(fmt).parse(krec(wire_value(sid, body.replace(b"123.45", b"1.234")), avro(key(1), "t-key", fmt)))
    assert info.value.field == "after.amount" and "more than 2 fraction digits" in str(info.value)


def test_json_schema_values_have_the_nesting_limit_of_json_formats():
    """normalize's ``max_nesting_depth`` applies to the JSON after the wire-format header (a
    deeply nested document would exhaust the reader's stack)."""
    from parse_harness import LANDED

    from cdclake.normalize.rows import classify_records
    from cdclake.record import KafkaRecord

    fmt = "debezium-jsonschema"
    sid, body = wire_parts(fmt, avro(event("c", None, {"id": 1, "name": "a"}), fmt=fmt))
    deep = wire_value(sid, body.replace(b'"ts_ms":1700000000100', b'"ts_ms":' + b"[" * 65 + b"]" * 65))
    records = [(("t", 0, 0, 0, LANDED), KafkaRecord("t", 0, 0, 0, None, deep))]
    ((kind, row),) = list(classify_records(parser(fmt), records))
    assert kind == "quarantine" and row[6] == (f"{fmt}: field 'value': nested deeper than 64 levels "
                                               "(normalize.max_nesting_depth)")
