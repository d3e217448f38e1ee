"""Tests of the ``ogg-json`` parser and the simulated shop rendered as Oracle GoldenGate JSON.

Vectors: the four *Sample Operation Modeled JSON Messages* of "Oracle GoldenGate for Big Data:
Using the Pluggable Formatters", *Using the JSON Formatter* (``samples/oracle-goldengate/``, as
printed). How each became the record asserted on:

- *Sample Insert Message*, *Sample Update Message*, *Sample Delete Message*: valid JSON as
  printed; asserted unchanged. They carry no ``primary_keys`` (the formatter's
  ``includePrimaryKeys`` is off by default), so the key is configured (:data:`KEY`) or added.
- *Sample Truncate Message*: ends in a trailing comma after ``pos``; the comma is removed
  (:data:`DOC_TRUNCATE`).

Then records derived from those (fields changed as each test says) and the shape of
:func:`cdclake.sim.render_ogg.ogg_json`'s messages (its round trip through the parser and the
reference model is in ``test_round_trip.py``).
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import pickle
import re

import helpers
import pytest
from helpers import krec, sample
from reference_model import apply_changes

from cdclake.formats import get_parser
from cdclake.formats.ogg import ogg_datetime, split_table
from cdclake.record import ControlRecord, ParseError
from cdclake.sim.render_ogg import ogg_json
from cdclake.sim.source import SimulatedSource

FMT = "ogg-json"
parse = functools.partial(helpers.parse, FMT)
one = functools.partial(helpers.one, FMT)

DOC_INSERT = sample("oracle-goldengate", "insert.json")
DOC_UPDATE = sample("oracle-goldengate", "update.json")
DOC_DELETE = sample("oracle-goldengate", "delete.json")
DOC_TRUNCATE_AS_PRINTED = sample("oracle-goldengate", "truncate.as-printed.txt")
DOC_TRUNCATE = re.sub(r'("pos":"[0-9]+"),(\s*\n\})', r"\1\2", DOC_TRUNCATE_AS_PRINTED)
KEY_COLUMNS = ["CUST_CODE", "ORDER_DATE", "PRODUCT_CODE", "ORDER_ID"]
KEY = {"primary_key": KEY_COLUMNS}


def edit(text: str, **members) -> dict:
    """A sample as a dict, with ``members`` set (None values kept as null; ``...`` removes)."""
    doc = json.loads(text)
    for k, v in members.items():
        if v is ...:
            doc.pop(k, None)
        else:
            doc[k] = v
    return doc


# --- the document's samples ----------------------------------------------------------------


def test_samples_as_printed():
    for text in (DOC_INSERT, DOC_UPDATE, DOC_DELETE):
        json.loads(text)
    with pytest.raises(ValueError):
        json.loads(DOC_TRUNCATE_AS_PRINTED)
    assert json.loads(DOC_TRUNCATE)["op_type"] == "T"


def test_doc_insert():
    c = one(DOC_INSERT, **KEY)
    assert (c.source_format, c.source_database, c.source_schema, c.source_table, c.op) == (
        FMT, None, "QASOURCE", "TCUSTORD", "insert")
    assert c.before is None
    assert c.after == {"CUST_CODE": "WILL", "ORDER_DATE": "1994-09-30:15:33:00", "PRODUCT_CODE": "CAR",
                       "ORDER_ID": "144", "PRODUCT_PRICE": "17520.0", "PRODUCT_AMOUNT": "3", "TRANSACTION_ID": "100"}
    assert c.primary_key == KEY_COLUMNS and c.column_types == {}
    assert c.source_position == (2928,)
    assert c.source_ts_ms == int(dt.datetime(2015, 11, 5, 18, 45, 36, tzinfo=dt.timezone.utc).timestamp() * 1000)
    assert c.tx_id is None


def test_doc_insert_typed():
    types = {"ORDER_DATE": "timestamp", "ORDER_ID": "int", "PRODUCT_PRICE": "decimal(8,2)", "TRANSACTION_ID": "string"}
    c = one(DOC_INSERT, column_types=types, **KEY)
    assert c.after["ORDER_DATE"] == "1994-09-30 15:33:00" and c.after["PRODUCT_PRICE"] == "17520.00"
    assert c.after["ORDER_ID"] == "144" and c.after["TRANSACTION_ID"] == "100"
    assert c.column_types == types


def test_doc_insert_needs_a_key():
    with pytest.raises(ParseError) as err:
        parse(DOC_INSERT)
    assert err.value.field == "primary_key" and "no primary key" in str(err.value)


def test_primary_keys_of_the_message_and_configured_key():
    doc = edit(DOC_INSERT, primary_keys=["ORDER_ID"])
    assert one(doc).primary_key == ["ORDER_ID"]
    assert one(doc, primary_key=["CUST_CODE"]).primary_key == ["CUST_CODE"]
    assert one(doc, primary_keys={"QASOURCE.TCUSTORD": ["PRODUCT_CODE"]}).primary_key == ["PRODUCT_CODE"]
    assert one(DOC_INSERT, key=b'{"ORDER_ID": 144}').primary_key == ["ORDER_ID"]  # the Kafka key's columns
    assert one(doc, key=b'{"CUST_CODE": "WILL"}').primary_key == ["ORDER_ID"]


def test_doc_update_is_a_compressed_update():
    """The after image holds the key and the changed column: PRODUCT_AMOUNT and TRANSACTION_ID
    are absent and keep their values."""
    c = one(DOC_UPDATE, **KEY)
    assert c.op == "update" and c.source_position == (4300,)
    assert c.before == {"CUST_CODE": "BILL", "ORDER_DATE": "1995-12-31:15:00:00", "PRODUCT_CODE": "CAR",
                        "ORDER_ID": "765", "PRODUCT_PRICE": "15000.0", "PRODUCT_AMOUNT": "3", "TRANSACTION_ID": "100"}
    assert c.after == {"CUST_CODE": "BILL", "ORDER_DATE": "1995-12-31:15:00:00", "PRODUCT_CODE": "CAR",
                       "ORDER_ID": "765", "PRODUCT_PRICE": "14000.0"}
    insert = edit(DOC_UPDATE, op_type="I", pos="00000000000000004000", before=..., after=json.loads(DOC_UPDATE)["before"])
    records = [krec(insert, offset=0), krec(DOC_UPDATE, offset=1)]
    parser = get_parser(FMT, KEY)
    state = apply_changes([(r, c) for r in records for c in parser.parse(r)])
    (row,) = state["QASOURCE.TCUSTORD"].values()
    assert row["PRODUCT_PRICE"] == "14000.0" and row["PRODUCT_AMOUNT"] == "3" and row["TRANSACTION_ID"] == "100"


def test_doc_delete():
    c = one(DOC_DELETE, **KEY)
    assert c.op == "delete" and c.after is None and c.source_position == (5272,)
    assert c.before["CUST_CODE"] == "DAVE" and c.before["PRODUCT_PRICE"] == "135000.0"


def test_doc_truncate():
    c = one(DOC_TRUNCATE)
    assert (c.op, c.before, c.after, c.primary_key, c.source_position) == ("truncate", None, None, [], (5480,))
    assert c.source_schema == "QASOURCE" and c.source_table == "TCUSTORD"


# --- operations, control records, names --------------------------------------------------------


@pytest.mark.parametrize("op_type, op", [("I", "insert"), ("U", "update"), ("D", "delete"), ("T", "truncate")])
def test_operations(op_type, op):
    doc = {"table": "S.T", "op_type": op_type, "pos": "1", "primary_keys": ["ID"], "before": {"ID": 1},
           "after": {"ID": 1, "V": "x"}}
    assert one(doc).op == op


def test_json_schema_document_is_metadata():
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "title": "QASOURCE.TCUSTORD",
              "description": "JSON schema for table QASOURCE.TCUSTORD", "type": "object", "properties": {}}
    r = parse(schema)
    assert isinstance(r, ControlRecord) and r.kind == "metadata" and r.detail == "QASOURCE.TCUSTORD"


@pytest.mark.parametrize("value", [None, b""])
def test_tombstone(value):
    r = parse(value, b"key")
    assert isinstance(r, ControlRecord) and r.kind == "tombstone"


@pytest.mark.parametrize("name, parts", [
    ("QASOURCE.TCUSTORD", (None, "QASOURCE", "TCUSTORD")),
    ("CAT.S.T", ("CAT", "S", "T")),
    ("T", (None, None, "T")),
    ('"MY.S"."T.1"', (None, "MY.S", "T.1")),
    ('"A""B".T', (None, 'A"B', "T")),
    ('PDB1."S"."T"', ("PDB1", "S", "T")),
])
def test_split_table(name, parts):
    assert split_table(name) == parts


@pytest.mark.parametrize("name", ["A.B.C.D", ".T", "S.", "S..T", '"S.T', '""'])
def test_bad_table_names(name):
    with pytest.raises(ParseError) as err:
        parse(edit(DOC_INSERT, table=name), **KEY)
    assert err.value.field == "table"


def test_catalog_schema_table():
    c = one(edit(DOC_INSERT, table="ORCLPDB1.QASOURCE.TCUSTORD"), **KEY)
    assert (c.source_database, c.source_schema, c.source_table) == ("ORCLPDB1", "QASOURCE", "TCUSTORD")
    c = one(edit(DOC_INSERT, table="ORCLPDB1.QASOURCE.TCUSTORD"), primary_keys={"ORCLPDB1.TCUSTORD": ["ORDER_ID"]})
    assert c.primary_key == ["ORDER_ID"]


# --- order ---------------------------------------------------------------------------------


def test_pos_orders_not_op_ts():
    """Three changes of one row: ``op_ts`` goes back (it is not monotonic), ``pos`` does not, and
    the changes arrive out of order; the state is the last by ``pos``."""
    base = {"table": "S.T", "primary_keys": ["ID"]}
    docs = [{**base, "op_type": "I", "pos": "00000000010000001000", "op_ts": "2024-05-01 10:00:05.000000",
             "after": {"ID": 1, "V": "first"}},
            {**base, "op_type": "U", "pos": "00000000010000002000", "op_ts": "2024-05-01 10:00:01.000000",
             "before": {"ID": 1}, "after": {"ID": 1, "V": "second"}},
            {**base, "op_type": "U", "pos": "00000000020000001416", "op_ts": "2024-05-01 09:59:59.000000",
             "before": {"ID": 1}, "after": {"ID": 1, "V": "third"}}]  # the next trail file
    records = [krec(docs[i], offset=n) for n, i in enumerate((2, 0, 1))]
    parser = get_parser(FMT)
    pairs = [(r, c) for r in records for c in parser.parse(r)]
    assert [c.source_position for _, c in pairs] == [(20000001416,), (10000001000,), (10000002000,)]
    by_pos = [c.source_ts_ms for c in sorted((c for _, c in pairs), key=lambda c: c.source_position)]
    assert by_pos == sorted(by_pos, reverse=True)  # op_ts would reverse them
    assert apply_changes(pairs)["S.T"] == {("1",): {"ID": "1", "V": "third"}}


def test_positions_of_any_width():
    """Apache Paimon's OGG vectors carry 23-digit positions: the same number either way."""
    assert one(edit(DOC_INSERT, pos="00000000000000000000145"), **KEY).source_position == (145,)
    assert one(edit(DOC_INSERT, pos="9" * 38), **KEY).source_position == (10**38 - 1,)
    assert one(edit(DOC_INSERT, pos=...), **KEY).source_position == ()


@pytest.mark.parametrize("text, ms", [
    ("2015-11-05 18:45:36.000000", 1446749136000),
    ("2015-11-05 18:45:36.123456789", 1446749136123),
    ("2015-11-05T18:45:36Z", 1446749136000),
    ("2015-11-05:18:45:36.5", 1446749136500),
])
def test_op_ts(text, ms):
    assert one(edit(DOC_INSERT, op_ts=text), **KEY).source_ts_ms == ms


def test_transaction_id_and_csn():
    c = one(edit(DOC_INSERT, xid="7.22.1184", csn="5210388"), **KEY)
    assert c.tx_id == "7.22.1184" and c.source_position == (2928,)
    assert one(edit(DOC_INSERT, xid=77), **KEY).tx_id == "77"


# --- images ----------------------------------------------------------------------------------


def test_is_missing_flags():
    """Missing-column flags: a column flagged missing is absent; a null column not flagged is null."""
    doc = edit(DOC_DELETE, before={"CUST_CODE": "DAVE", "CUST_CODE_isMissing": False, "ORDER_ID": 600,
                                   "ORDER_ID_isMissing": False, "PRODUCT_PRICE": None, "PRODUCT_PRICE_isMissing": True,
                                   "TRANSACTION_ID": None, "TRANSACTION_ID_isMissing": False})
    c = one(doc, primary_key=["CUST_CODE", "ORDER_ID"])
    assert c.before == {"CUST_CODE": "DAVE", "ORDER_ID": "600", "TRANSACTION_ID": None}
    # a flag without its column is a column of its own
    c = one(edit(DOC_INSERT, after={"ORDER_ID": 1, "X_isMissing": True}), primary_key=["ORDER_ID"])
    assert c.after == {"ORDER_ID": "1", "X_isMissing": "true"}


def test_update_key_from_before_or_kafka_key():
    doc = {"table": "S.T", "op_type": "U", "pos": "5", "primary_keys": ["ID"], "before": {"ID": 7, "V": "a"},
           "after": {"V": "b"}}
    assert one(doc).after == {"V": "b", "ID": "7"}
    assert one({**doc, "before": None}, b'{"ID": 7}').after == {"V": "b", "ID": "7"}
    with pytest.raises(ParseError) as err:
        parse({**doc, "before": None})
    assert err.value.field == "after" and "no value for key column(s) ID" in str(err.value)


def test_key_change_keeps_both_images():
    doc = {"table": "S.T", "op_type": "U", "pos": "5", "primary_keys": ["ID"], "before": {"ID": 7, "V": "a"},
           "after": {"ID": 8, "V": "a"}}
    c = one(doc)
    assert c.before["ID"] == "7" and c.after["ID"] == "8"


def test_delete_of_key_only_and_key_from_kafka_key():
    doc = {"table": "S.T", "op_type": "D", "pos": "5", "primary_keys": ["ID"], "before": {"ID": 7}}
    assert one(doc).before == {"ID": "7"}
    assert one({**doc, "before": {"V": "x"}}, b'{"ID": 7}').before == {"V": "x", "ID": "7"}
    with pytest.raises(ParseError) as err:
        parse({**doc, "before": {"V": "x"}})
    assert err.value.field == "before" and "no value for key column(s) ID" in str(err.value)


def test_ogg_datetime():
    assert ogg_datetime("1994-09-30:15:33:00") == "1994-09-30 15:33:00"
    assert ogg_datetime("1994-09-30:15:33:00.123") == "1994-09-30 15:33:00.123"
    assert ogg_datetime("1994-09-30 15:33:00") == "1994-09-30 15:33:00"
    assert ogg_datetime(5) == 5
    c = one(DOC_INSERT, column_types={"ORDER_DATE": "date"}, **KEY)
    assert c.after["ORDER_DATE"] == "1994-09-30"


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value, field, words", [
    ("{", "value", "not valid JSON"),
    ("[1]", "value", "not an object"),
    (b"\xff", "value", "not UTF-8"),
    (DOC_TRUNCATE_AS_PRINTED, "value", "not valid JSON"),
    (edit(DOC_INSERT, op_type=...), "op_type", "missing operation type"),
    (edit(DOC_INSERT, op_type="X"), "op_type", "unknown operation type 'X'"),
    (edit(DOC_INSERT, op_type="i"), "op_type", "unknown operation type"),
    (edit(DOC_INSERT, op_type=1), "op_type", "unknown operation type"),
    (edit(DOC_INSERT, table=...), "table", "missing table name"),
    (edit(DOC_INSERT, table=7), "table", "missing table name"),
    (edit(DOC_INSERT, pos="12.5"), "pos", "not a non-negative integer"),
    (edit(DOC_INSERT, pos="-1"), "pos", "not a non-negative integer"),
    (edit(DOC_INSERT, pos="1" * 39), "pos", "out of range"),
    (edit(DOC_INSERT, op_ts="05/11/2015"), "op_ts", "not a timestamp"),
    (edit(DOC_INSERT, op_ts=1446749136), "op_ts", "not a timestamp"),
    (edit(DOC_INSERT, xid=[1]), "xid", "not text"),
    (edit(DOC_INSERT, primary_keys="ORDER_ID"), "primary_keys", "not a list of column names"),
    (edit(DOC_INSERT, after=...), "after", "insert carries no after image"),
    (edit(DOC_INSERT, after=[1]), "after", "not an object"),
    (edit(DOC_UPDATE, after=None), "after", "update carries no after image"),
    (edit(DOC_UPDATE, before="x"), "before", "not an object"),
    (edit(DOC_DELETE, before=None), "before", "delete carries no before image"),
    ({"table": "S.T", "op_type": "I", "CUST_CODE": "WILL"}, "after", "insert carries no after image"),  # json_row
])
def test_errors_name_format_and_field(value, field, words):
    with pytest.raises(ParseError) as err:
        parse(value, **KEY)
    assert err.value.format == FMT and err.value.field == field
    assert str(err.value).startswith(f"{FMT}: field '{field}': ") and words in str(err.value)


def test_bad_value_for_configured_type_names_column():
    with pytest.raises(ParseError) as err:
        parse(DOC_INSERT, column_types={"CUST_CODE": "int"}, **KEY)
    assert err.value.field == "after.CUST_CODE" and "cannot read 'WILL'" in str(err.value)
    with pytest.raises(ParseError) as err:
        parse(DOC_UPDATE, column_types={"TRANSACTION_ID": "boolean"}, **KEY)  # only the before image has it
    assert err.value.field == "before.TRANSACTION_ID"


def test_parser_is_picklable():
    parser = get_parser(FMT, {**KEY, "column_types": {"ORDER_ID": "bigint"}})
    parser.parse(krec(DOC_INSERT))
    clone = pickle.loads(pickle.dumps(parser))
    assert not clone._plans
    assert clone.parse(krec(DOC_INSERT)) == parser.parse(krec(DOC_INSERT))


# --- the simulator's rendering ---------------------------------------------------------------


def test_rendered_messages_shape():
    src = SimulatedSource(seed=3, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=1)
    history = src.run()
    messages = ogg_json(history, src.tables, partitions=3)
    assert len(messages) == sum(len(tx.changes) for tx in history)
    docs = [json.loads(m.value) for m in messages]
    assert [list(d)[:5] for d in docs[:1]] == [["table", "op_type", "op_ts", "current_ts", "pos"]]
    assert {d["op_type"] for d in docs} == {"I", "U", "D"}
    assert all(re.fullmatch(r"[0-9]{20}", d["pos"]) for d in docs)
    assert all(d["primary_keys"] == ["id"] for d in docs)
    ins = next(d for d in docs if d["op_type"] == "I" and d["table"] == "shop.orders")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d:\d\d:\d\d:\d\d\.\d{6}", ins["after"]["ordered_at"])
    assert re.search(rb'"amount":[0-9]+\.[0-9]{2}[,}]', next(m.value for m in messages if b'"amount"' in m.value))
    assert {m.partition for m in messages} == {0, 1, 2}
    assert all(m.key == str(json.loads(m.value)[("after" if json.loads(m.value)["after"] else "before")]["id"]).encode()
               for m in messages)


def test_decimal_of_json_numbers_is_coerce_text():
    """The direct path of a configured decimal column for JSON numbers read as doubles gives what
    :func:`cdclake.formats.text.coerce_text` gives, errors included."""
    from cdclake.formats.ogg import ogg_converter
    from cdclake.formats.text import coerce_text

    values = [17520.0, 0.1, 12.345, -0.0, 1e16, 1.5e-7, 123456789.12, 3.14, 1e300, float("nan"), float("inf"), 7, "8.5",
              True, None]
    for ctype in ("decimal(12,2)", "decimal(38,10)", "decimal(5,0)"):
        conv = ogg_converter(ctype)
        for v in values:
            try:
                want = coerce_text(v, ctype)
            except ValueError as exc:
                with pytest.raises(ValueError) as err:
                    conv(v)
                assert str(err.value) == str(exc)
            else:
                assert conv(v) == want, (ctype, v)
