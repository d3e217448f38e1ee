"""Tests of the ``arcion-json`` parser and of the Arcion Replicant rendering of the simulated shop.

Vectors: every sample of "JSON CDC format for Kafka" (Arcion Replicant documentation), verbatim
in ``samples/arcion/``: the snapshot-mode INSERT event and the realtime-mode INSERT, UPDATE and
DELETE events (key and value structures) and the tombstone that follows the delete.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import pickle
from collections import Counter

import helpers
import pytest
from helpers import enc, krec, landed, sample
from reference_model import apply_changes, changes

from cdclake.formats.arcion import read_arcion_key, source_position  # importing registers arcion-json
from cdclake.formats import formats, get_parser
from cdclake.record import ControlRecord, KafkaRecord, ParseError, parse_all
from cdclake.sim.render_arcion import arcion_json
from cdclake.sim.model import Column, RowChange, Table, Transaction
from cdclake.sim.source import SimulatedSource

FORMAT = "arcion-json"
START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

parse = functools.partial(helpers.parse, FORMAT)
one = functools.partial(helpers.one, FORMAT)


def variant(text: str, **payload_changes) -> dict:
    """A document sample (value) with some payload fields replaced; ``source`` is merged."""
    doc = json.loads(text)
    for name, value in payload_changes.items():
        if name == "source":
            doc["payload"]["source"].update(value)
        else:
            doc["payload"][name] = value
    return doc


def key_of(regionkey: int) -> dict:
    doc = json.loads(INSERT_KEY)
    doc["payload"] = {"r_regionkey": regionkey}
    return doc


# --- "JSON CDC format for Kafka": the samples, verbatim ----------------------------------------

# Change events in snapshot mode / INSERT event / Key structure, Value structure
SNAPSHOT_INSERT_KEY = sample("arcion", "snapshot-insert.key.json")
SNAPSHOT_INSERT_VALUE = sample("arcion", "snapshot-insert.value.json")
# Change events in realtime mode / INSERT event / Key structure, Value structure
INSERT_KEY = sample("arcion", "insert.key.json")
INSERT_VALUE = sample("arcion", "insert.value.json")
# Change events in realtime mode / UPDATE event / Key structure, Value structure / KEY and / VALUE
UPDATE_KEY = sample("arcion", "update.key.json")
UPDATE_VALUE_SECTION_KEY = sample("arcion", "update.value-key.json")
UPDATE_VALUE = sample("arcion", "update.value.json")
# Change events in realtime mode / DELETE event / Key structure, Value structure
DELETE_KEY = sample("arcion", "delete.key.json")
DELETE_VALUE = sample("arcion", "delete.value.json")
# Change events in realtime mode / Tombstone event: the key; "The value for the preceding
# Tombstone key structure is null"
TOMBSTONE_KEY = sample("arcion", "tombstone.key.json")
TOMBSTONE_VALUE = sample("arcion", "tombstone.value.json")

REGION_TYPES = {"r_regionkey": "int", "r_name": "string", "r_comment": "string"}


def test_registered():
    assert FORMAT in formats()


def test_snapshot_insert_sample():
    c = one(SNAPSHOT_INSERT_VALUE, SNAPSHOT_INSERT_KEY)
    assert (c.source_format, c.source_database, c.source_schema, c.source_table) == (FORMAT, "tpch", None, "region")
    assert c.op == "snapshot"
    assert c.before is None  # "before": {} — no image, not an image of absent columns
    assert c.after == {"r_regionkey": "3", "r_name": "EUROPE",
                       "r_comment": "ly final courts cajole furiously final excuse"}
    assert c.primary_key == ["r_regionkey"]
    assert c.column_types == REGION_TYPES
    assert c.source_position == (0, 0, 0)  # file/pos/row null: before every realtime change
    assert c.source_ts_ms is None
    assert c.tx_id is None and c.tx_seq is None


def test_realtime_insert_sample():
    c = one(INSERT_VALUE, INSERT_KEY)
    assert (c.source_database, c.source_schema, c.source_table) == ("tpch", None, "region")
    assert c.op == "insert"
    assert c.before is None
    assert c.after == {"r_regionkey": "10", "r_name": "Test_nation", "r_comment": "ReplicationWorks"}
    assert c.primary_key == ["r_regionkey"]
    assert c.column_types == REGION_TYPES
    assert c.source_position == (13, 30407, 1)  # mysql-log.000013, pos 30407, row 1
    assert c.source_ts_ms == 1680798995000
    assert c.tx_id is None


def test_update_sample():
    assert json.loads(UPDATE_VALUE_SECTION_KEY) == json.loads(UPDATE_KEY)
    c = one(UPDATE_VALUE, UPDATE_KEY)
    assert c.op == "update"
    assert c.before == {"r_regionkey": "1", "r_name": "AMERICA", "r_comment": "hs use ironic, even requests. s"}
    assert c.after == {"r_regionkey": "1", "r_name": "AMERICA", "r_comment": "TestReplication"}
    assert c.primary_key == ["r_regionkey"]
    assert c.column_types == REGION_TYPES
    assert c.source_position == (13, 53709, 1)
    assert c.source_ts_ms == 1680799780000


def test_delete_sample_and_its_tombstone():
    c = one(DELETE_VALUE, DELETE_KEY)
    assert c.op == "delete"
    assert c.before == {"r_regionkey": "1", "r_name": "AMERICA", "r_comment": "TestReplication"}
    assert c.after is None  # "after": {}
    assert c.primary_key == ["r_regionkey"]
    assert c.source_position == (13, 59647, 1)
    assert c.source_ts_ms == 1680799967000
    assert json.loads(TOMBSTONE_KEY) == json.loads(DELETE_KEY)
    for value in (None, TOMBSTONE_VALUE, b"", b" null\n", b"\"default\""):
        t = parse(value, TOMBSTONE_KEY)
        assert isinstance(t, ControlRecord) and t.kind == "tombstone" and t.source_format == FORMAT
        assert json.loads(t.detail) == json.loads(TOMBSTONE_KEY)


def test_document_samples_applied_in_position_order():
    """Arrival order reversed: the positions alone give the result (region 1 updated, then deleted)."""
    samples = [(SNAPSHOT_INSERT_VALUE, SNAPSHOT_INSERT_KEY), (INSERT_VALUE, INSERT_KEY),
               (UPDATE_VALUE, UPDATE_KEY), (DELETE_VALUE, DELETE_KEY), (TOMBSTONE_VALUE, TOMBSTONE_KEY)]
    records = [krec(v, k, offset=10 - i) for i, (v, k) in enumerate(samples)]
    results = list(parse_all(get_parser(FORMAT), records))
    assert Counter(type(r).__name__ for _, r in results) == {"list": 4, "ControlRecord": 1}
    state = apply_changes(changes(results))
    assert state == {"tpch.region": {
        ("3",): {"r_regionkey": "3", "r_name": "EUROPE", "r_comment": "ly final courts cajole furiously final excuse"},
        ("10",): {"r_regionkey": "10", "r_name": "Test_nation", "r_comment": "ReplicationWorks"},
    }}


def test_snapshot_row_never_overrides_a_later_change():
    """A realtime update of region 3 that arrives before region 3's snapshot row still wins."""
    after = {"r_regionkey": 3, "r_name": "EUROPE", "r_comment": "changed"}
    update = variant(UPDATE_VALUE, before=json.loads(SNAPSHOT_INSERT_VALUE)["payload"]["after"], after=after)
    records = [krec(update, key_of(3), offset=0), krec(SNAPSHOT_INSERT_VALUE, SNAPSHOT_INSERT_KEY, offset=1)]
    state = apply_changes(changes(parse_all(get_parser(FORMAT), records)))
    assert state["tpch.region"][("3",)]["r_comment"] == "changed"


def test_empty_images_are_missing_images():
    ins = one(INSERT_VALUE, INSERT_KEY)
    assert ins.before is None and ins.before != {}
    upd = one(variant(UPDATE_VALUE, before={}), UPDATE_KEY)
    assert upd.before is None and upd.after["r_comment"] == "TestReplication"
    partial = one(variant(UPDATE_VALUE, after={"r_regionkey": 1, "r_comment": None}), UPDATE_KEY)
    assert partial.after == {"r_regionkey": "1", "r_comment": None}  # r_name absent, r_comment null
    with pytest.raises(ParseError) as err:
        parse(variant(UPDATE_VALUE, after={}), UPDATE_KEY)
    assert err.value.field == "after"


@pytest.mark.parametrize("key", [None, b"", b"null", '{"schema": null, "payload": null}',
                                 '{"schema": {"type": "struct", "fields": []}, "payload": {}}',
                                 '"default"', b"default"])
def test_null_key_needs_a_configured_primary_key(key):
    assert read_arcion_key(enc(key)) is None
    with pytest.raises(ParseError) as err:
        parse(INSERT_VALUE, key)
    assert err.value.field == "primary_key"
    assert str(err.value) == (f"{FORMAT}: field 'primary_key': no primary key: "
                              "set primary_key for the source or send Kafka keys")
    assert one(INSERT_VALUE, key, primary_key=["r_regionkey"]).primary_key == ["r_regionkey"]
    assert one(INSERT_VALUE, key, primary_keys={"tpch.region": ["r_name"]}).primary_key == ["r_name"]


def test_configured_key_overrides_the_kafka_key():
    assert one(INSERT_VALUE, INSERT_KEY, primary_key="r_name").primary_key == ["r_name"]
    assert one(INSERT_VALUE, INSERT_KEY, primary_keys={"region": ["r_name", "r_regionkey"]},
               primary_key=["x"]).primary_key == ["r_name", "r_regionkey"]


def test_key_columns_in_key_order_and_without_envelope():
    key = {"schema": {"type": "struct", "fields": [{"type": "string", "field": "r_name"},
                                                   {"type": "int32", "field": "r_regionkey"}]},
           "payload": {"r_name": "EUROPE", "r_regionkey": 3}}
    assert one(SNAPSHOT_INSERT_VALUE, key).primary_key == ["r_name", "r_regionkey"]
    assert one(SNAPSHOT_INSERT_VALUE, {"r_regionkey": 3}).primary_key == ["r_regionkey"]


def test_delete_without_before_is_keyed_from_the_kafka_key():
    c = one(variant(DELETE_VALUE, before={}), DELETE_KEY)
    assert c.before == {"r_regionkey": "1"} and c.after is None
    with pytest.raises(ParseError) as err:
        parse(variant(DELETE_VALUE, before={}), None, primary_key=["r_regionkey"])
    assert err.value.field == "before"
    assert "r_regionkey" in str(err.value)
    bad_key = key_of(1)
    bad_key["payload"]["r_regionkey"] = "one"
    with pytest.raises(ParseError) as err:
        parse(variant(DELETE_VALUE, before={}), bad_key)
    assert err.value.field == "key.r_regionkey"


def test_primary_key_update_arrives_as_delete_then_insert():
    """Item 4: region 1 renumbered to 11 is a delete of 1 (with its tombstone) and an insert of 11."""
    snapshot = variant(SNAPSHOT_INSERT_VALUE, after={"r_regionkey": 1, "r_name": "AMERICA", "r_comment": "x"})
    delete = variant(DELETE_VALUE, before={"r_regionkey": 1, "r_name": "AMERICA", "r_comment": "x"})
    insert = variant(INSERT_VALUE, after={"r_regionkey": 11, "r_name": "AMERICA", "r_comment": "x"},
                     source={"pos": 59647, "row": 1, "ts_ms": 1680799967000})
    records = [krec(snapshot, key_of(1), 0), krec(delete, key_of(1), 1), krec(None, key_of(1), 2),
               krec(insert, key_of(11), 3)]
    results = list(parse_all(get_parser(FORMAT), records))
    ops = [r.kind if isinstance(r, ControlRecord) else r[0].op for _, r in results]
    assert ops == ["snapshot", "delete", "tombstone", "insert"]
    assert results[1][1][0].source_position == results[3][1][0].source_position
    state = apply_changes(changes(results))
    assert state == {"tpch.region": {("11",): {"r_regionkey": "11", "r_name": "AMERICA", "r_comment": "x"}}}


def test_rendered_primary_key_update_is_delete_tombstone_insert():
    region = Table("region", (Column("r_regionkey", "int(11)", "int", False),
                              Column("r_name", "varchar(25)", "string", False)), ("r_regionkey",))
    row1, row11 = {"r_regionkey": 1, "r_name": "AMERICA"}, {"r_regionkey": 11, "r_name": "AMERICA"}
    load = RowChange("region", "insert", None, row1, (1,), "mysql-bin.000007", 300, 0)
    renumber = RowChange("region", "update", row1, row11, (11,), "mysql-bin.000007", 600, 0)
    history = [Transaction("u:1", "u:1", 1_000, (load,), "mysql-bin.000007", 194, 7, snapshot=True),
               Transaction("u:2", "u:2", 2_000, (renumber,), "mysql-bin.000007", 500, 7)]
    messages = arcion_json(history, {"region": region}, database="tpch", partitions=1)
    assert [json.loads(m.value)["payload"]["op"] if m.value else None for m in messages] == ["r", "d", None, "c"]
    assert [m.rows for m in messages] == [1, 0, 0, 1]
    records = [KafkaRecord("t", m.partition, i, m.timestamp_ms, m.key, m.value) for i, m in enumerate(messages)]
    state = apply_changes(changes(parse_all(get_parser(FORMAT), records)))
    assert state == {"tpch.region": {("11",): {"r_regionkey": "11", "r_name": "AMERICA"}}}


def test_binlog_positions_compare_numerically():
    a = one(variant(INSERT_VALUE, source={"file": "mysql-log.000009", "pos": 99999, "row": 3}), INSERT_KEY)
    b = one(variant(INSERT_VALUE, source={"file": "mysql-log.000010", "pos": 194, "row": 0}), INSERT_KEY)
    assert a.source_position == (9, 99999, 3) and b.source_position == (10, 194, 0)
    assert a.source_position < b.source_position
    assert one(variant(INSERT_VALUE, source={"row": None}), INSERT_KEY).source_position == (13, 30407, 0)
    mariadb = {"connector": "MARIADB", "file": "mariadb-bin.000002", "pos": 4, "row": 0}
    assert one(variant(INSERT_VALUE, source=mariadb), INSERT_KEY).source_position == (2, 4, 0)


def test_other_sources_are_ordered_by_source_ts_ms():
    oracle = {"connector": "ORACLE", "db": None, "schema": "TPCH", "file": None, "pos": None, "row": None}
    c = one(variant(INSERT_VALUE, source=oracle), INSERT_KEY)
    assert (c.source_database, c.source_schema, c.source_table) == (None, "TPCH", "region")
    assert c.source_position == (1680798995000,)
    snap = one(variant(SNAPSHOT_INSERT_VALUE, source=oracle), SNAPSHOT_INSERT_KEY)
    assert snap.source_position == (0,)
    assert source_position({"connector": "POSTGRESQL", "ts_ms": 5}, snapshot=True) == (5,)
    with pytest.raises(ParseError) as err:
        parse(variant(INSERT_VALUE, source={**oracle, "ts_ms": None}), INSERT_KEY)
    assert err.value.field == "source.ts_ms"


def test_gtid_is_the_transaction_id():
    c = one(variant(INSERT_VALUE, source={"gtid": "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"}), INSERT_KEY)
    assert c.tx_id == "3E11FA47-71CA-11E1-9E33-C80AA9429562:23"


TYPED_SCHEMA = [
    {"type": "int16", "optional": False, "field": "s"},
    {"type": "int64", "optional": False, "field": "b"},
    {"type": "float32", "optional": True, "field": "f"},
    {"type": "float64", "optional": True, "field": "d"},
    {"type": "boolean", "optional": True, "field": "ok"},
    {"type": "bytes", "optional": True, "field": "raw"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
     "parameters": {"scale": "2", "connect.decimal.precision": "12"}, "field": "amount"},
    {"type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date", "version": 1, "field": "day"},
    {"type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1,
     "field": "at"},
    {"type": "string", "optional": True, "field": "note"},
]


def typed_value(after: dict) -> dict:
    doc = variant(INSERT_VALUE, after=after)
    for env_field in doc["schema"]["fields"]:
        if env_field["field"] in ("before", "after"):
            env_field["fields"] = TYPED_SCHEMA
    return doc


def test_types_and_values_from_the_value_schema():
    after = {"s": -3, "b": 9007199254740993, "f": 1.5, "d": 0.1, "ok": True, "raw": "AAH/",
             "amount": "MDk=", "day": 19723, "at": 1704067200123, "note": None}
    c = one(typed_value(after), {"s": -3, "b": 9007199254740993})
    assert c.column_types == {"s": "smallint", "b": "bigint", "f": "float", "d": "double", "ok": "boolean",
                              "raw": "binary", "amount": "decimal(12,2)", "day": "date", "at": "timestamp_ntz",
                              "note": "string"}
    assert c.after == {"s": "-3", "b": "9007199254740993", "f": "1.5", "d": "0.1", "ok": "true", "raw": "AAH/",
                       "amount": "123.45", "day": "2024-01-01", "at": "2024-01-01 00:00:00.123000", "note": None}
    assert c.primary_key == ["s", "b"]


def test_values_sent_as_text_follow_their_schema_type():
    # The earlier edition of the document shows a key value of an int32 column sent as text ("0").
    c = one(variant(INSERT_VALUE, after={"r_regionkey": "0", "r_name": "AFRICA", "r_comment": "x"}),
            {"schema": json.loads(INSERT_KEY)["schema"], "payload": {"r_regionkey": "0"}})
    assert c.after["r_regionkey"] == "0" and c.column_types["r_regionkey"] == "int"


def test_configured_types_fill_gaps_without_a_schema():
    doc = json.loads(INSERT_VALUE)
    c = one({"schema": None, "payload": doc["payload"]}, INSERT_KEY,
            column_types={"tpch.region": {"r_comment": "string"}, "r_regionkey": "bigint"})
    # the key's own schema types r_regionkey; the configuration types the rest
    assert c.column_types == {"r_regionkey": "int", "r_comment": "string"}
    assert c.after == {"r_regionkey": "10", "r_name": "Test_nation", "r_comment": "ReplicationWorks"}
    bare = one(doc["payload"], {"r_regionkey": 10}, column_types={"r_regionkey": "bigint"})
    assert bare.column_types == {"r_regionkey": "bigint"} and bare.op == "insert"


def _bad(**payload_changes):
    return variant(INSERT_VALUE, **payload_changes)


def _without(name):
    doc = json.loads(INSERT_VALUE)
    del doc["payload"][name]
    return doc


def _without_table():
    doc = json.loads(INSERT_VALUE)
    del doc["payload"]["source"]["table"]
    return doc


@pytest.mark.parametrize("value, key, field_name, words", [
    (INSERT_VALUE[:500], INSERT_KEY, "value", "not valid JSON"),
    (b"\xff\xfe{}", INSERT_KEY, "value", "not UTF-8"),
    ("[1, 2]", INSERT_KEY, "value", "not an object"),
    ('{"schema": null, "payload": [1]}', INSERT_KEY, "payload", "not an object"),
    (_without("source"), INSERT_KEY, "source", "missing source"),
    ({"schema": None, "payload": {"op": "c", "source": "x"}}, INSERT_KEY, "source", "not an object"),
    (_without("op"), INSERT_KEY, "op", "missing operation"),
    (_bad(op="x"), INSERT_KEY, "op", "unknown operation 'x'"),
    (_bad(op=1), INSERT_KEY, "op", "unknown operation"),
    (_without_table(), INSERT_KEY, "source.table", "missing table"),
    (_bad(source={"db": 5}), INSERT_KEY, "source.db", "not a name"),
    (INSERT_VALUE, INSERT_KEY[:40], "key", "not valid JSON"),
    (INSERT_VALUE, "[10]", "key", "not an object"),
    (INSERT_VALUE, None, "primary_key", "no primary key"),
    (_bad(after={"r_regionkey": "ten", "r_name": "x"}), INSERT_KEY, "after.r_regionkey", "cannot read 'ten'"),
    (_bad(after=[10]), INSERT_KEY, "after", "not an object"),
    (_bad(after={}), INSERT_KEY, "after", "insert has no after image"),
    (_bad(before="x"), INSERT_KEY, "before", "not an object"),
    (_bad(source={"file": "mysql-log"}), INSERT_KEY, "source.file", "does not end in a sequence number"),
    (_bad(source={"file": 13}), INSERT_KEY, "source.file", "not text"),
    (_bad(source={"pos": -5}), INSERT_KEY, "source.pos", "out of range"),
    (_bad(source={"pos": None}), INSERT_KEY, "source.pos", "without a position"),
    (_bad(source={"row": "first"}), INSERT_KEY, "source.row", "not a non-negative integer"),
    (_bad(source={"file": None, "pos": None}), INSERT_KEY, "source.file", "no binlog position"),
    (_bad(source={"ts_ms": "soon"}), INSERT_KEY, "source.ts_ms", "not a non-negative integer"),
])
def test_errors_name_format_and_field(value, key, field_name, words):
    with pytest.raises(ParseError) as err:
        parse(value, key)
    assert err.value.field == field_name
    assert str(err.value).startswith(f"{FORMAT}: field '{field_name}': ")
    assert words in str(err.value)


def test_parser_is_picklable():
    parser = get_parser(FORMAT, {"primary_key": ["r_regionkey"]})
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.parse(krec(INSERT_VALUE)) == parser.parse(krec(INSERT_VALUE))


# --- the simulated shop as Arcion Replicant writes it (round trip: test_round_trip.py) ---------


@pytest.fixture(scope="module")
def source():
    return SimulatedSource(seed=29, start=START, hours=2)


@pytest.fixture(scope="module")
def history(source):
    return source.run()


@pytest.fixture(scope="module")
def messages(source, history):
    return arcion_json(history, source.tables)


def test_rendered_messages(source, history, messages):
    n_snapshot = sum(len(tx.changes) for tx in history if tx.snapshot)
    n_changes = sum(len(tx.changes) for tx in history)
    assert n_snapshot > 0 and sum(m.rows for m in messages) == n_changes
    ops: Counter = Counter()
    last_ts = 0
    for i, m in enumerate(messages):
        assert m.timestamp_ms >= last_ts and m.commit_ts_ms + 200 <= m.timestamp_ms < m.commit_ts_ms + 900
        last_ts = m.timestamp_ms
        key = json.loads(m.key)
        assert set(key) == {"schema", "payload"} and key["schema"]["name"].endswith(".Key")
        if m.value is None:
            prev = messages[i - 1]
            assert json.loads(prev.value)["payload"]["op"] == "d"
            assert (prev.key, prev.partition) == (m.key, m.partition)
            ops["tombstone"] += 1
            continue
        value = json.loads(m.value)
        assert set(value) == {"schema", "payload"}
        payload = value["payload"]
        assert list(payload) == ["before", "after", "source", "op", "ts_ms"]
        src = payload["source"]
        ops[payload["op"]] += 1
        if payload["op"] == "r":
            assert payload["before"] == {} and payload["ts_ms"] is None and src["snapshot"] == "true"
            assert (src["file"], src["pos"], src["row"], src["ts_ms"]) == (None, None, None, None)
        else:
            assert src["snapshot"] == "false" and src["connector"] == "MYSQL" and src["ts_ms"] == m.commit_ts_ms
            assert src["file"].startswith("mysql-bin.") and src["pos"] > 0 and src["gtid"]
            assert (payload["before"] == {}) == (payload["op"] == "c")
            assert (payload["after"] == {}) == (payload["op"] == "d")
        if i + 1 < len(messages) and payload["op"] == "d":
            assert messages[i + 1].value is None
    assert ops["r"] == n_snapshot
    assert ops["tombstone"] == ops["d"] > 0 and ops["c"] > 0 and ops["u"] > 0


def test_rendered_snapshot_sorts_before_realtime(messages):
    results = list(parse_all(get_parser(FORMAT), landed(messages)))
    rows = [c for _, c in changes(results)]
    snapshot = [c.source_position for c in rows if c.op == "snapshot"]
    realtime = [c.source_position for c in rows if c.op != "snapshot"]
    assert set(snapshot) == {(0, 0, 0)}
    assert min(realtime) > (0, 0, 0) and len(set(realtime)) == len(realtime)
    assert Counter(r.kind for _, r in results if isinstance(r, ControlRecord)) == {"tombstone": len(
        [c for c in rows if c.op == "delete"])}
