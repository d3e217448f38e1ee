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
from cdclake.types import decimal_precision_scale, quote_ident, widen


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
])
def test_widen_is_iceberg_promotion(old, new, want):
    assert widen(old, new) == want


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
