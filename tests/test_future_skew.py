"""Future-stamped records: a record stamped more than ``land.max_future_skew_s`` seconds after land
reads it (a producer whose clock runs fast) does not end its hour's offset range. It lands with its
neighbours in the hour the running maximum of the others gives, keeps its own timestamp, and is
reported: a warning naming topic, partition, offset and skew, and the ``future_stamped`` run metric
(``cdclake.kafka_ranges.scan_piece``, ``cdclake.land``, ``cdclake.metrics``).

The scenario: 21 records stamped inside one hour, the 10th by a producer whose clock runs three
hours fast. Under the running maximum alone that record ended the hour's range at it, and every
hourly run after it landed nothing of the partition until the wall clock passed its timestamp.
"""
from __future__ import annotations

import datetime as dt
import logging
import re

from conftest import produce, write_pipeline
from pipeline import hour, ledger_rows, ms, raw_rows

UTC = dt.timezone.utc
MIN_MS = 60_000
HOUR_MS = 3_600_000
AHEAD_MS = 3 * HOUR_MS  # the fast producer's clock
TENTH = 9  # offset of the future-stamped record


def _hour_of_records(start_ms: int, tenth_ms: int) -> list[tuple]:
    """21 records stamped inside the hour starting at ``start_ms`` (one every two minutes from
    0:30), the 10th (offset 9) stamped ``tenth_ms`` instead; ``(partition, timestamp_ms, key, value)``."""
    return [(0, tenth_ms if i == TENTH else start_ms + 30_000 + 2 * MIN_MS * i, f"k{i}", f'{{"i":{i}}}')
            for i in range(21)]


def _scan(bootstrap: str, piece, read_at_ms: int, skew_s):
    """``scan_piece`` of ``piece`` with the wall clock at ``read_at_ms``: ``([(offset, landed hour
    ms)], ranges, FutureStamped)``."""
    from cdclake.kafka_ranges import FutureStamped, consumer, scan_piece

    cons = consumer(bootstrap)
    ranges: list = []
    future = FutureStamped(piece.topic, piece.partition)
    try:
        got = [(m.offset(), h) for m, h in scan_piece(cons, piece, ranges, 30.0, skew_s, future,
                                                      clock=lambda: read_at_ms / 1000)]
    finally:
        cons.close()
    return got, ranges, future


def test_scan_piece_a_record_three_hours_ahead_ends_no_range(stack, unique):
    """Hour 5 holds 21 records, the 10th stamped three hours ahead; hour 6 holds 5. Each hourly
    run reads one minute after its hour's end."""
    from cdclake.kafka_ranges import OffsetRange, Piece

    topic = f"skew.unit.{unique}"
    h5, h6, h7 = ms(hour(5)), ms(hour(6)), ms(hour(7))
    tenth = h5 + 30_000 + 2 * MIN_MS * TENTH + AHEAD_MS
    produce(stack["bootstrap"], topic, _hour_of_records(h5, tenth) + [(0, h6 + MIN_MS * i, None, f"n{i}")
                                                                       for i in range(5)])
    boot = stack["bootstrap"]
    run5, run6 = h6 + MIN_MS, h7 + MIN_MS

    # the running maximum alone (no skew limit): hour 5 ends at the 10th record, hour 6 lands nothing
    got, ranges, _ = _scan(boot, Piece(topic, 0, (h5,), 0, None), run5, None)
    assert got == [(o, h5) for o in range(TENTH)] and ranges == [OffsetRange(topic, 0, hour(5), 0, TENTH, TENTH)]
    assert _scan(boot, Piece(topic, 0, (h6,), TENTH, None), run6, None)[1] == [
        OffsetRange(topic, 0, hour(6), TENTH, TENTH, 0)]

    # with the limit (300 s): the 10th record ends no range; all 21 land in hour 5, the 10th reported
    got, ranges, future = _scan(boot, Piece(topic, 0, (h5,), 0, None), run5, 300.0)
    assert got == [(o, h5) for o in range(21)] and ranges == [OffsetRange(topic, 0, hour(5), 0, 21, 21)]
    assert (future.count, future.samples) == (1, [(TENTH, tenth, (tenth - run5) / 1000, h5)])
    assert future.samples[0][2] == 3 * 3600 - (60 + 1) * 60 + 30 + 2 * 60 * TENTH  # 8250 s ahead of run5
    # the next hourly run takes hour 6's records, starting right after hour 5's range
    got, ranges, future = _scan(boot, Piece(topic, 0, (h6,), 21, None), run6, 300.0)
    assert got == [(o, h6) for o in range(21, 26)] and ranges == [OffsetRange(topic, 0, hour(6), 21, 26, 5)]
    assert future.count == 0

    # a rerun (fixed piece) is unchanged, whatever the clock says now
    for read_at in (run5, tenth + HOUR_MS):
        got, ranges, future = _scan(boot, Piece(topic, 0, (h5,), 0, 21, True), read_at, 300.0)
        assert got == [(o, h5) for o in range(21)] and ranges == [OffsetRange(topic, 0, hour(5), 0, 21, 21)]
        assert future.count == (1 if read_at == run5 else 0)

    # within the skew (stamped at most 300 s after it is read), the record is taken at its word, as
    # before: it ends hour 5's range; 301 s ahead, it does not
    for ahead_s, end in ((60, TENTH), (300, TENTH), (301, 21)):
        got, ranges, future = _scan(boot, Piece(topic, 0, (h5,), 0, None), tenth - ahead_s * 1000, 300.0)
        assert ranges == [OffsetRange(topic, 0, hour(5), 0, end, end)], ahead_s
        assert future.count == (end == 21)


def test_the_report_is_capped_per_partition(caplog):
    """A partition's first ``FUTURE_SAMPLES`` future-stamped records get a warning each; the count
    covers them all; a task's report repeated by a Spark task re-run counts once."""
    from cdclake.kafka_ranges import FUTURE_SAMPLES, FutureStamped
    from cdclake.land import report_future

    h = ms(hour(5))
    future = FutureStamped("t", 3)
    for off in range(FUTURE_SAMPLES + 5):
        future.add(off, h + AHEAD_MS, 10_800.0, h)
    assert future.count == FUTURE_SAMPLES + 5 and len(future.samples) == FUTURE_SAMPLES
    report = ("t", 3, 0, future.count, list(future.samples))
    with caplog.at_level(logging.WARNING, logger="cdclake.land"):
        assert report_future([report, report, ("u", 0, 4, 1, [(7, h + AHEAD_MS, 10_801.4, h)])], 300.0) == {
            ("t", 3): FUTURE_SAMPLES + 5, ("u", 0): 1}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == FUTURE_SAMPLES + 1 + 2
    assert lines[0] == ("future-stamped record t[3] offset 0: timestamp 2024-01-01T08:00:00+00:00 is 10800 s ahead of "
                        "the time it was read (land.max_future_skew_s 300 s); landed in hour "
                        "2024-01-01T05:00:00+00:00 with its neighbours")
    assert lines[FUTURE_SAMPLES].startswith(f"t[3]: {FUTURE_SAMPLES + 5} future-stamped record(s) landed")
    assert lines[FUTURE_SAMPLES].endswith(f"the first {FUTURE_SAMPLES} are logged above")
    assert "u[0] offset 7" in lines[-2] and "10801 s ahead" in lines[-2] and lines[-1].startswith("u[0]: 1 ")


def _cfg(unique: str, topic: str):
    from cdclake.config import load_pipeline

    return load_pipeline(write_pipeline(f"skew_{unique}", [{"topic": topic, "format": "debezium-json"}],
                                        land={"grace_s": 0}))


def _last_hour(topic: str):
    """The last whole UTC hour before now, as a window of ``topic``."""
    from cdclake.window import HOUR, Window

    end = dt.datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return Window(end - HOUR, end, (topic,))


def _future_warnings(caplog, topic: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "cdclake.land" and "future-stamped" in r.getMessage()
            and topic in r.getMessage()]


def test_land_a_record_three_hours_ahead_holds_nothing_back(stack, spark, unique, caplog):
    """The last whole hour: 21 records, the 10th stamped now + 3 hours. All 21 land in that hour
    (none waits for the wall clock to pass the 10th's timestamp); the 10th keeps its timestamp; the
    land gate passes; a warning names topic, partition, offset and skew; the run metric says 1."""
    from cdclake.catalog import qualified
    from cdclake.cli import run_stage
    from cdclake.gates import run_gate
    from cdclake.lake import RUN_METRICS_TABLE
    from cdclake.land import land

    topic = f"skew.land.{unique}"
    cfg = _cfg(unique, topic)
    window = _last_hour(topic)
    tenth = ms(dt.datetime.now(UTC)) + AHEAD_MS
    records = _hour_of_records(ms(window.start), tenth)
    produce(stack["bootstrap"], topic, records)

    with caplog.at_level(logging.WARNING, logger="cdclake.land"):
        result = run_stage(spark, "land", land, cfg, window)
    assert result == {topic: 21}, "records held back behind the future-stamped one"
    assert result.future_stamped == {topic: 1}
    rows = raw_rows(spark, cfg, topic)
    assert [(o, ts, h) for _, o, ts, h in rows] == [(o, r[1], window.start) for o, r in enumerate(records)]
    assert rows[TENTH][2] == tenth  # keeps its own timestamp
    assert ledger_rows(spark, cfg, topic) == [(0, window.start, 0, 21, 21)]
    assert run_gate("land", cfg, window)["frames"] == {"offsets": 1, "ledger": 1}

    warnings = _future_warnings(caplog, topic)
    (line,) = [w for w in warnings if "offset" in w]
    found = re.search(rf"future-stamped record {re.escape(topic)}\[0\] offset {TENTH}: timestamp \S+ is (\d+) s ahead",
                      line)
    assert found, line
    assert AHEAD_MS / 1000 - 120 < int(found.group(1)) <= AHEAD_MS / 1000
    assert any(w.startswith(f"{topic}[0]: 1 future-stamped record(s) landed") for w in warnings), warnings

    (metric,) = [r.asDict() for r in spark.table(qualified(cfg, RUN_METRICS_TABLE))
                 .where(f"kafka_topic = '{topic}' AND stage = 'land'").collect()]
    assert (metric["records_landed"], metric["future_stamped"]) == (21, 1)

    # a rerun re-reads exactly the ledger range: the same rows, the same ledger, the same report
    before = raw_rows(spark, cfg, topic)
    again = land(spark, cfg, window)
    assert again == {topic: 21} and again.future_stamped == {topic: 1}
    assert raw_rows(spark, cfg, topic) == before and ledger_rows(spark, cfg, topic) == [(0, window.start, 0, 21, 21)]


def test_land_a_record_within_the_skew_keeps_the_running_maximum(stack, spark, unique, caplog):
    """Stamped 60 s after now (the default limit is 300 s), the 10th record is taken at its word as
    before: it is past the hour's end, so the hour's range ends at it; nothing is reported."""
    from cdclake.gates import run_gate
    from cdclake.land import land

    topic = f"skew.within.{unique}"
    cfg = _cfg(unique, topic)
    assert cfg.land.max_future_skew_s == 300
    window = _last_hour(topic)
    produce(stack["bootstrap"], topic, _hour_of_records(ms(window.start), ms(dt.datetime.now(UTC)) + 60_000))

    with caplog.at_level(logging.WARNING, logger="cdclake.land"):
        result = land(spark, cfg, window)
    assert result == {topic: TENTH} and result.future_stamped == {topic: 0}
    assert ledger_rows(spark, cfg, topic) == [(0, window.start, 0, TENTH, TENTH)]
    assert [o for _, o, _, _ in raw_rows(spark, cfg, topic)] == list(range(TENTH))
    assert run_gate("land", cfg, window)["frames"] == {"offsets": 1, "ledger": 1}
    assert _future_warnings(caplog, topic) == []


#: ``bronze.run_metrics`` as versions before ``future_stamped`` created it.
OLD_RUN_METRICS_SCHEMA = (
    "run_at timestamp, pipeline string, stage string, kafka_topic string, window_start timestamp, "
    "window_end timestamp, records_landed bigint, records_parsed bigint, change_rows bigint, "
    "quarantined bigint, control bigint, silver_table string, changes_merged bigint, "
    "keys_upserted bigint, keys_deleted bigint, newest_source_ts timestamp, lag_s double, duration_s double")


def test_run_metrics_table_without_the_column_gets_it(spark, unique):
    """A ``bronze.run_metrics`` made before ``future_stamped`` gets the column when metrics are next
    written; its old rows read it as null. Only land rows have it (other stages: null; a land result
    without future-stamped counts: null)."""
    from cdclake.catalog import qualified
    from cdclake.land import LandResult
    from cdclake.lake import RUN_METRICS_SCHEMA, RUN_METRICS_TABLE, ddl, ensure_run_metrics_table
    from cdclake.metrics import METRIC_COLUMNS, metric_rows, record_run
    from cdclake.results import NormalizeResult, TopicCounts

    topic = f"skew.metrics.{unique}"
    cfg = _cfg(unique, topic)
    window = _last_hour(topic)
    assert METRIC_COLUMNS[-1] == "future_stamped" and ddl(RUN_METRICS_SCHEMA).endswith("future_stamped bigint")
    now = dt.datetime.now(UTC)
    (norm,) = metric_rows(cfg, "normalize", window, NormalizeResult({topic: TopicCounts(raw=1, changes=1)}), now, 1.0)
    (plain,) = metric_rows(cfg, "land", window, LandResult({topic: 3}), now, 1.0)
    (counted,) = metric_rows(cfg, "land", window, LandResult({topic: 3}, {topic: 2}), now, 1.0)
    assert (norm["future_stamped"], plain["future_stamped"], counted["future_stamped"]) == (None, None, 2)

    # the session's table is set aside; an old-schema table with one row takes its place
    table = qualified(cfg, RUN_METRICS_TABLE)
    aside = f"{RUN_METRICS_TABLE}_aside_{unique}"  # RENAME TO names no catalog
    ensure_run_metrics_table(spark, cfg)
    spark.sql(f"ALTER TABLE {table} RENAME TO {aside}")
    try:
        spark.sql(f"CREATE TABLE {table} ({OLD_RUN_METRICS_SCHEMA}) USING iceberg PARTITIONED BY (days(run_at)) "
                  "TBLPROPERTIES ('format-version'='2')")
        old_at = dt.datetime(2024, 1, 1, 0, 30, tzinfo=UTC)
        spark.createDataFrame([(old_at, "old", "land", topic, window.start, window.end, 7) + (None,) * 10 + (1.0,)],
                              OLD_RUN_METRICS_SCHEMA).writeTo(table).append()
        assert "future_stamped" not in spark.table(table).columns

        rows = record_run(spark, cfg, "land", window, LandResult({topic: 21}, {topic: 1}), 2.0)
        assert rows is not None and rows[0]["future_stamped"] == 1
        assert spark.table(table).columns[-1] == "future_stamped"
        got = sorted((r.pipeline, r.records_landed, r.future_stamped)
                     for r in spark.table(table).where(f"kafka_topic = '{topic}'").collect())
        assert got == sorted([(cfg.name, 21, 1), ("old", 7, None)])
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
        spark.sql(f"ALTER TABLE {qualified(cfg, aside)} RENAME TO {RUN_METRICS_TABLE}")
