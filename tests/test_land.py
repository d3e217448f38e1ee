"""Land copies Kafka records into ``raw.kafka_records`` byte for byte, with the hour the Kafka
offset ranges give them (``cdclake.kafka_ranges``), and refuses to shrink a landed hour.

Records cross from the reading tasks into Spark as Arrow batches
(``cdclake.kafka_read.read_partitions``); these tests check what arrives in the raw table against
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


def test_task_groups_spread_partitions_by_records():
    """Land's reading tasks: at most one per core, each partition in exactly one, the heaviest
    first to the lightest group, a partition of unknown weight weighed as the heaviest known."""
    from cdclake.kafka_read import task_groups

    parts = [(f"t{i}", 0) for i in range(7)] + [("big", 0), ("big", 1)]
    weights = {**{(f"t{i}", 0): 10 for i in range(7)}, ("big", 0): 60, ("big", 1): 5}
    groups = task_groups(parts, weights, 2)
    assert sorted(tp for g in groups for tp in g) == sorted(parts)
    # big[0] alone, then the t's to the other group until it is as heavy; each in the order given
    assert groups == [[("t6", 0), ("big", 0)], [(f"t{i}", 0) for i in range(6)] + [("big", 1)]]
    assert sorted(task_groups(parts, weights, 20)) == sorted([tp] for tp in parts)
    assert task_groups([], {}, 2) == []
    assert task_groups(parts[:1], {}, 4) == [parts[:1]]
    unknown = task_groups([("a", 0), ("b", 0), ("c", 0)], {("a", 0): 4}, 2)
    assert sorted(len(g) for g in unknown) == [1, 2]


def test_land_reads_many_topics_with_fewer_tasks_exactly(stack, spark, unique, monkeypatch):
    """Eight topics of one or two partitions (twelve partitions, some without a record in an hour)
    are read by at most one task per core, each task reading several partitions with one consumer:
    the first landing, the next hour (reads starting at the ledger's offsets) and a rerun of both
    give every record exactly once, the ledger's ranges tile each partition, and the gate passes.
    The rerun writes as a window of many topic hours is written: clustered, one file at a time."""
    from cdclake.catalog import qualified
    from cdclake.config import load_pipeline
    from cdclake.gates import run_gate
    from cdclake.land import land
    from cdclake.lake import MANIFEST_TABLE, RAW_TABLE
    from cdclake.window import Window

    base = hour(11)
    topics = {f"many{i}.{unique}": 1 + i % 2 for i in range(8)}
    produced = {}
    for i, (topic, partitions) in enumerate(topics.items()):
        recs = [(p, ms(base) + h * 3_600_000 + 1000 * j + p, f"k{j}", f'{{"t":{i},"h":{h},"j":{j}}}')
                for p in range(partitions) for h in (0, 1) for j in range((i + p + h) % 4 * 3)]
        produce(stack["bootstrap"], topic, recs, partitions=partitions)
        for p in range(partitions):
            produced[(topic, p)] = [r for r in recs if r[0] == p]
    cfg = load_pipeline(write_pipeline(f"many_{unique}", [{"topic": t, "format": "debezium-json"} for t in topics]))
    hours = [Window(base, base + dt.timedelta(hours=1)), Window(base + dt.timedelta(hours=1), base + dt.timedelta(hours=2))]
    for w in hours:
        assert sum(land(spark, cfg, w).values()) == sum(1 for rs in produced.values() for r in rs
                                                        if w.start <= dt.datetime.fromtimestamp(r[1] / 1000, UTC) < w.end)
        assert run_gate("land", cfg, w)["frames"]["offsets"] == 12
    both = Window(base, base + dt.timedelta(hours=2))
    assert land(spark, cfg, both) == {t: sum(len(produced[(t, p)]) for p in range(n)) for t, n in topics.items()}

    names = list(topics)
    raw = (spark.table(qualified(cfg, RAW_TABLE)).where(spark_in("kafka_topic", names))
           .select("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp_ms", "value", "landed_hour").collect())
    got = {}
    for r in raw:
        got.setdefault((r.kafka_topic, r.kafka_partition), []).append(r)
    for tp, recs in produced.items():
        rows = sorted(got.get(tp, []), key=lambda r: r.kafka_offset)
        assert [r.kafka_offset for r in rows] == list(range(len(recs))), tp
        assert [(r.kafka_timestamp_ms, bytes(r.value).decode()) for r in rows] == [(x[1], x[3]) for x in recs], tp
        assert all(r.landed_hour.replace(tzinfo=UTC) == base + dt.timedelta(hours=(r.kafka_timestamp_ms - ms(base))
                                                                          // 3_600_000) for r in rows), tp
    ledger = {}
    for r in spark.table(qualified(cfg, MANIFEST_TABLE)).where(spark_in("kafka_topic", names)).collect():
        ledger.setdefault((r.kafka_topic, r.kafka_partition), []).append((r.landed_hour, r.start_offset, r.end_offset,
                                                                          r.records))
    assert set(ledger) == set(produced)
    for tp, ranges in ledger.items():
        ranges.sort()
        assert len(ranges) == 2 and ranges[0][1] == 0 and ranges[0][2] == ranges[1][1], (tp, ranges)
        assert ranges[1][2] == len(produced[tp]) and sum(r[3] for r in ranges) == len(produced[tp]), (tp, ranges)
    assert run_gate("land", cfg, both)["frames"] == {"offsets": 24, "ledger": 12}


def spark_in(column: str, values: list[str]):
    from pyspark.sql import functions as F

    return F.col(column).isin(values)
