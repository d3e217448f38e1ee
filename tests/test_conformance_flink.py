"""Apache Flink's flink-json test vectors through land, normalize and silver, against the stated final states.

Source: Apache Flink ``flink-formats/flink-json/src/test/resources/`` (read in place from
``shared/conformance/flink``) and the final states derived from the changelogs of Flink's
``DebeziumJsonSerDeSchemaTest`` and ``CanalJsonSerDeSchemaTest``.
"""
from __future__ import annotations

import pytest
from conftest import CONFORMANCE, f32, flink_expected, json_lines, produce, write_pipeline
from pipeline import hour, ms, run_window, silver_rows

FLINK = CONFORMANCE / "flink"
DEBEZIUM_FILES = {
    "mysql_incl": "debezium-data-schema-include.txt",
    "mysql_excl": "debezium-data-schema-exclude.txt",
    "pg_incl": "debezium-postgres-data-schema-include.txt",
    "pg_excl": "debezium-postgres-data-schema-exclude.txt",
}






def as_state(rows: list[dict]) -> dict[int, tuple]:
    return {int(r["id"]): (r["name"], r["description"], f32(r["weight"])) for r in rows}


@pytest.fixture(scope="module")
def flink_run(stack, spark):
    """Produce every Flink file to its own topic inside hour 0 and run the stages once."""
    import uuid

    u = uuid.uuid4().hex[:6]
    sources, topics = [], {}
    for tag, fname in DEBEZIUM_FILES.items():
        topic = f"flink.{tag}.{u}"
        topics[tag] = topic
        lines = json_lines(FLINK / fname)
        produce(stack["bootstrap"], topic, [(0, ms(hour(0)) + 1000 + i, None, v) for i, v in enumerate(lines)])
        sources.append({"topic": topic, "format": "debezium-json", "primary_key": ["id"], "table_prefix": f"{tag}_"})
    topics["canal"] = f"flink.canal.{u}"
    produce(stack["bootstrap"], topics["canal"],
            [(0, ms(hour(0)) + 1000 + i, None, v) for i, v in enumerate(json_lines(FLINK / "canal-data.txt"))])
    sources.append({"topic": topics["canal"], "format": "canal-json", "table_prefix": "canal_"})
    path = write_pipeline(f"flink_{u}", sources, silver={"namespace": f"flink_{u}"})
    result = run_window(spark, path, 0, 1, gates=True)
    return path, topics, result


@pytest.mark.parametrize("tag,table", [("mysql_incl", "mysql_incl_inventory__products"),
                                       ("mysql_excl", "mysql_excl_inventory__products"),
                                       ("pg_incl", "pg_incl_postgres__inventory__products"),
                                       ("pg_excl", "pg_excl_postgres__inventory__products")])
def test_debezium_final_state(spark, flink_run, tag, table):
    path, _, _ = flink_run
    assert as_state(silver_rows(spark, path, table)) == flink_expected("debezium.final-state.derived.csv")


def test_canal_final_state(spark, flink_run):
    path, _, _ = flink_run
    assert as_state(silver_rows(spark, path, "canal_inventory__products2")) == flink_expected("canal-maxwell.final-state.derived.csv")


def test_typed_columns_from_schema(spark, flink_run):
    """The schema envelope types silver columns (its weight is a double, id int32); without it they stay strings."""
    path, _, _ = flink_run
    from cdclake.config import load_pipeline

    ns = load_pipeline(path).silver.namespace
    incl = dict(spark.table(f"lake.{ns}.mysql_incl_inventory__products").dtypes)
    excl = dict(spark.table(f"lake.{ns}.mysql_excl_inventory__products").dtypes)
    canal = dict(spark.table(f"lake.{ns}.canal_inventory__products2").dtypes)
    assert (incl["id"], incl["weight"], incl["name"]) == ("int", "double", "string")
    assert excl["weight"] == "string"
    assert (canal["id"], canal["weight"]) == ("int", "float")


def test_counts_balance_and_gates_pass(flink_run):
    _, topics, result = flink_run
    for tag, topic in topics.items():
        n = result["normalize"][topic]
        assert n["quarantined"] == 0, (tag, n)
        assert n["raw"] == result["land"][topic] > 0
    assert set(result["gates"]) == {"land", "normalize", "silver"}


def test_replica_identity_delete_without_key_is_quarantined(stack, spark, unique):
    """Flink's replica-identity file: updates apply from ``after``; the key-less delete is quarantined, not dropped."""
    topic = f"flink.replica.{unique}"
    lines = json_lines(FLINK / "debezium-postgres-data-replica-identity.txt")
    produce(stack["bootstrap"], topic, [(0, ms(hour(0)) + i, None, v) for i, v in enumerate(lines)])
    path = write_pipeline(f"replica_{unique}", [{"topic": topic, "format": "debezium-json", "primary_key": ["id"]}],
                          silver={"namespace": f"replica_{unique}"})
    result = run_window(spark, path, 0, 1)
    assert result["normalize"][topic]["quarantined"] == 1
    q = spark.table("lake.bronze.quarantine").where(f"kafka_topic = '{topic}'").collect()
    assert "debezium-json" in q[0]["reason"] and q[0]["value"] is not None
    state = as_state(silver_rows(spark, path, "postgres__inventory__products"))
    assert 111 in state  # its delete could not be keyed, so the row stays (and the record waits in quarantine)
    assert state[110][0:2] == ("jacket", "new water resistent white wind breaker")
