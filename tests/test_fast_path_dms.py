"""The ``aws-dms-json`` columnar fast path gives, record by record, exactly what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` with and without
:meth:`cdclake.formats.dms.AwsDmsJsonParser.fast_parse` (``assert_same``): every record must give
the same output rows, quarantine reasons included. The records are simulated hours of the shop
rendered as AWS DMS messages (with and without the configured keys and types DMS needs), and
unusual and malformed variants of those messages: every top-level and ``metadata`` member
removed, null or of another JSON type, every spelling of the record type and operation, control
records, before-image columns and fields, key columns null or missing, Kafka keys, bytes that
are not one JSON document. The fast path must also read nearly all of a simulated hour.
"""
from __future__ import annotations

import datetime as dt
import json
import pickle

import pytest
from parse_harness import DROP, assert_same, dumps, edited_doc

from cdclake.formats import get_parser
from cdclake.record import KafkaRecord
from cdclake.sim import SimulatedSource
from cdclake.sim.model import TABLES
from cdclake.sim.render_dms import dms_json

FMT = "aws-dms-json"
#: The key of every table and the before-image field (DMS's Kafka key names no columns).
KEYS = {"primary_keys": {t.name: list(t.primary_key) for t in TABLES.values()}, "before_image_field": "before-image"}
#: The keys and the column types of every table (DMS carries no types).
TYPED = {**KEYS, "column_types": {t.name: {c.name: c.ctype for c in t.columns} for t in TABLES.values()}}
#: Values of every JSON type for a member: absent, null, text, numbers, a list, an object, a bool.
ODD = [DROP, None, "", " ", "x", 0, 1, -1, 1.5, 10**40, True, False, [1], {"a": 1}, []]


def _simulated(seed: int, hours: int = 2, partitions: int = 3) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in dms_json(src.run(), src.tables, partitions=partitions)]


@pytest.mark.parametrize("seed, size", [(43, 7), (44, 1000)])
def test_simulated_hours_are_read_alike(seed, size):
    records = _simulated(seed)
    read_fast = assert_same(FMT, records, size, TYPED)
    assert read_fast >= 0.95 * len(records), (read_fast, len(records))  # all but the control records


def test_simulated_hour_untyped_and_unconfigured_is_read_alike():
    """Untyped, every row is read; without configured keys or the before-image field nothing is
    (no key; an unknown member), and the per-record parser says why."""
    records = _simulated(45, hours=1)
    assert assert_same(FMT, records, 64, KEYS) >= 0.95 * len(records)
    assert assert_same(FMT, records, 64, None) == 0


def _first(docs: list[dict], op: str, table=None) -> dict:
    return next(d for d in docs if d["metadata"].get("operation") == op and table in (None, d["metadata"]["table-name"]))


def _variants(records: list[tuple]) -> list[tuple]:
    """``(Kafka key, value)`` variants of simulated DMS messages: unusual but valid, or malformed."""
    docs = [json.loads(v) for _, _, v in records]
    load, ins, upd, dele = (_first(docs, "load"), _first(docs, "insert", "orders"),
                            _first(docs, "update", "orders"), _first(docs, "delete"))
    control = next(d for d in docs if d["metadata"]["record-type"] == "control")
    out: list[tuple] = []

    def doc(d, path=(), kafka=None, **members):
        out.append((kafka, dumps(edited_doc(d, path, members))))

    bases = (load, ins, upd, dele)
    for base in bases + (control,):
        for member in ("data", "metadata", "control", "before-image", "BI_x", "extra"):
            for value in ODD:
                doc(base, **{member: value})
        for field in list(base["metadata"]) + ["commit-timestamp", "transaction-record-id"]:
            for value in ODD:
                doc(base, ("metadata",), **{field: value})
    for kind in ("data", "DATA", " Data ", "control", "Control", "heartbeat", "dat a"):
        for base in bases + (control,):
            doc(base, ("metadata",), **{"record-type": kind})
    for op in ("load", "LOAD", "insert", "Insert", "create", "read", "update", "delete", " delete ", "merge",
               "create-table", "drop-table", "DropTable", "TruncateTable", "truncate-table", "add-column",
               "column-type-change", "restart", "ınsert"):
        for base in (ins, upd, dele, control):
            doc(base, ("metadata",), operation=op)
    for ts in ("2024-05-01T00:00:00Z", "2024-05-01T00:00:00.123456789Z", "2024-05-01 02:00:00+02:00", "2024-05-01",
               "0000-00-00 00:00:00", "2024-13-40T00:00:00", "x", 1714521600000):
        doc(upd, ("metadata",), **{"commit-timestamp": ts})
    for tid in (5, "abc", 10**30, -1, 1.5, True, "", None):
        doc(ins, ("metadata",), **{"transaction-id": tid, "transaction-record-id": tid})
    # images
    row = ins["data"]
    for value in (5, -1, 1.5, 1e300, 10**30, True, [1, "x"], {"b": 1}, "é\U0001F600", None, "2024-13-40", "",
                  "0x0A0B", "0xZZ", "0A0B", "0x1"):
        doc(ins, data={**row, **{c: value for c in list(row)[1:]}})
        doc(upd, data={**upd["data"], "status": value, "amount": value})
        doc(upd, **{"before-image": {"id": value}})
    for key_value in (None, DROP):
        doc(ins, ("data",), id=key_value)
        doc(upd, ("data",), id=key_value)
        doc(dele, ("data",), id=key_value)
    doc(upd, data={**upd["data"], "BI_id": 1, "BI_status": "new", "BI_": 3, "BI_nothing": 4})
    doc(upd, data={**upd["data"], "BI_id": 1}, **{"before-image": DROP})
    doc(ins, data={**row, "BI_id": 7})
    doc(dele, data={**dele["data"], "BI_id": 7})
    doc(ins, data={})
    doc(ins, data={**row, "extra": 1})
    doc(ins, data=dict(reversed(list(row.items()))))
    for name in ("a/b", "x\x01", ".", "", " id", "ID", "é", "a.b"):
        doc(ins, data={**row, name: 1})
    for table in ("orders", "", "a/b", "x\x01", " ", "orders\n"):
        for base in (ins, control):
            doc(base, ("metadata",), **{"table-name": table})
    for schema in ("", "shop", "a.b", "s\x01"):
        doc(ins, ("metadata",), **{"schema-name": schema})
    for kafka_key in (b'{"id": 5}', b'{"id": null}', b'{"other": 1}', b"shop.orders", b"{}", b"\xff",
                      b'{"schema": {"type": "struct"}, "payload": {"id": 1}}'):
        for base in bases:
            doc(base, kafka=kafka_key)
        doc(dele, ("data",), kafka=kafka_key, id=DROP)
        doc(ins, ("data",), kafka=kafka_key, id=DROP)
    raw = dumps(ins)
    out += [(None, raw + b" x"), (None, raw + b"\n"), (None, raw + raw), (None, raw[:-1]), (None, b"\xef\xbb\xbf" + raw),
            (None, json.dumps(ins, indent=4).encode()),  # MessageFormat JSON (indented) and JSON_UNFORMATTED alike
            (None, raw.replace(b'"data":{', b'"data":{"x":"\xff",', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":"\\ud800",', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":NaN,', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":1e999,', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":' + b"7" * 4300 + b",", 1)),
            (None, raw.replace(b'"operation":"insert"', b'"operation":"insert","operation":"delete"', 1)),
            (None, b""), (None, b"[]"), (None, b"null"), (None, b"{}"), (None, b'{"metadata":{}}'),
            (None, b'{"FirstName":"Randy","StoreId":"5"}')]
    return out


@pytest.fixture(scope="module")
def ordinary():
    return _simulated(46, hours=1, partitions=1)


@pytest.mark.parametrize("options, size", [(KEYS, 9), (TYPED, 500),
                                           ({**TYPED, "no_hex_prefix": True, "before_image_prefix": ""}, 97)],
                         ids=["keys", "typed", "typed-nohex"])
def test_variants_are_read_alike(ordinary, size, options):
    variants = [(1, k, v) for k, v in _variants(ordinary)]
    mixed = [r for pair in zip(ordinary[:len(variants)], variants) for r in pair]
    assert_same(FMT, ordinary[:30] + mixed, size, options)
    read_fast = assert_same(FMT, variants, size, options)
    if not options.get("no_hex_prefix"):  # there the simulated 0x binary values are refused
        assert read_fast >= len(variants) // 5, (read_fast, len(variants))


def test_fast_path_leaves_control_records_and_errors_to_parse():
    parser = get_parser(FMT, KEYS)
    values = [{"metadata": {"record-type": "control", "operation": op, "schema-name": "s", "table-name": "t"}}
              for op in ("create-table", "drop-table", "restart")]
    raws = [dumps(v) for v in values] + [b"{", b"[]", b'{"metadata":{"record-type":"data","operation":"insert"}}']
    records = [KafkaRecord("t", 0, n, 0, None, raw) for n, raw in enumerate(raws)]
    assert parser.fast_parse(records) == [None] * len(records)


def test_pickled_parser_reads_alike(ordinary):
    parser = get_parser(FMT, TYPED)
    records = [KafkaRecord("t", p, n, 0, k, v) for n, (p, k, v) in enumerate(ordinary[:200])]
    first = parser.fast_parse(records)
    assert sum(r is not None for r in first) >= 190
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.fast_parse(records) == first
