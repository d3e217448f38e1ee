"""Land's reading tasks: shares of the window's topic partitions, read by one consumer each, into
Arrow batches.

A Spark task costs the same for ten records as for a million: a Python worker started, a Kafka
consumer made and told the topics' metadata, an Iceberg file writer opened per table partition. One
topic per source table (Debezium's default) makes a window hundreds of small partitions; a task per
partition paid that cost hundreds of times. Land groups the window's partitions into at most one
task per core (:func:`task_groups`), by the records each is expected to hold
(:func:`estimate_records`), and each task reads its partitions at once with one consumer
(:func:`read_partitions`), each record judged by its partition's
:class:`cdclake.kafka_ranges.PieceScan` as :func:`cdclake.kafka_ranges.scan_piece`, the partition
read alone, judges it; so the ledger's ranges are those a task per partition reported. The other
way round, a large partition's hour is cut into shares that several tasks read
(:func:`split_plans`), so that a topic of one partition is not read by one core alone.
"""
from __future__ import annotations

import datetime as dt
import heapq
import logging
import time
from typing import Callable, Iterator, Optional

from cdclake.errors import KafkaUnavailable
from cdclake.kafka_ranges import (HOUR_MS, FutureStamped, OffsetRange, Piece, PieceScan, consumer, piece_start,
                                  scan_piece)
from cdclake.window import UTC

log = logging.getLogger(__name__)

#: Arrow batches of :func:`read_partitions` close at this many bytes of keys and values, or at
#: :data:`ARROW_BATCH_RECORDS` records.
ARROW_BATCH_BYTES = 16 * 1024 * 1024
ARROW_BATCH_RECORDS = 20_000

Partition = tuple[str, int]


def _offsets(cons, wanted: list[tuple[str, int, int]], timeout_s: float) -> dict[Partition, Optional[int]]:
    """``offsets_for_times`` of ``(topic, partition, timestamp_ms)`` items in one request per broker:
    ``{(topic, partition): offset}``, None where the broker has none (or reports an error for the
    partition). Raises ``KafkaException``."""
    from confluent_kafka import TopicPartition

    if not wanted:
        return {}
    found = cons.offsets_for_times([TopicPartition(t, p, ts) for t, p, ts in wanted], timeout=timeout_s)
    return {(f.topic, f.partition): (f.offset if f.error is None and f.offset >= 0 else None) for f in found}


def _first_starts(cons, wanted: list[tuple[str, int, int]], timeout_s: float,
                  ends: Optional[dict[Partition, Optional[int]]] = None) -> dict[Partition, Optional[int]]:
    """Where first landings start reading, for ``(topic, partition, hour_ms)`` items: the offset
    ``offsets_for_times`` gives for the hour, or the end of the log when no record is stamped at
    or after it (``ends``: the log ends when already known; else asked in one request per broker);
    None where the broker answers neither. The batched form of
    :func:`cdclake.kafka_ranges.piece_start`'s rule. Raises ``KafkaException``."""
    found = _offsets(cons, wanted, timeout_s)
    if ends is None:
        ends = _offsets(cons, [(t, p, -1) for t, p, _ in wanted if found.get((t, p)) is None], timeout_s)
    return {(t, p): found.get((t, p)) if found.get((t, p)) is not None else ends.get((t, p)) for t, p, _ in wanted}


def estimate_records(bootstrap: str, plans: dict[Partition, list[Piece]], timeout_s: float = 30.0,
                     client: Optional[dict] = None) -> dict[Partition, int]:
    """The offsets each partition's pieces of ``plans`` span, as the broker's log end and first
    offsets stamped at a first landing's hour say now (two requests per broker): a piece from its
    start (or the first landing's offset) to its stop (or the end of the log). Only a weight for
    :func:`task_groups`; ``{}`` when the broker does not answer (the reads then report it)."""
    from confluent_kafka import KafkaException

    cons = consumer(bootstrap, client)
    try:
        ends = _offsets(cons, [(t, p, -1) for t, p in plans], timeout_s)  # -1: the end of the log
        firsts = _first_starts(cons, [(t, p, ps[0].hours[0]) for (t, p), ps in plans.items()
                                      if ps and ps[0].start is None], timeout_s, ends)
    except KafkaException as exc:
        log.warning("could not weigh %d partitions by their records (%s); grouped by count", len(plans), exc)
        return {}
    finally:
        cons.close()
    out = {}
    for tp, pieces in plans.items():
        end = ends.get(tp) or 0
        n = 0
        for piece in pieces:
            start = piece.start if piece.start is not None else firsts.get(tp)
            start = end if start is None else start  # the broker answered neither
            n += max(0, (piece.stop if piece.stop is not None else end) - start)
        out[tp] = n
    return out


def task_groups(parts: list[Partition], weights: dict[Partition, int], tasks: int) -> list[list[Partition]]:
    """``parts`` in at most ``tasks`` groups of about equal weight (records, :func:`estimate_records`;
    a partition without one weighs as the heaviest known, at least 1): the heaviest partition first,
    each to the lightest group so far (ties: the one with fewer partitions). No group is empty;
    each lists its partitions in ``parts``' order."""
    if not parts:
        return []
    default = max([1, *weights.values()])
    heap = [(0, 0, i) for i in range(max(1, min(tasks, len(parts))))]
    groups: list[list[Partition]] = [[] for _ in heap]
    order = {tp: i for i, tp in enumerate(parts)}
    for tp in sorted(parts, key=lambda tp: (-weights.get(tp, default), order[tp])):
        load, n, i = heapq.heappop(heap)
        groups[i].append(tp)
        heapq.heappush(heap, (load + weights.get(tp, default), n + 1, i))
    return [sorted(g, key=order.__getitem__) for g in groups]


class _Partition:
    """One partition of a reading task: its pieces still to read, the scan of the current one, its
    ledger ranges so far and its future-stamped records."""

    def __init__(self, pieces: list[Piece], start: int, max_future_skew_s: Optional[float]):
        self.topic, self.partition = pieces[0].topic, pieces[0].partition
        self.pieces, self.skew = list(pieces), max_future_skew_s
        self.ranges: list[OffsetRange] = []
        self.future = FutureStamped(self.topic, self.partition)
        self.scan = PieceScan(self.pieces.pop(0), start, max_future_skew_s, self.future)
        self.log_end: Optional[int] = None
        self.overrun = False
        self._settle()

    def _settle(self) -> None:
        """Close the pieces that are done, up to the first with records left to read; once none is
        left, the partition is finished (:attr:`finished`)."""
        while self.scan.done:
            self.ranges.extend(self.scan.ranges())
            self.overrun = self.overrun or self.scan.overrun
            if not self.pieces:
                self.pieces = None
                return
            piece = self.pieces.pop(0)  # starts where the one before it stopped (plan_partition)
            self.scan = PieceScan(piece, piece.start, self.skew, self.future)
            if self.log_end is not None and not self.scan.done:
                self.scan.at_end(max(piece.start, self.log_end))  # nothing after the end of the log read

    @property
    def finished(self) -> bool:
        return self.pieces is None

    def feed(self, offset: int, timestamp_ms: int) -> Optional[int]:
        """The landed hour of a record of this partition (None: not landed)."""
        while True:
            hour = self.scan.feed(offset, timestamp_ms)
            if not self.scan.done:
                return hour
            self._settle()
            if self.finished:
                return None

    def at_end(self, offset: int) -> None:
        self.log_end = offset
        self.scan.at_end(offset)
        self._settle()


def _contiguous(pieces: list[Piece]) -> bool:
    """Whether each piece after the first starts where the one before it stops (as
    :func:`cdclake.kafka_ranges.plan_partition` plans them): one read from the first start."""
    return all(b.start is not None and a.stop == b.start for a, b in zip(pieces, pieces[1:]))


#: A one-hour piece of a partition is read by several tasks (:func:`split_plans`) in shares of at
#: least this many records.
SPLIT_RECORDS = 50_000

Share = tuple[str, int, int]


def split_plans(bootstrap: str, plans: dict[Partition, list[Piece]], weights: dict[Partition, int], tasks: int,
                timeout_s: float = 30.0, client: Optional[dict] = None,
                min_records: Optional[int] = None, uncut: frozenset = frozenset()
                ) -> tuple[dict[Share, list[Piece]], dict[Share, int]]:
    """``plans`` as shares for the reading tasks, and each share's weight: ``({(topic, partition,
    i): pieces}, {(topic, partition, i): records})``.

    A partition whose plan is one piece of one hour (an hourly run, a rerun of a ledger range, a
    first landing) and at least ``2 * min_records`` records (``weights``,
    :func:`estimate_records`; ``min_records`` default :data:`SPLIT_RECORDS`) is cut into up to
    ``ceil(tasks / partitions of its topic)`` shares of at least ``min_records`` offsets, so that a
    topic of one partition is read by ``tasks`` tasks: a rerun's range at even offsets; a new
    hour's span up to the first record stamped at or after the hour's end (``offsets_for_times``;
    the end of the log when there is none or the broker's answer is no later than the start),
    every share but the last ``bounded`` at its stop (:class:`cdclake.kafka_ranges.Piece`: one that
    meets the hour's end overruns, and land reads the hour again uncut) and the last open, reading
    on to the hour's end as a whole partition does. A first landing is cut from where
    ``offsets_for_times`` says its hour starts; its first share finds its start itself and skips
    what is stamped before the hour, as a whole partition does, and overruns when it ends before a
    record of the hour raised the running maximum into it (the shares after it would not skip).
    Every other partition is one share, ``i`` 0. The shares of a partition's hour tile its range,
    so their ledger ranges add up to the one a single read reports
    (:func:`cdclake.land._ledger_rows`). When the broker does not answer, nothing is cut; nor are
    the partitions of ``uncut``.
    """
    from confluent_kafka import KafkaException

    min_records = min_records or SPLIT_RECORDS
    per_topic: dict[str, int] = {}
    for t, _ in plans:
        per_topic[t] = per_topic.get(t, 0) + 1
    want: dict[Partition, int] = {}
    for tp, pieces in plans.items():
        k = min(-(-tasks // per_topic[tp[0]]), weights.get(tp, 0) // min_records)
        if k >= 2 and len(pieces) == 1 and len(pieces[0].hours) == 1 and tp not in uncut:
            want[tp] = k
    begins = {tp: plans[tp][0].start for tp in want}
    limits = {tp: plans[tp][0].stop for tp in want if plans[tp][0].stop is not None}
    open_ = [tp for tp in want if tp not in limits]
    if open_:
        cons = consumer(bootstrap, client)
        try:
            ends = _offsets(cons, [(t, p, -1) for t, p in open_], timeout_s)
            # a first landing starts where offsets_for_times says its hour starts
            begins.update(_first_starts(cons, [(t, p, plans[(t, p)][0].hours[0]) for t, p in open_
                                               if begins[(t, p)] is None], timeout_s, ends))
            found = _offsets(cons, [(t, p, plans[(t, p)][0].hours[0] + HOUR_MS) for t, p in open_], timeout_s)
        except KafkaException as exc:
            log.warning("could not find where %d partitions' hours end (%s); each read by one task", len(open_), exc)
            found, ends = {}, {}
        finally:
            cons.close()
        for tp in open_:  # a broker that answers offsets_for_times with the log's start tells nothing
            begin = begins.get(tp)
            limit = found.get(tp) if begin is not None and (found.get(tp) or -1) > begin else ends.get(tp)
            if limit is not None and begin is not None:
                limits[tp] = limit
    shares: dict[Share, list[Piece]] = {}
    out_weights: dict[Share, int] = {}
    for tp, pieces in plans.items():
        piece = pieces[0]
        limit, begin = limits.get(tp), begins.get(tp)
        k = 0 if limit is None or begin is None else min(want.get(tp, 0), (limit - begin) // min_records)
        if k < 2:
            shares[(*tp, 0)] = pieces
            out_weights[(*tp, 0)] = weights.get(tp, 0)
            continue
        cuts = [begin + i * (limit - begin) // k for i in range(k)]
        for i, start in enumerate(cuts):
            last = i == k - 1
            stop = piece.stop if last else cuts[i + 1]
            # a first landing's first share finds its start itself, skipping what is stamped before its hour
            shares[(*tp, i)] = [Piece(piece.topic, piece.partition, piece.hours, piece.start if i == 0 else start, stop,
                                      piece.fixed, bounded=not piece.fixed and not last)]
            out_weights[(*tp, i)] = (limit if last else stop) - start
        log.info("%s[%d] hour %s: offsets %d.. read by %d tasks, split at %s", tp[0], tp[1],
                 dt.datetime.fromtimestamp(piece.hours[0] / 1000, UTC).isoformat(), begin, k, cuts[1:])
    return shares, out_weights


def _named(parts: list[Partition]) -> str:
    """``topic[partition]`` of the first five of ``parts``, then `` ...``, and their count."""
    return f"{', '.join(f'{t}[{p}]' for t, p in parts[:5])}{' ...' if len(parts) > 5 else ''} ({len(parts)} partitions)"


def read_partitions(bootstrap: str, plans: list[list[Piece]], schema,
                    done: Callable[[str, int, list[OffsetRange], FutureStamped, bool], None],
                    timeout_s: float = 30.0,
                    client: Optional[dict] = None, after_batch=None,
                    max_future_skew_s: Optional[float] = None) -> Iterator:
    """The records of ``plans`` (each the pieces of one topic partition, in offset order) as pyarrow
    ``RecordBatch`` es, every partition read at once by one consumer.

    The consumer is assigned every partition at its first offset (first landings' offsets looked up
    in one request per broker), so that the broker sends many partitions in each fetch; each
    record goes to its partition's :class:`cdclake.kafka_ranges.PieceScan`, which decides its
    landed hour and where the piece ends, exactly as :func:`cdclake.kafka_ranges.scan_piece` reading
    the partition alone; a finished partition is paused. A partition whose pieces do not follow
    one another (not as :func:`cdclake.kafka_ranges.plan_partition` plans them), and a second
    share of a partition (:func:`split_plans`), is read alone, by ``scan_piece``, after the others.

    ``schema`` is the Arrow form of ``cdclake.lake.RAW_SCHEMA`` (kafka_topic string, kafka_partition
    int32, kafka_offset int64, kafka_timestamp_ms int64, key binary, value binary, headers
    list<struct<name string, value binary>>, landed_hour timestamp[us, UTC]); a batch may hold
    records of several partitions, holds at most :data:`ARROW_BATCH_RECORDS` records and closes once
    its keys and values pass :data:`ARROW_BATCH_BYTES`; headers become ``{name, value}`` items (an
    empty list when there are none), ``landed_hour`` the start of the record's landed hour. Once a
    partition is read, ``done(topic, partition, ranges, future, overrun)`` gets its ledger ranges,
    its future-stamped records (``max_future_skew_s``, as in ``scan_piece``) and whether a
    ``bounded`` share overran (:class:`cdclake.kafka_ranges.Piece`; its ranges are void), before
    the batch holding its last records is yielded: ``done`` may raise to fail the task. ``after_batch()``, when
    given, is called after each batch was taken. Raises :class:`cdclake.errors.KafkaUnavailable`:
    the broker reports an error, or neither a record nor the end of a log arrives for
    ``timeout_s`` seconds (the message names the partitions still being read).
    """
    import pyarrow as pa
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    names = [f.name for f in schema]
    assert names == ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp_ms", "key", "value",
                     "headers", "landed_hour"], names
    plans = [ps for ps in plans if ps]
    if not plans:
        return
    cols: tuple[list, ...] = ([], [], [], [], [], [], [], [])
    topics, parts, offsets, stamps, keys, values, headers, hours_us = cols
    size = 0

    def add(m, topic: str, partition: int, hour_ms: int) -> Optional[pa.RecordBatch]:
        nonlocal size
        key, value, hs = m.key(), m.value(), m.headers()
        topics.append(topic)
        parts.append(partition)
        offsets.append(m.offset())
        stamps.append(m.timestamp()[1])
        keys.append(key)
        values.append(value)
        headers.append([{"name": n, "value": v} for n, v in hs] if hs else [])
        hours_us.append(hour_ms * 1000)
        size += (len(key) if key else 0) + (len(value) if value else 0)
        if size >= ARROW_BATCH_BYTES or len(offsets) >= ARROW_BATCH_RECORDS:
            size = 0
            return flush()
        return None

    def flush():
        out = pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(cols, schema)], schema=schema)
        for c in cols:
            c.clear()
        return out

    together, alone, seen = [], [], set()
    for ps in plans:  # two shares of one partition (split_plans): the second is read alone
        tp = (ps[0].topic, ps[0].partition)
        (together if _contiguous(ps) and tp not in seen else alone).append(ps)
        seen.add(tp)
    cons = consumer(bootstrap, client)
    try:
        wanted = [(ps[0].topic, ps[0].partition, ps[0].hours[0]) for ps in together if ps[0].start is None]
        try:
            firsts = _first_starts(cons, wanted, timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailable(f"{_named([(t, p) for t, p, _ in wanted])}: the offsets where their first "
                                   f"landings start not found: {exc.args[0].str()}") from None
        reading: dict[Partition, _Partition] = {}
        for ps in together:
            tp = (ps[0].topic, ps[0].partition)
            st = _Partition(ps, piece_start(cons, ps[0], timeout_s, firsts.get(tp)), max_future_skew_s)
            if st.finished:
                done(st.topic, st.partition, st.ranges, st.future, st.overrun)
            else:
                reading[tp] = st
        if reading:
            cons.assign([TopicPartition(t, p, st.scan.start) for (t, p), st in reading.items()])
        left = len(reading)
        idle_since = time.monotonic()
        while left:
            msgs = cons.consume(num_messages=10_000, timeout=0.001)
            if not msgs:
                if time.monotonic() - idle_since > timeout_s:
                    waiting = [tp for tp, st in reading.items() if not st.finished]
                    raise KafkaUnavailable(f"{_named(waiting)}: nothing read for {timeout_s:.0f}s "
                                           "(neither records nor end of log)")
                continue
            idle_since = time.monotonic()
            ended = []
            for m in msgs:
                tp = (m.topic(), m.partition())
                st = reading.get(tp)
                if st is None or st.finished:
                    continue  # a finished partition's records fetched before it was paused
                err = m.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaUnavailable(f"{tp[0]}[{tp[1]}]: {err.str()}")
                    st.at_end(m.offset())
                else:
                    hour = st.feed(m.offset(), m.timestamp()[1])
                    if hour is not None:
                        batch = add(m, tp[0], tp[1], hour)
                        if batch is not None:
                            yield batch
                            if after_batch is not None:
                                after_batch()
                if st.finished:
                    left -= 1
                    ended.append(TopicPartition(*tp))
                    done(st.topic, st.partition, st.ranges, st.future, st.overrun)
            if ended:
                cons.pause(ended)
        for pieces in alone:
            topic, partition = pieces[0].topic, pieces[0].partition
            ranges: list[OffsetRange] = []
            future = FutureStamped(topic, partition)
            overrun: list[bool] = []
            for piece in pieces:
                for m, hour_ms in scan_piece(cons, piece, ranges, timeout_s, max_future_skew_s, future,
                                             overrun=overrun):
                    batch = add(m, topic, partition, hour_ms)
                    if batch is not None:
                        yield batch
                        if after_batch is not None:
                            after_batch()
            done(topic, partition, ranges, future, any(overrun))
        if offsets:
            yield flush()
            if after_batch is not None:
                after_batch()
    finally:
        cons.close()
