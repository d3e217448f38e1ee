"""Land's reading tasks read every partition of their share at once with one consumer
(``cdclake.kafka_read.read_partitions``); ``cdclake.kafka_ranges.scan_piece``, one partition read
alone, is the reference. Both read the same plans here: first landings (one with a record stamped
before its hour, one of an empty partition), reruns of ledger ranges followed by new hours, a
backfill between landed hours, a late record, a future-stamped one, a partition planned past the
end of its log and one whose pieces do not follow one another. They must land the same records in
the same hours and report the same ledger ranges and future-stamped records.
"""
from __future__ import annotations

import datetime as dt

import pytest
from conftest import produce
from pipeline import hour, ms

HOUR_MS = 3_600_000
YEAR_MS = 365 * 24 * HOUR_MS


def _records(base: int) -> list[tuple]:
    """Five partitions of ``(partition, timestamp_ms, key, value)`` over three hours from ``base``."""
    out = []
    for p in range(4):
        for i in range(24):
            ts = base + (i // 8) * HOUR_MS + 60_000 * (i % 8) + p
            if p == 0 and i == 0:
                ts = base - HOUR_MS  # before the first landing's hour
            if p == 1 and i == 10:
                ts = base + 30_000  # late: stamped in the hour before the one it follows
            if p == 2 and i == 5:
                ts = base + 100 * YEAR_MS  # a producer clock a century fast
            out.append((p, ts, f"k{p}-{i}", f'{{"p":{p},"i":{i}}}'))
    return out  # partition 4 stays empty


def _plans(topic: str, base: int) -> list[list]:
    from cdclake.kafka_ranges import Piece

    h = [base + k * HOUR_MS for k in range(3)]
    return [
        [Piece(topic, 0, (h[0], h[1]), None, None)],  # a first landing of two hours
        [Piece(topic, 1, (h[0],), 0, 8, True), Piece(topic, 1, (h[1], h[2]), 8, None)],  # a rerun, then new hours
        [Piece(topic, 2, (h[0],), 2, 9), Piece(topic, 2, (h[1],), 9, 16, True),  # a backfill before a landed hour
         Piece(topic, 2, (h[2],), 16, None)],
        [Piece(topic, 3, (h[0],), 0, 8, True), Piece(topic, 3, (h[1],), 8, 30, True)],  # past the log's end
        [Piece(topic, 4, (h[0],), None, None)],  # a first landing of an empty partition
        [Piece(topic, 0, (h[2],), 17, 20, True), Piece(topic, 0, (h[2],), 3, 5, True)],  # pieces out of order
    ]


def _alone(bootstrap: str, plans: list[list], skew_s: float) -> tuple[list, dict]:
    from cdclake.kafka_ranges import FutureStamped, consumer, scan_piece

    rows, reported = [], {}
    cons = consumer(bootstrap)
    try:
        for i, pieces in enumerate(plans):
            ranges: list = []
            future = FutureStamped(pieces[0].topic, pieces[0].partition)
            for piece in pieces:
                rows += [(i, m.offset(), h) for m, h in scan_piece(cons, piece, ranges, 30.0, skew_s, future)]
            reported[i] = (ranges, future.count, [s[0] for s in future.samples])
    finally:
        cons.close()
    return rows, reported


def test_partitions_read_at_once_land_what_each_read_alone_lands(stack, unique):
    from cdclake.kafka_read import read_partitions
    from cdclake.lake import RAW_SCHEMA, arrow_schema

    topic = f"read.{unique}"
    base = ms(hour(5))
    produce(stack["bootstrap"], topic, _records(base), partitions=5)
    skew_s = 600.0
    # the out-of-order plan names partition 0 again: each plan is read by its own call
    plans = _plans(topic, base)
    want_rows, want = _alone(stack["bootstrap"], plans, skew_s)
    got_rows, got = [], {}
    for group in ([0, 1, 2, 3, 4], [5]):
        index = {(plans[i][0].topic, plans[i][0].partition): i for i in group}

        def done(t, p, ranges, future, overrun):
            assert not overrun
            got[index[(t, p)]] = (ranges, future.count, [s[0] for s in future.samples])

        for b in read_partitions(stack["bootstrap"], [plans[i] for i in group], arrow_schema(RAW_SCHEMA), done,
                                 30.0, max_future_skew_s=skew_s):
            d = b.to_pydict()
            got_rows += [(index[(t, p)], o, int(h.timestamp() * 1000))
                         for t, p, o, h in zip(d["kafka_topic"], d["kafka_partition"], d["kafka_offset"],
                                               d["landed_hour"])]
    assert sorted(got_rows) == sorted(want_rows)
    assert got == want
    # what the plans ask for happened: the record before the first hour skipped, the late one kept
    # in its partition's running hour, the future-stamped one landed without ending its hour
    assert (0, 0) not in {(i, o) for i, o, _ in want_rows}
    assert (1, 10, base + HOUR_MS) in want_rows and (2, 5, base) in want_rows
    assert want[2][1:] == (1, [5])
    assert [(r.start, r.end, r.records) for r in want[3][0]] == [(0, 8, 8), (8, 30, 16)]
    assert [(r.start, r.end, r.records) for r in want[4][0]] == [(0, 0, 0)]
    assert len(want_rows) == sum(n for rs, _, _ in want.values() for n in [sum(r.records for r in rs)])


def test_a_bounded_share_overruns_at_a_record_stamped_after_its_hour():
    """A share cut where the hour was expected to end holds no record stamped after the hour (a
    future-stamped one excepted); one that does ends the share as overrun, its ranges void."""
    from cdclake.kafka_ranges import Piece, PieceScan

    base = ms(hour(5))
    scan = PieceScan(Piece("t", 0, (base,), 10, 20, bounded=True), 10, max_future_skew_s=600.0,
                     clock=lambda: (base + HOUR_MS) / 1000)
    assert scan.feed(10, base + 5) == base
    assert scan.feed(11, base + 10 * YEAR_MS) == base  # future-stamped: lands, ends nothing
    assert not scan.done and not scan.overrun
    assert scan.feed(12, base + HOUR_MS) is None and scan.done and scan.overrun


def test_one_partition_hour_is_read_by_several_tasks_exactly(stack, spark, unique, monkeypatch, caplog):
    """A topic of one partition, its hours read by several tasks: a new hour (a late record, a
    future-stamped one, the next hour's records after it) on a broker that finds no offset by time,
    so that it is cut up to the log's end, the hour ends inside a share, which overruns, and the
    window is read again uncut; a rerun of it, cut; the next hour, cut where the broker says it
    ends. The raw table
    holds each record of the hour once, in its hour; the ledger holds one range for the hour, the
    one a single read gives; the future-stamped record is counted once; the gate passes."""
    import logging

    from cdclake import kafka_read
    from cdclake.catalog import qualified
    from cdclake.config import load_pipeline
    from cdclake.gates import run_gate
    from cdclake.land import land
    from cdclake.lake import MANIFEST_TABLE, RAW_TABLE
    from cdclake.window import Window
    from conftest import write_pipeline

    monkeypatch.setattr(kafka_read, "SPLIT_RECORDS", 40)
    topic = f"split.{unique}"
    base = hour(7)
    b = ms(base)
    recs = [(0, b + 1000 * i, f"k{i}", f'{{"i":{i}}}') for i in range(50)]  # hour 0
    recs += [(0, b + HOUR_MS + 1000 * i, f"k{i}", f'{{"i":{i}}}') for i in range(300)]  # hour 1
    recs[50 + 123] = (0, b + 500, "late", '{"late":1}')  # stamped in hour 0, after hour 1 began
    recs[50 + 200] = (0, b + 100 * YEAR_MS, "ahead", '{"ahead":1}')
    recs += [(0, b + 2 * HOUR_MS + 1000 * i, f"k{i}", f'{{"i":{i}}}') for i in range(200)]  # hour 2
    # produced in parts, so that the broker's batches start at the future-stamped record (this
    # broker answers offsets_for_times with the first offset of the batch holding the answer)
    for i, part in enumerate((recs[:250], recs[250:251], recs[251:])):
        produce(stack["bootstrap"], topic, part, partitions=1, create=i == 0)
    cfg = load_pipeline(write_pipeline(f"split_{unique}", [{"topic": topic, "format": "debezium-json"}]))
    first, second = (Window(base + dt.timedelta(hours=h), base + dt.timedelta(hours=h + 1)) for h in (0, 1))
    assert land(spark, cfg, first) == {topic: 50}
    real = kafka_read._offsets

    def no_time_index(cons, wanted, timeout_s):  # a broker that finds no offset by time: the log's end is used
        return {(t, p): 550 if ts == -1 else None for t, p, ts in wanted}

    for again in (True, False):  # the new hour (its shares overrun), then its rerun
        caplog.clear()
        if again:
            monkeypatch.setattr(kafka_read, "_offsets", no_time_index)
        with caplog.at_level(logging.INFO, logger="cdclake"):
            result = land(spark, cfg, second)
        monkeypatch.setattr(kafka_read, "_offsets", real)
        assert result == {topic: 300} and result.future_stamped == {topic: 1}
        said = [r.getMessage() for r in caplog.records]
        assert any("read by 4 tasks" in m for m in said), said
        assert any("reading the window again" in m for m in said) == again, "\n".join(said)
        raw = (spark.table(qualified(cfg, RAW_TABLE)).where(f"kafka_topic = '{topic}'")
               .where(f"landed_hour = TIMESTAMP '{second.start.isoformat()}'").select("kafka_offset").collect())
        assert sorted(r.kafka_offset for r in raw) == list(range(50, 350))
        ledger = sorted((r.landed_hour, r.start_offset, r.end_offset, r.records) for r in
                        spark.table(qualified(cfg, MANIFEST_TABLE)).where(f"kafka_topic = '{topic}'").collect())
        assert [x[1:] for x in ledger] == [(0, 50, 50), (50, 350, 300)]
        assert run_gate("land", cfg, second)["frames"] == {"offsets": 1, "ledger": 1}
    # the next hour, cut where the broker says it ends (this broker's log end may be early: the
    # last share reads on to the end)
    third = Window(second.end, second.end + dt.timedelta(hours=1))
    assert land(spark, cfg, third) == {topic: 200}
    ledger = sorted((r.start_offset, r.end_offset, r.records) for r in
                    spark.table(qualified(cfg, MANIFEST_TABLE)).where(f"kafka_topic = '{topic}'").collect())
    assert ledger == [(0, 50, 50), (50, 350, 300), (350, 550, 200)]
    assert run_gate("land", cfg, third)["frames"] == {"offsets": 1, "ledger": 1}


def test_the_shares_of_an_hour_make_one_ledger_range():
    """The driver adds the shares of a partition's hour up into one ledger range; a share reported
    twice alike (a Spark task re-run) counts once; shares that leave a gap, or a share reported
    twice with different counts, are refused; future-stamped records add up over the shares."""

    from cdclake.kafka_ranges import Piece
    from cdclake.land import _ledger_rows, report_future

    h = ms(hour(5))
    plans = {("t", 0): [Piece("t", 0, (h,), 50, None)], ("u", 1): [Piece("u", 1, (h,), 0, 10, True)]}
    shares = [("t", 0, h, 50, 130, 80), ("t", 0, h, 130, 210, 79), ("t", 0, h, 210, 350, 140), ("u", 1, h, 0, 10, 10)]
    rows = _ledger_rows(shares + shares[:1], plans)
    assert [(r.topic, r.partition, r.start, r.end, r.records) for r in rows] == [("t", 0, 50, 350, 299),
                                                                               ("u", 1, 0, 10, 10)]
    with pytest.raises(RuntimeError, match="do not tile"):
        _ledger_rows([s for s in shares if s[3] != 130], plans)
    with pytest.raises(RuntimeError, match="read twice with different offset ranges"):
        _ledger_rows(shares + [("t", 0, h, 50, 130, 79)], plans)
    with pytest.raises(RuntimeError, match="3 ledger ranges where 2 were planned"):
        _ledger_rows(shares + [("v", 0, h, 0, 0, 0)], plans)
    sample = (7, h + YEAR_MS, 99.0, h)
    assert report_future([("t", 0, 50, 2, [sample]), ("t", 0, 130, 1, [sample]), ("t", 0, 50, 2, [sample])],
                         300.0) == {("t", 0): 3}


@pytest.mark.parametrize("before", [20, 100])
def test_a_first_landing_is_cut_into_shares_exactly(stack, spark, unique, monkeypatch, before):
    """A topic's first landing, records stamped before its hour first (skipped, as a whole read
    skips them; with 100 of them the first share can hold nothing of the hour, and overrun), is
    cut into shares; whatever the broker answers, the hour lands exactly: its records once, the
    ledger's range from its first record."""
    from cdclake import kafka_read
    from cdclake.catalog import qualified
    from cdclake.config import load_pipeline
    from cdclake.lake import MANIFEST_TABLE, RAW_TABLE
    from cdclake.land import land
    from cdclake.window import Window
    from conftest import write_pipeline

    monkeypatch.setattr(kafka_read, "SPLIT_RECORDS", 40)
    topic = f"first.{unique}"
    base = hour(9)
    b = ms(base)
    early = [(0, b - HOUR_MS + 1000 * i, f"e{i}", f'{{"e":{i}}}') for i in range(before)]
    inside = [(0, b + 1000 * i, f"k{i}", f'{{"i":{i}}}') for i in range(300)]
    after = [(0, b + HOUR_MS + 1000 * i, f"a{i}", f'{{"a":{i}}}') for i in range(50)]
    for i, part in enumerate((early, inside, after)):
        produce(stack["bootstrap"], topic, part, partitions=1, create=i == 0)
    cfg = load_pipeline(write_pipeline(f"first_{unique}", [{"topic": topic, "format": "debezium-json"}]))
    window = Window(base, base + dt.timedelta(hours=1))
    assert land(spark, cfg, window) == {topic: 300}
    raw = spark.table(qualified(cfg, RAW_TABLE)).where(f"kafka_topic = '{topic}'").select("kafka_offset").collect()
    assert sorted(r.kafka_offset for r in raw) == list(range(before, before + 300))
    ledger = [(r.start_offset, r.end_offset, r.records)
              for r in spark.table(qualified(cfg, MANIFEST_TABLE)).where(f"kafka_topic = '{topic}'").collect()]
    assert ledger == [(before, before + 300, 300)]


def test_first_landings_whose_offsets_the_broker_cannot_give_are_named_in_the_error():
    """A broker that does not answer the lookup of where first landings start (stopped before the
    task read a record) fails the read naming those partitions, as the other reading errors do."""
    from cdclake.embedded import free_port
    from cdclake.errors import KafkaUnavailable
    from cdclake.kafka_ranges import Piece
    from cdclake.kafka_read import read_partitions
    from cdclake.lake import RAW_SCHEMA, arrow_schema

    h = ms(hour(0))
    plans = [[Piece("gone.t", p, (h,), None, None)] for p in (0, 1)]
    with pytest.raises(KafkaUnavailable, match=r"^gone\.t\[0\], gone\.t\[1\] \(2 partitions\): the offsets where"):
        list(read_partitions(f"127.0.0.1:{free_port()}", plans, arrow_schema(RAW_SCHEMA), lambda *a: None,
                             timeout_s=2.0))
