"""Names from messages are quoted wherever they reach SQL and never become paths.

A ``debezium-json`` pipeline with ``history: true`` whose messages name databases, schemas, tables
and columns (primary key columns too) with SQL syntax, quotes, backticks, commas, non-Latin
letters and 255 characters (255 CJK characters: 765 UTF-8 bytes) goes through land, normalize,
silver and history, and all three gates: silver and history hold what the messages say, and every
table lives inside the warehouse under a directory no message name went into.

Names with a path separator, ``.``/``..``, NUL or another control character are refused: the
Kafka record is quarantined with a reason naming the format, the field and the name.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from decimal import Decimal
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from conftest import STATE, produce, write_pipeline
from pipeline import hour, ms, run_window

from cdclake.catalog import pyiceberg_catalog
from cdclake.config import load_pipeline
from cdclake.sim.render import decimal_to_base64
from cdclake.types import decimal_precision_scale, quote_ident

# --------------------------------------------------------------------------------------------
# Debezium MySQL events with a Kafka Connect schema (JsonConverter, schemas.enable=true)


def connect_field(name: str, ctype: str) -> dict:
    """The Connect field schema of a column of canonical type ``ctype``."""
    if ctype.startswith("decimal"):
        p, s = decimal_precision_scale(ctype)
        return {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
                "parameters": {"scale": str(s), "connect.decimal.precision": str(p)}, "field": name}
    return {"type": {"bigint": "int64", "int": "int32", "string": "string"}[ctype], "optional": True, "field": name}


def wire_value(ctype: str, value):
    if value is not None and ctype.startswith("decimal"):
        return decimal_to_base64(value, decimal_precision_scale(ctype)[1])
    return value


class Table:
    """A source table: names as the messages carry them, columns ``[(name, type)]``, key column names."""

    def __init__(self, database, schema, name, columns, key):
        self.database, self.schema, self.name = database, schema, name
        self.columns, self.key = list(columns), list(key)
        self.types = dict(self.columns)

    def image(self, row):
        return None if row is None else {c: wire_value(t, row.get(c)) for c, t in self.columns}

    def event(self, op: str, before, after, pos: int) -> tuple[bytes, bytes]:
        """Kafka key and value of one change at binlog position ``pos``."""
        struct = {"type": "struct", "optional": True, "fields": [connect_field(c, t) for c, t in self.columns]}
        schema = {"type": "struct", "optional": False, "fields": [
            dict(struct, field="before"), dict(struct, field="after"),
            {"type": "struct", "optional": False, "field": "source", "fields": []},
            {"type": "string", "optional": False, "field": "op"}]}
        source = {"connector": "mysql", "name": "srv", "db": self.database, "table": self.name,
                  "file": "mysql-bin.000001", "pos": pos, "row": 0, "ts_ms": 1704067200000 + pos, "snapshot": "false"}
        if self.schema is not None:
            source["schema"] = self.schema
        payload = {"before": self.image(before), "after": self.image(after), "source": source, "op": op,
                   "ts_ms": source["ts_ms"]}
        row = after if after is not None else before
        key = {"schema": {"type": "struct", "optional": False,
                          "fields": [connect_field(k, self.types[k]) for k in self.key]},
               "payload": {k: wire_value(self.types[k], row[k]) for k in self.key}}
        return json.dumps(key).encode(), json.dumps({"schema": schema, "payload": payload}).encode()


CJK_255 = "表" * 255
T1 = Table("shop'; DROP TABLE x; --", None, 'it\'s "quoted" `tick` $% ^,& *(',
           [('id, "key"', "bigint"), ("DROP TABLE x", "string"), ("$% ^,& *(", "decimal(10,2)"), ("имя", "string"),
            ("名前", "int"), ("a--b; c", "string"), ("spa ce", "string"), ("`", "string"), ("v..1", "string")],
           ['id, "key"'])
T2 = Table("库" * 255, None, CJK_255,
           [("键" * 255, "bigint"), ("l" * 255, "string"), ("я" * 255, "string")], ["键" * 255])
T3 = Table("база данных", 'схема "s"', "DROP TABLE x",
           [("Ключ", "bigint"), ("键 key,2", "string"), ("值", "string"), ("--", "string"), (";", "string")],
           ["Ключ", "键 key,2"])
TABLES = (T1, T2, T3)


def t1(i, name, amount, n):
    return {'id, "key"': i, "DROP TABLE x": name, "$% ^,& *(": Decimal(amount), "имя": f"имя {i}", "名前": n,
            "a--b; c": "'; DROP TABLE y; --", "spa ce": " ", "`": "``", "v..1": "..\\/"}


def t2(i, v):
    return {"键" * 255: i, "l" * 255: v, "я" * 255: "я" * 255}


def t3(k1, k2, v):
    return {"Ключ": k1, "键 key,2": k2, "值": v, "--": "--", ";": ";"}


#: (table, op, before, after) in source order
CHANGES = [
    (T1, "c", None, t1(1, "one", "1.50", 1)),
    (T2, "c", None, t2(1, "first")),
    (T3, "c", None, t3(1, "a", "a1")),
    (T1, "c", None, t1(2, "two", "2.25", 2)),
    (T3, "c", None, t3(1, "b", "b1")),
    (T1, "u", t1(1, "one", "1.50", 1), t1(1, "one'", "-10.05", 11)),
    (T2, "c", None, t2(2, "second")),
    (T1, "d", t1(2, "two", "2.25", 2), None),
    (T3, "u", t3(1, "a", "a1"), t3(2, "a", "moved")),  # a key change
    (T2, "u", t2(1, "first"), t2(1, "first, updated")),
    (T1, "c", None, t1(3, "three", "3.00", 3)),
    (T3, "d", t3(1, "b", "b1"), None),
    (T2, "d", t2(2, "second"), None),
]
OPS = {"c": "insert", "u": "update", "d": "delete"}


def model():
    """Final rows and history versions per table, as the messages say."""
    state = {t.name: {} for t in TABLES}
    versions = {t.name: {} for t in TABLES}
    for t, op, before, after in CHANGES:
        key = lambda row: tuple(row[k] for k in t.key)  # noqa: E731
        rows, vs = state[t.name], versions[t.name]
        if op == "d":
            rows.pop(key(before))
            vs.setdefault(key(before), []).append(("delete", before))
            continue
        if before is not None and key(before) != key(after):
            rows.pop(key(before))
            vs.setdefault(key(before), []).append(("delete", before))
        rows[key(after)] = after
        vs.setdefault(key(after), []).append((OPS[op], after))
    history = {}
    for name, per_key in versions.items():
        history[name] = sorted(
            (k, op, i == len(v) - 1 and op != "delete", tuple(sorted((c, str(x)) for c, x in img.items())))
            for k, v in per_key.items() for i, (op, img) in enumerate(v))
    return {name: {k: dict(r) for k, r in rows.items()} for name, rows in state.items()}, history


# --------------------------------------------------------------------------------------------
# Where tables are


def local_path(location: str) -> Path:
    """A ``file:`` location as a normalised local path."""
    return Path(os.path.normpath(unquote(urlparse(location).path)))


def inside(path: Path, root: Path) -> bool:
    return os.path.commonpath([str(path), str(root)]) == str(root)


def all_tables(cfg) -> dict[tuple, object]:
    cat = pyiceberg_catalog(cfg.catalog)
    ns = cfg.silver.namespace
    # a namespace holds tables only once one was needed (tombstones: a batch with a delete)
    spaces = {n[0] for n in cat.list_namespaces()}
    return {ident: cat.load_table(ident)
            for n in (ns, ns + "_history", ns + "_tombstones") if n in spaces for ident in cat.list_tables(n)}


def assert_tables_inside_warehouse(cfg, names: list[str]) -> None:
    """Every table's location and files are under the warehouse, in directories no message name went into."""
    warehouse = local_path(cfg.catalog.warehouse)
    assert inside(warehouse, STATE)
    tables = all_tables(cfg)
    assert tables
    for ident, tbl in tables.items():
        loc = local_path(tbl.location())
        assert inside(loc, warehouse / ident[0]), (ident, tbl.location())
        assert inside(local_path(tbl.metadata_location), loc), (ident, tbl.metadata_location)
        assert re.fullmatch(r"[A-Za-z0-9_]*-[0-9a-f]{16}", loc.name), (ident, loc)
        for task in tbl.scan().plan_files():
            assert inside(local_path(task.file.file_path), loc), (ident, task.file.file_path)
    for n in {i[0] for i in tables}:
        for root, dirs, files in os.walk(warehouse / n):
            for part in dirs + files:
                assert re.fullmatch(r"[A-Za-z0-9_.=-]+", part), (root, part)  # no message name became a path
                assert part not in names


# --------------------------------------------------------------------------------------------
# Hostile names that are allowed


@pytest.fixture(scope="module")
def hostile(stack, spark):
    import uuid

    u = uuid.uuid4().hex[:8]
    topic = f"names.hostile.{u}"
    records = []
    for i, (t, op, before, after) in enumerate(CHANGES):
        key, value = t.event(op, before, after, pos=100 + 10 * i)
        records.append((0, ms(hour(0)) + 1000 + i, key, value))
    produce(stack["bootstrap"], topic, records)
    path = write_pipeline(f"names_{u}", [{"topic": topic, "format": "debezium-json", "history": True,
                                          "table_prefix": "p' `x`_"}],
                          silver={"namespace": f"names_{u}", "buckets": 2})
    result = run_window(spark, path, 0, 1, gates=True)
    return {"path": path, "cfg": load_pipeline(path), "result": result, "topic": topic}


def silver_of(t: Table) -> str:
    full = "p' `x`_" + "__".join(p for p in (t.database, t.schema, t.name) if p)
    if len(full) <= 255:
        return full
    from cdclake.silver import SourceTable

    return SourceTable("p' `x`_", t.database, t.schema, t.name).silver_name


def read(spark, cfg, namespace: str, name: str) -> list[dict]:
    return [r.asDict() for r in spark.table(f"lake.{quote_ident(namespace)}.{quote_ident(name)}").collect()]


def test_hostile_names_reach_silver_and_history_exactly(spark, hostile):
    cfg = hostile["cfg"]
    n = hostile["result"]["normalize"][hostile["topic"]]
    assert n["quarantined"] == 0 and n["changes"] == len(CHANGES), n
    assert set(hostile["result"]["gates"]) == {"land", "normalize", "silver"}
    final, history = model()
    for t in TABLES:
        name = silver_of(t)
        assert len(name) <= 255
        rows = read(spark, cfg, cfg.silver.namespace, name)
        got = {tuple(r[k] for k in t.key): {c: r[c] for c, _ in t.columns} for r in rows}
        assert got == final[t.name], t.name
        types = dict(spark.table(f"lake.{quote_ident(cfg.silver.namespace)}.{quote_ident(name)}").dtypes)
        assert {c: types[c] for c, _ in t.columns} == {c: ct for c, ct in t.columns}
        versions = read(spark, cfg, cfg.silver.namespace + "_history", name)
        got_history = sorted((tuple(r[k] for k in t.key), r["_cdc_op"], r["_cdc_is_current"],
                              tuple(sorted((c, str(r[c])) for c, _ in t.columns))) for r in versions)
        assert got_history == history[t.name], t.name


def test_long_names_are_shortened_deterministically():
    from cdclake.silver import SourceTable

    st = SourceTable("p' `x`_", T2.database, T2.schema, T2.name)
    again = SourceTable("p' `x`_", "库" * 255, None, "表" * 255)
    assert len(st.silver_name) <= 255 and st.silver_name == again.silver_name
    assert st.silver_name.startswith("p' `x`_库")
    assert st.silver_name != SourceTable("p' `x`_", T2.database, None, T2.name + "x").silver_name
    short = SourceTable("", "shop", None, "orders")
    assert short.silver_name == "shop__orders"  # names that fit keep the earlier rule


def test_hostile_tables_stay_inside_the_warehouse(hostile):
    cfg = hostile["cfg"]
    names = [n for t in TABLES for n in (t.database, t.schema, t.name, *t.types) if n]
    assert_tables_inside_warehouse(cfg, names)
    assert len(all_tables(cfg)) == 3 * len(TABLES)  # silver, history and tombstones of each


def test_rerun_changes_nothing(spark, hostile):
    cfg = hostile["cfg"]

    def state():
        return {(t.name, ns): sorted(map(str, read(spark, cfg, ns, silver_of(t))))
                for t in TABLES for ns in (cfg.silver.namespace, cfg.silver.namespace + "_history")}

    before = state()
    run_window(spark, hostile["path"], 0, 1, gates=True)
    assert state() == before


# --------------------------------------------------------------------------------------------
# Names that are refused


def schemaless(database, table, key: dict, before, after, pos: int, schema=None, op="c",
               schema_columns=None) -> tuple[bytes, bytes]:
    """A Debezium MySQL event without a Connect schema (or with one listing ``schema_columns``)."""
    source = {"connector": "mysql", "table": table, "file": "mysql-bin.000002", "pos": pos, "row": 0,
              "ts_ms": 1704067200000 + pos, "snapshot": "false"}
    if database is not None:
        source["db"] = database
    if schema is not None:
        source["schema"] = schema
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": source["ts_ms"]}
    value = payload
    if schema_columns is not None:
        struct = {"type": "struct", "optional": True,
                  "fields": [{"type": "string", "optional": True, "field": c} for c in schema_columns]}
        value = {"schema": {"type": "struct", "optional": False, "fields": [
            dict(struct, field="before"), dict(struct, field="after"),
            {"type": "struct", "optional": False, "field": "source", "fields": []},
            {"type": "string", "optional": False, "field": "op"}]}, "payload": payload}
    return json.dumps(key).encode(), json.dumps(value).encode()


EVIL = "../../../tmp/evil"
#: (field the reason names, refused name, message)
REFUSED = [
    ("source_table", EVIL, schemaless("shop", EVIL, {"id": 1}, None, {"id": 1, "v": "x"}, 10)),
    ("source_table", "../../../../tmp/evil", schemaless(None, "../../../../tmp/evil", {"id": 1}, None,
                                                        {"id": 1, "v": "x"}, 15)),
    ("source_table", "a/b", schemaless("shop", "a/b", {"id": 1}, None, {"id": 1, "v": "x"}, 20)),
    ("source_table", ".", schemaless("shop", ".", {"id": 1}, None, {"id": 1, "v": "x"}, 25)),
    ("source_database", "..", schemaless("..", "t", {"id": 1}, None, {"id": 1, "v": "x"}, 30)),
    ("source_schema", "\\", schemaless("shop", "t", {"id": 1}, None, {"id": 1, "v": "x"}, 40, schema="\\")),
    ("source_table", "x\\..\\y", schemaless("shop", "x\\..\\y", {"id": 1}, None, {"id": 1, "v": "x"}, 45)),
    ("after", "x\x00y", schemaless("shop", "t", {"id": 1}, None, {"id": 1, "x\x00y": "x"}, 50)),
    ("before", "\x01", schemaless("shop", "t", {"id": 1}, {"id": 1, "\x01": "x"}, {"id": 1, "v": "y"}, 60, op="u")),
    ("primary_key", "..", schemaless("shop", "t", {"..": 1}, None, {"..": 1, "v": "x"}, 70)),
    ("source_table", "tab\ttab", schemaless("shop", "tab\ttab", {"id": 1}, None, {"id": 1, "v": "x"}, 80)),
    ("column_types", "c/d", schemaless("shop", "t", {"id": 1}, None, {"id": "1", "v": "x"}, 90,
                                       schema_columns=["id", "v", "c/d"])),
]


@pytest.fixture(scope="module")
def refused(stack, spark):
    import uuid

    u = uuid.uuid4().hex[:8]
    topic = f"names.refused.{u}"
    good = schemaless("shop", "ok", {"id": 1}, None, {"id": 1, "v": "kept"}, 5)
    records = [(0, ms(hour(0)) + 1000, *good)]
    records += [(0, ms(hour(0)) + 2000 + i, key, value) for i, (_, _, (key, value)) in enumerate(REFUSED)]
    produce(stack["bootstrap"], topic, records)
    # a topic of refused names only: past the default quarantine budget, which the gates would enforce
    path = write_pipeline(f"refused_{u}", [{"topic": topic, "format": "debezium-json", "history": True}],
                          silver={"namespace": f"refused_{u}"}, normalize={"max_quarantine_share": 1.0})
    cfg = load_pipeline(path)
    # where the earlier rule put a table named after a message: <warehouse>/<namespace>/<silver name>
    warehouse = local_path(cfg.catalog.warehouse)
    outside = [Path("/tmp/evil")] + [
        p for ns in (cfg.silver.namespace, cfg.silver.namespace + "_history", cfg.silver.namespace + "_tombstones")
        for fld, name, _ in REFUSED if fld == "source_table" for prefix in ("", "shop__")
        for p in [Path(os.path.normpath(warehouse / ns / f"{prefix}{name}"))]
        if not inside(warehouse / ns, p)]  # "." names the namespace's own directory
    existed = {p: p.exists() for p in outside}
    result = run_window(spark, path, 0, 1, gates=True)
    return {"path": path, "cfg": cfg, "result": result, "topic": topic, "outside": outside, "existed": existed}


def test_refused_names_are_quarantined_naming_the_field(spark, refused):
    n = refused["result"]["normalize"][refused["topic"]]
    assert n["quarantined"] == len(REFUSED) and n["changes"] == 1, n
    reasons = sorted(r.reason for r in spark.table("lake.bronze.quarantine")
                     .where(f"kafka_topic = '{refused['topic']}'").collect())
    assert len(reasons) == len(REFUSED)
    for fld, name, _ in REFUSED:
        assert any(r.startswith(f"debezium-json: field '{fld}': ") and repr(name) in r for r in reasons), \
            (fld, name, reasons)
    assert set(refused["result"]["gates"]) == {"land", "normalize", "silver"}
    cfg = refused["cfg"]
    assert [r["v"] for r in read(spark, cfg, cfg.silver.namespace, "shop__ok")] == ["kept"]
    assert {i[1] for i in all_tables(cfg)} == {"shop__ok"}


def test_refused_names_write_nothing_outside_the_state_directory(refused):
    assert Path("/tmp/evil") in refused["outside"]
    for p in refused["outside"]:
        assert refused["existed"][p] or not p.exists(), p
    assert_tables_inside_warehouse(refused["cfg"], [name for _, name, _ in REFUSED])


def test_name_rule():
    from cdclake.names import name_problem

    for ok in ("", "a", "...", "a..b", ".a", "a.", "DROP TABLE x", "$% ^,& *(", "表" * 255, "'\"`;--", "a b"):
        assert name_problem(ok) is None, ok
    for bad in ("/", "a/b", "\\", "a\\b", ".", "..", "../x", "x/..", "a\x00", "\x01", "\x7f", "a\nb", "\x85"):
        assert name_problem(bad), repr(bad)


# --------------------------------------------------------------------------------------------
# Tables of the earlier naming rule, and two source tables with one silver name


def test_earlier_tables_keep_names_and_locations_and_names_do_not_collide(stack, spark, unique):
    from cdclake.land import land
    from cdclake.normalize import normalize
    from cdclake.silver import SilverError, SourceTable, build_silver
    from cdclake.window import Window

    ns, topic = f"legacy_{unique}", f"names.legacy.{unique}"
    path = write_pipeline(ns, [{"topic": topic, "format": "debezium-json"}], silver={"namespace": ns})
    cfg = load_pipeline(path)
    warehouse = cfg.catalog.warehouse.rstrip("/")
    long_name = "shop__" + "t" * 300  # an earlier version named it so (a catalog on an object store holds it)
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{quote_ident(ns)}")
    spark.sql(f"CREATE TABLE lake.{quote_ident(ns)}.shop__old (id string, v string) USING iceberg "
              "PARTITIONED BY (bucket(8, id)) TBLPROPERTIES ('format-version'='2', 'cdc.primary-key'='id')")
    spark.sql(f"CREATE TABLE lake.{quote_ident(ns)}.{quote_ident(long_name)} (id string, v string) USING iceberg "
              f"LOCATION '{warehouse}/{ns}/long-table' PARTITIONED BY (bucket(8, id)) "
              "TBLPROPERTIES ('format-version'='2', 'cdc.primary-key'='id')")
    cat = pyiceberg_catalog(cfg.catalog)
    locations = {n: cat.load_table((ns, n)).location() for n in ("shop__old", long_name)}
    assert locations["shop__old"].rstrip("/").endswith(f"/{ns}/shop__old")
    # a source table whose own name is the shortened name of another's
    other = SourceTable("", "shop", None, "x" * 300)
    twin = other.silver_name[len("shop__"):]
    assert SourceTable("", "shop", None, twin).silver_name == other.silver_name
    records = [schemaless("shop", t, {"id": i}, None, {"id": i, "v": t[:3]}, 10 * i)
               for i, t in enumerate(["old", "t" * 300, "x" * 300, twin], start=1)]
    produce(stack["bootstrap"], topic, [(0, ms(hour(0)) + 1000 + i, k, v) for i, (k, v) in enumerate(records)])
    w = Window(hour(0), hour(1))
    land(spark, cfg, w)
    normalize(spark, cfg, w)
    with pytest.raises(SilverError) as err:
        build_silver(spark, cfg, w)
    text = str(err.value)
    assert text.startswith("1 table(s) not merged") and "two source tables have this silver name" in text, text
    assert {n: cat.load_table((ns, n)).location() for n in locations} == locations
    assert [(r["id"], r["v"]) for r in read(spark, cfg, ns, "shop__old")] == [("1", "old")]
    assert [(r["id"], r["v"]) for r in read(spark, cfg, ns, long_name)] == [("2", "ttt")]
    names = {i[1] for i in cat.list_tables(ns)}
    assert names == {"shop__old", long_name, other.silver_name}
    (row,) = read(spark, cfg, ns, other.silver_name)  # one of the two source tables, not both
    assert (row["id"], row["v"]) in {("3", "xxx"), ("4", twin[:3])}
    assert local_path(cat.load_table((ns, other.silver_name)).location()).name.endswith(
        "-" + hashlib.sha256(other.silver_name.encode()).hexdigest()[:16])
