"""``debezium-json`` parsed in the JVM with Spark SQL, for the measurement of :mod:`bench.jvm_route`.

Reads what Debezium's MySQL connector writes through Kafka Connect's ``JsonConverter`` with
``schemas.enable`` (value ``{"schema": S, "payload": P}``, key ``{"schema": KS, "payload": {key
columns}}``: the Debezium MySQL connector documentation, *change event envelope*, *source*
block and *data type mappings*, in ``/work/shared/seeds/``), and gives the bronze rows
:class:`cdclake.formats.debezium.DebeziumJsonParser` gives for the same records.

- The text before the first ``,"payload":`` of each value (and of each key) is hashed twice
  (``xxhash64`` and ``hash``); one text per distinct hash pair is read back and planned in
  Python: the payload's Spark schema from the Connect schema's fields (int8/16/32/64, float32/64,
  boolean, string, bytes, structs) and one conversion per image column (below).
- ``from_json`` reads only the payload ``P`` with that schema, in one small projection per
  (value schema, key schema) pair; the projections are put together with ``unionByName``.
- A row is read here only when ``to_json`` of the parsed payload (and key) gives its text back
  byte for byte (every member present, in order, of its JSON type, nothing else, compact), the
  record has no headers, ``op`` is ``c``/``u``/``d``/``r``, ``source.connector`` is ``mysql``,
  names are accepted, position elements are non-negative, the image the key is read from holds
  every key column, and every value converts exactly:

  ==========================  =========================================  ====================
  Connect type                accepted                                   canonical text
  ==========================  =========================================  ====================
  int8/16/32/64               any                                        the digits
  string, bytes               not a TOAST placeholder                    the text
  boolean                     any                                        ``true``/``false``
  float64                     Java's text plain, at most 15 digits       that text (``repr``)
  Connect ``Decimal``         canonical Base64 of 1 to 8 bytes, scale    plain digits
                              equal to the type's
  Timestamp, MicroTimestamp   years 1000 to 9999                         ``YYYY-MM-DD
                                                                         HH:MM:SS[.ffffff]``
  Date                        years 1000 to 9999                         ``YYYY-MM-DD``
  ==========================  =========================================  ====================

  Any other logical type (``ZonedTimestamp``, time types, ``VariableScaleDecimal`` ...) leaves
  the schema unplanned: its rows go to the Python parser, as does every row failing a check.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from bench.jvm_common import (DAY_RANGE, KAFKA, MS_RANGE, REFUSED_NAME, TO_JSON, F, Group, RouteStats, all_of,
                              double_text, in_group, same_json, name_ok, output_columns, write_route)

FORMAT = "debezium-json"
START = '{"schema":'
PAYLOAD = ',"payload":'
OPS = {"c": "insert", "u": "update", "d": "delete", "r": "snapshot"}
TOP = ("before", "after", "source", "op", "ts_ms", "transaction")
_BASIC = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint", "float32": "float",
          "float": "float", "float64": "double", "double": "double", "boolean": "boolean", "string": "string",
          "bytes": "string"}
_B64 = r"^[A-Za-z0-9+/]*={0,2}$"


@dataclass(frozen=True)
class ValuePlan:
    """A planned value schema: the payload's Spark DDL, the image columns as ``(name, kind,
    scale or units)``, bronze ``column_types`` pairs and the ``source`` members present."""

    ddl: str
    columns: tuple
    types: tuple
    source: tuple
    tx: tuple
    top: tuple
    prefix: str


@dataclass(frozen=True)
class KeyPlan:
    """A planned key schema: the key payload's Spark DDL and the key columns, in order."""

    ddl: str
    names: tuple
    prefix: str


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_ddl(schema: dict) -> Optional[str]:
    """The Spark type (DDL) of a Connect field schema, or None for a type not read here."""
    t = schema.get("type")
    if t == "struct":
        fields = schema.get("fields")
        if not isinstance(fields, list) or not fields:
            return None
        names = [f.get("field") if isinstance(f, dict) else None for f in fields]
        if not all(isinstance(n, str) and n for n in names) or len({n.lower() for n in names}) != len(names):
            return None
        parts = [spark_ddl(f) for f in fields]
        if any(p is None for p in parts):
            return None
        return "struct<" + ",".join(f"{_quote(n)}:{p}" for n, p in zip(names, parts)) + ">"
    return _BASIC.get(t) if isinstance(t, str) else None


def column_kind(schema: dict) -> Optional[tuple[str, int]]:
    """``(kind, scale or units)`` of an image column's Connect schema, or None (not read here)."""
    from cdclake.formats.connect import DECIMAL, LOGICAL_TYPES, TIMESTAMP_UNITS, connect_parameters, connect_type
    from cdclake.types import decimal_precision_scale

    name, t = schema.get("name"), schema.get("type")
    if name == DECIMAL:
        try:
            scale = int(connect_parameters(schema).get("scale", 0))
            ps = decimal_precision_scale(connect_type(schema))
        except (ValueError, TypeError):
            return None
        return ("decimal", scale) if t == "bytes" and ps and ps[1] == scale >= 0 else None
    if name in TIMESTAMP_UNITS:
        units = TIMESTAMP_UNITS[name]
        return ("timestamp", units) if t == "int64" and units in (1000, 10**6) else None
    if name in ("org.apache.kafka.connect.data.Date", "io.debezium.time.Date"):
        return ("date", 0) if t == "int32" else None
    if name in LOGICAL_TYPES and LOGICAL_TYPES[name] != "string" or name == "io.debezium.data.VariableScaleDecimal":
        return None
    if name in LOGICAL_TYPES and t != "string":
        return None
    kind = {"int8": "int", "int16": "int", "int32": "int", "int64": "int", "float64": "double", "double": "double",
            "boolean": "boolean", "string": "string", "bytes": "string"}.get(t)
    return (kind, 0) if kind else None


def _schema_of(prefix: str) -> Optional[dict]:
    if not prefix.startswith(START) or "\ufffd" in prefix:
        return None
    try:
        schema = json.loads(prefix[len(START):])
    except ValueError:
        return None
    return schema if isinstance(schema, dict) and schema else None


def value_plan(prefix: str) -> tuple[Optional[ValuePlan], str]:
    """The plan of a value schema given as the text before ``,"payload":``: ``(plan, "")`` or
    ``(None, why)``."""
    from cdclake.formats.connect import connect_type, struct_fields

    schema = _schema_of(prefix)
    if schema is None or schema.get("type") != "struct":
        return None, "not a Connect struct schema"
    ddl = spark_ddl(schema)
    if ddl is None:
        return None, "a type the SQL route does not read"
    top = {f["field"]: f for f in schema["fields"]}
    if not set(top) <= set(TOP) or not {"before", "after", "source", "op"} <= set(top):
        return None, f"payload members {sorted(top)}"
    if top["before"].get("type") != "struct" or top["after"].get("type") != "struct":
        return None, "images are not structs"
    source = tuple(f["field"] for f in top["source"].get("fields") or ())
    if "connector" not in source or {"change_lsn", "commit_lsn", "namespace"} & set(source) or "table" not in source:
        return None, "not a MySQL source block"
    tx = tuple(f["field"] for f in (top.get("transaction") or {}).get("fields") or ())
    cols = struct_fields(schema, ("before", "after"), strict=False)
    before = [f["field"] for f in top["before"]["fields"]]
    if before != [f["field"] for f in top["after"]["fields"]] or list(cols) != before:
        return None, "before and after differ"
    columns = []
    for name, s in cols.items():
        kind = column_kind(s)
        if kind is None or not name_ok(name):
            return None, f"column {name!r}: {s.get('name') or s.get('type')}"
        columns.append((name, *kind))
    types = tuple((c, connect_type(s)) for c, s in cols.items())
    return ValuePlan(ddl, tuple(columns), types, source, tx, tuple(top), prefix), ""


def key_plan(prefix: str) -> tuple[Optional[KeyPlan], str]:
    """The plan of a key schema (text before the key's ``,"payload":``): key columns of integer
    or string types."""
    schema = _schema_of(prefix)
    if schema is None or schema.get("type") != "struct":
        return None, "not a Connect struct schema"
    ddl = spark_ddl(schema)
    if ddl is None or any(f.get("type") not in ("int8", "int16", "int32", "int64", "string")
                          for f in schema["fields"]):
        return None, "key columns of other types"
    names = tuple(f["field"] for f in schema["fields"])
    if not all(name_ok(n) for n in names):
        return None, "key column names"
    return KeyPlan(ddl, names, prefix), ""


# ---------------------------------------------------------------------------------------------
# the conversions


def convert(kind: str, arg: int, c) -> tuple:
    """``(ok, canonical text)`` of a non-null typed value ``c`` of an image column."""
    from cdclake.formats.connect import TOAST_PLACEHOLDERS

    f = F()
    if kind == "int":
        return f.lit(True), c.cast("string")
    if kind == "string":
        return ~c.isin(*TOAST_PLACEHOLDERS), c
    if kind == "boolean":
        return f.lit(True), f.when(c, f.lit("true")).otherwise(f.lit("false"))
    if kind == "double":
        return double_text(c)
    if kind == "decimal":
        raw = f.unbase64(f.when(c.rlike(_B64) & (f.length(c) % 4 == 0), c))
        hexa = f.hex(raw)
        wide = f.concat(f.when(hexa.substr(1, 1) >= "8", f.lit("F" * 16)).otherwise(f.lit("0" * 16)), hexa)
        signed = f.conv(wide.substr(-16, 16), 16, -10)
        digits = f.regexp_replace(signed, "^-", "")
        if arg:
            padded = f.regexp_replace(f.concat(f.lit("0" * arg), digits), f"^0+(?=[0-9]{{{arg + 1}}})", "")
            digits = f.regexp_replace(padded, f"([0-9]{{{arg}}})$", ".$1")
        text = f.concat(f.when(signed.startswith("-"), f.lit("-")).otherwise(f.lit("")), digits)
        return raw.isNotNull() & f.octet_length(raw).between(1, 8) & (f.base64(raw) == c), text
    if kind == "timestamp":
        low, high = (b * arg // 1000 for b in MS_RANGE)
        instant = f.timestamp_millis(c) if arg == 1000 else f.timestamp_micros(c)
        micros = f.pmod(c, f.lit(arg)) * (10**6 // arg)
        text = f.concat(f.date_format(instant, "yyyy-MM-dd HH:mm:ss"),
                        f.when(micros != 0, f.concat(f.lit("."), f.lpad(micros.cast("string"), 6, "0")))
                        .otherwise(f.lit("")))
        return c.between(low, high), text
    if kind == "date":
        return c.between(*DAY_RANGE), f.date_add(f.lit("1970-01-01").cast("date"), c).cast("string")
    raise ValueError(kind)


def image(plan: ValuePlan, img) -> tuple:
    """``(ok, map)`` of one image struct (a null image: ok, null)."""
    f = F()
    oks, texts = [], []
    for name, kind, arg in plan.columns:
        c = img[name]
        ok, text = convert(kind, arg, c)
        oks.append(c.isNull() | ok)
        texts.append(f.when(c.isNotNull(), text))
    m = f.map_from_arrays(f.array(*[f.lit(n) for n, _, _ in plan.columns]), f.array(*texts))
    return img.isNull() | all_of(oks), f.when(img.isNotNull(), m)


def branch(stage, vg: Group, kg: Group, max_bytes: int):
    """The projection of one (value schema, key schema) pair's rows: :func:`output_columns`."""
    f = F()
    vp, kp = vg.plan, kg.plan
    rows = stage.where(in_group(vg) & (f.col("_kh1") == f.lit(kg.h1).cast("bigint"))
                       & (f.col("_kh2") == f.lit(kg.h2).cast("int")))
    rows = rows.select("*", f.from_json("_pl", vp.ddl).alias("_m"), f.from_json("_kpl", kp.ddl).alias("_k"))
    m, src = f.col("_m"), f.col("_m.source")
    tx = f.col("_m.transaction") if vp.tx else None
    op = m["op"]
    b_ok, before = image(vp, m["before"])
    a_ok, after = image(vp, m["after"])
    keyed = f.when(op == "d", m["before"]).otherwise(m["after"])
    file = src["file"] if "file" in vp.source else f.lit(None).cast("string")
    digits = f.regexp_extract(file, "([0-9]+)$", 1)
    db = src["db"] if "db" in vp.source else f.lit(None).cast("string")
    schema_name = src["schema"] if "schema" in vp.source else f.lit(None).cast("string")
    table = src["table"]

    def member(block, name, members):
        return block[name] if block is not None and name in members else f.lit(None)

    ts = f.coalesce(member(src, "ts_ms", vp.source), m["ts_ms"] if "ts_ms" in vp.top else f.lit(None))
    tx_id = f.coalesce(member(src, "txId", vp.source).cast("string"), member(tx, "id", vp.tx).cast("string"),
                       member(src, "gtid", vp.source).cast("string"))
    tx_seq = member(tx, "total_order", vp.tx)
    pos, row = member(src, "pos", vp.source), member(src, "row", vp.source)

    def non_negative(c):
        return c.isNull() | (c >= 0)

    ok = all_of([
        m.isNotNull(), f.col("_k").isNotNull(),
        same_json(f.to_json(m, TO_JSON), f.col("_pl")), f.to_json(f.col("_k"), TO_JSON) == f.col("_kpl"),
        f.col("headers").isNull() | (f.size("headers") == 0),
        f.col("_vlen") <= max_bytes, f.octet_length("key") <= max_bytes,
        op.isin(*OPS), src["connector"] == "mysql",
        table.isNotNull() & (table != "") & ~table.rlike(REFUSED_NAME) & ~table.isin(".", ".."),
        db.isNull() | (~db.rlike(REFUSED_NAME) & ~db.isin(".", "..")),
        schema_name.isNull() | (~schema_name.rlike(REFUSED_NAME) & ~schema_name.isin(".", "..")),
        file.isNull() | (file == "") | (f.length(digits).between(1, 18)),
        non_negative(pos), non_negative(row), non_negative(ts), non_negative(tx_seq),
        (op == "d") | m["after"].isNotNull(), (op != "d") | m["before"].isNotNull(),
        *[keyed[k].isNotNull() for k in kp.names],
        b_ok, a_ok,
    ])
    number = f.when(file.isNull() | (file == ""), f.lit(0)).otherwise(digits)
    bronze = {
        "source_format": f.lit(FORMAT), "source_database": db, "source_schema": schema_name, "source_table": table,
        "op": f.create_map(*[f.lit(x) for kv in OPS.items() for x in kv])[op], "before": before, "after": after,
        "primary_key": f.array(*[f.lit(k) for k in kp.names]),
        "column_types": f.create_map(*[f.lit(x) for kv in vp.types for x in kv]),
        "source_position": f.array(*[c.cast("decimal(38,0)") for c in (number, f.coalesce(pos, f.lit(0)),
                                                                        f.coalesce(row, f.lit(0)))]),
        "source_ts_ms": ts, "tx_id": tx_id, "tx_seq": tx_seq, "row_in_record": f.lit(0),
        **{k: f.col(k) for k in KAFKA},
    }
    value = f.concat(f.lit(vp.prefix + PAYLOAD), f.col("_pl"), f.lit("}")).cast("binary")
    rows = rows.select("*", f.coalesce(ok, f.lit(False)).alias("_okc"))  # computed once, read by every column
    return rows.select(*output_columns(f.col("_okc"), bronze, f.col("key"), value, f.col("headers")))


def rest(stage, pairs: list, groups: dict):
    """The rows of no planned pair, for the Python parser: the value as it was landed (kept in the
    stage, or rebuilt from its group's schema text and its payload)."""
    f = F()
    planned = [(g.h1, g.h2, k.h1, k.h2) for g, k in pairs]
    in_pairs = f.lit(False)
    for h1, h2, k1, k2 in planned:
        in_pairs = in_pairs | ((f.col("_h1") == h1) & (f.col("_h2") == h2) & (f.col("_kh1") == k1)
                               & (f.col("_kh2") == k2))
    rebuilt = None
    for g in groups.values():
        this = f.when(in_group(g), f.lit(g.sample + PAYLOAD))
        rebuilt = this if rebuilt is None else rebuilt.when(in_group(g), f.lit(g.sample + PAYLOAD))
    text = f.concat(rebuilt, f.col("_pl"), f.lit("}")) if rebuilt is not None else f.lit(None).cast("string")
    value = f.coalesce(f.col("_kv"), text.cast("binary"))
    rows = stage.where(~f.coalesce(in_pairs, f.lit(False)))
    return rows.select(*output_columns(f.lit(False), {k: f.col(k) for k in KAFKA}, f.col("key"), value,
                                       f.col("headers")))


def stage_frame(raw):
    """Each raw row with its value's and key's schema hashes and payload texts (no schema text):
    ``_h1``/``_h2`` and ``_kh1``/``_kh2`` (null where the text is not an envelope), ``_pl`` and
    ``_kpl``, ``_kv`` the landed value where it cannot be rebuilt from these, ``_vlen`` its bytes.

    The text is cut at the first ``,"payload":`` (the schema part) and after the last one (the
    payload and the closing brace); the row is an envelope when the two parts put together give
    the text back. (Cutting by character positions, ``substring(v, length(head) + 12, ...)``,
    took 49 s of the 1M-change hour against 18 to 22 s for this.)"""
    f = F()
    s1 = raw.select(*KAFKA, "key", "value", "headers", f.col("value").cast("string").alias("_vs"),
                    f.col("key").cast("string").alias("_ks"))
    cut = []
    for p in ("_v", "_k"):
        text = f.col(f"{p}s")
        cut += [f.substring_index(text, PAYLOAD, 1).alias(f"{p}head"), f.substring_index(text, PAYLOAD, -1).alias(f"{p}tail")]
    s2 = s1.select("*", *cut)
    parts = []
    for p in ("_v", "_k"):
        text, head, tail = f.col(f"{p}s"), f.col(f"{p}head"), f.col(f"{p}tail")
        env = text.startswith(START) & text.endswith("}") & (f.concat(head, f.lit(PAYLOAD), tail) == text)
        parts += [env.alias(f"{p}env"), f.expr(f"substring({p}tail, 1, length({p}tail) - 1)").alias(f"{p}body")]
    s3 = s2.select("*", *parts)
    good = f.col("_venv") & (f.instr("_vbody", "\ufffd") == 0)
    kgood = f.col("_kenv") & (f.instr("_kbody", "\ufffd") == 0)
    return s3.select(*KAFKA, "key", "headers",
                     f.when(good, f.xxhash64("_vhead")).alias("_h1"), f.when(good, f.hash("_vhead")).alias("_h2"),
                     f.when(good, f.col("_vbody")).alias("_pl"),
                     f.when(kgood, f.xxhash64("_khead")).alias("_kh1"), f.when(kgood, f.hash("_khead")).alias("_kh2"),
                     f.when(kgood, f.col("_kbody")).alias("_kpl"),
                     f.when(~good, f.col("value")).alias("_kv"), f.octet_length("value").alias("_vlen"))


def fetch_text(raw, h1: int, h2: int, col: str) -> Optional[str]:
    """One row's schema text of the hash pair (the first row found: a partial scan)."""
    f = F()
    head = f.substring_index(f.col(col).cast("string"), PAYLOAD, 1)
    r = (raw.select(head.alias("t")).where((f.xxhash64("t") == f.lit(h1).cast("bigint"))
                                           & (f.hash("t") == f.lit(h2).cast("int"))).limit(1).collect())
    return r[0].t if r else None


def route(spark, raw, parser, out_dir: Path, max_bytes: int) -> RouteStats:
    """Parse the raw rows ``raw`` (one topic hour of ``bronze``'s raw table) in the JVM and write
    the result under ``out_dir`` (:func:`bench.jvm_common.write_route`); returns the counts.
    ``parser``: the topic's :class:`DebeziumJsonParser`, for the rows left to Python."""
    from pyspark import StorageLevel

    f = F()
    stats = RouteStats()
    # the landed value stays out of the cache: its length, hashes and payload are what is read again
    stage = stage_frame(raw).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        combos = (stage.groupBy("_h1", "_h2", "_kh1", "_kh2").agg(f.count("*").alias("n")).collect())
        stats.raw = sum(r.n for r in combos)
        vgroups: dict = {}
        kgroups: dict = {}
        for r in combos:
            if r._h1 is not None:
                vgroups.setdefault((r._h1, r._h2), Group(r._h1, r._h2, 0, None)).rows += r.n
            if r._kh1 is not None:
                kgroups.setdefault((r._kh1, r._kh2), Group(r._kh1, r._kh2, 0, None)).rows += r.n
        if len(vgroups) > 4 * 64:
            raise RuntimeError(f"{len(vgroups)} value schemas in the hour: more than this measurement plans")
        for col, groups, make in (("value", vgroups, value_plan), ("key", kgroups, key_plan)):
            for i, g in enumerate(sorted(groups.values(), key=lambda g: -g.rows)):
                g.sample = fetch_text(raw, g.h1, g.h2, col)
                g.plan, g.why = (make(g.sample) if g.sample and i < 64 else (None, "not planned"))
        pairs = [(vgroups[(r._h1, r._h2)], kgroups[(r._kh1, r._kh2)]) for r in combos
                 if (r._h1, r._h2) in vgroups and (r._kh1, r._kh2) in kgroups
                 and vgroups[(r._h1, r._h2)].plan and kgroups[(r._kh1, r._kh2)].plan
                 and set(kgroups[(r._kh1, r._kh2)].plan.names) <= {c[0] for c in vgroups[(r._h1, r._h2)].plan.columns}]
        frames = [branch(stage, v, k, max_bytes) for v, k in pairs] + [rest(stage, pairs, vgroups)]
        stats.groups = [{"kind": c, "rows": g.rows, "planned": g.plan is not None, "why": g.why}
                        for c, gs in (("value", vgroups), ("key", kgroups)) for g in gs.values()]
        write_route(spark, frames, out_dir, parser, stats)
    finally:
        stage.unpersist()
    stats.fallback_records = stats.raw - stats.jvm_records
    return stats
