"""Putting rendered messages on a Kafka-protocol broker with confluent-kafka.

``confluent_kafka`` is imported inside the functions, so ``cdclake.sim`` imports without it.

Producer defaults: idempotent (per-partition order kept across retries) and one record per
record batch (``batch.num.messages=1``). The latter matters on the tansu broker used for local
runs (memory storage): it reports a partition's high watermark as the base offset of the last
record batch + 1, so records after the first of a multi-record last batch would sit above the
reported high watermark. Pass ``producer_config`` to override any setting.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence

from cdclake.sim.render import Message

_PRODUCER_DEFAULTS = {
    "enable.idempotence": True,
    "acks": "all",
    "linger.ms": 5,
    "batch.num.messages": 1,
    "message.max.bytes": 10_000_000,
}


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int = 1,
                 timeout: float = 30.0) -> bool:
    """Create ``topic`` with ``partitions`` partitions; True if created, False if it existed.

    Raises ``confluent_kafka.KafkaException`` for any other failure.
    """
    return create_topics(bootstrap, [topic], partitions, replication_factor, timeout)[topic]


def create_topics(bootstrap: str, topics: Sequence[str], partitions: int, replication_factor: int = 1,
                  timeout: float = 30.0) -> dict[str, bool]:
    """Create every topic of ``topics`` with ``partitions`` partitions, in one admin request:
    ``{topic: True if created, False if it existed}``.

    Raises ``confluent_kafka.KafkaException`` for the first other failure.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, replication_factor) for t in topics],
                                  operation_timeout=timeout, request_timeout=timeout)
    out: dict[str, bool] = {}
    for topic in topics:
        try:
            futures[topic].result(timeout=timeout)
            out[topic] = True
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() == KafkaError.TOPIC_ALREADY_EXISTS:
                out[topic] = False
            else:
                raise
    return out


def produce(bootstrap: str, topic: str, messages: Iterable[Message],
            producer_config: Optional[Mapping[str, object]] = None, timeout: float = 60.0) -> int:
    """Produce ``messages`` in order, each to its ``partition`` with ``timestamp=timestamp_ms``.

    Flushes, then raises RuntimeError naming topic, partition and error for the first failed
    delivery (or when messages are still undelivered after ``timeout`` seconds). Returns the
    number of messages produced.
    """
    return produce_to(bootstrap, ((topic, m) for m in messages), producer_config, timeout)


def produce_to(bootstrap: str, records: Iterable[tuple[str, Message]],
               producer_config: Optional[Mapping[str, object]] = None, timeout: float = 60.0) -> int:
    """:func:`produce` for ``(topic, message)`` pairs, by one producer: each message to its topic,
    in order (a connector writing many tables, one topic each). Returns the number produced."""
    from confluent_kafka import Producer

    config = dict(_PRODUCER_DEFAULTS)
    config.update(producer_config or {})
    config["bootstrap.servers"] = bootstrap
    producer = Producer(config)
    errors: list[str] = []
    topics: set[str] = set()

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(f"delivery to topic {msg.topic()} partition {msg.partition()} failed: {err}")

    count = 0
    for topic, m in records:
        topics.add(topic)
        while True:
            try:
                producer.produce(topic, value=m.value, key=m.key, partition=m.partition,
                                 timestamp=m.timestamp_ms, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        count += 1
        if count % 1000 == 0:
            producer.poll(0)
        if errors:
            break
    remaining = producer.flush(timeout)
    if errors:
        raise RuntimeError(errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    if remaining:
        named = f"topic {next(iter(topics))}" if len(topics) == 1 else f"{len(topics)} topics"
        raise RuntimeError(f"{remaining} message(s) to {named} still undelivered after {timeout:.0f} s")
    return count
