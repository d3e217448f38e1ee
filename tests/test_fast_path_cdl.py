"""The ``cdl-json`` columnar fast path gives, record by record, exactly what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` with the fast path
(:meth:`cdclake.formats.cdl.CdlJsonParser.fast_parse`) and with the per-record parser alone
(:func:`test_columnar_fast_path.assert_same`): every record must give the same rows, quarantine
reasons included. Records: simulated hours rendered by :func:`cdclake.sim.cdl_json` (of which the
fast path must read nearly every row change, else the equality is empty), the same with configured
keys and types, and unusual or malformed variants of simulated messages: every payload member and
image member removed, null or of another JSON type, heartbeats, other versions and operations,
positions and transaction properties of every shape, keys null, missing or only in the Kafka key,
columns added, dropped or reordered, numbers and decimals a converter refuses or reads specially,
schemas changed, names a path could not hold, and bytes that are not one JSON document. The column
converters of the fast path are also compared with the per-record parser's ``convert``, value by
value, errors included.
"""
from __future__ import annotations

import copy
import datetime as dt
import json
import pickle
import random
import struct

import pytest
from parse_harness import CONNECT_SCHEMAS, CONNECT_VALUES, DROP, assert_same, dumps, edited_doc, outcome

from cdclake.formats.cdl.parser import _converter, _Typed
from cdclake.record import ParseError
from cdclake.sim import SimulatedSource, cdl_json
from cdclake.sim.wire import WIRE_FORMATS

FMT = "cdl-json"
START = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)
#: The options the pipeline's CDL source is run with (CDL's Decimal carries no precision).
WIRE_OPTIONS = next(w for w in WIRE_FORMATS if w.format == FMT).options["options"]


def _simulated(seed: int, hours: int = 2, partitions: int = 3) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=START, hours=hours)
    return [(m.partition, m.key, m.value) for m in cdl_json(src.run(), src.tables, partitions=partitions)]


def _row_changes(records: list[tuple]) -> int:
    return sum(1 for _, _, v in records if v and json.loads(v)["payload"].get("OPERATION"))


#: A value of each JSON type (and a missing member) that a field may be replaced with.
ODD = (DROP, None, "x", "", 7, -1, 1.5, 10**30, True, False, [], [1], {}, {"a": 1})


def _edit(doc: dict, path: tuple = (), **members) -> dict:
    """A copy of ``doc`` whose object at ``path`` has ``members`` set (``DROP``: removed)."""
    return edited_doc(doc, path, members)


# --- simulated hours --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [31, 32, 33])
@pytest.mark.parametrize("size", [1, 64, 1000])
def test_simulated_hours_are_read_alike(seed, size):
    records = _simulated(seed)
    read_fast = assert_same(FMT, records, size)
    assert read_fast >= 0.95 * _row_changes(records), (read_fast, _row_changes(records))


def test_simulated_hours_with_the_pipeline_options_are_read_alike():
    records = _simulated(34)
    read_fast = assert_same(FMT, records, 200, WIRE_OPTIONS)
    assert read_fast >= 0.95 * _row_changes(records)


# --- configured keys and types ----------------------------------------------------------------

@pytest.mark.parametrize("options", [
    {"column_types": {"public.customers": {"balance": "decimal(12,2)", "email": "date", "extra": "int"},
                      "orders": {"amount": "decimal(20,4)", "note": "bigint"}, "price": "date"},
     "primary_keys": {"customers": ["email"], "public.orders": ["id", "customer_id"], "products": ["nope"]}},
    {"primary_key": ["name"], "column_types": {"amount": "decimal(3,1)", "balance": "int", "price": "string"}},
    {"primary_key": "id", "primary_keys": {"public.products": ["code", "id"]},
     "column_types": {"products": {"price": "decimal(38,10)"}, "created_at": "timestamp"}},
])
def test_configured_keys_and_types_are_read_alike(options):
    records = _simulated(35, hours=1)
    read_fast = assert_same(FMT, records, 64, options)
    assert read_fast > 0


@pytest.mark.parametrize("options", [{"column_types": {"a/b": "int"}}, {"column_types": {"orders": {"x\ty": "int"}}},
                                     {"primary_key": ["id", ".."]}, {"primary_keys": {"orders": ["a\\b"]}}])
def test_configured_names_a_path_cannot_hold_are_read_alike(options):
    assert_same(FMT, _simulated(35, hours=1), 64, options)


# --- unusual and malformed variants of simulated messages -------------------------------------

@pytest.fixture(scope="module")
def simulated():
    return _simulated(36, hours=1, partitions=1)


def _first(records, op, table=None):
    for _, key, value in records:
        payload = json.loads(value)["payload"]
        if payload.get("OPERATION") == op and (table is None or payload["TABLE_NAME"] == table):
            return key, json.loads(value)
    raise LookupError(op)


def _variants(records) -> list[tuple]:
    """``(key, value)`` records built from simulated messages: valid but unusual, or malformed."""
    ins_key, ins = _first(records, "INSERT", "customers")
    upd_key, upd = _first(records, "UPDATE", "products")
    del_key, dele = _first(records, "DELETE")
    beat = next(json.loads(v) for _, k, v in records if k is None)
    out: list[tuple] = []

    def doc(key, d, path=(), **members):
        out.append((key, dumps(_edit(d, ("payload",) + tuple(path), **members))))

    # every payload member of each operation: missing, null, of each JSON type
    for key, d in ((ins_key, ins), (upd_key, upd), (del_key, dele)):
        for member in list(d["payload"]) + ["extra"]:
            for value in ODD:
                doc(key, d, **{member: value})
    # every image member: missing, null, of each JSON type
    for key, d, image in ((ins_key, ins, "data"), (upd_key, upd, "data"), (upd_key, upd, "before"),
                          (del_key, dele, "before"), (del_key, dele, "unique"), (ins_key, ins, "unique")):
        for col in d["payload"][image]:
            for value in ODD + ("12", " 12 ", "-7", "1e3", "12.50", "1.5E+3", "NaN", "Infinity", "abc", -(2**70),
                                2**63, 12.0, -0.0, 1e300, "2024-01-02", "2024-01-02 03:04:05", "0000-00-00",
                                "AAEC", "QUJ", "\u00e9\U0001F600"):
                doc(key, d, (image,), **{col: value})
    # operations, versions, heartbeats
    for operation in ("insert", " Update ", "delete", "UPSERT", "TRUNCATE", "DDL", "INSERT\n", "İNSERT"):
        doc(ins_key, ins, OPERATION=operation)
    for version in ("1.0", "2.0", "3.0", 1.0, 1, None, "1.0 ", DROP):
        doc(ins_key, ins, message_version=version)
    for message_type in ("0", "1", 0, 1, "00", None, DROP, 0.0):
        doc(ins_key, ins, message_type=message_type)
        out.append((None, dumps(_edit(beat, ("payload",), message_type=message_type))))
    doc(ins_key, ins, OPERATION=None, TABLE_NAME=None, data=None, unique=None)
    doc(ins_key, ins, OPERATION=None, TABLE_NAME=None, data=None, HEARTBEAT_IDENTIFIER=None)
    out.append((None, dumps(_edit(beat, ("payload",), message_type="0"))))
    out.append((None, dumps(_edit(beat, ("payload",), message_type="0", OPERATION="INSERT"))))
    # positions and transactions
    tx = ("transaction",)
    for lsn in ("26/2C5A7E10", "163955221008", " 12 ", "zz", -1, 10**38, 10**38 - 1, 1.5, True, None, [1], {}):
        doc(upd_key, upd, tx, properties=[{"name": "lsn", "value": lsn}, {"name": "txId", "value": 9}])
    for tx_id in (None, "x-1", 7, 1.5, [1], {"a": 1}, True, "", 10**30):
        doc(upd_key, upd, tx, properties=[{"name": "lsn", "value": 5}, {"name": "txId", "value": tx_id}])
    for props in ({"lsn": 5, "txId": "x-1"}, {}, [], None, "lsn=1", [["lsn", 1]], [{"name": 3, "value": 1}],
                  [{"value": 1}], [{"name": "lsn"}], [{"name": "lsn", "value": 2}, {"name": "lsn", "value": 3}],
                  [{"name": "LSN", "value": 2}], 5):
        doc(upd_key, upd, tx, properties=props)
    doc(upd_key, upd, tx, properties=DROP, other=1)
    for ts in (None, -5, 0, "17", " 17", 1.5, 10**39, 10**20, 10**38 - 1, True, "yesterday", [1]):
        doc(upd_key, upd, TIMESTAMP=ts)
    # names
    for table in ("a/b", "..", ".", "t\tx", "t\x00", "a\\b", "ok name", "\u00e9t\u00e9", "x" * 300):
        doc(ins_key, ins, TABLE_NAME=table)
    for owner in ("a/b", "..", "", None, 3, "s\x7f", "other"):
        doc(ins_key, ins, SEG_OWNER=owner)
    # keys: unique, the Kafka key, the configured key
    row = ins["payload"]["data"]
    first = next(iter(row))
    for unique in (None, {}, [34], "id", {first: None}, {"other": 1}, {first: 1, "name": "x"}, {first: "x"},
                   {"a/b": 1}, {"name": "n", first: 1}):
        doc(ins_key, ins, unique=unique)
        doc(del_key, dele, unique=unique)
        doc(del_key, dele, unique=unique, before=None)
    for key in (None, b"not json", b'{"id":"abc"}', b'{"id":null}', b'{"other":1}', b"[1]", b"{}", b"null",
                b'{"id":5,"name":"n"}', b'{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},'
                b'"payload":{"id":5}}', b'{"a/b":1}', b'{"id":1}x', b"\xff"):
        doc(key, ins, unique=None)
        doc(key, dele, unique=None, before=None)
        doc(key, dele, before=None)
        doc(key, dele)
        doc(key, upd)
    doc(del_key, dele, data=dele["payload"]["before"])
    doc(del_key, dele, data={**dele["payload"]["before"], "amount": "abc"})
    doc(del_key, dele, data="x")
    doc(del_key, dele, before={})
    doc(del_key, dele, ("before",), id=None)
    doc(del_key, dele, ("before",), id=DROP)
    doc(upd_key, upd, before=None)
    doc(ins_key, ins, before=ins["payload"]["data"])
    # images of other shapes
    for key, d, image in ((ins_key, ins, "data"), (upd_key, upd, "before"), (del_key, dele, "before")):
        img = d["payload"][image]
        doc(key, d, **{image: dict(reversed(list(img.items())))})
        doc(key, d, **{image: {**img, "extra": "x"}})
        doc(key, d, **{image: {"extra": "x", **img}})
        doc(key, d, **{image: {}})
        doc(key, d, **{image: [img]})
        doc(key, d, **{image: {k: v for k, v in img.items() if k != first}})
        doc(key, d, **{image: {("a/b" if k == first else k): v for k, v in img.items()}})
    # schemas changed
    schema = ins["schema"]

    def with_fields(d, struct_name, edit):
        d = copy.deepcopy(d)
        for f in d["schema"]["fields"]:
            if f["field"] == struct_name:
                edit(f["fields"])
        return d

    def set_col(col, entries):
        def edit(fields):
            for f in fields:
                if f["field"] == col:
                    f.update(entries)
        return edit

    for struct_name in ("data", "before", "unique"):
        for col in [f["field"] for f in next(f for f in schema["fields"] if f["field"] == "data")["fields"]][:4]:
            for entries in ({"type": "string"}, {"type": "int32"}, {"type": "boolean"}, {"type": "bytes"},
                            {"name": "com.huawei.cdc.data.Decimal", "type": "string"},
                            {"name": "com.xxx.cdc.data.Decimal", "parameters": {"scale": "2"}},
                            {"name": "com.xxx.cdc.data.Decimal", "parameters": {"scale": "x"}},
                            {"name": "com.xxx.cdc.data.Decimal", "parameters": [1]},
                            {"name": "com.xxx.cdc.data.Timestamp", "type": "string"},
                            {"name": "org.apache.kafka.connect.data.Decimal", "parameters": "scale=2"},
                            {"name": "org.apache.kafka.connect.data.Date", "type": "int32"},
                            {"name": 5}, {"field": 5}, {"type": None}):
                out.append((ins_key, dumps(with_fields(ins, struct_name, set_col(col, entries)))))
    out.append((ins_key, dumps(with_fields(ins, "before", lambda fields: fields.append(
        {"type": "string", "optional": True, "field": "only_before"})))))
    out.append((ins_key, dumps(with_fields(ins, "data", lambda fields: fields.reverse()))))
    out.append((ins_key, dumps(with_fields(ins, "data", lambda fields: fields.clear()))))
    out.append((ins_key, dumps(with_fields(ins, "unique", lambda fields: fields.clear()))))
    for key, d in ((ins_key, ins), (upd_key, upd), (del_key, dele)):
        d = with_fields(with_fields(d, "data", lambda fields: fields.clear()), "before", lambda fields: fields.clear())
        images = {image: None if d["payload"][image] is None else {} for image in ("data", "before")}
        out.append((key, dumps(_edit(d, ("payload",), **images))))
    for bad in ("a/b", "x\ty", "..", "ok name"):  # a column of that name in the schema and the images
        for key, d in ((ins_key, ins), (upd_key, upd), (del_key, dele)):
            d = with_fields(with_fields(d, "data", set_col("name", {"field": bad})), "before",
                            set_col("name", {"field": bad}))
            d = with_fields(d, "unique", lambda fields: fields.append({"type": "string", "field": bad}))
            for image in ("data", "before"):
                if d["payload"][image] is not None:
                    d["payload"][image] = {(bad if k == "name" else k): v for k, v in d["payload"][image].items()}
            out.append((key, dumps(d)))
            out.append((key, dumps(_edit(d, ("payload",), unique={"id": 1, bad: "x"}))))
    for odd_schema in (None, {}, [], "x", {"fields": "x"}, {"fields": [1, {"field": "data", "fields": 3}]}):
        out.append((ins_key, dumps(_edit(ins, (), schema=odd_schema))))
    # bytes that are not one JSON document, or one of another shape
    value = dumps(ins)
    out += [
        (ins_key, value + b' {"x":1}'),
        (ins_key, value + b"  "),
        (ins_key, value[:-1] + b"  }"),
        (ins_key, value[:-1] + b',"payload":{"OPERATION":"DELETE"}}'),
        (ins_key, value[:-1] + b',"extra":1}'),
        (ins_key, value[:-1] + b"]"),
        (ins_key, value[:-20]),
        (ins_key, value[:len(value) // 2]),
        (ins_key, b"\xef\xbb\xbf" + value),
        (ins_key, value.replace(b'"data":{', b'"data":{"x\xff":1,', 1)),
        (ins_key, value.replace(b'"data":{', b'"data":{"\\ud800":1,', 1)),
        (ins_key, value.replace(b'"data":{', b'"data":{"%s":0,' % first.encode(), 1)),
        (ins_key, value.replace(b'"OPERATION":"INSERT"', b'"OPERATION":"INSERT","OPERATION":"DELETE"', 1)),
        (ins_key, value.replace(b'"OPERATION":"INSERT"', b'"OPERATION":"DELETE","OPERATION":"INSERT"', 1)),
        (ins_key, value.replace(b'"TIMESTAMP":', b'"TIMESTAMP":NaN,"x":', 1)),
        (ins_key, value.replace(b'"TIMESTAMP":', b'"TIMESTAMP":1e400,"x":', 1)),
        (ins_key, value.replace(b'"data":{', b'"data":{"x":Infinity,', 1)),
        (ins_key, value.replace(b'"payload":', b'"payload": \n', 1)),
        (ins_key, json.dumps(ins, indent=1).encode()),
        (ins_key, dumps({"payload": ins["payload"], "schema": ins["schema"]})),
        (ins_key, dumps(ins["payload"])),
        (ins_key, dumps(dict(ins, payload=None))),
        (ins_key, dumps(dict(ins, payload=[1]))),
        (ins_key, dumps(dict(ins, payload="x"))),
        (ins_key, b'{"schema":' + dumps(ins["schema"]) + b',"payload":'),
        (ins_key, b'{"schema":' + dumps(ins["schema"]) + b',"payload":}'),
        (ins_key, b'{"schema":' + dumps(ins["schema"]) + b',"payload":1,"x":2}'),
        (ins_key, b'{"schema":' + dumps(ins["schema"]) + b',"payload":null}'),
        (ins_key, b""), (ins_key, None), (ins_key, b"[]"), (ins_key, b'"x"'), (ins_key, b"null"), (ins_key, b"}"),
        (ins_key, b"{}"),
    ]
    return out


@pytest.mark.parametrize("size", [1, 9, 500])
def test_variants_are_read_alike(simulated, size):
    variants = _variants(simulated)
    # after the hour's first messages (envelopes known), and alone (learnt from the variants themselves)
    assert_same(FMT, simulated[:40] + [(0, k, v) for k, v in variants], size)
    assert_same(FMT, [(0, k, v) for k, v in variants], size)


def test_variants_with_configured_keys_and_types_are_read_alike(simulated):
    options = {"primary_key": ["id"], "column_types": {"balance": "decimal(12,2)", "email": "int",
                                                       "amount": "decimal(4,1)", "extra": "boolean"}}
    assert_same(FMT, simulated[:40] + [(0, k, v) for k, v in _variants(simulated)], 97, options)


def test_numbers_are_read_as_json_loads_reads_them(simulated):
    """Numbers of every size and shape in a ``float64`` column (products.weight), an ``int32`` one
    (products.stock), a CDL ``Decimal`` one (products.price) and a Kafka key's ``id``."""
    rnd = random.Random(7)
    key, upd = next((k, json.loads(v)) for _, k, v in simulated
                    if json.loads(v)["payload"].get("OPERATION") == "UPDATE"
                    and json.loads(v)["payload"]["TABLE_NAME"] == "products")
    _, dele = _first(simulated, "DELETE")
    records = []
    for _ in range(300):
        bits = rnd.getrandbits(64)
        number = rnd.choice([repr(struct.unpack("<d", struct.pack("<Q", bits))[0]), str(bits), str(-bits),
                             f"{rnd.random()}e{rnd.randint(-330, 330)}", str(rnd.getrandbits(200)),
                             f"{rnd.randint(-10**6, 10**6)}.{rnd.randint(0, 10**9)}"])
        if number in ("nan", "inf", "-inf"):
            continue
        for col in ("weight", "stock", "price"):
            d = copy.deepcopy(upd)
            d["payload"]["data"][col] = "__number__"
            records.append((0, key, dumps(d).replace(b'"__number__"', number.encode())))
        records.append((0, b'{"id":%s}' % number.encode(), dumps(_edit(upd, ("payload",), unique=None))))
        records.append((0, b'{"id":%s}' % number.encode(), dumps(_edit(dele, ("payload",), unique=None,
                                                                          before=None))))
    read_fast = assert_same(FMT, simulated[:20] + records, 50)
    assert read_fast >= 300


# --- the parts of the fast path -----------------------------------------------------------------

CDL_SCHEMAS = CONNECT_SCHEMAS + [
    {"type": "string", "optional": True, "name": "com.xxx.cdc.data.Decimal", "field": "c"},
    {"type": "string", "name": "com.huawei.cdc.data.Decimal", "field": "c",
     "parameters": {"scale": "2", "connect.decimal.precision": "9"}},
    {"type": "string", "name": "com.xxx.cdc.data.Decimal", "field": "c", "parameters": {"scale": "3"}},
    {"type": "string", "name": "com.xxx.cdc.data.Decimal", "field": "c", "parameters": [1]},
    {"type": "string", "name": "com.xxx.cdc.data.Timestamp", "field": "c"},
    {"type": "int64", "name": "com.xxx.cdc.data.Other", "field": "c"},
]


@pytest.mark.parametrize("configured", [None, "decimal(10,2)", "decimal(38,0)", "int", "date", "timestamp", "string"])
@pytest.mark.parametrize("schema", CDL_SCHEMAS, ids=lambda s: f"{s['type']}-{s.get('name', '')}")
def test_column_converter_is_the_parsers_convert(schema, configured):
    envelope = {"fields": [{"field": "data", "fields": [schema]}]}
    try:
        typed = _Typed(envelope, {"c": configured} if configured else {})
    except ParseError:
        return  # an unreadable field schema: no plan is made, parse reports it
    conv = _converter(typed, "c")
    for value in CONNECT_VALUES + ["12.345", " 7 ", "1_000.5", "-0.0", "1E-30", "sNaN"]:
        assert outcome(conv, value) == outcome(typed.convert, "c", value), (schema, configured, value)


def test_a_shipped_parser_starts_without_what_the_fast_path_learned(simulated):
    from cdclake.formats import get_parser
    from cdclake.record import KafkaRecord

    parser = get_parser(FMT, WIRE_OPTIONS)
    records = [KafkaRecord("t", 0, i, 0, k, v) for i, (_, k, v) in enumerate(simulated[:200])]
    first = parser.fast_parse(records)
    assert parser._plans and parser._reader._known
    clone = pickle.loads(pickle.dumps(parser))
    assert not clone._plans and not clone._reader._known
    assert clone.fast_parse(records) == first
