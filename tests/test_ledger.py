"""The offset ledger: every landed hour of a partition is an offset range, and the ranges tile the log.

A record appended late, stamped inside an hour already landed, lands in the next landed hour; a run
after hours the scheduler missed lands every record since the last range; a backfill between
landed hours takes the gap between their ranges; a rerun re-reads exactly its ranges; and the
land gate proves, for the window and each partition's ranges next to it, that nothing fell between
two ranges (``cdclake.kafka_ranges``, ``cdclake.land``, ``cdclake.gates``).
"""
from __future__ import annotations

import datetime as dt

import pytest
from conftest import produce, write_pipeline
from pipeline import hour, ledger_rows, ms, raw_rows

from cdclake.kafka_ranges import Piece, plan_partition

UTC = dt.timezone.utc


def _h(i: int) -> int:
    return ms(hour(i))


def test_plan_partition_follows_the_ledger():
    hours = [_h(i) for i in range(3, 7)]
    # first landing of the partition: one open segment from offsets_for_times
    assert plan_partition("t", 0, hours, {}, None, None) == [Piece("t", 0, tuple(hours), None, None)]
    # after a landed range: start exactly at its end
    assert plan_partition("t", 0, hours[:1], {}, 40, None) == [Piece("t", 0, (hours[0],), 40, None)]
    # landed hours are re-read over their ranges; the hours between take the gap between them
    landed = {hours[0]: (10, 20), hours[2]: (25, 30)}
    assert plan_partition("t", 0, hours, landed, 10, 99) == [
        Piece("t", 0, (hours[0],), 10, 20, True), Piece("t", 0, (hours[1],), 20, 25),
        Piece("t", 0, (hours[2],), 25, 30, True), Piece("t", 0, (hours[3],), 30, 99)]


def _cfg(unique: str, topic: str, **sections):
    from cdclake.config import load_pipeline

    return load_pipeline(write_pipeline(f"ledger_{unique}", [{"topic": topic, "format": "debezium-json"}],
                                        **sections))


def _window(a: int, b: int, topic: str):
    from cdclake.window import Window

    return Window(hour(a), hour(b), (topic,))


def test_late_records_land_in_the_next_hour_exactly_once(stack, spark, unique):
    """Hour 1 is landed; then records stamped inside hour 1 arrive (a producer batch in flight at
    2:00); the run for hour 2 takes them, and the land gate proves the ledger continuous."""
    from cdclake.gates import run_gate
    from cdclake.land import land

    topic = f"late.{unique}"
    cfg = _cfg(unique, topic)
    on_time = [(p, _h(1) + 1000 * i + p, f"k{i}", f'{{"i":{i}}}') for p in (0, 1) for i in range(5)]
    produce(stack["bootstrap"], topic, on_time, partitions=2)
    assert land(spark, cfg, _window(1, 2, topic)) == {topic: 10}
    run_gate("land", cfg, _window(1, 2, topic))

    late = [(p, _h(1) + 3_000_000 + i, f"late{i}", f'{{"late":{i}}}') for p in (0, 1) for i in range(3)]
    next_hour = [(p, _h(2) + 1000 * i, f"n{i}", f'{{"n":{i}}}') for p in (0, 1) for i in range(4)]
    produce(stack["bootstrap"], topic, late + next_hour, create=False)
    assert land(spark, cfg, _window(2, 3, topic)) == {topic: 14}
    assert run_gate("land", cfg, _window(1, 3, topic))["frames"] == {"offsets": 4, "ledger": 2}

    rows = raw_rows(spark, cfg, topic)
    assert len(rows) == len({(p, o) for p, o, _, _ in rows}) == 24  # every record exactly once
    for p in (0, 1):
        mine = [r for r in rows if r[0] == p]
        assert [o for _, o, _, _ in mine] == list(range(12))
        # the late records keep their own timestamps, inside hour 1, and were taken by hour 2's run
        assert [(ts < _h(2), h) for _, o, ts, h in mine if o in (5, 6, 7)] == [(True, hour(2))] * 3
        assert {h for _, o, _, h in mine if o < 5} == {hour(1)}
    assert ledger_rows(spark, cfg, topic) == [(p, hour(h), s, e, n) for p in (0, 1)
                                          for h, s, e, n in ((1, 0, 5, 5), (2, 5, 12, 7))]

    # a rerun of either hour re-reads exactly its ledger range
    before = raw_rows(spark, cfg, topic)
    assert land(spark, cfg, _window(1, 2, topic)) == {topic: 10}
    assert land(spark, cfg, _window(2, 3, topic)) == {topic: 14}
    assert raw_rows(spark, cfg, topic) == before


def test_a_run_after_a_three_hour_gap_lands_every_record_of_the_gap(stack, spark, unique):
    """The scheduler was down for hours 1 to 3: the scheduled run for hour 4 starts where hour 0's
    range ended and lands every record of the gap; a later backfill of a missed hour is empty."""
    from cdclake.gates import run_gate
    from cdclake.land import land

    topic = f"gap.{unique}"
    cfg = _cfg(unique, topic)
    produce(stack["bootstrap"], topic, [(0, _h(0) + i, None, f"a{i}") for i in range(3)])
    assert land(spark, cfg, _window(0, 1, topic)) == {topic: 3}
    gap = [(0, _h(h) + 60_000 * i, None, f"h{h}-{i}") for h in (1, 2, 3, 4) for i in range(2)]
    produce(stack["bootstrap"], topic, gap + [(0, _h(5) + 5, None, "next hour")], create=False)

    assert land(spark, cfg, _window(4, 5, topic)) == {topic: 8}
    rows = raw_rows(spark, cfg, topic)
    assert [(o, h) for _, o, _, h in rows] == [(o, hour(0)) for o in range(3)] + [(o, hour(4)) for o in range(3, 11)]
    assert ledger_rows(spark, cfg, topic) == [(0, hour(0), 0, 3, 3), (0, hour(4), 3, 11, 8)]
    # the gate names the hours no run landed (their records are in hour 4); the offsets tile
    from cdclake.gates import GateFailed

    with pytest.raises(GateFailed) as err:
        run_gate("land", cfg, _window(0, 5, topic))
    assert "1 expectation(s) failed" in str(err.value) and "column=manifest_start" in str(err.value)
    # backfilling the missed hours takes the gap between the ranges around them: nothing is left
    assert land(spark, cfg, _window(1, 4, topic)) == {topic: 0}
    assert ledger_rows(spark, cfg, topic) == [(0, hour(0), 0, 3, 3), (0, hour(1), 3, 3, 0), (0, hour(2), 3, 3, 0),
                                          (0, hour(3), 3, 3, 0), (0, hour(4), 3, 11, 8)]
    assert run_gate("land", cfg, _window(0, 5, topic))["frames"] == {"offsets": 5, "ledger": 1}
    assert raw_rows(spark, cfg, topic) == rows


def test_a_backfill_before_the_first_landed_hour_takes_the_gap(stack, spark, unique):
    """Hour 5 is the partition's first landing; backfilling hours 3 and 4, then 2, fills the log
    before it with no gap and no overlap, each record in its own hour."""
    from cdclake.gates import run_gate
    from cdclake.land import land

    topic = f"backfill.{unique}"
    cfg = _cfg(unique, topic)
    records = [(0, _h(h) + 1000 * i, None, f"h{h}-{i}") for h in (1, 2, 3, 4, 5) for i in range(2)]
    produce(stack["bootstrap"], topic, records)
    assert land(spark, cfg, _window(5, 6, topic)) == {topic: 2}
    assert ledger_rows(spark, cfg, topic) == [(0, hour(5), 8, 10, 2)]
    assert land(spark, cfg, _window(3, 5, topic)) == {topic: 4}
    assert land(spark, cfg, _window(2, 3, topic)) == {topic: 2}
    assert ledger_rows(spark, cfg, topic) == [(0, hour(2), 2, 4, 2), (0, hour(3), 4, 6, 2), (0, hour(4), 6, 8, 2),
                                          (0, hour(5), 8, 10, 2)]
    assert [(o, h) for _, o, _, h in raw_rows(spark, cfg, topic)] == [(o, hour(o // 2 + 1)) for o in range(2, 10)]
    assert run_gate("land", cfg, _window(2, 6, topic))["frames"] == {"offsets": 4, "ledger": 1}


def test_a_backfill_hours_before_the_next_landed_hour_ends_where_it_starts(stack, spark, unique):
    """Hour 5 is the partition's first landing; a backfill of hour 1, hours before it (the ledger's
    next range is not in the hour after the window), takes every record up to hour 5's range, which
    the plan finds among the later hours, and the hours between are then empty."""
    from cdclake.land import land

    topic = f"farnext.{unique}"
    cfg = _cfg(unique, topic)
    records = [(0, _h(h) + 1000 * i, None, f"h{h}-{i}") for h in (1, 2, 3, 4, 5) for i in range(2)]
    produce(stack["bootstrap"], topic, records)
    assert land(spark, cfg, _window(5, 6, topic)) == {topic: 2}
    assert land(spark, cfg, _window(1, 2, topic)) == {topic: 8}
    assert land(spark, cfg, _window(3, 4, topic)) == {topic: 0}
    assert ledger_rows(spark, cfg, topic) == [(0, hour(1), 0, 8, 8), (0, hour(3), 8, 8, 0), (0, hour(5), 8, 10, 2)]


def test_the_land_gate_fails_on_a_gap_in_the_ledger(stack, spark, unique):
    from cdclake.catalog import qualified
    from cdclake.lake import MANIFEST_TABLE
    from cdclake.gates import GateFailed, run_gate
    from cdclake.land import land

    topic = f"hole.{unique}"
    cfg = _cfg(unique, topic)
    produce(stack["bootstrap"], topic, [(0, _h(h) + i, None, f"{h}-{i}") for h in (0, 1, 2) for i in range(2)])
    assert land(spark, cfg, _window(0, 3, topic)) == {topic: 6}
    spark.sql(f"DELETE FROM {qualified(cfg, MANIFEST_TABLE)} WHERE kafka_topic = '{topic}' "
              f"AND landed_hour = TIMESTAMP '{hour(1).isoformat()}'")
    with pytest.raises(GateFailed) as err:
        run_gate("land", cfg, _window(0, 3, topic))
    text = str(err.value)
    assert "ledger: expect_column_values_to_be_in_set column=gaps" in text
    assert "offsets: expect_column_values_to_be_between column=manifest_start" in text


def test_land_and_its_gate_read_the_ledger_around_the_window_not_every_hour_kept(stack, spark, unique):
    """Land's plan and the land gate read a window's ledger ranges and each partition's nearest range
    on either side (``cdclake.lake.ledger_around``): the hour on each side after hourly runs, however
    many hours the ledger keeps; farther hours only where those are missing, and the gate then
    finds the gaps between them."""
    from cdclake.catalog import qualified
    from cdclake.gates import land_frames
    from cdclake.lake import MANIFEST_TABLE, ledger_around
    from cdclake.land import land

    topic = f"around.{unique}"
    cfg = _cfg(unique, topic)
    produce(stack["bootstrap"], topic, [(0, _h(h) + i, None, f"{h}-{i}") for h in range(6) for i in range(2)])
    assert land(spark, cfg, _window(0, 6, topic)) == {topic: 12}

    def around(a: int, b: int) -> list:
        rows = ledger_around(cfg, [(topic, 0)], hour(a), hour(b))
        return list(zip(*(rows.column(c).to_pylist() for c in ("landed_hour", "start_offset", "end_offset"))))

    assert around(2, 4) == [(hour(h), 2 * h, 2 * h + 2) for h in (1, 2, 3, 4)]
    assert around(0, 1) == [(hour(0), 0, 2), (hour(1), 2, 4)]
    assert land_frames(cfg, _window(3, 4, topic))["ledger"].iloc[0][["ranges", "gaps", "overlaps"]].tolist() == [3, 0, 0]
    spark.sql(f"DELETE FROM {qualified(cfg, MANIFEST_TABLE)} WHERE kafka_topic = '{topic}' "
              f"AND landed_hour IN (TIMESTAMP '{hour(1).isoformat()}', TIMESTAMP '{hour(3).isoformat()}')")
    assert around(2, 3) == [(hour(0), 0, 2), (hour(2), 4, 6), (hour(4), 8, 10)]
    assert land_frames(cfg, _window(2, 3, topic))["ledger"].iloc[0][["ranges", "gaps", "overlaps"]].tolist() == [3, 2, 0]


def test_the_latest_range_of_each_partition_is_read_from_its_latest_hour(stack, spark, unique, monkeypatch):
    """Silver's recorded end offsets and reconciliation's start in Kafka read each partition's latest
    landed range (``cdclake.lake.ledger_latest``): the ledger's file of the topic's latest hour
    alone, however many hours it keeps; earlier hours only for a partition missing from it."""
    import pyarrow.parquet as pq

    from cdclake.catalog import qualified
    from cdclake.lake import MANIFEST_TABLE, ledger_latest
    from cdclake.land import land
    from cdclake.reconcile.inflight import ledger_ends
    from cdclake.silver.snapshots import ledger_end_offsets

    topic = f"latest.{unique}"
    cfg = _cfg(unique, topic)
    produce(stack["bootstrap"], topic, [(p, _h(h) + i, None, f"{p}-{h}-{i}") for p in (0, 1) for h in range(6)
                                        for i in range(p + 1)], partitions=2)
    assert land(spark, cfg, _window(0, 6, topic)) == {topic: 18}
    read = []  # ranges in each ledger file read
    real = pq.ParquetFile.read

    def counted(self, *args, **kwargs):
        rows = real(self, *args, **kwargs)
        read.append(rows.num_rows)
        return rows

    monkeypatch.setattr(pq.ParquetFile, "read", counted)

    def latest(*args, **kwargs) -> list:
        read.clear()
        rows = ledger_latest(cfg, [topic], *args, **kwargs)
        return list(zip(*(rows.column(c).to_pylist() for c in ("kafka_partition", "landed_hour", "end_offset"))))

    both = [(topic, 0), (topic, 1)]
    assert latest(parts=both) == [(0, hour(5), 6), (1, hour(5), 12)] and sum(read) == 2
    assert latest(hour(1), hour(3)) == [(0, hour(2), 3), (1, hour(2), 6)] and sum(read) == 2
    read.clear()
    assert ledger_end_offsets(cfg, _window(0, 6, topic), [topic]) == {topic: {"0": 6, "1": 12}} and sum(read) == 2
    read.clear()
    assert ledger_ends(cfg, [topic], both) == {(topic, 0): 6, (topic, 1): 12} and sum(read) == 2
    spark.sql(f"DELETE FROM {qualified(cfg, MANIFEST_TABLE)} WHERE kafka_topic = '{topic}' "
              f"AND kafka_partition = 1 AND landed_hour = TIMESTAMP '{hour(5).isoformat()}'")
    assert latest() == [(0, hour(5), 6)] and sum(read) == 1
    assert latest(parts=both) == [(0, hour(5), 6), (1, hour(4), 10)] and sum(read) == 1 + 10


def test_land_waits_for_the_settle_time(stack, spark, unique):
    """``land.grace_s`` after the window's end: a run that starts earlier waits until then."""
    import time

    from cdclake.land import land, settle_seconds
    from cdclake.window import HOUR, Window

    topic = f"settle.{unique}"
    now = dt.datetime.now(UTC)
    end = now.replace(minute=0, second=0, microsecond=0)
    grace = (now - end).total_seconds() + 3
    cfg = _cfg(unique, topic, land={"grace_s": grace})
    window = Window(end - HOUR, end, (topic,))
    assert 2 < settle_seconds(cfg, window, now) <= 3
    assert settle_seconds(cfg, window, end + dt.timedelta(seconds=grace)) == 0
    produce(stack["bootstrap"], topic, [(0, int(end.timestamp() * 1000) - 1000, None, "last of the hour")])
    started = time.monotonic()
    assert land(spark, cfg, window) == {topic: 1}
    assert time.monotonic() - started >= 2


def test_the_land_gate_reads_kafka_only_where_the_raw_table_lacks_an_offset(stack, unique):
    """A range the raw table holds at every offset is counted from the offsets and the log start
    alone; any other is read again. Shown on a range past the log's end: read, it counts the 5
    records Kafka holds; marked dense, its 6 offsets (the caller vouches for them)."""
    from cdclake.kafka_ranges import observe_partition

    topic = f"dense.{unique}"
    produce(stack["bootstrap"], topic, [(0, _h(0) + i, None, f"v{i}") for i in range(5)])
    read = observe_partition(stack["bootstrap"], topic, 0, [(0, 2), (2, 8)])
    assert read.records == (2, 3) and read.log_start == 0
    vouched = observe_partition(stack["bootstrap"], topic, 0, [(0, 2), (2, 8)], dense=[True, True])
    assert vouched.records == (2, 6)
    mixed = observe_partition(stack["bootstrap"], topic, 0, [(0, 2), (2, 8)], dense=[True, False])
    assert mixed.records == (2, 3)
