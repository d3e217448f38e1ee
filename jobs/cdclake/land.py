"""Stage 1, land: copy each topic's hour offset ranges from Kafka into the raw Iceberg table.

``raw.kafka_records`` columns (:data:`cdclake.lake.RAW_SCHEMA`): kafka_topic string,
kafka_partition int, kafka_offset bigint, kafka_timestamp_ms bigint (record timestamp, ms), key
binary, value binary (null for a Kafka tombstone; kept), headers array<struct<name string, value
binary>>, landed_hour timestamp (UTC hour of the run that took the record; see
:mod:`cdclake.kafka_ranges`). Partitioned by (kafka_topic, hours(landed_hour)).

``raw.land_manifest`` is the *offset ledger* (:data:`cdclake.lake.MANIFEST_SCHEMA`): one row per
topic partition and landed hour, empty hours included: kafka_topic, kafka_partition, landed_hour,
start_offset, end_offset (exclusive), records (bigint), landed_at timestamp. A partition's ranges tile its log: a new hour starts
exactly at the end offset of the range before it (:func:`cdclake.kafka_ranges.plan_partition`), so
a record appended late, stamped inside an hour already landed, lands in the next hour that is
landed, and a run after hours the scheduler missed lands every record since the last range.
Partitioned like the raw table, so that any window can be replaced by an overwrite whose filter
matches whole files.

Re-landing a window re-reads exactly its ledger ranges and replaces exactly that window's rows for
the landed topics (one atomic Iceberg overwrite by filter), so reruns and backfills are
idempotent.

A record stamped more than ``land.max_future_skew_s`` seconds after the reading task read it (a
producer whose clock runs fast) is *future-stamped*: it does not end its hour's range, lands with
its neighbours and keeps its own timestamp (:func:`cdclake.kafka_ranges.scan_piece`). Land logs a
warning per such record (the first :data:`cdclake.kafka_ranges.FUTURE_SAMPLES` of each partition:
topic, partition, offset, skew in seconds) and a count per partition, and returns the counts per
topic (:class:`cdclake.results.LandResult`) for the ``future_stamped`` run metric.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import time
from typing import TYPE_CHECKING, Optional

from cdclake import kafka_ranges, kafka_read
from cdclake.config import PipelineConfig
from cdclake.errors import LandingShrinks
from cdclake.faults import kill_point
from cdclake.kafka_ranges import FutureStamped, OffsetRange, Piece
from cdclake.lake import (FILES_DDL, MANIFEST_SCHEMA, MANIFEST_TABLE, RAW_SCHEMA, RAW_TABLE, HourFileWriter,
                          arrow_schema, commit_hours, data_files, ensure_raw_tables, file_batch, hour_table,
                          ledger_around, write_local)
from cdclake.results import LandResult
from cdclake.window import UTC, Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def shrinking(ranges: list[OffsetRange], landed: dict[tuple[str, int, int], int]) -> Optional[str]:
    """The reason to refuse a re-landing, or None: the first range of ``ranges`` (as read now) that
    holds fewer records than the ledger says its hour landed before (``landed``: records per
    ``(topic, partition, hour_ms)``), as one line naming topic, partition, hour and both counts."""
    for r in ranges:
        before = landed.get((r.topic, r.partition, int(r.hour.timestamp() * 1000)))
        if before is not None and r.records < before:
            return (f"{r.topic}[{r.partition}] hour {r.hour.isoformat()}: Kafka now holds {r.records} records where "
                    f"{before} were landed before (retention or compaction); refusing to overwrite the landed hour "
                    "(bronze and silver are built from it)")
    return None


def settle_seconds(cfg: PipelineConfig, window: Window, now: Optional[dt.datetime] = None) -> float:
    """Seconds to wait before landing ``window``: until ``land.grace_s`` after its end (0 when past)."""
    now = now or dt.datetime.now(UTC)
    return max(0.0, (window.end - now).total_seconds() + cfg.land.grace_s)


def plan(spark: "SparkSession", cfg: PipelineConfig, window: Window, parts: list[tuple[str, int]]
         ) -> tuple[dict[tuple[str, int], list[Piece]], dict[tuple[str, int, int], int]]:
    """``(pieces, landed)``: the pieces that land ``window`` for each ``(topic, partition)`` of
    ``parts``, from the ledger, and the records the ledger says each of the window's landed hours
    holds, ``{(topic, partition, hour_ms): records}``.

    The ledger gives, per partition, its ranges inside the window, the end of its latest range
    before the window and the start of its earliest range after it
    (:func:`cdclake.kafka_ranges.plan_partition`), as :func:`cdclake.lake.ledger_around` reads
    them: the window's files and the hour on each side of it, and every earlier (later) hour only
    for the topics of partitions without a range in the hour before (after) it.
    """
    near = _ledger_bounds(ledger_around(cfg, parts, window.start, window.end), window)
    inside: dict[tuple[str, int], dict[int, tuple[int, int]]] = {}
    landed: dict[tuple[str, int, int], int] = {}
    for tp, (_, _, ranges) in near.items():
        for h, s_off, e_off, n in ranges:
            inside.setdefault(tp, {})[h] = (s_off, e_off)
            landed[(*tp, h)] = n
    hours = [int(h.timestamp() * 1000) for h in window.hours()]
    pieces = {}
    for tp in parts:
        prev_end, next_start, _ = near.get(tp, (None, None, []))
        pieces[tp] = kafka_ranges.plan_partition(tp[0], tp[1], hours, inside.get(tp, {}), prev_end, next_start)
    return pieces, landed


def _ledger_bounds(ledger, window: Window) -> dict[tuple[str, int], tuple[Optional[int], Optional[int], list]]:
    """Per ``(topic, partition)`` of the ledger rows ``ledger`` (a pyarrow table): the end offset
    of the latest range before ``window``, the start offset of the earliest range after it (None:
    none), and the ranges inside it as ``(hour_ms, start, end, records)``, in hour order."""
    start_ms, end_ms = (int(t.timestamp() * 1000) for t in (window.start, window.end))
    out: dict[tuple[str, int], list] = {}
    cols = [ledger.column(c).to_pylist() for c in ("kafka_topic", "kafka_partition", "landed_hour", "start_offset",
                                                   "end_offset", "records")]
    for topic, p, hour, s_off, e_off, n in sorted(zip(*cols), key=lambda r: (r[0], r[1], r[2])):
        h = int(hour.timestamp() * 1000)
        b = out.setdefault((topic, p), [None, None, []])
        if h < start_ms:
            b[0] = e_off  # the latest before, in hour order
        elif h >= end_ms:
            if b[1] is None:
                b[1] = s_off  # the earliest after
        else:
            b[2].append((h, s_off, e_off, n))
    return {tp: (b[0], b[1], b[2]) for tp, b in out.items()}


def _ledger_rows(reported: list[tuple], plans: dict[tuple[str, int], list[Piece]]) -> list[OffsetRange]:
    """The ranges the reading tasks reported, merged into one per planned partition and hour.

    ``reported``: ``(topic, partition, hour_ms, start, end, records)`` per share of a partition's
    hour (:func:`cdclake.kafka_read.split_plans`; one share when it was not cut). A task re-run by
    Spark reports its ranges again: identical reports are one; differing ones (the log moved
    between two reads) raise RuntimeError, as the raw rows may not match them. The shares of an
    hour must tile it, each starting where the one before it ends (RuntimeError otherwise); the
    merged range runs from the first's start to the last's end, with their records added up.
    """
    found: dict[tuple, tuple] = {}
    for t, p, h, s, e, n in reported:
        if found.setdefault((t, p, h, s), (e, n)) != (e, n):
            hour = dt.datetime.fromtimestamp(h / 1000, UTC).isoformat()
            raise RuntimeError(f"{t}[{p}] hour {hour} was read twice with different offset ranges from {s} "
                               f"({found[(t, p, h, s)]} and {(e, n)}, end and records); run the window again")
    merged: dict[tuple, OffsetRange] = {}
    for (t, p, h, s), (e, n) in sorted(found.items()):
        r = merged.get((t, p, h))
        if r is not None and r.end != s:
            raise RuntimeError(f"{t}[{p}] hour {r.hour.isoformat()}: its shares do not tile its range "
                               f"(one ends at {r.end}, the next starts at {s}); run the window again")
        merged[(t, p, h)] = OffsetRange(t, p, dt.datetime.fromtimestamp(h / 1000, UTC), s if r is None else r.start, e,
                                        n + (0 if r is None else r.records))
    want = {(tp[0], tp[1], h) for tp, pieces in plans.items() for piece in pieces for h in piece.hours}
    if set(merged) != want:
        raise RuntimeError(f"reading tasks reported {len(merged)} ledger ranges where {len(want)} were planned")
    return [merged[k] for k in sorted(merged)]


def report_future(reported: list[tuple], skew_s: float) -> dict[tuple[str, int], int]:
    """Log the future-stamped records the reading tasks reported and return their count per
    ``(topic, partition)``.

    ``reported``: ``(topic, partition, start, count, samples)`` per share of a partition that
    landed any (:class:`cdclake.kafka_ranges.FutureStamped`; ``start`` the share's first offset; a
    task re-run by Spark reports its share again: one report per share counts). Per partition, one
    warning per sample (the first :data:`cdclake.kafka_ranges.FUTURE_SAMPLES` over its shares),
    naming topic, partition, offset, timestamp and skew in seconds, then one with its count.
    """
    counts: dict[tuple[str, int], int] = {}
    samples: dict[tuple[str, int], list] = {}
    seen = set()
    for t, p, start, n, share_samples in sorted(reported, key=lambda r: (r[0], r[1], r[2])):
        if (t, p, start) in seen:
            continue
        seen.add((t, p, start))
        counts[(t, p)] = counts.get((t, p), 0) + n
        samples.setdefault((t, p), []).extend(share_samples)
    for (t, p), n in counts.items():
        logged = samples[(t, p)][:kafka_ranges.FUTURE_SAMPLES]
        for off, ts, skew, hour_ms in logged:
            log.warning("future-stamped record %s[%d] offset %d: timestamp %s is %.0f s ahead of the time it was read "
                        "(land.max_future_skew_s %.0f s); landed in hour %s with its neighbours",
                        t, p, off, dt.datetime.fromtimestamp(ts / 1000, UTC).isoformat(), skew, skew_s,
                        dt.datetime.fromtimestamp(hour_ms / 1000, UTC).isoformat())
        log.warning("%s[%d]: %d future-stamped record(s) landed (stamped more than %.0f s ahead of the time they were "
                    "read; a producer clock running fast?)%s", t, p, n, skew_s,
                    f"; the first {len(logged)} are logged above" if n > len(logged) else "")
    return counts


#: Raw columns written without Parquet dictionary encoding: keys and values seldom repeat.
RAW_PLAIN_COLUMNS = ("key", "value")


def ledger_files(cfg: PipelineConfig, rows: list[tuple]) -> list:
    """The offset ledger's ``rows`` (tuples of :data:`cdclake.lake.MANIFEST_SCHEMA`) written by
    the driver as the ledger's data files (one per topic and hour); pyiceberg ``DataFile`` s."""
    import pyarrow as pa

    schema = arrow_schema(MANIFEST_SCHEMA)
    columns = list(zip(*rows)) if rows else [[] for _ in schema]
    return write_local(hour_table(cfg, MANIFEST_TABLE),
                       [pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, schema)], schema=schema)])


def land(spark: "SparkSession", cfg: PipelineConfig, window: Window) -> LandResult:
    """Land every selected topic's records of ``window`` into the raw table; return counts per topic:
    a :class:`cdclake.results.LandResult`, the records landed per topic in its ``records`` (it reads
    as ``{topic: records}``) and the future-stamped records per topic in its ``future_stamped``
    (logged: :func:`report_future`; ``land.max_future_skew_s``).

    Waits first until ``land.grace_s`` seconds after the window's end (:func:`settle_seconds`).
    Plans each partition's offset ranges from the ledger (:func:`plan`), cuts a large partition's
    hour into shares (:func:`cdclake.kafka_read.split_plans`: a topic is read by twice as many tasks
    as cores), and deals the shares to at most one Spark task per core (twice as many when an hour
    was cut), each a group of about equal records (:func:`cdclake.kafka_read.task_groups`) read
    with one confluent-kafka consumer into Arrow batches
    (:func:`cdclake.kafka_read.read_partitions`) that the task writes as the raw table's data files
    itself (:class:`cdclake.lake.HourFileWriter`: no record crosses into the JVM), reporting the
    exact range of every share and hour and returning only its files' metadata. The driver merges
    the shares' ranges (:func:`_ledger_rows`), refuses a landed hour that now holds fewer records
    (:func:`shrinking`), then commits the files in one atomic overwrite of the window in the raw
    table (:func:`cdclake.lake.commit_hours`), then the ledger's rows of the window, which it writes
    itself (:func:`ledger_files`). Raises ``KafkaUnavailable`` (broker unreachable, topic missing,
    reading stalls) and :class:`LandingShrinks`: a re-read landed hour holds fewer records than
    the ledger says it landed, and nothing is committed; a landed partition that Kafka no longer
    has is refused before any read.
    """
    from pyspark.accumulators import AccumulatorParam

    wait = settle_seconds(cfg, window)
    if wait > 0:
        log.info("waiting %.0f s before landing %s: land.grace_s is %.0f s after the window's end", wait, window,
                 cfg.land.grace_s)
        time.sleep(wait)
    topics = list(window.topics or cfg.topics())
    k = cfg.kafka
    t0 = time.monotonic()
    parts = kafka_ranges.partitions(k.bootstrap_servers, topics, k.timeout_s, k.client)
    ensure_raw_tables(spark, cfg)
    plans, landed = plan(spark, cfg, window, parts)
    log.info("land %s: %d partitions of %d topics planned from the ledger in %.1f s", window, len(parts), len(topics),
             time.monotonic() - t0)
    bootstrap, timeout, client = k.bootstrap_servers, max(30.0, k.timeout_s), dict(k.client)
    skew_s = float(cfg.land.max_future_skew_s)
    schema = arrow_schema(RAW_SCHEMA)
    raw_table = hour_table(cfg, RAW_TABLE, plain=RAW_PLAIN_COLUMNS)

    class _Ranges(AccumulatorParam):
        def zero(self, value):
            return []

        def addInPlace(self, a, b):
            a.extend(b)
            return a

    driver = os.getpid()
    cores = spark.sparkContext.defaultParallelism
    weights = kafka_read.estimate_records(bootstrap, plans, timeout, client)
    # a landed partition Kafka no longer has (the topic recreated with fewer) holds no record now
    reason = shrinking([OffsetRange(t, p, dt.datetime.fromtimestamp(h / 1000, UTC), 0, 0, 0)
                        for t, p, h in landed if (t, p) not in plans], landed)
    if reason is not None:
        raise LandingShrinks(reason)

    def read_shares(uncut: frozenset) -> tuple[list, list, list, set]:
        """One Spark job reading the window's shares: its files, ledger ranges, future-stamped
        reports and the partitions a share of which overran."""
        shares, share_weights = kafka_read.split_plans(bootstrap, plans, weights, 2 * cores, timeout, client,
                                                       uncut=uncut)
        # a cut hour is dealt to twice as many tasks as cores, so that one slow share does not hold the stage
        groups = kafka_read.task_groups(list(shares), share_weights, 2 * cores if len(shares) > len(plans) else cores)
        reported = spark.sparkContext.accumulator([], _Ranges())
        reported_future = spark.sparkContext.accumulator([], _Ranges())
        overran = spark.sparkContext.accumulator([], _Ranges())

        def done(topic: str, p: int, ranges: list[OffsetRange], future: FutureStamped, overrun: bool) -> None:
            if overrun:
                overran.add([(topic, p)])
                return
            reported.add([(r.topic, r.partition, int(r.hour.timestamp() * 1000), r.start, r.end, r.records)
                          for r in ranges])
            if future.count:
                reported_future.add([(topic, p, ranges[0].start, future.count, list(future.samples))])

        def read(batches):
            files = HourFileWriter(raw_table)
            for b in batches:
                for g in b.column(0).to_pylist():
                    for rows in kafka_read.read_partitions(bootstrap, [shares[sh] for sh in groups[g]], schema, done,
                                                           timeout, client, max_future_skew_s=skew_s):
                        files.add(rows)
            written = files.close()
            kill_point("land.writing", driver)
            yield file_batch(written)

        # one row, and so one task, per group of shares
        todo = spark.createDataFrame(spark.sparkContext.parallelize([(g,) for g in range(len(groups))],
                                                                    max(1, len(groups))), "task_group int")
        spark.sparkContext.setJobDescription(f"land: {len(parts)} partitions of {len(topics)} topics, {window}")
        try:
            t0 = time.monotonic()
            written = data_files(todo.mapInArrow(read, FILES_DDL).collect())
            log.info("land %s: %d tasks read %d shares of the partitions and wrote %d raw data files in %.1f s", window,
                     len(groups), len(shares), len(written), time.monotonic() - t0)
        finally:
            spark.sparkContext.setJobDescription(None)
        return written, reported.value, reported_future.value, set(overran.value)

    written, reported, reported_future, overran = read_shares(frozenset())
    if overran:  # an hour ended before a cut: its shares cannot say where; read the window again, those uncut
        log.info("land %s: %d partitions (%s) could not be read in shares (the hour ended before a cut, or a first "
                 "landing's first share held nothing of it); reading the window again with them uncut", window,
                 len(overran), ", ".join(f"{t}[{p}]" for t, p in sorted(overran)[:5]))
        for f in written:
            raw_table.io.delete(f.file_path)
        written, reported, reported_future, overran = read_shares(frozenset(overran))
    ledger = _ledger_rows(reported, plans)
    reason = shrinking(ledger, landed)
    if reason is not None:  # before the overwrite: it commits nothing
        raise LandingShrinks(reason)
    t0 = time.monotonic()
    commit_hours(cfg, RAW_TABLE, window, topics, written, "land")
    kill_point("land.raw_written")

    now = dt.datetime.now(UTC)
    rows = [(r.topic, r.partition, r.hour, r.start, r.end, r.records, now) for r in ledger]
    commit_hours(cfg, MANIFEST_TABLE, window, topics, ledger_files(cfg, rows), "land")
    log.info("land %s: raw data files and the ledger's %d ranges committed in %.1f s", window, len(rows),
             time.monotonic() - t0)
    records, future = {t: 0 for t in topics}, {t: 0 for t in topics}
    for (t, _), n in report_future(reported_future, skew_s).items():
        future[t] += n
    for r in ledger:
        if r.records or r.end > r.start:
            log.info("landed %s[%d] hour %s: offsets %d..%d, %d records", r.topic, r.partition, r.hour.isoformat(),
                     r.start, r.end, r.records)
        records[r.topic] += r.records
    for t, n in records.items():
        log.info("landed %d records of topic %s for %s", n, t, window)
    return LandResult(records, future)
