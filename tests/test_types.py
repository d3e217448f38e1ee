"""Column type changes follow Iceberg's type promotions exactly.

Iceberg (format 2) promotes int → long (bigint), float → double and decimal(P,S) → decimal(P',S)
with P' > P, nothing else. A change carrying the same or a narrower type keeps the silver type;
any other change (a decimal scale change, int → double, bigint → string ...) stops that table with
an error naming table, column and both types, while the other tables of the window merge.
"""
from __future__ import annotations

import json
from decimal import Decimal

import pytest
from conftest import produce, write_pipeline
from pipeline import hour, ms

from cdclake.sim.render import decimal_to_base64
from cdclake.types import decimal_precision_scale, normalize_type, quote_ident, widen


@pytest.mark.parametrize("old,new,want", [
    ("int", "int", "int"),
    ("int", "bigint", "bigint"),
    ("bigint", "int", "bigint"),          # narrower: the silver type stays
    ("smallint", "int", "int"),           # Iceberg has no smallint: both are int
    ("smallint", "bigint", "bigint"),
    ("float", "double", "double"),
    ("double", "float", "double"),
    ("decimal(10,2)", "decimal(12,2)", "decimal(12,2)"),
    ("decimal(12,2)", "decimal(10,2)", "decimal(12,2)"),
    ("DECIMAL(10, 2)", "decimal(38,2)", "decimal(38,2)"),
    ("decimal(10,2)", "decimal(10,2)", "decimal(10,2)"),
    ("decimal(10,2)", "decimal(10,4)", None),   # a scale change, up
    ("decimal(12,4)", "decimal(12,2)", None),   # down
    ("decimal(10,2)", "decimal(12,4)", None),   # precision and scale
    ("decimal(38,0)", "decimal(38,1)", None),
    ("int", "double", None),
    ("int", "float", None),
    ("bigint", "decimal(20,0)", None),
    ("decimal(10,0)", "bigint", None),
    ("float", "decimal(10,2)", None),
    ("bigint", "string", None),
    ("string", "int", None),
    ("date", "timestamp", None),
    ("binary", "string", None),
    ("boolean", "int", None),
    ("timestamp_ntz", "timestamp_ntz", "timestamp_ntz"),
    ("timestamp_ntz", "timestamp", None),  # a wall-clock time is no instant
    ("timestamp", "timestamp_ntz", "timestamp"),  # a column an earlier version made keeps its type
    ("array<int>", "array<bigint>", "array<bigint>"),
    ("array<bigint>", "array<smallint>", "array<bigint>"),
    ("array<decimal(10,2)>", "array<decimal(12,2)>", "array<decimal(12,2)>"),
    ("array<decimal(10,2)>", "array<decimal(10,3)>", None),
    ("array<int>", "array<string>", None),
    ("array<int>", "int", None),
    ("string", "array<int>", "string"),  # a column an earlier version made keeps its type
    ("array<string>", "string", None),
])
def test_widen_is_iceberg_promotion(old, new, want):
    assert widen(old, new) == want


@pytest.mark.parametrize("text,want", [("ARRAY<Decimal(5, 1)>", "array<decimal(5,1)>"), ("array<smallint>", "array<smallint>"),
                                       ("array<array<int>>", "string"), ("array<uuid>", "array<string>"),
                                       ("TIMESTAMP_NTZ", "timestamp_ntz")])
def test_normalize_type(text, want):
    assert normalize_type(text) == want


ROUND_TRIP = [("timestamp_ntz", ["2024-02-29 23:59:59.123456", "1969-12-31 23:59:59", None]),
              ("timestamp", ["2024-02-29 23:59:59.123456", None]),
              ("array<int>", ['["1","-2",null]', "[]", None]),
              ("array<bigint>", ['["9223372036854775807"]']),
              ("array<decimal(10,2)>", ['["1.50","-0.01",null]']),
              ("array<string>", ['["a","é \\"q\\"",null,""]']),
              ("array<timestamp_ntz>", ['["2024-01-01 00:00:00.000001"]']),
              ("array<date>", ['["1969-12-31","2024-02-29"]']),
              ("array<binary>", ['["AQID",""]']),
              ("array<boolean>", ['["true","false"]']),
              ("array<double>", ['["1.5","-0.0"]'])]


@pytest.mark.parametrize("ctype,texts", ROUND_TRIP)
def test_sql_cast_and_sql_text_are_inverse(spark, ctype, texts):
    """Bronze text → silver value → text → value gives the value again, type by type."""
    from cdclake.types import spark_type, sql_cast, sql_text

    df = spark.createDataFrame([(t,) for t in texts], "t string")
    typed = df.selectExpr(f"{sql_cast('t', ctype)} AS v")
    assert typed.schema["v"].dataType.simpleString() == spark_type(ctype)
    again = typed.selectExpr("v", f"{sql_cast(sql_text('v', ctype), ctype)} AS w").collect()
    assert all(r.v == r.w for r in again), again


# --------------------------------------------------------------------------------------------
# Through the pipeline


def event(table: str, columns: list[tuple[str, str]], row: dict, pos: int) -> tuple[bytes, bytes]:
    """A Debezium MySQL insert into ``shop.<table>`` with a Connect schema typing ``columns``."""
    def field(name, ctype):
        if ctype.startswith("decimal"):
            p, s = decimal_precision_scale(ctype)
            return {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
                    "parameters": {"scale": str(s), "connect.decimal.precision": str(p)}, "field": name}
        return {"type": {"bigint": "int64", "int": "int32"}[ctype], "optional": True, "field": name}

    def value(ctype, v):
        return decimal_to_base64(Decimal(v), decimal_precision_scale(ctype)[1]) if ctype.startswith("decimal") else v

    struct = {"type": "struct", "optional": True, "fields": [field(c, t) for c, t in columns]}
    schema = {"type": "struct", "optional": False, "fields": [
        dict(struct, field="before"), dict(struct, field="after"),
        {"type": "struct", "optional": False, "field": "source", "fields": []},
        {"type": "string", "optional": False, "field": "op"}]}
    source = {"connector": "mysql", "db": "shop", "table": table, "file": "mysql-bin.000001", "pos": pos, "row": 0,
              "ts_ms": 1704067200000 + pos}
    after = {c: value(t, row[c]) for c, t in columns}
    payload = {"before": None, "after": after, "source": source, "op": "c", "ts_ms": source["ts_ms"]}
    return json.dumps({"id": row["id"]}).encode(), json.dumps({"schema": schema, "payload": payload}).encode()


A0 = [("id", "bigint"), ("amount", "decimal(10,2)")]
A1 = [("id", "bigint"), ("amount", "decimal(10,4)")]
B0 = [("id", "bigint"), ("n", "int"), ("p", "decimal(10,2)"), ("q", "decimal(12,2)"), ("m", "bigint")]
B1 = [("id", "bigint"), ("n", "bigint"), ("p", "decimal(12,2)"), ("q", "decimal(10,2)"), ("m", "int")]

MESSAGES = {
    0: [event("a", A0, {"id": 1, "amount": "1.25"}, 100),
        event("b", B0, {"id": 1, "n": 1, "p": "1.50", "q": "2.50", "m": 7}, 110)],
    1: [event("a", A1, {"id": 2, "amount": "2.5000"}, 200),            # scale change against silver
        event("b", B1, {"id": 2, "n": 2**40, "p": "1234567890.12", "q": "3.25", "m": 8}, 210),
        event("c", A0, {"id": 1, "amount": "1.25"}, 220),               # scale change inside the batch
        event("c", A1, {"id": 2, "amount": "2.5000"}, 230)],
}


def test_scale_change_stops_only_its_table(stack, spark, unique):
    from cdclake.config import load_pipeline
    from cdclake.land import land
    from cdclake.normalize import normalize
    from cdclake.silver import SilverError, build_silver
    from cdclake.window import Window

    topic = f"types.scale.{unique}"
    produce(stack["bootstrap"], topic, [(0, ms(hour(h)) + 1000 + i, k, v)
                                        for h, msgs in MESSAGES.items() for i, (k, v) in enumerate(msgs)])
    ns = f"types_{unique}"
    path = write_pipeline(ns, [{"topic": topic, "format": "debezium-json"}], silver={"namespace": ns})
    cfg = load_pipeline(path)
    for h in (0, 1):
        w = Window(hour(h), hour(h + 1))
        land(spark, cfg, w)
        normalize(spark, cfg, w)
        if h == 0:
            build_silver(spark, cfg, w)
            continue
        with pytest.raises(SilverError) as err:
            build_silver(spark, cfg, w)
    text = str(err.value)
    assert text.startswith("2 table(s) not merged"), text
    parts = {p.split(" -> ")[0].strip(): p for p in text.split(": ", 1)[1].split("; ")}
    assert set(parts) == {"shop.a", "shop.c"}, text
    for table in ("a", "c"):
        reason = parts[f"shop.{table}"].split(": ", 1)[1]
        assert "SchemaChangeError" in reason and f"shop__{table}" in reason, reason
        assert "'amount'" in reason and "decimal(10,2)" in reason and "decimal(10,4)" in reason, reason

    def table(name):
        return spark.table(f"lake.{quote_ident(ns)}.{quote_ident(name)}")

    a = table("shop__a")
    assert dict(a.dtypes)["amount"] == "decimal(10,2)"
    assert [(r["id"], r["amount"]) for r in a.collect()] == [(1, Decimal("1.25"))]  # stopped: nothing of hour 1
    assert not spark.sql(f"SHOW TABLES IN lake.{quote_ident(ns)}").where("tableName = 'shop__c'").count()
    b = table("shop__b")
    types = dict(b.dtypes)
    assert {c: types[c] for c in ("id", "n", "p", "q", "m")} == {
        "id": "bigint", "n": "bigint", "p": "decimal(12,2)", "q": "decimal(12,2)", "m": "bigint"}
    rows = sorted((r["id"], r["n"], r["p"], r["q"], r["m"]) for r in b.collect())
    assert rows == [(1, 1, Decimal("1.50"), Decimal("2.50"), 7),
                    (2, 2**40, Decimal("1234567890.12"), Decimal("3.25"), 8)]


# --------------------------------------------------------------------------------------------
# Types as the source has them: timestamp without a zone and arrays, and tables an earlier version made

def connect_event(table: str, fields: list[dict], after: dict, pos: int) -> tuple[bytes, bytes]:
    """A Debezium PostgreSQL insert into ``public.<table>`` whose row has the Connect ``fields``."""
    struct = {"type": "struct", "optional": True, "fields": fields}
    schema = {"type": "struct", "optional": False, "fields": [
        dict(struct, field="before"), dict(struct, field="after"),
        {"type": "struct", "optional": False, "field": "source", "fields": []},
        {"type": "string", "optional": False, "field": "op"}]}
    source = {"connector": "postgresql", "db": "db", "schema": "public", "table": table, "lsn": pos,
              "ts_ms": 1704067200000 + pos}
    payload = {"before": None, "after": after, "source": source, "op": "c", "ts_ms": source["ts_ms"]}
    return json.dumps({"id": after["id"]}).encode(), json.dumps({"schema": schema, "payload": payload}).encode()


def _f(field: str, ctype: str, optional: bool = True, **more) -> dict:
    return {"type": ctype, "optional": optional, "field": field, **more}


ID = _f("id", "int64", optional=False)
MICRO = _f("ts", "int64", name="io.debezium.time.MicroTimestamp")
ZONED = _f("ts", "string", name="io.debezium.time.ZonedTimestamp")
INTS = _f("arr", "array", items={"type": "int32", "optional": True})
ARRAY_AS_TEXT = _f("arr", "string")
BIGINTS = _f("arr", "array", items={"type": "int64", "optional": True})
DECIMALS = _f("dec", "array", items={"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
                                    "parameters": {"scale": "2", "connect.decimal.precision": "10"}})
TEXTS = _f("txt", "array", items={"type": "string", "optional": True})
STAMPS = _f("stamps", "array", items={"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"})
US = 1_709_251_199_123_456  # 2024-02-29 23:59:59.123456 as µs since the epoch


def test_timestamp_without_zone_and_arrays_reach_silver_as_their_types(stack, spark, unique):
    """``MicroTimestamp`` becomes Iceberg ``timestamp`` (Spark ``timestamp_ntz``), Connect arrays
    Iceberg lists of their element type (NULL elements and empty arrays kept); an array's element
    type widens by Iceberg's promotions (int → bigint) in a later hour. A table an earlier version
    made (``ts`` with a zone, ``arr`` as JSON text) keeps its column types: the wall-clock time is
    read as UTC, the array is its canonical text."""
    import datetime as dt

    from cdclake.config import load_pipeline
    from cdclake.land import land
    from cdclake.normalize import normalize
    from cdclake.silver import build_silver
    from cdclake.window import Window

    new = [ID, MICRO, INTS, DECIMALS, TEXTS, STAMPS]
    messages = {
        0: [connect_event("n", new, {"id": 1, "ts": US, "arr": [1, None, -2], "dec": [decimal_to_base64(Decimal("1.50"), 2),
                                                                                 None], "txt": ["a", "", None],
                                     "stamps": [US, 0]}, 100),
            connect_event("n", new, {"id": 2, "ts": None, "arr": [], "dec": None, "txt": [], "stamps": []}, 110),
            # the same table as an earlier version typed it
            connect_event("old", [ID, ZONED, ARRAY_AS_TEXT], {"id": 1, "ts": "2024-01-01T10:00:00Z",
                                                               "arr": "[1,2]"}, 120)],
        1: [connect_event("n", [ID, MICRO, BIGINTS], {"id": 3, "ts": 0, "arr": [2**40]}, 200),
            connect_event("old", [ID, MICRO, INTS], {"id": 2, "ts": US, "arr": [3, None]}, 210)],
    }
    topic = f"types.new.{unique}"
    produce(stack["bootstrap"], topic, [(0, ms(hour(h)) + 1000 + i, k, v)
                                        for h, msgs in messages.items() for i, (k, v) in enumerate(msgs)])
    ns = f"typesn_{unique}"
    cfg = load_pipeline(write_pipeline(ns, [{"topic": topic, "format": "debezium-json"}], silver={"namespace": ns}))
    for h in (0, 1):
        w = Window(hour(h), hour(h + 1))
        land(spark, cfg, w)
        normalize(spark, cfg, w)
        build_silver(spark, cfg, w)

    def table(name):
        df = spark.table(f"lake.{quote_ident(ns)}.{quote_ident(name)}")
        return dict(df.dtypes), {r["id"]: r.asDict() for r in df.collect()}

    types, rows = table("db__public__n")
    assert {c: types[c] for c in ("ts", "arr", "dec", "txt", "stamps")} == {
        "ts": "timestamp_ntz", "arr": "array<bigint>", "dec": "array<decimal(10,2)>", "txt": "array<string>",
        "stamps": "array<timestamp_ntz>"}
    at = dt.datetime(2024, 2, 29, 23, 59, 59, 123456)
    assert {k: {c: rows[k][c] for c in ("ts", "arr", "dec", "txt", "stamps")} for k in rows} == {
        1: {"ts": at, "arr": [1, None, -2], "dec": [Decimal("1.50"), None], "txt": ["a", "", None],
            "stamps": [at, dt.datetime(1970, 1, 1)]},
        2: {"ts": None, "arr": [], "dec": None, "txt": [], "stamps": []},
        3: {"ts": dt.datetime(1970, 1, 1), "arr": [2**40], "dec": None, "txt": None, "stamps": None}}

    types, rows = table("db__public__old")
    assert (types["ts"], types["arr"]) == ("timestamp", "string")
    assert {k: (r["ts"], r["arr"]) for k, r in rows.items()} == {
        1: (dt.datetime(2024, 1, 1, 10), "[1,2]"), 2: (at, '["3",null]')}
