"""The columnar fast path of normalize gives, record by record, exactly what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` twice: with the
formats' fast paths (:meth:`cdclake.formats.base.FormatParser.fast_parse`) and with the
per-record parsers alone (the reference). Every record must give the same output rows (change,
quarantine and control rows, quarantine reasons included; only ``_fast`` and the quarantine time
may differ), on simulated hours of every format with a fast path, and on unusual and malformed
variants of their messages: those of ``tests/test_parse_fast_paths.py`` and more aimed at what
the fast path checks (positions, keys, names, placeholders, numbers a JSON parser may read
differently). The fast path must also read most of a simulated hour: else the equality is empty.
"""
from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

import pytest
from parse_harness import DROP, assert_same, dumps, edited, first_of, raw_batches, variants

from cdclake.formats import FORMATS
from cdclake.sim import SimulatedSource, canal_json, debezium_json
FAST_FORMATS = sorted(name for name, cls in FORMATS.items() if cls.FAST_PATH)


def _simulated(seed: int, hours: int = 2, partitions: int = 3) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in debezium_json(src.run(), src.tables, partitions=partitions)]


#: Where each format's fast path is compared with its per-record parser, record by record.
FAST_PATH_TESTS = {"aliyun-json": "test_fast_path_aliyun", "arcion-json": "test_fast_path_arcion",
                   "aws-dms-json": "test_fast_path_dms", "canal-json": "test_columnar_fast_path",
                   "cdl-json": "test_fast_path_cdl", "debezium-avro": "test_fast_path_debezium_avro",
                   "debezium-json": "test_columnar_fast_path",
                   "debezium-jsonschema": "test_fast_path_debezium_avro", "dts-avro": "test_fast_path_dts",
                   "maxwell-json": "test_fast_path_maxwell", "ogg-json": "test_fast_path_ogg",
                   "qlik-avro": "test_fast_path_qlik", "qlik-json": "test_fast_path_qlik",
                   "shareplex-json": "test_fast_path_shareplex", "auto": "test_formats_auto"}


def test_every_format_has_a_fast_path_compared_record_by_record():
    assert FAST_FORMATS == sorted(FORMATS) == sorted(FAST_PATH_TESTS)
    here = Path(__file__).parent
    for fmt, module in FAST_PATH_TESTS.items():
        assert fmt in (here / f"{module}.py").read_text(), (fmt, module)


@pytest.mark.parametrize("seed", [11, 12, 13])
@pytest.mark.parametrize("size", [1, 50, 1000])
def test_debezium_simulated_hours_are_read_alike(seed, size):
    records = _simulated(seed)
    read_fast = assert_same("debezium-json", records, size)
    if size > 1:  # one record per batch: each batch teaches the envelope the next one reads
        assert read_fast >= 0.8 * len(records), (read_fast, len(records))


def test_a_parsed_batch_leaves_no_garbage_collection_behind():
    """The rows a batch is parsed into are freed before the cyclic collector is enabled again:
    when the second batch of the same records (the parser's caches of envelopes and keys filled
    by the first) is handed over, the collector's young generation holds fewer objects than the
    batch has records (what the parser keeps), not every row of the batch, whose collection, set
    off by the writer's next allocation, would visit them all (a tenth of the Debezium parse)."""
    import gc

    from parse_harness import TAGGED

    from cdclake.formats import get_parser
    from cdclake.normalize import parse_batches

    records = _simulated(11, hours=6)[:2000]
    assert len(records) == 2000
    gc.collect()
    young = []
    for out in parse_batches({"t": get_parser("debezium-json")}, TAGGED, raw_batches(records + records, 2000)):
        young.append(len(gc.get_objects(generation=0)))
        assert out.num_rows >= 2000
    assert gc.isenabled() and len(young) == 2 and young[1] < len(records), young


def test_debezium_with_configured_keys_and_types_is_read_alike():
    options = {"column_types": {"name": "int", "shop.customers": {"email": "date"}},
               "primary_keys": {"customers": ["email"], "orders": ["id", "customer_id"]}}
    assert_same("debezium-json", _simulated(14, hours=1), 64, options)


def _more_variants(messages) -> list[tuple]:
    """Variants aimed at what the fast path checks itself."""
    ins_key, ins = first_of(messages, "c")
    upd_key, upd = first_of(messages, "u")
    del_key, dele = first_of(messages, "d")
    out = []

    def doc(key, d, path=(), **members):
        out.append((key, edited(d, ("payload",) + tuple(path), members)))

    src = ("source",)
    for pos in (10**40, -1, "12", None, 1.5, True, 2**63):
        doc(upd_key, upd, src, pos=pos)
    for row in (None, "0", -3):
        doc(upd_key, upd, src, row=row)
    for file in (None, "", 7, "mysql-bin.x", "bin.000009"):
        doc(upd_key, upd, src, file=file)
    for ts in (None, -5, 1.5, "17", 10**39):
        doc(upd_key, upd, src, ts_ms=ts)
        doc(upd_key, upd, ts_ms=ts)
    doc(upd_key, upd, src, connector="postgresql", lsn=24023128, sequence='["24023000","24023128"]')
    doc(upd_key, upd, src, connector="sqlserver", change_lsn="00000027:00000758:0003")
    doc(upd_key, upd, src, connector=None)
    doc(upd_key, upd, src, txId=77)
    doc(upd_key, upd, src, gtid="abc:12")
    doc(upd_key, upd, src, table="a/b")
    doc(upd_key, upd, src, table="")
    doc(upd_key, upd, src, db=3)
    doc(upd_key, upd, src, db=None)
    doc(upd_key, upd, src, schema="public")
    doc(upd_key, upd, src, namespace="ns", connector=DROP)
    doc(upd_key, upd, transaction={"id": "tx1", "total_order": 4, "data_collection_order": 2})
    doc(upd_key, upd, transaction={"id": None, "total_order": "4"})
    doc(upd_key, upd, transaction={"total_order": -1})
    doc(upd_key, upd, transaction=[1])
    doc(upd_key, upd, ts_us=1, ts_ns=2)
    doc(upd_key, upd, unique={"id": 1})
    doc(upd_key, upd, op="r")
    doc(upd_key, upd, before=None)
    after = upd["payload"]["after"]
    first = next(iter(after))
    for value in ([1, "__debezium_unavailable_value"], {"a": 1}, "__debezium_unavailable_value", 10**30, -0.0, 1e300,
                  "\u00e9\U0001F600", None, True):
        doc(upd_key, upd, ("after",), **{c: value for c in list(after)[1:2]})
    doc(upd_key, upd, ("after",), **{first: None})       # a null key column
    doc(upd_key, upd, ("after",), **{first: DROP})      # a missing key column
    doc(upd_key, upd, ("after",), extra="x")
    raw = dumps(upd)
    out.append((upd_key, raw.replace(b'"after":{', b'"after":{"%s":0,' % first.encode(), 1)))  # duplicate member
    out.append((upd_key, raw.replace(b'"after":{', b'"after":{"\\ud800":0,', 1)))             # lone surrogate
    out.append((upd_key, raw.replace(b'"op":"u"', b'"op":"u","op":"c"', 1)))
    out.append((upd_key, raw.replace(b'"source":{', b'"source":{"pos":1,', 1)))
    # deletes: the before image and the Kafka key
    doc(del_key, dele, before=None)
    doc(del_key, dele, ("before",), **{next(iter(dele["payload"]["before"])): None})
    doc(del_key, dele, after={})
    out.append((None, dumps(dele)))
    out.append((b"not json", dumps(dele)))
    out.append((b'{"id":1,"other":2}', dumps(dele)))
    out.append((b'{"id":"1"}', dumps(upd)))
    out.append((b"{}", dumps(upd)))
    out.append((b"[1]", dumps(ins)))
    out.append((ins_key, dumps(ins).replace(b'"after":{', b'"after":{"x":NaN,', 1)))
    return out


@pytest.fixture(scope="module")
def debezium_messages():
    src = SimulatedSource(seed=11, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=2)
    return [(m.key, m.value) for m in debezium_json(src.run(), src.tables)]


@pytest.mark.parametrize("size", [1, 7, 500])
def test_debezium_variants_are_read_alike(debezium_messages, size):
    odd = variants(debezium_messages) + _more_variants(debezium_messages)
    # the variants after the hour's first messages (the envelopes known) and alone (learnt from them)
    head = [(0, k, v) for k, v in debezium_messages[:40]]
    records = head + [(1, k, v) for k, v in odd]
    assert_same("debezium-json", records, size)
    assert_same("debezium-json", [(1, k, v) for k, v in odd], size)


def test_the_fast_path_reads_numbers_as_json_loads_does(debezium_messages):
    """Numbers of every size and shape in a ``double`` column (products.weight) and an ``int32`` one
    (products.stock): msgspec's reading of them against the standard library's."""
    import random
    import struct

    rnd = random.Random(5)
    key, upd = next((k, json.loads(v)) for k, v in debezium_messages
                    if v and json.loads(v)["payload"].get("op") == "u"
                    and json.loads(v)["payload"]["source"]["table"] == "products")
    records = []
    for _ in range(400):
        bits = rnd.getrandbits(64)
        number = rnd.choice([repr(struct.unpack("<d", struct.pack("<Q", bits))[0]), str(bits), str(-bits),
                             f"{rnd.random()}e{rnd.randint(-330, 330)}", str(rnd.getrandbits(200)),
                             f"{rnd.randint(-10**6, 10**6)}.{rnd.randint(0, 10**9)}"])
        if number in ("nan", "inf", "-inf"):
            continue
        for col in ("weight", "stock"):
            d = copy.deepcopy(upd)
            d["payload"]["after"][col] = "__number__"
            records.append((0, key, dumps(d).replace(b'"__number__"', number.encode())))
    read_fast = assert_same("debezium-json", [(0, k, v) for k, v in debezium_messages[:20]] + records, 50)
    assert read_fast >= 300


# ---------------------------------------------------------------------------------------------
# canal-json


def _canal(seed: int, hours: int = 2, partitions: int = 2) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in canal_json(src.run(), src.tables, partitions=partitions)]


@pytest.mark.parametrize("seed", [21, 22])
@pytest.mark.parametrize("size", [1, 64, 1000])
def test_canal_simulated_hours_are_read_alike(seed, size):
    records = _canal(seed)
    read_fast = assert_same("canal-json", records, size)
    rows = [json.loads(v) for _, _, v in records if v]
    assert read_fast >= sum(1 for m in rows if m["type"] in ("INSERT", "UPDATE", "DELETE")) * 0.95


def test_canal_with_configured_keys_and_types_is_read_alike():
    options = {"column_types": {"shop.customers": {"email": "date", "extra": "int"}},
               "primary_keys": {"customers": ["email"], "orders": ["id", "customer_id"]}}
    assert_same("canal-json", _canal(23, hours=1), 64, options)


def _canal_variants(records) -> list[tuple]:
    """Variants of simulated Canal messages: unusual but valid, or malformed."""
    msgs = [json.loads(v) for _, _, v in records if v]
    ins = next(m for m in msgs if m["type"] == "INSERT")
    upd = next(m for m in msgs if m["type"] == "UPDATE" and m.get("old"))
    dele = next(m for m in msgs if m["type"] == "DELETE")
    out = []

    def doc(m, key=None, **members):
        out.append((key, edited(m, (), members)))

    for t in ("insert", "Update", "TRUNCATE", "DDL", "x", "", None, 3, "INIT", "init"):
        doc(ins, type=t)
    for es in (None, "5", -1, 10**40):
        doc(ins, type="INIT", es=es)
    doc(ins, type="INIT", data=[ins["data"][0], ins["data"][0]])
    doc(ins, type="INIT", old=ins["data"])
    doc(ins, type="INIT", pkNames=None)
    doc(ins, type="INIT", isDdl=True)
    for flag in (True, "true", "false", 1, None):
        doc(ins, isDdl=flag)
    for db in ("", None, 3, "a/b"):
        doc(ins, database=db)
    for table in ("", None, 3, "..", "t\tx", "ok"):
        doc(ins, table=table)
    for es in ("1714521600100", -1, None, 1.5, 10**40, True):
        doc(ins, es=es)
    for msg_id in (None, 0, "7", -2, [1]):
        doc(ins, id=msg_id)
    for pk in ([], None, "id", [1], ["nope"], ["id", "name"]):
        doc(ins, pkNames=pk)
        doc(ins, key=b'{"id": 1}', pkNames=pk)
    for types in (None, [], {"id": ["bigint"]}, {}, {"id": "varchar(3)"}):
        doc(ins, mysqlType=types)
    row = ins["data"][0]
    first = next(iter(row))
    doc(ins, data=[])
    doc(ins, data=None)
    doc(ins, data=row)
    doc(ins, data=[row, row])
    doc(ins, data=[row, dict(reversed(list(row.items())))])
    doc(ins, data=[row, {**row, "extra": "1"}])
    doc(ins, data=[row, 5])
    doc(ins, data=[{**row, first: None}])
    doc(ins, data=[{k: v for k, v in row.items() if k != first}])
    for value in (5, 1.5, True, [1], {"a": 1}, "x" * 3, "\u00e9", None, "2024-13-40 00:00:00"):
        doc(ins, data=[{**row, **{c: value for c in list(row)[1:3]}}])
    doc(ins, old=[row])
    doc(ins, old="x")
    urow, uold = upd["data"][0], upd["old"][0]
    doc(upd, old=None)
    doc(upd, old=[])
    doc(upd, old=[None])
    doc(upd, old=["x"])
    doc(upd, old=[{**uold, "extra": "1"}])
    doc(upd, old=[{next(iter(urow)): None}])
    doc(upd, old=[uold, uold], data=[urow, urow])
    doc(upd, old=[uold], data=[urow, urow])
    doc(upd, old="x")
    drow = dele["data"][0]
    doc(dele, data=None, old=[drow])
    doc(dele, data=[{k: v for k, v in drow.items() if k != first}])
    doc(dele, key=b'{"' + first.encode() + b'": "9"}', data=[{k: v for k, v in drow.items() if k != first}])
    doc(dele, key=b"not json", data=[{k: v for k, v in drow.items() if k != first}])
    raw = dumps(ins)
    out += [(None, raw + b" x"), (None, raw + b"  "), (None, raw[:-5]), (None, b"\xef\xbb\xbf" + raw),
            (None, raw.replace(b'"type":"INSERT"', b'"type":"INSERT","type":"DELETE"', 1)),
            (None, raw.replace(b'"data":[{', b'"data":[{"\\ud800":"1",', 1)),
            (None, raw.replace(b'"es":', b'"es":NaN,"x":', 1)), (None, b"[]"), (None, b'"x"'), (None, b"")]
    return out


@pytest.mark.parametrize("size", [1, 9, 500])
def test_canal_variants_are_read_alike(size):
    records = _canal(24, hours=1, partitions=1)
    variants = _canal_variants(records)
    assert_same("canal-json", records[:30] + [(1, k, v) for k, v in variants], size)
