"""Silver stays exactly the source under the transport failures that peers got wrong.

Each test is a regression for a failure reported against another CDC tool:
- Apache Hudi compared MySQL binlog positions as strings and dropped updates (apache/hudi PR 9475);
- Apache Paimon let a late insert resurrect a deleted row (apache/paimon issue 5387);
- PostgreSQL's LSN alone is not commit order when transactions interleave (why Debezium has
  ``source.sequence``);
- Iceberg's MERGE fails when the source has two rows for one key.
Plus backfills in any order giving the same silver as one run (``make test-extended``; ``make test``
runs hours in random orders in the properties of ``test_silver_properties.py``).
"""
from __future__ import annotations

import contextlib
import json

import pytest
from conftest import write_pipeline
from pipeline import H0, hour, ms, run_window, silver_rows

from cdclake.sim import SimulatedSource, create_topic, debezium_json, produce
from cdclake.sim.render import Message
from cdclake.window import Window


def mysql(op: str, id_: int, value=None, file: int = 9, pos: int = 100, row: int = 0, before=None) -> str:
    """A schemaless Debezium MySQL event for table ``shop.t`` at binlog ``mysql-bin.<file>``/``pos``/``row``."""
    after = None if op == "d" else {"id": id_, "v": value}
    before = {"id": id_, "v": before} if op in ("u", "d") else None
    src = {"connector": "mysql", "db": "shop", "table": "t", "file": f"mysql-bin.{file:06d}", "pos": pos, "row": row,
           "ts_ms": 1704067200000 + pos, "snapshot": "false"}
    return json.dumps({"before": before, "after": after, "source": src, "op": op, "ts_ms": src["ts_ms"]})


def postgres(op: str, id_: int, value, lsn: int, sequence: list) -> str:
    """A schemaless Debezium PostgreSQL event with ``source.sequence`` = [last commit LSN, LSN]."""
    src = {"connector": "postgresql", "db": "pg", "schema": "public", "table": "t", "lsn": lsn,
           "sequence": json.dumps([str(x) if x is not None else None for x in sequence]), "ts_ms": 1704067200000 + lsn}
    return json.dumps({"before": None, "after": {"id": id_, "v": value}, "source": src, "op": op, "ts_ms": src["ts_ms"]})


def deliver(stack, topic: str, values_by_hour: dict[int, list[str]]) -> None:
    create_topic(stack["bootstrap"], topic, 1)
    msgs = []
    for h, values in sorted(values_by_hour.items()):
        msgs += [Message(b'{"id": 0}', v.encode(), ms(hour(h)) + 1000 + i, 0) for i, v in enumerate(values)]
    produce(stack["bootstrap"], topic, msgs)


def pipeline(topic: str, ns: str, **silver) -> str:
    return write_pipeline(ns, [{"topic": topic, "format": "debezium-json", "primary_key": ["id"]}],
                          silver={"namespace": ns, **silver})


def state(spark, path, table: str) -> dict:
    return {int(r["id"]): r["v"] for r in silver_rows(spark, path, table)}  # schemaless: text columns


def test_binlog_positions_compare_as_numbers_not_text(stack, spark, unique):
    """mysql-bin.000010 is after mysql-bin.000009, even though '000010' < '000009…' fails as text at pos 120 vs 900."""
    topic = f"sem.binlog.{unique}"
    deliver(stack, topic, {
        0: [mysql("c", 1, "old", file=9, pos=900), mysql("u", 1, "new", file=10, pos=120, before="old"),
            mysql("c", 2, "two-new", file=10, pos=130)],
        1: [mysql("c", 2, "two-late-older", file=9, pos=950)],  # late, from the older file
    })
    path = pipeline(topic, f"sem_binlog_{unique}")
    run_window(spark, path, 0, 2)
    assert state(spark, path, "shop__t") == {1: "new", 2: "two-new"}
    run_window(spark, path, 1, 2)
    assert state(spark, path, "shop__t") == {1: "new", 2: "two-new"}


def test_late_older_insert_does_not_resurrect_a_deleted_row(stack, spark, unique):
    topic = f"sem.resurrect.{unique}"
    deliver(stack, topic, {
        0: [mysql("c", 1, "a", pos=100), mysql("d", 1, before="a", pos=300), mysql("c", 2, "b", pos=310)],
        1: [mysql("c", 1, "late", pos=200), mysql("u", 1, "later", pos=250, before="late")],  # older than the delete
        2: [mysql("c", 1, "reinserted", pos=400)],  # a real re-insert after the delete
    })
    path = pipeline(topic, f"sem_res_{unique}")
    run_window(spark, path, 0, 1)
    run_window(spark, path, 1, 2)
    assert state(spark, path, "shop__t") == {2: "b"}
    run_window(spark, path, 2, 3)
    assert state(spark, path, "shop__t") == {1: "reinserted", 2: "b"}


def test_postgres_commit_order_from_source_sequence(stack, spark, unique):
    """T1 writes first (LSN 110) but commits after T2 (LSN 150): the committed order makes T1's value final."""
    topic = f"sem.pg.{unique}"
    deliver(stack, topic, {0: [
        postgres("c", 1, "initial", lsn=50, sequence=[None, 50]),
        postgres("u", 1, "T2", lsn=150, sequence=[100, 150]),   # T2 commits first
        postgres("u", 1, "T1", lsn=110, sequence=[200, 110]),   # T1 commits after T2 (later commit LSN)
    ]})
    path = pipeline(topic, f"sem_pg_{unique}")
    run_window(spark, path, 0, 1)
    assert state(spark, path, "pg__public__t") == {1: "T1"}


def test_duplicates_and_many_changes_of_one_key_in_one_merge(stack, spark, unique):
    """One key changed ten times, every message delivered twice, in one window: one MERGE, the last value."""
    topic = f"sem.dup.{unique}"
    values = [mysql("c", 1, "v0", pos=100)] + [mysql("u", 1, f"v{i}", pos=100 + i, before=f"v{i - 1}") for i in range(1, 10)]
    deliver(stack, topic, {0: [v for v in values for _ in range(2)]})
    path = pipeline(topic, f"sem_dup_{unique}")
    result = run_window(spark, path, 0, 1)
    assert result["silver"][0].changes == 20 and result["silver"][0].upserts == 1
    assert state(spark, path, "shop__t") == {1: "v9"}


@pytest.mark.extended  # make test: the shuffled pass of test_silver_properties' any-delivery properties
def test_backfill_in_any_order_equals_one_run(stack, spark, unique):
    """Hours 2, 0, 1 and then 0–2 again give the same silver (values and positions) as 0–2 once."""
    src = SimulatedSource(seed=53, start=H0, hours=3)
    topic = f"sem.backfill.{unique}"
    create_topic(stack["bootstrap"], topic, 2)
    produce(stack["bootstrap"], topic, debezium_json(src.run(), src.tables, partitions=2))
    once = pipeline(topic, f"sem_once_{unique}")
    shuffled = pipeline(topic, f"sem_shuf_{unique}")
    run_window(spark, once, 0, 3)
    for h in (2, 0, 1):
        run_window(spark, shuffled, h, h + 1)
    run_window(spark, shuffled, 0, 3)
    for t in ("customers", "products", "orders"):
        assert silver_rows(spark, shuffled, f"shop__{t}", meta=True) == silver_rows(spark, once, f"shop__{t}", meta=True), t


def test_soft_delete_mode_keeps_deleted_rows_flagged(stack, spark, unique):
    topic = f"sem.soft.{unique}"
    deliver(stack, topic, {0: [mysql("c", 1, "a", pos=100), mysql("c", 2, "b", pos=110), mysql("d", 1, before="a", pos=120)]})
    path = pipeline(topic, f"sem_soft_{unique}", delete_mode="soft")
    run_window(spark, path, 0, 1)
    rows = {int(r["id"]): (r["v"], r["_cdc_deleted"]) for r in silver_rows(spark, path, "shop__t", meta=True)}
    assert rows == {1: ("a", True), 2: ("b", False)}


def history_rows(spark, ns: str, table: str) -> list[tuple]:
    df = spark.table(f"lake.{ns}_history.{table}")
    rows = [(int(r["id"]), r["v"], r["_cdc_op"], [int(x) for x in r["_cdc_valid_from_position"]],
             None if r["_cdc_valid_to_position"] is None else [int(x) for x in r["_cdc_valid_to_position"]],
             r["_cdc_is_current"]) for r in df.collect()]
    return sorted(rows, key=lambda r: (r[0], r[3]))


def test_history_versions_under_late_arrival_and_reruns(stack, spark, unique):
    """SCD type 2: one row per version; a late change slots in between; reruns change nothing."""
    topic = f"sem.hist.{unique}"
    deliver(stack, topic, {
        0: [mysql("c", 1, "a", pos=100), mysql("d", 1, before="b", pos=300), mysql("c", 2, "x", pos=110)],
        1: [mysql("u", 1, "b", pos=200, before="a"), mysql("c", 1, "c", pos=400)],  # 200 arrives late
    })
    ns = f"sem_hist_{unique}"
    path = write_pipeline(ns, [{"topic": topic, "format": "debezium-json", "primary_key": ["id"], "history": True}],
                          silver={"namespace": ns})
    run_window(spark, path, 0, 1)
    run_window(spark, path, 1, 2)
    expected = [
        (1, "a", "insert", [9, 100, 0], [9, 200, 0], False),
        (1, "b", "update", [9, 200, 0], [9, 300, 0], False),
        (1, "b", "delete", [9, 300, 0], [9, 400, 0], False),
        (1, "c", "insert", [9, 400, 0], None, True),
        (2, "x", "insert", [9, 110, 0], None, True),
    ]
    assert history_rows(spark, ns, "shop__t") == expected
    assert state(spark, path, "shop__t") == {1: "c", 2: "x"}
    run_window(spark, path, 0, 2)
    run_window(spark, path, 0, 1)
    assert history_rows(spark, ns, "shop__t") == expected


def test_truncate_is_remembered_across_batches(stack, spark, unique):
    """A truncate removes older rows, and a late change older than it stays out in later batches."""
    topic = f"sem.trunc.{unique}"
    truncate = json.dumps({"before": None, "after": None, "op": "t", "ts_ms": 1704067200200,
                           "source": {"connector": "mysql", "db": "shop", "table": "t", "file": "mysql-bin.000009",
                                      "pos": 200, "row": 0, "ts_ms": 1704067200200}})
    deliver(stack, topic, {
        0: [mysql("c", 1, "a", pos=100), truncate, mysql("c", 2, "b", pos=300)],
        1: [mysql("c", 3, "late", pos=150)],  # committed before the truncate, delivered an hour later
    })
    path = pipeline(topic, f"sem_trunc_{unique}")
    run_window(spark, path, 0, 1)
    assert state(spark, path, "shop__t") == {2: "b"}
    run_window(spark, path, 1, 2)
    run_window(spark, path, 0, 2)
    assert state(spark, path, "shop__t") == {2: "b"}


def test_history_of_a_partial_key_change_starts_from_the_moved_row(stack, spark, unique):
    """SCD type 2: a key change whose after image leaves ``w`` out (id 1 -> 2 at pos 200) gives the
    new key a first version with the old row's ``w``; a change of ``w`` on id 1 at pos 150 that lands
    an hour later, after the key change was merged, reaches both keys' versions and silver."""
    topic = f"sem.histmove.{unique}"

    def event(op: str, before, after, pos: int) -> str:
        src = {"connector": "mysql", "db": "shop", "table": "m", "file": "mysql-bin.000009", "pos": pos, "row": 0,
               "ts_ms": 1704067200000 + pos, "snapshot": "false"}
        return json.dumps({"before": before, "after": after, "source": src, "op": op, "ts_ms": src["ts_ms"]})

    deliver(stack, topic, {
        0: [event("c", None, {"id": 1, "v": "a", "w": "x"}, 100), event("u", {"id": 1}, {"id": 2, "v": "b"}, 200)],
        1: [event("u", {"id": 1}, {"id": 1, "w": "y"}, 150)],  # late
    })
    ns = f"sem_histmove_{unique}"
    path = write_pipeline(ns, [{"topic": topic, "format": "debezium-json", "primary_key": ["id"], "history": True}],
                          silver={"namespace": ns})

    def versions() -> list[tuple]:
        rows = spark.table(f"lake.{ns}_history.shop__m").collect()
        return sorted(((int(r["id"]), r["v"], r["w"], r["_cdc_op"], int(r["_cdc_valid_from_position"][1]),
                        r["_cdc_is_current"]) for r in rows), key=lambda v: (v[0], v[4]))

    run_window(spark, path, 0, 1)
    assert versions() == [(1, "a", "x", "insert", 100, False), (1, None, None, "delete", 200, False),
                          (2, "b", "x", "update", 200, True)]
    run_window(spark, path, 1, 2)
    expected = [(1, "a", "x", "insert", 100, False), (1, "a", "y", "update", 150, False),
                (1, None, None, "delete", 200, False), (2, "b", "y", "update", 200, True)]
    assert versions() == expected
    assert {int(r["id"]): (r["v"], r["w"]) for r in silver_rows(spark, path, "shop__m")} == {2: ("b", "y")}
    run_window(spark, path, 0, 2)
    assert versions() == expected


def test_tombstones_past_the_retention_are_dropped(stack, spark, unique):
    """A key's tombstone older than ``tombstone_retention_hours`` before the newest one is dropped;
    the truncate's (the empty key) and the newer tombstones stay."""
    topic = f"sem.retention.{unique}"
    two_hours = 2 * 3_600_000
    truncate = json.dumps({"before": None, "after": None, "op": "t", "ts_ms": 1704067200050,
                           "source": {"connector": "mysql", "db": "shop", "table": "t", "file": "mysql-bin.000009",
                                      "pos": 50, "row": 0, "ts_ms": 1704067200050}})
    deliver(stack, topic, {0: [truncate, mysql("c", 1, "a", pos=100), mysql("d", 1, before="a", pos=200),
                               mysql("c", 2, "b", pos=300), mysql("d", 2, before="b", pos=two_hours + 300),
                               mysql("c", 3, "c", pos=two_hours + 400)]})
    path = pipeline(topic, f"sem_ret_{unique}", tombstone_retention_hours=1)
    run_window(spark, path, 0, 1)
    assert state(spark, path, "shop__t") == {3: "c"}
    tombs = spark.table(f"lake.`sem_ret_{unique}_tombstones`.`shop__t`").collect()
    assert sorted(list(r["key"]) for r in tombs) == [[], ["2"]]


def test_tables_merged_at_once_equal_tables_merged_in_turn(stack, spark, unique):
    """``silver.parallel_tables``: the three tables of a simulated shop (inserts, updates, deletes,
    history), merged by three driver threads at once, equal the same tables merged one after the
    other, values and positions; a failing table names itself and the others merge."""
    from cdclake.config import load_pipeline
    from cdclake.errors import SilverError
    from cdclake.silver import build_silver

    src = SimulatedSource(seed=61, start=H0, hours=1, tx_per_hour=40)
    topic = f"sem.parallel.{unique}"
    create_topic(stack["bootstrap"], topic, 2)
    produce(stack["bootstrap"], topic, debezium_json(src.run(), src.tables, partitions=2))
    source = {"topic": topic, "format": "debezium-json", "history": True}
    in_turn = write_pipeline(f"sem_turn_{unique}", [source], silver={"namespace": f"sem_turn_{unique}",
                                                                      "parallel_tables": 1})
    at_once = write_pipeline(f"sem_once_{unique}", [source], silver={"namespace": f"sem_once_{unique}",
                                                                      "parallel_tables": 3})
    run_window(spark, in_turn, 0, 1)  # lands and normalizes the hour for both pipelines
    results = build_silver(spark, load_pipeline(at_once), Window(hour(0), hour(1)))
    assert len(results) == 3 and all(r.changes for r in results) and sum(r.deletes for r in results)
    for t in ("customers", "products", "orders"):
        assert silver_rows(spark, at_once, f"shop__{t}", meta=True) == silver_rows(spark, in_turn, f"shop__{t}", meta=True), t
    # a table whose silver columns cannot take the batch's types fails alone
    orders = f"lake.sem_once_{unique}.shop__orders"
    spark.sql(f"DROP TABLE {orders} PURGE")
    spark.sql(f"CREATE TABLE {orders} (id string) USING iceberg")
    with pytest.raises(SilverError, match=r"^1 table\(s\) not merged: .*shop__orders: SchemaChangeError"):
        build_silver(spark, load_pipeline(at_once), Window(hour(0), hour(1)))


def _last_execution(store) -> int:
    """The id of the latest SQL execution Spark's status store holds (-1: none)."""
    runs = store.executionsList()
    return max((runs.apply(i).executionId() for i in range(runs.size())), default=-1)


@contextlib.contextmanager
def _spark_conf(spark, settings: dict[str, str]):
    """Spark SQL ``settings`` for the block, the session's own after it."""
    saved = {k: spark.conf.get(k) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            spark.conf.set(k, v)


def test_a_bloom_filter_of_the_batch_keys_changes_no_merge(stack, spark, unique):
    """The MERGE's table rows filtered by a Bloom filter of the batch's keys before its join
    (``cdclake.catalog.spark_conf``: Spark builds one for a table scan of 1 MB or more; forced
    here on small tables) give the same silver tables, values and positions, as MERGEs without
    one, over three hours of inserts, updates and deletes of a simulated shop."""
    from cdclake.config import load_pipeline
    from cdclake.silver import build_silver

    src = SimulatedSource(seed=67, start=H0, hours=3, tx_per_hour=30)
    topic = f"sem.bloom.{unique}"
    create_topic(stack["bootstrap"], topic, 2)
    produce(stack["bootstrap"], topic, debezium_json(src.run(), src.tables, partitions=2))
    source = {"topic": topic, "format": "debezium-json"}
    spark_merge = {"file_merge_max_changes": 0}  # the Bloom filter is the MERGE's
    plain = write_pipeline(f"sem_plain_{unique}", [source], silver={"namespace": f"sem_plain_{unique}", **spark_merge})
    bloom = write_pipeline(f"sem_bloom_{unique}", [source], silver={"namespace": f"sem_bloom_{unique}", **spark_merge})
    store = spark._jsparkSession.sharedState().statusStore()
    filtered = 0
    for h in range(3):
        with _spark_conf(spark, {"spark.sql.optimizer.runtime.bloomFilter.enabled": "false"}):
            run_window(spark, plain, h, h + 1)  # lands and normalizes the hour for both pipelines
        with _spark_conf(spark, {"spark.sql.optimizer.runtime.bloomFilter.enabled": "true",
                                 "spark.sql.optimizer.runtime.bloomFilter.applicationSideScanSizeThreshold": "1",
                                 "spark.sql.autoBroadcastJoinThreshold": "-1"}):
            before = _last_execution(store)
            build_silver(spark, load_pipeline(bloom), Window(hour(h), hour(h + 1)))
        runs = store.executionsList()
        filtered += sum("might_contain" in runs.apply(i).physicalPlanDescription() for i in range(runs.size())
                        if runs.apply(i).executionId() > before)
    assert filtered >= 3  # the MERGEs of the second and third hours (three tables each) were filtered
    for t in ("customers", "products", "orders"):
        assert silver_rows(spark, bloom, f"shop__{t}", meta=True) == silver_rows(spark, plain, f"shop__{t}", meta=True), t


def maxwell_row(op: str, id_: int, value=None, ts: int = 1704067200) -> str:
    """A Maxwell row of table ``shop.t`` as Maxwell ships (``output_binlog_position`` off: no ``position``)."""
    return json.dumps({"database": "shop", "table": "t", "type": op, "ts": ts, "xid": 7000 + id_, "commit": True,
                       "data": {"id": id_, "v": value}, "primary_key_columns": ["id"]})


def deliver_to(stack, topic: str, partitions: int, sends: list[tuple[int, int, str]]) -> None:
    """``(hour, partition, value)`` sends to a new topic of ``partitions`` partitions, in list order."""
    create_topic(stack["bootstrap"], topic, partitions)
    produce(stack["bootstrap"], topic, [Message(None, v.encode(), ms(hour(h)) + 1000 + i, p)
                                        for i, (h, p, v) in enumerate(sends)])


def maxwell_pipeline(topic: str, ns: str, **silver) -> str:
    """A ``maxwell-json`` source with no option set (``without_position`` takes its default)."""
    return write_pipeline(ns, [{"topic": topic, "format": "maxwell-json"}], silver={"namespace": ns, **silver})


def test_changes_without_position_keep_the_kafka_order_of_their_partition(stack, spark, unique):
    """Maxwell as it ships (no ``position``, the producer partitioning by database or primary key):
    each key's changes in one partition, several keys over two partitions and two hours, no option
    set: silver follows each partition's order, across hours too (hard and soft delete)."""
    topic = f"sem.nopos.{unique}"
    deliver_to(stack, topic, 2, [
        (0, 1, maxwell_row("insert", 1, "a")), (0, 0, maxwell_row("insert", 2, "b")),
        (0, 1, maxwell_row("update", 1, "a2")), (0, 0, maxwell_row("insert", 3, "c")),
        (1, 0, maxwell_row("update", 2, "b2")), (1, 1, maxwell_row("update", 1, "a3")),
        (1, 0, maxwell_row("delete", 3, "c")), (1, 0, maxwell_row("insert", 4, "d"))])
    for mode in ("hard", "soft"):
        path = maxwell_pipeline(topic, f"sem_nopos_{mode}_{unique}", delete_mode=mode)
        run_window(spark, path, 0, 1)
        assert state(spark, path, "shop__t") == {1: "a2", 2: "b", 3: "c"}
        run_window(spark, path, 1, 2)
        live = {r["id"]: r["v"] for r in silver_rows(spark, path, "shop__t", meta=True) if not r.get("_cdc_deleted")}
        assert {int(k): v for k, v in live.items()} == {1: "a3", 2: "b2", 4: "d"}, mode


def test_a_keys_changes_without_position_over_two_partitions_fail_silver_naming_the_option(stack, spark, unique):
    """Changes of one key without a source position in two Kafka partitions (Maxwell's
    ``producer_partition_by=random``, an AWS DMS key spread over partitions) have no known order:
    silver fails the table, naming it, the key, both partitions and the option, in one batch, and
    against the silver row of an earlier hour (a later change in a lower-numbered partition, which
    the partition-then-offset order would take as older and drop). Hard-delete mode: a key's
    tombstone counts as one of its changes. Other tables merge."""
    from cdclake.errors import SilverError

    topic = f"sem.spread.{unique}"
    other = json.dumps({"database": "shop", "table": "u", "type": "insert", "ts": 1704067200, "xid": 1,
                        "data": {"id": 9, "v": "ok"}, "primary_key_columns": ["id"]})
    deliver_to(stack, topic, 2, [
        (0, 0, maxwell_row("insert", 1, "a")), (0, 1, maxwell_row("update", 1, "b")), (0, 1, other)])
    path = maxwell_pipeline(topic, f"sem_spread_{unique}")
    with pytest.raises(SilverError) as err:
        run_window(spark, path, 0, 1)
    text = str(err.value)
    assert text.startswith("1 table(s) not merged: ") and "shop__t" in text and "shop__u" not in text, text
    assert "key (id=1) has changes without a source position in Kafka partitions 0 and 1" in text, text
    assert "sources[].options.without_position" in text and "producer_partition_by" in text, text
    assert state(spark, path, "shop__u") == {9: "ok"}

    # across hours: the silver row's latest change (partition 1) and a later one in partition 0
    later = f"sem.spread2.{unique}"
    deliver_to(stack, later, 2, [(0, 1, maxwell_row("insert", 1, "a")), (1, 0, maxwell_row("update", 1, "b"))])
    for mode in ("hard", "soft"):
        path = maxwell_pipeline(later, f"sem_spread2_{mode}_{unique}", delete_mode=mode)
        run_window(spark, path, 0, 1)
        assert state(spark, path, "shop__t") == {1: "a"}
        with pytest.raises(SilverError, match=r"shop__t.*key \(id=1\) has a change without a source position in "
                                              r"Kafka partition 0, and its silver row was last changed without one in "
                                              r"partition 1.*sources\[\]\.options\.without_position"):
            run_window(spark, path, 1, 2)
        assert state(spark, path, "shop__t") == {1: "a"}  # nothing applied in an arbitrary order

    # hard-delete mode: the key's tombstone (partition 1) and a later insert in partition 0
    deleted = f"sem.spread3.{unique}"
    deliver_to(stack, deleted, 2, [(0, 1, maxwell_row("insert", 1, "a")), (0, 1, maxwell_row("delete", 1, "a")),
                                   (1, 0, maxwell_row("insert", 1, "again"))])
    path = maxwell_pipeline(deleted, f"sem_spread3_{unique}")
    run_window(spark, path, 0, 1)
    assert state(spark, path, "shop__t") == {}
    with pytest.raises(SilverError, match=r"key \(id=1\) has changes without a source position in Kafka partitions "
                                          r"0 and 1"):
        run_window(spark, path, 1, 2)
