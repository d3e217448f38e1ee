"""The offset ledger's rule, and reading Kafka by it with confluent-kafka.

Every landed hour of a topic partition is an offset range ``[start, end)`` recorded in the land
manifest, the *offset ledger* (:mod:`cdclake.land`). The ranges of a partition tile its log: each
range starts exactly where the range before it ended, so no record falls between two hours and
none is landed twice. Planning a window (:func:`plan_partition`) for one partition:

- an hour already in the ledger is re-read over exactly its range (a rerun: every record read
  keeps that hour, so reruns are idempotent);
- a run of hours not in the ledger (a *segment*) starts at the end of the range before it, or,
  on the first landing of the partition, at the first record stamped at or after the segment's
  start (``offsets_for_times``, exact on Apache Kafka; a broker that answers it with an earlier
  offset only makes the reader skip more records that belong to no landed hour). It ends at the
  start of the range after it (a backfill between landed hours takes the whole gap) or, when no
  landed hour follows, at the first record stamped at or after the segment's end, or at the end
  of the log as read.

Inside a segment a record's landed hour is the hour of the *running maximum* record timestamp up
to it, clamped to the segment: a record stamped inside an already-landed hour (a producer batch
in flight at the hour, a lagging connector, the hours a stopped scheduler missed) lands in the
first hour of the segment that reads it. It keeps its own timestamp; ``landed_hour`` says which
run took it. A *future-stamped* record, stamped more than ``land.max_future_skew_s`` seconds after
the reading task read it (a producer whose clock runs fast), does not advance the running
maximum: it never ends a range and never moves the records after it to a later hour; it lands with
its neighbours, keeps its own timestamp, and is reported (:class:`FutureStamped`). Without this,
one record stamped three hours ahead would end its hour's range, and every hourly run after it
would land nothing of the partition until the wall clock passed its timestamp. The reader decides
each range's bounds while it reads (:func:`read_pieces`), because a broker's ``offsets_for_times``
and end offsets may be approximate; the land stage records the ranges it reports.

The land gate observes the log again on its own by offset (:func:`observe_ranges`). Land's
reading tasks, each reading several partitions with one consumer into Arrow batches, are
:mod:`cdclake.kafka_read`'s.
"""
from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from cdclake.errors import KafkaUnavailable
from cdclake.window import UTC

log = logging.getLogger(__name__)
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class OffsetRange:
    """Records of one topic partition in landed hour ``hour``: offsets ``[start, end)``, ``records`` of them."""

    topic: str
    partition: int
    hour: dt.datetime
    start: int
    end: int
    records: int


def _client_conf(bootstrap: str, extra: Optional[dict] = None) -> dict:
    conf = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, "log_level": 3,
            "group.id": "cdclake-land", "enable.auto.commit": False, "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # the end of a partition is known when a fetch comes back empty; the broker holds an empty
            # fetch this long (librdkafka's default is 500 ms, paid by every partition read to its end;
            # 10 ms still cost a hundred one-partition topics a second). At 1 ms a broker answered
            # fetches of large records empty for seconds: a 12 MB partition stalled its read.
            "fetch.wait.max.ms": 5}
    conf.update(extra or {})
    return conf


def consumer(bootstrap: str, extra: Optional[dict] = None):
    """A confluent-kafka Consumer for assigned reads (no group offsets are committed)."""
    from confluent_kafka import Consumer

    return Consumer(_client_conf(bootstrap, extra))


def partitions(bootstrap: str, topics: list[str], timeout_s: float = 10.0,
               client: Optional[dict] = None) -> list[tuple[str, int]]:
    """``(topic, partition)`` pairs of ``topics``.

    Raises :class:`KafkaUnavailable` naming the broker (unreachable) or the topic (missing).
    """
    from confluent_kafka import KafkaException

    cons = consumer(bootstrap, client)
    try:
        try:
            md = cons.list_topics(timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailable(f"cannot reach Kafka at {bootstrap}: {exc.args[0].str()}") from None
        out = []
        for topic in topics:
            t = md.topics.get(topic)
            if t is None or t.error is not None:
                raise KafkaUnavailable(f"topic {topic!r} does not exist on {bootstrap}"
                                       + (f": {t.error.str()}" if t is not None and t.error else ""))
            out.extend((topic, p) for p in sorted(t.partitions))
        return out
    finally:
        cons.close()


@dataclass(frozen=True)
class Piece:
    """What one reading task does for consecutive hours of one topic partition (see module docstring).

    ``hours``: the hour starts (epoch ms, UTC, consecutive). ``start``: first offset to read; None
    on the first landing of the partition (from ``offsets_for_times(hours[0])``, skipping records
    whose running maximum timestamp is earlier). ``stop``: offset to stop before; None for an open
    segment (stop at the first record stamped at or after the last hour's end, a future-stamped one
    excepted, or at the end of the log). ``fixed``: a rerun of one ledger range; every record read
    gets ``hours[0]``. ``bounded``: a share of a one-hour segment that a reading task reads beside
    others (:func:`cdclake.kafka_read.split_plans`), cut where the hour was expected to end or
    before; a record in it that ends the hour (stamped at or after its end, not future-stamped)
    ends the share as *overrun* (:attr:`PieceScan.overrun`): the hour is then read again uncut; so
    does a first landing's first share (``start`` None) that ends before the running maximum
    reached its hour.
    """

    topic: str
    partition: int
    hours: tuple[int, ...]
    start: Optional[int]
    stop: Optional[int]
    fixed: bool = False
    bounded: bool = False


def plan_partition(topic: str, partition: int, hours_ms: list[int], landed: dict[int, tuple[int, int]],
                   prev_end: Optional[int], next_start: Optional[int]) -> list[Piece]:
    """The pieces that land ``hours_ms`` (a window's hour starts, epoch ms, ascending) of one partition.

    ``landed``: the ledger's ranges of those hours, ``{hour_ms: (start, end)}``; ``prev_end``: end
    offset of the partition's latest ledger range before the window (None: none); ``next_start``:
    start offset of its earliest range after the window (None: none). Landed hours become fixed
    pieces; each run of other hours becomes one segment from the end of the range before it to the
    start of the range after it (None where there is none). Pure: no Kafka, no Spark.
    """
    pieces: list[Piece] = []
    i = 0
    while i < len(hours_ms):
        h = hours_ms[i]
        if h in landed:
            start, end = landed[h]
            pieces.append(Piece(topic, partition, (h,), start, end, True))
            i += 1
            continue
        j = i
        while j < len(hours_ms) and hours_ms[j] not in landed:
            j += 1
        before = pieces[-1].stop if pieces else prev_end
        after = landed[hours_ms[j]][0] if j < len(hours_ms) else next_start
        pieces.append(Piece(topic, partition, tuple(hours_ms[i:j]), before, after))
        i = j
    return pieces


def _hour(hour_ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(hour_ms / 1000, UTC)


def _piece_ranges(piece: Piece, start: int, end: int, first: dict[int, int], counts: dict[int, int]) -> list[OffsetRange]:
    """The ledger ranges of ``piece`` read over ``[start, end)``: one per hour, empty hours included.

    ``first``: the first offset read per hour; ``counts``: records per hour. Hour ``k`` ends where
    the next non-empty hour's first record is (or at ``end``), so the ranges tile ``[start, end)``.
    """
    out, cur = [], start
    for i, h in enumerate(piece.hours):
        later = [first[k] for k in piece.hours[i + 1:] if k in first]
        stop = later[0] if later else end
        out.append(OffsetRange(piece.topic, piece.partition, _hour(h), cur, stop, counts.get(h, 0)))
        cur = stop
    return out


def _consume(cons, where: str, timeout_s: float) -> Iterator:
    """Messages (and end-of-partition events) of an assigned consumer; raises :class:`KafkaUnavailable`
    when neither arrives for ``timeout_s`` seconds or the broker reports an error."""
    from confluent_kafka import KafkaError

    idle_since = time.monotonic()
    while True:
        # consume() waits for a full batch or its timeout: keep the timeout short (a partition's
        # last records and its end arrive in a short batch: 10 ms was most of the time a partition
        # of a hundred records took), count idle time
        msgs = cons.consume(num_messages=10_000, timeout=0.001)
        if not msgs:
            if time.monotonic() - idle_since > timeout_s:
                raise KafkaUnavailable(f"{where}: nothing read for {timeout_s:.0f}s (neither records nor end of log)")
            continue
        idle_since = time.monotonic()
        for m in msgs:
            err = m.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                raise KafkaUnavailable(f"{where}: {err.str()}")
            yield m


def _assign(cons, topic: str, partition: int, offset: int) -> None:
    from confluent_kafka import TopicPartition

    cons.assign([TopicPartition(topic, partition, offset)])


def _first_landing_start(cons, piece: Piece, timeout_s: float) -> Optional[int]:
    """Where a first landing starts reading: ``offsets_for_times(hours[0])``; None when no record is
    stamped at or after it (the range then starts and ends at the end of the log)."""
    from confluent_kafka import KafkaException, TopicPartition

    try:
        found = cons.offsets_for_times([TopicPartition(piece.topic, piece.partition, piece.hours[0])],
                                       timeout=timeout_s)[0]
    except KafkaException as exc:
        raise KafkaUnavailable(f"{piece.topic}[{piece.partition}]: offsets_for_times failed: {exc.args[0].str()}") from None
    return found.offset if found.offset >= 0 else None


def _log_end(cons, topic: str, partition: int, timeout_s: float) -> int:
    from confluent_kafka import KafkaException, TopicPartition

    try:
        return cons.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)[1]
    except KafkaException as exc:
        raise KafkaUnavailable(f"{topic}[{partition}]: end offset unknown: {exc.args[0].str()}") from None


#: Future-stamped records of one partition a reading task reports one by one; the rest are counted.
FUTURE_SAMPLES = 10


@dataclass
class FutureStamped:
    """The future-stamped records one reading task landed of one topic partition (:func:`scan_piece`).

    ``count``: how many; ``samples``: the first :data:`FUTURE_SAMPLES` of them as ``(offset,
    timestamp_ms, skew_s, landed_hour_ms)``, ``skew_s`` the seconds from the wall clock (UTC) when
    the task read the record to the record's timestamp.
    """

    topic: str
    partition: int
    count: int = 0
    samples: list[tuple[int, int, float, int]] = field(default_factory=list)

    def add(self, offset: int, timestamp_ms: int, skew_s: float, hour_ms: int) -> None:
        self.count += 1
        if len(self.samples) < FUTURE_SAMPLES:
            self.samples.append((offset, timestamp_ms, skew_s, hour_ms))


class PieceScan:
    """The ledger's rule applied to one piece's records as they arrive, in offset order: which hour
    each record lands in, where the piece ends, and its ledger ranges (see module docstring).

    ``start``: the first offset read (``piece.start``, or for a first landing where
    ``offsets_for_times`` of the first hour points, or the end of the log when it points nowhere;
    at most ``piece.stop``). ``max_future_skew_s``, ``future`` and ``clock`` as in
    :func:`scan_piece`. Feed each record with :meth:`feed` and the end of the log with
    :meth:`at_end`; once :attr:`done`, :meth:`ranges` gives one range per hour of the piece, empty
    hours included. Pure: no Kafka.
    """

    def __init__(self, piece: Piece, start: int, max_future_skew_s: Optional[float] = None,
                 future: Optional[FutureStamped] = None, clock: Callable[[], float] = time.time):
        self.piece, self.future, self.clock = piece, future, clock
        self.skew_ms = None if max_future_skew_s is None else max_future_skew_s * 1000
        self.read_ms = clock() * 1000
        # a record stamped after this is future-stamped once the clock, read again, agrees
        self.limit = float("inf") if self.skew_ms is None else self.read_ms + self.skew_ms
        self.first_hour, self.last_hour = piece.hours[0], piece.hours[-1]
        self.end_ms = self.last_hour + HOUR_MS
        self.skip_early = piece.start is None
        self.start = start
        self.landed_from: Optional[int] = None if self.skip_early else start
        self.end = start if piece.stop is None else piece.stop
        self.first: dict[int, int] = {}
        self.counts: dict[int, int] = {}
        self.run_max = -1
        #: True once the piece has ended; from the start when there is nothing to read
        self.done = not (piece.stop is None or start < piece.stop)
        #: True when a ``bounded`` piece met the end of its hour before its stop (its ranges are void)
        self.overrun = False
        if self.done:
            self._unprimed()

    def feed(self, offset: int, timestamp_ms: int) -> Optional[int]:
        """The landed hour (epoch ms) of the record at ``offset`` stamped ``timestamp_ms``, or None:
        not landed, either stamped before a first landing's hour (skipped) or, when :attr:`done`
        is now True, past the piece's end (the record is the next piece's)."""
        piece = self.piece
        if piece.stop is not None and offset >= piece.stop:
            self.done = True
            self._unprimed()
            return None
        ahead = False
        if timestamp_ms > self.limit:
            self.read_ms = self.clock() * 1000
            self.limit = self.read_ms + self.skew_ms
            ahead = timestamp_ms > self.limit
        if timestamp_ms > self.run_max and not ahead:
            self.run_max = timestamp_ms
        run_max = self.run_max
        if piece.fixed:
            hour = self.first_hour
        else:
            if run_max >= self.end_ms:
                if piece.bounded:  # the hour ends before the share's stop: it cannot say where
                    self.end, self.done, self.overrun = offset, True, True
                    return None
                if piece.stop is None:
                    self.end, self.done = offset, True
                    return None
            if self.skip_early and run_max < self.first_hour:
                return None  # stamped before the partition's first landed hour: not the pipeline's
            hour = min(max(run_max - run_max % HOUR_MS, self.first_hour), self.last_hour)
        if self.landed_from is None:
            self.landed_from = offset
        if hour not in self.first:
            self.first[hour] = offset
        self.counts[hour] = self.counts.get(hour, 0) + 1
        if ahead and self.future is not None:
            self.future.add(offset, timestamp_ms, (timestamp_ms - self.read_ms) / 1000, hour)
        return hour

    def at_end(self, offset: int) -> None:
        """The log ends at ``offset`` (the next offset to be written): the piece ends there, or at
        its stop when it has one."""
        self.end = offset if self.piece.stop is None else self.piece.stop
        self.done = True
        self._unprimed()

    def _unprimed(self) -> None:
        """A bounded first share of a first landing (:class:`Piece`) that ends before any record
        raised the running maximum into its hour overruns: the shares after it would land records
        a whole read skips."""
        if self.piece.bounded and self.skip_early and self.run_max < self.first_hour:
            self.overrun = True

    def ranges(self) -> list[OffsetRange]:
        """The piece's ledger ranges over what was read, one per hour (:func:`_piece_ranges`)."""
        landed_from = self.end if self.landed_from is None else self.landed_from  # a first landing found nothing
        return _piece_ranges(self.piece, landed_from, self.end, self.first, self.counts)


def piece_start(cons, piece: Piece, timeout_s: float, first_landing: Optional[int] = None) -> int:
    """Where ``piece`` starts reading: its start, or for a first landing ``first_landing`` (the
    offset ``offsets_for_times`` gave for its first hour; looked up when not given) or, when no
    record is stamped at or after that hour, the end of the log; never after the piece's stop."""
    start = piece.start
    if start is None:
        start = first_landing if first_landing is not None else _first_landing_start(cons, piece, timeout_s)
        if start is None:
            start = _log_end(cons, piece.topic, piece.partition, timeout_s)
        if piece.stop is not None:
            start = min(start, piece.stop)
    return start


def scan_piece(cons, piece: Piece, ranges: list[OffsetRange], timeout_s: float = 30.0,
               max_future_skew_s: Optional[float] = None, future: Optional[FutureStamped] = None,
               clock: Callable[[], float] = time.time, overrun: Optional[list] = None) -> Iterator[tuple[object, int]]:
    """Yield ``(message, landed_hour_ms)`` for the records ``piece`` lands, in offset order, then
    append the piece's ledger ranges (one per hour, empty ones included) to ``ranges`` (and True
    to ``overrun`` when given and a ``bounded`` piece overran, :class:`Piece`): one
    partition read alone (:class:`PieceScan` decides; the reference of the reading tasks, which
    read many partitions at once, :func:`cdclake.kafka_read.read_partitions`).

    ``cons`` is a consumer of :func:`consumer` (reassigned here). ``max_future_skew_s``: a record
    stamped more than this many seconds after ``clock()`` (epoch seconds, read when the record is
    read; default the wall clock) is future-stamped: it does not advance the running maximum, so
    it neither ends the range nor moves later records to a later hour, and lands in the hour of
    the running maximum before it (a fixed piece: its hour, as every record). Each one landed is
    added to ``future`` when given; one that a first landing skips (the running maximum still
    before the first hour: it goes with the records stamped before it) is neither landed nor
    added. None (the default): no record is future-stamped.
    Raises :class:`KafkaUnavailable` when no record and no end-of-log arrive for ``timeout_s``
    seconds, or the broker reports an error for the partition.
    """
    scan = PieceScan(piece, piece_start(cons, piece, timeout_s), max_future_skew_s, future, clock)
    if not scan.done:
        _assign(cons, piece.topic, piece.partition, scan.start)
        for m in _consume(cons, f"{piece.topic}[{piece.partition}]", timeout_s):
            if m.partition() != piece.partition or m.topic() != piece.topic:
                continue  # of a partition the consumer read before (dropped by librdkafka on assign)
            if m.error() is not None:  # end of the log
                scan.at_end(m.offset())
                break
            hour = scan.feed(m.offset(), m.timestamp()[1])
            if scan.done:
                break
            if hour is not None:
                yield m, hour
    ranges.extend(scan.ranges())
    if scan.overrun and overrun is not None:
        overrun.append(True)


#: Partitions :func:`observe_ranges` reads at once, each with its own consumer.
OBSERVE_READERS = 4


@dataclass(frozen=True)
class Observed:
    """What the broker holds now of one partition's ledger ranges: ``records`` per range (in the
    order given, counting offsets the broker still has), ``log_start`` and ``log_end`` offsets."""

    topic: str
    partition: int
    records: tuple[int, ...]
    log_start: int
    log_end: int


def observe_partition(bootstrap: str, topic: str, partition: int, ranges: list[tuple[int, int]],
                      timeout_s: float = 30.0, client: Optional[dict] = None,
                      dense: Optional[list[bool]] = None, cons=None) -> Observed:
    """Count the records Kafka holds now in each ``[start, end)`` of ``ranges`` (ascending, tiling).

    One read by offset from the first start to the last end of the ranges that need it. A range
    marked in ``dense`` (the caller holds a record at every one of its offsets, exactly once) is
    not read: Kafka holds nothing in it the caller lacks, and its count is that of its offsets at
    or past the log start (the partition's low watermark). ``cons``: a consumer to use (and leave
    open, unassigned); by default one of its own. Raises :class:`KafkaUnavailable`.
    """
    from confluent_kafka import KafkaException, TopicPartition

    counts = [0] * len(ranges)
    dense = dense or [False] * len(ranges)
    own = cons is None
    cons = consumer(bootstrap, client) if own else cons
    try:
        try:
            low, high = cons.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaUnavailable(f"{topic}[{partition}]: offsets unknown: {exc.args[0].str()}") from None
        for i, (s, e) in enumerate(ranges):
            if dense[i]:
                counts[i] = max(0, e - max(s, low))
        todo = [(s, e, i) for i, (s, e) in enumerate(ranges) if e > s and not dense[i]]
        if todo:
            lo, hi = min(s for s, _, _ in todo), max(e for _, e, _ in todo)
            _assign(cons, topic, partition, max(lo, low))
            j = 0
            for m in _consume(cons, f"{topic}[{partition}]", timeout_s):
                if m.error() is not None:
                    high = max(high, m.offset())
                    break
                off = m.offset()
                if off >= hi:
                    break
                while j < len(todo) and off >= todo[j][1]:
                    j += 1
                if j < len(todo) and off >= todo[j][0]:
                    counts[todo[j][2]] += 1
            cached = cons.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if cached and cached[1] >= 0:
                high = max(high, cached[1])
        return Observed(topic, partition, tuple(counts), low, high)
    finally:
        if own:
            cons.close()
        else:
            cons.unassign()


def observe_ranges(bootstrap: str, ranges: dict[tuple[str, int], list[tuple[int, int]]], timeout_s: float = 30.0,
                   client: Optional[dict] = None, readers: int = OBSERVE_READERS,
                   dense: Optional[dict[tuple[str, int], list[bool]]] = None) -> list[Observed]:
    """:func:`observe_partition` for every ``(topic, partition)`` of ``ranges``, up to ``readers`` at
    once (one consumer per reader, kept from partition to partition: librdkafka fetches outside
    the GIL, and a consumer's start and close cost more than a partition of a thousand-topic
    window), with the partition's ``dense`` marks. Used by the land gate as an independent
    observation of the log. Raises :class:`KafkaUnavailable`."""
    from concurrent.futures import ThreadPoolExecutor

    items = sorted(ranges.items())
    if not items:
        return []
    dense = dense or {}
    n = max(1, min(readers, len(items)))

    def read(share: list) -> list[Observed]:
        cons = consumer(bootstrap, client)
        try:
            return [observe_partition(bootstrap, t, p, r, timeout_s, client, dense.get((t, p)), cons)
                    for (t, p), r in share]
        finally:
            cons.close()

    with ThreadPoolExecutor(n, thread_name_prefix="observe") as pool:
        shares = list(pool.map(read, [items[i::n] for i in range(n)]))
    return sorted((o for share in shares for o in share), key=lambda o: (o.topic, o.partition))
