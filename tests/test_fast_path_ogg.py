"""The ``ogg-json`` fast path gives, record by record, exactly what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` with and without
:meth:`cdclake.formats.ogg.OggJsonParser.fast_parse` (``assert_same``): every record must give the
same output rows, quarantine reasons included. The records are simulated hours of the shop
rendered as GoldenGate JSON (with and without the configured types), and unusual and malformed
variants of those messages: every member removed, null or of another JSON type, every
``op_type``, table names with quotes, separators and control characters, positions and
timestamps of every shape, partial and missing images, ``_isMissing`` flags, key columns null or
missing, Kafka keys, JSON schema documents, bytes that are not one JSON document. The fast path
must also read nearly all of a simulated hour: else the equality is empty.
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
from cdclake.sim.render_ogg import ogg_json

FMT = "ogg-json"
#: The column types of every table (GoldenGate's JSON carries none).
TYPED = {"column_types": {t.name: {c.name: c.ctype for c in t.columns} for t in TABLES.values()}}
#: Values of every JSON type for a member: absent, null, text, numbers, a list, an object, a bool.
ODD = [DROP, None, "", " ", "x", 0, 1, -1, 1.5, -0.0, 10**40, 2**64, True, False, [1], {"a": 1}, []]


def _simulated(seed: int, hours: int = 2, partitions: int = 3) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in ogg_json(src.run(), src.tables, partitions=partitions)]


@pytest.mark.parametrize("size, options", [(64, None), (1000, TYPED)], ids=["64-untyped", "1000-typed"])
def test_simulated_hours_are_read_alike(size, options):
    records = _simulated(51)
    read_fast = assert_same(FMT, records, size, options)
    assert read_fast == len(records), (read_fast, len(records))  # every record is a row change


def test_simulated_hour_one_record_per_batch_is_read_alike(ordinary):
    records = ordinary[:200]
    assert assert_same(FMT, records, 1, TYPED) == len(records)


def test_with_configured_keys_and_types_is_read_alike():
    """Keys other than ``primary_keys`` and types some values do not fit (``email`` as a date,
    ``name`` as an int, ``quantity`` as a boolean)."""
    options = {"primary_key": ["id"],
               "primary_keys": {"shop.customers": ["email"], "orders": ["id", "customer_id"]},
               "column_types": {"name": "int", "shop.customers": {"email": "date", "balance": "decimal(4,1)"},
                                "products": {"price": "decimal(10,2)", "weight": "float", "code": "binary",
                                             "stock": "smallint"},
                                "orders": {"ordered_at": "timestamp", "quantity": "boolean"}}}
    records = _simulated(52, hours=1)
    assert assert_same(FMT, records, 64, options) > 0


def _first(docs: list[dict], op: str, table: str = "") -> dict:
    return next(d for d in docs if d["op_type"] == op and d["table"].endswith(table))


def _variants(records: list[tuple]) -> list[tuple]:
    """``(Kafka key, value)`` variants of simulated GoldenGate messages: unusual but valid, or malformed."""
    docs = [json.loads(v) for _, _, v in records]
    ins, upd = _first(docs, "I", "orders"), _first(docs, "U", "orders")
    dele, dele_full = _first(docs, "D", "orders"), _first(docs, "D", "customers")
    out: list[tuple] = []

    def doc(d, path=(), kafka=None, **members):
        out.append((kafka, dumps(edited_doc(d, path, members))))

    bases = (ins, upd, dele, dele_full)
    for base in bases:
        for member in list(base) + ["tokens", "extra"]:
            for value in ODD:
                doc(base, **{member: value})
    for op in ("I", "U", "D", "T", "i", "u", " I", "I ", "X", "INSERT", "", "R", "\u0130"):
        for base in bases:
            doc(base, op_type=op)
    for table in ("S.T", "T", "C.S.T", "A.B.C.D", '"MY.S"."T.1"', 'S."T.X"', '"A""B".T', " shop.orders ", ".T",
                  "S.", '"S.T', '""', "a/b.T", "S.a\\b", "S.t\x01", "S.t\x7f", "..", "S..T", ". .", "shop.orders\n",
                  "ş.ö", "S.T" * 300):
        doc(ins, table=table)
        doc(upd, table=table)
    for pos in ("1", "0", " 12 ", "+1", "-1", "1.5", "1e3", "0x10", "\u0661\u0662", "\u00b2", "1_000",
                str(10**38 - 1), str(10**38), "9" * 60, "0" * 23 + "145", 10**38 - 1, 7, 7.0, -3):
        doc(upd, pos=pos)
    for op_ts in ("2024-05-01 00:00:00", "2024-05-01 00:00:00.123456", "2024-05-01T00:00:00Z", "2024-05-01:10:11:12",
                  "2024-05-01 00:00:00.123456789", "2024-05-01", "0000-00-00 00:00:00", "2024-13-40 00:00:00",
                  "16/06/2017", 1497623074):
        doc(ins, op_ts=op_ts)
    for xid in ("7.0.411499", 5, 1.5, True, [1], "", None, DROP):
        doc(upd, xid=xid)
    for keys in (["id"], ["id", "status"], ["status"], [], ["nope"], "id", [1], [None], None):
        for base in bases:
            doc(base, primary_keys=keys)
    row = ins["after"]
    cols = list(row)
    for value in (5, -1, 1.5, -0.0, 1e300, 10**30, True, [1, "x"], {"b": 1, "a": 2}, "\u00e9\U0001F600", None,
                  "2024-13-40", "", "nul\x00l", "2024-05-01:10:11:12.5"):
        doc(ins, after={**row, **{c: value for c in cols[1:4]}})
        doc(ins, after={**row, "ordered_at": value})
        doc(upd, after={**upd["after"], "status": value})
        doc(dele, before={"id": value})
    for image in ({}, {"id": None}, {"id": 999}, {"status": "x"}, None, [row]):
        doc(ins, after=image)
        doc(upd, after=image)
        doc(upd, before=image)
        doc(dele, before=image)
        doc(dele, after=image)
    for name in ("a/b", "x\x01", ".", "..", "", " id", "ID", "a.b", "\u2028"):
        doc(ins, after={**row, name: "1"})
        doc(upd, after={**upd["after"], name: "1"})
    # _isMissing flags
    doc(ins, after={**row, "note_isMissing": True})
    doc(ins, after={**row, "note_isMissing": False})
    doc(ins, after={**row, "note_isMissing": "true"})
    doc(ins, after={**row, "other_isMissing": True})
    doc(upd, after={**upd["after"], "id_isMissing": True})
    doc(upd, before={**upd["before"], "id_isMissing": True})
    doc(dele, before={"id": dele["before"]["id"], "id_isMissing": True})
    # Kafka keys
    for kafka_key in (b'{"id": 5}', b'{"id": "5"}', b'{"id": null}', b'{"other": 1}', b"not json", b"{}", b"[1]",
                      b"\xff", b'{"schema": {"type": "struct"}, "payload": {"id": 1}}', b"5"):
        for base in bases:
            doc(base, kafka=kafka_key)
            doc(base, kafka=kafka_key, primary_keys=DROP)
        doc(dele, ("before",), kafka=kafka_key, id=DROP)
        doc(upd, ("after",), kafka=kafka_key, id=DROP)
        doc(upd, ("after",), kafka=kafka_key, id=DROP, before=None)
    # JSON schema documents, truncates
    out.append((None, dumps({"$schema": "http://json-schema.org/draft-04/schema#", "title": "shop.orders",
                              "type": "object", "properties": {}})))
    doc(ins, op_type="T", after=DROP)
    raw = dumps(ins)
    out += [(None, raw + b" x"), (None, raw + b"  \n"), (None, b" \t" + raw), (None, raw + raw), (None, raw[:-1]),
            (None, raw[: len(raw) // 2]), (None, b"\xef\xbb\xbf" + raw),
            (None, raw.replace(b'"after":{', b'"after":{"x":"\xff",', 1)),
            (None, raw.replace(b'"after":{', b'"after":{"x":"\\ud800",', 1)),
            (None, raw.replace(b'"after":{', b'"after":{"x":NaN,', 1)),
            (None, raw.replace(b'"after":{', b'"after":{"x":1e999,', 1)),
            (None, raw.replace(b'"after":{', b'"after":{"x":1' + b"0" * 400 + b'.5,', 1)),
            (None, raw.replace(b'"after":{', b'"after":{"x":' + b"7" * 4300 + b",", 1)),
            (None, raw.replace(b'"op_type":"I"', b'"op_type":"I","op_type":"D"', 1)),
            (None, raw.replace(b'"op_type":"I"', b'"op_type":"D","op_type":"I"', 1)),
            (None, raw.replace(b'"after":{', b'"after":{"id":0,', 1)),
            (None, raw.replace(b'"pos":"', b'"pos":"\\u0031', 1)),
            (None, b""), (None, b" "), (None, b"[]"), (None, b'"x"'), (None, b"null"), (None, b"{}"), (None, b"1"),
            (None, b'{"table":"S.T","op_type":"I","after":{"id":1}}'),
            (None, b'{"table":"S.T","op_type":"I","primary_keys":["id"],"after":{"id":1}}')]
    return out


@pytest.fixture(scope="module")
def ordinary():
    return _simulated(53, hours=1, partitions=1)


_VARIANT_CASES = [(9, None), (9, TYPED), (500, {"primary_key": ["id"]}), (1, TYPED)]


@pytest.mark.parametrize("size, options", _VARIANT_CASES, ids=["9-none", "9-typed", "500-key", "1-typed"])
def test_variants_are_read_alike(ordinary, size, options):
    variants = [(1, k, v) for k, v in _variants(ordinary)]
    if size > 1:  # the variants among ordinary messages, and alone
        mixed = [r for pair in zip(ordinary[:len(variants)], variants) for r in pair]
        assert_same(FMT, ordinary[:30] + mixed, size, options)
    else:  # one record per batch: every fourth variant (the suite's time)
        variants = variants[::4]
    read_fast = assert_same(FMT, variants, size, options)
    if size < 500:  # a value Arrow cannot write (a position past decimal(38,0)) has the batch's rows written unflagged
        assert read_fast >= len(variants) // 5, (read_fast, len(variants))


def test_numbers_of_every_shape_are_read_alike(ordinary):
    """Numbers in an untyped column and in typed ones (int, decimal, timestamp, double) and as
    ``pos``: msgspec's reading of them against the standard library's."""
    import random
    import struct

    rnd = random.Random(5)
    ins = next(json.loads(v) for _, _, v in ordinary if b'"op_type":"I"' in v and b"shop.orders" in v)
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
            d["after"][col] = "__number__"
            records.append((0, None, dumps(d).replace(b'"__number__"', number.encode())))
        d = copy.deepcopy(ins)
        d["pos"] = "__number__"
        records.append((0, None, dumps(d).replace(b'"__number__"', number.encode())))
    options = {"column_types": {"orders": {"quantity": "int", "amount": "decimal(12,2)", "ordered_at": "timestamp",
                                           "product_id": "double"}}}
    read_fast = assert_same(FMT, records, 50, options)
    assert read_fast >= len(records) // 4


def test_fast_path_leaves_control_records_truncates_and_errors_to_parse():
    parser = get_parser(FMT)
    values = [{"table": "S.T", "op_type": "T", "pos": "1"},
              {"$schema": "http://json-schema.org/draft-04/schema#", "title": "S.T"},
              {"table": "S.T", "op_type": "X", "pos": "1", "primary_keys": ["id"], "after": {"id": 1}},
              {"table": "S.T", "op_type": "I", "pos": "1", "primary_keys": ["id"], "after": {"id": 1, "id_isMissing": False}}]
    raws = [dumps(v) for v in values] + [b"{", b"[]", b'{"table":"S.T","op_type":"I"}']
    records = [KafkaRecord("t", 0, n, 0, None, raw) for n, raw in enumerate(raws)]
    assert parser.fast_parse(records) == [None] * len(records)


def test_pickled_parser_reads_alike(ordinary):
    """The table plans are learnt state: dropped when pickled, learnt again."""
    parser = get_parser(FMT, TYPED)
    records = [KafkaRecord("t", p, n, 0, k, v) for n, (p, k, v) in enumerate(ordinary[:200])]
    first = parser.fast_parse(records)
    assert all(r is not None for r in first)
    clone = pickle.loads(pickle.dumps(parser))
    assert not clone._plans
    assert clone.fast_parse(records) == first == parser.fast_parse(records)
