"""Tests of the ``canal-json`` parser.

Vectors: the Canal JSON samples of "Alibaba Cloud DTS: data formats of Kafka messages (Canal
JSON)" (verbatim in ``samples/alibaba-dts/``), Apache Flink's flink-json ``canal-data.txt``
(final state derived from Flink's ``CanalJsonSerDeSchemaTest`` changelog) and Apache Paimon's
Kafka CDC test resources (``paimon/kafka/canal/``), the last two read in place from the shared
conformance directory.
"""
from __future__ import annotations

import functools
import json
import pickle
import re

import helpers
import pytest
from conftest import CONFORMANCE, f32, flink_expected, json_lines
from helpers import krec, sample
from reference_model import apply_changes, changes

from cdclake.formats.canal import mysql_type
from cdclake.formats import get_parser
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, parse_all

FLINK = CONFORMANCE / "flink"
PAIMON_CANAL = CONFORMANCE / "paimon" / "kafka" / "canal" / "table"


parse = functools.partial(helpers.parse, "canal-json")


# --- Alibaba Cloud DTS: Canal JSON samples (verbatim) --------------------------------------------

# Canal JSON / Examples of data updated / Change tracking instances that are created before March 20, 2022
DTS_DELETE_BEFORE_2022 = sample("alibaba-dts", "canal-delete-before-2022.json")
# Canal JSON / Examples of data updated / Change tracking instances that are created or restarted as
# of March 20, 2022
DTS_DELETE = sample("alibaba-dts", "canal-delete.json")
# Canal JSON / Example of a DDL operation. The document annotates each line of this sample after
# the value; the annotations are removed below before parsing.
DTS_DDL_ANNOTATED = sample("alibaba-dts", "canal-ddl.annotated.txt")
DTS_DDL = re.sub(r"^(\s*\"\w+\": (?:\"[^\"]*\"|\w+),?)\s.*$", r"\1", DTS_DDL_ANNOTATED, flags=re.M)


def test_dts_delete():
    (c,) = parse(DTS_DELETE)
    assert (c.source_format, c.source_database, c.source_schema, c.source_table) == (
        "canal-json", "dbname", None, "tablename")
    assert c.op == "delete" and c.after is None
    assert c.before == {"id": "500000287", "shipping_type": None}
    assert c.primary_key == ["id"]
    assert c.column_types == {"id": "bigint", "shipping_type": "string"}
    assert c.source_position == (1600161894000, 58, 0) and c.source_ts_ms == 1600161894000
    assert c.row_in_record == 0 and c.tx_id is None


def test_dts_delete_before_2022_rows_in_old():
    """Rows come from ``old``; this sample's row lacks the key, so a Kafka key must supply it."""
    with pytest.raises(ParseError) as err:
        parse(DTS_DELETE_BEFORE_2022)
    assert err.value.format == "canal-json" and err.value.field == "old[0]"
    assert "delete carries no value for key column(s) id" in str(err.value) and "Kafka keys" in str(err.value)
    (c,) = parse(DTS_DELETE_BEFORE_2022, key={"id": "500000287"})
    assert c.op == "delete" and c.after is None
    assert c.before == {"shipping_type": "aaa", "id": "500000287"}
    assert c.source_position == (1600161894000, 58, 0)
    row_with_key = json.loads(DTS_DELETE_BEFORE_2022)
    row_with_key["old"][0]["id"] = "7"
    assert parse(row_with_key)[0].before == {"shipping_type": "aaa", "id": "7"}


def test_dts_ddl():
    result = parse(DTS_DDL)
    assert result == ControlRecord("ddl", "canal-json", "dbname", None, "tablename", "eg: create xxx")


# --- Apache Flink flink-json vectors --------------------------------------------------------------

def test_flink_canal_final_state():
    parser = get_parser("canal-json", {})
    lines = (FLINK / "canal-data.txt").read_text(encoding="utf-8").splitlines()
    pairs = changes(parse_all(parser, [krec(line, offset=i) for i, line in enumerate(lines)]))
    assert len(pairs) == 20  # one change per row of data: 11 inserts, 6 updates, 3 deletes
    assert [c.op for _, c in pairs].count("update") == 6
    state = apply_changes(pairs)
    (table,) = state.values()
    got = {int(r["id"]): (r["name"], r["description"], f32(r["weight"])) for r in table.values()}
    assert got == flink_expected("canal-maxwell.final-state.derived.csv")
    assert list(state) == ["inventory.products2"]


def test_flink_canal_multi_row_update():
    line = (FLINK / "canal-data.txt").read_text(encoding="utf-8").splitlines()[8]
    first, second = parse(line)
    assert [c.row_in_record for c in (first, second)] == [0, 1]
    assert first.source_position == (1589373753000, 11, 0) and second.source_position == (1589373753000, 11, 1)
    assert first.before == {"id": "101", "name": "scooter", "description": "Small 2-wheel scooter", "weight": "3.14"}
    assert first.after["weight"] == "5.17" and second.before["weight"] == "8.1"
    assert first.column_types == {"id": "int", "name": "string", "description": "string", "weight": "float"}


# --- Apache Paimon Kafka CDC vectors -------------------------------------------------------------

def test_paimon_canal_files_parse():
    files = sorted(PAIMON_CANAL.rglob("*.txt"))
    assert files
    parser = get_parser("canal-json")
    kinds = {"ddl": 0, "rows": 0}
    for path in files:
        for line in json_lines(path):
            result = parser.parse(krec(line))
            if json.loads(line)["isDdl"]:
                assert isinstance(result, ControlRecord) and result.kind == "ddl" and "ALTER TABLE" in result.detail
                kinds["ddl"] += 1
            else:
                assert isinstance(result, list) and result and all(isinstance(c, ChangeRecord) for c in result), path
                kinds["rows"] += len(result)
    assert kinds["ddl"] > 0 and kinds["rows"] > 0


def data_lines(path) -> list[str]:
    """The row-change messages of a vector file (DDL messages left out)."""
    return [line for line in json_lines(path) if not json.loads(line)["isDdl"]]


def test_paimon_canal_types_and_values():
    (c,) = parse(json_lines(PAIMON_CANAL / "event" / "event-row.txt")[0])
    assert c.column_types == {"pt": "int", "_id": "int", "v1": "string", "v2": "bigint", "v3": "decimal(8,3)",
                              "v4": "binary", "v5": "float"}
    assert c.after == {"pt": "1", "_id": "9", "v1": "nine", "v2": "90000000000", "v3": "99999.999",
                       "v4": "bmluZS5iaW4=", "v5": "9.9"}
    assert c.primary_key == ["_id"]
    (c,) = parse(data_lines(PAIMON_CANAL / "schemaevolutionmultiple" / "canal-data-2.txt")[0])
    assert c.after["$% ^,& *("] == "test_2" and c.after["v6"] == "20.002" and c.after["v5"] == "20.5"
    (c,) = parse(json_lines(PAIMON_CANAL / "event" / "event-update.txt")[0])
    assert c.before == {"pt": "1", "_id": "2", "v1": "two", "v2": None}
    assert c.after == {"pt": "1", "_id": "2", "v1": "second", "v2": None}
    (c,) = parse(data_lines(PAIMON_CANAL / "schemaevolution" / "canal-data-5.txt")[1])
    assert c.before["v4"] is None and c.before["v5"] is None
    assert c.after["v4"] == "Zm91ci5iaW4ubG9uZw==" and c.after["v5"] == "4.00000000004"


# --- types and values -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, ctype", [
    ("tinyint(4)", "smallint"), ("tinyint(3) unsigned", "smallint"), ("smallint(6)", "smallint"),
    ("smallint unsigned", "int"), ("mediumint(9)", "int"), ("INTEGER", "int"), ("int(11)", "int"),
    ("int(10) unsigned", "bigint"), ("bigint(20)", "bigint"), ("BIGINT(20) UNSIGNED ZEROFILL", "decimal(20,0)"),
    ("FLOAT", "float"), ("double", "double"), ("real", "double"), ("double precision", "double"),
    ("decimal(10,2)", "decimal(10,2)"), ("NUMERIC(8,3)", "decimal(8,3)"), ("decimal", "decimal(10,0)"),
    ("decimal(12)", "decimal(12,0)"), ("decimal(65,30)", "decimal(38,30)"),
    ("bit(1)", "boolean"), ("bit", "boolean"), ("bit(8)", "bigint"),
    ("char(3)", "string"), ("VARCHAR(255)", "string"), ("text", "string"), ("longtext", "string"),
    ("enum('a','b)')", "string"), ("set('x','y')", "string"), ("json", "string"),
    ("date", "date"), ("datetime(6)", "timestamp_ntz"), ("timestamp", "timestamp"), ("time(3)", "string"),
    ("year(4)", "string"), ("binary(16)", "binary"), ("VARBINARY(10)", "binary"), ("blob", "binary"),
    ("longblob", "binary"), ("geometry", "string"), (None, "string"),
])
def test_mysql_types(text, ctype):
    assert mysql_type(text) == ctype


def message(mysql_types: dict, row: dict, **extra) -> dict:
    return {"data": [row], "database": "db", "es": 1000, "id": 1, "isDdl": False, "mysqlType": mysql_types,
            "old": None, "pkNames": ["id"], "sql": "", "table": "t", "ts": 1001, "type": "INSERT", **extra}


def test_values_in_canonical_text():
    types = {"id": "bigint(20) unsigned", "flag": "bit(1)", "bits": "bit(8)", "dt": "datetime(3)", "zero": "datetime",
             "d": "date", "zd": "date", "bin": "varbinary(4)", "price": "decimal(5,3)", "f": "float", "tm": "time",
             "y": "year"}
    row = {"id": "18446744073709551615", "flag": "1", "bits": "255", "dt": "2020-01-01 12:00:00.5",
           "zero": "0000-00-00 00:00:00", "d": "2020-02-29", "zd": "0000-00-00", "bin": "\u00ff\u0000",
           "price": "20.5", "f": "1e3", "tm": "12:34:56", "y": "2020"}
    (c,) = parse(message(types, row))
    assert c.after == {"id": "18446744073709551615", "flag": "true", "bits": "255",
                       "dt": "2020-01-01 12:00:00.500000", "zero": None, "d": "2020-02-29", "zd": None,
                       "bin": "/wA=", "price": "20.500", "f": "1000.0", "tm": "12:34:56", "y": "2020"}
    assert c.column_types["id"] == "decimal(20,0)" and c.column_types["dt"] == "timestamp_ntz"


def test_configured_types_fill_gaps():
    msg = message({"id": "int"}, {"id": "1", "w": "2.5", "extra": "x"})
    (c,) = parse(msg, column_types={"id": "string", "db.t": {"w": "double"}})
    assert c.column_types == {"id": "int", "w": "double"}
    assert c.after == {"id": "1", "w": "2.5", "extra": "x"}


def test_truncate_and_other_ddl():
    truncate = {"data": None, "database": "db", "es": 5, "id": 2, "isDdl": True, "sql": "TRUNCATE TABLE t",
                "table": "t", "type": "TRUNCATE"}
    (c,) = parse(truncate)
    assert c.op == "truncate" and c.before is None and c.after is None and c.primary_key == []
    assert c.source_position == (5, 2, 0)
    alter = {"data": None, "database": "db", "es": 5, "id": 3, "isDdl": True, "sql": "ALTER TABLE t ADD c INT",
             "table": "t", "type": "ALTER"}
    assert parse(alter) == ControlRecord("ddl", "canal-json", "db", None, "t", "ALTER TABLE t ADD c INT")
    assert parse({**alter, "table": ""}).source_table is None


def test_init_rows_are_snapshot_reads_before_every_change():
    """``INIT`` (initial load, as Alibaba Cloud DTS writes it; Apache Flink reads it as an insert
    since FLINK-32862, apache/flink#23207): a ``snapshot`` change per row of ``data`` at position
    ``(0, 0, row)``, before every binlog change, so that a load row never overrides a later change
    of its key, whatever the arrival order."""
    init = message({"id": "int", "v": "varchar(8)"}, {"id": "1", "v": "load"}, type="INIT", es=1700000000000, id=0)
    init["data"].append({"id": "2", "v": "load2"})
    rows = parse(init)
    assert [c.op for c in rows] == ["snapshot", "snapshot"]
    assert [c.source_position for c in rows] == [(0, 0, 0), (0, 0, 1)]
    assert [c.row_in_record for c in rows] == [0, 1]
    assert rows[0].before is None and rows[0].after == {"id": "1", "v": "load"}
    assert rows[0].source_ts_ms == 1700000000000 and rows[0].primary_key == ["id"]
    assert parse({**init, "type": "init"}) == rows
    (no_es,) = parse({k: v for k, v in message({"id": "int"}, {"id": "3"}, type="INIT").items() if k != "es"})
    assert no_es.op == "snapshot" and no_es.source_ts_ms is None and no_es.source_position == (0, 0, 0)
    # an update replicated after the load (es 1000) sorts after it even when it arrives first
    (update,) = parse(message({"id": "int", "v": "varchar(8)"}, {"id": "1", "v": "new"}, type="UPDATE",
                              old=[{"v": "load"}]))
    assert tuple(update.source_position) > tuple(rows[0].source_position)
    state = apply_changes([(KafkaRecord("t", 0, 0, 0, None, b"u"), update),
                           (KafkaRecord("t", 0, 1, 0, None, b"i"), rows[0])])
    assert [row["v"] for table in state.values() for row in table.values()] == ["new"]
    with pytest.raises(ParseError) as err:
        parse({**init, "es": "x"})
    assert err.value.field == "es"
    assert parse({**init, "isDdl": True}).kind == "ddl"


def test_tombstone():
    assert get_parser("canal-json").parse(KafkaRecord("t", 0, 0, 0, None, None)).kind == "tombstone"


# --- primary keys ---------------------------------------------------------------------------------

def test_primary_key_resolution():
    msg = message({"id": "int", "k": "int"}, {"id": "1", "k": "2"})
    assert parse(msg)[0].primary_key == ["id"]
    assert parse(msg, primary_key=["k"])[0].primary_key == ["k"]
    assert parse(msg, primary_keys={"db.t": ["k", "id"]})[0].primary_key == ["k", "id"]
    assert parse(msg, primary_keys={"other": ["k"]})[0].primary_key == ["id"]
    no_pk = {**msg, "pkNames": None}
    assert parse(no_pk, key={"k": "2"})[0].primary_key == ["k"]
    with pytest.raises(ParseError) as err:
        parse(no_pk)
    assert str(err.value) == ("canal-json: field 'primary_key': no primary key: "
                              "set primary_key for the source or send Kafka keys")


# --- errors ---------------------------------------------------------------------------------------

BASE = json.loads(DTS_DELETE)


@pytest.mark.parametrize("value, field, words", [
    ({**BASE, "type": "UPSERT"}, "type", "unknown operation type 'UPSERT'"),
    ({k: v for k, v in BASE.items() if k != "type"}, "type", "missing operation type"),
    ({k: v for k, v in BASE.items() if k != "table"}, "table", "missing table"),
    ({**BASE, "data": {"id": "1"}}, "data", "expected a list of rows"),
    ({**BASE, "type": "INSERT", "data": None}, "data", "expected a list of rows"),
    ({**BASE, "data": ["x"]}, "data[0]", "not an object"),
    ({**BASE, "type": "UPDATE", "old": {"a": 1}}, "old", "expected a list"),
    ({k: v for k, v in BASE.items() if k != "es"}, "es", "not a non-negative integer"),
    ({**BASE, "data": [{"id": "abc"}]}, "data[0].id", "cannot read 'abc'"),
    (DTS_DELETE[:80], "value", "not valid JSON"),
])
def test_errors_name_format_and_field(value, field, words):
    with pytest.raises(ParseError) as err:
        parse(value)
    assert err.value.format == "canal-json" and err.value.field == field
    assert str(err.value).startswith(f"canal-json: field '{field}': ") and words in str(err.value)


def test_parser_is_picklable():
    parser = get_parser("canal-json", {"primary_key": ["id"]})
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.parse(krec(DTS_DELETE)) == parser.parse(krec(DTS_DELETE))
