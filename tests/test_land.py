"""Land copies Kafka records into ``raw.kafka_records`` byte for byte, with the hour the Kafka
offset ranges give them (``cdclake.kafka_ranges``), and refuses to shrink a landed hour.

Records cross from the reading tasks into Spark as Arrow batches
(``cdclake.kafka_ranges.arrow_batches``); these tests check what arrives in the raw table against
what was produced: keys and values (null, empty, not UTF-8), headers, timestamps, partitions,
offsets and landed hours, including a record whose timestamp is older than one before it.
"""
from __future__ import annotations

import datetime as dt

import pytest
from conftest import produce, write_pipeline
from pipeline import hour, ms

UTC = dt.timezone.utc


def _records(base_ms: int) -> list[dict]:
    """Two partitions over three hours (the third outside the landed window); partition 1 has a
    record whose timestamp is older than the one before it (it stays in that one's hour)."""
    out = []
    for p in (0, 1):
        for i in range(30):
            h = i // 10  # 10 records in each of hours 0, 1, 2
            ts = base_ms + h * 3_600_000 + 60_000 * (i % 10) + p
            if p == 1 and i == 12:
                ts = base_ms + 3_599_000  # late: older than record 11, whose hour (1) it keeps
            key = None if i % 7 == 3 else (b"\xff\x00k" + bytes([i]) if i % 5 == 0 else f"k{p}-{i}".encode())
            value = None if i % 9 == 4 else (b"" if i % 11 == 6 else f'{{"p":{p},"i":{i}}}'.encode() + b"\x80" * (i % 3))
            headers = [("trace", f"t{i}".encode()), ("empty", b""), ("trace", None)] if i % 4 == 1 else []
            out.append({"partition": p, "offset": i, "ts": ts, "key": key, "value": value, "headers": headers,
                        "hour": h})
    return out


def _tuples(records: list[dict]) -> list[tuple]:
    return [(r["partition"], r["ts"], r["key"], r["value"], r["headers"]) for r in records]


def test_land_copies_records_exactly_with_their_hours(stack, spark, unique):
    from cdclake.catalog import qualified
    from cdclake.lake import MANIFEST_TABLE, RAW_TABLE
    from cdclake.config import load_pipeline
    from cdclake.gates import run_gate
    from cdclake.land import land
    from cdclake.window import Window

    topic = f"land.{unique}"
    base = hour(3)
    records = _records(ms(base))
    produce(stack["bootstrap"], topic, _tuples(records), partitions=2)
    path = write_pipeline(f"land_{unique}", [{"topic": topic, "format": "debezium-json"}])
    cfg = load_pipeline(path)
    window = Window(base, base + dt.timedelta(hours=2), (topic,))

    assert land(spark, cfg, window) == {topic: 40}
    rows = (spark.table(qualified(cfg, RAW_TABLE)).where(f"kafka_topic = '{topic}'")
            .orderBy("kafka_partition", "kafka_offset").collect())
    expected = [r for r in records if r["hour"] < 2]
    assert len(rows) == len(expected) == 40
    for got, want in zip(rows, sorted(expected, key=lambda r: (r["partition"], r["offset"]))):
        where = f"{topic}[{want['partition']}]@{want['offset']}"
        assert (got.kafka_partition, got.kafka_offset, got.kafka_timestamp_ms) == (
            want["partition"], want["offset"], want["ts"]), where
        assert (None if got.key is None else bytes(got.key)) == want["key"], where
        assert (None if got.value is None else bytes(got.value)) == want["value"], where
        assert [(h.name, None if h.value is None else bytes(h.value)) for h in got.headers] == want["headers"], where
        assert got.landed_hour.replace(tzinfo=UTC) == base + dt.timedelta(hours=want["hour"]), where

    manifest = {(r.kafka_partition, r.landed_hour.replace(tzinfo=UTC)): (r.start_offset, r.end_offset, r.records)
                for r in spark.table(qualified(cfg, MANIFEST_TABLE)).where(f"kafka_topic = '{topic}'").collect()}
    assert manifest == {(p, base + dt.timedelta(hours=h)): (10 * h, 10 * h + 10, 10) for p in (0, 1) for h in (0, 1)}
    assert run_gate("land", cfg, window)["frames"] == {"offsets": 4, "ledger": 2}

    # a rerun replaces the window with the same records
    assert land(spark, cfg, window) == {topic: 40}
    assert spark.table(qualified(cfg, RAW_TABLE)).where(f"kafka_topic = '{topic}'").count() == 40


def _files_per_hour(spark, table: str, topic: str) -> dict:
    """``{hour partition: data files}`` of ``topic`` in Iceberg table ``table``."""
    return {r.h: r.n for r in spark.sql(
        f"SELECT partition.landed_hour_hour AS h, count(*) AS n FROM {table}.files "
        f"WHERE partition.kafka_topic = '{topic}' GROUP BY 1").collect()}


def test_an_hour_is_written_by_every_task_that_holds_its_records(stack, spark, unique):
    """Raw and bronze hours are written by the tasks that read them (one file each), not gathered
    into one task per hour first, which ran a topic's hour on one core after a shuffle of every value."""
    from cdclake.catalog import qualified
    from cdclake.config import load_pipeline
    from cdclake.land import land
    from cdclake.lake import QUARANTINE_TABLE, RAW_TABLE
    from cdclake.normalize import normalize
    from cdclake.window import Window

    topic = f"land.files.{unique}"
    base = hour(5)
    records = [r for r in _records(ms(base)) if r["hour"] < 2]
    produce(stack["bootstrap"], topic, _tuples(records), partitions=2)
    cfg = load_pipeline(write_pipeline(f"land_files_{unique}", [{"topic": topic, "format": "debezium-json"}]))
    window = Window(base, base + dt.timedelta(hours=2), (topic,))

    assert land(spark, cfg, window) == {topic: 40}
    raw = _files_per_hour(spark, qualified(cfg, RAW_TABLE), topic)
    assert len(raw) == 2 and set(raw.values()) == {2}, raw  # each hour: one file per Kafka partition's task
    assert normalize(spark, cfg, window)[topic]["quarantined"] > 0  # these values are not Debezium
    quarantine = _files_per_hour(spark, qualified(cfg, QUARANTINE_TABLE), topic)
    assert len(quarantine) == 2 and min(quarantine.values()) >= 2, quarantine


def _landed_then_deleted(stack, spark, topic: str, records: list, partitions: int):
    """Produce ``records`` to a new ``topic`` of ``partitions``, land its hour 5 (all of them), then
    delete the topic; return the pipeline config and the window."""
    from confluent_kafka.admin import AdminClient

    from cdclake.config import load_pipeline
    from cdclake.land import land
    from cdclake.window import Window

    produce(stack["bootstrap"], topic, _tuples(records), partitions=partitions)
    cfg = load_pipeline(write_pipeline(topic.replace(".", "_"), [{"topic": topic, "format": "debezium-json"}]))
    window = Window(hour(5), hour(6), (topic,))
    assert land(spark, cfg, window) == {topic: len(records)}
    admin = AdminClient({"bootstrap.servers": stack["bootstrap"]})  # kept until the deletion is done
    admin.delete_topics([topic])[topic].result(timeout=10)
    return cfg, window


def test_land_refuses_to_replace_an_hour_with_fewer_records(stack, spark, unique):
    from cdclake.catalog import qualified
    from cdclake.lake import RAW_TABLE
    from cdclake.land import LandingShrinks, land

    topic = f"shrink.{unique}"
    records = [r for r in _records(ms(hour(5))) if r["partition"] == 0 and r["hour"] == 0]
    cfg, window = _landed_then_deleted(stack, spark, topic, records, 1)
    produce(stack["bootstrap"], topic, _tuples(records[:6]), partitions=1)  # retention took four records
    with pytest.raises(LandingShrinks, match=rf"{topic}\[0\] hour .*6 records where 10 were landed"):
        land(spark, cfg, window)
    assert spark.table(qualified(cfg, RAW_TABLE)).where(f"kafka_topic = '{topic}'").count() == 10


def test_land_refuses_to_replace_the_hour_of_a_partition_kafka_no_longer_has(stack, spark, unique):
    """A topic recreated with fewer partitions: the landed hour of the partition that is gone counts
    as 0 records now, and the rerun refuses to overwrite it, as for any shrunk hour."""
    from cdclake.catalog import qualified
    from cdclake.lake import RAW_TABLE
    from cdclake.land import LandingShrinks, land

    topic = f"gone.{unique}"
    records = [r for r in _records(ms(hour(5))) if r["hour"] == 0]
    cfg, window = _landed_then_deleted(stack, spark, topic, records, 2)
    produce(stack["bootstrap"], topic, _tuples([r for r in records if r["partition"] == 0]), partitions=1)
    with pytest.raises(LandingShrinks, match=rf"{topic}\[1\] hour .*0 records where 10 were landed"):
        land(spark, cfg, window)
    assert spark.table(qualified(cfg, RAW_TABLE)).where(f"kafka_topic = '{topic}'").count() == 20
