"""Tests of the ``qlik-json`` and ``qlik-avro`` parsers and of the Qlik Replicate renderer.

Vectors: Qlik Replicate's "Metadata and data messages" (field semantics; its changeMask example
is quoted and checked literally below: the document has no sample messages), "The Replicate
envelope" (``schemas/qlik-replicate/MessageEnvelope.avsc`` of the shared conformance directory,
read in place) and the data-record template ``DataRecord.reconstructed.avsc`` (not official;
read in place). The JSON messages below are written for these tests in the shape of the examples
of Qlik's support article "Qlik Replicate and Kafka target: How to add tables name in Kafka
message" (envelope ``magic``/``type``/``headers``/``messageSchemaId``/``messageSchema``/
``message`` with ``data``, ``beforeData`` and ``headers``).
"""
from __future__ import annotations

import datetime as dt
import io
import json
import pickle
from decimal import Decimal

import pytest
from conftest import CONFORMANCE
from fastavro import parse_schema, schemaless_writer
from helpers import krec, landed, one, parse_error as error

from cdclake.formats import qlik
from cdclake.formats.qlik import ENVELOPE_SCHEMA, QlikAvroParser, QlikJsonParser, mask_ordinals, qlik_type
from cdclake.formats import get_parser
from cdclake.record import ControlRecord, KafkaRecord, ParseError, SchemaEntry, parse_all
from cdclake.sim.render_qlik import avro_bytes, avro_envelope, qlik_avro, qlik_json
from cdclake.sim.model import HOUR_MS
from cdclake.sim.source import SimulatedSource

QLIK_SCHEMAS = CONFORMANCE / "schemas" / "qlik-replicate"
NEVER_SEEN = "was never seen (its metadata message has not been landed): rerun this hour after it lands"

#: Quoted from "Metadata and data messages", changeMask.
SEED_MASK_EXAMPLE = ("If UPDATE mask is 0B hexadecimal, which is 1011 binary – it means that the columns at "
                     "ordinals 1, 2 and 4 were changed.")


# --- builders -------------------------------------------------------------------------------------

def column(ordinal, qtype, pk=0, length=0, precision=0, scale=0):
    return {"ordinal": ordinal, "type": qtype, "length": length, "precision": precision, "scale": scale,
            "primaryKeyPosition": pk}


AVRO_TYPE = {"INT4": "int", "INT8": "long", "STRING": "string", "WSTRING": "string", "REAL4": "float",
             "REAL8": "double", "BOOLEAN": "boolean", "BYTES": "bytes", "BLOB": "bytes", "CLOB": "string",
             "DATE": {"type": "int", "logicalType": "date"},
             "TIME": {"type": "int", "logicalType": "time-millis"},
             "DATETIME": {"type": "long", "logicalType": "timestamp-micros"}}


def data_schema_for(columns: dict) -> dict:
    """A data-record schema: the reconstructed template with ``Data`` filled from ``columns``."""
    template = json.loads((QLIK_SCHEMAS / "DataRecord.reconstructed.avsc").read_text())
    fields = []
    for name, props in columns.items():
        t = props["type"]
        avro = ({"type": "bytes", "logicalType": "decimal", "precision": props["precision"], "scale": props["scale"]}
                if t == "NUMERIC" else AVRO_TYPE[t])
        fields.append({"name": name, "type": ["null", avro]})
    template["fields"][0]["type"]["fields"] = fields
    return template


def metadata(schema_id, table, columns, version=1, schema="SALES") -> dict:
    return {"schemaId": schema_id,
            "lineage": {"server": "rep-01", "task": "sales-to-kafka", "schema": schema, "table": table,
                        "tableVersion": version, "timestamp": "2024-01-05T10:00:00.000"},
            "tableStructure": {"tableColumns": columns},
            "dataSchema": json.dumps(data_schema_for(columns))}


def json_md(md: dict) -> dict:
    return {"magic": "atMSG", "type": "MD", "headers": None, "messageSchemaId": md.get("schemaId"),
            "messageSchema": None, "message": md}


def json_dt(message: dict, schema_id=None) -> dict:
    return {"magic": "atMSG", "type": "DT", "headers": None, "messageSchemaId": schema_id,
            "messageSchema": None, "message": message}


def headers(op, seq="", ts="", tx="", change_mask=None, column_mask=None, counter=None, last=None):
    return {"operation": op, "changeSequence": seq, "timestamp": ts, "streamPosition": "", "transactionId": tx,
            "changeMask": change_mask, "columnMask": column_mask, "transactionEventCounter": counter,
            "transactionLastEvent": last}


def metadata_avro_schema(md: dict) -> dict:
    cols = [{"name": n, "type": {"type": "record", "name": n, "namespace": "c", "fields": [
        {"name": p, "type": "int" if p != "type" else "string"} for p in props]}}
        for n, props in md["tableStructure"]["tableColumns"].items()]
    lineage = [{"name": n, "type": "long" if n == "tableVersion" else "string"} for n in md["lineage"]]
    return {"type": "record", "name": "MetadataMessage", "fields": [
        {"name": "schemaId", "type": "string"},
        {"name": "lineage", "type": {"type": "record", "name": "Lineage", "fields": lineage}},
        {"name": "tableStructure", "type": {"type": "record", "name": "TableStructure", "fields": [
            {"name": "tableColumns", "type": {"type": "record", "name": "TableColumns", "fields": cols}}]}},
        {"name": "dataSchema", "type": "string"}]}


def avro_md(md: dict) -> bytes:
    schema = metadata_avro_schema(md)
    return avro_envelope("MD", avro_bytes(schema, md), None, json.dumps(schema))


def avro_dt(md: dict, message: dict, schema_id=None) -> bytes:
    return avro_envelope("DT", avro_bytes(json.loads(md["dataSchema"]), message),
                         md["schemaId"] if schema_id is None else schema_id)


#: A 4-column table for the document's mask example: ordinals 1 ID, 2 NAME, 3 EMAIL, 4 CITY.
CUSTOMERS = {"ID": column(1, "INT4", pk=1, length=10), "NAME": column(2, "STRING", length=50),
             "EMAIL": column(3, "STRING", length=100), "CITY": column(4, "STRING", length=40)}
CUSTOMERS_MD = metadata("5D41402ABC4B2A76B9719D911017C592", "CUSTOMERS", CUSTOMERS)

#: Ten columns of many types (two mask bytes), composite key (ORDER_ID, LINE_NO).
LINES = {"ORDER_ID": column(1, "INT8", pk=1, length=19), "LINE_NO": column(2, "INT4", pk=2, length=10),
         "STATUS": column(3, "STRING", length=20), "AMOUNT": column(4, "NUMERIC", length=14, precision=12, scale=2),
         "SHIPPED_AT": column(5, "DATETIME", scale=6), "PHOTO": column(6, "BLOB"),
         "DISCOUNT": column(7, "REAL4"), "ACTIVE": column(8, "BOOLEAN"), "DUE": column(9, "DATE"),
         "NOTE": column(10, "CLOB")}
LINES_MD = metadata("7D793037A0760186574B0282F2F435E7", "ORDER_LINES", LINES)


def entries_of(parser, *values) -> list:
    return [e for v in values for e in parser.schema_entries(krec(v))]


def json_parser(*mds, **options):
    """A qlik-json parser given the entries of ``mds`` by another parser instance (another call)."""
    entries = entries_of(QlikJsonParser({}), *[json_md(md) for md in mds])
    assert len(entries) == len(mds)
    return get_parser("qlik-json", options).with_schemas(entries)


def avro_parser(*mds, **options):
    entries = entries_of(QlikAvroParser({}), *[avro_md(md) for md in mds])
    assert len(entries) == len(mds)
    return get_parser("qlik-avro", options).with_schemas(entries)


# --- documents ------------------------------------------------------------------------------------

def test_envelope_schema_is_the_documented_one():
    assert json.loads((QLIK_SCHEMAS / "MessageEnvelope.avsc").read_text()) == ENVELOPE_SCHEMA


def test_seed_change_mask_example_literally():
    assert "0B" in SEED_MASK_EXAMPLE and "ordinals 1, 2 and 4" in SEED_MASK_EXAMPLE
    assert int("0B", 16) == 0b1011
    assert mask_ordinals("0B") == {1, 2, 4}
    assert mask_ordinals("0b") == {1, 2, 4}
    assert mask_ordinals(b"\x0b") == {1, 2, 4}          # Avro carries the mask as bytes
    table = qlik.read_metadata("qlik-json", CUSTOMERS_MD)
    assert table.columns_in("0B") == ["ID", "NAME", "CITY"]


def test_mask_bytes_are_little_endian_and_ten_columns_use_bits_0_to_9():
    # "if there are 10 data columns, they occupy bits 0 to 9 in the bitmask"
    assert mask_ordinals("FF03") == set(range(1, 11))
    assert mask_ordinals(b"\xff\x03") == set(range(1, 11))
    assert mask_ordinals("0001") == {9}                 # byte 1, bit 0 → bit 8 → ordinal 9
    assert mask_ordinals("0002") == {10}
    assert mask_ordinals("1") == {1}                    # odd length: a leading 0
    assert mask_ordinals("") is None and mask_ordinals(None) is None
    with pytest.raises(ValueError):
        mask_ordinals("0G")
    lines = qlik.read_metadata("qlik-json", LINES_MD)
    assert lines.columns_in("0302") == ["ORDER_ID", "LINE_NO", "NOTE"]
    with pytest.raises(ValueError, match="ordinal"):
        lines.columns_in("0004")                        # ordinal 11 does not exist


def test_qlik_types_to_canonical_types():
    cases = {"INT1": "smallint", "INT2": "smallint", "INT4": "int", "INT8": "bigint", "UINT1": "smallint",
             "UINT2": "int", "UINT4": "bigint", "UINT8": "decimal(20,0)", "REAL4": "float", "REAL8": "double",
             "STRING": "string", "WSTRING": "string", "CLOB": "string", "NCLOB": "string", "BYTES": "binary",
             "BLOB": "binary", "DATE": "date", "TIME": "string", "DATETIME": "timestamp_ntz",
             "DATETIME(6)": "timestamp_ntz", "BOOLEAN": "boolean", "GEOMETRY": "string", "": "string"}
    for qtype, expected in cases.items():
        assert qlik_type(qtype) == expected, qtype
    assert qlik_type("NUMERIC", 12, 2) == "decimal(12,2)"
    assert qlik_type("NUMERIC(10,3)") == "decimal(10,3)"
    assert qlik_type("NUMERIC", 0, 0) == "decimal(38,0)"
    assert qlik_type("NUMERIC", 50, 4) == "decimal(38,4)"


# --- metadata -------------------------------------------------------------------------------------

def test_metadata_message_gives_a_schema_entry_and_a_control_record():
    parser = QlikJsonParser({})
    (entry,) = parser.schema_entries(krec(json_md(LINES_MD)))
    assert entry == SchemaEntry("qlik-json", LINES_MD["schemaId"], 1, "SALES", "ORDER_LINES", entry.definition)
    definition = json.loads(entry.definition)
    assert definition["schemaId"] == LINES_MD["schemaId"]
    assert definition["lineage"]["tableVersion"] == 1 and definition["lineage"]["table"] == "ORDER_LINES"
    assert definition["tableStructure"]["tableColumns"]["AMOUNT"] == LINES["AMOUNT"]
    assert json.loads(definition["dataSchema"]) == json.loads(LINES_MD["dataSchema"])
    result = parser.parse(krec(json_md(LINES_MD)))
    assert isinstance(result, ControlRecord) and result.kind == "metadata"
    assert (result.source_schema, result.source_table) == ("SALES", "ORDER_LINES")
    assert parser.schema_entries(krec(json_dt({"data": {}}, "X"))) == []
    assert parser.schema_entries(krec("{not json")) == []


def test_avro_metadata_message_gives_the_same_entry():
    (json_entry,) = QlikJsonParser({}).schema_entries(krec(json_md(LINES_MD)))
    (avro_entry,) = QlikAvroParser({}).schema_entries(krec(avro_md(LINES_MD)))
    assert avro_entry.source_format == "qlik-avro"
    assert (avro_entry.schema_id, avro_entry.table_version, avro_entry.source_schema, avro_entry.source_table) == \
        (json_entry.schema_id, 1, "SALES", "ORDER_LINES")
    assert json.loads(avro_entry.definition) == json.loads(json_entry.definition)
    result = QlikAvroParser({}).parse(krec(avro_md(LINES_MD)))
    assert isinstance(result, ControlRecord) and result.kind == "metadata" and result.source_table == "ORDER_LINES"


def test_bad_metadata_is_a_parse_error_and_no_entry():
    bad = json.loads(json.dumps(LINES_MD))
    del bad["schemaId"]
    assert QlikJsonParser({}).schema_entries(krec(json_md(bad))) == []
    assert error(QlikJsonParser({}), json_md(bad)).field == "schemaId"
    bad = json.loads(json.dumps(LINES_MD))
    bad["tableStructure"]["tableColumns"]["NOTE"]["ordinal"] = 1
    err = error(QlikJsonParser({}), json_md(bad))
    assert err.field == "tableStructure.tableColumns.NOTE.ordinal" and "ORDER_ID" in str(err)
    bad = json.loads(json.dumps(LINES_MD))
    del bad["lineage"]["table"]
    assert error(QlikJsonParser({}), json_md(bad)).field == "lineage.table"


# --- JSON data messages ---------------------------------------------------------------------------

def lines_row(**changes):
    row = {"ORDER_ID": 9000000001, "LINE_NO": 1, "STATUS": "OPEN", "AMOUNT": "1234.50",
           "SHIPPED_AT": "2024-01-05 10:15:30.123456", "PHOTO": "89504E47", "DISCOUNT": 0.1,
           "ACTIVE": True, "DUE": "2024-02-01", "NOTE": "first line"}
    row.update(changes)
    return row


LINES_TEXT = {"ORDER_ID": "9000000001", "LINE_NO": "1", "STATUS": "OPEN", "AMOUNT": "1234.50",
              "SHIPPED_AT": "2024-01-05 10:15:30.123456", "PHOTO": "iVBORw==", "DISCOUNT": "0.1",
              "ACTIVE": "true", "DUE": "2024-02-01", "NOTE": "first line"}
LINES_TYPES = {"ORDER_ID": "bigint", "LINE_NO": "int", "STATUS": "string", "AMOUNT": "decimal(12,2)",
               "SHIPPED_AT": "timestamp_ntz", "PHOTO": "binary", "DISCOUNT": "float", "ACTIVE": "boolean",
               "DUE": "date", "NOTE": "string"}
SEQ = "20240105101530000000000000000001234"   # 35 digits: more than 64 bits


def test_json_data_messages_decode_with_metadata_from_another_call():
    parser = json_parser(LINES_MD)
    sid = LINES_MD["schemaId"]
    ins = one(parser, json_dt({"data": lines_row(), "beforeData": None, "headers": headers(
        "INSERT", SEQ, "2024-01-05T10:15:30.250", "00000000000000000000000000060008", "FF03", "FF03", 1, False)}, sid))
    assert (ins.op, ins.source_database, ins.source_schema, ins.source_table) == \
        ("insert", None, "SALES", "ORDER_LINES")
    assert ins.after == LINES_TEXT and ins.before is None
    assert ins.primary_key == ["ORDER_ID", "LINE_NO"]
    assert ins.column_types == LINES_TYPES
    assert ins.source_position == (int(SEQ),) and int(SEQ) > 2**64
    commit = dt.datetime(2024, 1, 5, 10, 15, 30, 250000, tzinfo=dt.timezone.utc)
    assert ins.source_ts_ms == int(commit.timestamp() * 1000)
    assert (ins.tx_id, ins.tx_seq) == ("00000000000000000000000000060008", 1)

    upd = one(parser, json_dt({"data": lines_row(STATUS="SHIPPED", NOTE=None),
                               "beforeData": lines_row(), "headers": headers(
        "UPDATE", str(int(SEQ) + 1), "2024-01-05T10:16:00.000", "00000000000000000000000000060009", "0402", "FF03",
        1, True)}, sid))
    assert upd.op == "update" and upd.after == {**LINES_TEXT, "STATUS": "SHIPPED", "NOTE": None}
    assert upd.before == LINES_TEXT and upd.source_position == (int(SEQ) + 1,)

    dele = one(parser, json_dt({"data": lines_row(STATUS="SHIPPED"), "beforeData": None, "headers": headers(
        "DELETE", str(int(SEQ) + 2), "2024-01-05T10:17:00.000", "0000000000000000000000000006000A", "03", "FF03",
        1, True)}, sid))
    assert dele.op == "delete" and dele.after is None
    assert dele.before == {**LINES_TEXT, "STATUS": "SHIPPED"}

    # DELETE with the row in beforeData and data null (as some consumers document it)
    dele2 = one(parser, json_dt({"data": None, "beforeData": lines_row(), "headers": headers(
        "DELETE", str(int(SEQ) + 3), "2024-01-05T10:17:00.000", "T", "03", "FF03", 1, True)}, sid))
    assert dele2.before == LINES_TEXT


def test_refresh_is_a_snapshot_sorting_before_every_change():
    parser = json_parser(LINES_MD)
    ref = one(parser, json_dt({"data": lines_row(), "beforeData": None, "headers": headers("REFRESH")},
                              LINES_MD["schemaId"]))
    assert ref.op == "snapshot" and ref.after == LINES_TEXT and ref.before is None
    assert ref.source_position == (0,) < (1,)
    assert (ref.source_ts_ms, ref.tx_id, ref.tx_seq) == (None, None, None)


def test_column_mask_leaves_unreplicated_columns_absent_and_the_seed_example():
    parser = json_parser(CUSTOMERS_MD)
    row = {"ID": 7, "NAME": "Ada", "EMAIL": None, "CITY": "Oslo"}
    upd = one(parser, json_dt({"data": row, "beforeData": {"ID": 7, "NAME": "Ad", "EMAIL": None, "CITY": "Rome"},
                               "headers": headers("UPDATE", "5", "2024-01-05T10:00:00", "T1", "0B", "0B", 1, True)},
                              CUSTOMERS_MD["schemaId"]))
    # columnMask 0B: ordinals 1, 2, 4 present → EMAIL (ordinal 3) absent, not null
    assert upd.after == {"ID": "7", "NAME": "Ada", "CITY": "Oslo"}
    assert upd.before == {"ID": "7", "NAME": "Ad", "CITY": "Rome"}
    # a null whose bit is set is a real null
    upd = one(parser, json_dt({"data": row, "beforeData": None,
                               "headers": headers("UPDATE", "6", "", "T2", "04", "0F", 1, True)},
                              CUSTOMERS_MD["schemaId"]))
    assert upd.after == {"ID": "7", "NAME": "Ada", "EMAIL": None, "CITY": "Oslo"} and upd.before is None
    # a bit beyond the table's ordinals
    err = error(parser, json_dt({"data": row, "headers": headers("UPDATE", "7", "", "T", "01", "1F")},
                                CUSTOMERS_MD["schemaId"]))
    assert err.field == "headers.columnMask" and "ordinal(s) [5]" in str(err)
    err = error(parser, json_dt({"data": row, "headers": headers("UPDATE", "7", "", "T", "XY", "0F")},
                                CUSTOMERS_MD["schemaId"]))
    assert err.field == "headers.changeMask"


def test_delete_whose_column_mask_leaves_out_the_key_is_an_error():
    parser = json_parser(CUSTOMERS_MD)
    err = error(parser, json_dt({"data": {"ID": 7, "NAME": "Ada"},
                                 "headers": headers("DELETE", "9", "", "T", "01", "02")}, CUSTOMERS_MD["schemaId"]))
    assert err.field == "data" and "ID" in str(err)


def test_json_lookup_by_table_names_version_and_option():
    v2_columns = dict(CUSTOMERS, PHONE=column(5, "STRING", length=20))
    v1, v2 = CUSTOMERS_MD, metadata("C4CA4238A0B923820DCC509A6F75849B", "CUSTOMERS", v2_columns, version=2)
    parser = json_parser(v1, v2)
    row = {"ID": 1, "NAME": "Ada", "EMAIL": None, "CITY": "Oslo", "PHONE": "555"}
    msg = {"data": row, "beforeData": None, "headers": headers("INSERT", "10", "", "T", "1F", "1F", 1, True)}
    # names without a version: the highest version seen
    ch = one(parser, json_dt({**msg, "schema": "SALES", "table": "CUSTOMERS"}))
    assert ch.after["PHONE"] == "555" and ch.column_types["PHONE"] == "string"
    # with tableVersion 1: PHONE is not in that version (kept as an untyped column), mask 0F valid
    ch = one(parser, json_dt({**msg, "schema": "SALES", "table": "CUSTOMERS", "tableVersion": 1,
                              "headers": headers("INSERT", "10", "", "T", "0F", "0F", 1, True)}))
    assert ch.source_table == "CUSTOMERS" and ch.after["ID"] == "1"
    # externalSchemaId header
    ch = one(parser, json_dt({**msg, "headers": {**msg["headers"], "externalSchemaId": v2["schemaId"]}}))
    assert ch.after["PHONE"] == "555"
    # the table option for topics that carry one table
    ch = one(json_parser(v1, v2, table="SALES.CUSTOMERS"), json_dt(msg))
    assert ch.source_schema == "SALES"
    # unknown names and versions
    err = error(parser, json_dt({**msg, "schema": "SALES", "table": "CUSTOMERS", "tableVersion": 3}))
    assert str(err) == f"qlik-json: field 'messageSchemaId': schema SALES.CUSTOMERS tableVersion 3 {NEVER_SEEN}"
    err = error(parser, json_dt({**msg, "table": "NOPE"}))
    assert str(err) == f"qlik-json: field 'messageSchemaId': schema NOPE {NEVER_SEEN}"
    err = error(parser, json_dt(msg))
    assert err.field == "messageSchemaId" and "names no schema" in str(err)


def test_never_seen_schema_id_json_and_avro():
    sid = "0123456789ABCDEF0123456789ABCDEF"
    msg = {"data": {"ID": 1}, "beforeData": None, "headers": headers("INSERT", "1", "", "T", "01", "01")}
    err = error(get_parser("qlik-json"), json_dt(msg, sid))
    assert str(err) == f"qlik-json: field 'messageSchemaId': schema {sid} {NEVER_SEEN}"
    value = avro_dt(CUSTOMERS_MD, {"data": {"ID": 1, "NAME": None, "EMAIL": None, "CITY": None}, "beforeData": None,
                                   "headers": headers("INSERT", "1", "", "T", b"\x01", b"\x01")}, sid)
    err = error(get_parser("qlik-avro"), value)
    assert str(err) == f"qlik-avro: field 'messageSchemaId': schema {sid} {NEVER_SEEN}"
    # the same message decodes once its metadata has landed (a rerun with the stored entries)
    rerun = avro_parser(metadata(sid, "CUSTOMERS", CUSTOMERS))
    assert one(rerun, value).after == {"ID": "1"}      # columnMask 01: only ordinal 1 was replicated


def test_json_bad_input():
    parser = json_parser(LINES_MD)
    sid = LINES_MD["schemaId"]

    def msg(**h):
        return json_dt({"data": lines_row(), "beforeData": None,
                        "headers": {**headers("INSERT", SEQ, "2024-01-05T10:15:30", "T", None, None), **h}}, sid)

    cases = [
        ('{"magic": "atMSG", "type": "DT", "mess', "value"),
        ("[1, 2]", "value"),
        ({**msg(), "magic": "atMSX"}, "magic"),
        ({k: v for k, v in msg().items() if k != "magic"}, "magic"),
        ({**msg(), "type": "XX"}, "type"),
        ({**msg(), "message": 5}, "message"),
        (json_dt({"data": lines_row()}, sid), "headers"),
        (msg(operation=None), "headers.operation"),
        (msg(operation="MERGE"), "headers.operation"),
        (msg(changeSequence=""), "headers.changeSequence"),
        (msg(changeSequence="12a"), "headers.changeSequence"),
        (msg(changeSequence="1" * 39), "headers.changeSequence"),
        (msg(timestamp="yesterday"), "headers.timestamp"),
        (msg(transactionEventCounter="first"), "headers.transactionEventCounter"),
        (json_dt({"headers": headers("INSERT", "1")}, sid), "data"),
        (json_dt({"data": [1], "headers": headers("INSERT", "1")}, sid), "data"),
        (json_dt({"data": lines_row(LINE_NO="one"), "headers": headers("INSERT", "1")}, sid), "data.LINE_NO"),
        (json_dt({"data": lines_row(AMOUNT="12,5"), "headers": headers("INSERT", "1")}, sid), "data.AMOUNT"),
        (json_dt({"data": lines_row(PHOTO="XYZ"), "headers": headers("INSERT", "1")}, sid), "data.PHOTO"),
        (json_dt({"data": lines_row(), "beforeData": "x", "headers": headers("UPDATE", "1")}, sid), "beforeData"),
        (json_dt({"data": None, "beforeData": None, "headers": headers("DELETE", "1")}, sid), "data"),
    ]
    for value, field_name in cases:
        err = error(parser, value)
        assert err.format == "qlik-json" and err.field == field_name, (value, str(err))
        assert str(err).startswith(f"qlik-json: field '{field_name}': ")
    assert parser.parse(krec(None)) == ControlRecord("tombstone", "qlik-json")


def test_primary_key_from_metadata_or_configuration():
    no_key = metadata("ECCBC87E4B5CE2FE28308FD9F2A7BAF3", "AUDIT", {"A": column(1, "INT4"), "B": column(2, "STRING")})
    msg = json_dt({"data": {"A": 1, "B": "x"}, "headers": headers("INSERT", "1", "", "T", "03", "03")},
                  no_key["schemaId"])
    assert error(json_parser(no_key), msg).field == "primary_key"
    assert one(json_parser(no_key, primary_keys={"SALES.AUDIT": ["A", "B"]}), msg).primary_key == ["A", "B"]
    # key columns ordered by primaryKeyPosition, not by ordinal
    swapped = json.loads(json.dumps(LINES_MD))
    swapped["tableStructure"]["tableColumns"]["ORDER_ID"]["primaryKeyPosition"] = 2
    swapped["tableStructure"]["tableColumns"]["LINE_NO"]["primaryKeyPosition"] = 1
    ch = one(json_parser(swapped), json_dt({"data": lines_row(), "headers": headers("INSERT", "1")},
                                           swapped["schemaId"]))
    assert ch.primary_key == ["LINE_NO", "ORDER_ID"]


def test_read_transaction_last_event():
    parser = json_parser(LINES_MD)
    sid = LINES_MD["schemaId"]
    mark = parser.read_transaction(krec(json_dt({"data": lines_row(), "headers": headers(
        "INSERT", "1", "", "00000000000000000000000000060008", counter=3, last=True)}, sid)))
    assert mark == qlik.TransactionMark("00000000000000000000000000060008", 3, True)
    mark = parser.read_transaction(krec(json_dt({"data": lines_row(), "headers": headers(
        "UPDATE", "2", "", "TX", counter=1, last="False")}, sid)))
    assert mark.last_event is False
    assert parser.read_transaction(krec(json_dt({"data": lines_row(), "headers": headers("REFRESH")}, sid))) is None
    assert parser.read_transaction(krec(json_md(LINES_MD))) is None
    assert qlik.transaction_last_event({"transactionLastEvent": True}) is True
    assert qlik.transaction_last_event({}) is None


def test_parser_pickles_with_its_schemas():
    parser = json_parser(LINES_MD)
    value = json_dt({"data": lines_row(), "headers": headers("INSERT", "1")}, LINES_MD["schemaId"])
    before = one(parser, value)
    clone = pickle.loads(pickle.dumps(parser))
    assert one(clone, value) == before
    aparser = avro_parser(LINES_MD)
    pickle.loads(pickle.dumps(aparser))


def test_unreadable_stored_definition_is_a_parse_error():
    entry = SchemaEntry("qlik-json", "ABC", 1, "SALES", "T", "{broken")
    err = error(get_parser("qlik-json").with_schemas([entry]), json_dt({"data": {}, "headers": {}}, "ABC"))
    assert err.field == "messageSchemaId" and "unreadable" in str(err)


# --- Avro ------------------------------------------------------------------------------------------

def avro_lines_row(**changes):
    row = {"ORDER_ID": 9000000001, "LINE_NO": 1, "STATUS": "OPEN", "AMOUNT": Decimal("1234.50"),
           "SHIPPED_AT": dt.datetime(2024, 1, 5, 10, 15, 30, 123456, tzinfo=dt.timezone.utc),
           "PHOTO": b"\x89PNG", "DISCOUNT": 0.1, "ACTIVE": True, "DUE": dt.date(2024, 2, 1), "NOTE": "first line"}
    row.update(changes)
    return row


def test_avro_data_messages_with_logical_types():
    parser = avro_parser(LINES_MD)
    value = avro_dt(LINES_MD, {"data": avro_lines_row(), "beforeData": None, "headers": headers(
        "INSERT", SEQ, "2024-01-05T10:15:30.250", "00000000000000000000000000060008", b"\xff\x03", b"\xff\x03",
        1, True)})
    ch = one(parser, value)
    assert ch.source_format == "qlik-avro" and ch.op == "insert"
    assert ch.after == LINES_TEXT                      # REAL4 0.1 read back as "0.1", not 0.10000000149011612
    assert ch.column_types == LINES_TYPES
    assert ch.source_position == (int(SEQ),) and ch.tx_seq == 1
    # UPDATE with a partial column mask: bits of ordinals 1, 2, 3 and 10 only
    value = avro_dt(LINES_MD, {"data": avro_lines_row(STATUS="SHIPPED", NOTE=None, AMOUNT=None),
                               "beforeData": avro_lines_row(AMOUNT=None), "headers": headers(
        "UPDATE", str(int(SEQ) + 1), "2024-01-05T10:16:00", "T", b"\x04\x02", b"\x07\x02", 2, True)})
    ch = one(parser, value)
    assert ch.after == {"ORDER_ID": "9000000001", "LINE_NO": "1", "STATUS": "SHIPPED", "NOTE": None}
    assert ch.before == {"ORDER_ID": "9000000001", "LINE_NO": "1", "STATUS": "OPEN", "NOTE": "first line"}
    assert parser.read_transaction(krec(value)) == qlik.TransactionMark("T", 2, True)


def test_avro_time_and_embedded_message_schema():
    md = metadata("A87FF679A2F3E71D9181A67B7542122C", "SHIFTS",
                  {"ID": column(1, "INT4", pk=1), "STARTS": column(2, "TIME"), "RATE": column(3, "REAL8")})
    parser = avro_parser(md)
    record = {"data": {"ID": 1, "STARTS": dt.time(8, 30, 0, 250000), "RATE": 12.5}, "beforeData": None,
              "headers": headers("INSERT", "42", "2024-01-05T10:00:00", "T", b"\x07", b"\x07", 1, True)}
    ch = one(parser, avro_dt(md, record))
    assert ch.after == {"ID": "1", "STARTS": "08:30:00.250000", "RATE": "12.5"}
    # an envelope that embeds the data schema instead of naming its id
    embedded = avro_envelope("DT", avro_bytes(json.loads(md["dataSchema"]), record), None, md["dataSchema"])
    assert one(parser, embedded).after == ch.after
    other = json.loads(md["dataSchema"])
    other["name"] = "Other"
    err = error(parser, avro_envelope("DT", avro_bytes(other, record), None, json.dumps(other)))
    assert err.field == "messageSchemaId" and NEVER_SEEN in str(err)


def test_avro_bad_input():
    parser = avro_parser(LINES_MD)
    good = avro_dt(LINES_MD, {"data": avro_lines_row(), "beforeData": None, "headers": headers("INSERT", "1")})
    cases = [
        (good[:3], "magic"),
        (b"atMSX" + good[5:], "magic"),
        (b"\x00\x00\x00\x00\x01" + good[5:], "magic"),
        (good[: len(good) // 2], "value"),             # truncated envelope (message bytes cut)
        (good[:7], "value"),
        (good + b"\x00", "value"),                     # trailing bytes
        (avro_envelope("XX", b""), "type"),
        (avro_envelope("DT", b"\x02\x04", LINES_MD["schemaId"]), "message"),   # truncated data record
        (avro_envelope("DT", b"", None), "messageSchemaId"),
        (avro_envelope("MD", b"\x00", None, None), "messageSchema"),
        (avro_envelope("MD", b"\x00", None, "{not a schema"), "messageSchema"),
        (avro_envelope("DT", avro_bytes(json.loads(LINES_MD["dataSchema"]),
                                        {"data": avro_lines_row(), "beforeData": None,
                                         "headers": headers("INSERT", "")}),
                       LINES_MD["schemaId"]), "headers.changeSequence"),
    ]
    for value, field_name in cases:
        err = error(parser, value)
        assert err.format == "qlik-avro" and err.field == field_name, (value[:20], str(err))
    # a truncated inner message of a data message: the envelope is intact, the record is cut
    data = avro_bytes(json.loads(LINES_MD["dataSchema"]),
                      {"data": avro_lines_row(), "beforeData": None, "headers": headers("INSERT", "1")})
    err = error(parser, avro_envelope("DT", data[:-4], LINES_MD["schemaId"]))
    assert err.field == "message"
    assert parser.parse(krec(None)).kind == "tombstone"
    assert parser.schema_entries(krec(good[:9])) == []


# --- table version change -------------------------------------------------------------------------

def test_table_version_change_uses_the_new_schema_from_then_on():
    v2_columns = dict(CUSTOMERS, PHONE=column(5, "STRING", length=20))
    v1, v2 = CUSTOMERS_MD, metadata("C4CA4238A0B923820DCC509A6F75849B", "CUSTOMERS", v2_columns, version=2)
    for parser, enc in ((avro_parser(v1, v2), "avro"), (json_parser(v1, v2), "json")):
        old = {"data": {"ID": 1, "NAME": "Ada", "EMAIL": None, "CITY": "Oslo"}, "beforeData": None,
               "headers": headers("INSERT", "100", "", "T", b"\x0f", b"\x0f")}
        new = {"data": {"ID": 1, "NAME": "Ada", "EMAIL": None, "CITY": "Oslo", "PHONE": "555-0100"},
               "beforeData": None, "headers": headers("UPDATE", "200", "", "T", b"\x10", b"\x1f")}
        if enc == "avro":
            a, b = avro_dt(v1, old), avro_dt(v2, new)
        else:
            hexed = lambda m: {**m, "headers": {**m["headers"], "changeMask": m["headers"]["changeMask"].hex(),  # noqa: E731
                                                "columnMask": m["headers"]["columnMask"].hex()}}
            a, b = json_dt(hexed(old), v1["schemaId"]), json_dt(hexed(new), v2["schemaId"])
        first, second = one(parser, a), one(parser, b)
        assert "PHONE" not in first.after and "PHONE" not in first.column_types
        assert second.after["PHONE"] == "555-0100" and second.column_types["PHONE"] == "string"
        assert first.source_position < second.source_position


# --- rendered history (round trip: test_round_trip.py) ---------------------------------------------

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def test_data_before_its_metadata_is_quarantined_then_decodes_on_rerun():
    src = SimulatedSource(seed=3, start=START, hours=1)
    recs = landed(qlik_avro(src.run(), src.tables))
    data = [r for r in recs if QlikAvroParser({}).schema_entries(r) == []]
    results = list(parse_all(get_parser("qlik-avro"), data))
    assert all(isinstance(res, ParseError) and NEVER_SEEN in str(res) for _, res in results)
    entries = [e for r in recs for e in QlikAvroParser({}).schema_entries(r)]
    rerun = list(parse_all(get_parser("qlik-avro").with_schemas(entries), data))
    assert not [res for _, res in rerun if isinstance(res, ParseError)]


@pytest.mark.parametrize("render,fmt", [(qlik_json, "qlik-json"), (qlik_avro, "qlik-avro")])
def test_rendered_stream_shape(render, fmt):
    src = SimulatedSource(seed=11, start=START, hours=2)
    history = src.run()
    messages = render(history, src.tables, partitions=2)
    recs = landed(messages)
    scanner = get_parser(fmt)
    md = [i for i, r in enumerate(recs) if scanner.schema_entries(r)]
    assert md[:3] == [0, 1, 2] and len(md) == 4                   # one per table first, then the version change
    assert all(b.timestamp_ms >= a.timestamp_ms for a, b in zip(messages, messages[1:]))
    assert all(src.start_ms <= m.timestamp_ms < src.end_ms for m in messages)
    assert sum(m.rows for m in messages) == sum(len(tx.changes) for tx in history)
    entries = [e for r in recs for e in scanner.schema_entries(r)]
    parser = get_parser(fmt).with_schemas(entries)
    parsed = [(r, parser.parse(r)) for r in recs]
    cdc = [c[0] for _, c in parsed if isinstance(c, list) and c[0].op != "snapshot"]
    snapshots = [c[0] for _, c in parsed if isinstance(c, list) and c[0].op == "snapshot"]
    assert len(snapshots) == sum(len(tx.changes) for tx in history if tx.snapshot)
    assert all(s.source_position == (0,) for s in snapshots)
    positions = [c.source_position[0] for c in cdc]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert all(len(str(p)) == 35 for p in positions)
    # orders data after the version change name the new schema id
    v2 = next(e for e in entries if e.table_version == 2)
    after_change = [r for r in recs[md[3] + 1:] if isinstance(parser.parse(r), list)
                    and parser.parse(r)[0].source_table == v2.source_table]
    assert after_change and all(_schema_id(r, fmt) == v2.schema_id for r in after_change)
    # exactly one last event per transaction
    marks = [parser.read_transaction(r) for r in recs]
    marks = [m for m in marks if m is not None]
    streamed = [tx for tx in history if not tx.snapshot]
    assert sum(1 for m in marks if m.last_event) == len(streamed)
    assert len({m.tx_id for m in marks}) == len(streamed)


def _schema_id(record: KafkaRecord, fmt: str) -> str:
    if fmt == "qlik-json":
        return json.loads(record.value)["messageSchemaId"]
    from fastavro import schemaless_reader

    return schemaless_reader(io.BytesIO(record.value), parse_schema(ENVELOPE_SCHEMA), None)["messageSchemaId"]


def test_json_rendering_follows_the_documented_value_forms():
    src = SimulatedSource(seed=11, start=START, hours=1)
    messages = qlik_json(src.run(), src.tables)
    first_md = json.loads(messages[0].value)
    assert first_md["magic"] == "atMSG" and first_md["type"] == "MD"
    assert first_md["message"]["tableStructure"]["tableColumns"]["id"]["primaryKeyPosition"] == 1
    assert messages[0].key == first_md["messageSchemaId"].encode()
    refresh = json.loads(messages[3].value)["message"]
    assert refresh["headers"]["operation"] == "REFRESH" and refresh["headers"]["changeSequence"] == ""
    cdc = next(json.loads(m.value)["message"] for m in messages
               if b'"UPDATE"' in (m.value or b""))
    assert set(cdc) == {"data", "beforeData", "headers"}
    assert int(cdc["headers"]["columnMask"], 16) > 0 and isinstance(cdc["headers"]["transactionLastEvent"], bool)


def test_avro_envelope_written_with_schemaless_writer_reads_back():
    md_schema = metadata_avro_schema(CUSTOMERS_MD)
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(ENVELOPE_SCHEMA), {
        "magic": b"atMSG", "type": "MD", "headers": {"a": "b"}, "messageSchemaId": None,
        "messageSchema": json.dumps(md_schema), "message": avro_bytes(md_schema, CUSTOMERS_MD)})
    (entry,) = QlikAvroParser({}).schema_entries(krec(buf.getvalue()))
    assert entry.source_table == "CUSTOMERS" and entry.schema_id == CUSTOMERS_MD["schemaId"]


def test_data_in_a_later_hour_than_its_metadata():
    """Hour 2's data messages decode with a parser given only the entries stored from hour 1
    (another call); only data naming a schema whose metadata lands in hour 2 needs that hour."""
    src = SimulatedSource(seed=11, start=START, hours=2)
    recs = landed(qlik_json(src.run(), src.tables))
    boundary = src.start_ms + HOUR_MS
    hour1 = [r for r in recs if r.timestamp_ms < boundary]
    hour2 = [r for r in recs if r.timestamp_ms >= boundary]
    stored = [e for r in hour1 for e in QlikJsonParser({}).schema_entries(r)]
    late_ids = {e.schema_id for r in hour2 for e in QlikJsonParser({}).schema_entries(r)}
    parser = get_parser("qlik-json").with_schemas(stored)
    hour2_data = [r for r in hour2 if not QlikJsonParser({}).schema_entries(r)]
    decoded = 0
    for r in hour2_data:
        sid = json.loads(r.value)["messageSchemaId"]
        if sid in late_ids:
            assert NEVER_SEEN in str(error(parser, r.value))
        else:
            assert isinstance(parser.parse(r), list)
            decoded += 1
    assert decoded > 100
