"""Tests of the ``cdl-json`` parser and the simulated shop rendered as CDL JSON.

Vectors: the two samples of "Huawei MRS: CDL JSON and Open-Source Debezium JSON" (verbatim in
``samples/huawei-mrs/``: the CDL JSON 1.0 sample is valid JSON as printed and is asserted
unchanged; the Debezium sample is ``message_version`` 2.0 and must be refused with a pointer to
``debezium-json``), records derived from the 1.0 sample by changing the fields named in each
test, and the shape of :func:`cdclake.sim.render_cdl.cdl_json`'s messages (its round trip through
the parser and the reference model is in ``test_round_trip.py``).
"""
from __future__ import annotations

import copy
import datetime as dt
import functools
import json
import pickle

import helpers
import pytest
from helpers import krec

from cdclake.formats.cdl import cdl_type  # importing the module registers the format
from cdclake.formats import get_parser
from cdclake.record import ControlRecord, KafkaRecord, ParseError
from cdclake.sim.render_cdl import cdl_json
from cdclake.sim.source import SimulatedSource


parse = functools.partial(helpers.parse, "cdl-json")
one = functools.partial(helpers.one, "cdl-json")


# --- Huawei MRS: CDL JSON and Open-Source Debezium JSON (samples verbatim) ----------------------

# Data Formats / "A sample in CDL JSON format is as follows"
CDL_JSON_V1 = helpers.sample("huawei-mrs", "cdl-json-1.0.json")
# Data Formats / "A sample in Debezium JSON format is as follows"
CDL_DEBEZIUM_V2 = helpers.sample("huawei-mrs", "debezium-json-2.0.json")


def sample(**payload_changes) -> dict:
    """The CDL JSON 1.0 sample as a dict, with payload fields replaced (None values kept as null)."""
    doc = json.loads(CDL_JSON_V1)
    doc["payload"].update(copy.deepcopy(payload_changes))
    return doc


def test_cdl_json_sample():
    c = one(CDL_JSON_V1)
    assert (c.source_format, c.source_database, c.source_schema, c.source_table) == (
        "cdl-json", None, "public", "ct_pg2hudi")
    assert c.op == "insert" and c.before is None
    assert c.after == {"count1": "13", "id": "34", "time1": None, "decimalNum": None}
    assert c.primary_key == ["id"]  # the field names of "unique"
    assert c.column_types == {"count1": "bigint", "id": "int", "time1": "timestamp_ntz", "decimalNum": "string"}
    assert c.source_position == (163955221008, 1707047996013)  # (lsn, TIMESTAMP)
    assert c.source_ts_ms == 1707047996013
    assert c.tx_id == "57227595" and c.tx_seq is None
    assert c.row_in_record == 0


def test_cdl_json_sample_is_not_a_heartbeat():
    """The sample carries HEARTBEAT_IDENTIFIER with message_type "0": a data message."""
    assert json.loads(CDL_JSON_V1)["payload"]["HEARTBEAT_IDENTIFIER"]
    assert isinstance(parse(CDL_JSON_V1), list)


def test_debezium_flavour_is_refused_with_a_pointer():
    with pytest.raises(ParseError) as err:
        parse(CDL_DEBEZIUM_V2)
    assert err.value.field == "message_version"
    assert str(err.value).startswith("cdl-json: field 'message_version': ") and "debezium-json" in str(err.value)
    dbz = get_parser("debezium-json").parse(krec(CDL_DEBEZIUM_V2))  # the format that reads it
    assert dbz[0].op == "insert" and dbz[0].after["id"] == "35"


def test_unknown_message_version():
    with pytest.raises(ParseError) as err:
        parse(sample(message_version="3.0"))
    assert err.value.field == "message_version" and "3.0" in str(err.value)


@pytest.mark.parametrize("changes_", [
    {"message_type": "1"},
    {"message_type": 2},
    {"OPERATION": None, "TABLE_NAME": None, "data": None, "unique": None},
])
def test_heartbeats(changes_):
    result = parse(sample(**changes_))
    assert isinstance(result, ControlRecord) and result.kind == "heartbeat" and result.source_format == "cdl-json"
    assert result.detail == "279fb050-0143-45c1-b184-50bc48c2461c"


@pytest.mark.parametrize("value", [None, b""])
def test_tombstones(value):
    result = get_parser("cdl-json").parse(KafkaRecord("t", 0, 0, 0, b'{"id":34}', value))
    assert result == ControlRecord("tombstone", "cdl-json", detail='{"id":34}')
    assert parse({"schema": None, "payload": None}).kind == "tombstone"


# --- records derived from the sample ----------------------------------------------------------

def test_update_and_types():
    c = one(sample(OPERATION="UPDATE", TIMESTAMP=1707047997000,
                   before={"count1": 13, "id": 34, "time1": None, "decimalNum": None},
                   data={"count1": 14, "id": 34, "time1": 1707047996013, "decimalNum": "12.50"}))
    assert c.op == "update"
    assert c.before == {"count1": "13", "id": "34", "time1": None, "decimalNum": None}
    assert c.after == {"count1": "14", "id": "34", "time1": "2024-02-04 11:59:56.013000", "decimalNum": "12.50"}
    assert c.source_position == (163955221008, 1707047997000)


def test_delete_with_before_and_without():
    full = one(sample(OPERATION="DELETE", before={"count1": 13, "id": 34, "time1": None, "decimalNum": None},
                      data=None))
    assert full.op == "delete" and full.after is None
    assert full.before == {"count1": "13", "id": "34", "time1": None, "decimalNum": None}
    keyed = one(sample(OPERATION="DELETE", before=None, data=None))  # keyed from "unique"
    assert keyed.before == {"id": "34"} and keyed.primary_key == ["id"]
    from_kafka_key = one(sample(OPERATION="DELETE", before=None, data=None, unique=None), key={"id": 34})
    assert from_kafka_key.before == {"id": "34"} and from_kafka_key.primary_key == ["id"]
    with pytest.raises(ParseError) as err:
        parse(sample(OPERATION="DELETE", before={"count1": 13}, data=None, unique=None), primary_key=["id"])
    assert err.value.field == "before" and "key column(s) id" in str(err.value)


def test_operation_case_insensitive():
    assert one(sample(OPERATION="insert")).op == "insert"


@pytest.mark.parametrize("value, text", [("12.50", "12.50"), ("1.5E+3", "1500"), (7, "7"), ("-0.001", "-0.001")])
def test_cdl_decimal_is_exact_and_plain(value, text):
    c = one(sample(data={"count1": 1, "id": 34, "time1": None, "decimalNum": value}))
    assert c.after["decimalNum"] == text and c.column_types["decimalNum"] == "string"


def test_cdl_decimal_typed_by_configuration_or_parameters():
    configured = one(sample(data={"count1": 1, "id": 34, "time1": None, "decimalNum": "12.5"}),
                     column_types={"public.ct_pg2hudi": {"decimalNum": "decimal(10,2)"}})
    assert configured.column_types["decimalNum"] == "decimal(10,2)" and configured.after["decimalNum"] == "12.50"
    schema = {"type": "string", "optional": True, "name": "com.huawei.cdc.data.Decimal", "field": "d",
              "parameters": {"scale": "3", "connect.decimal.precision": "9"}}
    assert cdl_type(schema) == "decimal(9,3)"
    assert cdl_type({**schema, "parameters": {}}) == "string"
    assert cdl_type({**schema, "parameters": {}}, "decimal(5,1)") == "decimal(5,1)"
    assert cdl_type({"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"}, "string") == "timestamp_ntz"
    with pytest.raises(ParseError) as err:
        parse(sample(data={"count1": 1, "id": 34, "time1": None, "decimalNum": "twelve"}))
    assert err.value.field == "data.decimalNum"


def test_other_connect_types():
    doc = sample(data={"count1": 1, "id": 34, "time1": None, "decimalNum": None, "d": 19757, "b": "AQI=",
                       "f": 1.25, "ok": True})
    data_struct = next(f for f in doc["schema"]["fields"] if f["field"] == "data")
    data_struct["fields"] += [
        {"type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date", "version": 1, "field": "d"},
        {"type": "bytes", "optional": True, "field": "b"},
        {"type": "float64", "optional": True, "field": "f"},
        {"type": "boolean", "optional": True, "field": "ok"},
    ]
    c = one(doc)
    assert c.after == {"count1": "1", "id": "34", "time1": None, "decimalNum": None, "d": "2024-02-04", "b": "AQI=",
                       "f": "1.25", "ok": "true"}
    assert {k: c.column_types[k] for k in ("d", "b", "f", "ok")} == {
        "d": "date", "b": "binary", "f": "double", "ok": "boolean"}


def test_without_schema_envelope_uses_configured_types():
    payload = json.loads(CDL_JSON_V1)["payload"]
    payload["data"] = {"count1": 13, "id": 34, "time1": 1707047996013, "decimalNum": "3.5"}
    plain = one(payload)
    assert plain.column_types == {} and plain.after == {"count1": "13", "id": "34", "time1": "1707047996013",
                                                        "decimalNum": "3.5"}
    typed = one(payload, column_types={"time1": "timestamp", "ct_pg2hudi": {"decimalNum": "decimal(6,2)"}})
    assert typed.after["time1"] == "2024-02-04 11:59:56.013000" and typed.after["decimalNum"] == "3.50"
    assert typed.column_types == {"time1": "timestamp", "decimalNum": "decimal(6,2)"}


# --- positions and transactions ---------------------------------------------------------------

@pytest.mark.parametrize("properties, position, tx_id", [
    ([{"name": "lsn", "value": 163955221008}, {"name": "txId", "value": 57227595}], (163955221008, 1707047996013),
     "57227595"),
    ([{"name": "lsn", "value": "26/2C5A7E10"}], ((0x26 << 32) | 0x2C5A7E10, 1707047996013), None),
    ([{"name": "lsn", "value": "163955221008"}], (163955221008, 1707047996013), None),
    ([{"name": "txId", "value": 9}], (0, 1707047996013), "9"),
    ({"lsn": 5, "txId": "x-1"}, (5, 1707047996013), "x-1"),
])
def test_positions(properties, position, tx_id):
    c = one(sample(transaction={"properties": properties}))
    assert c.source_position == position and c.tx_id == tx_id


def test_position_orders_by_lsn_then_timestamp():
    a = one(sample(TIMESTAMP=2000, transaction={"properties": [{"name": "lsn", "value": 10}]}))
    b = one(sample(TIMESTAMP=1000, transaction={"properties": [{"name": "lsn", "value": 11}]}))
    c = one(sample(TIMESTAMP=1500, transaction={"properties": [{"name": "lsn", "value": 11}]}))
    assert a.source_position < b.source_position < c.source_position


# --- primary keys -----------------------------------------------------------------------------

def test_primary_key_resolution_order():
    assert one(CDL_JSON_V1, key={"count1": 1}).primary_key == ["id"]  # "unique" beats the Kafka key
    assert one(CDL_JSON_V1, primary_key=["count1"]).primary_key == ["count1"]  # configuration beats "unique"
    assert one(CDL_JSON_V1, primary_keys={"public.ct_pg2hudi": ["id", "count1"]}).primary_key == ["id", "count1"]
    assert one(sample(unique=None), key={"count1": 13, "id": 34}).primary_key == ["count1", "id"]
    assert one(sample(unique={"id": 34, "count1": 13})).primary_key == ["id", "count1"]
    with pytest.raises(ParseError) as err:
        parse(sample(unique=None), key=b"not-json")
    assert err.value.field == "primary_key"
    assert str(err.value) == ("cdl-json: field 'primary_key': no primary key: "
                              "set primary_key for the source or send Kafka keys")


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, field, words", [
    ('{"schema": {}, "payload": {"OPERATION": "INSERT"', "value", "not valid JSON"),
    ("[1, 2]", "value", "not an object"),
    (b"\xff\xfe", "value", "not UTF-8"),
    ({"schema": {}, "payload": [1]}, "payload", "not an object"),
    (sample(OPERATION=None), "OPERATION", "missing operation"),
    (sample(OPERATION="UPSERT"), "OPERATION", "unknown operation 'UPSERT'"),
    (sample(OPERATION=3), "OPERATION", "unknown operation 3"),
    (sample(TABLE_NAME=None), "TABLE_NAME", "missing table"),
    (sample(TABLE_NAME=""), "TABLE_NAME", "missing table"),
    (sample(TIMESTAMP=None), "TIMESTAMP", "missing change time"),
    (sample(TIMESTAMP="yesterday"), "TIMESTAMP", "not a non-negative integer"),
    (sample(TIMESTAMP=-5), "TIMESTAMP", "out of range"),
    (sample(transaction={"properties": [{"name": "lsn", "value": "zz"}]}), "transaction.properties.lsn", "LSN"),
    (sample(transaction={"properties": "lsn=1"}), "transaction.properties", "expected a list"),
    (sample(transaction={"properties": [["lsn", 1]]}), "transaction.properties", "entry 0"),
    (sample(transaction=[1]), "transaction", "not an object"),
    (sample(data=[1]), "data", "not an object"),
    (sample(data=None), "data", "no after image"),
    (sample(OPERATION="UPDATE", data=None), "data", "no after image"),
    (sample(data={"count1": 1, "id": "abc"}), "data.id", "cannot read 'abc'"),
    (sample(data={"count1": 1, "id": 34, "time1": "noon"}), "data.time1", "cannot read 'noon'"),
    (sample(unique=[34]), "unique", "not an object"),
    (sample(OPERATION="DELETE", data=None, before=None, unique={"id": "x"}), "unique.id", "cannot read 'x'"),
])
def test_errors_name_format_and_field(value, field, words):
    with pytest.raises(ParseError) as err:
        parse(value)
    assert err.value.format == "cdl-json" and err.value.field == field
    assert str(err.value).startswith(f"cdl-json: field '{field}': ") and words in str(err.value)


def test_unreadable_field_schema_names_column():
    doc = sample()
    data_struct = next(f for f in doc["schema"]["fields"] if f["field"] == "data")
    data_struct["fields"][3] = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                                "parameters": "scale=2", "field": "decimalNum"}
    with pytest.raises(ParseError) as err:
        parse(doc)
    assert err.value.field == "schema.decimalNum" and "unreadable field schema" in str(err.value)


def test_parser_is_picklable():
    parser = get_parser("cdl-json", {"primary_key": ["id"], "column_types": {"decimalNum": "decimal(10,2)"}})
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.parse(krec(CDL_JSON_V1)) == parser.parse(krec(CDL_JSON_V1))


# --- the simulated shop rendered as CDL JSON (round trip: test_round_trip.py) ----------------

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def source() -> SimulatedSource:
    return SimulatedSource(seed=23, start=START, hours=2)


@pytest.fixture(scope="module")
def messages(source):
    return cdl_json(source.run(), source.tables)


def test_rendered_messages_shape(source, messages):
    history = source.run()
    data = [json.loads(m.value) for m in messages if m.rows]
    assert len(data) == sum(len(tx.changes) for tx in history)
    assert all(m.timestamp_ms >= p.timestamp_ms for p, m in zip(messages, messages[1:]))
    assert all(source.start_ms <= m.timestamp_ms < source.end_ms for m in messages)
    payloads = [d["payload"] for d in data]
    assert {p["DATA_STORE"] for p in payloads} == {"POSTGRESQL"} and {p["SEG_OWNER"] for p in payloads} == {"public"}
    assert {p["OPERATION"] for p in payloads} == {"INSERT", "UPDATE", "DELETE"}
    assert {p["message_version"] for p in payloads} == {"1.0"} and {p["message_type"] for p in payloads} == {"0"}
    lsns = [dict((q["name"], q["value"]) for q in p["transaction"]["properties"])["lsn"] for p in payloads]
    assert lsns == sorted(set(lsns))  # strictly increasing in commit order
    heartbeats = [m for m in messages if not m.rows]
    assert len(heartbeats) >= 60  # about one a minute over two hours
    assert {m.key for m in heartbeats} == {None}
