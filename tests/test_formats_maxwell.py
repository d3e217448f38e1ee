"""Tests of the ``maxwell-json`` parser and the simulated shop rendered as Maxwell JSON.

Vectors: the messages of Maxwell's documentation (verbatim in ``samples/maxwell/``, see its
README). How each became the record asserted on, every field the document shows kept:

- *INSERT*, *CREATE TABLE*, *ALTER TABLE*: valid JSON as printed; asserted unchanged.
- *UPDATE*, *DELETE*: a line ``...`` stands for fields the page leaves out; that line is removed
  (:data:`DOC_UPDATE`, :data:`DOC_DELETE`). The remaining records carry no ``position``.
- *datetime*, *sets*: printed after a ``<maxwell`` prompt, which is removed.
- The bootstrapping example: one record per line, as printed.

Then records derived from those (fields changed as each test says) and the shape of
:func:`cdclake.sim.render_maxwell.maxwell_json`'s messages (its round trip through the parser
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

from cdclake.formats import get_parser, parse_all
from cdclake.formats.maxwell import BOOTSTRAP_POSITION, NO_POSITION_REASON, kafka_key
from cdclake.record import ChangeRecord, ControlRecord, ParseError
from cdclake.sim.render_maxwell import maxwell_json
from cdclake.sim.source import SimulatedSource

FMT = "maxwell-json"
parse = functools.partial(helpers.parse, FMT)
one = functools.partial(helpers.one, FMT)
parse_error = functools.partial(helpers.parse_error, FMT)
KAFKA_ORDER = {"without_position": "kafka-order"}
QUARANTINE = {"without_position": "quarantine"}

DOC_INSERT = sample("maxwell", "insert.json")
DOC_UPDATE_AS_PRINTED = sample("maxwell", "update.as-printed.txt")
DOC_DELETE_AS_PRINTED = sample("maxwell", "delete.as-printed.txt")
DOC_UPDATE = re.sub(r"\n\s*\.\.\.\n", "\n", DOC_UPDATE_AS_PRINTED)
DOC_DELETE = re.sub(r"\n\s*\.\.\.\n", "\n", DOC_DELETE_AS_PRINTED)
DOC_CREATE = sample("maxwell", "table-create.json")
DOC_ALTER = sample("maxwell", "table-alter.json")
DOC_DATETIME = sample("maxwell", "datetime.as-printed.txt").removeprefix("<maxwell")
DOC_SETS = sample("maxwell", "sets.as-printed.txt").removeprefix("<maxwell")
DOC_BOOTSTRAP = sample("maxwell", "bootstrap-stream.jsonl").splitlines()


def test_samples_as_printed():
    json.loads(DOC_INSERT)
    for printed in (DOC_UPDATE_AS_PRINTED, DOC_DELETE_AS_PRINTED):
        with pytest.raises(ValueError):
            json.loads(printed)
        assert parse_error(printed).field == "value"
    assert set(json.loads(DOC_UPDATE)) == {"database", "table", "type", "ts", "data", "old"}
    assert set(json.loads(DOC_DELETE)) == {"database", "table", "type", "data"}


def test_doc_insert():
    c = one(DOC_INSERT)
    assert (c.source_format, c.source_database, c.source_schema, c.source_table, c.op) == (
        FMT, "test", None, "e", "insert")
    assert c.before is None
    assert c.after == {"id": "1", "m": "4.2341", "c": "2016-10-21 05:33:37.523000",
                       "comment": "I am a creature of light."}
    assert c.primary_key == ["id", "c"]  # primary_key_columns
    assert c.column_types == {}
    assert c.source_position == (6, 800911, 1, 0)  # master.000006:800911, the commit row
    assert c.source_ts_ms == 1477053217000
    assert (c.tx_id, c.tx_seq, c.tx_last) == ("23396", None, True)


def test_doc_insert_typed():
    c = one(DOC_INSERT, column_types={"e": {"id": "int", "m": "double", "c": "timestamp"}})
    assert c.after == {"id": "1", "m": "4.2341", "c": "2016-10-21 05:33:37.523000", "comment": "I am a creature of light."}
    assert c.column_types == {"id": "int", "m": "double", "c": "timestamp"}


def test_doc_update_and_delete_without_position_keep_the_kafka_order_by_default():
    """Maxwell as it ships sends no ``position`` (``output_binlog_position`` is off): with no option
    set the rows get the empty position (their Kafka order, ``without_position: kafka-order``);
    under ``without_position: quarantine`` they are quarantined naming the option to set, as the
    pipeline file spells it."""
    for doc in (DOC_UPDATE, DOC_DELETE):
        err = parse_error(doc, primary_key=["id"], **QUARANTINE)
        assert err.field == "position" and str(err) == f"{FMT}: field 'position': {NO_POSITION_REASON}"
        assert "set sources[].options.without_position: kafka-order" in NO_POSITION_REASON
        assert one(doc, primary_key=["id"]) == one(doc, primary_key=["id"], **KAFKA_ORDER)
    u = one(DOC_UPDATE, primary_key=["id"])
    assert u.op == "update" and u.source_position == ()
    assert u.after == {"id": "1", "m": "5.444", "c": "2016-10-21 05:33:54.631000", "comment": "I am a creature of light."}
    # data.merge(old): the before image
    assert u.before == {"id": "1", "m": "4.2341", "c": "2016-10-21 05:33:37.523000",
                        "comment": "I am a creature of light."}
    assert u.source_ts_ms == 1477053234000 and (u.tx_id, u.tx_seq, u.tx_last) == (None, None, None)
    d = one(DOC_DELETE, primary_key=["id"])
    assert d.op == "delete" and d.after is None and d.source_ts_ms is None
    assert d.before == u.after


def test_doc_update_and_delete_apply_in_kafka_order():
    """Under ``without_position: kafka-order`` the records without a position keep their Kafka
    order; the insert is taken without its ``position`` (a row with one would sort after them)."""
    insert = {k: v for k, v in json.loads(DOC_INSERT).items() if k != "position"}
    with_position = one(DOC_INSERT, **KAFKA_ORDER)
    assert with_position.source_position > one(DOC_UPDATE, primary_key=["id"], **KAFKA_ORDER).source_position
    pairs = [(krec(doc, offset=i), one(doc, primary_key=["id"], **KAFKA_ORDER))
             for i, doc in enumerate((insert, DOC_UPDATE))]
    state = apply_changes(pairs)
    assert state["test.e"] == {("1",): {"id": "1", "m": "5.444", "c": "2016-10-21 05:33:54.631000",
                                        "comment": "I am a creature of light."}}
    pairs.append((krec(DOC_DELETE, offset=2), one(DOC_DELETE, primary_key=["id"], **KAFKA_ORDER)))
    assert apply_changes(pairs)["test.e"] == {}


def test_doc_ddl():
    create, alter = parse(DOC_CREATE), parse(DOC_ALTER)
    assert create == ControlRecord("ddl", FMT, "test", None, "e", detail=json.loads(DOC_CREATE)["sql"])
    assert alter == ControlRecord("ddl", FMT, "test", None, "e",
                                  detail="alter table test.e add column torvalds bigint unsigned after m")
    for kind in ("table-drop", "database-create", "database-alter", "database-drop"):
        msg = {"type": kind, "database": "test", "sql": f"{kind} x", "ts": 1477053308000, "position": "m.1:4"}
        assert parse(msg) == ControlRecord("ddl", FMT, "test", None, None, detail=f"{kind} x")


def test_doc_column_types_datetime_and_sets():
    c = one(DOC_DATETIME, primary_key=["dtcol"], **KAFKA_ORDER)
    assert (c.source_database, c.source_table, c.after) == (None, "test_datetime", {"dtcol": "0000-00-00 00:00:00"})
    typed = one(DOC_DATETIME, primary_key=["dtcol"], column_types={"dtcol": "timestamp"}, **KAFKA_ORDER)
    assert typed.after == {"dtcol": None}  # MySQL's zero date, as the other formats read it
    s = one(DOC_SETS, primary_key=["setcol"], **KAFKA_ORDER)
    assert s.after == {"setcol": '["b_val","c_val"]'}


def test_doc_bootstrap_stream():
    """Two binlog inserts (no position in the example: quarantined under ``without_position:
    quarantine``), the bootstrap's start, its two rows (snapshot) and its end."""
    parser = get_parser(FMT, {"primary_key": ["txt"], **QUARANTINE})
    results = list(parse_all(parser, [krec(line, offset=i) for i, line in enumerate(DOC_BOOTSTRAP)]))
    kinds = [type(r).__name__ if not isinstance(r, list) else r[0].op for _, r in results]
    assert kinds == ["ParseError", "ParseError", "ControlRecord", "snapshot", "snapshot", "ControlRecord"]
    assert [r.detail for _, r in results if isinstance(r, ControlRecord)] == ["bootstrap-start", "bootstrap-complete"]
    assert {r.kind for _, r in results if isinstance(r, ControlRecord)} == {"metadata"}
    snap = results[3][1][0]
    assert (snap.after, snap.source_position, snap.source_ts_ms) == ({"txt": "hello"}, BOOTSTRAP_POSITION, None)
    ordered = list(parse_all(get_parser(FMT, {"primary_key": ["txt"]}),  # the default: kafka-order
                             [krec(line, offset=i) for i, line in enumerate(DOC_BOOTSTRAP)]))
    inserts = [r[0] for _, r in ordered if isinstance(r, list)]
    assert [(c.op, c.source_position, c.tx_id) for c in inserts] == [
        ("insert", (), "13"), ("insert", (), "13"), ("snapshot", (), None), ("snapshot", (), None)]
    # without a key (the example's table has none) every row is quarantined
    assert parse_error(DOC_BOOTSTRAP[3]).field == "primary_key"


# --- ordering ---------------------------------------------------------------------------------

ROW = {"database": "shop", "table": "t", "type": "insert", "ts": 1700000000, "xid": 77, "position": "mysql-bin.000009:120",
       "primary_key_columns": ["id"], "data": {"id": 1, "v": "a"}}


def _at(**fields) -> ChangeRecord:
    return one({**ROW, **fields})


def test_position_orders_by_file_offset_commit_xoffset():
    rows = [_at(position="mysql-bin.000010:4", xoffset=0), _at(position="mysql-bin.000009:999", xoffset=5),
            _at(position="mysql-bin.000009:120", commit=True), _at(position="mysql-bin.000009:120", xoffset=1),
            _at(position="mysql-bin.000009:120", xoffset=0)]
    assert [c.source_position for c in sorted(rows, key=lambda c: c.source_position)] == [
        (9, 120, 0, 0), (9, 120, 0, 1), (9, 120, 1, 0), (9, 999, 0, 5), (10, 4, 0, 0)]
    assert [(c.tx_seq, c.tx_last) for c in rows] == [(0, False), (5, False), (None, True), (1, False), (0, False)]
    assert _at(xid=None).tx_last is None and _at(xid=None).tx_id is None


def test_position_wins_over_kafka_order_and_ts():
    """A later change delivered first (and stamped with an older ``ts``) still applies last."""
    insert = {**ROW, "position": "mysql-bin.000009:120", "data": {"id": 1, "v": "a"}}
    update = {**ROW, "type": "update", "position": "mysql-bin.000009:500", "ts": 1600000000,
              "data": {"id": 1, "v": "b"}, "old": {"v": "a"}}
    pairs = [(krec(update, offset=0), one(update)), (krec(insert, offset=1), one(insert))]
    assert apply_changes(pairs)["shop.t"] == {("1",): {"id": "1", "v": "b"}}


def test_bootstrap_rows_sort_before_binlog_changes():
    snap = _at(type="bootstrap-insert", position=None, xid=None)
    assert snap.op == "snapshot" and snap.source_position == () < _at().source_position
    snap = one({**ROW, "type": "bootstrap-insert", "position": None, "xid": None}, **QUARANTINE)
    assert snap.source_position == BOOTSTRAP_POSITION < _at().source_position
    update = {**ROW, "type": "update", "data": {"id": 1, "v": "new"}, "old": {"v": "a"}}
    pairs = [(krec(update, offset=0), one(update)),
             (krec({**ROW, "type": "bootstrap-insert", "data": {"id": 1, "v": "old"}}, offset=1),
              one({**ROW, "type": "bootstrap-insert", "data": {"id": 1, "v": "old"}}))]
    assert apply_changes(pairs)["shop.t"] == {("1",): {"id": "1", "v": "new"}}


# --- images -----------------------------------------------------------------------------------


def test_update_old_holds_only_changed_columns():
    c = one({**ROW, "type": "update", "data": {"id": 1, "v": "b", "w": 3}, "old": {"v": "a"}})
    assert c.before == {"id": "1", "v": "a", "w": "3"} and c.after == {"id": "1", "v": "b", "w": "3"}
    same = one({**ROW, "type": "update", "data": {"id": 1, "v": "b"}})  # Maxwell leaves out an empty old
    assert same.before == same.after == {"id": "1", "v": "b"}


def test_update_to_null_without_output_nulls():
    """With ``output_nulls=false`` a column set to NULL is missing from ``data`` and named in ``old``."""
    c = one({**ROW, "type": "update", "data": {"id": 1}, "old": {"v": "a"}})
    assert c.after == {"id": "1", "v": None} and c.before == {"id": "1", "v": "a"}


def test_key_change_keeps_the_old_key_in_before():
    c = one({**ROW, "type": "update", "data": {"id": 2, "v": "a"}, "old": {"id": 1}})
    assert c.before == {"id": "1", "v": "a"} and c.after == {"id": "2", "v": "a"}


def test_numbers_are_exact():
    """A DECIMAL's digits as Maxwell writes them, never through a binary float."""
    raw = json.dumps({**ROW, "data": {"id": 1, "amount": "@A", "small": "@S", "d": 0.1, "n": 10**30}})
    raw = raw.replace('"@S"', "1.0E-5")
    c = one(raw.replace('"@A"', "12345678901234567.89"))
    assert c.after == {"id": "1", "amount": "12345678901234567.89", "small": "0.000010", "d": "0.1",
                       "n": "1" + "0" * 30}
    typed = one(raw.replace('"@A"', "1234567890123456789.12"),
                column_types={"amount": "decimal(22,2)", "small": "double", "d": "float"})
    assert typed.after["amount"] == "1234567890123456789.12"
    assert typed.after["small"] == "1e-05" and typed.after["d"] == "0.1"


def test_json_and_binary_columns():
    c = one({**ROW, "data": {"id": 1, "doc": {"b": [1.5, {"x": None}], "a": True}, "blob": "AAE="}},
            column_types={"blob": "binary"})
    assert c.after["doc"] == '{"a":true,"b":[1.5,{"x":null}]}'
    assert c.after["blob"] == "AAE=" and c.column_types == {"blob": "binary"}


# --- primary key ------------------------------------------------------------------------------


def test_kafka_keys():
    assert kafka_key(b'{"database":"shop","table":"t","pk.id":5,"pk.org":"x"}') == {"id": 5, "org": "x"}
    assert kafka_key(b'["shop","t",[{"id":5},{"org":"x"}]]') == {"id": 5, "org": "x"}
    for raw in (b'{"database":"shop","table":"t","_uuid":"a-b"}', b"not json", b"[1]", b"", None, b'"x"',
                b'["shop","t",[5]]', b"\xff"):
        assert kafka_key(raw) is None, raw


def test_primary_key_precedence():
    msg = {k: v for k, v in ROW.items() if k != "primary_key_columns"}
    msg["data"] = {"ID": 1, "org": "x", "v": "a"}
    key = b'{"database":"shop","table":"t","pk.id":1}'
    assert one(msg, key).primary_key == ["ID"]  # Maxwell lower-cases key names: matched to the row's column
    assert one({**msg, "primary_key_columns": ["org"]}, key).primary_key == ["org"]
    assert one({**msg, "primary_key_columns": ["org"]}, key, primary_keys={"shop.t": ["v"]}).primary_key == ["v"]
    assert one(msg, b'["shop","t",[{"org":"x"}]]').primary_key == ["org"]
    assert parse_error(msg, b'{"database":"shop","table":"t","_uuid":"u"}').field == "primary_key"


def test_delete_completed_from_the_kafka_key():
    msg = {**ROW, "type": "delete", "data": {"v": "a"}}
    del msg["primary_key_columns"]
    c = one(msg, b'{"database":"shop","table":"t","pk.id":7}')
    assert c.before == {"v": "a", "id": "7"} and c.primary_key == ["id"]
    err = parse_error(msg, primary_key=["id"])
    assert err.field == "data" and "delete carries no value for key column(s) id" in str(err)


# --- malformed --------------------------------------------------------------------------------

BAD = [
    (b"not json", "value"), (b"[1]", "value"), (b'{"a":1} x', "value"), (b"\xff", "value"),
    ({**ROW, "type": None}, "type"), ({**ROW, "type": "upsert"}, "type"), ({**ROW, "type": 5}, "type"),
    ({**ROW, "database": 5}, "database"), ({**ROW, "table": None}, "table"), ({**ROW, "table": ""}, "table"),
    ({**ROW, "data": None}, "data"), ({**ROW, "data": [1]}, "data"), ({**ROW, "data": {"id": 1, "v": "a"}, "type": "update",
                                                                       "old": [1]}, "old"),
    ({**ROW, "primary_key_columns": "id"}, "primary_key_columns"), ({**ROW, "primary_key_columns": [1]}, "primary_key_columns"),
    ({k: v for k, v in ROW.items() if k != "primary_key_columns"}, "primary_key"),
    ({**ROW, "ts": "x"}, "ts"), ({**ROW, "ts": -1}, "ts"), ({**ROW, "ts": 1.5}, "ts"),
    ({**ROW, "xid": "x"}, "xid"), ({**ROW, "xoffset": -1}, "xoffset"), ({**ROW, "commit": "true"}, "commit"),
    ({**ROW, "position": "mysql-bin"}, "position"),
    ({**ROW, "position": "mysql-bin.x:5"}, "position"), ({**ROW, "position": "mysql-bin.000001:x"}, "position"),
    ({**ROW, "position": 5}, "position"),
]


@pytest.mark.parametrize("value, field", BAD, ids=[f"{i}-{f}" for i, (_, f) in enumerate(BAD)])
def test_malformed_records_name_format_and_field(value, field):
    err = parse_error(value)
    assert err.format == FMT and err.field == field, str(err)
    assert str(err).startswith(f"{FMT}: field '{field}': ")
    [(_, result)] = parse_all(get_parser(FMT), [krec(value)])
    assert isinstance(result, ParseError)


def test_a_row_without_position_is_quarantined_only_under_the_quarantine_option():
    for row in ({**ROW, "position": None}, {k: v for k, v in ROW.items() if k != "position"}):
        assert one(row).source_position == ()
        err = parse_error(row, **QUARANTINE)
        assert err.field == "position" and NO_POSITION_REASON in str(err)
        [(_, result)] = parse_all(get_parser(FMT, QUARANTINE), [krec(row)])
        assert isinstance(result, ParseError)


def test_typed_value_that_does_not_fit():
    err = parse_error({**ROW, "data": {"id": 1, "v": "abc"}}, column_types={"v": "int"})
    assert err.field == "data.v" and "cannot read 'abc'" in str(err)


def test_options():
    with pytest.raises(ValueError, match=r"^sources\[\]\.options\.without_position must be one of kafka-order, "
                                         r"quarantine, got 'guess'$"):
        get_parser(FMT, {"without_position": "guess"})
    assert get_parser(FMT).kafka_order and get_parser(FMT, {"without_position": None}).kafka_order
    parser = get_parser(FMT, {**KAFKA_ORDER, "primary_key": ["id"]})
    copy = pickle.loads(pickle.dumps(parser))
    assert copy.kafka_order and copy.parse(krec(DOC_UPDATE)) == parser.parse(krec(DOC_UPDATE))
    assert not get_parser(FMT, {"without_position": "quarantine"}).kafka_order
    assert isinstance(parse(b""), ControlRecord) and parse(b"").kind == "tombstone"


# --- the simulated shop -----------------------------------------------------------------------


def test_simulated_messages_have_maxwells_shape():
    src = SimulatedSource(seed=5, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=1)
    history = src.run()
    msgs = maxwell_json(history, src.tables, partitions=3)
    docs = [json.loads(m.value) for m in msgs]
    types = [d["type"] for d in docs]
    assert types[:3] == ["table-create"] * 3 and "table-alter" in types
    assert "bootstrap-start" in types and "bootstrap-complete" in types
    assert types.index("bootstrap-complete") < types.index("insert")
    assert sum(m.rows for m in msgs) == sum(len(tx.changes) for tx in history)
    rows = [d for d in docs if d["type"] in ("insert", "update", "delete")]
    assert all(("commit" in d) != ("xoffset" in d) for d in rows)
    assert all(re.fullmatch(r"mysql-bin\.[0-9]{6}:[0-9]+", d["position"]) for d in rows)
    assert all("position" not in d and "xid" not in d for d in docs if d["type"] == "bootstrap-insert")
    assert [m.timestamp_ms for m in msgs] == sorted(m.timestamp_ms for m in msgs)
    parser = get_parser(FMT)
    for m in msgs:
        result = parser.parse(krec(m.value, m.key))
        assert isinstance(result, ControlRecord) == (m.rows == 0)
