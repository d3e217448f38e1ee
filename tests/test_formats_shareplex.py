"""Tests of the ``shareplex-json`` parser and the simulated shop rendered as SharePlex JSON.

Vectors: the three Shareplex JSON examples of "Alibaba Cloud DTS: data formats of Kafka
messages" (verbatim in ``samples/alibaba-dts/``, with the document's indentation and trailing
blanks). How each became the record asserted on, every field the document shows kept:

- *Data inserted*: valid JSON as printed; asserted unchanged.
- *Data updated*: the ``meta`` block ends with a line ``...`` (fields left out by the document);
  that line is removed (:data:`DOC_UPDATE`). The remaining ``meta`` has no ``scn``/``seq``/``trans``.
- *Data deleted*: the ``meta`` block ends in a trailing comma after ``"op": "del"``; the comma is
  removed (:data:`DOC_DELETE_AS_SENT`). That ``meta`` names no table, which the parser refuses
  (``meta.table``); :data:`DOC_DELETE` adds ``"table": "CL_BIZ1.MIO_LOG"``, the table the two
  other examples name, to assert the delete itself.

Then records derived from those (fields changed as each test says) and the shape of
:func:`cdclake.sim.render_shareplex.shareplex_json`'s messages (its round trip through the parser
and the reference model is in ``test_round_trip.py``).
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

from cdclake.formats.shareplex import meta_idx, split_table  # importing the module registers the format
from cdclake.formats import get_parser
from cdclake.record import ControlRecord, KafkaRecord, ParseError
from cdclake.sim.render_shareplex import shareplex_json
from cdclake.sim.source import SimulatedSource


parse = functools.partial(helpers.parse, "shareplex-json")
one = functools.partial(helpers.one, "shareplex-json")


# --- Alibaba Cloud DTS: Shareplex JSON examples (verbatim) ----------------------------------

# Shareplex JSON / Examples / Data inserted, Data updated, Data deleted
DOC_INSERT = sample("alibaba-dts", "shareplex-insert.json")
DOC_UPDATE_AS_PRINTED = sample("alibaba-dts", "shareplex-update.as-printed.txt")
DOC_DELETE_AS_PRINTED = sample("alibaba-dts", "shareplex-delete.as-printed.txt")

DOC_UPDATE = re.sub(r"\n\s*\.\.\.\n", "\n", DOC_UPDATE_AS_PRINTED)
DOC_DELETE_AS_SENT = re.sub(r'("op": "del"),(\s*\n\s*\})', r"\1\2", DOC_DELETE_AS_PRINTED)
DOC_DELETE = DOC_DELETE_AS_SENT.replace('"op": "del"', '"op": "del", "table": "CL_BIZ1.MIO_LOG"')
KEY = {"primary_key": ["MIO_LOG_ID"]}


def test_samples_as_printed_are_not_all_json():
    json.loads(DOC_INSERT)
    for printed in (DOC_UPDATE_AS_PRINTED, DOC_DELETE_AS_PRINTED):
        with pytest.raises(ValueError):
            json.loads(printed)
    with pytest.raises(ParseError) as err:
        parse(DOC_UPDATE_AS_PRINTED)
    assert err.value.field == "value"
    # the cleaned records keep every field the document shows
    assert json.loads(DOC_UPDATE)["meta"] == {"time": "2017-06-16T15:38:13", "userid": 84, "op": "upd",
                                              "table": "CL_BIZ1.MIO_LOG"}
    assert json.loads(DOC_DELETE_AS_SENT)["meta"] == {"time": "2017-06-16T15:51:35", "userid": 84, "op": "del"}


def test_doc_insert():
    c = one(DOC_INSERT, **KEY)
    assert (c.source_format, c.source_database, c.source_schema, c.source_table) == (
        "shareplex-json", None, "CL_BIZ1", "MIO_LOG")
    assert c.op == "insert" and c.before is None
    assert c.after == {"MIO_LOG_ID": "32539737"}
    assert c.primary_key == ["MIO_LOG_ID"]
    assert c.column_types == {}  # the format carries no types
    assert c.source_position == (14589063118712, 1)  # (scn, seq)
    assert c.source_ts_ms == 1497623074000  # time 2017-06-16T14:24:34 UTC; posttime is not used
    assert (c.tx_id, c.tx_seq) == ("7.0.411499", 1)
    parser = get_parser("shareplex-json", KEY)
    assert parser.transaction_size(krec(DOC_INSERT)) == 11
    assert meta_idx(json.loads(DOC_INSERT)["meta"]) == (1, 11)


def test_doc_insert_needs_a_configured_key():
    with pytest.raises(ParseError) as err:
        parse(DOC_INSERT)
    assert err.value.field == "primary_key" and str(err.value) == (
        "shareplex-json: field 'primary_key': no primary key: set primary_key for the source or send Kafka keys")


def test_doc_update_key_is_what_shareplex_sends():
    """``key`` holds the before values of the columns SharePlex keys on (here five, CNTR_NO among
    them, which the update changes); ``data`` only the changed column."""
    c = one(DOC_UPDATE)
    assert c.op == "update"
    assert c.primary_key == ["MIO_LOG_ID", "PLNMIO_REC_ID", "POL_CODE", "CNTR_TYPE", "CNTR_NO"]
    assert c.before == {"MIO_LOG_ID": "32537893", "PLNMIO_REC_ID": "31557806", "POL_CODE": None, "CNTR_TYPE": None,
                        "CNTR_NO": "1171201606syui26"}
    assert c.after == {"MIO_LOG_ID": "32537893", "PLNMIO_REC_ID": "31557806", "POL_CODE": None, "CNTR_TYPE": None,
                       "CNTR_NO": "1171201606"}
    assert c.source_position == ()  # no scn in the sample: Kafka order only
    assert c.source_ts_ms == 1497627493000
    assert (c.tx_id, c.tx_seq) == (None, None)
    # POL_CODE and CNTR_TYPE are null: the pipeline quarantines such a key unless one is configured
    configured = one(DOC_UPDATE, **KEY)
    assert configured.primary_key == ["MIO_LOG_ID"] and configured.after == c.after


def test_doc_update_applies_as_partial_image():
    """Neither record has an scn, so both keep their Kafka order (insert at offset 0 first)."""
    insert = {"meta": {"op": "ins", "table": "CL_BIZ1.MIO_LOG"},
              "data": {"MIO_LOG_ID": "32537893", "PLNMIO_REC_ID": "31557806", "POL_CODE": None, "CNTR_TYPE": None,
                       "CNTR_NO": "1171201606syui26", "MEMO": "kept"}}
    pairs = [(krec(insert, offset=0), one(insert, **KEY)), (krec(DOC_UPDATE, offset=1), one(DOC_UPDATE, **KEY))]
    state = apply_changes(pairs)
    assert state["CL_BIZ1.MIO_LOG"] == {("32537893",): {
        "MIO_LOG_ID": "32537893", "PLNMIO_REC_ID": "31557806", "POL_CODE": None, "CNTR_TYPE": None,
        "CNTR_NO": "1171201606", "MEMO": "kept"}}


def test_doc_delete():
    with pytest.raises(ParseError) as err:
        parse(DOC_DELETE_AS_SENT, **KEY)
    assert err.value.field == "meta.table" and "missing table" in str(err.value)
    c = one(DOC_DELETE, **KEY)
    assert c.op == "delete" and c.after is None
    assert c.before == {"MIO_LOG_ID": "32539739", "PLNMIO_REC_ID": "31557806", "POL_CODE": None, "CNTR_TYPE": None,
                        "CG_NO": None}
    assert c.primary_key == ["MIO_LOG_ID"]
    assert (c.source_schema, c.source_table, c.source_ts_ms, c.source_position) == (
        "CL_BIZ1", "MIO_LOG", 1497628295000, ())
    with pytest.raises(ParseError) as err:
        parse(DOC_DELETE)
    assert err.value.field == "primary_key"


# --- operations -------------------------------------------------------------------------------

def with_meta(doc: str, **meta) -> dict:
    """A sample as a dict with ``meta`` fields replaced."""
    obj = json.loads(doc)
    obj["meta"].update(meta)
    return obj


@pytest.mark.parametrize("op, kind", [
    ("ins", "insert"), ("INSERT", "insert"), ("Insert", "insert"),
    ("upd", "update"), ("UPDATE", "update"), ("UPDATE AFTER", "update"), ("update_after", "update"),
    ("del", "delete"), ("DELETE", "delete"),
])
def test_row_operations(op, kind):
    base = {"insert": DOC_INSERT, "update": DOC_UPDATE, "delete": DOC_DELETE}[kind]
    assert one(with_meta(base, op=op), **KEY).op == kind


def test_update_after_with_full_row_and_no_key_object():
    value = {"meta": {"op": "UPDATE AFTER", "table": "S.T", "scn": "100", "seq": 2},
             "data": {"ID": "1", "A": "new", "B": None}}
    c = one(value, primary_key=["ID"])
    assert c.op == "update" and c.before is None and c.after == {"ID": "1", "A": "new", "B": None}
    assert one(value, key={"ID": "1"}).primary_key == ["ID"]  # a JSON Kafka key gives the key columns
    with pytest.raises(ParseError) as err:
        parse(value, primary_key=["OTHER"])
    assert err.value.field == "key" and "OTHER" in str(err.value)


def test_update_before_is_counted_not_applied():
    value = {"meta": {"op": "UPDATE BEFORE", "table": "S.T", "scn": "100", "seq": 1}, "data": {"ID": "1", "A": "old"}}
    result = parse(value)
    assert isinstance(result, ControlRecord) and result.kind == "metadata"
    assert (result.source_schema, result.source_table) == ("S", "T") and result.detail.startswith("UPDATE BEFORE")


def test_drop_column_is_ddl():
    result = parse({"meta": {"op": "DROP COLUMN", "table": "CL_BIZ1.MIO_LOG", "scn": "7"}, "data": {"CG_NO": None}})
    assert result == ControlRecord("ddl", "shareplex-json", None, "CL_BIZ1", "MIO_LOG", 'DROP COLUMN {"CG_NO":null}')


def test_truncate():
    c = one({"meta": {"op": "TRUNCATE", "table": "CL_BIZ1.MIO_LOG", "scn": "14589063118999", "seq": 1,
                      "trans": "3.1.9"}})
    assert c.op == "truncate" and c.before is None and c.after is None and c.primary_key == []
    assert c.source_position == (14589063118999, 1) and c.tx_id == "3.1.9"


@pytest.mark.parametrize("value", [None, b""])
def test_tombstone(value):
    assert get_parser("shareplex-json").parse(KafkaRecord("t", 0, 0, 0, None, value)).kind == "tombstone"


# --- table names, positions, transactions, times ----------------------------------------------

@pytest.mark.parametrize("name, parts", [
    ("CL_BIZ1.MIO_LOG", ("CL_BIZ1", "MIO_LOG")),
    ("MIO_LOG", (None, "MIO_LOG")),
    ('"MY.SCHEMA"."MY.TABLE"', ("MY.SCHEMA", "MY.TABLE")),
    ('S."T.X"', ("S", "T.X")),
    ('"A""B".T', ('A"B', "T")),
    ("DB.S.T", ("DB", "S.T")),
])
def test_split_table(name, parts):
    assert split_table(name) == parts


@pytest.mark.parametrize("name", [".T", "S.", '"S.T', '""'])
def test_bad_table_names(name):
    with pytest.raises(ParseError) as err:
        parse(with_meta(DOC_INSERT, table=name), **KEY)
    assert err.value.field == "meta.table"


def test_scn_beyond_64_bits_and_order():
    big = one(with_meta(DOC_INSERT, scn="123456789012345678901234567890", seq=3), **KEY)
    assert big.source_position == (123456789012345678901234567890, 3)
    a = one(with_meta(DOC_INSERT, scn="99", seq=7), **KEY)
    b = one(with_meta(DOC_INSERT, scn="100", seq=1), **KEY)
    assert a.source_position < b.source_position  # numbers, not text: "99" > "100" as text
    assert one(with_meta(DOC_INSERT, scn=14589063118712), **KEY).source_position == (14589063118712, 1)


def test_seq_and_size_from_idx():
    value = json.loads(DOC_INSERT)
    del value["meta"]["seq"], value["meta"]["size"]
    value["meta"]["idx"] = "4/9"
    c = one(value, **KEY)
    assert c.tx_seq == 4 and c.source_position == (14589063118712, 4)
    assert get_parser("shareplex-json", KEY).transaction_size(krec(value)) == 9
    del value["meta"]["idx"]
    c = one(value, **KEY)
    assert c.tx_seq is None and c.source_position == (14589063118712, 0)
    assert get_parser("shareplex-json").transaction_size(krec(value)) is None


@pytest.mark.parametrize("text, ms", [
    ("2017-06-16T14:24:34", 1497623074000), ("2017-06-16T14:24:34Z", 1497623074000),
    ("2017-06-16T14:24:34.250Z", 1497623074250), ("2017-06-16T16:24:34+02:00", 1497623074000),
])
def test_commit_time(text, ms):
    assert one(with_meta(DOC_INSERT, time=text), **KEY).source_ts_ms == ms


def test_no_time_no_ts():
    value = json.loads(DOC_INSERT)
    del value["meta"]["time"]
    assert one(value, **KEY).source_ts_ms is None


# --- values and keys --------------------------------------------------------------------------

def test_values_untyped_and_configured():
    value = {"meta": {"op": "ins", "table": "PHUNT.ROCK_BAND", "scn": "5", "seq": 1},
             "data": {"BAND_NAME": "Rush", "YEAR_START": 1974, "SORTED": "2024-05-24T15:58:48.000000000",
                      "RATING": "4.5", "ACTIVE": "1", "BORN": "1974-01-01T00:00:00", "LOGO": "AQID", "NOTE": None}}
    plain = one(value, primary_key=["BAND_NAME"])
    assert plain.after == {"BAND_NAME": "Rush", "YEAR_START": "1974", "SORTED": "2024-05-24T15:58:48.000000000",
                           "RATING": "4.5", "ACTIVE": "1", "BORN": "1974-01-01T00:00:00", "LOGO": "AQID", "NOTE": None}
    types = {"YEAR_START": "int", "PHUNT.ROCK_BAND": {"SORTED": "timestamp", "RATING": "decimal(4,2)",
                                                      "ACTIVE": "boolean", "BORN": "date", "LOGO": "binary"},
             "OTHER.T": {"BAND_NAME": "int"}}
    typed = one(value, primary_key=["BAND_NAME"], column_types=types)
    assert typed.after == {"BAND_NAME": "Rush", "YEAR_START": "1974", "SORTED": "2024-05-24 15:58:48",
                           "RATING": "4.50", "ACTIVE": "true", "BORN": "1974-01-01", "LOGO": "AQID", "NOTE": None}
    assert typed.column_types == {"YEAR_START": "int", "SORTED": "timestamp", "RATING": "decimal(4,2)",
                                  "ACTIVE": "boolean", "BORN": "date", "LOGO": "binary"}


def test_primary_key_resolution_order():
    update = json.loads(DOC_UPDATE)
    assert one(update, key={"PLNMIO_REC_ID": "1"}).primary_key[0] == "MIO_LOG_ID"  # "key" beats the Kafka key
    assert one(update, primary_keys={"CL_BIZ1.MIO_LOG": ["PLNMIO_REC_ID"]}, **KEY).primary_key == ["PLNMIO_REC_ID"]
    assert one(DOC_INSERT, key={"MIO_LOG_ID": "32539737"}).primary_key == ["MIO_LOG_ID"]
    with pytest.raises(ParseError, match="no primary key"):
        parse(DOC_INSERT, key=b"CL_BIZ1.MIO_LOG")  # a key that is not a JSON object is not used


def test_delete_keyed_from_kafka_key():
    value = {"meta": {"op": "del", "table": "S.T", "scn": "9", "seq": 1}, "data": {"NAME": "x"}}
    assert one(value, key={"ID": 5}).before == {"NAME": "x", "ID": "5"}
    with pytest.raises(ParseError) as err:
        parse(value, primary_key=["ID"])
    assert err.value.field == "data" and "key column(s) ID" in str(err.value)


# --- errors -----------------------------------------------------------------------------------

@pytest.mark.parametrize("value, field, words", [
    ('{"meta": {"op": "ins"', "value", "not valid JSON"),
    ("[1]", "value", "not an object"),
    (b"\xff", "value", "not UTF-8"),
    ({"data": {"MIO_LOG_ID": "1"}}, "meta", "missing meta"),
    ({"meta": "ins"}, "meta", "not an object"),
    (with_meta(DOC_INSERT, op=None), "meta.op", "missing operation"),
    (with_meta(DOC_INSERT, op=""), "meta.op", "missing operation"),
    (with_meta(DOC_INSERT, op="merge"), "meta.op", "unknown operation 'merge'"),
    (with_meta(DOC_INSERT, op=1), "meta.op", "missing operation"),
    (with_meta(DOC_INSERT, table=None), "meta.table", "missing table"),
    (with_meta(DOC_INSERT, table=7), "meta.table", "missing table"),
    (with_meta(DOC_INSERT, scn="14589063118712.5"), "meta.scn", "not a non-negative integer"),
    (with_meta(DOC_INSERT, scn="1" * 39), "meta.scn", "out of range"),
    (with_meta(DOC_INSERT, seq="first"), "meta.seq", "not a non-negative integer"),
    (with_meta(DOC_INSERT, size=-1), "meta.size", "out of range"),
    ({"meta": {"op": "ins", "table": "S.T", "scn": "1", "idx": "1 of 11"}, "data": {"MIO_LOG_ID": "1"}}, "meta.idx",
     "not seq/size"),
    (with_meta(DOC_INSERT, time="16/06/2017"), "meta.time", "cannot read commit time"),
    (with_meta(DOC_INSERT, time=1497623074), "meta.time", "cannot read commit time"),
    ({"meta": {"op": "ins", "table": "S.T"}, "data": ["1"]}, "data", "not an object"),
    ({"meta": {"op": "ins", "table": "S.T"}}, "data", "insert carries no row"),
    ({"meta": {"op": "upd", "table": "S.T"}, "data": {"A": "1"}, "key": ["1"]}, "key", "not an object"),
])
def test_errors_name_format_and_field(value, field, words):
    with pytest.raises(ParseError) as err:
        parse(value, **KEY)
    assert err.value.format == "shareplex-json" and err.value.field == field
    assert str(err.value).startswith(f"shareplex-json: field '{field}': ") and words in str(err.value)


def test_bad_value_for_configured_type_names_column():
    with pytest.raises(ParseError) as err:
        parse(DOC_INSERT, column_types={"MIO_LOG_ID": "date"}, **KEY)
    assert err.value.field == "data.MIO_LOG_ID" and "cannot read '32539737'" in str(err.value)
    with pytest.raises(ParseError) as err:
        parse(DOC_UPDATE, column_types={"CNTR_NO": "bigint"})  # the new value fits, the old one does not
    assert err.value.field == "key.CNTR_NO" and "1171201606syui26" in str(err.value)


def test_parser_is_picklable():
    parser = get_parser("shareplex-json", {"primary_key": ["MIO_LOG_ID"], "column_types": {"MIO_LOG_ID": "bigint"}})
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.parse(krec(DOC_INSERT)) == parser.parse(krec(DOC_INSERT))


# --- the simulated shop rendered as SharePlex JSON (round trip: test_round_trip.py) ----------

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def source() -> SimulatedSource:
    return SimulatedSource(seed=31, start=START, hours=2)


@pytest.fixture(scope="module")
def messages(source):
    return shareplex_json(source.run(), source.tables)


def test_rendered_messages_shape(source, messages):
    history = source.run()
    assert len(messages) == sum(len(tx.changes) for tx in history) and all(m.rows == 1 for m in messages)
    assert all(m.timestamp_ms >= p.timestamp_ms for p, m in zip(messages, messages[1:]))
    assert all(source.start_ms <= m.timestamp_ms < source.end_ms for m in messages)
    docs = [json.loads(m.value) for m in messages]
    assert {d["meta"]["op"] for d in docs} == {"ins", "upd", "del"}
    for d in docs:
        values = [*d["data"].values(), *d.get("key", {}).values()]
        assert all(v is None or isinstance(v, str) for v in values)
        assert d["meta"]["idx"] == f"{d['meta']['seq']}/{d['meta']['size']}" and len(d["meta"]["rowid"]) == 18
        if d["meta"]["op"] == "upd":
            name = d["meta"]["table"].split(".", 1)[1]
            assert set(d["key"]) == set(source.tables[name].primary_key)
            assert len(d["data"]) < len(source.tables[name].columns)  # only the changed columns
        else:
            assert "key" not in d
    scns = [int(d["meta"]["scn"]) for d in docs]
    assert scns == sorted(scns)
