"""Land's reading tasks: several topic partitions read by one consumer, into Arrow batches.

A Spark task costs the same for ten records as for a million: a Python worker started, a Kafka
consumer made and told the topics' metadata, an Iceberg file writer opened per table partition. One
topic per source table (Debezium's default) makes a window hundreds of small partitions; a task per
partition paid that cost hundreds of times. Land groups the window's partitions into at most one
task per core (:func:`task_groups`), by the records each is expected to hold
(:func:`estimate_records`), and each task reads its partitions one after the other with one
consumer (:func:`read_partitions`), each partition by :func:`cdclake.kafka_ranges.scan_piece` as
before, so the ledger's ranges are those a task per partition reported.

A consumer told the metadata of its partitions' topics up front (:func:`warm_metadata`, one
request) starts fetching a partition on assignment; without it librdkafka looks the topic's leader
up on its next periodic scan, about a second after the assignment, for every topic.
"""
from __future__ import annotations

import heapq
import logging
from typing import Callable, Iterator, Optional

from cdclake.kafka_ranges import FutureStamped, OffsetRange, Piece, consumer, scan_piece

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


def warm_metadata(cons, plans: list[list[Piece]], timeout_s: float) -> None:
    """Give ``cons`` the metadata of every topic of ``plans`` (one ``offsets_for_times`` request per
    broker, at each partition's first hour) before its partitions are assigned one by one. A failure
    is left to the reads themselves to report."""
    from confluent_kafka import KafkaException

    try:
        _offsets(cons, [(ps[0].topic, ps[0].partition, ps[0].hours[0]) for ps in plans if ps], timeout_s)
    except KafkaException as exc:
        log.debug("metadata of %d partitions not fetched ahead: %s", len(plans), exc)


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
        firsts = _offsets(cons, [(t, p, ps[0].hours[0]) for (t, p), ps in plans.items() if ps and ps[0].start is None],
                          timeout_s)
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
            start = end if start is None else start
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


def read_partitions(bootstrap: str, plans: list[list[Piece]], schema,
                    done: Callable[[str, int, list[OffsetRange], FutureStamped], None], timeout_s: float = 30.0,
                    client: Optional[dict] = None, after_batch=None,
                    max_future_skew_s: Optional[float] = None) -> Iterator:
    """The records of ``plans`` (each the pieces of one topic partition, in offset order) as pyarrow
    ``RecordBatch`` es, the partitions read one after the other by one consumer.

    ``schema`` is the Arrow form of ``cdclake.lake.RAW_SCHEMA`` (kafka_topic string, kafka_partition
    int32, kafka_offset int64, kafka_timestamp_ms int64, key binary, value binary, headers
    list<struct<name string, value binary>>, landed_hour timestamp[us, UTC]); a batch may hold
    records of several partitions, holds at most :data:`ARROW_BATCH_RECORDS` records and closes once
    its keys and values pass :data:`ARROW_BATCH_BYTES`; headers become ``{name, value}`` items (an
    empty list when there are none), ``landed_hour`` the start of the record's landed hour
    (:func:`cdclake.kafka_ranges.scan_piece`). Once a partition is read, ``done(topic, partition,
    ranges, future)`` gets its ledger ranges and its future-stamped records (``max_future_skew_s``,
    as in ``scan_piece``), before the batch holding its last records is yielded: ``done`` may raise
    to fail the task. ``after_batch()``, when given, is called after each batch was taken. Built
    column by column, so that a landed record crosses into Spark as Arrow columns rather than as a
    pickled row. Raises :class:`cdclake.errors.KafkaUnavailable`.
    """
    import pyarrow as pa

    names = [f.name for f in schema]
    assert names == ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp_ms", "key", "value",
                     "headers", "landed_hour"], names
    plans = [ps for ps in plans if ps]
    if not plans:
        return
    cols: tuple[list, ...] = ([], [], [], [], [], [], [], [])

    def flush():
        out = pa.RecordBatch.from_arrays([pa.array(c, f.type) for c, f in zip(cols, schema)], schema=schema)
        for c in cols:
            c.clear()
        return out

    topics, parts, offsets, stamps, keys, values, headers, hours_us = cols
    size = 0
    cons = consumer(bootstrap, client)
    try:
        if len(plans) > 1:
            warm_metadata(cons, plans, timeout_s)
        for pieces in plans:
            topic, partition = pieces[0].topic, pieces[0].partition
            ranges: list[OffsetRange] = []
            future = FutureStamped(topic, partition)
            for piece in pieces:
                for m, hour_ms in scan_piece(cons, piece, ranges, timeout_s, max_future_skew_s, future):
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
                        yield flush()
                        size = 0
                        if after_batch is not None:
                            after_batch()
            done(topic, partition, ranges, future)
        if offsets:
            yield flush()
            if after_batch is not None:
                after_batch()
    finally:
        cons.close()
