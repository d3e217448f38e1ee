"""The ``arcion-json`` fast path gives, record by record, exactly what the per-record parser gives.

Every case runs :func:`cdclake.normalize.parse_batches` with and without the fast path
(:func:`test_columnar_fast_path.assert_same`): simulated hours of Arcion Replicant messages at
several batch sizes (the fast path must read nearly all of their row changes), the same hours with
configured keys and types, and with the schemas left out (values and keys sent as bare payloads);
the document samples; and unusual and malformed variants of real simulated messages: every
envelope, payload, ``source`` and image member removed, null or of another JSON type, unknown
operations, control-like messages, empty images, Kafka keys of every shape, value schemas that do
not type, extra and reordered columns, numbers out of a column's range, names the lake refuses,
and bytes that are not one JSON document.
"""
from __future__ import annotations

import copy
import datetime as dt
import json
import pickle

import pytest
from helpers import sample
from parse_harness import DROP, assert_same, dumps, edited

from cdclake.formats import get_parser
from cdclake.record import KafkaRecord
from cdclake.sim import TABLES, SimulatedSource, arcion_json

FORMAT = "arcion-json"
#: A JSON value of each type, for members given the wrong one.
WRONG_TYPES = ("x", 7, -1.5, [1], {"a": 1}, True, None)


def _arcion(seed: int, hours: int = 2, partitions: int = 3) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in arcion_json(src.run(), src.tables, partitions=partitions)]


def _row_changes(records: list[tuple]) -> int:
    return sum(1 for _, _, v in records if v)


@pytest.mark.parametrize("seed", [31, 32, 33])
@pytest.mark.parametrize("size", [1, 64, 1000])
def test_simulated_hours_are_read_alike(seed, size):
    records = _arcion(seed)
    read_fast = assert_same(FORMAT, records, size)
    assert read_fast >= 0.95 * _row_changes(records), (read_fast, _row_changes(records))


def test_with_configured_keys_and_types_is_read_alike():
    options = {"column_types": {"shop.customers": {"email": "date", "extra": "int"}, "note": "bigint"},
               "primary_keys": {"customers": ["email"], "orders": ["id", "customer_id"]}}
    assert_same(FORMAT, _arcion(34, hours=1), 64, options)


def test_a_configured_key_over_null_kafka_keys_is_read_alike():
    records = [(p, b"null" if i % 2 else None, v) for i, (p, _, v) in enumerate(_arcion(35, hours=1))]
    options = {"primary_keys": {t.name: list(t.primary_key) for t in TABLES.values()}}
    read_fast = assert_same(FORMAT, records, 64, options)
    assert read_fast >= 0.95 * _row_changes(records)
    assert_same(FORMAT, records, 64)  # no key at all: every record is quarantined alike


def _bare(raw: bytes, envelope: bool) -> bytes:
    """A Connect document without its schema: ``{"schema": null, "payload": ...}`` or the bare payload."""
    payload = json.loads(raw)["payload"]
    return dumps({"schema": None, "payload": payload} if envelope else payload)


def test_messages_without_schemas_are_read_alike():
    """Schemas disabled: configured types (all but the Base64 decimals and bytes) type the columns."""
    types = {t.name: {c.name: c.ctype for c in t.columns if not c.ctype.startswith("decimal") and c.ctype != "binary"}
             for t in TABLES.values()}
    records = [(p, _bare(k, i % 2 == 0), v if v is None else _bare(v, i % 3 == 0))
               for i, (p, k, v) in enumerate(_arcion(36, hours=1))]
    read_fast = assert_same(FORMAT, records, 100, {"column_types": types})
    assert read_fast >= 0.95 * _row_changes(records)
    # keys sent with their schema type their columns too: those records are left to parse()
    mixed = [(p, k, v if v is None else _bare(v, False)) for p, k, v in _arcion(36, hours=1)]
    assert_same(FORMAT, mixed, 100, {"column_types": types})


def test_document_samples_are_read_alike():
    names = ["snapshot-insert", "insert", "update", "delete", "tombstone"]
    pairs = [(sample("arcion", f"{n}.key.json").encode(), sample("arcion", f"{n}.value.json").encode()) for n in names]
    pairs.append((sample("arcion", "update.key.json").encode(), sample("arcion", "update.value-key.json").encode()))
    compact = [(k, dumps(json.loads(v)) if v.strip() != b"null" else None) for k, v in pairs]
    for size in (1, 4, 100):
        read_fast = assert_same(FORMAT, [(0, k, v) for k, v in pairs + compact], size)
        assert read_fast >= 8


# ---------------------------------------------------------------------------------------------
# variants of real messages


def _first(records: list[tuple], op: str, table: str = None) -> tuple[bytes, dict]:
    for _, key, value in records:
        if value is not None:
            doc = json.loads(value)
            if doc["payload"]["op"] == op and table in (None, doc["payload"]["source"]["table"]):
                return key, doc
    raise LookupError(op)


def _key_doc(key: bytes, **payload) -> bytes:
    doc = json.loads(key)
    doc["payload"] = payload
    return dumps(doc)


def _variants(records: list[tuple]) -> list[tuple]:
    """``(key, value)`` pairs from simulated messages: unusual but valid, or malformed."""
    snap_key, snap = _first(records, "r")
    ins_key, ins = _first(records, "c")
    upd_key, upd = _first(records, "u")
    del_key, dele = _first(records, "d")
    cus_key, cus = _first(records, "u", "customers")
    events = [(snap_key, snap), (ins_key, ins), (upd_key, upd), (del_key, dele)]
    out = []

    def doc(key, d, path=(), **members):
        out.append((key, edited(d, tuple(path), members)))

    # the envelope and the payload: every member removed or of each JSON type
    for key, d in events:
        for name in ("schema", "payload"):
            doc(key, d, **{name: DROP})
            for value in WRONG_TYPES + ({},):
                doc(key, d, **{name: value})
        doc(key, d, extra=1)
        for name in ("before", "after", "source", "op", "ts_ms"):
            doc(key, d, ("payload",), **{name: DROP})
            for value in WRONG_TYPES + ({},):
                doc(key, d, ("payload",), **{name: value})
        doc(key, d, ("payload",), extra={"x": 1}, transaction={"id": "t"})
        # the source block: every member removed or of each JSON type
        for name in list(d["payload"]["source"]) + ["extra"]:
            doc(key, d, ("payload", "source"), **{name: DROP})
            for value in WRONG_TYPES + ("",):
                doc(key, d, ("payload", "source"), **{name: value})
    # operations, control-like and DDL-like messages
    for op in ("x", "U", "", "t", "m", "d ", "insert"):
        doc(ins_key, ins, ("payload",), op=op)
    doc(upd_key, upd, ("payload",), op="c")
    doc(upd_key, upd, ("payload",), op="r")
    doc(upd_key, upd, ("payload",), op="d")
    doc(ins_key, ins, ("payload",), op="d")
    doc(del_key, dele, ("payload",), op="u")
    out.append((ins_key, dumps({"schema": None, "payload": {"type": "DDL", "ddl": "CREATE TABLE t (id INT)",
                                                              "source": ins["payload"]["source"]}})))
    out.append((ins_key, dumps({"schema": None, "payload": {"ts_ms": 1, "serverName": "x"}})))
    out.append((ins_key, dumps({"schema": None, "payload": {"status": "BEGIN", "id": "1"}})))
    # images: empty, of another shape, every column removed, null or of each JSON type
    doc(upd_key, upd, ("payload",), before={})
    doc(upd_key, upd, ("payload",), after={})
    doc(ins_key, ins, ("payload",), after={})
    doc(snap_key, snap, ("payload",), after={})
    doc(ins_key, ins, ("payload",), before=ins["payload"]["after"])
    doc(del_key, dele, ("payload",), before={})
    doc(del_key, dele, ("payload",), before={}, after={})
    doc(del_key, dele, ("payload",), after=dele["payload"]["before"])
    doc(del_key, dele, ("payload",), after={"id": "x"})
    for key, d in events + [(cus_key, cus)]:
        for image in ("before", "after"):
            row = d["payload"][image]
            if not row:
                continue
            for col in row:
                doc(key, d, ("payload", image), **{col: DROP})
                for value in WRONG_TYPES + ("", 10**30, -(2**63) - 1, 2**64, 1e300, 1.0, -0.0, "AAEC", "@@@"):
                    doc(key, d, ("payload", image), **{col: value})
            doc(key, d, ("payload", image), extra="1")
            doc(key, d, ("payload", image), **{"a/b": 1})
            doc(key, d, ("payload", image), **{"c\x01": 1})
            doc(key, d, ("payload",), **{image: dict(reversed(list(row.items())))})
    urow = upd["payload"]["after"]
    first = next(iter(urow))
    doc(upd_key, upd, ("payload",), before={k: v for k, v in urow.items() if k != first})
    doc(upd_key, upd, ("payload",), before={**urow, "extra": 1})
    # names
    for table in ("a/b", "..", ".", "t\tx", "t\x7f", "ok", " ", "x" * 300):
        doc(upd_key, upd, ("payload", "source"), table=table)
    for db in ("a\\b", "..", "", "é"):
        doc(upd_key, upd, ("payload", "source"), db=db)
        doc(upd_key, upd, ("payload", "source"), schema=db)
    # positions, times and transactions
    src = ("payload", "source")
    for pos in (10**40, -1, "12", " 12 ", 1.5, True, 2**63, 0):
        doc(upd_key, upd, src, pos=pos)
    for row in ("0", -3, 10**38):
        doc(upd_key, upd, src, row=row)
    for file in ("mysql-bin.x", "bin.000009", "mysql-bin.000001 ", "000003"):
        doc(upd_key, upd, src, file=file)
    doc(upd_key, upd, src, file=None, pos=None)
    doc(snap_key, snap, src, file="mysql-bin.000001", pos=4)
    doc(snap_key, snap, src, file="mysql-bin.000001")
    doc(snap_key, snap, src, pos=4)
    for ts in (-5, 1.5, "17", 10**39, "", 0):
        doc(upd_key, upd, src, ts_ms=ts)
    for connector in ("postgresql", "ORACLE", "MariaDB", None, "", 3):
        doc(upd_key, upd, src, connector=connector, file=None, pos=None, row=None)
        doc(upd_key, upd, src, connector=connector)
        doc(snap_key, snap, src, connector=connector, file=None, pos=None, row=None)
    for gtid in ("", 0, False, ["a"], {"a": 1}, 1.5, "abc:12"):
        doc(upd_key, upd, src, gtid=gtid)
    # Kafka keys
    key_doc = json.loads(upd_key)
    key_col = next(iter(key_doc["payload"]))
    key_value = key_doc["payload"][key_col]
    for key in (None, b"", b"null", b" null ", b"default", b'"default"', b"{}", b"[1]", b"5", b"not json",
                b"\xff\xfe", b'{"schema":null,"payload":null}', b'{"schema":null,"payload":{}}',
                b'{"schema":null,"payload":[1]}', _key_doc(upd_key), _key_doc(upd_key, other=1),
                _key_doc(upd_key, **{key_col: None}), _key_doc(upd_key, **{key_col: "x"}),
                _key_doc(upd_key, **{key_col: key_value, "extra": 2}), dumps({key_col: key_value}),
                dumps({"extra": 1, key_col: key_value}), upd_key + b" ", upd_key[:-3]):
        out.append((key, dumps(upd)))
        out.append((key, dumps(dele)))
        out.append((key, edited(dele, ("payload",), {"before": {}})))
        out.append((key, edited(dele, ("payload", "before"), {key_col: None})))
    for fields in ([], None, "x", [{"type": "int32", "field": key_col}, {"type": "string", "field": "other"}],
                   [{"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": "x",
                     "field": key_col}],
                   [{"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                     "parameters": {"scale": "x"}, "field": key_col}],
                   [{"type": "string", "field": key_col}], [5, {"field": 3}]):
        key = copy.deepcopy(key_doc)
        key["schema"]["fields"] = fields
        out.append((dumps(key), dumps(upd)))
        out.append((dumps(key), edited(dele, ("payload",), {"before": {}})))
    # value schemas: columns typed otherwise, or not typed at all
    value_fields = upd["schema"]["fields"]
    struct = next(f for f in value_fields if f["field"] == "after")
    for col_schema in ({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": [1]},
                       {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "x"}},
                       {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"},
                       {"type": "string"}, {"type": ["int32"]}, {"type": "int8"}, {"type": "float32"}):
        d = copy.deepcopy(upd)
        for f in d["schema"]["fields"]:
            if f["field"] in ("before", "after"):
                f["fields"][1] = {**col_schema, "field": f["fields"][1]["field"]}
        out.append((upd_key, dumps(d)))
    for fields in ([f for f in value_fields if f["field"] != "before"], [f for f in value_fields if f["field"] != "after"],
                   [{**struct, "fields": struct["fields"][1:]}] + value_fields, [], "x"):
        d = copy.deepcopy(upd)
        d["schema"]["fields"] = fields
        out.append((upd_key, dumps(d)))
    # bytes that are not one JSON document, or are one in another layout
    raw = dumps(upd)
    # a second schema (small: the nesting pre-check leaves values of many brackets to parse())
    other = {"type": "struct", "fields": [{"type": "struct", "field": "after", "fields": [
        {"type": "string", "field": c} for c in upd["payload"]["after"]]}]}
    second_schema = raw[:-1] + b',"schema":' + dumps(other) + b"}"  # the last member of a name wins
    out += [(upd_key, second_schema + b"\n"), (upd_key, second_schema)]
    out += [(upd_key, raw + b" x"), (upd_key, raw + b"  "), (upd_key, raw + b"\n"), (upd_key, raw[:-5]),
            (upd_key, raw + raw), (upd_key, raw[:-1] + b',"payload":{"op":"d"}}'),
            (upd_key, raw[:-1] + b',"schema":null}'), (upd_key, b"\xef\xbb\xbf" + raw),
            (upd_key, raw.replace(b'"after":{', b'"after":{"x\xff":1,', 1)),
            (upd_key, raw.replace(b'"after":{', b'"after":{"\\ud800":0,', 1)),
            (upd_key, raw.replace(b'"after":{', b'"after":{"%s":0,' % first.encode(), 1)),
            (upd_key, raw.replace(b'"op":"u"', b'"op":"u","op":"x"', 1)),
            (upd_key, raw.replace(b'"op":"u"', b'"op":"x","op":"u"', 1)),
            (upd_key, raw.replace(b'"ts_ms":', b'"ts_ms":NaN,"x":', 1)),
            (upd_key, raw.replace(b'"payload":', b'"payload": \n', 1)),
            (upd_key, json.dumps(upd, indent=1).encode()),
            (upd_key, dumps({"payload": upd["payload"], "schema": upd["schema"]})),
            (upd_key, b"null"), (upd_key, b" null "), (upd_key, b"default"), (upd_key, b'"default"'),
            (upd_key, b"[]"), (upd_key, b'"x"'), (upd_key, b"{}"), (upd_key, b""), (upd_key, None)]
    return out


@pytest.fixture(scope="module")
def arcion_records():
    return _arcion(37, hours=2, partitions=1)


@pytest.fixture(scope="module")
def variants(arcion_records):
    return _variants(arcion_records)


@pytest.mark.parametrize("size", [1, 9, 500])
def test_variants_are_read_alike(arcion_records, variants, size):
    # after the hour's first messages (their envelopes known), and alone (learnt from the variants)
    head = arcion_records[:30]
    assert_same(FORMAT, head + [(1, k, v) for k, v in variants], size)
    assert_same(FORMAT, [(1, k, v) for k, v in variants], size)


def test_variants_mixed_with_ordinary_messages_are_read_alike(arcion_records, variants):
    ordinary = [r for r in arcion_records if r[2] is not None][:len(variants)]
    mixed = [r for pair in zip(ordinary, [(1, k, v) for k, v in variants]) for r in pair]
    read_fast = assert_same(FORMAT, mixed, 500)
    assert read_fast >= len(ordinary)
    options = {"primary_key": ["id"], "column_types": {"extra": "int", "c\x01": "string"}}
    assert_same(FORMAT, mixed, 97, options)


def test_deletes_keyed_by_their_kafka_key_are_read_alike(arcion_records):
    """Deletes without a before image, or whose key column is null in it, take the key's values."""
    deletes = [(k, json.loads(v)) for _, k, v in arcion_records if v and json.loads(v)["payload"]["op"] == "d"]
    records = []
    for key, d in deletes:
        records.append((0, key, edited(d, ("payload",), {"before": {}})))
        first = next(iter(d["payload"]["before"]))
        records.append((0, key, edited(d, ("payload", "before"), {first: None})))
    read_fast = assert_same(FORMAT, records, 64)
    assert read_fast == len(records) > 0


def test_numbers_are_read_as_json_loads_reads_them(arcion_records):
    """Numbers of every size and shape in every column of a products update (int32, float64,
    Decimal, bytes, string): msgspec's reading of them against the standard library's."""
    import random
    import struct

    rnd = random.Random(7)
    key, upd = _first(arcion_records, "u", "products")
    records = []
    for _ in range(150):
        bits = rnd.getrandbits(64)
        number = rnd.choice([repr(struct.unpack("<d", struct.pack("<Q", bits))[0]), str(bits), str(-bits),
                             f"{rnd.random()}e{rnd.randint(-330, 330)}", str(rnd.getrandbits(200)),
                             f"{rnd.randint(-10**6, 10**6)}.{rnd.randint(0, 10**9)}", "-0", "0.0", "1E2"])
        if number in ("nan", "inf", "-inf"):
            continue
        for col in upd["payload"]["after"]:
            d = copy.deepcopy(upd)
            d["payload"]["after"][col] = "__number__"
            records.append((0, key, dumps(d).replace(b'"__number__"', number.encode())))
    read_fast = assert_same(FORMAT, arcion_records[:20] + records, 50)
    assert read_fast >= 150


def test_a_shipped_parser_starts_without_what_the_fast_path_learned(arcion_records):
    parser = get_parser(FORMAT)
    recs = [KafkaRecord("t", p, i, 0, k, v) for i, (p, k, v) in enumerate(arcion_records) if v]
    first = parser.fast_parse(recs)
    assert parser._fast_keys and parser._fast_names and parser._plans
    clone = pickle.loads(pickle.dumps(parser))
    assert not clone._fast_keys and not clone._fast_names and not clone._plans
    assert clone.fast_parse(recs) == first
