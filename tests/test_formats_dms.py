"""Tests of the ``aws-dms-json`` parser and the simulated shop rendered as AWS DMS messages.

Vectors: the message examples of "Using Apache Kafka as a target for AWS Database Migration
Service" (AWS DMS User Guide, *Message format for Apache Kafka* and *Using object mapping to
migrate data to a Kafka topic*), verbatim in ``samples/aws-dms/``:

- ``data-insert.json``: "a data type message with all additional metadata" (an insert with
  ``IncludeTransactionDetails`` and ``IncludePartitionValue``, ``partition-key-type``
  ``primary-key``);
- ``control-create-table.json``: "a control type message" (``create-table`` with
  ``IncludeControlDetails``);
- ``map-record-to-record.json``: the record the ``map-record-to-record`` example shows, the row
  alone, without the ``metadata`` block a message carries: refused (``metadata``).

Then records derived from those (fields changed as each test says), Apache Paimon's DMS test rows
(``BI_`` columns of the ``add-before-image-columns`` rule), and the shape of
:func:`cdclake.sim.render_dms.dms_json`'s messages (its round trip is in ``test_round_trip.py``).
"""
from __future__ import annotations

import copy
import functools
import json
import pickle

import helpers
import pytest
from helpers import krec, sample
from reference_model import apply_changes

from cdclake.formats import get_parser
from cdclake.formats.dms import AwsDmsJsonParser, operation_name
from cdclake.record import ControlRecord, KafkaRecord, parse_all

FMT = "aws-dms-json"
parse = functools.partial(helpers.parse, FMT)
one = functools.partial(helpers.one, FMT)
parse_error = functools.partial(helpers.parse_error, FMT)

DOC_DATA = sample("aws-dms", "data-insert.json")
DOC_CONTROL = sample("aws-dms", "control-create-table.json")
DOC_FLAT = sample("aws-dms", "map-record-to-record.json")
KEY = {"primary_key": ["id"]}
DATA = json.loads(DOC_DATA)


def msg(op: str = "insert", data=None, record_type: str = "data", **meta) -> dict:
    """A DMS message of table ``shop.t`` (the document's example's metadata, operation and row changed)."""
    m = copy.deepcopy(DATA)
    m["metadata"]["operation"] = op
    m["metadata"]["record-type"] = record_type
    m["metadata"].update(meta)
    m["metadata"] = {k: v for k, v in m["metadata"].items() if v is not None}
    if data is not None:
        m["data"] = data
    return m


# --- the document's examples ---------------------------------------------------------------


def test_document_data_message():
    """Every metadata field of the example: schema and table, transaction id and record id,
    commit time; ``timestamp``, partition and stream position not used; no position."""
    c = one(DOC_DATA, b"sbtest.sbtest_x.100000161", **KEY)
    assert (c.source_database, c.source_schema, c.source_table, c.op) == (None, "sbtest", "sbtest_x", "insert")
    assert c.before is None
    assert c.after == {"id": "100000161", "fname": "val61s", "lname": "val61s", "REGION": "val61s"}
    assert c.primary_key == ["id"] and c.column_types == {}
    assert (c.tx_id, c.tx_seq) == ("9324410911751", 1)
    assert c.source_ts_ms == 1572562435000  # commit-timestamp 2019-10-31T22:53:55Z, not timestamp
    assert c.source_position == ()


def test_document_data_message_typed_and_unformatted_alike():
    """``JSON_UNFORMATTED`` (one line) reads as ``JSON`` (indented); configured types apply."""
    opts = {**KEY, "column_types": {"sbtest_x": {"id": "bigint", "fname": "string"}}}
    indented = one(DOC_DATA, **opts)
    flat = one(json.dumps(DATA, separators=(",", ":")), **opts)
    assert indented == flat and indented.column_types == {"id": "bigint", "fname": "string"}


def test_document_control_message():
    r = parse(DOC_CONTROL, **KEY)
    assert isinstance(r, ControlRecord)
    assert (r.kind, r.source_schema, r.source_table) == ("ddl", "sbtest", "sbtest_t1")
    assert r.detail.startswith("create-table {") and '"primary-key":["id"]' in r.detail


def test_document_map_record_to_record_row_alone_is_refused():
    e = parse_error(DOC_FLAT, **KEY)
    assert (e.field, str(e)) == ("metadata", f"{FMT}: field 'metadata': missing metadata block")


def test_key_is_configured_or_a_json_kafka_key():
    """DMS's Kafka key is the partition value (here ``schema.table.<key value>``), which names
    no column: without a configured key the change is refused, a JSON object key is used."""
    e = parse_error(DOC_DATA, b"sbtest.sbtest_x.100000161")
    assert e.field == "primary_key"
    assert one(DOC_DATA, b'{"id": 100000161}').primary_key == ["id"]
    assert one(DOC_DATA, primary_keys={"sbtest.sbtest_x": ["fname", "lname"]}).primary_key == ["fname", "lname"]


# --- operations ----------------------------------------------------------------------------


@pytest.mark.parametrize("op, want", [("load", "snapshot"), ("insert", "insert"), ("update", "update"),
                                      ("delete", "delete"), ("create", "insert"), ("read", "snapshot"),
                                      ("LOAD", "snapshot"), (" Insert ", "insert")])
def test_data_operations(op, want):
    c = one(msg(op), **KEY)
    assert c.op == want
    row = {"id": "100000161", "fname": "val61s", "lname": "val61s", "REGION": "val61s"}
    if want == "delete":
        assert (c.before, c.after) == (row, None)
    else:
        assert (c.before, c.after) == (None, row)


@pytest.mark.parametrize("op", ["create-table", "rename-table", "drop-table", "change-columns", "add-column",
                                "drop-column", "rename-column", "column-type-change", "DropTable"])
def test_control_operations_are_ddl(op):
    r = parse(msg(op, record_type="control"), **KEY)
    assert isinstance(r, ControlRecord) and r.kind == "ddl" and r.source_table == "sbtest_x"


def test_other_control_records_are_metadata_and_may_name_no_table():
    r = parse({"metadata": {"record-type": "control", "operation": "restart", "schema-name": "",
                            "table-name": "", "partition-key-type": "task-id"}})
    assert isinstance(r, ControlRecord) and (r.kind, r.source_schema, r.source_table, r.detail) == (
        "metadata", None, None, "restart")


@pytest.mark.parametrize("op", ["truncate-table", "TruncateTable"])
def test_truncate_table_is_a_truncate(op):
    c = one({"metadata": {"record-type": "control", "operation": op, "schema-name": "s", "table-name": "t"}})
    assert (c.op, c.source_schema, c.source_table, c.before, c.after, c.primary_key) == (
        "truncate", "s", "t", None, None, [])


def test_operation_spellings():
    assert [operation_name(o) for o in ("TruncateTable", "DropTable", "add-column", " LOAD ")] == [
        "truncate-table", "drop-table", "add-column", "load"]


# --- before images --------------------------------------------------------------------------


def test_before_image_columns_of_the_transformation_rule():
    """``add-before-image-columns`` (prefix ``BI_``): ``BI_<col>`` of an update is the before
    value of ``<col>``; columns without a counterpart stay columns."""
    c = one(msg("update", {"id": 2, "fname": "b", "BI_id": 1, "BI_fname": "a", "BI_other": 3, "BI_": 4}), **KEY)
    assert c.after == {"id": "2", "fname": "b", "BI_other": "3", "BI_": "4"}
    assert c.before == {"id": "1", "fname": "a"}
    ins = one(msg("insert", {"id": 2, "BI_id": None}), **KEY)
    assert (ins.before, ins.after) == (None, {"id": "2"})


def test_before_image_affixes_are_options():
    data = {"id": 2, "id_old": 1, "BI_id": 9}
    c = one(msg("update", data), **KEY, before_image_prefix="", before_image_suffix="_old")
    assert (c.before, c.after) == ({"id": "1"}, {"id": "2", "BI_id": "9"})
    off = one(msg("update", data), **KEY, before_image_prefix="")
    assert (off.before, off.after) == (None, {"id": "2", "id_old": "1", "BI_id": "9"})


def test_before_image_field_of_before_image_settings():
    m = msg("update", {"id": 2, "fname": "b"})
    m["before-image"] = {"id": 1}
    c = one(m, **KEY, before_image_field="before-image")
    assert (c.before, c.after) == ({"id": "1"}, {"id": "2", "fname": "b"})
    e = parse_error(m, **KEY)  # not configured: not dropped unseen
    assert e.field == "before-image" and "before_image_field" in str(e)
    m["before-image"] = [1]
    assert parse_error(m, **KEY, before_image_field="before-image").field == "before-image"


@pytest.mark.parametrize("bad", [{"before_image_field": "data"}, {"before_image_field": 3},
                                 {"before_image_prefix": 1}, {"no_hex_prefix": "yes"}])
def test_malformed_options(bad):
    with pytest.raises(ValueError):
        get_parser(FMT, bad)


# --- values ---------------------------------------------------------------------------------


def test_values_untyped_and_typed():
    data = {"id": 1, "amount": "12.5", "w": 0.875, "ts": "2024-05-01T10:00:00.123456Z", "b": "0x0A0B", "n": None,
            "flag": True, "doc": {"a": [1]}}
    untyped = one(msg("insert", data), **KEY)
    assert untyped.after == {"id": "1", "amount": "12.5", "w": "0.875", "ts": "2024-05-01T10:00:00.123456Z",
                             "b": "0x0A0B", "n": None, "flag": "true", "doc": '{"a":[1]}'}
    types = {"id": "bigint", "amount": "decimal(12,2)", "w": "double", "ts": "timestamp", "b": "binary"}
    typed = one(msg("insert", data), **KEY, column_types=types)
    assert typed.after["amount"] == "12.50" and typed.after["ts"] == "2024-05-01 10:00:00.123456"
    assert typed.after["b"] == "Cgs=" and typed.column_types == types
    nohex = one(msg("insert", {**data, "b": "0a0b"}), **KEY, column_types=types, no_hex_prefix=True)
    assert nohex.after["b"] == "Cgs="


@pytest.mark.parametrize("value", ["0a0b", "0xZZ", "0x1", "x"])
def test_binary_values_that_are_not_hex_are_refused(value):
    e = parse_error(msg("insert", {"id": 1, "b": value}), **KEY, column_types={"b": "binary"})
    assert e.field == "data.b"


def test_absent_columns_stay_absent():
    """``IncludeNullAndEmpty`` false leaves NULL and empty columns out: absent, never guessed."""
    c = one(msg("update", {"id": 1}), **KEY)
    assert c.after == {"id": "1"}


# --- ordering --------------------------------------------------------------------------------


def test_order_is_the_kafka_order_never_the_timestamp():
    """Every change has position ``()``: a partition's offsets order it (the reference model and
    silver break ties by partition and offset); ``timestamp`` going backwards changes nothing."""
    changes = [msg("insert", {"id": 1, "v": "a"}, timestamp="2024-05-01T10:00:02Z"),
               msg("update", {"id": 1, "v": "b"}, timestamp="2024-05-01T10:00:01Z",
                   **{"transaction-id": 5, "transaction-record-id": 1}),
               msg("update", {"id": 1, "v": "c"}, timestamp="2024-05-01T10:00:00Z",
                   **{"transaction-id": 3, "transaction-record-id": 1})]
    parser = get_parser(FMT, KEY)
    records = [krec(m, offset=n) for n, m in enumerate(changes)]
    pairs = [(r, c) for r, out in parse_all(parser, records) for c in out]
    assert all(c.source_position == () for _, c in pairs)
    state = apply_changes(list(reversed(pairs)))
    assert state["sbtest.sbtest_x"][("1",)]["v"] == "c"  # the last offset, not the largest transaction id


# --- malformed input ------------------------------------------------------------------------


@pytest.mark.parametrize("value, field", [
    (b"not json", "value"), (b"[1]", "value"), (b'{"data": {}}', "metadata"),
    ({"data": {}, "metadata": [1]}, "metadata"),
    ({"metadata": {"operation": "insert", "table-name": "t"}, "data": {"id": 1}}, "metadata.record-type"),
    ({"metadata": {"record-type": "row", "operation": "insert", "table-name": "t"}, "data": {"id": 1}},
     "metadata.record-type"),
    ({"metadata": {"record-type": "data", "table-name": "t"}, "data": {"id": 1}}, "metadata.operation"),
    ({"metadata": {"record-type": "data", "operation": "merge", "table-name": "t"}, "data": {"id": 1}},
     "metadata.operation"),
    ({"metadata": {"record-type": "data", "operation": "create-table", "table-name": "t"}, "data": {"id": 1}},
     "metadata.operation"),
    ({"metadata": {"record-type": "data", "operation": "insert"}, "data": {"id": 1}}, "metadata.table-name"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": 5}, "data": {"id": 1}},
     "metadata.table-name"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": "t", "schema-name": 1},
      "data": {"id": 1}}, "metadata.schema-name"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": "t"}}, "data"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": "t"}, "data": [1]}, "data"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": "t"}, "data": {"x": 1}}, "data"),
    ({"metadata": {"record-type": "data", "operation": "delete", "table-name": "t"}, "data": {"x": 1}}, "data"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": "t", "transaction-id": 1.5},
      "data": {"id": 1}}, "metadata.transaction-id"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": "t", "transaction-record-id": -1},
      "data": {"id": 1}}, "metadata.transaction-record-id"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": "t", "commit-timestamp": "x"},
      "data": {"id": 1}}, "metadata.commit-timestamp"),
    ({"metadata": {"record-type": "data", "operation": "insert", "table-name": "t"}, "data": {"id": 1},
      "extra": 1}, "extra"),
    ({"metadata": {"record-type": "control", "operation": "truncate-table"}}, "metadata.table-name"),
])
def test_malformed_records_are_parse_errors(value, field):
    e = parse_error(value, **KEY)
    assert e.field == field and str(e).startswith(f"{FMT}: field '{field}'"), str(e)


def test_delete_key_from_a_json_kafka_key():
    c = one(msg("delete", {"x": 1}), b'{"id": 7}', **KEY)
    assert c.before == {"x": "1", "id": "7"}


def test_parser_pickles_and_reads_alike():
    parser = AwsDmsJsonParser(KEY)
    rec = KafkaRecord("t", 0, 0, 0, None, DOC_DATA.encode())
    assert pickle.loads(pickle.dumps(parser)).parse(rec) == parser.parse(rec)


# --- Apache Paimon's DMS rows -----------------------------------------------------------------


def test_paimon_update_with_before_image_columns(paimon_dms_lines):
    """``aws-dms-data-3.txt``: the update of 105 carries ``BI_`` columns for every column."""
    parser = get_parser(FMT, KEY)
    changes = [c for n, line in enumerate(paimon_dms_lines(3))
               for c in parser.parse(krec(line.encode(), offset=n))]
    update = next(c for c in changes if c.op == "update")
    assert update.after["address"] == "Beijing" and update.before["address"] == "Shanghai"
    assert not any(k.startswith("BI_") for k in update.after)
    assert [c.op for c in changes] == ["insert", "delete", "update", "insert"]


@pytest.fixture
def paimon_dms_lines():
    from conftest import CONFORMANCE, json_lines

    def lines(n: int) -> list[str]:
        path = CONFORMANCE / "paimon" / "kafka" / "aws-dms" / "table" / "schemaevolution" / f"aws-dms-data-{n}.txt"
        if not path.exists():
            pytest.fail(f"conformance data not found: {path} (the shared conformance folder is read in place)", pytrace=False)
        return [v.decode() if isinstance(v, bytes) else v for v in json_lines(path)]
    return lines


# --- the simulator's messages -----------------------------------------------------------------


def test_simulated_messages_shape():
    import datetime as dt

    from cdclake.sim import SimulatedSource
    from cdclake.sim.render_dms import dms_json

    src = SimulatedSource(seed=3, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=1)
    messages = dms_json(src.run(), src.tables, partitions=3)
    docs = [json.loads(m.value) for m in messages]
    kinds = {(d["metadata"]["record-type"], d["metadata"]["operation"]) for d in docs}
    assert {("control", "create-table"), ("data", "load"), ("data", "insert"), ("data", "update")} <= kinds
    by_table = {}
    for m, d in zip(messages, docs):
        by_table.setdefault(d["metadata"]["table-name"], set()).add(m.partition)
    assert all(len(p) == 1 for p in by_table.values())  # schema-table: one partition per table
    data = [d for d in docs if d["metadata"]["record-type"] == "data" and d["metadata"]["operation"] != "load"]
    links = [(d["metadata"]["transaction-id"], d["metadata"]["transaction-record-id"]) for d in data]
    assert [(d["metadata"]["prev-transaction-id"], d["metadata"]["prev-transaction-record-id"])
            for d in data[1:]] == links[:-1]
