"""Tests of the ``dts-avro`` parser and the DTS Avro renderer of the simulated shop.

Vectors: "Alibaba Cloud DTS: Data formats of a Kafka cluster" (section DTS Avro) refers to the
schema of Alibaba Cloud's ``aliyun/aliyun-dts-subscribe-demo`` (Apache-2.0), read in place from
the shared conformance directory (``schemas/alibaba-dts/``) to check the schema embedded in
:mod:`cdclake.formats.dts`. The document has no sample records; the records below follow the
layout DTS gives a MySQL source (``sourcePosition`` ``offset@fileindex``, ``sourceTxid`` ``"0"``,
``pk_uk_info`` tag, MySQL type codes in ``fields``, Integer precision = byte width) and are
written with ``fastavro.schemaless_writer``, as the demo reads them with
``fastavro.schemaless_reader``.
"""
from __future__ import annotations

import datetime as dt
import functools
import io
import json
import pickle
from collections import Counter
from decimal import Decimal

import fastavro
import helpers
import pytest
from conftest import CONFORMANCE
from fastavro.schema import fingerprint, load_schema, parse_schema, to_parsing_canonical_form
from helpers import landed

from cdclake.formats import dts
from cdclake.formats import get_parser
from cdclake.record import ControlRecord, ParseError, parse_all
from cdclake.sim.render_dts import dts_avro, encode, type_code
from cdclake.sim.model import Column, RowChange, Table, Transaction
from cdclake.sim.source import SimulatedSource

FORMAT = "dts-avro"
SCHEMAS = CONFORMANCE / "schemas" / "alibaba-dts"
N = "com.alibaba.dts.formats.avro"
START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def I(value, precision=8):  # noqa: E743
    return (f"{N}.Integer", {"precision": precision, "value": str(value)})


def C(text, charset="utf8mb4"):
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    return (f"{N}.Character", {"charset": charset, "value": data})


def record(**over) -> dict:
    """A MySQL INSERT into ``mydb.t1(a bigint primary key, b varchar(100))``; ``over`` replaces fields."""
    base = {
        "version": 0, "id": 1700382, "sourceTimestamp": 1696984408, "sourcePosition": "72469@78",
        "safeSourcePosition": "72347@78", "sourceTxid": "0",
        "source": {"sourceType": "MySQL", "version": "8.0.28"}, "operation": "INSERT", "objectName": "mydb.t1",
        "processTimestamps": None,
        "tags": {"metaVersion": "3109599372", "pk_uk_info": '{"PRIMARY":["a"]}',
                 "readerThroughoutTime": "1696984408050", "server_id": "26957161", "thread_id": "163931"},
        "fields": [{"name": "a", "dataTypeNumber": 8}, {"name": "b", "dataTypeNumber": 253}],
        "beforeImages": None, "afterImages": [I(123456789), C("test insert statement.")],
        "bornTimestamp": 1696984408,
    }
    base.update(over)
    return base


#: Records of topic ``dts``: a dict value is written as a DTS Avro record, a dict key as JSON.
krec = functools.partial(helpers.krec, topic="dts", encode_value=encode)
parse = functools.partial(helpers.parse, FORMAT, make_record=krec)
one = functools.partial(helpers.one, FORMAT, make_record=krec)


def errors(value, key=None, **options) -> ParseError:
    """The :class:`ParseError` parsing a record raises; its message starts with the format name."""
    error = helpers.parse_error(FORMAT, value, key, make_record=krec, **options)
    assert str(error).startswith(f"{FORMAT}: ")
    return error


# --- the embedded schema ------------------------------------------------------------------------


def test_embedded_schema_files_are_the_published_ones():
    files = {p.name[: -len(".avsc")]: json.loads(p.read_text(encoding="utf-8")) for p in SCHEMAS.glob("*.avsc")}
    assert len(files) == 14 and set(files) == set(dts.AVSC)
    for name, schema in files.items():
        assert dts.AVSC[name] == schema, name


def test_embedded_schema_has_the_canonical_form_of_the_published_one():
    published = load_schema(str(SCHEMAS / f"{N}.Record.avsc"))
    embedded = parse_schema(dts.RECORD_SCHEMA)
    assert to_parsing_canonical_form(embedded) == to_parsing_canonical_form(published)
    assert fingerprint(to_parsing_canonical_form(embedded), "CRC-64-AVRO") == \
        fingerprint(to_parsing_canonical_form(published), "CRC-64-AVRO")
    # the self-contained schema is plain JSON: other Avro tools can use it as it is
    assert json.loads(json.dumps(dts.RECORD_SCHEMA)) == dts.RECORD_SCHEMA


def test_published_schema_reads_what_the_parser_reads():
    """Bytes written with the embedded schema read back with the published files (the demo's way)."""
    value = encode(record())
    published = load_schema(str(SCHEMAS / f"{N}.Record.avsc"))
    assert fastavro.schemaless_reader(io.BytesIO(value), published)["objectName"] == "mydb.t1"


# --- records as a MySQL source gives them ----------------------------------------------------------


def test_insert():
    c = one(record())
    assert (c.source_format, c.source_database, c.source_schema, c.source_table, c.op) == (
        FORMAT, "mydb", None, "t1", "insert")
    assert c.before is None and c.after == {"a": "123456789", "b": "test insert statement."}
    assert c.primary_key == ["a"]
    assert c.column_types == {"a": "bigint", "b": "string"}
    assert c.source_position == (78, 72469, 1700382)
    assert c.source_ts_ms == 1696984408000
    assert c.tx_id is None and c.tx_seq is None  # MySQL sources send sourceTxid "0"


def test_update():
    c = one(record(operation="UPDATE", id=1700504, sourcePosition="75259@78", sourceTimestamp=1696984517,
                   beforeImages=[I(123456789), C("test insert statement.")],
                   afterImages=[I(123456789), C("test update statement.")]))
    assert c.op == "update"
    assert c.before == {"a": "123456789", "b": "test insert statement."}
    assert c.after == {"a": "123456789", "b": "test update statement."}
    assert c.source_position == (78, 75259, 1700504) and c.source_ts_ms == 1696984517000


def test_delete():
    c = one(record(operation="DELETE", id=1700553, sourcePosition="76176@78",
                   beforeImages=[I(123456789), C("test update statement.")], afterImages=None))
    assert c.op == "delete" and c.after is None
    assert c.before == {"a": "123456789", "b": "test update statement."}
    assert c.source_position == (78, 76176, 1700553)


def test_ddl_is_a_schema_event():
    r = parse(record(operation="DDL", objectName="mydb", fields=None, tags={"GTID": "281c62dc:108156"},
                     afterImages="create table t1(a bigint primary key, b varchar(100))"))
    assert r == ControlRecord("ddl", FORMAT, "mydb", None, None,
                              detail="create table t1(a bigint primary key, b varchar(100))")


@pytest.mark.parametrize("statement, names", [
    ("TRUNCATE TABLE t1", ("mydb", "t1")),
    ("truncate `t``1`;", ("mydb", "t`1")),
    ("TRUNCATE TABLE `other`.`t.1`", ("other", "t.1")),
    ("truncate other . t1", ("other", "t1")),
])
def test_truncate_statement_is_a_truncate_change(statement, names):
    c = one(record(operation="DDL", objectName="mydb", fields=None, afterImages=statement, sourceTxid="77"))
    assert (c.op, c.source_database, c.source_table, c.before, c.after) == ("truncate", *names, None, None)
    assert c.source_position == (78, 72469, 1700382) and c.tx_id == "77" and c.primary_key == []
    assert one(record(operation="DDL", objectName="mydb", fields=None, afterImages=statement),
               primary_key=["a"]).primary_key == ["a"]


def test_other_ddl_stays_a_schema_event():
    for statement in ("TRUNCATE TABLE a, b", "ALTER TABLE t1 TRUNCATE PARTITION p0", "DROP TABLE t1"):
        r = parse(record(operation="DDL", objectName="mydb", fields=None, afterImages=statement))
        assert r == ControlRecord("ddl", FORMAT, "mydb", None, None, detail=statement)


def test_transaction_id_from_source_txid():
    assert one(record(sourceTxid="4711")).tx_id == "4711"
    assert one(record(sourceTxid="")).tx_id is None


def test_record_without_born_timestamp():
    """Records written before ``bornTimestamp`` existed end after ``afterImages`` (the SDK reads
    that field only when bytes remain)."""
    old = io.BytesIO()
    fastavro.schemaless_writer(old, parse_schema(dts.record_schema(born_timestamp=False)), record())
    assert one(old.getvalue()).after == {"a": "123456789", "b": "test insert statement."}


@pytest.mark.parametrize("name, expected", [
    ("mydb.t1", ("mydb", None, "t1")),
    ("mydb", ("mydb", None, None)),
    ("db.public.orders", ("db", "public", "orders")),
    ("my\\u002Edb.t\\u002E1", ("my.db", None, "t.1")),
    (None, (None, None, None)),
])
def test_object_names(name, expected):
    assert dts.split_object_name(name) == expected


def test_three_part_object_name_reaches_the_change():
    c = one(record(objectName="pgdb.public.t1", source={"sourceType": "PostgreSQL", "version": "14"}))
    assert (c.source_database, c.source_schema, c.source_table) == ("pgdb", "public", "t1")


# --- positions -------------------------------------------------------------------------------------


def test_position_orders_file_before_offset():
    """Text order and numeric order differ: "194@10" < "99999@9" as text, but file 10 is later."""
    early, late = dts.parse_position("99999@9", 5), dts.parse_position("194@10", 6)
    assert "194@10" < "99999@9" and early < late
    assert early == (9, 99999, 5) and late == (10, 194, 6)
    # rows of one binlog event share sourcePosition: the record id orders them
    assert dts.parse_position("5000@10", 7) < dts.parse_position("5000@10", 8)


@pytest.mark.parametrize("text", ["", "0/16B3748", "72469", "a@b", "1@2@3", "-1@2", f"{10**38}@1"])
def test_position_falls_back_to_the_record_id(text):
    assert dts.parse_position(text, 42) == (42,)
    assert one(record(sourcePosition=text, id=42)).source_position == (42,)


def test_negative_id_is_an_error():
    assert errors(record(id=-1)).field == "id"


def test_negative_source_timestamp_is_an_error():
    assert errors(record(sourceTimestamp=-5)).field == "sourceTimestamp"


# --- values of every type --------------------------------------------------------------------------


def value(item, type_number=253, source="MySQL", position="1@1", **options):
    """``(text or 'ABSENT', type)`` of one value in column ``v`` of an INSERT."""
    c = one(record(fields=[{"name": "a", "dataTypeNumber": 8}, {"name": "v", "dataTypeNumber": type_number}],
                   afterImages=[I(1), item], source={"sourceType": source, "version": "x"},
                   sourcePosition=position), **options)
    return c.after.get("v", "ABSENT"), c.column_types.get("v")


@pytest.mark.parametrize("precision, number, text, ctype", [
    (1, 1, "-128", "smallint"), (2, 2, "32767", "smallint"), (3, 9, "8388607", "int"), (4, 3, "-7", "int"),
    (8, 8, "9223372036854775807", "bigint"),
    (2, 2, "65535", "int"),                                   # SMALLINT UNSIGNED beyond smallint
    (4, 3, "4294967295", "bigint"),                           # INT UNSIGNED
    (8, 8, "18446744073709551615", "decimal(20,0)"),          # BIGINT UNSIGNED
    (0, 3, "12", "int"), (0, 8, "12", "bigint"), (0, 253, "12", "bigint"),  # precision unset: type code
    (20, 0, "12345678901234567890", "decimal(20,0)"),         # a digit precision
])
def test_integer(precision, number, text, ctype):
    assert value(I(text, precision), number) == (text, ctype)


def test_integer_text_must_be_digits():
    assert errors(record(afterImages=[I("1_000"), C("x")])).field == "afterImages.a"


@pytest.mark.parametrize("charset, data, text", [
    ("utf8mb4", "Zoë \U0001F381".encode("utf-8"), "Zoë \U0001F381"),
    ("utf8mb3", "Søren".encode("utf-8"), "Søren"),
    ("utf8", b"plain", "plain"),
    ("latin1", b"caf\xe9 \x80 \x81", "café € \x81"),  # MySQL latin1: cp1252 plus the 5 undefined bytes
    ("gbk", "中文".encode("gbk"), "中文"),
    ("big5", "中文".encode("big5"), "中文"),
    ("sjis", "日本".encode("shift_jis"), "日本"),
    ("ucs2", "ab".encode("utf-16-be"), "ab"),
    ("UTF-8", b"java name", "java name"),
])
def test_character(charset, data, text):
    assert value(C(data, charset)) == (text, "string")


def test_character_with_binary_charset_is_binary():
    assert value(C(b"\x00\xff\x10", "binary")) == ("AP8Q", "binary")


@pytest.mark.parametrize("item, words", [
    (C(b"x", "klingon"), "unknown charset"),
    (C(b"\xff\xfe", "utf8mb4"), "not utf8mb4 text"),
])
def test_character_errors(item, words):
    e = errors(record(afterImages=[I(1), item]))
    assert e.field == "afterImages.b" and words in str(e)


@pytest.mark.parametrize("text, precision, scale, out, ctype", [
    ("12.50", 4, 2, "12.50", "decimal(4,2)"),
    ("-0.01", 1, 2, "-0.01", "decimal(2,2)"),              # precision raised to hold the digits
    ("123.4", 2, 1, "123.4", "decimal(4,1)"),
    ("1E+3", 1, -3, "1000", "decimal(4,0)"),                # Java BigDecimal.toString exponents
    ("1.2E-7", 2, 8, "0.00000012", "decimal(8,8)"),
    ("123456789012345678901234567890.12345678", 38, 8, "123456789012345678901234567890.12345678", "decimal(38,8)"),
])
def test_decimal(text, precision, scale, out, ctype):
    assert value((f"{N}.Decimal", {"value": text, "precision": precision, "scale": scale}), 246) == (out, ctype)


def test_decimal_not_a_number():
    nan = (f"{N}.Decimal", {"value": "NaN", "precision": 0, "scale": 0})
    e = errors(record(afterImages=[I(1), nan]))
    assert e.field == "afterImages.b" and "finite" in str(e)
    assert value(nan, column_types={"v": "double"}) == ("nan", "double")
    bad = (f"{N}.Decimal", {"value": "12,5", "precision": 3, "scale": 1})
    assert errors(record(afterImages=[I(1), bad])).field == "afterImages.b"


def test_decimal_type_pinned_by_configuration():
    item = (f"{N}.Decimal", {"value": "5.5", "precision": 2, "scale": 1})
    assert value(item, 246, column_types={"v": "decimal(12,2)"}) == ("5.50", "decimal(12,2)")


@pytest.mark.parametrize("item, number, text, ctype", [
    ((f"{N}.Float", {"value": 22.903, "precision": 8, "scale": 15}), 5, "22.903", "double"),
    ((f"{N}.Float", {"value": 1.100000023841858, "precision": 8, "scale": 15}), 4, "1.1", "float"),  # MySQL FLOAT
    ((f"{N}.Float", {"value": 0.30000001192092896, "precision": 4, "scale": 7}), 0, "0.3", "float"),
    ((f"{N}.Float", {"value": 1e-300, "precision": 8, "scale": 15}), 5, "1e-300", "double"),
    ((f"{N}.Float", {"value": float("nan"), "precision": 8, "scale": 15}), 5, "nan", "double"),
])
def test_float(item, number, text, ctype):
    assert value(item, number) == (text, ctype)


def test_timestamp_is_epoch_seconds_and_micros():
    item = (f"{N}.Timestamp", {"timestamp": 1704067200, "millis": 123456})
    assert value(item, 7) == ("2024-01-01 00:00:00.123456", "timestamp")
    assert value((f"{N}.Timestamp", {"timestamp": -1, "millis": 0}), 7) == ("1969-12-31 23:59:59", "timestamp")
    bad = (f"{N}.Timestamp", {"timestamp": 1, "millis": 10**6})
    assert errors(record(afterImages=[I(1), bad])).field == "afterImages.b"


def dtv(year=None, month=None, day=None, hour=None, minute=None, second=None, millis=None) -> dict:
    return {"year": year, "month": month, "day": day, "hour": hour, "minute": minute, "second": second,
            "millis": millis}


@pytest.mark.parametrize("fields, source, number, text, ctype", [
    (dtv(2024, 2, 29, 23, 59, 58, 123000), "MySQL", 12, "2024-02-29 23:59:58.123000", "timestamp_ntz"),  # µs
    (dtv(2024, 2, 29, 23, 59, 58, 123456789), "Oracle", 12, "2024-02-29 23:59:58.123456", "timestamp_ntz"),  # ns
    (dtv(2024, 2, 29, 1, 2, 3), "MySQL", 12, "2024-02-29 01:02:03", "timestamp_ntz"),
    (dtv(1969, 7, 20), "MySQL", 10, "1969-07-20", "date"),
    (dtv(hour=12, minute=13, second=14, millis=12345), "MySQL", 11, "12:13:14.012345", "string"),
    (dtv(hour=-838, minute=59, second=59), "MySQL", 11, "-838:59:59", "string"),
    (dtv(2024), "MySQL", 13, "2024", "int"),
    (dtv(0, 0, 0, 0, 0, 0), "MySQL", 12, None, "timestamp_ntz"),   # MySQL zero date
    (dtv(0, 0, 0), "MySQL", 10, None, "date"),
])
def test_datetime(fields, source, number, text, ctype):
    assert value((f"{N}.DateTime", fields), number, source=source) == (text, ctype)


def test_datetime_fraction_of_postgresql_physical_reader_is_nanoseconds():
    item = (f"{N}.DateTime", dtv(2024, 1, 1, 0, 0, 0, 5000))
    assert value(item, source="PostgreSQL", position="0/1<->0/2")[0] == "2024-01-01 00:00:00.000005"
    assert value(item, source="PostgreSQL")[0] == "2024-01-01 00:00:00.005000"


def test_datetime_errors():
    for bad in (dtv(2024, 2, 30), dtv(2024, 13, 1, 0, 0, 0), dtv(year=2024, month=1), dtv(2024, 1, 1, 0, 0, 0, -1)):
        e = errors(record(afterImages=[I(1), (f"{N}.DateTime", bad)]))
        assert e.field == "afterImages.b", bad


@pytest.mark.parametrize("fields, zone, text, ctype", [
    (dtv(2024, 1, 1, 8, 0, 0), "+08:00", "2024-01-01 00:00:00", "timestamp"),
    (dtv(2024, 1, 1, 8, 0, 0, 250), "+0800", "2024-01-01 00:00:00.000250", "timestamp"),
    (dtv(2024, 7, 1, 0, 30, 0), "-05:30", "2024-07-01 06:00:00", "timestamp"),
    (dtv(2024, 7, 1, 12, 0, 0), "Europe/Berlin", "2024-07-01 10:00:00", "timestamp"),
    (dtv(2024, 7, 1, 12, 0, 0), "UTC", "2024-07-01 12:00:00", "timestamp"),
    (dtv(2024, 7, 1, 12, 0, 0), "GMT+8", "2024-07-01 04:00:00", "timestamp"),
    (dtv(hour=10, minute=0, second=0), "+02:00", "10:00:00+02:00", "string"),
])
def test_timestamp_with_time_zone(fields, zone, text, ctype):
    item = (f"{N}.TimestampWithTimeZone", {"value": fields, "timezone": zone})
    assert value(item, 0, source="PostgreSQL") == (text, ctype)


def test_unknown_time_zone_is_an_error():
    item = (f"{N}.TimestampWithTimeZone", {"value": dtv(2024, 1, 1, 0, 0, 0), "timezone": "Mars/Olympus"})
    e = errors(record(afterImages=[I(1), item]))
    assert e.field == "afterImages.b" and "time zone" in str(e)


def test_geometry():
    wkb = bytes.fromhex("0101000000000000000000f03f0000000000000040")
    assert value((f"{N}.BinaryGeometry", {"type": "WKB", "value": wkb}), 255) == (wkb.hex().upper(), "string")
    assert value((f"{N}.TextGeometry", {"type": "WKT", "value": "POINT(1 2)"}), 255) == ("POINT(1 2)", "string")


def test_binary_and_text_objects():
    assert value((f"{N}.BinaryObject", {"type": "BLOB", "value": b"\x00\x01"}), 252) == ("AAE=", "binary")
    assert value((f"{N}.BinaryObject", {"type": "BIT", "value": b"\x01\x02"}), 16) == ("258", "bigint")
    assert value((f"{N}.BinaryObject", {"type": "JSONB", "value": b'{"a": 1}'}), 3802,
                 source="PostgreSQL") == ('{"a": 1}', "string")
    assert value((f"{N}.TextObject", {"type": "JSON", "value": '{"k":[1]}'}), 245) == ('{"k":[1]}', "string")
    assert value((f"{N}.TextObject", {"type": "TEXT", "value": "t"}), 16, source="PostgreSQL") == ("true", "boolean")
    assert value((f"{N}.TextObject", {"type": "TEXT", "value": "t"}), 16) == ("t", "string")  # MySQL: code 16 is BIT


def test_null_and_empty_objects():
    """Avro null and EmptyObject.NULL are SQL NULL; EmptyObject.NONE (the SDK's NoneValue, a
    placeholder that is not null) leaves the column out of the image."""
    assert value(None, 3) == (None, "int")                  # typed from the MySQL type code
    assert value(None, 253) == (None, None)                # VARCHAR or VARBINARY: no type
    assert value(None, 246) == (None, None)                # DECIMAL: precision unknown
    assert value(None, 3, source="Oracle") == (None, None)
    assert value("NULL", 12) == (None, "timestamp_ntz")
    assert value("NONE", 12) == ("ABSENT", None)


def test_update_types_take_the_wider_image():
    c = one(record(operation="UPDATE", fields=[{"name": "a", "dataTypeNumber": 8}, {"name": "b", "dataTypeNumber": 2}],
                   beforeImages=[I(1), I(40000, 2)], afterImages=[I(1), I(5, 2)]))
    assert c.before["b"] == "40000" and c.after["b"] == "5" and c.column_types["b"] == "int"


def test_partial_image_with_none_placeholders():
    c = one(record(operation="UPDATE", beforeImages=[I(7), "NONE"],
                   afterImages=[I(7), C("new")]))
    assert c.before == {"a": "7"} and c.after == {"a": "7", "b": "new"}


# --- control operations ---------------------------------------------------------------------------


@pytest.mark.parametrize("operation, kind", [
    ("BEGIN", "transaction"), ("COMMIT", "transaction"), ("ROLLBACK", "transaction"), ("ABORT", "transaction"),
    ("HEARTBEAT", "heartbeat"), ("CHECKPOINT", "heartbeat"), ("NOOP", "heartbeat"),
    ("DDL", "ddl"), ("COMMAND", "ddl"),
    ("FILL", "metadata"), ("FINISH", "metadata"), ("CONTROL", "metadata"), ("RDB", "metadata"), ("INIT", "metadata"),
])
def test_control_operations(operation, kind):
    r = parse(record(operation=operation, objectName=None, fields=None, afterImages=None, sourceTxid="981"))
    assert isinstance(r, ControlRecord) and r.kind == kind and r.source_format == FORMAT
    if kind != "ddl":
        assert r.detail == f"{operation} 981"
    assert set(dts.CONTROL_OPERATIONS) | set(dts.ROW_OPERATIONS) == set(
        dts.AVSC[f"{N}.Record"]["fields"][7]["type"]["symbols"])


def test_kafka_tombstone():
    assert parse(None) == ControlRecord("tombstone", FORMAT)
    assert parse(b"") == ControlRecord("tombstone", FORMAT)


# --- primary key ----------------------------------------------------------------------------------


def test_primary_key_sources():
    assert one(record()).primary_key == ["a"]
    uk = {"pk_uk_info": '{"uk_b":["b"]}'}
    assert one(record(tags=uk)).primary_key == ["b"]                          # first unique index
    both = {"pk_uk_info": '{"uk_b":["b"],"PRIMARY":["a","b"]}'}
    assert one(record(tags=both)).primary_key == ["a", "b"]                   # PRIMARY wins
    assert one(record(), primary_key=["b"]).primary_key == ["b"]              # configuration wins
    assert one(record(), primary_keys={"mydb.t1": ["b"]}, primary_key=["a"]).primary_key == ["b"]
    assert one(record(tags={}), key={"a": 1}).primary_key == ["a"]            # a JSON Kafka key


def test_no_primary_key_is_an_error():
    e = errors(record(tags={"thread_id": "1"}))
    assert e.field == "primary_key"
    assert errors(record(tags={"pk_uk_info": "{}"})).field == "primary_key"


def test_malformed_pk_uk_info_is_an_error():
    assert errors(record(tags={"pk_uk_info": '{"PRIMARY":'})).field == "tags.pk_uk_info"
    assert errors(record(tags={"pk_uk_info": '{"PRIMARY":"a"}'})).field == "tags.pk_uk_info"
    assert one(record(tags={"pk_uk_info": "garbage"}), primary_key=["a"]).primary_key == ["a"]


def test_delete_without_key_value():
    deleted = record(operation="DELETE", beforeImages=["NONE", C("x")], afterImages=None)
    e = errors(deleted)
    assert e.field == "beforeImages" and "key column(s) a" in str(e)
    assert one(deleted, key={"a": 9}).before == {"a": "9", "b": "x"}


# --- bad input ------------------------------------------------------------------------------------


def test_truncated_values_are_errors():
    full = encode(record())
    without_born = io.BytesIO()
    fastavro.schemaless_writer(without_born, parse_schema(dts.record_schema(born_timestamp=False)), record())
    old_length = len(without_born.getvalue())
    for n in range(1, len(full)):
        if n == old_length:
            continue  # a complete record of the format without bornTimestamp
        e = errors(full[:n])
        assert e.field == "value" and "DTS Avro" in str(e), n


@pytest.mark.parametrize("raw", [
    b'{"operation": "INSERT"}',
    b"\x00\x00\x00\x00\x01" + b"\x00" * 3,          # a Confluent header with no datum
    bytes(range(256)),
    b"\xff" * 40,
])
def test_wrong_bytes_are_errors(raw):
    e = errors(raw)
    assert e.field == "value" and "not a DTS Avro record" in str(e)


def test_trailing_bytes_are_an_error():
    e = errors(encode(record()) + b"\x00\x00")
    assert e.field == "value" and "left after the record" in str(e)


def _enum_byte(over_a: dict, over_b: dict) -> tuple[bytearray, int]:
    """``encode(record(**over_a))`` and the place of the one byte that differs from ``over_b``'s."""
    a, b = encode(record(**over_a)), encode(record(**over_b))
    places = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    assert len(a) == len(b) and len(places) == 1
    return bytearray(a), places[0]


@pytest.mark.parametrize("over_a, over_b", [
    ({"operation": "INSERT"}, {"operation": "UPDATE"}),
    ({"source": {"sourceType": "MySQL", "version": "8"}}, {"source": {"sourceType": "Oracle", "version": "8"}}),
])
@pytest.mark.parametrize("index_byte", [0x01, 0x03, 0x19])  # zig-zag -1, -2, -13 (each a symbol of both enums)
def test_a_negative_enum_index_is_an_error_not_a_symbol_from_the_end(over_a, over_b, index_byte):
    """fastavro reads a negative enum index as a symbol counted from the end: a corrupt operation
    byte 0x01 (-1) read as INIT, a control record, and a sourceType -1 as OTHER."""
    data, at = _enum_byte(over_a, over_b)
    data[at] = index_byte
    e = errors(bytes(data))
    assert e.field == "value" and "negative enum index" in str(e)


@pytest.mark.parametrize("over, field", [
    ({"objectName": None}, "objectName"),
    ({"objectName": "mydb"}, "objectName"),
    ({"objectName": "a.b.c.d"}, "objectName"),
    ({"fields": None}, "fields"),
    ({"fields": "a,b"}, "fields"),
    ({"afterImages": None}, "afterImages"),
    ({"afterImages": "text"}, "afterImages"),
    ({"afterImages": [I(1)]}, "afterImages"),
    ({"operation": "DELETE", "afterImages": None}, "beforeImages"),
    ({"operation": "UPDATE", "afterImages": None, "beforeImages": [I(1), C("x")]}, "afterImages"),
])
def test_bad_records(over, field):
    assert errors(record(**over)).field == field


def test_parser_is_picklable():
    parser = get_parser(FORMAT, {"primary_key": ["a"]})
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.parse(krec(record())) == parser.parse(krec(record()))


# --- every canonical type through the renderer ------------------------------------------------------

ALL_TYPES = Table("all_types", (
    Column("id", "bigint(20)", "bigint", False),
    Column("flag", "tinyint(1)", "boolean", True),
    Column("small", "smallint(6)", "smallint", True),
    Column("n", "int(11)", "int", True),
    Column("ratio", "float", "float", True),
    Column("weight", "double", "double", True),
    Column("price", "decimal(10,2)", "decimal(10,2)", True),
    Column("label", "varchar(50)", "string", True),
    Column("blob", "varbinary(8)", "binary", True),
    Column("born", "date", "date", True),
    Column("at", "datetime(6)", "timestamp_ntz", True),
    Column("stamp", "timestamp(3)", "timestamp", True),
), ("id",))


def test_every_canonical_type_round_trips_through_the_renderer():
    row = {"id": 1, "flag": True, "small": -3, "n": 70000, "ratio": 0.5, "weight": 0.1, "price": Decimal("9.90"),
           "label": "ø \U0001F381", "blob": b"\x00\xfe", "born": dt.date(2000, 2, 29),
           "at": dt.datetime(2024, 1, 2, 3, 4, 5, 678901), "stamp": dt.datetime(2024, 1, 2, 3, 4, 5, 678000)}
    nulls = {c: None for c in row if c != "id"}
    changes_ = (RowChange("all_types", "insert", None, row, (1,), "mysql-bin.000009", 1000, 0),
                RowChange("all_types", "update", row, {**row, **nulls}, (1,), "mysql-bin.000009", 1100, 0))
    tx = Transaction("uuid:5", "uuid:5", 1704164645000, changes_, "mysql-bin.000009", 900, 77)
    msgs = dts_avro([tx], {"all_types": ALL_TYPES})
    parsed = [c for _, r in parse_all(get_parser(FORMAT), [krec(m.value, m.key) for m in msgs])
              if isinstance(r, list) for c in r]
    insert, update = parsed
    assert insert.after == {"id": "1", "flag": "1", "small": "-3", "n": "70000", "ratio": "0.5", "weight": "0.1",
                            "price": "9.90", "label": "ø \U0001F381", "blob": "AP4=", "born": "2000-02-29",
                            "at": "2024-01-02 03:04:05.678901", "stamp": "2024-01-02 03:04:05.678000"}
    # boolean is TINYINT(1): DTS sends the integer, so the column reads as smallint 1/0
    assert insert.column_types == {"id": "bigint", "flag": "smallint", "small": "smallint", "n": "int",
                                   "ratio": "float", "weight": "double", "price": "decimal(3,2)", "label": "string",
                                   "blob": "binary", "born": "date", "at": "timestamp_ntz", "stamp": "timestamp"}
    assert update.after == {"id": "1", **nulls}
    assert {c: update.column_types.get(c) for c in nulls} == {
        "flag": "smallint", "small": "smallint", "n": "int", "ratio": "float", "weight": "double",
        "price": "decimal(3,2)", "label": "string", "blob": "binary", "born": "date", "at": "timestamp_ntz",
        "stamp": "timestamp"}
    assert [type_code(c) for c in ALL_TYPES.columns] == [8, 1, 2, 3, 4, 5, 246, 253, 253, 10, 12, 7]


# --- the simulated shop as DTS writes it (round trip: test_round_trip.py) --------------------------


@pytest.fixture(scope="module")
def source():
    return SimulatedSource(seed=41, start=START, hours=2)


@pytest.fixture(scope="module")
def history(source):
    return source.run()


@pytest.fixture(scope="module")
def messages(source, history):
    return dts_avro(history, source.tables)


def test_rendered_messages(source, history, messages):
    results = [r for _, r in parse_all(get_parser(FORMAT), landed(messages))]
    kinds = Counter(r.kind if isinstance(r, ControlRecord) else r[0].op for r in results)
    assert kinds["transaction"] == 2 * len(history)
    assert kinds["ddl"] == len(source.tables) + 1 and kinds["heartbeat"] >= 1
    assert sum(m.rows for m in messages) == sum(len(tx.changes) for tx in history)
    # BEGIN, the transaction's rows, COMMIT
    details = [r.detail.split()[0] if isinstance(r, ControlRecord) and r.kind == "transaction" else
               ("ROW" if isinstance(r, list) else None) for r in results]
    framed = [d for d in details if d]
    i = 0
    for tx in history:
        assert framed[i] == "BEGIN" and framed[i + 1: i + 1 + len(tx.changes)] == ["ROW"] * len(tx.changes)
        assert framed[i + 1 + len(tx.changes)] == "COMMIT"
        i += len(tx.changes) + 2
    # Kafka timestamps never decrease and stay within a second of the commit
    last = 0
    for m in messages:
        assert m.timestamp_ms >= last and m.timestamp_ms < m.commit_ts_ms + 1000
        last = m.timestamp_ms
    # positions: ids increase, files cross 9 → 10, and text order disagrees with numeric order
    rows = [r[0] for r in results if isinstance(r, list)]
    positions = [c.source_position for c in rows]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    files = [p[0] for p in positions]
    assert 9 in files and 10 in files
    texts = [f"{p[1]}@{p[0]}" for p in positions]
    assert texts != sorted(texts)
    assert [c.tx_id for c in rows[:1]] == [history[0].gtid.rpartition(":")[2]]
    assert all(c.source_ts_ms % 1000 == 0 for c in rows)
    by_tx = {tx.gtid.rpartition(":")[2]: tx.commit_ts_ms // 1000 * 1000 for tx in history}
    assert all(c.source_ts_ms == by_tx[c.tx_id] for c in rows)
