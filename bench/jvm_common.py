"""What the JVM parse routes of ``debezium-json`` and ``canal-json`` share (:mod:`bench.jvm_dbz`,
:mod:`bench.jvm_canal`): the exactness checks, the Python parser for the rows the SQL route
does not read, the output files, and the record-by-record comparison with normalize's bronze rows.

A route reads the raw rows of one topic hour, groups them by the schema part of each message,
plans each group in Python once (a Spark schema for ``from_json`` and one canonical-text
expression per column), and projects each planned group with a small projection of its own;
the projections are put together with ``unionByName`` and written in one Parquet write. A row
whose check fails (anything the SQL route cannot render exactly) is written with ``_ok`` false
and its raw key and value, and is parsed afterwards by the format's own Python parser
(:func:`cdclake.normalize.rows.classify`), whose changes, control and quarantine rows are
written to Parquet as well.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any, Callable, Optional

#: ``to_json`` writing nulls, as the vendors' JSON writers do: the exactness check of a parse is
#: that ``to_json(from_json(text))`` gives the text back byte for byte.
TO_JSON = {"ignoreNullFields": "false"}
#: Kafka coordinates every output row carries (as in bronze).
KAFKA = ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp_ms", "landed_hour"]
#: Name characters the pipeline refuses (:mod:`cdclake.names`): path separators, control characters.
REFUSED_NAME = "[/\\\\\\x00-\\x1f\\x7f-\\x9f]"
#: Plain decimal text of a double as Java writes it, no trailing zero but ``.0``: with at most
#: 15 significant digits, it is also what Python's ``repr`` writes for the same double.
PLAIN_DOUBLE = r"^-?(0|[1-9][0-9]*)[.]([0-9]*[1-9]|0)$"
#: Years 1000 to 9999 in ms and days since the epoch (Python and Spark write them alike).
MS_RANGE = (-30610224000000, 253402300799999)
DAY_RANGE = (-354285, 2932896)
#: At most this many groups (schemas) are planned per topic hour, the most frequent first.
MAX_PLANS = 64


def F():
    """``pyspark.sql.functions`` (imported late: the module loads without Spark)."""
    from pyspark.sql import functions

    return functions


def all_of(conds: list) -> Any:
    """The conjunction of Spark boolean columns (true for none)."""
    return reduce(lambda a, b: a & b, conds) if conds else F().lit(True)


def same_json(written, text):
    """Whether ``to_json``'s text ``written`` is ``text``: byte for byte, or but for the case of
    the hex digits of ``\\u00XX`` escapes (Jackson writes ``\\u001F``, Python ``\\u001f``),
    which is looked at only when the texts differ."""
    f = F()
    fixed = written
    for c in ("0B", "0E", "0F", "1A", "1B", "1C", "1D", "1E", "1F"):
        fixed = f.replace(fixed, f.lit("\\u00" + c), f.lit("\\u00" + c.lower()))
    return (written == text) | (fixed == text)


def name_ok(name: Optional[str]) -> bool:
    """A name (table, column, database) the pipeline accepts (:func:`cdclake.names.check_names`)."""
    from cdclake.names import name_problem

    return name is None or (isinstance(name, str) and name_problem(name) is None)


def double_text(d) -> tuple:
    """``(ok, text)`` of a double column: Java's text where it equals Python's ``repr``."""
    f = F()
    s = d.cast("string")
    return s.rlike(PLAIN_DOUBLE) & (f.length(f.regexp_replace(s, "[-.]", "")) <= 15), s


@dataclass
class Group:
    """One distinct schema part of a topic hour: its hashes, the count of rows, a sample text
    (the schema prefix for Debezium, a whole message for Canal) and its plan (None: every row
    of the group goes to the Python parser)."""

    h1: int
    h2: int
    rows: int
    sample: Optional[str]
    plan: Any = None
    why: str = ""


@dataclass
class RouteStats:
    """The counts of one route run: raw records, records read in SQL, records given to the
    Python parser, and what it made of them; the groups planned and not."""

    raw: int = 0
    jvm_records: int = 0
    fallback_records: int = 0
    jvm_changes: int = 0
    fallback_changes: int = 0
    fallback_control: int = 0
    fallback_quarantined: int = 0
    groups: list = field(default_factory=list)

    def as_dict(self) -> dict:
        """The counts as a plain dict (``groups``: one entry per schema group)."""
        return dict(self.__dict__)


def bronze_names() -> list[str]:
    """The column names of ``bronze.changes`` (:data:`cdclake.lake.BRONZE_SCHEMA`), in order."""
    from cdclake.lake import BRONZE_SCHEMA

    return BRONZE_SCHEMA.names


def bronze_nulls() -> dict:
    """Each bronze column as a typed null (the shape of a row the SQL route leaves to Python)."""
    from cdclake.lake import BRONZE_SCHEMA

    return {f.name: F().lit(None).cast(f.dataType) for f in BRONZE_SCHEMA.fields}


def output_columns(ok, bronze: dict, key, value, headers) -> list:
    """The columns of a route's output row: ``_ok``, every bronze column (null unless ``ok``), and
    the raw ``key``, ``value`` and ``headers`` the Python parser needs (null when ``ok``)."""
    from cdclake.lake import BRONZE_SCHEMA

    f = F()
    nulls = bronze_nulls()
    cols = [f.coalesce(ok, f.lit(False)).alias("_ok")]
    for fld in BRONZE_SCHEMA.fields:
        e = bronze.get(fld.name, nulls[fld.name])
        cols.append(e.cast(fld.dataType).alias(fld.name) if fld.name in KAFKA else
                    f.when(ok, e.cast(fld.dataType)).alias(fld.name))
    cols += [f.when(~ok, key).alias("_key"), f.when(~ok, value).alias("_value"),
             f.when(~ok, headers).alias("_headers")]
    return [c for c in cols]


def fallback_rows(parser, rows) -> Any:
    """The Python parser over raw rows (``kafka_*``, ``landed_hour``, ``_key``, ``_value``,
    ``_headers``): yields ``(kind, *staged columns)`` per outcome, kind ``change`` with the
    :data:`cdclake.lake.STAGED_SCHEMA` columns, ``control`` and ``quarantine`` with the Kafka
    columns only (:func:`cdclake.normalize.rows.classify_records`)."""
    from cdclake.lake import STAGED_SCHEMA
    from cdclake.normalize.rows import classify_records
    from cdclake.record import KafkaRecord

    from decimal import Decimal

    names = STAGED_SCHEMA.names
    at = [names.index(k) for k in KAFKA]
    pos = names.index("source_position")

    def records():
        for r in rows:
            kcols = (r.kafka_topic, r.kafka_partition, r.kafka_offset, r.kafka_timestamp_ms, r.landed_hour)
            yield kcols, KafkaRecord(r.kafka_topic, r.kafka_partition, r.kafka_offset, r.kafka_timestamp_ms,
                                     None if r._key is None else bytes(r._key),
                                     None if r._value is None else bytes(r._value),
                                     [(h.name, None if h.value is None else bytes(h.value)) for h in (r._headers or [])])
    for kind, row in classify_records(parser, records()):
        if kind == "change":
            row = list(row)
            row[pos] = [Decimal(x) for x in row[pos]]
            yield ("change",) + tuple(row)
        else:
            out = [None] * len(names)
            for i, v in zip(at, row[:5]):
                out[i] = v
            yield (kind,) + tuple(out)


def run_fallback(spark, parser, out_dir: Path, stats: RouteStats) -> None:
    """Parse the rows of ``out_dir/jvm`` left with ``_ok`` false with the Python parser and write
    the outcomes to ``out_dir/fallback`` (Parquet: ``kind`` and the staged columns); adds the
    counts to ``stats``."""
    from pyspark.sql.types import StringType, StructField, StructType

    from cdclake.lake import STAGED_SCHEMA

    f = F()
    left = spark.read.parquet(str(out_dir / "jvm")).where(~f.col("_ok")).select(*KAFKA, "_key", "_value", "_headers")
    schema = StructType([StructField("kind", StringType())] + STAGED_SCHEMA.fields)
    done = left.rdd.mapPartitions(lambda rows: fallback_rows(parser, rows))
    spark.createDataFrame(done, schema).write.mode("overwrite").parquet(str(out_dir / "fallback"))
    counts = {r.kind: r.n for r in spark.read.parquet(str(out_dir / "fallback")).groupBy("kind")
              .agg(f.count("*").alias("n")).collect()}
    stats.fallback_changes = counts.get("change", 0)
    stats.fallback_control = counts.get("control", 0)
    stats.fallback_quarantined = counts.get("quarantine", 0)


def write_route(spark, frames: list, out_dir: Path, parser, stats: RouteStats) -> None:
    """Write the union of the groups' projections (``frames``, :func:`output_columns` each) to
    ``out_dir/jvm`` in one Parquet write, then run the Python parser over the rows left to it
    (:func:`run_fallback`); fills the counts of ``stats`` (records read in SQL: their rows of
    index 0)."""
    f = F()
    shutil.rmtree(out_dir, ignore_errors=True)
    union = reduce(lambda a, b: a.unionByName(b), frames)
    union.write.mode("overwrite").parquet(str(out_dir / "jvm"))
    counts = {r._ok: (r.n, r.records) for r in spark.read.parquet(str(out_dir / "jvm")).groupBy("_ok")
              .agg(f.count("*").alias("n"), f.count(f.when(f.col("row_in_record") == 0, 1)).alias("records"))
              .collect()}
    stats.jvm_changes, stats.jvm_records = counts.get(True, (0, 0))
    if counts.get(False, (0, 0))[0]:
        run_fallback(spark, parser, out_dir, stats)


def route_bronze(spark, out_dir: Path):
    """The bronze rows of a route's output: the SQL route's, then the Python parser's (maps
    rebuilt from their key and value arrays), with the columns of ``bronze.changes``."""
    from cdclake.lake import STAGED_MAPS

    f = F()
    names = bronze_names()
    jvm = spark.read.parquet(str(out_dir / "jvm")).where("_ok").select(*names)
    fb_path = out_dir / "fallback"
    if not fb_path.exists():
        return jvm
    fb = spark.read.parquet(str(fb_path)).where("kind = 'change'")
    cols = [f.map_from_arrays(f.col(STAGED_MAPS[n][0]), f.col(STAGED_MAPS[n][1])).alias(n) if n in STAGED_MAPS
            else f.col(n) for n in names]
    return jvm.unionByName(fb.select(*cols))


def canonical(df):
    """Bronze rows in a comparable form: every column, maps as their entries sorted by key."""
    from pyspark.sql.types import MapType

    f = F()
    return df.select(*[f.array_sort(f.map_entries(f.col(c.name))).alias(c.name) if isinstance(c.dataType, MapType)
                       else f.col(c.name) for c in df.schema.fields])


def compare(python_rows, jvm_rows, samples: int = 3) -> dict:
    """Both routes' bronze rows compared record by record (:func:`canonical`, ``exceptAll`` both
    ways, all rows, in Spark). Returns ``{"equal", "python_rows", "jvm_rows", "only_python",
    "only_jvm", "samples_only_python", "samples_only_jvm"}`` (samples as text, Kafka
    coordinates first)."""
    names = bronze_names()
    a, b = canonical(python_rows.select(*names)).cache(), canonical(jvm_rows.select(*names)).cache()
    only_a, only_b = a.exceptAll(b).cache(), b.exceptAll(a).cache()
    out = {"python_rows": a.count(), "jvm_rows": b.count(), "only_python": only_a.count(), "only_jvm": only_b.count()}
    order = ["kafka_partition", "kafka_offset", "row_in_record"]
    out["samples_only_python"] = [str(r.asDict())[:1500] for r in only_a.orderBy(*order).limit(samples).collect()]
    out["samples_only_jvm"] = [str(r.asDict())[:1500] for r in only_b.orderBy(*order).limit(samples).collect()]
    out["equal"] = out["only_python"] == 0 and out["only_jvm"] == 0 and out["python_rows"] == out["jvm_rows"]
    for d in (a, b, only_a, only_b):
        d.unpersist()
    return out


def collect_groups(stage, sample_of: Callable[[Any], Any]) -> list[Group]:
    """The schema groups of a persisted stage (columns ``_h1``, ``_h2``: the two hashes of each
    row's schema part, null where a row has none), most frequent first, each with one sample
    (``sample_of(group frame)``: a Spark column aggregated with ``first``)."""
    f = F()
    rows = (stage.where(f.col("_h1").isNotNull()).groupBy("_h1", "_h2")
            .agg(f.count("*").alias("n"), sample_of(f).alias("s")).orderBy(f.desc("n")).collect())
    return [Group(r._h1, r._h2, r.n, r.s) for r in rows]


def in_group(g: Group):
    """The predicate of one group's rows."""
    f = F()
    return (f.col("_h1") == f.lit(g.h1).cast("bigint")) & (f.col("_h2") == f.lit(g.h2).cast("int"))


def not_in_groups(groups: list[Group]):
    """Rows of no group of ``groups`` (a null hash included)."""
    f = F()
    if not groups:
        return f.lit(True)
    return ~f.coalesce(reduce(lambda a, b: a | b, [in_group(g) for g in groups]), f.lit(False))
