"""The ``shareplex-json`` columnar fast path gives, record by record, exactly what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` with and without
:meth:`cdclake.formats.shareplex.ShareplexJsonParser.fast_parse` (``assert_same``): every record
must give the same output rows, quarantine reasons included. The records are simulated hours of
the shop rendered as SharePlex JSON (with and without the configured keys and types SharePlex
needs), and unusual and malformed variants of those messages: every top-level, ``meta`` and image
member removed, null or of another JSON type, every spelling of ``meta.op``, control operations,
table names with quotes, separators and control characters, numbers of every size where integers
are expected, key columns null or missing, Kafka keys, bytes that are not one JSON document.
The fast path must also read nearly all of a simulated hour: else the equality is empty.
"""
from __future__ import annotations

import copy
import datetime as dt
import json
import pickle

import pytest
from parse_harness import DROP, assert_same, dumps, edited_doc

from cdclake.formats import get_parser
from cdclake.record import KafkaRecord
from cdclake.sim import SimulatedSource
from cdclake.sim.model import TABLES
from cdclake.sim.render_shareplex import shareplex_json

FMT = "shareplex-json"
#: The key of every table, configured as SharePlex needs it (its inserts and deletes carry none).
KEYS = {"primary_keys": {t.name: list(t.primary_key) for t in TABLES.values()}}
#: The keys and the column types of every table (SharePlex sends every value as text).
TYPED = {**KEYS, "column_types": {t.name: {c.name: c.ctype for c in t.columns} for t in TABLES.values()}}


def _simulated(seed: int, hours: int = 2, partitions: int = 3) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in shareplex_json(src.run(), src.tables, partitions=partitions)]


def _ops(records: list[tuple]) -> list[str]:
    return [json.loads(v)["meta"]["op"] for _, _, v in records]


@pytest.mark.parametrize("seed", [31, 32, 33])
@pytest.mark.parametrize("size", [1, 64, 1000])
def test_simulated_hours_are_read_alike(seed, size):
    records = _simulated(seed)
    read_fast = assert_same(FMT, records, size, KEYS)
    assert read_fast >= 0.95 * len(records), (read_fast, len(records))  # every record is a row change


@pytest.mark.parametrize("size", [1, 64, 1000])
def test_simulated_hour_typed_is_read_alike(size):
    records = _simulated(34)
    read_fast = assert_same(FMT, records, size, TYPED)
    assert read_fast >= 0.95 * len(records), (read_fast, len(records))


def test_simulated_hour_without_configuration_is_read_alike():
    """Without a configured key only updates (keyed by their ``key`` object) are changes; inserts
    and deletes are quarantined, by the per-record parser."""
    records = _simulated(35)
    read_fast = assert_same(FMT, records, 64)
    updates = _ops(records).count("upd")
    assert 0.95 * updates <= read_fast <= updates, (read_fast, updates)


def test_with_configured_keys_and_types_is_read_alike():
    """Keys other than the tables' (an update's ``key`` object lacks ``customer_id``; ``email`` is
    carried by every customer insert and delete) and types some values do not fit (``email`` as a
    date, ``name`` as an int)."""
    options = {"primary_key": ["id"],
               "primary_keys": {"shop.customers": ["email"], "orders": ["id", "customer_id"]},
               "column_types": {"name": "int", "shop.customers": {"email": "date", "balance": "decimal(4,1)"},
                                "products": {"price": "decimal(10,2)", "weight": "float", "code": "binary",
                                             "stock": "smallint"},
                                "orders": {"ordered_at": "timestamp", "quantity": "boolean"}}}
    records = _simulated(36, hours=1)
    read_fast = assert_same(FMT, records, 64, options)
    assert read_fast > 0
    assert_same(FMT, records, 64, {"primary_key": "id", "column_types": {"id": "bigint", "note": "string"}})


# ---------------------------------------------------------------------------------------------
# variants


#: Values of every JSON type for a member: absent, null, text, numbers, a list, an object, a bool.
ODD = [DROP, None, "", " ", "x", 0, 1, -1, 1.5, -0.0, 10**40, 2**64, True, False, [1], {"a": 1}, []]


def edited(message: dict, path: tuple = (), **members) -> bytes:
    """``message`` (a copy) with the object at ``path`` given ``members`` (``DROP``: removed), as JSON."""
    return dumps(edited_doc(message, path, members))


def _first(docs: list[dict], op: str, table: str = "") -> dict:
    return next(d for d in docs if d["meta"]["op"] == op and d["meta"]["table"].endswith(table))


def _variants(records: list[tuple]) -> list[tuple]:
    """``(Kafka key, value)`` variants of simulated SharePlex messages: unusual but valid, or malformed."""
    docs = [json.loads(v) for _, _, v in records]
    ins, upd, dele = _first(docs, "ins", "orders"), _first(docs, "upd", "orders"), _first(docs, "del")
    out: list[tuple] = []

    def doc(d, path=(), kafka=None, **members):
        out.append((kafka, edited(d, path, **members)))

    bases = (ins, upd, dele)
    # every top-level member and every meta field: absent, null, of every JSON type
    for base in bases:
        for member in ("meta", "data", "key"):
            for value in ODD + [[base.get(member)], {"meta": base["meta"]}]:
                doc(base, **{member: value})
        doc(base, extra={"a": 1}, userid=3)
        for field in list(base["meta"]):
            for value in ODD:
                doc(base, ("meta",), **{field: value})
        doc(base, ("meta",), extra="x")
    # operations
    for op in ("ins", "INS", "insert", "INSERT", "Insert", " ins ", "upd", "UPD", "update", "UPDATE", "UPDATE AFTER",
               "update_after", "Update  After", "UPDATE_AFTER ", "UPDATE BEFORE", "update_before", "del", "DELETE",
               "Delete", "TRUNCATE", "truncate", "DROP COLUMN", "drop_column", "merge", "in s", "_", "upd\n",
               "ınsert", "\u0130NS"):
        for base in bases:
            doc(base, ("meta",), op=op)
    # table names
    for table in ("S.T", "T", "orders", '"MY.S"."T.1"', 'S."T.X"', '"A""B".T', "DB.S.T", " shop.orders ", ".T", "S.",
                  '"S.T', '""', "a/b.T", "S.a\\b", "S.t\x01", "S.t\x7f", "S.\u0085", "..", "S...", "S..T", ". .",
                  "shop.orders\n", "\tshop.orders", "ş.ö", '"a/b"', "S.T" * 300):
        doc(ins, ("meta",), table=table)
        doc(upd, ("meta",), table=table)
    # positions, transactions, times
    for scn in ("1", "0", " 12 ", "+1", "-1", "1.5", "1e3", "0x10", "\u0661\u0662", "\u00b2", "1_000", str(10**38 - 1),
                str(10**38), "9" * 60, 10**38 - 1, 10**38, 7, 7.0, -3):
        doc(upd, ("meta",), scn=scn)
    for seq, size, idx in ((DROP, DROP, "4/9"), (DROP, DROP, " 4 / 9 "), (DROP, DROP, "4/9/1"), (DROP, DROP, "a/b"),
                           (DROP, DROP, "-1/2"), (DROP, DROP, 4), (DROP, DROP, None), (DROP, DROP, DROP),
                           (2, DROP, "4/9"), (DROP, 3, "4/9"), ("5", "6", "x"), (0, 0, "0/0"), (None, None, "1/1"),
                           (2**63, 2**64, DROP), ("007", "8", DROP), (1.0, 2, DROP), (True, 2, DROP), (1, "2.0", DROP)):
        doc(upd, ("meta",), seq=seq, size=size, idx=idx)
        doc(dele, ("meta",), scn=DROP, seq=seq, size=size, idx=idx)
    for time in ("2024-05-01T00:00:00", "2024-05-01T00:00:00Z", "2024-05-01T00:00:00.250Z",
                 "2024-05-01T02:00:00+02:00", "2024-05-01 00:00:00", "2024-05-01T00:00:00.123456789",
                 " 2024-05-01T00:00:00 ", "2024-05-01", "0000-00-00 00:00:00", "2024-13-40T00:00:00", "16/06/2017",
                 "9999-12-31T23:59:59", "0001-01-01T00:00:00", 1497623074):
        doc(ins, ("meta",), time=time)
    for trans in ("7.0.411499", 5, 1.5, 10**30, True, [1], {"a": 1}, "", None, DROP):
        doc(upd, ("meta",), trans=trans)
    # images: the insert's row
    row = ins["data"]
    cols = list(row)
    for value in (5, -1, 1.5, -0.0, 1e300, 10**30, True, [1, "x"], {"b": 1, "a": 2}, "\u00e9\U0001F600", None,
                  "2024-13-40", "", "x" * 3, "nul\x00l"):
        doc(ins, data={**row, **{c: value for c in cols[1:4]}})
        doc(upd, data={cols[2]: value})
        doc(upd, key={"id": value})
    for key_value in (None, DROP):
        doc(ins, ("data",), id=key_value)
        doc(upd, ("key",), id=key_value)
        doc(dele, ("data",), id=key_value)
    doc(ins, data={})
    doc(ins, data={**row, "extra": "1"})
    doc(ins, data=dict(reversed(list(row.items()))))
    doc(ins, data={"extra": "1", **row})
    doc(ins, key={"id": row["id"]})
    doc(ins, key={"id": None})
    doc(ins, key={"other": "1"})
    doc(ins, key={"id": [1]})
    for name in ("a/b", "x\x01", ".", "..", "", " id", "id ", "ID", "é", "a.b", "a\\b", "\u2028"):
        doc(ins, data={**row, name: "1"})
        doc(upd, data={**upd["data"], name: "1"})
        doc(upd, key={**upd["key"], name: "1"})
    # images: the update's
    doc(upd, data={})
    doc(upd, data={"id": "999"})
    doc(upd, data={"id": None})
    doc(upd, data={**upd["data"], "id": "999"})
    doc(upd, data=row)
    doc(upd, key={})
    doc(upd, key={"other": "1"})
    doc(upd, key={**upd["key"], "other": "1"})
    doc(upd, key={"other": "1", **upd["key"]})
    doc(upd, key=upd["data"])
    # images: the delete's
    doc(dele, key={"id": dele["data"]["id"]})
    doc(dele, key={"id": "5"}, data={k: v for k, v in dele["data"].items() if k != "id"})
    doc(dele, key={"id": None}, data={k: v for k, v in dele["data"].items() if k != "id"})
    doc(dele, key={"other": "1"})
    doc(dele, data={})
    # Kafka keys
    for kafka_key in (b'{"id": "5"}', b'{"id": 5}', b'{"id": null}', b'{"other": 1}', b'{"id": 1.5, "x": [1]}',
                      b"not json", b"{}", b"[1]", b'"id"', b"\xff", b'{"schema": {"type": "struct"}, "payload": {"id": 1}}',
                      b'{"payload": {"id": 1}}', b'{"id": "5"} x'):
        for base in bases:
            doc(base, kafka=kafka_key)
        doc(ins, ("data",), kafka=kafka_key, id=DROP)
        doc(upd, ("key",), kafka=kafka_key, id=DROP)
        doc(upd, kafka=kafka_key, key=DROP)
        doc(dele, ("data",), kafka=kafka_key, id=DROP)
        doc(dele, ("data",), kafka=kafka_key, id=None)
    # bytes that are not one JSON object
    raw = dumps(ins)
    out += [(None, raw + b" x"), (None, raw + b"  \n"), (None, b" \t" + raw), (None, raw + raw), (None, raw + b"{}"),
            (None, raw[:-1]), (None, raw[:-5]), (None, raw[: len(raw) // 2]), (None, b"\xef\xbb\xbf" + raw),
            (None, raw.replace(b'"data":{', b'"data":{"x":"\xff",', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":"\xed\xa0\x80",', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":"\\ud800",', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"\\udc00":"1",', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":NaN,', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":Infinity,', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":1e999,', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":1' + b"0" * 400 + b'.5,', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":' + b"7" * 4300 + b",", 1)),
            (None, raw.replace(b'"userid":84', b'"userid":' + b"7" * 4301, 1)),
            (None, raw.replace(b'"userid":84', b'"userid":-' + b"7" * 5000, 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":"a\tb",', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"x":[[[[[[1]]]]]],', 1)),
            (None, raw.replace(b'"op":"ins"', b'"op":"ins","op":"del"', 1)),
            (None, raw.replace(b'"op":"ins"', b'"op":"del","op":"ins"', 1)),
            (None, raw.replace(b'"table":', b'"table":"x.y","table":', 1)),
            (None, raw.replace(b'"data":{', b'"data":{"id":"0",', 1)),
            (None, raw.replace(b'"meta":{', b'"data":{},"meta":{', 1)),
            (None, raw.replace(b'"scn":"', b'"scn":"\\u0031', 1)),
            (None, raw.replace(b"{", b" { ", 3)),
            (None, b""), (None, b" "), (None, b"[]"), (None, b'"x"'), (None, b"null"), (None, b"{}"), (None, b"1"),
            (None, b'{"meta":{}}'), (None, b'{"meta":{"op":"ins","table":"S.T"},"data":{"id":"1"}}')]
    return out


@pytest.fixture(scope="module")
def ordinary():
    return _simulated(37, hours=1, partitions=1)


@pytest.mark.parametrize("options", [KEYS, None, TYPED], ids=["keys", "none", "typed"])
@pytest.mark.parametrize("size", [1, 9, 500])
def test_variants_are_read_alike(ordinary, size, options):
    variants = [(1, k, v) for k, v in _variants(ordinary)]
    # the variants among ordinary messages, and alone
    mixed = [r for pair in zip(ordinary[:len(variants)], variants) for r in pair]
    assert_same(FMT, ordinary[:30] + mixed, size, options)
    read_fast = assert_same(FMT, variants, size, options)
    if size < 500:  # a value Arrow cannot write (a seq past bigint) has the batch's rows written unflagged
        assert read_fast >= len(variants) // 5, (read_fast, len(variants))


def test_numbers_of_every_shape_are_read_alike(ordinary):
    """Numbers where text is expected, in an untyped column and in typed ones (int, decimal,
    timestamp, double), and as ``meta`` integers: msgspec's reading of them against the
    standard library's."""
    import random
    import struct

    rnd = random.Random(3)
    ins = next(json.loads(v) for _, _, v in ordinary if b'"op":"ins"' in v and b"shop.orders" in v)
    records = []
    for _ in range(300):
        bits = rnd.getrandbits(64)
        number = rnd.choice([repr(struct.unpack("<d", struct.pack("<Q", bits))[0]), str(bits), str(-bits),
                             f"{rnd.random()}e{rnd.randint(-330, 330)}", str(rnd.getrandbits(200)),
                             f"{rnd.randint(-10**6, 10**6)}.{rnd.randint(0, 10**9)}", str(rnd.randint(0, 99))])
        if number in ("nan", "inf", "-inf"):
            continue
        for col in ("status", "quantity", "amount", "ordered_at", "product_id"):
            d = copy.deepcopy(ins)
            d["data"][col] = "__number__"
            records.append((0, None, dumps(d).replace(b'"__number__"', number.encode())))
        for field in ("scn", "seq", "size"):
            d = copy.deepcopy(ins)
            d["meta"][field] = "__number__"
            records.append((0, None, dumps(d).replace(b'"__number__"', number.encode())))
    options = {**KEYS, "column_types": {"orders": {"quantity": "int", "amount": "decimal(12,2)",
                                                   "ordered_at": "timestamp", "product_id": "double"}}}
    read_fast = assert_same(FMT, records, 50, options)
    assert read_fast >= len(records) // 4


def test_fast_path_leaves_control_records_and_errors_to_parse():
    parser = get_parser(FMT, KEYS)
    values = [{"meta": {"op": op, "table": "S.T", "scn": "9", "seq": 1}, "data": {"id": "1"}}
              for op in ("UPDATE BEFORE", "DROP COLUMN", "TRUNCATE", "merge")]
    raws = [dumps(v) for v in values] + [b"{", b"[]", b'{"meta":{"op":"ins","table":"S.T"}}']
    records = [KafkaRecord("t", 0, n, 0, None, raw) for n, raw in enumerate(raws)]
    assert parser.fast_parse(records) == [None] * len(records)


def test_pickled_parser_reads_alike(ordinary):
    """The fast path's caches are learnt state: dropped when pickled, learnt again."""
    parser = get_parser(FMT, TYPED)
    records = [KafkaRecord("t", p, n, 0, k, v) for n, (p, k, v) in enumerate(ordinary[:200])]
    first = parser.fast_parse(records)
    assert all(r is not None for r in first)
    clone = pickle.loads(pickle.dumps(parser))
    assert not clone._fast_targets and not clone._fast_times
    assert clone.fast_parse(records) == first == parser.fast_parse(records)
