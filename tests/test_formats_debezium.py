"""Tests of the ``debezium-json`` parser and of the reference model.

Vectors: the samples of "Lindorm: Debezium Format V2.0" and of "Huawei MRS CDL JSON and
open-source Debezium JSON" (verbatim in ``samples/lindorm/`` and ``samples/huawei-mrs/``),
Apache Flink's flink-json test resources (``flink/debezium-*.txt``, final states derived from
Flink's ``DebeziumJsonSerDeSchemaTest`` changelog) and Apache Paimon's Kafka CDC test resources
(``paimon/kafka/debezium/``), the last two read in place from the shared conformance directory.
"""
from __future__ import annotations

import functools
import json
import pickle

import helpers
import pytest
from conftest import CONFORMANCE, flink_expected, json_lines, products
from helpers import krec, sample
from reference_model import apply_changes, changes

from cdclake.formats import get_parser
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, parse_all

FLINK = CONFORMANCE / "flink"
PAIMON_DEBEZIUM = CONFORMANCE / "paimon" / "kafka" / "debezium" / "table"


parse = functools.partial(helpers.parse, "debezium-json")
one = functools.partial(helpers.one, "debezium-json")


# --- Lindorm: Debezium Format V2.0 (samples verbatim) -------------------------------------------

# Message structure (the example with a schema)
LINDORM_WITH_SCHEMA = sample("lindorm", "with-schema.json")
# Sample records / SQL table samples / Insert (op: "c", before is null)
LINDORM_INSERT = sample("lindorm", "insert.json")
# Sample records / SQL table samples / Update (op: "u", both before and after are populated)
LINDORM_UPDATE = sample("lindorm", "update.json")
# Sample records / SQL table samples / Row delete (op: "d", after is null)
LINDORM_DELETE = sample("lindorm", "delete.json")
# Sample records / SQL table samples / Column delete (op: "u", deleted column is omitted from after)
LINDORM_COLUMN_DELETE = sample("lindorm", "column-delete.json")
# Sample records / HBase table samples
LINDORM_HBASE_INSERT = sample("lindorm", "hbase-insert.json")


def test_lindorm_first_example_with_schema():
    c = one(LINDORM_WITH_SCHEMA, primary_key=["id"])
    assert (c.source_format, c.source_database, c.source_schema, c.source_table) == (
        "debezium-json", "ld-xxxx", "default", "customers")
    assert c.op == "update"
    assert c.before == {"id": "1004", "name": "Jane"}
    assert c.after == {"id": "1004", "name": "Anne"}
    assert c.column_types == {"id": "int", "name": "string"}
    assert c.primary_key == ["id"]
    assert c.source_position == (1465491411807,)
    assert c.source_ts_ms == 1465491411807
    assert c.tx_id is None and c.tx_seq is None


def test_lindorm_key_from_kafka_key_or_error():
    assert one(LINDORM_WITH_SCHEMA, key={"id": 1004}).primary_key == ["id"]
    with pytest.raises(ParseError) as err:
        parse(LINDORM_WITH_SCHEMA)
    assert err.value.field == "primary_key"
    assert str(err.value) == ("debezium-json: field 'primary_key': no primary key: "
                              "set primary_key for the source or send Kafka keys")


def test_lindorm_sql_samples():
    opts = {"primary_key": ["id"]}
    ins = one(LINDORM_INSERT, **opts)
    assert ins.op == "insert" and ins.before is None
    assert ins.after == {"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"}
    assert ins.column_types == {}  # "schema": {} carries no types
    assert ins.source_schema == "default" and ins.source_position == (1465491411807,)

    upd = one(LINDORM_UPDATE, **opts)
    assert upd.op == "update"
    assert upd.before == {"id": "1004", "first_name": "Anne Marie", "last_name": "Kretchmar"}
    assert upd.after == {"id": "1004", "first_name": "Anne", "last_name": "Kretchmar"}

    dele = one(LINDORM_DELETE, **opts)
    assert dele.op == "delete" and dele.after is None
    assert dele.before == {"id": "1004", "first_name": "Anne Marie", "last_name": "Kretchmar"}
    assert dele.primary_key == ["id"]


def test_lindorm_column_delete_sets_omitted_column_to_null():
    c = one(LINDORM_COLUMN_DELETE, primary_key=["id"])
    assert c.op == "update"
    assert c.after == {"id": "1004", "first_name": "Anne Marie", "last_name": None}
    state = apply_changes([(krec(LINDORM_INSERT, offset=0), one(LINDORM_INSERT, primary_key=["id"])),
                           (krec(LINDORM_COLUMN_DELETE, offset=1), c)])
    assert state["ld-xxxx.default.customers"] == {("1004",): {"id": "1004", "first_name": "Anne Marie", "last_name": None}}


def test_lindorm_hbase_insert():
    c = one(LINDORM_HBASE_INSERT)
    assert c.op == "insert" and c.before is None
    assert c.after == {"ROW": "dXNlcjE=", "f_name": "bHVja3k="}
    assert c.primary_key == ["ROW"]
    assert c.column_types == {"ROW": "binary", "f_name": "binary"}
    assert c.source_position == (1725258833727,) and c.source_ts_ms == 1725258833727


def test_column_delete_is_lindorm_only():
    """A Debezium connector's update without a column keeps the column absent (not null)."""
    value = {"op": "u", "before": {"id": 1, "a": "x"}, "after": {"id": 1},
             "source": {"connector": "mysql", "db": "d", "table": "t", "file": "mysql-bin.000001", "pos": 4, "row": 0}}
    assert one(value, primary_key=["id"]).after == {"id": "1"}


# --- Huawei MRS CDL JSON and open-source Debezium JSON (samples verbatim) -----------------------

# Data Formats / "A sample in Debezium JSON format is as follows"
CDL_DEBEZIUM = sample("huawei-mrs", "debezium-json-2.0.json")
# Data Formats / "A sample in CDL JSON format is as follows"
CDL_JSON_V1 = sample("huawei-mrs", "cdl-json-1.0.json")


def test_huawei_cdl_debezium_sample():
    c = one(CDL_DEBEZIUM)
    assert (c.source_database, c.source_schema, c.source_table) == ("cdl", "public", "ct_pg2hudi")
    assert c.op == "insert" and c.before is None
    assert c.after == {"count1": "14", "id": "35", "time1": None, "decimalNum": None}
    assert c.primary_key == ["id"]  # from "unique"
    assert c.column_types == {"count1": "bigint", "id": "int", "time1": "string", "decimalNum": "string"}
    assert c.source_position == (163955586912, 163955586912)  # PostgreSQL without source.sequence
    assert c.source_ts_ms == 1707048891235
    assert c.tx_id == "57227663"


def test_huawei_cdl_heartbeat_and_v1():
    heartbeat = json.loads(CDL_DEBEZIUM)
    heartbeat["payload"]["message_type"] = "1"
    result = parse(heartbeat)
    assert isinstance(result, ControlRecord) and result.kind == "heartbeat"
    with pytest.raises(ParseError) as err:
        parse(CDL_JSON_V1)
    assert err.value.field == "message_version" and "message_version 2.0" in str(err.value)


# --- Apache Flink flink-json vectors --------------------------------------------------------------

FLINK_DEBEZIUM = [
    "debezium-data-schema-include.txt",
    "debezium-data-schema-exclude.txt",
    "debezium-postgres-data-schema-include.txt",
    "debezium-postgres-data-schema-exclude.txt",
]


@pytest.mark.parametrize("name", FLINK_DEBEZIUM)
def test_flink_debezium_final_state(name):
    """Flink's DebeziumJsonSerDeSchemaTest inputs reach the state derived from its changelog."""
    parser = get_parser("debezium-json", {"primary_key": ["id"]})
    lines = (FLINK / name).read_text(encoding="utf-8").splitlines()
    records = [krec(line, offset=i) for i, line in enumerate(lines)] + [krec(None, offset=len(lines))]
    results = list(parse_all(parser, records))
    assert sum(isinstance(r, ControlRecord) and r.kind == "tombstone" for _, r in results) == 1
    pairs = changes(results)
    assert len(pairs) == 16
    assert products(apply_changes(pairs)) == flink_expected("debezium.final-state.derived.csv")
    ops = [c.op for _, c in pairs]
    assert ops.count("update") == 4 and ops.count("delete") == 1
    if "postgres" in name:
        assert ops.count("snapshot") == 9 and ops.count("insert") == 2
        assert pairs[-1][1].source_position == (34133800, 34133800) and pairs[-1][1].tx_id == "608"
    else:  # the MySQL snapshot rows are op "c", all at one binlog position
        assert ops.count("insert") == 11 and pairs[0][1].source_position == pairs[8][1].source_position == (3, 154, 0)
        assert pairs[-1][1].source_position == (3, 2443, 0)
    if "include" in name:
        assert pairs[0][1].column_types == {"id": "int", "name": "string", "description": "string", "weight": "double"}


def test_flink_postgres_replica_identity_without_keys():
    """REPLICA IDENTITY DEFAULT: updates apply from ``after``; the keyless delete is quarantined."""
    parser = get_parser("debezium-json", {"primary_key": ["id"]})
    lines = (FLINK / "debezium-postgres-data-replica-identity.txt").read_text(encoding="utf-8").splitlines()
    results = list(parse_all(parser, [krec(line, offset=i) for i, line in enumerate(lines)]))
    errors = [r for _, r in results if isinstance(r, ParseError)]
    assert len(errors) == 1 and results[-1][1] is errors[0]
    assert errors[0].field == "before"
    assert "debezium-json" in str(errors[0]) and "REPLICA IDENTITY FULL" in str(errors[0])
    assert "Kafka keys" in str(errors[0])
    updates = [r[0] for _, r in results[:-1] if r[0].op == "update"]
    assert len(updates) == 4 and all(u.before is None for u in updates)
    state = products(apply_changes(changes(results[:-1])))
    assert 111 in state  # the delete was not applied silently


@pytest.mark.parametrize("with_schema", [False, True])
def test_flink_postgres_replica_identity_with_kafka_keys(with_schema):
    lines = (FLINK / "debezium-postgres-data-replica-identity.txt").read_text(encoding="utf-8").splitlines()

    def key(line):
        after = json.loads(line)["after"]
        payload = {"id": after["id"] if after else 111}
        if not with_schema:
            return payload
        return {"schema": {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "id"}],
                           "optional": False, "name": "fullfillment.inventory.products.Key"}, "payload": payload}

    parser = get_parser("debezium-json", {})  # key columns from the Kafka keys only
    results = list(parse_all(parser, [krec(line, key(line), offset=i) for i, line in enumerate(lines)]))
    pairs = changes(results)
    delete = pairs[-1][1]
    assert delete.op == "delete" and delete.before == {"id": "111"} and delete.primary_key == ["id"]
    assert products(apply_changes(pairs)) == flink_expected("debezium.final-state.derived.csv")


# --- Apache Paimon Kafka CDC vectors -------------------------------------------------------------

def test_paimon_debezium_files_parse():
    options = {"primary_keys": {"product": ["id"], "test": ["id"]}, "primary_key": ["_id"]}
    parser = get_parser("debezium-json", options)
    files = sorted(PAIMON_DEBEZIUM.rglob("*.txt"))
    assert files
    for path in files:
        for line in json_lines(path):
            result = parser.parse(krec(line))
            assert isinstance(result, list) and len(result) == 1, path


def test_paimon_schema_evolution_types():
    """Paimon's schema-include evolution: age int32, int64, int32 (narrowing), then string."""
    folder = PAIMON_DEBEZIUM / "schema" / "schemaevolution"
    parser = get_parser("debezium-json", {"primary_key": ["id"]})
    ages = []
    for i in range(1, 6):
        changes_ = [parser.parse(krec(line))[0] for line in json_lines(folder / f"debezium-data-{i}.txt")]
        ages.append({c.column_types.get("age") for c in changes_})
    assert ages == [{None}, {"int"}, {"bigint"}, {"int"}, {"string"}]
    c = parser.parse(krec(json_lines(folder / "debezium-data-with-delete.txt")[0]))[0]
    assert c.op == "delete" and c.column_types == {} and c.before["weight"] == "3.14"
    assert c.source_position == (0, 0, 0)  # empty binlog file name


def test_paimon_tombstone_between_files():
    parser = get_parser("debezium-json", {"primary_key": ["id"]})
    folder = PAIMON_DEBEZIUM / "nullvalue"
    records = [krec(json_lines(folder / "debezium-data-1.txt")[0], offset=0), krec(None, offset=1),
               krec(json_lines(folder / "debezium-data-2.txt")[0], offset=2)]
    state = apply_changes(changes(parse_all(parser, records)))
    assert state == {"test.test": {("1",): {"id": "1", "value": "A"}, ("2",): {"id": "2", "value": "B"}}}


# --- control records ------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [None, b""])
def test_tombstone(value):
    result = get_parser("debezium-json").parse(KafkaRecord("t", 0, 0, 0, b'{"id":1}', value))
    assert result == ControlRecord("tombstone", "debezium-json", detail='{"id":1}')


def test_envelope_with_null_payload_is_tombstone():
    assert parse({"schema": None, "payload": None}).kind == "tombstone"


@pytest.mark.parametrize("value, kind", [
    ({"status": "BEGIN", "id": "571:53195829", "ts_ms": 1486500577125, "event_count": None, "data_collections": None},
     "transaction"),
    ({"status": "END", "id": "571:53195829", "ts_ms": 1486500577691, "event_count": 2,
      "data_collections": [{"data_collection": "s1.a", "event_count": 1}]}, "transaction"),
    ({"source": {"connector": "mysql", "db": "inventory"}, "databaseName": "inventory", "schemaName": None,
      "ddl": "ALTER TABLE customers ADD COLUMN middle_name VARCHAR(2000)", "tableChanges": []}, "ddl"),
    ({"ts_ms": 1589362344455}, "heartbeat"),
    ({"op": "m", "ts_ms": 1, "source": {"connector": "postgresql", "db": "d", "table": None},
      "message": {"prefix": "foo", "content": "Ymfy"}}, "metadata"),
])
def test_control_records(value, kind):
    result = parse(value)
    assert isinstance(result, ControlRecord) and result.kind == kind and result.source_format == "debezium-json"
    if kind == "ddl":
        assert result.detail.startswith("ALTER TABLE") and result.source_database == "inventory"


def test_truncate_needs_no_key():
    c = one({"op": "t", "ts_ms": 5, "source": {"connector": "postgresql", "db": "d", "schema": "s", "table": "t",
                                              "lsn": 100, "txId": 9}})
    assert c.op == "truncate" and c.before is None and c.after is None and c.primary_key == []
    assert c.source_position == (100, 100)


# --- errors ---------------------------------------------------------------------------------------

MYSQL_SOURCE = {"connector": "mysql", "db": "inventory", "table": "products", "file": "mysql-bin.000003",
                "pos": 154, "row": 0, "ts_ms": 0}


@pytest.mark.parametrize("value, field, words", [
    ({"op": "x", "after": {"id": 1}, "source": MYSQL_SOURCE}, "op", "unknown operation 'x'"),
    ({"after": {"id": 1}, "source": MYSQL_SOURCE}, "op", "missing operation"),
    ({"op": "c", "after": {"id": 1}, "source": {**MYSQL_SOURCE, "table": None}}, "source.table", "missing table"),
    ({"op": "c", "after": {"id": 1}}, "source.table", "missing table"),
    ('{"op": "c", "after": {"id": 1', "value", "not valid JSON"),
    ("[1, 2]", "value", "not an object"),
    (b"\xff\xfe", "value", "not UTF-8"),
    ({"op": "c", "after": [1], "source": MYSQL_SOURCE}, "after", "not an object"),
    ({"op": "c", "after": None, "source": MYSQL_SOURCE}, "after", "no after image"),
    ({"op": "c", "after": {"id": 1}, "source": {**MYSQL_SOURCE, "file": "binlog"}}, "source.file", "sequence number"),
])
def test_errors_name_format_and_field(value, field, words):
    with pytest.raises(ParseError) as err:
        parse(value, primary_key=["id"])
    assert err.value.format == "debezium-json" and err.value.field == field
    assert str(err.value).startswith(f"debezium-json: field '{field}': ") and words in str(err.value)


def test_bad_value_for_schema_names_column():
    value = {"schema": {"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": [
        {"type": "int32", "field": "id"}]}]},
        "payload": {"op": "c", "after": {"id": "abc"}, "source": MYSQL_SOURCE}}
    with pytest.raises(ParseError) as err:
        parse(value, primary_key=["id"])
    assert err.value.field == "after.id"


# --- positions ------------------------------------------------------------------------------------

def test_mysql_binlog_positions_compare_numerically():
    a = one({"op": "c", "after": {"id": 1}, "source": {**MYSQL_SOURCE, "file": "mysql-bin.000009", "pos": 9999}},
            primary_key=["id"])
    b = one({"op": "c", "after": {"id": 1}, "source": {**MYSQL_SOURCE, "file": "mysql-bin.000010", "pos": 4, "row": 2}},
            primary_key=["id"])
    assert a.source_position == (9, 9999, 0) and b.source_position == (10, 4, 2)
    assert a.source_position < b.source_position


@pytest.mark.parametrize("source, position", [
    ({"lsn": 24023128, "sequence": '["24023119","24023128"]'}, (24023119, 24023128)),
    ({"lsn": 24023128, "sequence": '[null,"24023128"]'}, (0, 24023128)),
    ({"lsn": 24023128}, (24023128, 24023128)),
    ({"lsn": "1/0"}, (4294967296, 4294967296)),
])
def test_postgres_positions(source, position):
    value = {"op": "c", "after": {"id": 1},
             "source": {"connector": "postgresql", "db": "d", "schema": "s", "table": "t", "txId": 5, **source}}
    c = one(value, primary_key=["id"])
    assert c.source_position == position and c.tx_id == "5"


def test_postgres_bad_sequence():
    value = {"op": "c", "after": {"id": 1},
             "source": {"connector": "postgresql", "db": "d", "table": "t", "lsn": 1, "sequence": "[1"}}
    with pytest.raises(ParseError) as err:
        parse(value, primary_key=["id"])
    assert err.value.field == "source.sequence"


def test_sqlserver_oracle_and_transaction_positions():
    sqlserver = {"connector": "sqlserver", "db": "testDB", "schema": "dbo", "table": "customers",
                 "change_lsn": "00000027:00000758:0003", "commit_lsn": "00000027:00000758:0005",
                 "event_serial_no": 1, "ts_ms": 1559729468470}
    c = one({"op": "c", "after": {"id": 1}, "source": sqlserver,
             "transaction": {"id": "tx-1", "total_order": 3, "data_collection_order": 1}}, primary_key=["id"])
    assert c.source_position == (int("00000027000007580005", 16), int("00000027000007580003", 16), 1)
    assert (c.tx_id, c.tx_seq, c.source_ts_ms) == ("tx-1", 3, 1559729468470)
    oracle = {"connector": "oracle", "db": "ORCLPDB1", "schema": "DEBEZIUM", "table": "CUSTOMERS", "scn": "1513734",
              "ts_ms": 1583795621000}
    assert one({"op": "u", "before": {"ID": 1}, "after": {"ID": 1}, "source": oracle},
               primary_key=["ID"]).source_position == (1513734,)
    other = one({"op": "c", "after": {"id": 1}, "ts_ms": 77, "source": {"db": "d", "table": "t"}}, primary_key=["id"])
    assert other.source_position == (77,) and other.source_ts_ms == 77


# --- values and types -----------------------------------------------------------------------------

def typed(fields: list[dict], after: dict, **options) -> ChangeRecord:
    schema = {"type": "struct", "fields": [
        {"type": "struct", "fields": fields, "optional": True, "field": "after"},
        {"type": "string", "field": "op"}]}
    return one({"schema": schema, "payload": {"op": "c", "after": after, "source": MYSQL_SOURCE}},
               primary_key=["id"], **options)


DEC = "org.apache.kafka.connect.data.Decimal"


@pytest.mark.parametrize("encoded, scale, precision, text, ctype", [
    ("MDk=", 2, "10", "123.45", "decimal(10,2)"),
    ("z8c=", 2, "10", "-123.45", "decimal(10,2)"),
    ("AA==", 2, None, "0.00", "decimal(38,2)"),
    ("MDk=", 0, "5", "12345", "decimal(5,0)"),
])
def test_connect_decimal(encoded, scale, precision, text, ctype):
    params = {"scale": str(scale)} | ({"connect.decimal.precision": precision} if precision else {})
    c = typed([{"type": "bytes", "name": DEC, "parameters": params, "field": "d"}], {"id": 1, "d": encoded})
    assert c.after["d"] == text and c.column_types["d"] == ctype


def test_variable_scale_decimal_and_string_kinds():
    fields = [
        {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal", "field": "v",
         "fields": [{"type": "int32", "field": "scale"}, {"type": "bytes", "field": "value"}]},
        {"type": "string", "name": "io.debezium.data.Json", "field": "j"},
        {"type": "string", "name": "io.debezium.data.Uuid", "field": "u"},
        {"type": "string", "name": "io.debezium.data.Enum", "field": "e"},
        {"type": "array", "items": {"type": "string"}, "field": "arr"},
        {"type": "boolean", "field": "b"},
        {"type": "int16", "field": "s"},
        {"type": "float32", "field": "f"},
        {"type": "bytes", "field": "bin"},
    ]
    after = {"v": {"scale": 3, "value": "MDk="}, "j": '{"a": 1}', "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
             "e": "red", "arr": ["x", "y"], "b": True, "s": -3, "f": 1.5, "bin": "AQID"}
    c = typed(fields, after)
    assert c.after == {"v": "12.345", "j": '{"a": 1}', "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "e": "red",
                       "arr": '["x","y"]', "b": "true", "s": "-3", "f": "1.5", "bin": "AQID"}
    assert c.column_types == {"v": "string", "j": "string", "u": "string", "e": "string", "arr": "array<string>",
                              "b": "boolean", "s": "smallint", "f": "float", "bin": "binary"}


def test_temporal_logical_types():
    fields = [
        {"type": "int32", "name": "io.debezium.time.Date", "field": "d"},
        {"type": "int32", "name": "org.apache.kafka.connect.data.Date", "field": "d2"},
        {"type": "int64", "name": "io.debezium.time.Timestamp", "field": "ts"},
        {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp", "field": "ts2"},
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "mts"},
        {"type": "int64", "name": "io.debezium.time.NanoTimestamp", "field": "nts"},
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "field": "zts"},
        {"type": "string", "name": "io.debezium.time.ZonedTimestamp", "field": "zts_z"},
        {"type": "int64", "name": "io.debezium.time.MicroTime", "field": "mt"},
        {"type": "int32", "name": "io.debezium.time.Time", "field": "t"},
        {"type": "int64", "name": "io.debezium.time.NanoTime", "field": "nt"},
        {"type": "string", "name": "io.debezium.time.ZonedTime", "field": "zt"},
        {"type": "int64", "name": "io.debezium.time.MicroTimestamp", "field": "before_epoch"},
    ]
    after = {"d": 18472, "d2": 0, "ts": 1596001099434, "ts2": 1596001099000, "mts": 1596001099434123,
             "nts": 1596001099434123456, "zts": "2020-07-29T07:38:19.434+02:00", "zts_z": "2020-07-29T05:38:19Z",
             "mt": 3723004005, "t": 3723004, "nt": 3723004005006, "zt": "10:15:30Z", "before_epoch": -1}
    c = typed(fields, after)
    assert c.after == {
        "d": "2020-07-29", "d2": "1970-01-01", "ts": "2020-07-29 05:38:19.434000", "ts2": "2020-07-29 05:38:19",
        "mts": "2020-07-29 05:38:19.434123", "nts": "2020-07-29 05:38:19.434123",
        "zts": "2020-07-29 05:38:19.434000", "zts_z": "2020-07-29 05:38:19",
        "mt": "01:02:03.004005", "t": "01:02:03.004000", "nt": "01:02:03.004005", "zt": "10:15:30Z",
        "before_epoch": "1969-12-31 23:59:59.999999"}
    assert c.column_types["d"] == "date" and c.column_types["zts"] == "timestamp" and c.column_types["mt"] == "string"


def test_schemaless_values_and_configured_types():
    value = {"op": "c", "after": {"id": 7, "w": 1.25, "ok": False, "doc": {"b": 1, "a": [1, 2]}, "n": None,
                                  "price": "12.5", "at": "2020-07-29T05:38:19.5Z"},
             "source": MYSQL_SOURCE}
    c = one(value, primary_key=["id"])
    assert c.after == {"id": "7", "w": "1.25", "ok": "false", "doc": '{"a":[1,2],"b":1}', "n": None,
                       "price": "12.5", "at": "2020-07-29T05:38:19.5Z"}
    assert c.column_types == {}
    typed_ = one(value, primary_key=["id"], column_types={
        "w": "double", "inventory.products": {"price": "decimal(10,2)", "at": "timestamp"}, "other.t": {"w": "int"}})
    assert typed_.column_types == {"w": "double", "price": "decimal(10,2)", "at": "timestamp"}
    assert typed_.after["price"] == "12.50" and typed_.after["at"] == "2020-07-29 05:38:19.500000"


def test_toast_placeholder_column_is_absent():
    value = {"op": "u", "before": None,
             "after": {"id": 1, "big": "__debezium_unavailable_value", "arr": ["__debezium_unavailable_value"],
                       "blob": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==", "x": "ok"},
             "source": {"connector": "postgresql", "db": "d", "schema": "s", "table": "t", "lsn": 10}}
    assert one(value, primary_key=["id"]).after == {"id": "1", "x": "ok"}


PLACEHOLDER_BYTES = list(b"__debezium_unavailable_value")


@pytest.mark.parametrize("items,sent", [
    ({"type": "int32"}, PLACEHOLDER_BYTES),                                  # int[]
    ({"type": "int64"}, PLACEHOLDER_BYTES),                                  # bigint[]
    ({"type": "int32", "name": "io.debezium.time.Date"}, PLACEHOLDER_BYTES),  # date[]
    ({"type": "string", "name": "io.debezium.data.Uuid"}, ["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]),  # uuid[]
    ({"type": "bytes"}, ["X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="]),      # bytea[]
    ({"type": "string"}, ["__debezium_unavailable_value"]),                  # text[]
])
def test_toast_placeholder_of_every_array_type_is_absent(items, sent):
    """What Debezium 3.6's PostgreSQL connector sends for an unchanged TOASTed array (seen with the
    real engine, tests/test_real_debezium.py): the placeholder's bytes as numbers for integer and
    date arrays, the UUID named by them for uuid[], their Base64 for bytea[]; each leaves the column
    out of the image. An array merely holding such values among others is data."""
    fields = [{"type": "int32", "optional": False, "field": "id"},
              {"type": "array", "items": items, "optional": True, "field": "arr"}]
    row = {"type": "struct", "optional": True, "fields": fields}
    schema = {"type": "struct", "optional": False, "fields": [dict(row, field="before"), dict(row, field="after"), {
        "type": "struct", "optional": False, "field": "source", "fields": []}, {"type": "string", "field": "op"}]}
    source = {"connector": "postgresql", "db": "d", "schema": "s", "table": "t", "lsn": 10}
    value = {"schema": schema, "payload": {"op": "u", "before": None, "after": {"id": 1, "arr": sent}, "source": source}}
    c = one(value, primary_key=["id"])
    assert c.after == {"id": "1"} and c.column_types["arr"].startswith("array<"), c
    value["payload"]["after"]["arr"] = sent + sent[:1]
    assert "arr" in one(value, primary_key=["id"]).after


# --- primary keys ---------------------------------------------------------------------------------

def test_primary_key_resolution_order():
    value = json.loads(CDL_DEBEZIUM)  # carries unique {"id"}
    assert one(value, key={"count1": 1}).primary_key == ["id"]  # message beats the Kafka key
    assert one(value, primary_key=["count1"]).primary_key == ["count1"]  # option beats the message
    assert one(value, primary_key=["count1"], primary_keys={"public.ct_pg2hudi": ["id", "count1"]}).primary_key == [
        "id", "count1"]  # per table beats topic-wide
    assert one(value, primary_keys={"cdl.public.ct_pg2hudi": ["count1"]}).primary_key == ["count1"]
    del value["payload"]["unique"]
    assert one(value, key={"b": 1, "a": 2}).primary_key == ["b", "a"]  # Kafka key column order
    with pytest.raises(ParseError, match="no primary key"):
        parse(value, key=b"plain-text-key")


def test_delete_keyed_from_partial_before_and_key():
    value = {"op": "d", "before": {"name": "x"}, "after": None, "source": MYSQL_SOURCE}
    c = one(value, key={"id": 5}, primary_key=["id"])
    assert c.before == {"name": "x", "id": "5"}
    with pytest.raises(ParseError) as err:
        parse(value, primary_key=["id"])
    assert err.value.field == "before" and "key column(s) id" in str(err.value)


def test_parser_is_picklable():
    parser = get_parser("debezium-json", {"primary_key": ["id"], "column_types": {"w": "double"}})
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.parse(krec(LINDORM_INSERT)) == parser.parse(krec(LINDORM_INSERT))


# --- reference model ------------------------------------------------------------------------------

def _change(op, before=None, after=None, position=(1,), row=0, table="t"):
    return ChangeRecord("x", "db", None, table, op, before, after, ["id"], source_position=position, row_in_record=row)


def test_reference_model_rules():
    def k(offset, partition=0):
        return KafkaRecord("t", partition, offset, 0, None, b"{}")

    pairs = [
        (k(5), _change("update", {"id": "1"}, {"id": "2", "v": "b"}, position=(3,))),  # key change, applied 3rd
        (k(0), _change("insert", None, {"id": "1", "v": "a", "w": "x"}, position=(1,))),
        (k(1), _change("snapshot", None, {"id": "9"}, position=(2,))),
        (k(2), _change("delete", {"id": "9"}, None, position=(4,))),
        (k(3), _change("insert", None, {"id": "5"}, position=(1,), table="u")),
        (k(4), _change("truncate", position=(2,), table="u")),
        (k(6), _change("insert", None, {"id": "6"}, position=(3,), table="u")),
        (k(7, partition=1), _change("insert", None, {"id": "7", "v": "late"}, position=(5,))),
        (k(7, partition=0), _change("insert", None, {"id": "7", "v": "early"}, position=(5,))),
    ]
    state = apply_changes(pairs)
    assert state == {"db.t": {("2",): {"id": "2", "v": "b", "w": "x"}, ("7",): {"id": "7", "v": "late"}},
                     "db.u": {("6",): {"id": "6"}}}


# --- the real engine's records (tests/samples/debezium-real: Debezium 3.6.3, PostgreSQL 15) -----------


def _real(name: str, with_headers: bool = True):
    """A record of ``samples/debezium-real`` (JSON converter) with its Kafka headers."""
    from cdclake.record import KafkaRecord

    meta = json.loads(sample("debezium-real", "registry.json"))["records"][name]
    headers = [(h, v.encode()) for h, v in meta["headers"].items()] if with_headers else []
    return KafkaRecord(meta["topic"], 0, 0, 0, sample("debezium-real", f"{name}.key.json", binary=True),
                       sample("debezium-real", f"{name}.json", binary=True), headers)


def test_a_primary_key_change_is_one_update_that_keeps_unchanged_toast():
    """Debezium sends ``UPDATE toasty SET id = 2 WHERE id = 1`` as a delete of 1 (header
    ``__debezium.newkey``), a tombstone, and a create of 2 (header ``__debezium.oldkey``) whose
    TOASTed columns are placeholders. The delete is the key change's first half (a control
    record), the create an update from the old key: silver moves the row and keeps the values the
    create leaves out. Without the headers (a pipeline that drops them) they read as before."""
    from cdclake.record import ControlRecord

    p = get_parser("debezium-json")
    delete = p.parse(_real("key-change-delete"))
    assert isinstance(delete, ControlRecord) and delete.kind == "key_change" and delete.source_table == "toasty"
    (create,) = p.parse(_real("key-change-create"))
    assert create.op == "update" and create.before == {"id": "1"} and create.after["id"] == "2"
    assert set(create.after) == {"id", "n", "num", "a_bool", "a_num", "a_tstz"}  # TOASTed columns left out
    assert create.column_types["a_int"] == "array<int>" and create.column_types["a_uuid"] == "array<string>"
    (plain,) = p.parse(_real("key-change-create", with_headers=False))
    assert plain.op == "insert" and plain.before is None
    (gone,) = p.parse(_real("key-change-delete", with_headers=False))
    assert gone.op == "delete" and gone.before["id"] == "1"
    assert p.fast_parse([_real("key-change-create")]) == [None]  # the per-record parser pairs the halves


def test_real_toast_update_and_decimal_digits():
    """The real engine's unchanged-TOAST update leaves every placeholder column out (text, bytea,
    int[], bigint[], date[], uuid[], text[]); a 38-digit decimal(38,10) and a 60-digit numeric
    are read exactly (Python's default decimal context keeps 28 digits)."""
    p = get_parser("debezium-json")
    (upd,) = p.parse(_real("toast-unchanged-update"))
    assert set(upd.after) == {"id", "n", "num", "a_bool", "a_num", "a_tstz"}, upd.after
    (dec,) = p.parse(_real("edges-decimal-digits"))
    assert dec.after["n38"] == "9999999999999999999999999999.9999999999" and dec.column_types["n38"] == "decimal(38,10)"
    assert dec.after["nv"] == "-123456789012345678901234567890.12345678901234567890123456789"
