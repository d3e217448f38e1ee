"""Keys in flight: the keys of a source table that Kafka holds changes of after the offset ledger's end.

A key that differs between silver and its source table is *in flight* when one of the pipeline's
topics holds a change of it that land has not taken yet: the next hourly run applies it. For each
topic partition, the records from the end of its latest landed range in the offset ledger
(``raw.land_manifest``; a partition never landed: from its first record) to its end at the time
of reading are parsed with the topic's parser (the one normalize uses, with the source's
options), and the before and after images of the changes of the source table give the keys,
rendered in the canonical text of :mod:`cdclake.reconcile.canonical`. A record the parser cannot
read (it would be quarantined) names no key.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from typing import Optional

from cdclake.config import PipelineConfig
from cdclake.errors import KafkaUnavailable
from cdclake.formats import get_parser
from cdclake.kafka_ranges import _consume, consumer, partitions
from cdclake.lake import SourceTable, ledger_latest
from cdclake.reconcile.canonical import image_value, python_text
from cdclake.record import ChangeRecord, KafkaRecord

log = logging.getLogger(__name__)


def ledger_ends(cfg: PipelineConfig, topics: list[str], parts: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): end offset of its latest landed range}`` of the partitions ``parts``
    of ``topics`` from the offset ledger (``raw.land_manifest``, :func:`cdclake.lake.ledger_latest`:
    each topic's latest hour, earlier hours only for a partition not in it); a partition never
    landed is absent."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        rows = ledger_latest(cfg, topics, parts=parts)
    except NoSuchTableError:  # nothing landed yet
        return {}
    return {(t, p): e for t, p, e in zip(*(rows.column(c).to_pylist()
                                           for c in ("kafka_topic", "kafka_partition", "end_offset")))}


def _keys_of(change: ChangeRecord, key_kinds: list[tuple[str, str]]) -> list[str]:
    out = []
    for image in (change.before, change.after):
        if not image or any(c not in image for c, _ in key_kinds):
            continue
        try:
            out.append(python_text([image_value(image[c], k) for c, k in key_kinds]))
        except (ValueError, TypeError):
            continue
    return out


def keys_in_flight(cfg: PipelineConfig, st: SourceTable, key_kinds: list[tuple[str, str]],
                   timeout_s: float = 30.0) -> tuple[set[str], dict]:
    """The canonical key texts (:func:`cdclake.reconcile.canonical.python_text` of the key
    columns' :func:`image_value`; ``key_kinds``: ``(column, kind)`` in key order) of source table
    ``st`` changed by records after the ledger's end, in the topics whose ``table_prefix`` is
    ``st.prefix``; and ``{"records": records read, "unparsed": records the parser refused}``.

    Raises :class:`KafkaUnavailable` when the broker cannot be reached or a partition yields
    nothing for ``timeout_s`` seconds before its end.
    """
    from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition

    sources = [s for s in cfg.sources if s.table_prefix == st.prefix]
    topics = [s.topic for s in sources]
    if not topics:
        return set(), {"records": 0, "unparsed": 0}
    bootstrap = cfg.kafka.bootstrap_servers or ""
    parts = partitions(bootstrap, topics, timeout_s, cfg.kafka.client)
    ends = ledger_ends(cfg, topics, parts)
    keys: set[str] = set()
    stats: dict[str, int] = defaultdict(int)
    cons = consumer(bootstrap, dict(cfg.kafka.client, **{"group.id": "cdclake-reconcile"}))
    try:
        for topic, partition in parts:
            source = cfg.source(topic)
            parser = get_parser(source.format, source.parser_options())
            try:
                low, high = cons.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
            except KafkaException as exc:
                raise KafkaUnavailable(f"{topic}[{partition}]: end offset unknown: {exc.args[0].str()}") from None
            start = ends.get((topic, partition))
            if start is None:
                start = OFFSET_BEGINNING if high > low else high
            if start != OFFSET_BEGINNING and start >= high:
                continue
            cons.assign([TopicPartition(topic, partition, start)])
            for m in _consume(cons, f"{topic}[{partition}]", timeout_s):
                if m.error() is not None:  # the end of the partition
                    break
                offset = m.offset()
                if offset >= high:
                    break
                stats["records"] += 1
                record = KafkaRecord(topic, partition, offset, m.timestamp()[1], m.key(), m.value(),
                                     list(m.headers() or []))
                for change in _changes(parser, record, stats):
                    if (change.source_database, change.source_schema, change.source_table) == (
                            st.database, st.schema, st.table):
                        keys.update(_keys_of(change, key_kinds))
                if offset + 1 >= high:
                    break
    finally:
        cons.close()
    return keys, dict(stats)


def _changes(parser, record: KafkaRecord, stats: dict) -> list[ChangeRecord]:
    try:
        result = parser.parse(record)
    except Exception:  # a record normalize would quarantine names no key
        stats["unparsed"] += 1
        return []
    return result if isinstance(result, list) else []


def describe_flight(stats: Optional[dict]) -> str:
    """``"<records> records after the ledger (<unparsed> unparsed)"`` for the log line."""
    stats = stats or {}
    return f"{stats.get('records', 0)} records after the ledger ({stats.get('unparsed', 0)} unparsed)"
