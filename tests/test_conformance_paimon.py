"""Apache Paimon's Kafka CDC test vectors (Debezium, Canal, Maxwell, OGG, AWS DMS and
aliyun JSON) through land, normalize and silver.

Source: Apache Paimon ``paimon-flink/paimon-flink-cdc/src/test/resources/kafka/`` (read in place
from ``shared/conformance/paimon/kafka``) and the tables Paimon's tests state for them
(``shared/conformance/paimon/expected``, read in place; the rows below come from those files):

- ``KafkaDebeziumSyncTableActionITCase.testMessageWithNullValue`` (``debezium/table/nullvalue``)
- ``KafkaSyncTableActionITCase.testComputedColumn`` (``debezium/table/computedcolumn``)
- ``KafkaSyncTableActionITCase.testSchemaIncludeRecord`` (``debezium/table/schema/include``)
- ``KafkaSyncTableActionITCase.runSingleTableSchemaEvolutionWithSchemaIncludeRecord``
  (``debezium/table/schema/schemaevolution/debezium-data-{1..5}.txt``)
- ``KafkaSyncTableActionITCase.testKafkaBuildSchemaWithDelete``
  (``debezium/table/schema/schemaevolution/debezium-data-with-delete.txt``)
- ``KafkaSyncTableActionITCase.runSingleTableSchemaEvolution`` / ``testSchemaEvolutionImpl`` with
  ``debezium`` (``debezium/table/schemaevolution/debezium-data-{1,2,3}.txt``)
- ``KafkaMaxwellSyncTableActionITCase.testSchemaEvolution`` (``runSingleTableSchemaEvolution`` with
  ``maxwell``: ``maxwell/table/schemaevolution/maxwell-data-{1,2,3}.txt``) and
  ``testFieldValNullSyncTable`` (``testTableFiledValNull``: ``maxwell-data-4.txt``). Paimon's
  Maxwell files carry no ``position`` (Maxwell's ``output_binlog_position`` is off by default):
  the sources set no option, as a new user's would, and the rows keep their Kafka order (one
  partition, Paimon's arrival order), ``sources[].options.without_position``'s default
- ``KafkaAWSDMSSyncTableActionITCase``: ``runSingleTableSchemaEvolution`` with ``aws-dms``
  (``aws-dms/table/schemaevolution/aws-dms-data-{1,2,3}.txt``: every column STRING, ``BI_``
  before-image columns in the update) and ``testTableFiledValNull``
  (``aws-dms-data-4.txt``), through ``aws-dms-json`` with the key Paimon's test passes (``id``)
- the same schema evolution (data-1 to data-4) re-serialised as ``debezium-avro`` and as
  ``debezium-jsonschema`` (Paimon has no Avro fixtures: each message's Connect schema written as
  Confluent's AvroConverter / JsonSchemaConverter writes it, registered in the stand-in schema
  registry, :mod:`cdclake.sim.render_debezium_avro`): the same rows and types as the JSON run
- ``KafkaCanalSyncTableActionITCase.testSchemaEvolution`` (``canal/table/schemaevolution``),
  ``testMultipleSchemaEvolutions`` (``canal/table/schemaevolutionmultiple``) and
  ``testCDCOperations`` (``canal/table/event``)
- ``KafkaOggSyncTableActionITCase``: ``testSchemaEvolution`` (``runSingleTableSchemaEvolution`` with
  ``ogg``: ``ogg/table/schemaevolution/ogg-data-{1,2,3}.txt``, positions out of arrival order in
  data-3) and ``testCDCOperations`` (``ogg/table/event/event-{insert,update,delete}.txt``)
- ``AliyunJsonRecordParserTest`` (``aliyun/table/event/event-{insert,update-in-one,delete}.txt``,
  ``expected/aliyun-events.txt``): Paimon's test states, per message, one record of row kind
  INSERT, UPDATE_AFTER and DELETE, key ``[id]``, database ``bigdata_test`` and table
  ``sync_test_table``; it states no table rows or row type, so silver is checked against the
  rows those changes give (``aliyun-json`` types: LONG → bigint, DOUBLE → double, STRING →
  string, DATE → timestamp)

Paimon's tests write one file to the topic, wait for the table, then write the next. Here each
such step is one hour of Kafka timestamps and one run of the three stages, and silver is read
after every hour. Paimon applies changes in arrival order; this pipeline orders them by source
position (Kafka offset breaking ties), and the results are compared on these in-order inputs.

Paimon types map to silver (Iceberg) types as: INT → int, BIGINT → bigint, FLOAT → float,
DOUBLE → double, STRING and VARCHAR(n) → string (Iceberg has no length-bounded string, so
VARCHAR(10) → VARCHAR(20) must leave the column a string), DECIMAL(p,s) → decimal(p,s),
VARBINARY(n) → binary. Values are compared in Paimon's text form (``+I[...]`` rows: NULL, byte
arrays as ``[110, 105, ...]``, FLOAT as its shortest 32-bit text).

Not applicable here:

- ``AliyunJsonRecordParserTest``'s ``etl_create_time``/``etl_update_time`` computed columns and
  its timestamp extractor (> 0 for every message; here the full-load INSERT, whose
  ``eventTime`` is -1, has no ``source_ts_ms``);
- ``testComputedColumn``'s ``_year=year(_date)`` computed column and partition: computed columns
  are an option of Paimon's action, not part of the format; the source columns are checked;
- ``testCDCOperations`` with ``ignore-delete=true`` (a Paimon table option with no counterpart);
- where Paimon's sync-table action writes the messages of *different* source tables into one
  target table (``testCDCOperations``: ``event``, ``schema_evolution_1`` and
  ``schema_evolution_2``; ``testSchemaEvolution``: ``schema_evolution_1`` and ``_2``), silver
  mirrors each source table in its own table: the rows are compared as the union of those
  tables, and where Paimon's result depends on one table's change reaching another table's row
  (an update or delete of a key inserted under another table name), each silver table is
  checked against Paimon's row for the key its own messages carry;
- key columns' NOT NULL: silver columns are nullable; non-null keys are the silver gate's check;
- ``testTableFiledValNull``'s ``null`` for 103's ``weight``: Paimon states the JSON null of a
  schemaless Maxwell or DMS row as the text ``null`` (its ``NULL`` is what it prints for a SQL
  NULL); ``maxwell-json`` and ``aws-dms-json`` keep the JSON null a SQL NULL, and the row is
  compared with that value read as NULL.
"""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Optional

import pytest
from conftest import CONFORMANCE, f32, json_lines, produce, write_pipeline
from pipeline import hour, ms

PAIMON = CONFORMANCE / "paimon"
KAFKA = PAIMON / "kafka"
EXPECTED = PAIMON / "expected"
TOMBSTONE = object()  #: a Kafka record with a null value, as testMessageWithNullValue sends
HOURS = 5


@dataclass
class Scenario:
    """One Paimon test: its files per step (hour), its silver tables (without the ``<tag>_`` prefix),
    the primary key Paimon's test passes (None: the messages' own key) and the source's options."""

    tag: str
    fmt: str
    steps: dict[int, list]
    tables: list[str]
    primary_key: Optional[list[str]] = None
    #: how a fixture's line becomes a Kafka value (None: its bytes), and the source's options
    encode: Optional[Callable[[str], bytes]] = None
    options: dict = field(default_factory=dict)


def _registry_encoder(fmt: str) -> Callable[[str], bytes]:
    """A Connect JSON line (``schema`` + ``payload``) as a ``fmt`` wire-format value, its schema
    registered in the stand-in registry."""
    from cdclake.sim.registry import registry_url
    from cdclake.sim.render_debezium_avro import AvroWriter, JsonSchemaWriter

    writer = (AvroWriter if fmt == "debezium-avro" else JsonSchemaWriter)(registry_url())
    return lambda line: writer.write("test.product-value", json.loads(line))


def _registry_options() -> dict:
    from cdclake.sim.registry import registry_url

    return {"options": {"schema_registry": {"url": registry_url()}}}


SCENARIOS = {s.tag: s for s in [
    # KafkaDebeziumSyncTableActionITCase.testMessageWithNullValue: data-1, a null-value record, data-2; pk id
    Scenario("nullvalue", "debezium-json",
             {0: ["debezium/table/nullvalue/debezium-data-1.txt", TOMBSTONE,
                  "debezium/table/nullvalue/debezium-data-2.txt"]},
             ["test__test"], ["id"]),
    # KafkaSyncTableActionITCase.testComputedColumn(debezium): pk (_id, _year); _year is computed
    Scenario("computed", "debezium-json", {0: ["debezium/table/computedcolumn/debezium-data-1.txt"]},
             ["test__product"], ["_id"]),
    # KafkaSyncTableActionITCase.testSchemaIncludeRecord: pk id
    Scenario("include", "debezium-json", {0: ["debezium/table/schema/include/debezium-data-1.txt"]},
             ["inventory__products"], ["id"]),
    # runSingleTableSchemaEvolutionWithSchemaIncludeRecord("schemaevolution", debezium): pk id
    Scenario("includeevol", "debezium-json",
             {i: [f"debezium/table/schema/schemaevolution/debezium-data-{i + 1}.txt"] for i in range(5)},
             ["test__product"], ["id"]),
    # the same evolution (data-1..4) in Avro and in JSON with JSON Schema through the schema registry
    *[Scenario(tag, fmt, {i: [f"debezium/table/schema/schemaevolution/debezium-data-{i + 1}.txt"] for i in range(4)},
               ["test__product"], ["id"], _registry_encoder(fmt), _registry_options())
      for tag, fmt in (("avroevol", "debezium-avro"), ("jsevol", "debezium-jsonschema"))],
    # testKafkaBuildSchemaWithDelete: the schema is built from a delete record
    Scenario("withdelete", "debezium-json",
             {0: ["debezium/table/schema/schemaevolution/debezium-data-with-delete.txt"]},
             ["test__product"], ["id"]),
    # runSingleTableSchemaEvolution("schemaevolution", debezium): pk id, no schema in the messages
    Scenario("evol", "debezium-json",
             {i: [f"debezium/table/schemaevolution/debezium-data-{i + 1}.txt"] for i in range(3)},
             ["test__product"], ["id"]),
    # KafkaAWSDMSSyncTableActionITCase.testSchemaEvolution -> runSingleTableSchemaEvolution: pk id
    Scenario("dmsevol", "aws-dms-json",
             {i: [f"aws-dms/table/schemaevolution/aws-dms-data-{i + 1}.txt"] for i in range(3)},
             ["test__product"], ["id"]),
    # KafkaAWSDMSSyncTableActionITCase.testTableFiledValNull: data-4 alone, pk id
    Scenario("dmsnull", "aws-dms-json", {0: ["aws-dms/table/schemaevolution/aws-dms-data-4.txt"]},
             ["test__product"], ["id"]),
    # KafkaCanalSyncTableActionITCase.testSchemaEvolution: partition pt, pk (pt, _id)
    Scenario("canalevol", "canal-json",
             {i: [f"canal/table/schemaevolution/canal-data-{i + 1}.txt"] for i in range(5)},
             ["paimon_sync_table__schema_evolution_1", "paimon_sync_table__schema_evolution_2"], ["pt", "_id"]),
    # KafkaCanalSyncTableActionITCase.testMultipleSchemaEvolutions: pk _id
    Scenario("canalmulti", "canal-json",
             {i: [f"canal/table/schemaevolutionmultiple/canal-data-{i + 1}.txt"] for i in range(2)},
             ["paimon_sync_table__schema_evolution_multiple"], ["_id"]),
    # KafkaCanalSyncTableActionITCase.testCDCOperations: no pk option (pkNames gives _id)
    Scenario("canalevent", "canal-json",
             {0: ["canal/table/event/event-row.txt"], 1: ["canal/table/event/event-insert.txt"],
              2: ["canal/table/event/event-update.txt"], 3: ["canal/table/event/event-delete.txt"]},
             ["paimon_sync_table__schema_evolution_1", "paimon_sync_table__event",
              "paimon_sync_table__schema_evolution_2"]),
    # KafkaMaxwellSyncTableActionITCase.testSchemaEvolution: pk id, no types in the messages
    Scenario("maxevol", "maxwell-json",
             {i: [f"maxwell/table/schemaevolution/maxwell-data-{i + 1}.txt"] for i in range(3)},
             ["test__product"], ["id"]),
    # KafkaMaxwellSyncTableActionITCase.testFieldValNullSyncTable: maxwell-data-4.txt only, pk id
    Scenario("maxnull", "maxwell-json", {0: ["maxwell/table/schemaevolution/maxwell-data-4.txt"]},
             ["test__product"], ["id"]),
    # AliyunJsonRecordParserTest: insert (a full-load row), update in one message, delete; key from schema.primaryKey
    Scenario("aliyunevent", "aliyun-json",
             {0: ["aliyun/table/event/event-insert.txt"], 1: ["aliyun/table/event/event-update-in-one.txt"],
              2: ["aliyun/table/event/event-delete.txt"]},
             ["bigdata_test__sync_test_table"]),
    # KafkaOggSyncTableActionITCase.testCDCOperations: the messages' primary_keys give id
    Scenario("oggevent", "ogg-json",
             {i: [f"ogg/table/event/event-{name}.txt"] for i, name in enumerate(("insert", "update", "delete"))},
             ["OGG__EVENT"]),
    # KafkaOggSyncTableActionITCase.testSchemaEvolution → runSingleTableSchemaEvolution("schemaevolution", ogg): pk id
    Scenario("oggevol", "ogg-json",
             {i: [f"ogg/table/schemaevolution/ogg-data-{i + 1}.txt"] for i in range(3)},
             ["OGG__TBL_TEST"], ["id"]),
]}

# Paimon's row types as its tests state them (column order included), per scenario and step.
_DBZ_STR = [("id", "STRING"), ("name", "STRING"), ("description", "STRING"), ("weight", "STRING")]
_DBZ_INCL = [("id", "INT"), ("name", "STRING"), ("description", "STRING"), ("weight", "DOUBLE")]
_CANAL_4 = [("pt", "INT"), ("_id", "INT"), ("v1", "VARCHAR(20)"), ("v2", "BIGINT"), ("v3", "DECIMAL(8,3)"),
            ("v4", "VARBINARY(10)"), ("v5", "FLOAT")]
ROW_TYPES = {
    ("nullvalue", 0): [("id", "STRING"), ("value", "STRING")],
    ("computed", 0): [("_id", "STRING"), ("_date", "STRING")],  # _year INT NOT NULL: computed, not applicable
    ("include", 0): _DBZ_INCL,
    ("includeevol", 0): _DBZ_INCL,
    ("includeevol", 1): _DBZ_INCL + [("age", "INT")],
    ("includeevol", 2): _DBZ_INCL + [("age", "BIGINT")],
    ("includeevol", 3): _DBZ_INCL + [("age", "BIGINT")],  # int64 → int32 ignored
    **{(tag, i): ([*_DBZ_INCL, ("age", "INT" if i < 2 else "BIGINT")] if i else _DBZ_INCL)
       for tag in ("avroevol", "jsevol") for i in range(4)},
    ("withdelete", 0): _DBZ_STR,
    ("evol", 0): _DBZ_STR,
    ("evol", 1): _DBZ_STR + [("age", "STRING")],
    ("evol", 2): _DBZ_STR + [("age", "STRING"), ("address", "STRING")],
    ("dmsevol", 0): _DBZ_STR,
    ("dmsevol", 1): _DBZ_STR + [("age", "STRING")],
    ("dmsevol", 2): _DBZ_STR + [("age", "STRING"), ("address", "STRING")],
    ("dmsnull", 0): _DBZ_STR,
    ("canalevol", 0): [("pt", "INT"), ("_id", "INT"), ("v1", "VARCHAR(10)")],
    ("canalevol", 1): [("pt", "INT"), ("_id", "INT"), ("v1", "VARCHAR(10)"), ("v2", "INT")],
    ("canalevol", 2): [("pt", "INT"), ("_id", "INT"), ("v1", "VARCHAR(10)"), ("v2", "BIGINT")],
    ("canalevol", 3): _CANAL_4,
    ("canalevol", 4): _CANAL_4[:5] + [("v4", "VARBINARY(20)"), ("v5", "DOUBLE")],
    ("canalmulti", 0): [("_id", "INT"), ("v1", "VARCHAR(10)"), ("v2", "INT"), ("v3", "VARCHAR(10)")],
    ("canalmulti", 1): [("_id", "INT"), ("v1", "VARCHAR(20)"), ("v2", "BIGINT"), ("v3", "VARCHAR(10)"),
                        ("v4", "INT"), ("v5", "DOUBLE"), ("v6", "DECIMAL(5,3)"), ("$% ^,& *(", "VARCHAR(10)")],
    **{("canalevent", i): _CANAL_4 for i in range(4)},
    ("maxevol", 0): _DBZ_STR,
    ("maxevol", 1): _DBZ_STR + [("age", "STRING")],
    ("maxevol", 2): _DBZ_STR + [("age", "STRING"), ("address", "STRING")],
    ("maxnull", 0): _DBZ_STR,
    **{("oggevent", i): _DBZ_STR for i in range(3)},
    ("oggevol", 0): _DBZ_STR,
    ("oggevol", 1): _DBZ_STR + [("age", "STRING")],
    ("oggevol", 2): _DBZ_STR + [("age", "STRING"), ("address", "STRING")],
}


def iceberg_type(paimon_type: str) -> str:
    """The silver column type standing for a Paimon type (see the module docstring)."""
    t = paimon_type.replace(" ", "").upper()
    if t.startswith("VARCHAR") or t == "STRING":
        return "string"
    if t.startswith("VARBINARY") or t == "BYTES":
        return "binary"
    if t.startswith("DECIMAL"):
        return t.lower()
    return {"INT": "int", "BIGINT": "bigint", "FLOAT": "float", "DOUBLE": "double"}[t]


def expected_rows(fname: str, header: str) -> list[tuple]:
    """The ``+I[...]`` rows under the first header line of ``expected/<fname>`` starting with ``header``.

    Header lines start with ``## `` or ``# ---``; a row's fields are split on ``, `` outside
    brackets; ``NULL`` is None.
    """
    rows, current = {}, None
    for line in (EXPECTED / fname).read_text(encoding="utf-8").splitlines():
        if line.startswith("## ") or line.startswith("# ---"):
            current = line
            rows.setdefault(current, [])
        elif line.startswith("+I[") and current is not None:
            rows[current].append(_fields(line[3:-1]))
    for h, r in rows.items():
        if h.startswith(header):
            assert r, f"{fname}: no rows under {h!r}"
            return sorted(r)
    raise AssertionError(f"{fname}: no section {header!r}")


def _fields(text: str) -> tuple:
    out, depth, cur = [], 0, ""
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if depth == 0 and text.startswith(", ", i):
            out.append(cur)
            cur, i = "", i + 2
            continue
        cur += ch
        i += 1
    out.append(cur)
    return tuple(None if v == "NULL" else v for v in out)


def _float32_text(x: float) -> str:
    """Shortest text of a 32-bit float (Java's ``Float.toString`` digits): 9.899999618530273 → 9.9."""
    for digits in range(1, 10):
        candidate = float(f"{x:.{digits}g}")
        if f32(candidate) == x:
            return repr(candidate)
    return repr(x)


def paimon_text(value, spark_type: str) -> Optional[str]:
    """A silver value in the text form of Paimon's ``+I[...]`` rows (None for NULL)."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in bytes(value)) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if spark_type == "float":
        return _float32_text(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


MISSING = "<column missing>"


def as_paimon_rows(snap: Optional[dict], columns: list[str]) -> list[tuple]:
    """Rows of a silver snapshot as Paimon-text tuples in ``columns`` order; a column the table
    lacks shows as ``<column missing>``."""
    if snap is None:
        return []
    types = dict(snap["columns"])
    return sorted(tuple(paimon_text(r[c], types[c]) if c in r else MISSING for c in columns) for r in snap["rows"])


def union_rows(snaps: list[Optional[dict]], columns: list[str]) -> list[tuple]:
    """Union of several silver tables' rows in ``columns`` order; a column a table lacks is NULL
    there (the tables are parts of what Paimon writes into one table)."""
    out = []
    for snap in snaps:
        if snap is None:
            continue
        types = dict(snap["columns"])
        out += [tuple(paimon_text(r[c], types[c]) if c in r else None for c in columns) for r in snap["rows"]]
    return sorted(out)


def columns_of(step_key) -> list[str]:
    return [c for c, _ in ROW_TYPES[step_key]]


def assert_types(snap: Optional[dict], step_key, only: Optional[list[str]] = None) -> None:
    """Silver column types equal Paimon's row type (mapped), as a mapping (order checked separately)."""
    assert snap is not None, f"silver table missing at {step_key}"
    want = {c: iceberg_type(t) for c, t in ROW_TYPES[step_key] if only is None or c in only}
    assert dict(snap["columns"]) == want, step_key


# --------------------------------------------------------------------------------------------
# the run: every scenario on its own topic, the steps as hours 0..4, silver read after each hour


def _snapshot(spark, name: str) -> dict:
    df = spark.table(name)
    cols = [(f.name, f.dataType.simpleString()) for f in df.schema.fields if not f.name.startswith("_cdc_")]
    rows = [{k: v for k, v in r.asDict().items() if not k.startswith("_cdc_")} for r in df.collect()]
    return {"columns": cols, "rows": rows}


@pytest.fixture(scope="module")
def paimon_run(stack, spark):
    """Produce each scenario's files (in Paimon's order) to its topic, one step per hour; run hours 0..4
    (each hour's window narrowed to the topics that have a step in it).

    Returns ``{"path", "topics", "hours": [{"land", "normalize", "error", "silver": {(tag, table): snapshot}}]}``.
    A :class:`SilverError` of an hour is kept in ``error`` (the stages of the next hours still run).
    """
    from cdclake.config import load_pipeline
    from cdclake.land import land
    from cdclake.normalize import normalize
    from cdclake.silver import SilverError, build_silver
    from cdclake.types import quote_ident
    from cdclake.window import Window

    u = uuid.uuid4().hex[:6]
    ns = f"paimon_{u}"
    sources, topics = [], {}
    for sc in SCENARIOS.values():
        topic = f"paimon.{sc.tag}.{u}"
        topics[sc.tag] = topic
        records = []
        for h, files in sorted(sc.steps.items()):
            values = []
            for f in files:
                lines = [None] if f is TOMBSTONE else json_lines(KAFKA / f)
                values += [v if v is None or sc.encode is None else sc.encode(v) for v in lines]
            records += [(0, ms(hour(h)) + 1000 + i, None, v) for i, v in enumerate(values)]
        produce(stack["bootstrap"], topic, records)
        src = {"topic": topic, "format": sc.fmt, "table_prefix": f"{sc.tag}_"}
        if sc.primary_key:
            src["primary_key"] = sc.primary_key
        sources.append({**src, **sc.options})
    path = write_pipeline(f"paimon_{u}", sources, silver={"namespace": ns})
    cfg = load_pipeline(path)
    hours = []
    for h in range(HOURS):
        active = tuple(topics[sc.tag] for sc in SCENARIOS.values() if h in sc.steps)
        w = Window(hour(h), hour(h + 1), topics=active)
        out = {"land": land(spark, cfg, w), "normalize": normalize(spark, cfg, w), "error": None}
        try:
            out["results"] = build_silver(spark, cfg, w)
        except SilverError as exc:
            out["error"] = exc
        existing = {r["tableName"] for r in spark.sql(f"SHOW TABLES IN {cfg.catalog.name}.{quote_ident(ns)}").collect()}
        out["silver"] = {}
        for sc in SCENARIOS.values():
            if h not in sc.steps:
                continue
            for t in sc.tables:
                name = f"{sc.tag}_{t}"
                out["silver"][(sc.tag, t)] = (_snapshot(spark, f"{cfg.catalog.name}.{quote_ident(ns)}.{quote_ident(name)}")
                                              if name in existing else None)
        hours.append(out)
    return {"path": path, "topics": topics, "ns": ns, "hours": hours}


def snap(run, h: int, tag: str, table: Optional[str] = None) -> Optional[dict]:
    return run["hours"][h]["silver"][(tag, table or SCENARIOS[tag].tables[0])]


# --------------------------------------------------------------------------------------------
# Debezium


def test_debezium_message_with_null_value(paimon_run):
    """testMessageWithNullValue: data-1, a null-value Kafka record, data-2 → +I[1, A], +I[2, B] (all STRING)."""
    s = snap(paimon_run, 0, "nullvalue")
    assert_types(s, ("nullvalue", 0))
    assert as_paimon_rows(s, columns_of(("nullvalue", 0))) == expected_rows("debezium-misc.txt", "# --- nullvalue")
    n = paimon_run["hours"][0]["normalize"][paimon_run["topics"]["nullvalue"]]
    assert (n["raw"], n["changes"], n["control"], n["quarantined"]) == (3, 2, 1, 0), n


def test_debezium_computed_column_source_columns(paimon_run):
    """testComputedColumn(debezium): the source columns of +I[101, 2023-03-23, 2023] (_year is Paimon's computed column)."""
    s = snap(paimon_run, 0, "computed")
    assert_types(s, ("computed", 0))
    want = [r[:2] for r in expected_rows("debezium-misc.txt", "# --- computedcolumn")]
    assert as_paimon_rows(s, ["_id", "_date"]) == want


def test_debezium_schema_include_record(paimon_run):
    """testSchemaIncludeRecord: id INT, weight DOUBLE from the Connect schema; +I[101, scooter, ..., 3.140000104904175]."""
    s = snap(paimon_run, 0, "include")
    assert_types(s, ("include", 0))
    assert as_paimon_rows(s, columns_of(("include", 0))) == expected_rows("debezium-misc.txt", "# --- schema include:")


@pytest.mark.parametrize("step", [0, 1, 2, 3], ids=["data-1", "data-2-add-column", "data-3-int32-to-int64",
                                                  "data-4-int64-to-int32-ignored"])
def test_debezium_schema_include_evolution(paimon_run, step):
    """runSingleTableSchemaEvolutionWithSchemaIncludeRecord: after data-1..4, age added as INT, widened to
    BIGINT by data-3 and kept BIGINT when data-4 says int32."""
    s = snap(paimon_run, step, "includeevol")
    assert paimon_run["hours"][step]["error"] is None, paimon_run["hours"][step]["error"]
    assert_types(s, ("includeevol", step))
    want = expected_rows("debezium-misc.txt", f"## after data-{step + 1}")
    assert as_paimon_rows(s, columns_of(("includeevol", step))) == want


@pytest.mark.parametrize("tag", ["avroevol", "jsevol"])
@pytest.mark.parametrize("step", [0, 1, 2, 3], ids=["data-1", "data-2-add-column", "data-3-int32-to-int64",
                                                  "data-4-int64-to-int32-ignored"])
def test_debezium_registry_formats_schema_include_evolution(paimon_run, tag, step):
    """The same evolution in ``debezium-avro`` and ``debezium-jsonschema``: Paimon's rows and types
    after each of data-1..4, as ``debezium-json`` reaches them (each new Connect schema a new
    registry schema id)."""
    s = snap(paimon_run, step, tag)
    assert_types(s, (tag, step))
    want = expected_rows("debezium-misc.txt", f"## after data-{step + 1}")
    assert as_paimon_rows(s, columns_of((tag, step))) == want


def test_debezium_schema_include_int64_to_string_fails(paimon_run):
    """runSingleTableSchemaEvolutionWithSchemaIncludeRecord, data-5: age int64 → string must fail
    ("Cannot convert field age from type BIGINT to STRING"): the error names the table, the column
    and both types; the table keeps its data-4 state; the other tables of that hour are merged."""
    from cdclake.silver import SchemaChangeError, SilverError

    h4 = paimon_run["hours"][4]
    err = h4["error"]
    assert isinstance(err, SilverError) and not isinstance(err, SchemaChangeError), repr(err)
    msg = str(err)
    assert "1 table(s) not merged" in msg, msg
    assert "includeevol_test__product" in msg and "test.product" in msg, msg
    assert "'age'" in msg and "bigint" in msg and "string" in msg, msg
    assert msg.index("bigint") < msg.index("string"), msg  # from bigint to string
    # the failed table is left as after data-4
    s = snap(paimon_run, 4, "includeevol")
    assert_types(s, ("includeevol", 3))
    assert as_paimon_rows(s, columns_of(("includeevol", 3))) == expected_rows("debezium-misc.txt", "## after data-4")
    # the other tables of hour 4 were merged (Canal schema evolution, data-5)
    for t in SCENARIOS["canalevol"].tables:
        assert snap(paimon_run, 4, "canalevol", t)["rows"] != snap(paimon_run, 3, "canalevol", t)["rows"], t


def test_debezium_build_schema_from_delete(paimon_run):
    """testKafkaBuildSchemaWithDelete: a table first seen in a delete (``"schema": null``) gets the
    columns of its before image, all STRING: id, name, description, weight; no rows."""
    s = snap(paimon_run, 0, "withdelete")
    assert_types(s, ("withdelete", 0))
    assert s["rows"] == []


@pytest.mark.parametrize("step", [0, 1, 2], ids=["data-1", "data-2", "data-3"])
def test_debezium_schemaless_schema_evolution(paimon_run, step):
    """runSingleTableSchemaEvolution("schemaevolution", debezium): every column STRING; age, then address
    added; data-3 deletes 101 and updates 105 with a partial ``before`` ({"address": "Shanghai"})."""
    s = snap(paimon_run, step, "evol")
    assert_types(s, ("evol", step))
    want = expected_rows("shared-schemaevolution.debezium-ogg-maxwell-aws-dms.txt", f"## after data-{step + 1}")
    assert as_paimon_rows(s, columns_of(("evol", step))) == want


# --------------------------------------------------------------------------------------------
# AWS DMS


@pytest.mark.parametrize("step", [0, 1, 2], ids=["data-1", "data-2", "data-3"])
def test_aws_dms_schema_evolution(paimon_run, step):
    """runSingleTableSchemaEvolution("schemaevolution", aws-dms): every column STRING; age, then
    address added; data-3 deletes 101, inserts 105 and updates it with ``BI_<col>`` before-image
    columns (``address`` Shanghai → Beijing): the ``BI_`` columns are no columns of the table."""
    s = snap(paimon_run, step, "dmsevol")
    assert paimon_run["hours"][step]["error"] is None, paimon_run["hours"][step]["error"]
    assert_types(s, ("dmsevol", step))
    want = expected_rows("shared-schemaevolution.debezium-ogg-maxwell-aws-dms.txt", f"## after data-{step + 1}")
    assert as_paimon_rows(s, columns_of(("dmsevol", step))) == want


def file_rows(fname: str) -> list[tuple]:
    """Every ``+I[...]`` row of ``expected/<fname>`` (a file with one table state), sorted."""
    lines = (EXPECTED / fname).read_text(encoding="utf-8").splitlines()
    rows = sorted(_fields(line[3:-1]) for line in lines if line.startswith("+I["))
    assert rows, fname
    return rows


def test_aws_dms_table_field_value_null(paimon_run):
    """testTableFiledValNull(aws-dms): data-4 alone, 103's weight a JSON null; Paimon's text
    ``null`` is compared as the SQL NULL silver keeps (see the module docstring)."""
    s = snap(paimon_run, 0, "dmsnull")
    assert_types(s, ("dmsnull", 0))
    stated = file_rows("tablefiledvalnull.maxwell-aws-dms.txt")
    assert [r for r in stated if r[0] == "103"][0][3] == "null"
    want = sorted(tuple(None if v == "null" else v for v in r) for r in stated)
    assert as_paimon_rows(s, columns_of(("dmsnull", 0))) == want
    row = next(r for r in s["rows"] if r["id"] == "103")
    assert row["weight"] is None


# --------------------------------------------------------------------------------------------
# Canal


@pytest.mark.parametrize("step", [0, 1, 2, 3, 4], ids=["data-1", "data-2-add-v2", "data-3-int-to-bigint",
                                                     "data-4-decimal-varbinary-float-varchar20",
                                                     "data-5-varbinary20-float-to-double"])
def test_canal_schema_evolution(paimon_run, step):
    """testSchemaEvolution (canal): ALTER TABLE messages (isDdl) and typed rows of two MySQL tables;
    v2 INT → BIGINT, v1 VARCHAR(10) → (20), v3 NUMERIC(8,3), v4 VARBINARY, v5 FLOAT → DOUBLE.
    Paimon writes both source tables into one table; silver has one per source table, compared as
    their union (their keys are disjoint)."""
    key = ("canalevol", step)
    snaps = [snap(paimon_run, step, "canalevol", t) for t in SCENARIOS["canalevol"].tables]
    for s in snaps:
        assert_types(s, key)
    want = expected_rows("canal-schemaevolution.txt", f"## after data-{step + 1}")
    assert union_rows(snaps, columns_of(key)) == want


@pytest.mark.parametrize("step", [0, 1], ids=["data-1", "data-2-multiple-alter"])
def test_canal_multiple_schema_evolutions(paimon_run, step):
    """testMultipleSchemaEvolutions: one ALTER adds v4 INT, v5 DOUBLE, v6 DECIMAL(5,3) and a column
    named ``$% ^,& *(``, widens v1 to VARCHAR(20) and v2 to BIGINT."""
    key = ("canalmulti", step)
    s = snap(paimon_run, step, "canalmulti")
    assert_types(s, key)
    want = expected_rows("canal-schemaevolutionmultiple.txt", f"## after data-{step + 1}")
    assert as_paimon_rows(s, columns_of(key)) == want


_EVENT_HEADERS = ["## after event-row.txt", "## after event-insert.txt", "## after event-update.txt",
                  "## after event-delete.txt with ignore-delete=false"]


def test_canal_cdc_operations_row_and_insert(paimon_run):
    """testCDCOperations(ignore-delete=false), steps event-row and event-insert: rows compare as the
    union of the silver tables (schema_evolution_1 holds 9, event holds 1, 2, 4); schema_evolution_1
    has Paimon's row type (v4 VARBINARY, v5 FLOAT, v3 DECIMAL(8,3))."""
    cols = columns_of(("canalevent", 0))
    s0 = snap(paimon_run, 0, "canalevent", SCENARIOS["canalevent"].tables[0])
    assert_types(s0, ("canalevent", 0))
    assert union_rows([s0], cols) == expected_rows("canal-event-cdcoperations.txt", _EVENT_HEADERS[0])
    s1 = snap(paimon_run, 1, "canalevent", SCENARIOS["canalevent"].tables[1])
    assert_types(s1, ("canalevent", 1), only=["pt", "_id", "v1"])
    assert union_rows([s0, s1], cols) == expected_rows("canal-event-cdcoperations.txt", _EVENT_HEADERS[1])


def _by_id(rows: list[tuple], ids) -> list[tuple]:
    return sorted(r for r in rows if r[1] in ids)


def test_canal_cdc_operations_update_and_delete(paimon_run):
    """testCDCOperations(ignore-delete=false), steps event-update and event-delete. The update (table
    schema_evolution_2) and the delete (table schema_evolution_1) name other source tables than the
    insert (table event); silver keeps each source table apart, so each table is checked against
    Paimon's row for the keys its own messages carry: schema_evolution_2 holds Paimon's row 2
    ("second"), the delete of key 1 removes nothing from schema_evolution_1 (Paimon's row 9 stays)
    and table event keeps what event-insert wrote."""
    cols = columns_of(("canalevent", 0))
    se1, event, se2 = SCENARIOS["canalevent"].tables
    inserted = expected_rows("canal-event-cdcoperations.txt", _EVENT_HEADERS[1])
    updated = expected_rows("canal-event-cdcoperations.txt", _EVENT_HEADERS[2])
    deleted = expected_rows("canal-event-cdcoperations.txt", _EVENT_HEADERS[3])
    s_se2 = snap(paimon_run, 2, "canalevent", se2)
    assert s_se2 is not None
    assert union_rows([s_se2], cols) == _by_id(updated, {"2"})
    assert union_rows([snap(paimon_run, 2, "canalevent", event)], cols) == _by_id(inserted, {"1", "2", "4"})
    assert union_rows([snap(paimon_run, 2, "canalevent", se1)], cols) == _by_id(updated, {"9"})
    assert union_rows([snap(paimon_run, 3, "canalevent", se1)], cols) == _by_id(deleted, {"9"})
    assert union_rows([snap(paimon_run, 3, "canalevent", se2)], cols) == _by_id(deleted, {"2"})
    assert union_rows([snap(paimon_run, 3, "canalevent", event)], cols) == _by_id(inserted, {"1", "2", "4"})
    # every row Paimon states after each step is in silver
    for h, want in ((2, updated), (3, deleted)):
        have = union_rows([snap(paimon_run, h, "canalevent", t) for t in (se1, event, se2)], cols)
        assert set(want) <= set(have), (h, sorted(set(want) - set(have)))


# --------------------------------------------------------------------------------------------
# Maxwell


@pytest.mark.parametrize("step", [0, 1, 2], ids=["data-1", "data-2", "data-3"])
def test_maxwell_schema_evolution(paimon_run, step):
    """runSingleTableSchemaEvolution("schemaevolution", maxwell): every column STRING (Maxwell sends
    no types; numbers keep their JSON text: 3.14, 0.875, 18); age, then address added; data-3
    inserts 105 and 107, deletes 101 and updates 105 (``old`` holds only the changed address)."""
    s = snap(paimon_run, step, "maxevol")
    assert_types(s, ("maxevol", step))
    want = expected_rows("shared-schemaevolution.debezium-ogg-maxwell-aws-dms.txt", f"## after data-{step + 1}")
    assert as_paimon_rows(s, columns_of(("maxevol", step))) == want


def test_maxwell_field_value_null(paimon_run):
    """testTableFiledValNull(maxwell): data-4 alone, weight JSON null for 103; all STRING. Paimon's
    rows, with its text ``null`` for that JSON null read as NULL here (see the module docstring)."""
    s = snap(paimon_run, 0, "maxnull")
    assert_types(s, ("maxnull", 0))
    lines = (EXPECTED / "tablefiledvalnull.maxwell-aws-dms.txt").read_text(encoding="utf-8").splitlines()
    paimon = sorted(_fields(line[3:-1]) for line in lines if line.startswith("+I["))
    assert len(paimon) == 2 and paimon[0][3] == "null"
    want = [tuple(None if v == "null" else v for v in row) for row in paimon]
    assert as_paimon_rows(s, columns_of(("maxnull", 0))) == want


def test_maxwell_vectors_as_maxwell_ships_them(spark, paimon_run):
    """Paimon's Maxwell files are Maxwell's default output: no row carries ``position``
    (``output_binlog_position`` is off by default). Read with no option set, none is quarantined
    and each change in bronze has the empty position, ordered by its Kafka partition and offset."""
    from pyspark.sql import functions as F

    from cdclake.catalog import qualified
    from cdclake.config import load_pipeline
    from cdclake.lake import BRONZE_TABLE

    files = [f for sc in ("maxevol", "maxnull") for fs in SCENARIOS[sc].steps.values() for f in fs]
    rows = [json.loads(line) for f in files for line in json_lines(KAFKA / f)]
    assert len(rows) == 10 and not [r for r in rows if "position" in r]
    assert all(not SCENARIOS[sc].options for sc in ("maxevol", "maxnull"))
    bronze = qualified(load_pipeline(paimon_run["path"]), BRONZE_TABLE)
    for sc in ("maxevol", "maxnull"):
        changes = (spark.table(bronze).where(F.col("kafka_topic") == paimon_run["topics"][sc])
                   .select("op", "source_position").collect())
        assert len(changes) == sum(len(json_lines(KAFKA / f)) for fs in SCENARIOS[sc].steps.values() for f in fs)
        assert {len(r["source_position"]) for r in changes} == {0}, sc
        for h in SCENARIOS[sc].steps:
            assert paimon_run["hours"][h]["normalize"][paimon_run["topics"][sc]]["quarantined"] == 0, (sc, h)


# --------------------------------------------------------------------------------------------
# OGG


@pytest.mark.parametrize("step", [0, 1, 2], ids=["event-insert", "event-update", "event-delete"])
def test_ogg_cdc_operations(paimon_run, step):
    """testCDCOperations (ogg): inserts of 101, 102, 103; 103's weight updated to 8.1; 103
    deleted. Every column STRING (the messages carry no types); the key from ``primary_keys``."""
    s = snap(paimon_run, step, "oggevent")
    assert_types(s, ("oggevent", step))
    name = ("insert", "update", "delete")[step]
    want = expected_rows("ogg-event-cdcoperations.txt", f"## after event-{name}.txt")
    assert as_paimon_rows(s, columns_of(("oggevent", step))) == want


@pytest.mark.parametrize("step", [0, 1, 2], ids=["data-1", "data-2", "data-3"])
def test_ogg_schemaless_schema_evolution(paimon_run, step):
    """runSingleTableSchemaEvolution("schemaevolution", ogg): every column STRING; age, then address
    added; data-3 arrives out of trail order (pos 147, 158, 152, 149): the delete of 101 and the
    update of 105 (Shanghai → Beijing) apply by ``pos``."""
    s = snap(paimon_run, step, "oggevol")
    assert_types(s, ("oggevol", step))
    want = expected_rows("shared-schemaevolution.debezium-ogg-maxwell-aws-dms.txt", f"## after data-{step + 1}")
    assert as_paimon_rows(s, columns_of(("oggevol", step))) == want


def test_ogg_positions_are_the_trail_positions(spark, paimon_run):
    """Bronze keeps each OGG change's ``pos`` as its source position, e.g. 158 for the delete of 101."""
    from cdclake.catalog import qualified
    from cdclake.config import load_pipeline
    from cdclake.lake import BRONZE_TABLE
    from pyspark.sql import functions as F

    bronze = qualified(load_pipeline(paimon_run["path"]), BRONZE_TABLE)
    rows = (spark.table(bronze).where(F.col("kafka_topic") == paimon_run["topics"]["oggevol"])
            .select("op", "source_position", "kafka_offset").orderBy("kafka_offset").collect())
    assert [(r["op"], [int(x) for x in r["source_position"]]) for r in rows] == [
        ("insert", [143]), ("insert", [144]), ("insert", [145]), ("insert", [146]), ("insert", [147]),
        ("delete", [158]), ("update", [152]), ("insert", [149])]


# --------------------------------------------------------------------------------------------
# column order, order of application, accounting

_ORDER_CASES = [(tag, step, t) for (tag, step) in ROW_TYPES if tag != "canalevent" for t in SCENARIOS[tag].tables] + [
    ("canalevent", 0, "paimon_sync_table__schema_evolution_1"),
    ("canalevent", 1, "paimon_sync_table__event"),
    ("canalevent", 2, "paimon_sync_table__schema_evolution_2"),
]


@pytest.mark.parametrize("tag,step,table", _ORDER_CASES, ids=[f"{a}-{b}-{c}" for a, b, c in _ORDER_CASES])
def test_column_order(paimon_run, tag, step, table):
    """Silver columns in Paimon's row-type order: the source's field order (Connect schema / JSON
    image / mysqlType order), columns added later appended in the order they appear."""
    s = snap(paimon_run, step, tag, table)
    assert s is not None
    names = [c for c, _ in s["columns"]]
    want = [c for c in columns_of((tag, step)) if c in names]
    assert names == want, f"{tag} step {step} {table}: silver order {names}, Paimon order {want}"


def test_source_position_order_equals_arrival_order(spark, paimon_run):
    """On these inputs, ordering each key's changes by source position (Kafka offset breaking ties)
    gives Paimon's arrival order, so the states above compare like for like."""
    from cdclake.catalog import qualified
    from cdclake.lake import BRONZE_TABLE
    from cdclake.config import load_pipeline
    from pyspark.sql import functions as F

    topics = list(paimon_run["topics"].values())
    bronze = qualified(load_pipeline(paimon_run["path"]), BRONZE_TABLE)
    rows = (spark.table(bronze).where(F.col("kafka_topic").isin(topics))
            .select("kafka_topic", "source_table", "op", "before", "after", "primary_key", "source_position",
                    "kafka_partition", "kafka_offset", "row_in_record").collect())
    keyed: dict[tuple, list] = {}
    for r in rows:
        img = r["before"] if r["op"] == "delete" else r["after"]
        key = tuple((img or {}).get(k) for k in r["primary_key"])
        keyed.setdefault((r["kafka_topic"], r["source_table"], key), []).append(
            (tuple(int(x) for x in r["source_position"]), r["kafka_partition"], r["kafka_offset"], r["row_in_record"]))
    assert keyed
    for k, changes in keyed.items():
        by_position = sorted(changes)
        by_arrival = sorted(changes, key=lambda c: (c[1], c[2], c[3]))
        assert by_position == by_arrival, k


def test_every_record_accounted_and_only_the_int64_to_string_hour_fails(paimon_run):
    """No record is quarantined; every landed record is a change or a control event (DDL, tombstone);
    only hour 4 (debezium-data-5.txt) fails silver."""
    for h, out in enumerate(paimon_run["hours"]):
        for tag, topic in paimon_run["topics"].items():
            if h not in SCENARIOS[tag].steps:
                continue
            n = out["normalize"][topic]
            assert n["quarantined"] == 0, (h, tag, n)
            assert n["raw"] == out["land"][topic] > 0 and n["changes"] > 0, (h, tag, n)
        if h < 4:
            assert out["error"] is None, (h, out["error"])
    assert paimon_run["hours"][4]["error"] is not None


# --------------------------------------------------------------------------------------------
# aliyun-json (Alibaba Cloud DataWorks)

#: The silver types of the aliyun messages' ``schema.dataColumn`` (Paimon's test states none; a
#: DataWorks ``DATE`` is Paimon's ``TIMESTAMP(3)``, a timestamp without a zone).
ALIYUN_TYPES = [("id", "bigint"), ("val", "double"), ("name", "string"), ("create_time", "timestamp_ntz")]


@pytest.mark.parametrize("step, rows", [
    (0, [("2", "1.1", "a", "2024-11-15 08:58:34")]),   # INSERT (sequenceId -1: a full-load row)
    (1, [("2", "2.2", "a", "2024-11-15 08:58:34")]),   # UPDATE_AFTER with before and after
    (2, [("2", "2.2", "a", "2024-11-15 08:58:34")]),   # DELETE of id 1, which was never inserted
])
def test_aliyun_events(paimon_run, step, rows):
    """AliyunJsonRecordParserTest's messages, one per hour: each gives exactly one change (Paimon:
    one record each) of the stated kind, key [id], database bigdata_test, table sync_test_table."""
    s = snap(paimon_run, step, "aliyunevent")
    assert s is not None and s["columns"] == ALIYUN_TYPES
    assert as_paimon_rows(s, [c for c, _ in ALIYUN_TYPES]) == rows
    n = paimon_run["hours"][step]["normalize"][paimon_run["topics"]["aliyunevent"]]
    assert (n["raw"], n["changes"], n["control"], n["quarantined"]) == (1, 1, 0, 0), n


def test_aliyun_event_kinds_in_bronze(paimon_run, spark):
    """Bronze holds Paimon's stated row kinds (INSERT, UPDATE_AFTER, DELETE as insert, update,
    delete), the key [id] and the names; the full-load insert sorts before the update."""
    from pyspark.sql import functions as F

    from cdclake.config import load_pipeline
    from cdclake.catalog import qualified
    from cdclake.lake import BRONZE_TABLE

    bronze = qualified(load_pipeline(paimon_run["path"]), BRONZE_TABLE)
    rows = (spark.table(bronze).where(F.col("kafka_topic") == paimon_run["topics"]["aliyunevent"])
            .orderBy("kafka_offset").collect())
    assert [(r["op"], r["source_database"], r["source_table"], list(r["primary_key"])) for r in rows] == [
        (op, "bigdata_test", "sync_test_table", ["id"]) for op in ("insert", "update", "delete")]
    assert [[int(x) for x in r["source_position"]] for r in rows] == [
        [0], [1731663842292000001], [1731663842292000000]]
