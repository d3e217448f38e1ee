"""``debezium-json`` parsed in the JVM: the records Spark SQL can read exactly, the rest left to Python.

:class:`cdclake.formats.debezium.DebeziumJsonParser` is the reference. This module gives the
normalize stage a second reader for the common shape of its input, Debezium's MySQL connector
through Kafka Connect's ``JsonConverter`` with ``schemas.enable`` (value
``{"schema": ..., "payload": ...}``, key ``{"schema": ..., "payload": {key columns}}``), built from
Spark's ``from_json`` and column expressions, with no Python per record. :func:`split` returns
``(bronze rows, raw rows left over)``: a record is read in the JVM only when every check below
holds, and then its bronze row is the one the Python parser gives; any other record (a
tombstone, a control event, bad input, a type or shape this module does not convert) goes to the
Python parser, which produces its change, control row or quarantine reason. Nothing is read
differently, only faster.

Per window and topic, two passes over the raw rows:

1. The text before the value's first ``,"payload":`` (the envelope's schema) is grouped by
   ``xxhash64``; each distinct schema is read in Python with the parser's own
   ``_image_schemas``/``connect_type`` and becomes a plan: column names, canonical types and one
   exact conversion per column (below), or none when a column has another type. Same for the
   keys' schemas. At most :data:`MAX_SCHEMAS` of each per topic (the most frequent); a hash
   shared by two different texts is not planned.
2. Each record is parsed (``from_json``) and checked:

   - the value is ``'{"schema":' + S + ',"payload":' + P + '}'`` exactly, with ``S`` a planned
     schema and ``P`` the compact re-serialization of the parsed payload; this rules out what
     Spark's JSON reader accepts and Python's ``json`` does not (text after the document, invalid
     UTF-8, which Spark replaces) and duplicate top-level keys. It also sends to Python the values
     whose JSON text is not compact or holds characters beyond the Basic Multilingual Plane
     (emoji), which Spark writes back as ``\\u`` escapes;
   - ``op`` is ``c``, ``u``, ``d`` or ``r``; no ``message_type`` and no ``unique``; ``before``,
     ``after``, ``source``, ``transaction`` are objects or null; ``source.connector`` is
     ``mysql`` and the source names no SQL Server LSN; ``source.table`` is a non-empty JSON
     string, ``db`` and ``schema`` strings or null; ``file`` a string ending in 1 to 18 digits
     (or empty/null), ``pos``, ``row``, ``ts_ms`` and ``transaction.total_order`` decimal
     digits (at most 18) or null; the transaction id a JSON string or integer;
   - the key is a valid UTF-8 ``{"schema": ..., "payload": {...}}`` (same reconstruction) with
     at least one column: the primary key is its columns, in order;
   - each image's columns are exactly its schema's, in order; the after image (the before image
     of a delete) holds every key column, not null; a delete's key values convert by the key's
     own schema (the Python parser converts them too);
   - every value converts exactly (the value's JSON token type is checked with a typed
     ``from_json`` of the image per schema, since the text form alone cannot tell ``"123"``
     from ``123``):

     ==========================  =======================================  ========================
     Connect type                accepted                                 canonical text
     ==========================  =======================================  ========================
     int8/16/32/64               JSON integer in the long range           its digits
     string (any name)           text not starting ``{``/``[``, not a     the text
                                 number with a fraction or exponent
     boolean                     ``true``/``false``                       ``true``/``false``
     float32/64                  JSON number whose Java text has no       that text (= Python
                                 exponent and at most 15 digits           ``repr``)
     bytes                       Base64 alphabet text                     the text
     Connect ``Decimal``         canonical Base64 of 1 to 7 bytes,        plain digits, scale
                                 scale equal to the type's                from the schema
     Timestamp / MicroTimestamp  JSON integer, years 1000 to 9999         ``YYYY-MM-DD HH:MM:SS``
     and timestamp-typed names                                            ``[.ffffff]`` (UTC)
     Date / date-typed names     JSON integer days, years 1000 to 9999    ``YYYY-MM-DD``
     ==========================  =======================================  ========================

     Other types (``VariableScaleDecimal``, time-of-day types, structs, arrays, maps) make the
     schema unplanned. A PostgreSQL TOAST placeholder is never converted here (Python drops the
     column).

Used only when the source has no ``primary_key``/``primary_keys``/``column_types`` options, and
when the session time zone is UTC. Source: the Debezium MySQL connector documentation (change
event envelope, ``source`` block, data types), Kafka Connect's ``JsonConverter`` and
``Decimal``/``Timestamp``/``Date`` logical types, and :mod:`cdclake.formats.debezium`.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from cdclake.formats.debezium import (DECIMAL, FORMAT, TIME_UNITS, TIMESTAMP_UNITS, TOAST_PLACEHOLDERS,
                                      VARIABLE_SCALE_DECIMAL, _image_schemas, _key_schemas, connect_type)
from cdclake.types import decimal_precision_scale

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

ENVELOPE_START = '{"schema":'
PAYLOAD_KEY = ',"payload":'
#: Schemas planned per topic and window (value schemas and key schemas each); the rarer go to Python.
MAX_SCHEMAS = 64
_OPS = {"c": "insert", "u": "update", "d": "delete", "r": "snapshot"}
_LONG_DIGITS = r"^-?[0-9]{1,18}$"
_DIGITS = r"^[0-9]{1,18}$"
#: Text a JSON number with a fraction or exponent may have become (Python would write it as ``repr``).
_NUMBER_LIKE = r"^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$"
#: Java's ``Double.toString`` without exponent: then, with at most 15 digits, it equals Python's ``repr``.
_PLAIN_DOUBLE = r"^-?(0|[1-9][0-9]*)[.][0-9]+$"
_BASE64_ALPHABET = r"^[A-Za-z0-9+/]*={0,2}$"
_NON_FINITE = r"^[-+]?(NaN|Infinity|INF)$"
#: Epoch bounds of years 1000 to 9999: ms, and days.
_MS_RANGE = (-30610224000000, 253402300799999)
_DAY_RANGE = (-354285, 2932896)


@dataclass(frozen=True)
class ColumnPlan:
    """How one column's JSON value becomes canonical text in the JVM.

    ``kind``: int, string, boolean, double, binary, decimal, timestamp or date; ``scale``: a
    decimal's scale; ``units``: a timestamp's units per second (1000 for ms, 10**6 for µs).
    """

    name: str
    kind: str
    scale: int = 0
    units: int = 0


@dataclass(frozen=True)
class SchemaPlan:
    """A planned envelope schema: image columns (in the images' order) and bronze column types."""

    before: tuple[str, ...]
    after: tuple[str, ...]
    columns: dict  # name -> ColumnPlan (the parser's column schemas: before's, then after's)
    types: tuple[tuple[str, str], ...]  # bronze column_types, in the parser's order


def column_plan(name: str, schema: dict) -> Optional[ColumnPlan]:
    """The exact JVM conversion of a column with Connect field schema ``schema``, or None.

    Mirrors :func:`cdclake.formats.debezium.connect_text` for the types in the module docstring.
    """
    logical = schema.get("name")
    try:
        ctype = connect_type(schema)
    except (ValueError, TypeError, AttributeError):
        return None
    if logical == DECIMAL:
        try:
            scale = int((schema.get("parameters") or {}).get("scale", 0))
        except (ValueError, TypeError):
            return None
        ps = decimal_precision_scale(ctype)
        return ColumnPlan(name, "decimal", scale=scale) if ps and ps[1] == scale and scale >= 0 else None
    if logical == VARIABLE_SCALE_DECIMAL or logical in TIME_UNITS:
        return None
    if logical in TIMESTAMP_UNITS:
        units = TIMESTAMP_UNITS[logical]
        return ColumnPlan(name, "timestamp", units=units) if units in (1000, 10**6) else None
    kind = {"smallint": "int", "int": "int", "bigint": "int", "float": "double", "double": "double",
            "boolean": "boolean", "string": "string", "binary": "binary", "date": "date",
            "timestamp": "timestamp"}.get(ctype)
    if kind is None:
        return None
    if kind == "string" and schema.get("type") in ("struct", "array", "map"):
        return None
    return ColumnPlan(name, kind, units=1000 if kind == "timestamp" else 0)


def _envelope_schema(prefix: str) -> Optional[dict]:
    """The schema object of a value's text before ``,"payload":``, or None."""
    if not prefix.startswith(ENVELOPE_START) or "\ufffd" in prefix:
        return None
    try:
        schema = json.loads(prefix[len(ENVELOPE_START):])
    except ValueError:
        return None
    return schema if isinstance(schema, dict) and schema else None


def _image_names(schema: dict, image: str) -> Optional[tuple[str, ...]]:
    structs = [f for f in schema.get("fields") or [] if isinstance(f, dict) and f.get("field") == image]
    if len(structs) != 1:
        return None
    names = [c.get("field") for c in structs[0].get("fields") or [] if isinstance(c, dict)]
    if not names or not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
        return None
    return tuple(names)


def schema_plan(prefix: str) -> Optional[SchemaPlan]:
    """The plan of a value schema given as the value's text before ``,"payload":``, or None."""
    schema = _envelope_schema(prefix)
    if schema is None:
        return None
    before, after = _image_names(schema, "before"), _image_names(schema, "after")
    if before is None or after is None:
        return None
    col_schemas = _image_schemas(schema)
    columns = {}
    for name, s in col_schemas.items():
        plan = column_plan(name, s)
        if plan is None:
            return None
        columns[name] = plan
    if len({n.lower() for n in columns}) != len(columns):
        return None  # names equal but for case would meet in one struct field
    if not set(before) <= set(columns) or not set(after) <= set(columns):
        return None
    return SchemaPlan(before, after, columns, tuple((c, connect_type(s)) for c, s in col_schemas.items()))


def key_plan(prefix: str) -> Optional[tuple[ColumnPlan, ...]]:
    """The key columns of a key schema (text before the key's ``,"payload":``), each planned, or None."""
    schema = _envelope_schema(prefix)
    if schema is None:
        return None
    fields = _key_schemas(schema)
    names = [f.get("field") for f in schema.get("fields") or [] if isinstance(f, dict) and "field" in f]
    if not fields or len(names) != len(fields) or not all(isinstance(n, str) for n in names):
        return None
    plans = tuple(column_plan(n, fields[n]) for n in names)
    if any(p is None for p in plans) or len({n.lower() for n in names}) != len(names):
        return None
    return plans  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# Column expressions


def _F():
    from pyspark.sql import functions as F

    return F


def _string_token(obj_text: "SparkColumn", key: str) -> "SparkColumn":
    """``key`` occurs once in the compact object text, with a JSON string value."""
    F = _F()
    assert key.isalnum(), key  # a fixed field name, used as a regular expression below
    at = F.locate(f'"{key}":', obj_text)
    return (F.locate(f'"{key}":"', obj_text) == at) & (at > 0) & (F.size(F.split(obj_text, f'"{key}":')) == 2)


def _typed_struct(plans) -> Any:
    from pyspark.sql import types as T

    spark_type = {"int": T.LongType(), "timestamp": T.LongType(), "date": T.LongType(), "double": T.DoubleType(),
                  "boolean": T.BooleanType(), "decimal": T.BinaryType()}
    return T.StructType([T.StructField(p.name, spark_type.get(p.kind, T.StringType())) for p in plans])


def _convert(p: ColumnPlan, text: "SparkColumn", typed: "SparkColumn") -> tuple["SparkColumn", "SparkColumn"]:
    """``(ok, canonical text)`` of one value; ``text`` from the image's string map, ``typed`` from
    the typed parse (null when the JSON token does not fit). ``ok`` is false where the Python
    parser could read the value differently or not at all."""
    F = _F()
    present = typed.isNotNull()
    if p.kind == "int":
        return present, typed.cast("string")
    if p.kind == "boolean":
        return present, F.when(typed, F.lit("true")).otherwise(F.lit("false"))
    if p.kind == "double":
        out = typed.cast("string")
        digits = F.length(F.regexp_replace(out, "[-.]", ""))
        return present & out.rlike(_PLAIN_DOUBLE) & (digits <= 15), out
    if p.kind in ("string", "binary"):
        # Python renders non-string tokens itself: objects with sorted keys, floats as repr, NaN as nan.
        risky = (text.rlike(r'^[\[{"]') | (text.rlike(_NUMBER_LIKE) & text.rlike("[.eE]")) | text.rlike(_NON_FINITE)
                 | text.isin(*TOAST_PLACEHOLDERS))
        if p.kind == "binary":
            risky = risky | ~text.rlike(_BASE64_ALPHABET)
        return ~risky, text
    if p.kind == "decimal":
        # unbase64 throws on some malformed text: decode only canonical-looking Base64
        raw = F.unbase64(F.when(text.rlike(_BASE64_ALPHABET) & (F.length(text) % 4 == 0), text))
        hexa = F.hex(raw)
        # sign-extend the big-endian two's complement to 64 bits and read it as a signed long
        wide = F.concat(F.when(hexa.substr(1, 1) >= "8", F.lit("F" * 16)).otherwise(F.lit("0" * 16)), hexa)
        signed = F.conv(wide.substr(-16, 16), 16, -10)
        digits = F.regexp_replace(signed, "^-", "")
        if p.scale:
            padded = F.regexp_replace(F.concat(F.lit("0" * p.scale), digits), f"^0+(?=[0-9]{{{p.scale + 1}}})", "")
            digits = F.regexp_replace(padded, f"([0-9]{{{p.scale}}})$", ".$1")
        out = F.concat(F.when(signed.startswith("-"), F.lit("-")).otherwise(F.lit("")), digits)
        ok = present & F.octet_length(raw).between(1, 7) & (F.base64(raw) == text)
        return ok, out
    if p.kind == "timestamp":
        low, high = (bound * p.units // 1000 for bound in _MS_RANGE)
        instant = F.timestamp_millis(typed) if p.units == 1000 else F.timestamp_micros(typed)
        micros = F.pmod(typed, F.lit(p.units)) * (10**6 // p.units)
        text_ts = F.date_format(instant, "yyyy-MM-dd HH:mm:ss")
        out = F.concat(text_ts, F.when(micros != 0, F.concat(F.lit("."), F.lpad(micros.cast("string"), 6, "0")))
                       .otherwise(F.lit("")))
        return present & typed.between(low, high), out
    if p.kind == "date":
        out = F.date_add(F.lit("1970-01-01").cast("date"), typed.cast("int")).cast("string")
        return present & typed.between(*_DAY_RANGE), out
    raise ValueError(f"no conversion for kind {p.kind!r}")


def _image(plan: SchemaPlan, names: tuple[str, ...], texts: "SparkColumn", typed: "SparkColumn"):
    """``(ok, converted map)`` of one image for schema ``plan`` (null image: ok, null)."""
    F = _F()
    values = F.map_values(texts)
    oks, outs = [F.map_keys(texts) == F.array(*[F.lit(n) for n in names])], []
    for i, name in enumerate(names):
        text = values.getItem(i)
        ok, out = _convert(plan.columns[name], text, typed.getField(name))
        oks.append(text.isNull() | ok)
        outs.append(F.when(text.isNotNull(), out))
    converted = F.map_from_arrays(F.array(*[F.lit(n) for n in names]), F.array(*outs))
    return reduce(lambda a, b: a & b, oks), converted


def _all(conds) -> "SparkColumn":
    return reduce(lambda a, b: a & b, conds)


def _key_values_ok(plans: tuple[ColumnPlan, ...], typed: "SparkColumn", texts: "SparkColumn"):
    """Every Kafka key value converts by the key's schema (the Python parser converts them for a delete)."""
    F = _F()
    values = F.map_values(texts)
    oks = [F.map_keys(texts) == F.array(*[F.lit(p.name) for p in plans])]
    for i, p in enumerate(plans):
        text = values.getItem(i)
        oks.append(text.isNull() | _convert(p, text, typed.getField(p.name))[0])
    return _all(oks)


# ---------------------------------------------------------------------------------------------
# The split


class JvmSplit(NamedTuple):
    """What :func:`split` returns: bronze rows read in the JVM, the raw rows left to the Python
    parser, and the persisted frame both come from (``unpersist()`` it after writing)."""

    changes: "DataFrame"
    rest: "DataFrame"
    cached: "DataFrame"


def _plans(raw: "DataFrame", column: str, make) -> dict[int, Any]:
    """Distinct envelope prefixes of ``column`` by hash, planned with ``make`` (unplannable left out).

    Every prefix of the window is grouped (not only the planned ones), so a hash shared by two
    texts is seen and neither is planned.
    """
    F = _F()
    text = F.col(column).cast("string")
    prefix = F.when(text.startswith(ENVELOPE_START), F.substring_index(text, PAYLOAD_KEY, 1))
    found = (raw.select(F.xxhash64(prefix).alias("h"), prefix.alias("p")).where("p IS NOT NULL")
             .groupBy("h").agg(F.min("p").alias("lo"), F.max("p").alias("hi"), F.count("*").alias("n"))
             .orderBy(F.desc("n")).collect())
    out = {}
    for r in found:
        if r.lo != r.hi:
            log.warning("%s: two %s schemas share hash %d; their records go to the Python parser", FORMAT, column, r.h)
            continue
        try:
            plan = make(r.lo)
        except Exception as exc:  # a schema the parser would reject: its records go to Python
            log.info("%s: %s schema not planned (%s: %s)", FORMAT, column, type(exc).__name__, exc)
            plan = None
        if plan is not None and len(out) < MAX_SCHEMAS:
            out[r.h] = plan
    return out


def split(raw: "DataFrame", options: Optional[dict] = None) -> Optional[JvmSplit]:
    """Split raw rows of ``debezium-json`` topics into ``(bronze rows, rows left to Python)``.

    ``raw``: rows of ``bronze.raw_records`` (kafka_topic, kafka_partition, kafka_offset,
    kafka_timestamp_ms, landed_hour, key, value, headers). The bronze frame has the columns of
    :data:`cdclake.normalize.BRONZE_SCHEMA`, the second frame ``raw``'s columns. Returns None
    when the JVM path does not apply (source options that type columns or set keys, a session
    time zone other than UTC, or no planned schema in the window). Both frames come from one
    persisted frame (:attr:`JvmSplit.cached`), which the caller unpersists after writing.
    """
    F = _F()
    from pyspark import StorageLevel
    from pyspark.sql import types as T

    opts = options or {}
    if any(opts.get(k) for k in ("primary_key", "primary_keys", "column_types")):
        return None
    spark = raw.sparkSession
    if spark.conf.get("spark.sql.session.timeZone") not in ("UTC", "Etc/UTC", "Z", "+00:00"):
        return None
    values = _plans(raw, "value", schema_plan)
    if not values:
        return None
    keys = _plans(raw, "key", key_plan)

    v = F.col("value").cast("string")
    k = F.col("key").cast("string")
    payload_only = T.StructType([T.StructField("payload", T.StringType())])
    maps = T.MapType(T.StringType(), T.StringType())
    objects = T.StructType([T.StructField(n, maps) for n in ("before", "after", "source", "transaction")])

    # Each stage computes its expressions once; later stages refer to them by name, so the plan
    # stays small (Spark does not inline an expensive expression that is used more than once).
    stage = raw.select("*", F.substring_index(v, PAYLOAD_KEY, 1).alias("_prefix"),
                       F.substring_index(k, PAYLOAD_KEY, 1).alias("_key_prefix"),
                       F.from_json(v, payload_only)["payload"].alias("_payload"),
                       F.from_json(k, payload_only)["payload"].alias("_key_payload"))
    stage = stage.select(
        "*", F.xxhash64("_prefix").alias("_h"), F.xxhash64("_key_prefix").alias("_kh"),
        ((F.concat("_prefix", F.lit(PAYLOAD_KEY), "_payload", F.lit("}")) == v) & v.startswith(ENVELOPE_START))
        .alias("_value_whole"),
        ((F.concat("_key_prefix", F.lit(PAYLOAD_KEY), "_key_payload", F.lit("}")) == k)
         & k.startswith(ENVELOPE_START) & (F.encode(F.decode(F.col("key"), "UTF-8"), "UTF-8") == F.col("key")))
        .alias("_key_whole"),
        F.from_json("_payload", maps).alias("_pm"), F.from_json("_payload", objects).alias("_pt"),
        F.from_json("_key_payload", maps).alias("_kp"))
    pm, pt, kp = F.col("_pm"), F.col("_pt"), F.col("_kp")
    src, tx = pt["source"], pt["transaction"]
    src_text, tx_text = pm["source"], pm["transaction"]
    op = pm["op"]
    kind = F.create_map(*[F.lit(x) for kv in _OPS.items() for x in kv])[op]

    def opt_digits(text):  # optional_int: null, "" or digits
        return text.isNull() | (text == "") | text.rlike(_DIGITS)

    def element(text):  # _element: null (0) or digits
        return text.isNull() | text.rlike(_DIGITS)

    def case(cases, default):
        expr = None
        for cond, value in cases:
            expr = F.when(cond, value) if expr is None else expr.when(cond, value)
        return default if expr is None else expr.otherwise(default)

    # typed parses of the images (per value schema) and of the key (per key schema)
    typed = []
    for i, (hv, plan) in enumerate(values.items()):
        this = F.col("_h") == F.lit(hv).cast("bigint")
        typed += [F.when(this, F.from_json(pm["before"], _typed_struct([plan.columns[n] for n in plan.before])))
                  .alias(f"_tb{i}"),
                  F.when(this, F.from_json(pm["after"], _typed_struct([plan.columns[n] for n in plan.after])))
                  .alias(f"_ta{i}")]
    for j, (hv, plans) in enumerate(keys.items()):
        typed.append(F.when((F.col("_kh") == F.lit(hv).cast("bigint")) & (op == "d"),
                            F.from_json("_key_payload", _typed_struct(plans))).alias(f"_tk{j}"))
    stage = stage.select("*", *typed)

    ok_cases, before_cases, after_cases, types_cases = [], [], [], []
    for i, (hv, plan) in enumerate(values.items()):
        this = F.col("_h") == F.lit(hv).cast("bigint")
        b_ok, b_map = _image(plan, plan.before, pt["before"], F.col(f"_tb{i}"))
        a_ok, a_map = _image(plan, plan.after, pt["after"], F.col(f"_ta{i}"))
        ok_cases.append((this, (pt["before"].isNull() | b_ok) & (pt["after"].isNull() | a_ok)))
        before_cases.append((this, F.when(pt["before"].isNotNull(), b_map)))
        after_cases.append((this, F.when(pt["after"].isNotNull(), a_map)))
        types_cases.append((this, F.create_map(*[F.lit(x) for kv in plan.types for x in kv])))
    key_cases = [(F.col("_kh") == F.lit(hv).cast("bigint"), _key_values_ok(plans, F.col(f"_tk{j}"), kp))
                 for j, (hv, plans) in enumerate(keys.items())]
    tx_pick = (F.when(src["txId"].isNotNull(), F.struct(src["txId"].alias("v"), _string_token(src_text, "txId").alias("s")))
               .when(tx["id"].isNotNull(), F.struct(tx["id"].alias("v"), _string_token(tx_text, "id").alias("s")))
               .when(src["gtid"].isNotNull(), F.struct(src["gtid"].alias("v"), _string_token(src_text, "gtid").alias("s"))))
    file_name = src["file"]
    file_digits = F.regexp_extract(file_name, "([0-9]+)$", 1)
    ts = F.coalesce(src["ts_ms"], pm["ts_ms"])
    common = _all([
        F.col("_value_whole"), F.col("_key_whole"), pm.isNotNull(), kind.isNotNull(),
        pm["message_type"].isNull(), pm["unique"].isNull(),
        *[pm[n].isNull() | pt[n].isNotNull() for n in ("before", "after", "source", "transaction")],
        src.isNotNull(), src["connector"] == "mysql",
        ~F.map_contains_key(src, "change_lsn"), ~F.map_contains_key(src, "commit_lsn"),
        src["table"].isNotNull(), src["table"] != "", _string_token(src_text, "table"),
        src["db"].isNull() | _string_token(src_text, "db"), src["schema"].isNull() | _string_token(src_text, "schema"),
        file_name.isNull() | (file_name == "") | (_string_token(src_text, "file") & (F.length(file_digits) >= 1)
                                                 & (F.length(file_digits) <= 18)),
        element(src["pos"]), element(src["row"]), opt_digits(ts), opt_digits(tx["total_order"]),
        kp.isNotNull(), F.size(kp) >= 1,
    ])
    stage = stage.select(
        "*", (common & case(ok_cases, F.lit(False))).alias("_fields_ok"),
        case(before_cases, F.lit(None)).alias("_before"), case(after_cases, F.lit(None)).alias("_after"),
        case(types_cases, F.lit(None)).alias("_types"), case(key_cases, F.lit(False)).alias("_key_ok"),
        kind.alias("_op"), tx_pick.alias("_tx"), ts.alias("_ts"),
        F.when(file_name.isNull() | (file_name == ""), F.lit(0)).otherwise(file_digits).alias("_file"))
    image = F.when(F.col("_op") == "delete", F.col("_before")).otherwise(F.col("_after"))
    has_key = F.forall(F.map_keys(kp), lambda c: image[c].isNotNull())
    ok = (F.col("_fields_ok") & (F.col("_tx.v").isNull() | F.col("_tx.v").rlike(_LONG_DIGITS) | F.col("_tx.s"))
          & image.isNotNull() & has_key & ((F.col("_op") != "delete") | F.col("_key_ok")))
    stage = stage.select("*", F.coalesce(ok, F.lit(False)).alias("_jvm"))

    def as_bigint(text):
        return F.when(text.isNotNull() & (text != ""), text.cast("bigint"))

    bronze = {
        "source_format": F.lit(FORMAT), "source_database": src["db"], "source_schema": src["schema"],
        "source_table": src["table"], "op": F.col("_op"), "before": F.col("_before"), "after": F.col("_after"),
        "primary_key": F.map_keys(kp), "column_types": F.col("_types"),
        "source_position": F.array(*[c.cast("decimal(38,0)") for c in (
            F.col("_file"), F.coalesce(src["pos"], F.lit("0")), F.coalesce(src["row"], F.lit("0")))]),
        "source_ts_ms": as_bigint(F.col("_ts")), "tx_id": F.col("_tx.v"), "tx_seq": as_bigint(tx["total_order"]),
        "row_in_record": F.lit(0).cast("int"), "tx_last": F.lit(None).cast("boolean"),
        "tx_size": F.lit(None).cast("bigint"),
    }
    kafka = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp_ms", "landed_hour"]
    raw_cols = raw.columns
    parsed = stage.select(
        *[F.col(c) for c in raw_cols if c != "value"], F.when(~F.col("_jvm"), F.col("value")).alias("value"),
        "_jvm", *[F.when(F.col("_jvm"), e).alias(f"_b_{n}") for n, e in bronze.items()])
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    from cdclake.normalize import BRONZE_SCHEMA
    from pyspark.sql.types import _parse_datatype_string

    names = _parse_datatype_string(BRONZE_SCHEMA).names
    changes = parsed.where("_jvm").select(*[(F.col(n) if n in kafka else F.col(f"_b_{n}")).alias(n) for n in names])
    rest = parsed.where(~F.col("_jvm")).select(*raw_cols)
    log.info("%s: %d value schemas and %d key schemas read in the JVM", FORMAT, len(values), len(keys))
    return JvmSplit(changes, rest, parsed)
