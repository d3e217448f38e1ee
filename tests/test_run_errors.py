"""Errors that are not a property of one record's bytes fail the run: nothing is quarantined.

A schema registry that cannot be reached, a timeout or an error of the runtime (``OSError``,
``MemoryError``, ``ImportError``) while a record is read stops normalize with one line naming the
service (:class:`cdclake.errors.RunError`); the quarantine stays empty, and a rerun once the
service answers applies the hour. A parser's own bug (any other exception) still quarantines
just that record. Vectors: Apache Flink's Debezium MySQL events (``debezium-data-schema-include.txt``,
read in place from ``shared/conformance/flink``) written as Confluent's AvroConverter writes them.
"""
from __future__ import annotations

import json

import pytest
from conftest import CONFORMANCE, f32, flink_expected, json_lines, produce, write_pipeline
from helpers import krec
from pipeline import hour, ms, silver_rows

from cdclake.config import load_pipeline
from cdclake.errors import RunError, SchemaRegistryUnavailable, task_run_error
from cdclake.formats import get_parser
from cdclake.normalize.rows import classify_records, fast_rows
from cdclake.sim.registry import Registry
from cdclake.sim.render_debezium_avro import AvroWriter
from cdclake.window import Window

FMT = "debezium-avro"
LINES = json_lines(CONFORMANCE / "flink" / "debezium-data-schema-include.txt")


def _avro_values(url: str) -> list[bytes]:
    writer = AvroWriter(url)
    return [writer.write("dbserver1.inventory.products-value", json.loads(line)) for line in LINES]


def _closed_registry_parser(values_url: str):
    p = get_parser(FMT, {"schema_registry": {"url": values_url}, "primary_key": ["id"]})
    p._registry_conf["max.retries"] = 0  # the client's own retries only make the test slow
    return p


def _items(values: list[bytes]):
    return [(("t", 0, i, 0, None), krec(v, offset=i, topic="t")) for i, v in enumerate(values)]


def test_an_unreachable_registry_raises_instead_of_quarantining():
    reg = Registry()
    values = _avro_values(reg.url)
    url = reg.url
    reg.close()
    p = _closed_registry_parser(url)
    with pytest.raises(SchemaRegistryUnavailable) as info:
        list(classify_records(p, _items(values)))
    text = str(info.value)
    assert url in text and "t[0]@0" in text and "sources[].options.schema_registry.url" in text, text
    assert "\n" not in text
    with pytest.raises(SchemaRegistryUnavailable):  # the columnar fast path gives way the same way
        fast_rows(p, _items(values), [])


class _Failing:
    """A parser whose every record meets ``exc``."""

    format_name = "debezium-json"
    FAST_PATH = False

    def __init__(self, exc: BaseException):
        self.exc = exc

    def parse(self, record):
        raise self.exc


@pytest.mark.parametrize("exc", [ConnectionRefusedError(111, "Connection refused"), TimeoutError("timed out"),
                                 MemoryError(), ModuleNotFoundError("No module named 'fastavro'")])
def test_errors_of_the_runtime_stop_the_run(exc):
    with pytest.raises(RunError) as info:
        list(classify_records(_Failing(exc), _items([b"{}"])))
    assert type(exc).__name__ in str(info.value) and "t[0]@0" in str(info.value)


@pytest.mark.parametrize("exc", [KeyError("x"), TypeError("y"), RecursionError("deep"), UnicodeDecodeError(
    "utf-8", b"\xff", 0, 1, "invalid start byte")])
def test_a_parser_bug_still_quarantines_the_record(exc):
    (kind, row), = classify_records(_Failing(exc), _items([b"{}"]))
    assert kind == "quarantine" and f"unexpected {type(exc).__name__}" in row[6]


def test_a_registry_down_fails_normalize_and_the_rerun_applies_the_hour(stack, spark, unique, tmp_path, capsys):
    """The registry stopped: normalize fails naming it (one line, exit code 1 from the job's entry
    point), bronze and quarantine stay empty; the registry restarted: the rerun applies the hour."""
    from cdclake import cli, lake
    from cdclake.land import land
    from cdclake.normalize import normalize
    from cdclake.silver import build_silver

    store = tmp_path / "schemas.json"
    reg = Registry(store=store)
    port = int(reg.url.rsplit(":", 1)[1])
    topic = f"avro.down.{unique}"
    produce(stack["bootstrap"], topic, [(0, ms(hour(0)) + 1000 + i, None, v)
                                       for i, v in enumerate(_avro_values(reg.url))])
    path = write_pipeline(f"down_{unique}", [{"topic": topic, "format": FMT, "primary_key": ["id"],
                                               "options": {"schema_registry": {"url": reg.url}}}],
                          silver={"namespace": f"down_{unique}"}, land={"grace_s": 0})
    cfg = load_pipeline(path)
    w = Window(hour(0), hour(1))
    assert land(spark, cfg, w) == {topic: len(LINES)}
    reg.close()

    code = cli.main("normalize", lambda c, win: normalize(spark, c, win),
                    ["--pipeline", str(path), "--start", w.start.isoformat(), "--end", w.end.isoformat()])
    err = capsys.readouterr().err.strip().splitlines()  # the job's one line (SchemaRegistryUnavailable)
    assert code == 1 and len(err) == 1 and err[0].startswith("error: ") and reg.url in err[0], err
    assert "cannot be asked" in err[0] and "sources[].options.schema_registry.url" in err[0], err

    def count(table: str) -> int:
        return spark.table(f"lake.{table}").where(f"kafka_topic = '{topic}'").count()

    assert count(lake.QUARANTINE_TABLE) == 0 and count(lake.BRONZE_TABLE) == 0

    again = Registry(port=port, store=store)
    try:
        assert normalize(spark, cfg, w)[topic] == {"raw": len(LINES), "changes": len(LINES), "quarantined": 0,
                                                   "control": 0}
        build_silver(spark, cfg, w)
    finally:
        again.close()
    rows = silver_rows(spark, path, "inventory__products")
    assert {int(r["id"]): (r["name"], r["description"], f32(r["weight"])) for r in rows} == \
        flink_expected("debezium.final-state.derived.csv")


def test_task_run_error_reads_the_task_traceback():
    class Wrapped(Exception):
        pass

    tb = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
          "cdclake.errors.SchemaRegistryUnavailable: debezium-avro: schema registry http://h:1 cannot be asked\n")
    found = task_run_error(Wrapped(tb))
    assert isinstance(found, SchemaRegistryUnavailable) and str(found).startswith("debezium-avro: schema registry")
    found = task_run_error(Wrapped(tb.replace("cdclake.errors.SchemaRegistryUnavailable", "ConnectionResetError")))
    assert type(found) is RunError and str(found).startswith("ConnectionResetError: ")
    assert task_run_error(Wrapped(tb.replace("cdclake.errors.SchemaRegistryUnavailable", "KeyError"))) is None
