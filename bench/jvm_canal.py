"""``canal-json`` parsed in the JVM with Spark SQL, for the measurement of :mod:`bench.jvm_route`.

Reads Canal's flat messages (``data``, ``database``, ``es``, ``id``, ``isDdl``, ``mysqlType``,
``old``, ``pkNames``, ``sql``, ``sqlType``, ``table``, ``ts``, ``type``: "Alibaba Cloud DTS: data
formats of Kafka messages (Canal JSON)", in ``/work/shared/seeds/``) and gives the bronze rows
:class:`cdclake.formats.canal.CanalJsonParser` gives for the same records.

- Each message is grouped by its ``database``, ``table`` and ``mysqlType`` texts (two hashes);
  one message per group is read in Python and planned: the message's Spark schema (``data`` an
  array of structs of the ``mysqlType`` columns, all text; ``old`` an array of text maps) and
  one conversion per column from its ``mysqlType`` (:func:`cdclake.formats.canal.parser.mysql_type`).
- ``from_json`` reads the message with that schema in one small projection per group; each row of
  ``data`` becomes a bronze row (``transform`` and ``explode``).
- A message is read here only when ``to_json`` of the parsed message gives its text back byte
  for byte, ``type`` is ``INSERT``, ``UPDATE``, ``DELETE`` or ``INIT``, not DDL, its ``database``,
  ``table`` and ``mysqlType`` are its group's, it has no Kafka key, rows and key names, ``es``
  and ``id`` are non-negative (``es`` present but for ``INIT``), an update's ``old`` rows name
  only known columns, key columns are not null, and every value converts exactly: integers as
  ``-?digits`` (at most 18), decimals plain (padded to the scale), doubles whose Java text is
  the message's and plain with at most 15 digits, ``datetime``/``timestamp`` as
  ``YYYY-MM-DD HH:MM:SS[.f{1,6}]`` and dates ``YYYY-MM-DD`` that exist (years 1000 to 9999),
  binary text of ISO-8859-1 characters (to Base64), text as it is. ``bit``/``bool`` columns
  leave the group unplanned. Everything else goes to the Python parser.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bench.jvm_common import (KAFKA, TO_JSON, F, Group, RouteStats, all_of, collect_groups, double_text, in_group, same_json,
                              name_ok, not_in_groups, output_columns, write_route)

FORMAT = "canal-json"
KINDS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete", "INIT": "snapshot"}
TOP = {"data": None, "database": "string", "es": "bigint", "id": "bigint", "isDdl": "boolean",
       "mysqlType": "map<string,string>", "old": "array<map<string,string>>", "pkNames": "array<string>",
       "sql": "string", "sqlType": "map<string,int>", "table": "string", "ts": "bigint", "type": "string"}
_DATETIME = r"^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?$"
_DECIMAL = r"^-?(0|[1-9][0-9]*)([.][0-9]+)?$"


@dataclass(frozen=True)
class CanalPlan:
    """A planned group: the message's Spark DDL, its columns as ``(name, kind, scale)``, bronze
    ``column_types`` pairs, and the group's database, table and ``mysqlType`` text."""

    ddl: str
    columns: tuple
    types: tuple
    database: Optional[str]
    table: str
    mysql_types: str
    top: tuple


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def kind_of(ctype: str) -> Optional[tuple[str, int]]:
    """``(kind, scale)`` of a canonical type, or None (not read here)."""
    from cdclake.types import decimal_precision_scale

    if ctype in ("smallint", "int", "bigint"):
        return "int", 0
    ps = decimal_precision_scale(ctype)
    if ps:
        return "decimal", ps[1]
    return {"float": ("double", 0), "double": ("double", 0), "timestamp": ("datetime", 0),
            "timestamp_ntz": ("datetime", 0), "date": ("date", 0), "binary": ("binary", 0),
            "string": ("string", 0)}.get(ctype)


def plan(sample: str) -> tuple[Optional[CanalPlan], str]:
    """The plan of a group from one of its messages: ``(plan, "")`` or ``(None, why)``."""
    from cdclake.formats.canal.parser import mysql_type

    try:
        msg = json.loads(sample)
    except ValueError:
        return None, "not JSON"
    if not isinstance(msg, dict) or not set(msg) <= set(TOP):
        return None, "members"
    types, data = msg.get("mysqlType"), msg.get("data")
    if not isinstance(types, dict) or not types or not isinstance(data, list) or not data \
            or not isinstance(data[0], dict) or list(data[0]) != list(types):
        return None, "rows do not name the mysqlType columns"
    if not all(isinstance(v, str) for v in types.values()):
        return None, "mysqlType"
    database, table = msg.get("database") or None, msg.get("table") or None
    if not isinstance(table, str) or not (database is None or isinstance(database, str)):
        return None, "names"
    if not (name_ok(database) and name_ok(table) and all(name_ok(c) for c in types)):
        return None, "names"
    columns, canon = [], []
    for col, t in types.items():
        ctype = mysql_type(t)
        kind = kind_of(ctype)
        if kind is None:
            return None, f"column {col!r}: {t}"
        columns.append((col, *kind))
        canon.append((col, ctype))
    row = "struct<" + ",".join(f"{_q(c)}:string" for c in types) + ">"
    ddl = "struct<" + ",".join(f"{_q(k)}:{TOP[k] or f'array<{row}>'}" for k in msg) + ">"
    text = json.dumps(types, separators=(",", ":"), ensure_ascii=False)
    return CanalPlan(ddl, tuple(columns), tuple(canon), database, table, text, tuple(msg)), ""


def convert(kind: str, scale: int, v) -> tuple:
    """``(ok, canonical text)`` of a non-null Canal value ``v`` (text) of a column."""
    f = F()
    if kind == "string":
        return f.lit(True), v
    if kind == "int":
        return v.rlike(r"^-?[0-9]{1,18}$"), v.cast("bigint").cast("string")
    if kind == "decimal":
        frac = f.regexp_extract(v, r"[.]([0-9]+)$", 1)
        if not scale:
            return v.rlike(_DECIMAL), v
        pad = f.when(f.length(frac) >= scale, v).when(f.length(frac) == 0, f.concat(v, f.lit("." + "0" * scale)))
        zeros = f.lit("0" * scale).substr(f.lit(1), f.lit(scale) - f.length(frac))
        return v.rlike(_DECIMAL), pad.otherwise(f.concat(v, zeros))
    if kind == "double":
        ok, text = double_text(v.cast("double"))
        return ok & (text == v), v
    if kind in ("datetime", "date"):
        n = 19 if kind == "datetime" else 10
        y, mo, d = (v.substr(a, b).cast("int") for a, b in ((1, 4), (6, 2), (9, 2)))
        valid = f.make_date(y, mo, d).isNotNull()
        if kind == "date":
            return v.rlike(r"^[1-9][0-9]{3}-[0-9]{2}-[0-9]{2}$") & valid, v
        hh, mi, ss = (v.substr(a, 2).cast("int") for a in (12, 15, 18))
        frac = f.rpad(f.regexp_extract(v, r"[.]([0-9]+)$", 1), 6, "0")
        text = f.concat(v.substr(1, n), f.when(frac == "000000", f.lit("")).otherwise(f.concat(f.lit("."), frac)))
        return v.rlike(_DATETIME) & valid & (hh <= 23) & (mi <= 59) & (ss <= 59), text
    if kind == "binary":
        text = f.base64(f.encode(v, "ISO-8859-1"))
        return v.rlike("^[\\u0000-\\u00ff]*$") & ~text.contains("\r") & ~text.contains("\n"), text
    raise ValueError(kind)


def _image(p: CanalPlan, value_of) -> tuple:
    """``(ok, map)`` of one image, ``value_of(column)`` giving each value's text."""
    f = F()
    oks, texts = [], []
    for name, kind, scale in p.columns:
        v = value_of(name)
        ok, text = convert(kind, scale, v)
        oks.append(v.isNull() | ok)
        texts.append(f.when(v.isNotNull(), text))
    return all_of(oks), f.map_from_arrays(f.array(*[f.lit(n) for n, _, _ in p.columns]), f.array(*texts))


def branch(stage, g: Group, max_bytes: int):
    """The projection of one group's messages: one output row per row of ``data`` when the
    message is read here, else one row for the Python parser (:func:`output_columns`)."""
    f = F()
    p: CanalPlan = g.plan
    names = [n for n, _, _ in p.columns]
    rows = stage.where(in_group(g)).select("*", f.from_json("_v", p.ddl).alias("_m"))
    m = f.col("_m")
    kind = m["type"]
    op = f.create_map(*[f.lit(x) for kv in KINDS.items() for x in kv])[kind]
    init = kind == "INIT"
    top = set(p.top)

    def one(row, i):
        old = m["old"][i] if "old" in top else f.lit(None).cast("map<string,string>")
        a_ok, after = _image(p, lambda c: row[c])
        b_ok, before = _image(p, lambda c: f.when(f.map_contains_key(old, c), old[c]).otherwise(row[c]))
        upd_before = (kind == "UPDATE") & old.isNotNull()
        keyed = after  # the data row: a delete's before image, else the after image
        ok = (a_ok & (~upd_before | (b_ok & (f.size(f.map_filter(old, lambda k, _v: ~k.isin(*names))) == 0)))
              & f.forall(m["pkNames"], lambda k: keyed[k].isNotNull()))
        return f.struct(ok.alias("ok"), i.alias("i"),
                        f.when(kind == "DELETE", after).when(upd_before, before).alias("before"),
                        f.when(kind != "DELETE", after).alias("after"))

    es = m["es"] if "es" in top else f.lit(None).cast("bigint")
    msg_id = m["id"] if "id" in top else f.lit(None).cast("bigint")
    checks = [
        m.isNotNull(), same_json(f.to_json(m, TO_JSON), f.col("_v")), kind.isin(*KINDS),
        f.col("_vlen") <= max_bytes, f.col("key").isNull() | (f.octet_length("key") == 0),
        m["table"] == p.table, f.coalesce(m["database"], f.lit("")) == (p.database or ""),
        f.to_json(m["mysqlType"], TO_JSON) == p.mysql_types, f.size(m["data"]) >= 1,
        f.size(m["pkNames"]) >= 1, f.forall(m["pkNames"], lambda k: k.isin(*names)),
        init | es.isNotNull(), es.isNull() | (es >= 0), msg_id.isNull() | (msg_id >= 0),
    ]
    if "isDdl" in top:
        checks.append(f.coalesce(m["isDdl"], f.lit(False)) == f.lit(False))
    rows = rows.select("*", f.transform(m["data"], one).alias("_rows"))
    ok = f.coalesce(all_of(checks) & f.forall("_rows", lambda r: r["ok"]), f.lit(False))
    rows = rows.select("*", ok.alias("_msg_ok"))
    none = f.array(f.lit(None).cast(rows.schema["_rows"].dataType.elementType))
    rows = rows.select("*", f.explode(f.when(f.col("_msg_ok"), f.col("_rows")).otherwise(none)).alias("_r"))
    r = f.col("_r")
    zero = f.lit(0)
    bronze = {
        "source_format": f.lit(FORMAT), "source_database": f.lit(p.database).cast("string"),
        "source_schema": f.lit(None).cast("string"), "source_table": f.lit(p.table), "op": op,
        "before": r["before"], "after": r["after"], "primary_key": m["pkNames"],
        "column_types": f.create_map(*[f.lit(x) for kv in p.types for x in kv]),
        "source_position": f.array(*[c.cast("decimal(38,0)") for c in (
            f.when(init, zero).otherwise(es), f.when(init, zero).otherwise(f.coalesce(msg_id, zero)), r["i"])]),
        "source_ts_ms": es, "tx_id": f.lit(None), "tx_seq": f.lit(None), "row_in_record": r["i"],
        **{k: f.col(k) for k in KAFKA},
    }
    value = f.coalesce(f.col("_kv"), f.col("_v").cast("binary"))
    return rows.select(*output_columns(f.col("_msg_ok"), bronze, f.col("key"), value, f.col("headers")))


def stage_frame(raw):
    """Each raw row with its text ``_v`` (null for a tombstone), the two hashes ``_h1``/``_h2`` of
    its ``database``, ``table`` and ``mysqlType`` texts, and ``_kv`` the landed value where the
    text does not give its bytes back (invalid UTF-8)."""
    f = F()
    v = f.col("value").cast("string")
    part = [f.regexp_extract(v, pattern, 1) for pattern in (
        r'"database":("(?:[^"\\]|\\.)*"|null)', r'"table":("(?:[^"\\]|\\.)*"|null)', r'"mysqlType":(\{[^{}]*\}|null)')]
    s1 = raw.select(*KAFKA, "key", "value", "headers", v.alias("_v0"), f.concat_ws("\u0001", *part).alias("_g"))
    good = f.col("_v0").isNotNull() & (f.instr("_v0", "\ufffd") == 0)
    return s1.select(*KAFKA, "key", "headers", f.when(good, f.col("_v0")).alias("_v"),
                     f.when(good, f.xxhash64("_g")).alias("_h1"), f.when(good, f.hash("_g")).alias("_h2"),
                     f.when(~good, f.col("value")).alias("_kv"), f.octet_length("value").alias("_vlen"))


def route(spark, raw, parser, out_dir: Path, max_bytes: int) -> RouteStats:
    """Parse the raw rows ``raw`` (one topic hour) in the JVM and write the result under
    ``out_dir`` (:func:`bench.jvm_common.write_route`); returns the counts. ``parser``: the
    topic's :class:`CanalJsonParser`, for the records left to Python."""
    from pyspark import StorageLevel

    f = F()
    stats = RouteStats()
    stage = stage_frame(raw).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        stats.raw = stage.count()
        groups = collect_groups(stage, lambda fn: fn.first("_v"))
        for i, g in enumerate(groups):
            g.plan, g.why = plan(g.sample) if i < 64 else (None, "not planned")
        planned = [g for g in groups if g.plan is not None]
        frames = [branch(stage, g, max_bytes) for g in planned]
        frames.append(stage.where(not_in_groups(planned)).select(*output_columns(
            f.lit(False), {k: f.col(k) for k in KAFKA}, f.col("key"),
            f.coalesce(f.col("_kv"), f.col("_v").cast("binary")), f.col("headers"))))
        stats.groups = [{"rows": g.rows, "planned": g.plan is not None, "why": g.why} for g in groups]
        write_route(spark, frames, out_dir, parser, stats)
    finally:
        stage.unpersist()
    stats.fallback_records = stats.raw - stats.jvm_records
    return stats


# ---------------------------------------------------------------------------------------------
# Spark's own from_json of the Canal hour, the reference


def _reference_ddl() -> str:
    from cdclake.sim.model import TABLES

    cols = list(dict.fromkeys(c.name for t in TABLES.values() for c in t.columns))
    row = "struct<" + ",".join(f"{c}:string" for c in cols) + ">"
    return ("struct<" + ",".join(f"{k}:{TOP[k] or f'array<{row}>'}" for k in TOP) + ">"), cols


def from_json_columns(values):
    """Canal messages (a binary/string column ``value``) parsed by ``from_json`` into flat columns,
    one row per row of ``data``: the three shop tables' columns in one struct, all text as in the
    message, ``old`` kept as a map."""
    f = F()
    ddl, cols = _reference_ddl()
    m = values.select(f.from_json(f.col("value").cast("string"), ddl).alias("m"))
    rows = m.select(*[f.col(f"m.{k}").alias(f"message_{k}") for k in ("type", "database", "table", "es", "id", "ts",
                                                                          "pkNames")],
                    f.posexplode_outer("m.data").alias("row_in_record", "row"), "m.old")
    return rows.select(*[c for c in rows.columns if c.startswith("message_")], "row_in_record",
                       *[f.col(f"row.{c}").alias(c) for c in cols],
                       f.col("old")[f.col("row_in_record")].alias("old"))
