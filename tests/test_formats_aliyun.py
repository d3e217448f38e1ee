"""Tests of the ``aliyun-json`` parser (Alibaba Cloud DataWorks JSON messages in Kafka).

Vectors: Apache Paimon's ``aliyun-json`` Kafka test messages (``paimon/kafka/aliyun/table/event/``,
read in place from the shared conformance directory; Paimon's ``AliyunJsonRecordParserTest``
states their row kinds, key, database and table: ``paimon/expected/aliyun-events.txt``) and
messages built here in the shape "DataWorks: Appendix: Message formats" documents (the
document's own example is annotated pseudo-JSON, not a message).
"""
from __future__ import annotations

import functools
import json
import pickle

import helpers
import pytest
from conftest import CONFORMANCE, json_lines
from helpers import krec
from reference_model import apply_changes

from cdclake.formats import get_parser
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError

EVENTS = CONFORMANCE / "paimon" / "kafka" / "aliyun" / "table" / "event"
parse = functools.partial(helpers.parse, "aliyun-json")


def paimon_event(name: str) -> str:
    (line,) = json_lines(EVENTS / f"event-{name}.txt")
    return line


# --- Apache Paimon's aliyun-json messages ---------------------------------------------------------

@pytest.mark.parametrize("name, op, position, ts", [
    ("insert", "insert", (0,), None),  # a full-load row: sequenceId "-1", eventTime -1
    ("update-in-one", "update", (1731663842292000001,), 1731662097000),
    ("delete", "delete", (1731663842292000000,), 1731662085000),
])
def test_paimon_events(name, op, position, ts):
    """Paimon's stated results: one record each, key ``[id]``, database ``bigdata_test``, table
    ``sync_test_table``; INSERT, UPDATE_AFTER (before and after in one message), DELETE."""
    (c,) = parse(paimon_event(name))
    assert (c.op, c.source_database, c.source_schema, c.source_table) == (op, "bigdata_test", None, "sync_test_table")
    assert c.primary_key == ["id"] and c.source_position == position and c.source_ts_ms == ts
    assert c.column_types == {"id": "bigint", "val": "double", "name": "string", "create_time": "timestamp_ntz"}
    image = c.after if op != "delete" else c.before
    assert image["name"] == "a" and image["create_time"] == "2024-11-15 08:58:34"
    assert list(image) == ["id", "val", "name", "create_time"]  # schema.dataColumn's order, as Paimon's schema
    if op == "update":
        assert c.before == {"id": "2", "val": "1.1", "name": "a", "create_time": "2024-11-15 08:58:34"}
        assert c.after["val"] == "2.2"
    else:
        assert (c.before is None) == (op == "insert") and (c.after is None) == (op == "delete")


def test_paimon_events_final_state():
    """Applied in any order, the three messages leave id 2 with val 2.2 (the load row sorts first)
    and no id 1."""
    changes = [parse(paimon_event(n))[0] for n in ("update-in-one", "delete", "insert")]
    pairs = [(KafkaRecord("t", 0, i, 0, None, b"x"), c) for i, c in enumerate(changes)]
    state = apply_changes(pairs)
    assert {k: v["val"] for rows in state.values() for k, v in rows.items()} == {("2",): "2.2"}


# --- messages in the documented shape --------------------------------------------------------------

COLUMNS = [{"name": "id", "type": "LONG"}, {"name": "name", "type": "STRING"}, {"name": "bin", "type": "BYTES"},
           {"name": "ts", "type": "DATE"}, {"name": "ok", "type": "BOOLEAN"}, {"name": "amount", "type": "DOUBLE"}]
ROW = {"id": 111, "name": "scooter", "bin": "AAE=", "ts": 1590315269000, "ok": True, "amount": "12.50"}


def message(op: str, before=None, after=None, seq="1590315269000000001", **payload) -> dict:
    return {"schema": {"dataColumn": COLUMNS, "primaryKey": ["id"],
                       "source": {"dbType": "mysql", "dbVersion": "1.0.0", "dbName": "myDatabase",
                                  "schemaName": "mySchema", "tableName": "tableName"}},
            "payload": {"before": None if before is None else {"dataColumn": before},
                        "after": None if after is None else {"dataColumn": after},
                        "sequenceId": seq, "op": op, "ddl": None,
                        "timestamp": {"eventTime": 1590315269000, "systemTime": 1590315270000,
                                      "checkpointTime": 1590315269000}, **payload},
            "version": "0.0.1"}


def test_types_and_names():
    (c,) = parse(message("INSERT", after=ROW))
    assert (c.source_database, c.source_schema, c.source_table) == ("myDatabase", "mySchema", "tableName")
    assert c.column_types == {"id": "bigint", "name": "string", "bin": "binary", "ts": "timestamp_ntz", "ok": "boolean",
                              "amount": "double"}
    assert c.after == {"id": "111", "name": "scooter", "bin": "AAE=", "ts": "2020-05-24 10:14:29", "ok": "true",
                       "amount": "12.5"}
    assert c.source_position == (1590315269000000001,) and c.source_ts_ms == 1590315269000


def test_configured_types_win():
    """The six types are coarse: a DECIMAL comes as DOUBLE, a DATE column as DATE (epoch ms)."""
    (c,) = parse(message("INSERT", after=ROW), column_types={"tableName": {"amount": "decimal(10,2)", "ts": "date",
                                                                           "id": "int", "extra": "string"}})
    assert c.column_types["amount"] == "decimal(10,2)" and c.column_types["ts"] == "date"
    assert c.column_types["id"] == "int" and c.column_types["extra"] == "string"
    assert c.after["amount"] == "12.50" and c.after["ts"] == "2020-05-24" and c.after["id"] == "111"


def test_update_in_one_and_split():
    new = {**ROW, "name": "donald"}
    (one,) = parse(message("UPDATE_AFTER", before=ROW, after=new))
    assert one.op == "update" and one.before["name"] == "scooter" and one.after["name"] == "donald"
    (after_only,) = parse(message("UPDATE_AFTER", after=new, seq="12"))
    assert after_only.op == "update" and after_only.before is None and after_only.after["name"] == "donald"
    for spelling in ("UPDATE_BEFORE", "UPDATE_BEFOR"):  # the document prints UPDATE_BEFOR
        (half,) = parse(message(spelling, before=ROW, seq="11"))
        assert half.op == "delete" and half.before["name"] == "scooter" and half.after is None
        assert half.source_position == (11,)


def test_split_key_change_reaches_the_new_row():
    """UPDATE_BEFORE (old key) then UPDATE_AFTER (new key): the old key's row goes, whatever the
    arrival order."""
    old, new = {**ROW, "id": 1}, {**ROW, "id": 2, "name": "moved"}
    msgs = [message("INSERT", after=old, seq="10"), message("UPDATE_BEFORE", before=old, seq="11"),
            message("UPDATE_AFTER", after=new, seq="12")]
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        pairs = [(KafkaRecord("t", 0, i, 0, None, b"x"), parse(msgs[n])[0]) for i, n in enumerate(order)]
        state = apply_changes(pairs)
        assert {k: v["name"] for rows in state.values() for k, v in rows.items()} == {("2",): "moved"}


def test_load_rows_sort_before_incremental_changes():
    """sequenceId "-1" (full load): position (0,), before every change; only on an INSERT."""
    (load,) = parse(message("INSERT", after=ROW, seq="-1"))
    assert load.op == "insert" and load.source_position == (0,)
    (load_int,) = parse(message("INSERT", after=ROW, seq=-1))
    assert load_int.source_position == (0,)
    (upd,) = parse(message("UPDATE_AFTER", before=ROW, after={**ROW, "name": "later"}, seq="5"))
    state = apply_changes([(KafkaRecord("t", 0, 0, 0, None, b"u"), upd), (KafkaRecord("t", 0, 1, 0, None, b"l"), load)])
    assert [r["name"] for rows in state.values() for r in rows.values()] == ["later"]
    err = helpers.parse_error("aliyun-json", message("DELETE", before=ROW, seq="-1"))
    assert err.field == "payload.sequenceId"


def test_delete_key_from_kafka_key():
    partial = {k: v for k, v in ROW.items() if k != "id"}
    (c,) = parse(message("DELETE", before=partial), key={"id": 7})
    assert c.before["id"] == "7"
    err = helpers.parse_error("aliyun-json", message("DELETE", before=partial))
    assert err.field == "payload.before.dataColumn" and "key column(s) id" in str(err)


def test_control_records_and_truncate():
    hb = {"schema": {"dataColumn": None, "primaryKey": None, "source": None},
          "payload": {"before": None, "after": None, "sequenceId": None, "op": "MHEARTBEAT", "ddl": None,
                      "timestamp": {"eventTime": 1620457659000, "checkpointTime": 1620457659000}}, "version": "0.0.1"}
    assert parse(hb) == ControlRecord("heartbeat", "aliyun-json")
    for op in ("TRANSACTION_BEGIN", "TRANSACTION_END", "GTID", "XACOMMIT", "XAROLLBACK"):
        assert parse(message(op)).kind == "metadata"
    alter = message("ALTER", ddl="ALTER TABLE tableName ADD c INT")
    assert parse(alter) == ControlRecord("ddl", "aliyun-json", "myDatabase", "mySchema", "tableName",
                                         "ALTER TABLE tableName ADD c INT")
    assert parse(message("QUERY", ddl="CREATE TABLE x (id INT)")).kind == "ddl"
    assert parse(message("INSERT", after=ROW, ddl="ALTER TABLE t ADD c INT")).kind == "ddl"
    (t,) = parse(message("TRUNCATE", ddl="TRUNCATE TABLE tableName"))
    assert t.op == "truncate" and t.before is None and t.after is None and t.primary_key == ["id"]
    assert get_parser("aliyun-json").parse(KafkaRecord("t", 0, 0, 0, None, None)).kind == "tombstone"


def test_primary_key_resolution():
    msg = message("INSERT", after=ROW)
    assert parse(msg, primary_key=["name"])[0].primary_key == ["name"]
    assert parse(msg, primary_keys={"myDatabase.tableName": ["name", "id"]})[0].primary_key == ["name", "id"]
    no_pk = {**msg, "schema": {**msg["schema"], "primaryKey": []}}
    assert parse(no_pk, key={"id": 111})[0].primary_key == ["id"]
    err = helpers.parse_error("aliyun-json", no_pk)
    assert err.field == "primary_key"


def _without(d: dict, path: tuple) -> dict:
    d = json.loads(json.dumps(d))
    target = d
    for p in path[:-1]:
        target = target[p]
    del target[path[-1]]
    return d


BASE = message("INSERT", after=ROW)


@pytest.mark.parametrize("value, field, words", [
    (message("UPSERT", after=ROW), "payload.op", "unknown operation type 'UPSERT'"),
    (message("insert", after=ROW), "payload.op", "unknown operation type 'insert'"),
    (_without(BASE, ("payload", "op")), "payload.op", "missing operation type"),
    (_without(BASE, ("payload",)), "payload", "missing payload"),
    ({**BASE, "payload": [1]}, "payload", "not an object"),
    (_without(BASE, ("schema",)), "schema", "missing schema"),
    (_without(BASE, ("schema", "source", "tableName")), "schema.source.tableName", "missing table name"),
    ({**BASE, "schema": {**BASE["schema"], "source": {"dbName": 3, "tableName": "t"}}}, "schema.source.dbName", "not text"),
    ({**BASE, "schema": {**BASE["schema"], "dataColumn": {"id": "LONG"}}}, "schema.dataColumn", "expected a list"),
    ({**BASE, "schema": {**BASE["schema"], "dataColumn": [{"name": "id", "type": "INT"}]}},
     "schema.dataColumn[0].type", "unknown column type 'INT'"),
    ({**BASE, "schema": {**BASE["schema"], "dataColumn": [{"type": "LONG"}]}}, "schema.dataColumn[0]", "without a name"),
    ({**BASE, "schema": {**BASE["schema"], "primaryKey": "id"}}, "schema.primaryKey", "not a list"),
    (message("INSERT", after=None), "payload.after", "missing after image"),
    (message("DELETE"), "payload.before", "missing before image"),
    (message("INSERT", after=ROW, seq=None), "payload.sequenceId", "without a sequenceId"),
    (message("INSERT", after=ROW, seq="1.5"), "payload.sequenceId", "not a non-negative integer"),
    (message("INSERT", after=ROW, timestamp={"eventTime": "x"}), "payload.timestamp.eventTime", "not an integer"),
    (message("INSERT", after={**ROW, "id": "abc"}), "payload.after.dataColumn.id", "cannot read 'abc'"),
    (message("INSERT", after={**ROW, "ts": "never"}), "payload.after.dataColumn.ts", "cannot read"),
    ({**BASE, "payload": {**BASE["payload"], "after": {"dataColumn": [1]}}}, "payload.after.dataColumn", "not an object"),
    (json.dumps(BASE)[:80], "value", "not valid JSON"),
])
def test_errors_name_format_and_field(value, field, words):
    with pytest.raises(ParseError) as err:
        parse(value)
    assert err.value.format == "aliyun-json" and err.value.field == field
    assert str(err.value).startswith(f"aliyun-json: field '{field}': ") and words in str(err.value), str(err.value)


def test_parser_is_picklable():
    parser = get_parser("aliyun-json", {"primary_key": ["id"]})
    parser.parse(krec(paimon_event("delete")))
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.parse(krec(paimon_event("delete"))) == parser.parse(krec(paimon_event("delete")))
    assert isinstance(clone.parse(krec(paimon_event("insert")))[0], ChangeRecord)
