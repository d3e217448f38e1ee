"""``silver.complete_transactions``: a transaction split across hours is applied whole, in the hour that completes it.

The simulated shop history is rendered in each format that marks transaction boundaries (Qlik
``transactionLastEvent``, SharePlex ``idx``, DTS BEGIN/COMMIT), and the Kafka timestamps are
shifted so that one multi-row transaction straddles the hour boundary: its last message lands in
hour 1, the others in hour 0. After hour 0, silver must hold exactly the transactions all of whose
messages landed in hour 0 (applied in commit order), and after hour 1 the source's final state.

``make test`` runs the Qlik case; SharePlex and DTS run in ``make test-extended`` (marker
``extended``): the pipeline's holding back is the same for every format, and each format's
transaction markers have their own tests (``test_formats_shareplex.py``, ``test_formats_dts.py``).
"""
from __future__ import annotations

import dataclasses

import pytest
from conftest import write_pipeline
from pipeline import H0, hour, ms, run_window, silver_rows

from cdclake.sim import SimulatedSource, create_topic, produce
from cdclake.sim.compare import compare_table
from cdclake.sim.model import apply_change
from cdclake.sim.wire import WIRE_FORMATS

FORMATS = {w.format: w for w in WIRE_FORMATS}
TABLES = ("customers", "products", "orders")


def straddling(history, messages):
    """Shift message timestamps so that a multi-message transaction ends exactly at hour 1.

    Returns the shifted messages and the commit times of the transactions complete before hour 1.
    """
    by_tx: dict[int, list] = {}
    for m in messages:
        if m.commit_ts_ms is not None:
            by_tx.setdefault(m.commit_ts_ms, []).append(m)
    commits = {tx.commit_ts_ms for tx in history}
    assert len(commits) == len(history)  # commit time identifies the transaction
    split = [tx for tx in history[len(history) // 2:]
             if len(tx.changes) > 1 and len({m.timestamp_ms for m in by_tx.get(tx.commit_ts_ms, [])}) > 1]
    tx = split[0]
    shift = ms(hour(1)) - max(m.timestamp_ms for m in by_tx[tx.commit_ts_ms])
    shifted = [dataclasses.replace(m, timestamp_ms=m.timestamp_ms + shift) for m in messages]
    assert min(m.timestamp_ms for m in shifted) >= ms(hour(0))
    done = set()
    for c in commits:
        tx_msgs = [m for m in shifted if m.commit_ts_ms == c]
        if tx_msgs and max(m.timestamp_ms for m in tx_msgs) < ms(hour(1)):
            done.add(c)
    assert tx.commit_ts_ms not in done and any(m.timestamp_ms < ms(hour(1)) for m in shifted if m.commit_ts_ms == tx.commit_ts_ms)
    return shifted, done


def state_of(history, tables, commits) -> dict:
    state = {name: {} for name in tables}
    for tx in history:
        if tx.commit_ts_ms in commits:
            for ch in tx.changes:
                apply_change(state, ch.table, ch.op, ch.before, ch.after, tables)
    return state


@pytest.mark.parametrize("fmt", ["qlik-json", pytest.param("shareplex-json", marks=pytest.mark.extended),
                                 pytest.param("dts-avro", marks=pytest.mark.extended)])
def test_incomplete_transaction_is_held_until_the_hour_that_completes_it(stack, spark, unique, fmt):
    wire = FORMATS[fmt]
    src = SimulatedSource(seed=61, start=H0, hours=1)
    history = src.run()
    render_kw = {"task": f"task-{unique}"} if fmt.startswith("qlik") else {}
    messages, done = straddling(history, wire.render(history, src.tables, partitions=wire.partitions, **render_kw))
    topic = f"tx.{wire.tag}.{unique}"
    create_topic(stack["bootstrap"], topic, wire.partitions)
    produce(stack["bootstrap"], topic, messages)
    source = dict(wire.options, topic=topic, format=fmt, table_prefix="t_")
    ns = f"tx_{wire.tag}_{unique}"
    path = write_pipeline(ns, [source], silver={"namespace": ns, "complete_transactions": True})

    run_window(spark, path, 0, 1)
    expected = state_of(history, src.tables, done)
    for t in TABLES:
        rows = silver_rows(spark, path, f"t_shop__{t}")
        assert not compare_table(expected[t], rows, list(src.tables[t].primary_key)), f"{t} after hour 0"
    run_window(spark, path, 1, 2)
    run_window(spark, path, 0, 1)  # a rerun of hour 0 changes nothing
    for t in TABLES:
        rows = silver_rows(spark, path, f"t_shop__{t}")
        assert not compare_table(src.final_state()[t], rows, list(src.tables[t].primary_key)), f"{t} after hour 1"
