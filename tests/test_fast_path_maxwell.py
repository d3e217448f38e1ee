"""The ``maxwell-json`` columnar fast path gives, record by record, exactly what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` with and without
:meth:`cdclake.formats.maxwell.MaxwellJsonParser.fast_parse` (``assert_same``): every record must
give the same output rows, quarantine reasons included. The records are simulated hours of the
shop rendered as Maxwell JSON (with and without configured types, with ``without_position``
``kafka-order``, the default, and ``quarantine``),
and unusual and malformed variants of those messages: every member removed, null or of another
JSON type, every ``type``, positions, transaction fields, images with extra, missing, null,
nested and renamed columns, ``old`` naming columns ``data`` lacks, Kafka keys of every shape,
bytes that are not one JSON document. The fast path must also read nearly all of a simulated
hour: else the equality is empty.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest
from parse_harness import DROP, assert_same, dumps, edited_doc

from cdclake.sim import SimulatedSource
from cdclake.sim.model import TABLES
from cdclake.sim.render_maxwell import maxwell_json

FMT = "maxwell-json"
TYPED = {"column_types": {t.name: {c.name: c.ctype for c in t.columns} for t in TABLES.values()}}
KAFKA_ORDER = {"without_position": "kafka-order"}
QUARANTINE = {"without_position": "quarantine"}
#: Values of every JSON type for a member: absent, null, text, numbers, a list, an object, a bool.
ODD = [DROP, None, "", " ", "x", 0, 1, -1, 1.5, -0.0, 10**40, 2**64, True, False, [1], {"a": 1}, []]


def _simulated(seed: int, hours: int = 2, partitions: int = 3) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in maxwell_json(src.run(), src.tables, partitions=partitions)]


def _rows(records: list[tuple]) -> int:
    return sum(1 for _, _, v in records if json.loads(v)["type"] in ("insert", "update", "delete", "bootstrap-insert"))


@pytest.mark.parametrize("seed, size", [(43, 5), (43, 1000), (44, 64)])
def test_simulated_hours_are_read_alike(seed, size):
    records = _simulated(seed, hours=1 if size < 64 else 2)
    read_fast = assert_same(FMT, records, size)
    assert read_fast >= 0.95 * _rows(records), (read_fast, _rows(records))


@pytest.mark.parametrize("options", [TYPED, KAFKA_ORDER, QUARANTINE], ids=["typed", "kafka-order", "quarantine"])
def test_simulated_hour_with_options_is_read_alike(options):
    records = _simulated(45, hours=1)
    read_fast = assert_same(FMT, records, 64, options)
    assert read_fast >= 0.95 * _rows(records), (read_fast, _rows(records))


def test_with_configured_keys_and_types_is_read_alike():
    """Keys other than the tables' and types some values do not fit (``email`` as a date, ``name``
    as an int)."""
    options = {"primary_key": ["id"],
               "primary_keys": {"shop.customers": ["email"], "orders": ["id", "customer_id"]},
               "column_types": {"name": "int", "shop.customers": {"email": "date", "balance": "decimal(4,1)"},
                                "products": {"price": "decimal(10,2)", "weight": "float", "code": "binary",
                                             "stock": "smallint"},
                                "orders": {"ordered_at": "timestamp", "quantity": "boolean"}}}
    records = _simulated(46, hours=1)
    assert assert_same(FMT, records, 64, options) > 0


def _first(docs: list[tuple], kind: str) -> tuple:
    return next((k, d) for k, d in docs if d.get("type") == kind)


def _variants(records: list[tuple]) -> list[tuple]:
    """``(Kafka key, value)`` variants of simulated Maxwell messages: unusual but valid, or malformed."""
    docs = [(k, json.loads(v)) for _, k, v in records]
    (ki, ins), (ku, upd), (kd, dele) = _first(docs, "insert"), _first(docs, "update"), _first(docs, "delete")
    kb, boot = _first(docs, "bootstrap-insert")
    out: list[tuple] = []

    def doc(pair, path=(), kafka=DROP, **members):
        key, d = pair
        out.append((key if kafka is DROP else kafka, dumps(edited_doc(d, path, members))))

    bases = ((ki, ins), (ku, upd), (kd, dele), (kb, boot))
    for base in bases:
        for member in ("database", "table", "type", "ts", "xid", "xoffset", "commit", "position", "data", "old",
                       "primary_key_columns", "primary_key", "server_id"):
            for value in ODD:
                doc(base, **{member: value})
        doc(base, extra={"a": 1})
    for kind in ("insert", "update", "delete", "bootstrap-insert", "bootstrap-start", "bootstrap-complete",
                 "table-create", "table-alter", "database-drop", "INSERT", "Insert", " insert", "upsert", ""):
        for base in bases:
            doc(base, type=kind)
    for position in ("master.000006:800911", "mysql-bin.000010:4", "m:1", "master.000006", "master.000006:",
                     ":5", "master.x:5", "master.000006:-1", "master.000006:1.5", "master.000006: 7",
                     "a:b:3", "master.000006:" + "9" * 40, "master." + "9" * 40 + ":5", 5, None):
        doc((ku, upd), position=position)
        doc((kb, boot), position=position)
    for commit, xoffset in ((True, 3), (False, 3), (True, DROP), (DROP, DROP), ("true", 1), (1, 1), (None, None)):
        doc((ki, ins), commit=commit, xoffset=xoffset)
    for ts in (0, 1596684883, 1596684883.5, "1596684883", -1, 10**40, None, DROP):
        doc((ki, ins), ts=ts)
    # images
    row, cols = ins["data"], list(ins["data"])
    for value in (5, -1, 1.5, -0.0, 1e300, 10**30, True, [1, "x", 1.25], {"b": 1, "a": 2.5}, "\u00e9\U0001F600", None,
                  "2024-13-40", "", "x" * 3, "nul\x00l"):
        doc((ki, ins), data={**row, **{c: value for c in cols[1:4]}})
        doc((ku, upd), data={**upd["data"], cols[2]: value})
        doc((ku, upd), old={cols[2]: value})
    for key_value in (None, DROP):
        doc((ki, ins), ("data",), id=key_value)
        doc((kd, dele), ("data",), id=key_value)
        doc((ku, upd), ("data",), id=key_value)
    doc((ki, ins), data={})
    doc((ki, ins), data=dict(reversed(list(row.items()))))
    doc((ku, upd), old={"not_in_data": 1})
    doc((ku, upd), old={})
    doc((ku, upd), old=DROP)
    doc((ki, ins), old={cols[1]: "x"})
    doc((ki, ins), primary_key_columns=["id"])
    doc((ki, ins), primary_key_columns=[cols[1]])
    doc((ki, ins), primary_key_columns=["ID"])
    doc((ki, ins), primary_key_columns=["nope"])
    doc((ki, ins), primary_key_columns=[1])
    for name in ("a/b", "x\x01", ".", "..", "", " id", "ID", "é", "a.b", "a\\b", "\u2028"):
        doc((ki, ins), data={**row, name: "1"})
        doc((ku, upd), old={name: "1"}, data={**upd["data"], name: "2"})
    # Kafka keys
    for kafka_key in (b'{"database":"shop","table":"orders","pk.id":5}', b'{"pk.id":null}', b'{"pk.ID":7}',
                      b'{"database":"shop","table":"x","_uuid":"u"}', b'["shop","orders",[{"id":5}]]',
                      b'["shop","orders",[5]]', b'{"pk.":1}', b'{"id":5}', b"not json", b"{}", b"[1]", b"\xff",
                      b'{"pk.id":1.5}', b'{"pk.id":[1]}', None):
        for base in bases:
            doc(base, kafka=kafka_key)
        doc((kd, dele), ("data",), kafka=kafka_key, id=DROP)
        doc((kd, dele), ("data",), kafka=kafka_key, id=None)
        doc((ki, ins), ("data",), kafka=kafka_key, id=DROP)
    # bytes that are not one JSON object
    raw = dumps(ins)
    key = ki
    for value in (raw + b" x", raw + b"  \n", b" \t" + raw, raw + raw, raw[:-1], raw[: len(raw) // 2],
                  b"\xef\xbb\xbf" + raw, raw.replace(b'"data":{', b'"data":{"x":"\xff",', 1),
                  raw.replace(b'"data":{', b'"data":{"x":"\\ud800",', 1),
                  raw.replace(b'"data":{', b'"data":{"x":NaN,', 1),
                  raw.replace(b'"data":{', b'"data":{"x":1e999,', 1),
                  raw.replace(b'"data":{', b'"data":{"x":1' + b"0" * 400 + b'.5,', 1),
                  raw.replace(b'"data":{', b'"data":{"x":' + b"7" * 4300 + b",", 1),
                  raw.replace(b'"data":{', b'"data":{"x":[[[[[[1.5]]]]]],', 1),
                  raw.replace(b'"type":"insert"', b'"type":"insert","type":"delete"', 1),
                  raw.replace(b'"data":{', b'"data":{"id":0,', 1),
                  b"", b" ", b"[]", b'"x"', b"null", b"{}", b"1"):
        out.append((key, value))
    return out


@pytest.fixture(scope="module")
def ordinary():
    return _simulated(47, hours=1, partitions=1)


@pytest.mark.parametrize("size, options", [(9, None), (9, TYPED), (9, QUARANTINE), (500, None), (500, QUARANTINE)],
                         ids=["9-none", "9-typed", "9-quarantine", "500-none", "500-quarantine"])
def test_variants_are_read_alike(ordinary, size, options):
    variants = [(1, k, v) for k, v in _variants(ordinary)]
    mixed = [r for pair in zip(ordinary[:len(variants)], variants) for r in pair]
    assert_same(FMT, ordinary[:30] + mixed, size, options)
    read_fast = assert_same(FMT, variants, size, options)
    if size < 500:  # a value Arrow cannot write (an xoffset past bigint) has the batch's rows written unflagged
        assert read_fast >= len(variants) // 5, (read_fast, len(variants))


def test_numbers_of_every_shape_are_read_alike(ordinary):
    """Numbers in untyped and typed columns (int, decimal, timestamp, double) and as ``ts``,
    ``xid`` and ``xoffset``: msgspec's reading of them (``Decimal`` for a fraction or exponent)
    against the standard library's."""
    import random
    import struct

    rnd = random.Random(3)
    ins = next(json.loads(v) for _, _, v in ordinary if b'"type":"insert"' in v and b'"table":"orders"' in v)
    key = next(k for _, k, v in ordinary if b'"type":"insert"' in v and b'"table":"orders"' in v)
    records = []
    for _ in range(120):
        bits = rnd.getrandbits(64)
        number = rnd.choice([repr(struct.unpack("<d", struct.pack("<Q", bits))[0]), str(bits), str(-bits),
                             f"{rnd.random()}e{rnd.randint(-330, 330)}", str(rnd.getrandbits(200)),
                             f"{rnd.randint(-10**6, 10**6)}.{rnd.randint(0, 10**9)}", str(rnd.randint(0, 99)),
                             "1.0E-5", "12.50", "-0.0", "1E+3"])
        if number in ("nan", "inf", "-inf"):
            continue
        for col in ("status", "quantity", "amount", "ordered_at", "product_id"):
            d = json.loads(json.dumps(ins))
            d["data"][col] = "__number__"
            records.append((0, key, dumps(d).replace(b'"__number__"', number.encode())))
        for field in ("ts", "xid", "xoffset"):
            d = json.loads(json.dumps(ins))
            d[field] = "__number__"
            records.append((0, key, dumps(d).replace(b'"__number__"', number.encode())))
    assert_same(FMT, records, 64)
    assert_same(FMT, records, 64, TYPED)
