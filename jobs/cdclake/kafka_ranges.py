"""Which Kafka records belong to which landed hour, and reading them with confluent-kafka.

Hour ``h`` of a partition is the offset range ``[first(h), first(h+1h))`` where ``first(t)`` is the
earliest offset whose record timestamp is at or after ``t``: exactly the meaning of Kafka's
``offsets_for_times``. Consecutive hours therefore tile the log with no gap and no overlap. The
landed hour of an offset is equivalently the hour of the *running maximum* record timestamp up to
that offset, which is what :func:`scan_messages` computes while it reads.

``offsets_for_times(start)`` is used only as a lower bound to start reading from (exact on Apache
Kafka; some Kafka-protocol brokers answer it with the earliest offset, which is still a correct
lower bound); reading stops at the first record at or after the window end, or at the end of the
log. One Spark task reads one topic partition, as Spark's own Kafka batch source does, and hands
its records to the JVM as Arrow batches (:func:`arrow_batches`); the land gate reads the log again
on its own (:func:`hour_ranges`).
"""
from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass
from typing import Iterator, Optional

from cdclake.window import UTC, Window

log = logging.getLogger(__name__)
HOUR_MS = 3_600_000


class KafkaUnavailable(RuntimeError):
    """The broker cannot be reached, the topic does not exist, or reading stalls."""


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
            "auto.offset.reset": "earliest"}
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


def scan_messages(bootstrap: str, topic: str, partition: int, window: Window, timeout_s: float = 30.0,
                  client: Optional[dict] = None) -> Iterator[tuple[object, int]]:
    """Yield ``(message, landed_hour_ms)`` for the records of ``topic[partition]`` whose landed hour
    lies in ``window``, in offset order.

    ``message`` is a confluent-kafka ``Message``; ``landed_hour_ms`` is the start of the record's
    landed hour in epoch ms (UTC), the hour of the running maximum record timestamp. Raises
    :class:`KafkaUnavailable` when no record and no end-of-log arrive for ``timeout_s`` seconds, or
    the broker reports an error for the partition.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    cons = consumer(bootstrap, client)
    try:
        try:
            found = cons.offsets_for_times([TopicPartition(topic, partition, window.start_ms)], timeout=timeout_s)[0]
        except KafkaException as exc:
            raise KafkaUnavailable(f"{topic}[{partition}]: offsets_for_times failed: {exc.args[0].str()}") from None
        if found.offset < 0:  # no record at or after the window start
            return
        cons.assign([TopicPartition(topic, partition, found.offset)])
        run_max = -1
        start_ms, end_ms = window.start_ms, window.end_ms
        idle_since = time.monotonic()
        while True:
            # consume() waits for a full batch or its timeout: keep the timeout short, count idle time
            msgs = cons.consume(num_messages=10_000, timeout=0.1)
            if not msgs:
                if time.monotonic() - idle_since > timeout_s:
                    raise KafkaUnavailable(f"{topic}[{partition}]: nothing read for {timeout_s:.0f}s "
                                           f"(neither records nor end of log)")
                continue
            idle_since = time.monotonic()
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    raise KafkaUnavailable(f"{topic}[{partition}]: {err.str()}")
                ts = m.timestamp()[1]
                if ts > run_max:
                    run_max = ts
                if run_max >= end_ms:
                    return
                if run_max >= start_ms:
                    yield m, run_max - run_max % HOUR_MS
    finally:
        cons.close()


def _hour(hour_ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(hour_ms / 1000, UTC)


#: Arrow batches of :func:`arrow_batches` close at this many bytes of keys and values, or at
#: :data:`ARROW_BATCH_RECORDS` records.
ARROW_BATCH_BYTES = 16 * 1024 * 1024
ARROW_BATCH_RECORDS = 20_000


def arrow_batches(bootstrap: str, topic: str, partition: int, window: Window, schema, timeout_s: float = 30.0,
                  client: Optional[dict] = None) -> Iterator:
    """The records of :func:`scan_messages` as pyarrow ``RecordBatch`` es of ``schema``.

    ``schema`` is the Arrow form of ``cdclake.land.RAW_SCHEMA`` (kafka_topic string, kafka_partition
    int32, kafka_offset int64, kafka_timestamp_ms int64, key binary, value binary, headers
    list<struct<name string, value binary>>, landed_hour timestamp[us, UTC]); a batch holds at most
    :data:`ARROW_BATCH_RECORDS` records and closes once its keys and values pass
    :data:`ARROW_BATCH_BYTES`; headers become ``{name, value}`` items (an empty list when there
    are none), ``landed_hour`` the start of the record's landed hour. Built column by column, so
    that a landed record crosses into Spark as Arrow columns rather than as a pickled row. Raises
    :class:`KafkaUnavailable` as :func:`scan_messages` does.
    """
    import pyarrow as pa

    names = [f.name for f in schema]
    assert names == ["kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp_ms", "key", "value",
                     "headers", "landed_hour"], names

    def batch(offsets, stamps, keys, values, headers, hours_us):
        n = len(offsets)
        arrays = [pa.array([topic] * n, schema.field(0).type), pa.array([partition] * n, schema.field(1).type),
                  pa.array(offsets, schema.field(2).type), pa.array(stamps, schema.field(3).type),
                  pa.array(keys, schema.field(4).type), pa.array(values, schema.field(5).type),
                  pa.array(headers, schema.field(6).type), pa.array(hours_us, schema.field(7).type)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    cols: tuple[list, ...] = ([], [], [], [], [], [])
    offsets, stamps, keys, values, headers, hours_us = cols
    size = 0
    for m, hour_ms in scan_messages(bootstrap, topic, partition, window, timeout_s, client):
        key, value, hs = m.key(), m.value(), m.headers()
        offsets.append(m.offset())
        stamps.append(m.timestamp()[1])
        keys.append(key)
        values.append(value)
        headers.append([{"name": n, "value": v} for n, v in hs] if hs else [])
        hours_us.append(hour_ms * 1000)
        size += (len(key) if key else 0) + (len(value) if value else 0)
        if size >= ARROW_BATCH_BYTES or len(offsets) >= ARROW_BATCH_RECORDS:
            yield batch(*cols)
            for c in cols:
                c.clear()
            size = 0
    if offsets:
        yield batch(*cols)


#: Partitions :func:`hour_ranges` reads at once, each with its own consumer.
HOUR_RANGE_READERS = 4


def partition_ranges(bootstrap: str, topic: str, partition: int, window: Window, timeout_s: float = 30.0,
                     client: Optional[dict] = None) -> list[OffsetRange]:
    """The non-empty hour ranges of ``topic[partition]`` in ``window``, read from Kafka now.

    Raises :class:`KafkaUnavailable` as :func:`scan_messages` does.
    """
    out: list[OffsetRange] = []
    current: Optional[list] = None  # [hour ms, first offset, last offset, records]
    for m, hour in scan_messages(bootstrap, topic, partition, window, timeout_s, client):
        off = m.offset()
        if current is None or current[0] != hour:
            if current is not None:
                out.append(OffsetRange(topic, partition, _hour(current[0]), current[1], current[2] + 1, current[3]))
            current = [hour, off, off, 0]
        current[2], current[3] = off, current[3] + 1
    if current is not None:
        out.append(OffsetRange(topic, partition, _hour(current[0]), current[1], current[2] + 1, current[3]))
    return out


def hour_ranges(bootstrap: str, topics: list[str], window: Window, timeout_s: float = 10.0,
                client: Optional[dict] = None, readers: int = HOUR_RANGE_READERS) -> list[OffsetRange]:
    """The non-empty hour ranges of every partition of ``topics`` in ``window``, read from Kafka now.

    Used by the land gate as an independent observation of the log. Up to ``readers`` partitions
    are read at once (:func:`partition_ranges`, one consumer each: librdkafka fetches outside the
    GIL); the result is in topic, partition and hour order. Raises :class:`KafkaUnavailable`.
    """
    from concurrent.futures import ThreadPoolExecutor

    parts = partitions(bootstrap, topics, timeout_s, client)
    timeout = max(timeout_s, 30.0)
    with ThreadPoolExecutor(max(1, min(readers, len(parts))), thread_name_prefix="hour-ranges") as pool:
        found = pool.map(lambda tp: partition_ranges(bootstrap, tp[0], tp[1], window, timeout, client), parts)
        return [r for ranges in found for r in ranges]
