"""The columnar fast path of ``dts-avro`` gives, record by record, exactly what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` with the fast path
(:meth:`cdclake.formats.dts.DtsAvroParser.fast_parse`) and without it (the reference), compared
by ``assert_same`` of ``tests/test_columnar_fast_path.py`` (every output row, quarantine reasons
included): on simulated hours of DTS Avro, with configured keys and types, and on unusual and
malformed variants of simulated records (fields changed and the record written again, bytes cut,
added or flipped, control records), mixed with ordinary records. The fast path must also read
nearly every row change of a simulated hour: else the equality is empty.
"""
from __future__ import annotations

import copy
import datetime as dt
import io
import pickle
import random

import fastavro
import pytest
from fastavro.schema import parse_schema
from parse_harness import assert_same

from cdclake.formats import get_parser
from cdclake.formats.dts import NAMESPACE, record_schema
from cdclake.formats.dts.schema import OPERATIONS, decode, peek_operation
from cdclake.record import KafkaRecord, ParseError
from cdclake.sim import SimulatedSource
from cdclake.sim.render_dts import dts_avro, encode

FORMAT = "dts-avro"
N = NAMESPACE + "."
ROWS = ("INSERT", "UPDATE", "DELETE")


def _simulated(seed: int, hours: int = 2, partitions: int = 1) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in dts_avro(src.run(), src.tables, partitions=partitions)]


def _row_changes(records: list[tuple]) -> int:
    return sum(1 for _, _, v in records if v and decode(v)["operation"] in ROWS)


@pytest.mark.parametrize("seed, partitions", [(31, 1), (32, 3), (33, 2)])
@pytest.mark.parametrize("size", [1, 64, 1000])
def test_simulated_hours_are_read_alike(seed, partitions, size):
    records = _simulated(seed, partitions=partitions)
    read_fast = assert_same(FORMAT, records, size)
    assert read_fast >= 0.95 * _row_changes(records), (read_fast, _row_changes(records))


@pytest.mark.parametrize("options, share", [
    ({"column_types": {"extra": "string",
                       "shop.customers": {"email": "string", "balance": "double", "birth_date": "string"},
                       "orders": {"amount": "decimal(14,2)", "quantity": "bigint", "ordered_at": "date"}},
      "primary_keys": {"customers": ["email"], "orders": ["id", "customer_id"], "shop.products": ["code"]}}, 0.8),
    ({"primary_key": ["id"], "column_types": {"products": {"weight": "float", "price": "string", "code": "string"}}},
     0.95),
    ({"primary_key": "name,id"}, 0.3),
    ({"column_types": {"name": "int", "status": "int"}}, 0),  # every row change refused alike
])
def test_configured_keys_and_types_are_read_alike(options, share):
    records = _simulated(34, hours=1)
    read_fast = assert_same(FORMAT, records, 64, options)
    assert read_fast >= share * _row_changes(records), (read_fast, _row_changes(records))


# ---------------------------------------------------------------------------------------------
# variants of simulated records


def _written(msg: dict, born: bool = True) -> bytes:
    """``msg`` (a decoded record) written again; EmptyObject values as their symbol, as fastavro writes them."""
    msg = dict(msg)
    for image in ("beforeImages", "afterImages"):
        if isinstance(msg.get(image), list):
            msg[image] = [v[1] if isinstance(v, tuple) and v[0] == N + "EmptyObject" else v for v in msg[image]]
    if born:
        return encode(msg)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parse_schema(record_schema(born_timestamp=False)), msg)
    return out.getvalue()


def _first(messages: list[tuple], operation: str, table: str) -> tuple:
    return next((k, copy.deepcopy(m)) for k, m in messages
                if m["operation"] == operation and m["objectName"] == f"shop.{table}")


def _dt(year=None, month=None, day=None, hour=None, minute=None, second=None, millis=None) -> dict:
    return {"year": year, "month": month, "day": day, "hour": hour, "minute": minute, "second": second,
            "millis": millis}


#: Image values of every branch: ordinary, unusual and refused ones.
VALUES = [
    *[(N + "Integer", {"precision": p, "value": v}) for p, v in [
        (8, "5"), (0, "70000"), (1, "-3"), (3, "99999999"), (16, "123456789012345678901"), (8, " 7 "), (8, "x"),
        (8, "9" * 41), (2, "40000"), (4, "-2147483649"), (20, "-5")]],
    *[(N + "Character", {"charset": cs, "value": b}) for cs, b in [
        ("utf8mb4", "é\U0001F600".encode()), ("gbk", "中".encode("gbk")), ("latin1", b"\x80\x81"),
        ("binary", b"\x00\xff"), ("nope", b"x"), ("utf8", b"\xff"), ("UTF-16", "a".encode("utf-16")),
        ("utf8mb4", b""), ("utf8mb4", "a/b\x00".encode())]],
    *[(N + "Decimal", {"value": v, "precision": p, "scale": s}) for v, p, s in [
        ("1.50", 3, 2), ("1E+3", 1, 0), ("NaN", 0, 0), ("abc", 1, 0), ("-0.000", 4, 3), ("1" * 40, 40, 0),
        ("Infinity", 1, 0), (" 12.5 ", 3, 1), ("1e-40", 1, 40)]],
    *[(N + "Float", {"value": v, "precision": p, "scale": 0}) for v, p in [
        (0.1, 8), (-0.0, 8), (0.0, 8), (float("nan"), 8), (float("inf"), 4), (1e300, 4), (3.4e38, 4), (-0.0, 4),
        (0.0, 4), (1.5, 0)]],
    *[(N + "Timestamp", {"timestamp": t, "millis": m}) for t, m in [
        (0, 0), (1714521600, 999999), (1, 10**6), (-1, 5), (2**40, 0), (-62135596801, 0)]],
    *[(N + "DateTime", d) for d in [
        _dt(2024, 5, 1, 12, 30, 15, 123456), _dt(2024, 5, 1), _dt(0, 0, 0), _dt(0, 0, 0, 1, 2, 3),
        _dt(hour=-838, minute=59, second=59), _dt(hour=12, minute=1, millis=5), _dt(2024), _dt(2024, 5),
        _dt(2024, 2, 30), _dt(2024, 5, 1, 1, 2, 3, 10**6), _dt(2024, 5, 1, 25)]],
    *[(N + "TimestampWithTimeZone", {"value": d, "timezone": z}) for d, z in [
        (_dt(2024, 5, 1, 12, 0, 0, 0), "+08:00"), (_dt(2024, 5, 1, 12, 0, 0, 0), "UTC"),
        (_dt(2024, 5, 1, 12, 0, 0, 0), "Asia/Shanghai"), (_dt(2024, 5, 1, 12, 0, 0, 0), "bogus"),
        (_dt(2024, 5, 1, 12, 0, 0, 0), "-25:00"), (_dt(hour=3, minute=4), " +01:00 "), (_dt(0, 0, 0), "UTC")]],
    (N + "BinaryGeometry", {"type": "POINT", "value": b"\x01\x01\x00"}),
    (N + "BinaryGeometry", {"type": "BLOB", "value": b"\x00"}),  # alike a BinaryObject below
    (N + "TextGeometry", {"type": "POINT", "value": "POINT(1 2)"}),
    *[(N + "BinaryObject", {"type": t, "value": b}) for t, b in [
        ("BIT", b"\x01\x02"), ("JSON", b'{"a":1}'), ("JSON", b"\xff"), ("BLOB", b"\x00"), (" bit ", b"")]],
    *[(N + "TextObject", {"type": t, "value": v}) for t, v in [("TEXT", "t"), ("BOOL", "f"), ("", "\x85")]],
    "NULL", "NONE", None,
]


def _variants(messages: list[tuple]) -> list[tuple]:
    """(key, value) records built from simulated DTS Avro records: valid but unusual, or malformed."""
    ins_key, ins = _first(messages, "INSERT", "customers")
    upd_key, upd = _first(messages, "UPDATE", "products")
    del_key, dele = _first(messages, "DELETE", "orders")
    out: list[tuple] = []

    def rec(key, msg, **fields):
        m = copy.deepcopy(msg)
        m.update(fields)
        out.append((key, _written(m)))

    def value(key, msg, image, index, item, **fields):
        m = copy.deepcopy(msg)
        m[image][index] = item
        m.update(fields)
        out.append((key, _written(m)))

    for operation in OPERATIONS:
        rec(upd_key, upd, operation=operation)
    rec(ins_key, ins, operation="DELETE")
    rec(del_key, dele, operation="INSERT")
    rec(del_key, dele, operation="UPDATE")
    for statement in ("TRUNCATE TABLE `shop`.`customers`", "truncate orders;", "ALTER TABLE t ADD c int", ""):
        rec(None, ins, operation="DDL", objectName="shop", fields=None, beforeImages=None, afterImages=statement)
    for operation in ("BEGIN", "COMMIT", "HEARTBEAT", "ROLLBACK"):
        rec(None, ins, operation=operation, objectName=None, fields=None, beforeImages=None, afterImages=None,
            sourceTxid="77")
    # names
    for name in (None, "", "shop", "shop.customers.extra.x", "a/b.customers", "shop.cust\x01omers",
                 "shop.cust\\u002Eomers", "db.sch.customers", ".customers", "shop.", "shop..customers", "shop.c/d",
                 "shop.\x85x", "shop. customers ", "x\\y.customers", "..\\u002E.customers", "shop.\\u002E\\u002E"):
        rec(ins_key, ins, objectName=name)
    fields = ins["fields"]
    rec(ins_key, ins, fields=None)
    rec(ins_key, ins, fields="id,name")
    rec(ins_key, ins, fields=[])
    rec(ins_key, ins, fields=fields[:-1])
    rec(ins_key, ins, fields=fields + [{"name": "extra", "dataTypeNumber": 253}])
    for renamed in (fields[0]["name"], "a/b", "x\ty", "..", ".", "ok name", "ID", ""):
        f = copy.deepcopy(fields)
        f[2]["name"] = renamed
        rec(ins_key, ins, fields=f)
    f = copy.deepcopy(fields)
    f[0]["name"] = "ID"
    rec(ins_key, ins, fields=f)
    for renamed, same in ((1, 0), (3, 1), (4, 3)):  # two columns of one name
        for key, msg in ((ins_key, ins), (upd_key, upd)):
            f = copy.deepcopy(msg["fields"])
            f[renamed]["name"] = f[same]["name"]
            rec(key, msg, fields=f)
    for number in (4, 16, 0, -1, 255, 246, 2**31 - 1):
        for index in (0, 3, 4):
            f = copy.deepcopy(fields)
            f[index]["dataTypeNumber"] = number
            rec(ins_key, ins, fields=f)
    # images
    rec(ins_key, ins, afterImages=None)
    rec(ins_key, ins, afterImages="text")
    rec(ins_key, ins, afterImages=[])
    rec(ins_key, ins, afterImages=ins["afterImages"][:-1])
    rec(ins_key, ins, beforeImages=ins["afterImages"])
    rec(ins_key, ins, beforeImages="x")
    rec(upd_key, upd, beforeImages=None)
    rec(upd_key, upd, afterImages=None)
    rec(upd_key, upd, beforeImages=[])
    rec(del_key, dele, beforeImages=None)
    rec(del_key, dele, afterImages=dele["beforeImages"])
    for image in ("beforeImages", "afterImages"):
        for index in (0, 1, len(upd[image]) - 1):
            for item in ("NONE", "NULL", None):
                value(upd_key, upd, image, index, item)
    for key in (None, b'{"id": 7}', b'{"id": "x"}', b'{"id": null}', b"not json"):
        value(key, dele, "beforeImages", 0, "NONE")
        value(key, dele, "beforeImages", 0, None)
    # values of every branch: in a column that is not the key, in the key, and as an update's after
    for item in VALUES:
        value(ins_key, ins, "afterImages", 2, item)
        value(ins_key, ins, "afterImages", 0, item)
        value(upd_key, upd, "afterImages", 3, item)
    # an update whose before and after are typed apart (the wider type, or none)
    def integer(precision, text):
        return (N + "Integer", {"precision": precision, "value": text})

    def decimal(text, precision, scale):
        return (N + "Decimal", {"value": text, "precision": precision, "scale": scale})

    def double(number, precision):
        return (N + "Float", {"value": number, "precision": precision, "scale": 0})

    big = double(16777217.0, 4)  # its text as a float is not its text as a double
    widths = [(integer(2, "4"), integer(8, "4")), (integer(8, "4"), integer(2, "4")),
              (decimal("1.50", 3, 2), decimal("123.50", 5, 2)), (decimal("1.5", 2, 1), decimal("1.50", 3, 2)),
              (double(1.5, 4), double(1.5, 8)),
              (integer(4, "4"), (N + "Character", {"charset": "utf8", "value": b"4"})),
              (None, integer(8, "4")), ("NONE", double(2.0, 8)), (big, big), (big, double(2.0, 8)), (big, None)]
    for before, after in widths:
        for index in (3, 4):
            m = copy.deepcopy(upd)
            m["beforeImages"][index], m["afterImages"][index] = before, after
            out.append((upd_key, _written(m)))
    # sources
    rec(upd_key, upd, source={"sourceType": "PostgreSQL", "version": "14"})
    rec(upd_key, upd, source={"sourceType": "PostgreSQL", "version": "14"}, sourcePosition="0/16B3748<->x")
    rec(upd_key, upd, source={"sourceType": "Oracle", "version": "19"})
    f = copy.deepcopy(upd["fields"])
    f[4]["dataTypeNumber"] = 16
    for flag in ("t", "f", "x", "TRUE"):
        value(upd_key, upd, "afterImages", 4, (N + "TextObject", {"type": "bool", "value": flag}),
              source={"sourceType": "PostgreSQL", "version": "14"}, fields=f)
    for millis in (5, 999999999):
        item = (N + "DateTime", _dt(2024, 5, 1, 1, 2, 3, millis))
        for source in ("Oracle", "MySQL"):
            value(ins_key, ins, "afterImages", 4, item, source={"sourceType": source, "version": "1"})
    # keys: the tag, the configuration's absence, the Kafka key
    for info in (None, "", '{"PRIMARY":', '{"PRIMARY":"a"}', "{}", '{"uk_name":["name"]}', '{"PRIMARY":["nope"]}',
                 '{"PRIMARY":["id","name"]}', "[1]", '{"PRIMARY":[]}', '{"PRIMARY":[],"u":["email"]}', "garbage",
                 '{"PRIMARY":["a/b"]}', '{"PRIMARY":["id","id"]}', '{"PRIMARY":[1]}'):
        tags = dict(ins["tags"])
        if info is None:
            tags.pop("pk_uk_info", None)
        else:
            tags["pk_uk_info"] = info
        for key in (ins_key, b'{"id": 1}', b'{"email": "x"}'):
            rec(key, ins, tags=tags)
    rec(ins_key, ins, tags={})
    for key in (None, b"", b'{"id": 5}', b"not json", b'{"nope":1}', b"[1]", b'{"schema":{},"payload":{"id":3}}',
                b'{"id": null}', b'{"id": 1.5}', b"\xff"):
        out.append((key, _written(dele)))
        out.append((key, _written(dict(copy.deepcopy(ins), tags={}))))
    # positions, times, transactions
    for position in ("", "abc", "1@2@3", "9" * 40 + "@1", " 5@6 ", "5@-6", "0/16B3748<->x", "72469@78", "٣@4"):
        rec(upd_key, upd, sourcePosition=position)
    for record_id in (-1, 0, 2**62, 10**18, -(2**63)):
        rec(upd_key, upd, id=record_id)
    for seconds in (-1, 0, 2**40):
        rec(upd_key, upd, sourceTimestamp=seconds)
    for txid in ("", "0", " 42 ", "abc", "\x00", " 0 "):
        rec(upd_key, upd, sourceTxid=txid)
    rec(upd_key, upd, processTimestamps=[1, 2, -3])
    # bytes: cut, added, foreign, flipped
    raw = _written(upd)
    out += [(upd_key, raw[:n]) for n in (1, 5, 20, len(raw) // 2, len(raw) - 9, len(raw) - 1)]
    out += [(upd_key, raw + b"\x00"), (upd_key, raw + b"\x02\x04"), (upd_key, _written(upd, born=False)),
            (upd_key, b"\x00" * 50), (upd_key, b'{"operation": "INSERT"}'), (upd_key, b"\x00" * 3 + raw)]
    rnd = random.Random(7)
    out += [(None, bytes(rnd.getrandbits(8) for _ in range(rnd.randint(1, 300)))) for _ in range(20)]
    rows = [(k, _written(m)) for k, m in messages if m["operation"] in ROWS]
    for _ in range(200):
        key, data = rnd.choice(rows)
        data = bytearray(data)
        for _ in range(rnd.randint(1, 3)):
            data[rnd.randrange(len(data))] = rnd.getrandbits(8)
        out.append((key, bytes(data)))
    return out


@pytest.fixture(scope="module")
def simulated():
    return _simulated(35, hours=1)


@pytest.fixture(scope="module")
def variants(simulated):
    return _variants([(k, decode(v)) for _, k, v in simulated if v])


@pytest.mark.parametrize("size", [1, 9, 500])
def test_variants_are_read_alike(simulated, variants, size):
    records = simulated[:30] + [(1, k, v) for k, v in variants] + simulated[30:60]
    assert_same(FORMAT, records, size)


def test_variants_alone_and_reread_are_read_alike(variants):
    """Every variant twice in one batch: equal values of a column are read once and shared."""
    records = [(0, k, v) for k, v in variants] * 2
    read_fast = assert_same(FORMAT, records, len(records))
    assert read_fast >= 200


def test_configured_types_on_variants_are_read_alike(simulated, variants):
    options = {"column_types": {"email": "int", "weight": "decimal(10,2)", "stock": "boolean", "extra": "date"},
               "primary_keys": {"shop.products": ["name"]}}
    assert_same(FORMAT, simulated[:30] + [(1, k, v) for k, v in variants], 500, options)


def test_peek_agrees_with_the_whole_record(simulated, variants):
    seen = set()
    for value in [v for _, _, v in simulated if v] + [v for _, v in variants if v]:
        peeked = peek_operation(value)
        try:
            operation = decode(value)["operation"]
        except ParseError:
            continue
        assert peeked in (operation, None), value
        if value in [v for _, _, v in simulated]:
            assert peeked == operation
        seen.add(peeked)
    assert set(ROWS) <= seen


def test_parser_forgets_what_the_fast_path_learnt(simulated):
    parser = get_parser(FORMAT)
    records = [KafkaRecord("t", 0, i, 0, k, v) for i, (_, k, v) in enumerate(simulated[:200])]
    fast = parser.fast_parse(records)
    assert any(fast) and parser._fast_keys and parser._fast_values
    clone = pickle.loads(pickle.dumps(parser))
    assert clone._fast_keys == {} and clone._fast_values == {} and clone.fast_parse(records) == fast


def test_unusual_but_valid_records_are_read_by_the_fast_path(simulated):
    """Records the fast path reads itself, alike: a delete keyed by its Kafka key, a key from the Kafka key
    alone, values left out or null, typed apart in before and after, other source types and names."""
    messages = [(k, decode(v)) for _, k, v in simulated if v]
    ins_key, ins = _first(messages, "INSERT", "customers")
    upd_key, upd = _first(messages, "UPDATE", "products")
    _, dele = _first(messages, "DELETE", "orders")
    out = []

    def rec(key, msg, before=(), after=(), **fields):
        m = copy.deepcopy(msg)
        m.update(fields)
        for image, items in (("beforeImages", before), ("afterImages", after)):
            for index, item in items:
                m[image][index] = item
        out.append((0, key, _written(m)))

    rec(b'{"id": 7}', dele, before=[(0, "NONE")])
    rec(b'{"id": 7}', dele, before=[(0, None)])
    rec(b'{"id": 1}', ins, tags={})
    rec(ins_key, ins, after=[(2, "NONE"), (3, "NULL"), (5, None)])
    rec(upd_key, upd, before=[(1, "NONE"), (3, (N + "Float", {"value": 1.5, "precision": 4, "scale": 0}))])
    rec(upd_key, upd, before=[(2, (N + "Decimal", {"value": "1.5", "precision": 2, "scale": 1}))],
        after=[(2, (N + "Decimal", {"value": "123.5", "precision": 4, "scale": 1}))])
    rec(upd_key, upd, source={"sourceType": "PostgreSQL", "version": "14"}, sourcePosition="0/16B3748<->x")
    rec(ins_key, ins, source={"sourceType": "Oracle", "version": "19"}, sourceTxid="0x1a",
        after=[(4, (N + "DateTime", _dt(2024, 5, 1, 1, 2, 3, 5000)))])
    rec(ins_key, ins, objectName="db.sch\\u002Ema.customers", sourcePosition="abc")
    rec(ins_key, ins, tags={"pk_uk_info": '{"uk_email":["name"],"PRIMARY":[]}'})
    assert assert_same(FORMAT, out, 4) == len(out)


def test_values_kept_between_batches_are_forgotten_past_their_bound(monkeypatch):
    import cdclake.formats.dts.fast as dts_fast

    monkeypatch.setattr(dts_fast, "_MAX_VALUES", 40)
    records = _simulated(36, hours=1)
    assert assert_same(FORMAT, records, 50) >= 0.95 * _row_changes(records)
