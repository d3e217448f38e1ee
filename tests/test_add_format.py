"""Adding a format as "Add a format in five steps" in docs/development.md says, with a small test-only format.

``mini-json`` follows no vendor document: each Kafka value is one JSON object ``{"op": "insert" |
"update" | "delete" | "ddl", "table": "[db.]table", "key": [columns], "before": {...}, "after":
{...}, "seq": n, "ts": ms, "sql": "..."}``. Its parser derives from the template
(:class:`cdclake.formats.base.FormatParser`), fills in the hooks with the shared readers, and is
added to a copy of the closed list (``FORMATS``, patched for the test only): then ``get_parser``
builds it and ``parse_all`` reads inserts, updates, deletes and control records and turns bad input
into :class:`ParseError` rows naming the field, as for the shipped formats.
"""
from __future__ import annotations

import json
import pickle
from typing import Optional

import pytest
from helpers import sample

from cdclake.formats import FORMATS, ParseError, formats, get_parser, parse_all
from cdclake.formats.base import ConfiguredTypes, Event, FormatParser
from cdclake.formats.fields import element, table_name
from cdclake.formats.json_values import load_json
from cdclake.formats.options import key_delete_image, resolve_primary_key
from cdclake.formats.text import convert_image
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseResult

FMT = "mini-json"
OPS = {"insert": "insert", "update": "update", "delete": "delete"}


class MiniJsonParser(FormatParser):
    """Parser of ``mini-json`` (see the module docstring): one change per record, or a ``ddl`` control
    record; the key is the configured one, else ``key``; position ``(seq,)``; ``ts`` in ms."""

    format_name = FMT

    def decode(self, record: KafkaRecord) -> Event:
        return Event(record, load_json(FMT, record.value))

    def control(self, event: Event) -> Optional[ParseResult]:
        op = event.message.get("op")
        if op == "ddl":
            return ControlRecord("ddl", FMT, detail=event.message.get("sql"))
        if op not in OPS:
            raise ParseError(FMT, f"unknown operation {op!r}", "op")
        event.op = OPS[op]
        return None

    def table(self, event: Event) -> None:
        database, _, event.table = table_name(FMT, event.message.get("table"), "table").rpartition(".")
        event.database = database or None

    def column_types(self, event: Event) -> None:
        plan = self.kept((event.database, event.table), ConfiguredTypes, self.options, event.database, None,
                         event.table)
        event.types, event.convert = dict(plan.types), plan.convert

    def images(self, event: Event) -> None:
        event.before = convert_image(FMT, event.message.get("before"), event.convert, "before")
        event.after = convert_image(FMT, event.message.get("after"), event.convert, "after")
        if event.op != "delete" and event.after is None:
            raise ParseError(FMT, f"{event.op} has no after image", "after")

    def primary_key(self, event: Event) -> None:
        event.primary_key = resolve_primary_key(
            FMT, self.options.key_override(event.database, None, event.table), event.message.get("key"), None)
        if event.op == "delete":
            event.before = key_delete_image(FMT, event.primary_key, event.before, None, "before",
                                            "the deleted row must carry its key")

    def position(self, event: Event) -> None:
        event.position = (element(FMT, event.message.get("seq"), "seq"),)
        event.ts_ms = element(FMT, event.message.get("ts"), "ts", null=None)


@pytest.fixture
def mini(monkeypatch):
    """``mini-json`` in the closed list for this test only."""
    monkeypatch.setitem(FORMATS, FMT, MiniJsonParser)
    return FMT


def rec(value, offset: int = 0) -> KafkaRecord:
    """A Kafka record of ``value`` (a JSON-able object, raw bytes, or None for a tombstone)."""
    data = value if isinstance(value, (bytes, type(None))) else json.dumps(value).encode()
    return KafkaRecord("mini", 0, offset, 0, None, data)


# step 4: the format's sample messages are files under tests/samples/<vendor>/
INSERT, UPDATE, DELETE, DDL = (json.loads(sample("mini", f"{name}.json")) for name in ("insert", "update", "delete", "ddl"))


def test_the_format_is_in_the_closed_list_only_while_patched(mini):
    assert mini in formats() and FORMATS[mini] is MiniJsonParser
    assert isinstance(get_parser(mini), FormatParser)


def test_the_closed_list_ships_without_it():
    assert FMT not in FORMATS


def test_inserts_updates_deletes_and_controls(mini):
    parser = get_parser(mini)
    (ins,) = parser.parse(rec(INSERT))
    assert ins == ChangeRecord(FMT, "shop", None, "customers", "insert", None, {"id": "1", "name": "Ann"}, ["id"],
                               {}, (7,), 1700000000000)
    (upd,) = parser.parse(rec(UPDATE))
    assert (upd.op, upd.before, upd.after, upd.source_position) == (
        "update", {"id": "1", "name": "Ann"}, {"id": "1", "name": "Anne"}, (8,))
    (dele,) = parser.parse(rec(DELETE))
    assert (dele.op, dele.before, dele.after, dele.source_ts_ms) == ("delete", {"id": "1"}, None, None)
    assert parser.parse(rec(DDL)) == ControlRecord("ddl", FMT, detail="ALTER TABLE customers ADD email text")
    assert parser.parse(rec(None)) == ControlRecord("tombstone", FMT)


def test_options_type_and_key_columns(mini):
    parser = get_parser(mini, {"column_types": {"id": "bigint"}, "primary_keys": {"shop.customers": ["name"]}})
    (ins,) = parser.parse(rec(INSERT))
    assert ins.column_types == {"id": "bigint"} and ins.primary_key == ["name"]
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.parse(rec(INSERT)) == parser.parse(rec(INSERT))


BAD = [
    (b"{not json", "value"),
    ({"op": "merge", "table": "t", "seq": 1}, "op"),
    ({"op": "insert", "after": {"id": 1}, "key": ["id"], "seq": 1}, "table"),
    ({"op": "insert", "table": "t", "key": ["id"], "seq": 1}, "after"),
    ({"op": "insert", "table": "t", "after": {"id": 1}, "seq": 1}, "primary_key"),
    ({"op": "delete", "table": "t", "key": ["id"], "before": {"name": "x"}, "seq": 1}, "before"),
    ({"op": "insert", "table": "t", "key": ["id"], "after": {"id": 1}, "seq": "x"}, "seq"),
    ({"op": "insert", "table": "t", "key": ["id"], "after": [1], "seq": 1}, "after"),
]


def test_bad_input_is_a_parse_error_naming_the_field(mini):
    records = [rec(INSERT, 0)] + [rec(value, i + 1) for i, (value, _) in enumerate(BAD)]
    results = [result for _, result in parse_all(get_parser(mini), records)]
    assert isinstance(results[0], list) and results[0][0].op == "insert"
    for (value, field), result in zip(BAD, results[1:]):
        assert isinstance(result, ParseError), value
        assert str(result).startswith(f"{FMT}: field '{field}': ") and result.field == field


def test_a_value_that_does_not_fit_its_configured_type_names_the_column(mini):
    parser = get_parser(mini, {"column_types": {"id": "bigint"}})
    with pytest.raises(ParseError, match=r"^mini-json: field 'after\.id': cannot read 'x'"):
        parser.parse(rec({**INSERT, "after": {"id": "x"}}))
