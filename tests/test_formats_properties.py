"""Property: in every supported wire format, random histories delivered badly end as the source.

Hypothesis draws a simulated shop history (:class:`cdclake.sim.SimulatedSource`: interleaved
multi-table transactions, inserts, updates, deletes, keys deleted and re-inserted, NULLs set and
cleared, decimal, timestamp, date and binary columns) and, for each format of
:data:`cdclake.sim.wire.WIRE_FORMATS`, a bad delivery of its rendering: every message put on a
random partition, some sent twice, some an hour or two late. All formats run as one pipeline
(one topic each); silver runs hour by hour in a random order and then over the whole range, and
every table must equal the source's final state, value by value and with its column types.

Per format, what cannot move: Qlik's metadata messages stay first on partition 0 (data before its
metadata is quarantined until a rerun, which :mod:`tests.test_qlik_pipeline` covers), and DTS
BEGIN/COMMIT/DDL records stay where they are. AWS DMS is left out (:data:`FORMATS`): its messages
carry no source position, so its order is a partition's Kafka order, which re-partitioning and
duplicates sent later destroy (``test_round_trip`` covers the deliveries that keep it).

The random schemas, key changes, truncates and partial images of ``test_silver_properties`` are
rendered as Debezium JSON, the one wire format that can express all of them; this file covers the
other renderers on the shop schema. ``CDC_PROPERTY_EXAMPLES`` / ``CDC_PROPERTY_SEED`` as there.
It runs with ``CDC_EXTENDED_PROPERTIES=1``: one example runs eight formats through every stage
for each hour, several minutes on two cores.
"""
from __future__ import annotations

import dataclasses
import os
import random
import uuid

import pytest
from conftest import write_pipeline
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from pipeline import H0, hour, ms, run_window, silver_rows

from cdclake.sim import SimulatedSource, create_topic, produce
from cdclake.sim.compare import compare_table
from cdclake.sim.render import Message
from cdclake.sim.wire import WIRE_FORMATS

TABLES = ("customers", "products", "orders")
#: The formats delivered badly: those whose messages carry a source position.
FORMATS = [w for w in WIRE_FORMATS if w.format != "aws-dms-json"]
PARTITIONS = 2
_SEED = os.environ.get("CDC_PROPERTY_SEED")
SLOW = settings(max_examples=int(os.environ.get("CDC_PROPERTY_EXAMPLES", "1")), deadline=None,
                derandomize=not _SEED, database=None, phases=[Phase.explicit, Phase.generate], print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
seeded = seed(int(_SEED)) if _SEED else (lambda f: f)


def pinned(fmt: str, m: Message) -> bool:
    """Messages that keep their place: Qlik metadata, DTS transaction markers and DDL (no rows)."""
    return fmt.startswith("qlik") and m.rows == 0 or fmt == "dts-avro" and m.rows == 0


def deliveries(fmt: str, messages: list[Message], hours: int, rng: random.Random) -> list[Message]:
    """``messages`` re-delivered: random partition, one in ten twice, one in five up to two hours late."""
    out = []
    for m in messages:
        if pinned(fmt, m):
            out.append(dataclasses.replace(m, partition=0 if fmt.startswith("qlik") else m.partition % PARTITIONS))
            continue
        for _ in range(1 + (rng.randrange(10) == 0)):
            ts = m.timestamp_ms
            if rng.randrange(5) == 0:
                ts = max(m.timestamp_ms, min(ts + rng.randint(1, 2) * 3_600_000, ms(hour(hours)) - 1))
            out.append(dataclasses.replace(m, timestamp_ms=ts, partition=rng.randrange(PARTITIONS)))
    return sorted(out, key=lambda x: (x.timestamp_ms, x.partition))


@st.composite
def scenarios(draw):
    hours = draw(st.sampled_from((2, 3)))
    src = SimulatedSource(seed=draw(st.integers(0, 10_000)), start=H0, hours=hours, tx_per_hour=20)
    history = src.run()
    u = uuid.uuid4().hex[:8]
    streams = {}
    for w in FORMATS:
        kw = {"task": f"prop-{u}"} if w.format.startswith("qlik") else {}
        rng = random.Random(draw(st.integers(0, 2**32)))
        streams[w.format] = deliveries(w.format, w.render(history, src.tables, partitions=PARTITIONS, **kw), hours, rng)
    order = tuple(draw(st.permutations(range(hours))))
    return src, streams, order, u


@pytest.mark.skipif(not os.environ.get("CDC_EXTENDED_PROPERTIES"),
                    reason="set CDC_EXTENDED_PROPERTIES=1 (minutes per example)")
@SLOW
@seeded
@given(sc=scenarios())
def test_every_format_any_delivery_reaches_the_source(stack, spark, sc):
    src, streams, order, u = sc
    sources = []
    for w in FORMATS:
        topic = f"fprop.{w.tag}.{u}"
        create_topic(stack["bootstrap"], topic, PARTITIONS)
        produce(stack["bootstrap"], topic, streams[w.format])
        sources.append(dict(w.options, topic=topic, format=w.format, table_prefix=f"{w.tag}_"))
    path = write_pipeline(f"fprop_{u}", sources, silver={"namespace": f"fprop_{u}"})
    for h in order:
        result = run_window(spark, path, h, h + 1)
    result = run_window(spark, path, 0, src.hours)
    for topic, stats in result["normalize"].items():
        assert stats["quarantined"] == 0, topic
    expected = src.final_state()
    problems = []
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN lake.fprop_{u}").collect()]
    for w in FORMATS:
        for t in TABLES:
            names = [n for n in tables if n.startswith(f"{w.tag}_") and n.endswith(f"__{t}")]
            if len(names) != 1:
                problems.append(f"{w.format} {t}: silver tables {names}")
                continue
            rows = silver_rows(spark, path, names[0])
            diffs = compare_table(expected[t], rows, list(src.tables[t].primary_key))
            problems += [f"{w.format} {t}: {d}" for d in diffs[:3]]
    assert not problems, "\n".join(problems) + f"\nhour order {order}, seed {src.seed}"
