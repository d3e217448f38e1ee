"""Which Kafka records belong to which landed hour, and reading them with confluent-kafka.

Hour ``h`` of a partition is the offset range ``[first(h), first(h+1h))`` where ``first(t)`` is the
earliest offset whose record timestamp is at or after ``t``: exactly the meaning of Kafka's
``offsets_for_times``. Consecutive hours therefore tile the log with no gap and no overlap. The
landed hour of an offset is equivalently the hour of the *running maximum* record timestamp up to
that offset, which is what :func:`scan_partition` computes while it reads.

``offsets_for_times(start)`` is used only as a lower bound to start reading from (exact on Apache
Kafka; some Kafka-protocol brokers answer it with the earliest offset, which is still a correct
lower bound); reading stops at the first record at or after the window end, or at the end of the
log. One Spark task reads one topic partition, as Spark's own Kafka batch source does.
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


def scan_partition(bootstrap: str, topic: str, partition: int, window: Window, timeout_s: float = 30.0,
                   client: Optional[dict] = None) -> Iterator[tuple]:
    """Yield the records of ``topic[partition]`` whose landed hour lies in ``window``.

    Each item is ``(topic, partition, offset, timestamp_ms, key, value, headers, landed_hour)``;
    headers are ``(name, bytes)`` pairs, ``landed_hour`` an aware UTC datetime. Raises
    :class:`KafkaUnavailable` when no record and no end-of-log arrive for ``timeout_s`` seconds.
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
                run_max = max(run_max, ts)
                if run_max >= end_ms:
                    return
                if run_max >= start_ms:
                    hour = dt.datetime.fromtimestamp((run_max // HOUR_MS) * HOUR_MS / 1000, UTC)
                    yield (topic, partition, m.offset(), ts, m.key(), m.value(), list(m.headers() or []), hour)
    finally:
        cons.close()


def hour_ranges(bootstrap: str, topics: list[str], window: Window, timeout_s: float = 10.0,
                client: Optional[dict] = None) -> list[OffsetRange]:
    """The non-empty hour ranges of every partition of ``topics`` in ``window``, read from Kafka now.

    Used by the land gate as an independent observation of the log. Raises
    :class:`KafkaUnavailable`.
    """
    out: list[OffsetRange] = []
    for topic, p in partitions(bootstrap, topics, timeout_s, client):
        current: Optional[list] = None
        for rec in scan_partition(bootstrap, topic, p, window, max(timeout_s, 30.0), client):
            off, hour = rec[2], rec[7]
            if current is None or current[0] != hour:
                if current is not None:
                    out.append(OffsetRange(topic, p, current[0], current[1], current[2] + 1, current[3]))
                current = [hour, off, off, 0]
            current[2], current[3] = off, current[3] + 1
        if current is not None:
            out.append(OffsetRange(topic, p, current[0], current[1], current[2] + 1, current[3]))
    return out
