"""Hour tables written by the Python workers (:mod:`cdclake.lake.files`) against Spark's reading
of them, and bronze's map columns built in Arrow against Spark's ``bronze_frame``
(:func:`cdclake.normalize.files.bronze_batch`)."""
from __future__ import annotations

import datetime as dt
import uuid

from conftest import write_pipeline

from cdclake.catalog import pyiceberg_catalog, qualified
from cdclake.config import load_pipeline
from cdclake.lake import (RAW_SCHEMA, RAW_TABLE, STAGED_SCHEMA, arrow_schema, bronze_frame, commit_hours,
                          ensure_bronze_tables, ensure_raw_tables, hour_table, write_local)
from cdclake.lake import files as lake_files
from cdclake.window import UTC, Window

H0 = dt.datetime(2031, 3, 1, 10, tzinfo=UTC)


def _raw_rows(topic: str, hour: dt.datetime, n: int, start: int = 0) -> list[tuple]:
    return [(topic, i % 2, start + i, int(hour.timestamp() * 1000) + i, f"k{i}".encode(),
             None if i % 7 == 3 else (f"value {i} " * (i % 5)).encode(),
             [{"name": "h", "value": b"x"}] if i % 3 == 0 else [], hour) for i in range(n)]


def _batch(rows: list[tuple]):
    import pyarrow as pa

    schema = arrow_schema(RAW_SCHEMA)
    cols = list(zip(*rows))
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(cols, schema)], schema=schema)


def _read(spark, cfg, topics: list[str]) -> list[tuple]:
    df = spark.table(qualified(cfg, RAW_TABLE)).where(spark_in(topics))
    return sorted((r.kafka_topic, r.kafka_partition, r.kafka_offset, r.kafka_timestamp_ms, bytes(r.key),
                   None if r.value is None else bytes(r.value),
                   [{"name": h.name, "value": bytes(h.value)} for h in r.headers],
                   r.landed_hour.replace(tzinfo=UTC)) for r in df.collect())


def spark_in(values: list[str]):
    from pyspark.sql import functions as F

    return F.col("kafka_topic").isin(values)


def test_files_written_in_python_are_the_window_spark_reads_and_a_rerun_replaces_them(spark, monkeypatch):
    """Rows of two topics and two hours, fed in runs that interleave partitions, in row groups of a
    few hundred bytes and with one file open at a time (so that a partition gets several files):
    Spark reads back exactly the rows, each file in its topic and hour's partition with its
    record count and bounds; a rerun of one hour replaces that hour only; an empty rerun empties it."""
    cfg = load_pipeline(write_pipeline(f"hourfiles_{uuid.uuid4().hex[:6]}", [{"topic": "t", "format": "debezium-json"}]))
    ensure_raw_tables(spark, cfg)
    u = uuid.uuid4().hex[:6]
    topics = [f"hf.a.{u}", f"hf.b/{u}"]  # a '/' in a topic stays a partition value, never a path
    h1 = H0 + dt.timedelta(hours=1)
    a0 = _raw_rows(topics[0], H0, 40)
    rows = a0[:20] + _raw_rows(topics[1], H0, 25) + a0[20:] + _raw_rows(topics[0], h1, 30, 40) + _raw_rows(
        topics[1], h1, 5, 25)
    table = hour_table(cfg, RAW_TABLE, plain=("key", "value"))
    table.__dict__["row_group_bytes"] = 300
    monkeypatch.setattr(lake_files, "MAX_OPEN_FILES", 1)
    both = Window(H0, h1 + dt.timedelta(hours=1))
    files = write_local(table, [_batch(rows[i:i + 17]) for i in range(0, len(rows), 17)])
    assert len({(f.partition[0], f.partition[1]) for f in files}) == 4 and len(files) > 4
    assert max(len(f.split_offsets or []) for f in files) > 1
    commit_hours(cfg, RAW_TABLE, both, topics, files, "test")
    assert _read(spark, cfg, topics) == sorted(rows)
    meta = {r.file_path: r for r in spark.sql(f"SELECT file_path, record_count, partition, lower_bounds "
                                              f"FROM {qualified(cfg, RAW_TABLE)}.files").collect()}
    for f in files:
        m = meta[f.file_path]
        assert m.record_count == f.record_count and m.partition.kafka_topic == f.partition[0]
        assert "/" not in f.file_path.split("kafka_topic=")[1].split("/landed_hour_hour=")[0]
    hits = spark.table(qualified(cfg, RAW_TABLE)).where(spark_in(topics) & (spark_col("kafka_offset") >= 60))
    assert sorted(r.kafka_offset for r in hits.collect()) == list(range(60, 70))

    again = _raw_rows(topics[0], h1, 3, 40)
    commit_hours(cfg, RAW_TABLE, Window(h1, h1 + dt.timedelta(hours=1)), [topics[0]],
                 write_local(table, [_batch(again)]), "test")
    want = [r for r in rows if not (r[0] == topics[0] and r[7] == h1)] + again
    assert _read(spark, cfg, topics) == sorted(want)
    commit_hours(cfg, RAW_TABLE, Window(H0, h1), topics, [], "test")
    assert _read(spark, cfg, topics) == sorted(r for r in want if r[7] == h1)
    cat = pyiceberg_catalog(cfg.catalog)
    summary = cat.load_table(("raw", "kafka_records")).current_snapshot().summary
    cat.engine.dispose()
    assert summary["cdc.operation"] == "test"


def test_a_large_batch_is_written_as_row_groups_of_one_size(spark):
    """A batch past the row group size is cut into row groups of one size (no small last group); a
    table whose row groups are sized in Parquet bytes starts from an assumed compression, so that
    its first row group is not a fraction of the later ones (each a Spark task for its readers)."""
    import pyarrow.parquet as pq

    cfg = load_pipeline(write_pipeline(f"hourgroups_{uuid.uuid4().hex[:6]}", [{"topic": "t", "format": "debezium-json"}]))
    ensure_raw_tables(spark, cfg)
    rows = _batch(_raw_rows(f"hg.{uuid.uuid4().hex[:6]}", H0, 3000))
    for compressed in (False, True):
        table = hour_table(cfg, RAW_TABLE, plain=("key", "value"), compressed_groups=compressed)
        table.__dict__["row_group_bytes"] = rows.nbytes // 5 if not compressed else rows.nbytes // 12
        (f,) = write_local(table, [rows])
        with table.io.new_input(f.file_path).open() as stream:
            meta = pq.ParquetFile(stream).metadata
            sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert sum(sizes) == 3000 and min(sizes) >= 0.9 * max(sizes), (compressed, sizes)
        # Arrow bytes over the row group size: about 5 groups; Parquet bytes at the assumed ratio: 12 / 4
        assert len(sizes) in ((3, 4) if compressed else (5, 6, 7)), (compressed, sizes)


def spark_col(name: str):
    from pyspark.sql import functions as F

    return F.col(name)


def test_bronze_maps_built_in_arrow_equal_sparks(spark):
    """:func:`bronze_batch` gives the rows ``bronze_frame`` gives in Spark: maps in their keys'
    order, empty maps, null maps, null values, non-ASCII keys; and the shape columns Spark leaves
    null: ``key_change`` as silver's :func:`cdclake.silver.keys.key_change` of the row's own key
    tells it in Spark SQL (keys of one and two columns, empty and null keys, a key column missing
    from an image, null values, ops other than update and none), ``shape_id`` as the row-by-row
    reference (:func:`cdclake.lake.change_shapes_exact`) gives it."""
    import pyarrow as pa

    from pyspark.sql import functions as F

    from cdclake.lake import SHAPE_COLUMNS, STAGED_MAPS, change_shapes_exact
    from cdclake.normalize.files import bronze_batch
    from cdclake.silver.keys import key_change

    cfg = load_pipeline(write_pipeline(f"bronzemaps_{uuid.uuid4().hex[:6]}", [{"topic": "t", "format": "debezium-json"}]))
    ensure_bronze_tables(spark, cfg)
    schema = arrow_schema(STAGED_SCHEMA)
    images = [(["id", "ñame", "a"], ["1", "x", None]), ([], []), (None, None), (["z", "b"], ["2", ""])]
    rows = []
    for i in range(40):
        row = {}
        for f in STAGED_SCHEMA.fields:
            row[f.name] = None
        k, v = images[i % 4]
        k2, v2 = images[(i + 1) % 4]
        row.update(source_format="debezium-json", source_table=f"t{i % 3}",
                   op=[None, "update", "insert", "delete", "update"][i % 5] if i % 7 else "update", row_in_record=0,
                   kafka_topic="t", kafka_partition=0, kafka_offset=i, landed_hour=H0,
                   before_k=k, before_v=v, after_k=k2, after_v=v2,
                   primary_key=[["id"], ["id", "ñame"], [], None, ["z"], ["a", "id"]][i % 6])
        for name in ("column_types_k", "column_types_v"):
            if name in row:
                row[name] = ["id", "ñame"] if name.endswith("_k") else ["int", "string"]
        rows.append(row)
    staged = pa.Table.from_pylist(rows, schema=schema).slice(3, 30)
    shapes: dict = {}
    mine = bronze_batch(staged, shapes)
    theirs = bronze_frame(spark.createDataFrame(staged.to_pylist(), STAGED_SCHEMA))
    assert mine.schema.names == theirs.columns
    shaped = [f.name for f in SHAPE_COLUMNS]
    # map_entries keeps a map's order, which PySpark's conversion of a map to a dict does not
    entries = theirs.select(*[F.map_entries(c).alias(c) if c in STAGED_MAPS else F.col(c) for c in theirs.columns
                              if c not in shaped])
    assert [[_plain(v) for n, v in r.items() if n not in shaped] for r in mine.to_pylist()] == [
        [_plain(v) for v in r.asDict().values()] for r in entries.collect()]
    moved = theirs.select(F.when(F.col("primary_key").isNotNull(), key_change(F.col("primary_key"))).alias("m"))
    assert mine.column("key_change").to_pylist() == [r["m"] for r in moved.collect()]
    assert {True, False, None} <= set(mine.column("key_change").to_pylist())
    ids, flags, seen = change_shapes_exact(staged)
    assert mine.column("shape_id").to_pylist() == ids.to_pylist() and seen == shapes and len(shapes) > 4


def _plain(x):
    """A value as both sides give it: maps as lists of (key, value) pairs, times in UTC."""
    if isinstance(x, list) and x and hasattr(x[0], "asDict"):
        return [tuple(e) for e in x]
    if isinstance(x, dt.datetime):
        return x if x.tzinfo else x.replace(tzinfo=UTC)
    return x


def test_a_window_commit_waits_for_a_locked_catalog_then_commits_once(spark, caplog, monkeypatch):
    """The catalog database taken exclusively by another connection for 2.5 s (more than one
    attempt's busy wait) after the table was loaded and its window's files found, before the
    commit: :func:`commit_hours` retries the whole attempt, then commits the window once."""
    import logging
    import sqlite3
    import threading

    from conftest import STATE

    import pyiceberg.catalog.sql  # noqa: F401  (imported before the lock: the attempts start at once)

    from cdclake.lake import hours

    cfg = load_pipeline(write_pipeline(f"hourlock_{uuid.uuid4().hex[:6]}", [{"topic": "t", "format": "debezium-json"}]))
    ensure_raw_tables(spark, cfg)
    topic = f"hf.lock.{uuid.uuid4().hex[:6]}"
    rows = _raw_rows(topic, H0, 12)
    files = write_local(hour_table(cfg, RAW_TABLE), [_batch(rows)])
    found, timers = hours.window_files, []

    def then_lock(*args):
        out = found(*args)
        if not timers:  # the first attempt: the lock comes between the files found and the commit
            con = sqlite3.connect(STATE / "catalog.db", isolation_level=None, check_same_thread=False)
            con.execute("BEGIN EXCLUSIVE")
            timers.append(threading.Timer(2.5, lambda: (con.execute("ROLLBACK"), con.close())))
            timers[0].start()
        return out

    monkeypatch.setattr(hours, "window_files", then_lock)
    try:
        with caplog.at_level(logging.INFO):
            commit_hours(cfg, RAW_TABLE, Window(H0, H0 + dt.timedelta(hours=1)), [topic], files, "test")
    finally:
        for t in timers:
            t.join()
    assert timers and any("is locked; retry" in r.getMessage() for r in caplog.records)
    assert _read(spark, cfg, [topic]) == sorted(rows)


def test_a_file_closed_to_open_another_keeps_the_rows_it_still_buffered(spark, monkeypatch):
    """One file open at a time: a partition written once (a row group), then given a few rows
    too few for a row group, then closed because another partition's file opens: those buffered
    rows are in its file, as every other row is."""
    cfg = load_pipeline(write_pipeline(f"hourbuf_{uuid.uuid4().hex[:6]}", [{"topic": "t", "format": "debezium-json"}]))
    ensure_raw_tables(spark, cfg)
    table = hour_table(cfg, RAW_TABLE)
    table.__dict__["row_group_bytes"] = 300
    monkeypatch.setattr(lake_files, "MAX_OPEN_FILES", 1)
    a, b = _raw_rows("buf.a", H0, 19), _raw_rows("buf.b", H0, 17)
    files = write_local(table, [_batch(a[:17]), _batch(a[17:]), _batch(b)])
    assert sum(f.record_count for f in files) == len(a) + len(b)
    assert sum(f.record_count for f in files if f.partition[0] == "buf.a") == len(a)


def test_an_overwrite_across_many_manifests_finds_every_file_it_deletes(tmp_path):
    """pyiceberg's overwrite looks for the files it deletes in the parent snapshot's manifests on a
    thread pool, all threads calling one manifest evaluator, whose visitor keeps the manifest it
    is evaluating in an attribute: two threads at once could skip the manifest of a file to delete
    and fail the commit ("Missing required files to delete"), as a rerun's land did in a catalog of
    many topics. :func:`cdclake.lake.hours.overwrite` evaluates one manifest at a time: replacing
    the files of 48 topics, each in a manifest of its own, finds them all, every time (before, the
    first or second try failed)."""
    import sys

    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    from cdclake.lake import stage_replace, transaction

    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    cat.create_namespace("n")
    schema = Schema(NestedField(1, "topic", StringType(), required=False), NestedField(2, "v", LongType(), required=False))
    table = cat.create_table("n.t", schema, partition_spec=PartitionSpec(
        PartitionField(source_id=1, field_id=1000, transform=IdentityTransform(), name="topic")))
    topics = [f"topic.{i:02d}" for i in range(48)]
    for t in topics:  # one commit, and so one manifest, per topic
        table.append(pa.table({"topic": [t], "v": [1]}, schema=schema.as_arrow()))
    table = cat.load_table("n.t")
    old = [task.file for task in table.scan().plan_files()]
    assert len(old) == len(topics)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can
    try:
        for _ in range(10):  # staged, not committed: the deleted files are looked for when staging
            stage_replace(transaction(table), old, [], {})
    finally:
        sys.setswitchinterval(switch)


def test_the_drivers_read_of_an_hour_gives_a_column_added_later_as_nulls(tmp_path):
    """:func:`cdclake.lake.read_hours` picks the window's files of the topics asked for by partition
    value, reads them by name with pyarrow and types them as the table's schema: a column added
    after a file was written reads as nulls in that file's rows, as Iceberg reads it."""
    import pyarrow as pa
    import yaml
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import HourTransform, IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    from cdclake.lake import read_hours

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "127.0.0.1:9"}, "sources": [{"topic": "t", "format": "debezium-json"}],
        "catalog": {"name": "lake", "uri": f"jdbc:sqlite:{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/w"}}))
    (tmp_path / "w").mkdir()
    cfg = load_pipeline(path)
    cat = pyiceberg_catalog(cfg.catalog)
    cat.create_namespace("n")
    schema = Schema(NestedField(1, "kafka_topic", StringType(), required=False),
                    NestedField(2, "landed_hour", TimestamptzType(), required=False),
                    NestedField(3, "v", LongType(), required=False))
    table = cat.create_table("n.hours", schema, partition_spec=PartitionSpec(
        PartitionField(1, 1000, IdentityTransform(), "kafka_topic"), PartitionField(2, 1001, HourTransform(), "landed_hour_hour")))
    h1 = H0 + dt.timedelta(hours=1)

    def rows(topic, hour, vs, **more):
        return {"kafka_topic": [topic] * len(vs), "landed_hour": [hour] * len(vs), "v": vs, **more}

    table.append(pa.Table.from_pydict(rows("a", H0, [1, 2]), schema=schema.as_arrow()))
    table.append(pa.Table.from_pydict(rows("b", H0, [3]), schema=schema.as_arrow()))
    with table.update_schema() as update:
        update.add_column("w", StringType())
    table = cat.load_table("n.hours")
    table.append(pa.Table.from_pydict(rows("a", H0, [4], w=["x"]), schema=table.schema().as_arrow()))
    table.append(pa.Table.from_pydict(rows("a", h1, [5], w=["y"]), schema=table.schema().as_arrow()))

    got = read_hours(cfg, "n.hours", ["a"], H0, h1, ["v", "w", "landed_hour"])
    assert got.schema.field("landed_hour").type == pa.timestamp("us", tz="UTC")
    assert sorted(zip(got["v"].to_pylist(), got["w"].to_pylist())) == [(1, None), (2, None), (4, "x")]
    assert sorted(read_hours(cfg, "n.hours", ["a", "b"], H0, None, ["v"])["v"].to_pylist()) == [1, 2, 3, 4, 5]
    assert read_hours(cfg, "n.hours", ["c"], None, None, ["v"]).num_rows == 0


def test_a_tasks_read_puts_a_files_small_row_groups_together_and_keeps_files_apart(spark, monkeypatch):
    """:func:`cdclake.lake.read_splits` over two files of row groups of a few rows: batches of at
    most ``READ_BATCH_ROWS`` rows, several row groups each, never rows of two files, every row
    once in the files' order; :func:`cdclake.normalize.rows.batch_records` gives the same Kafka
    columns, ``landed_hour`` included, as the batch's own ``to_pylist``."""
    import pyarrow.parquet as pq

    from cdclake.lake import hours as lake_hours
    from cdclake.lake import read_splits
    from cdclake.normalize.rows import batch_records

    cfg = load_pipeline(write_pipeline(f"hourreads_{uuid.uuid4().hex[:6]}", [{"topic": "t", "format": "debezium-json"}]))
    ensure_raw_tables(spark, cfg)
    topic = f"hr.{uuid.uuid4().hex[:6]}"
    table = hour_table(cfg, RAW_TABLE, plain=("key", "value"))
    table.__dict__["row_group_bytes"] = 300
    h1 = H0 + dt.timedelta(hours=1)
    files = [write_local(table, [_batch(_raw_rows(topic, hour, 120, start))])[0] for hour, start in ((H0, 0), (h1, 500))]
    groups = []
    for f in files:
        with table.io.new_input(f.file_path).open() as stream:
            groups.append(pq.ParquetFile(stream).metadata.num_row_groups)
    assert min(groups) > 4
    monkeypatch.setattr(lake_hours, "READ_BATCH_ROWS", 50)
    batches = list(read_splits(table, [(f.file_path, []) for f in files], RAW_SCHEMA.names))
    assert all(0 < b.num_rows <= 50 for b in batches) and len(batches) < sum(groups)
    assert all(len(set(b.column("landed_hour").to_pylist())) == 1 for b in batches)  # one file (hour) per batch
    offsets = [o for b in batches for o in b.column("kafka_offset").to_pylist()]
    assert offsets == list(range(120)) + list(range(500, 620))
    for b in batches:
        want = list(zip(*(b.column(n).to_pylist() for n in ("kafka_topic", "kafka_partition", "kafka_offset",
                                                            "kafka_timestamp_ms", "landed_hour"))))
        got = [kcols for kcols, _ in batch_records(b)]
        assert got == want and [r.value for _, r in batch_records(b)] == b.column("value").to_pylist()


def test_a_sorted_tables_rows_are_written_as_a_stable_sort_of_the_rows_would_order_them(spark):
    """Rows of an ordered hour table (bronze's changes: by source table, schema and database),
    fed in batches whose tables interleave and come back, some with null names: each file holds
    its rows exactly as pyarrow's stable ``sort_by`` of them, ascending, nulls last, orders them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from cdclake.lake import BRONZE_TABLE, BRONZE_WRITE_ORDER

    cfg = load_pipeline(write_pipeline(f"hourorder_{uuid.uuid4().hex[:6]}", [{"topic": "t", "format": "debezium-json"}]))
    ensure_bronze_tables(spark, cfg)
    topic = f"ho.{uuid.uuid4().hex[:6]}"
    table = hour_table(cfg, BRONZE_TABLE, order=BRONZE_WRITE_ORDER)
    names = [("orders", "s", "db"), ("customers", "s", "db"), ("orders", None, "db"), (None, "s", "db"),
             ("orders", "s", None), ("Orders", "s", "db"), ("customers", "s", "db2")]
    n = 400
    # runs of 7 rows, the tables coming back (kept as runs), and a table per row (sorted per batch)
    for run, size in ((lambda i: i // 7 + i // 50, 37), (lambda i: i, 400)):
        cols = {"kafka_topic": [topic] * n, "landed_hour": [H0] * n, "kafka_partition": [0] * n,
                "kafka_offset": list(range(n)), "source_table": [], "source_schema": [], "source_database": []}
        for i in range(n):
            t, s, d = names[run(i) % len(names)]
            cols["source_table"].append(t), cols["source_schema"].append(s), cols["source_database"].append(d)
        rows = pa.table(cols)
        (f,) = write_local(table, [rows.slice(i, size) for i in range(0, n, size)])
        with table.io.new_input(f.file_path).open() as stream:
            got = pq.read_table(stream, columns=list(cols))
        want = rows.cast(got.select(list(cols)).schema).sort_by([(c, "ascending") for c in BRONZE_WRITE_ORDER])
        assert got.select(list(cols)).to_pylist() == want.to_pylist()


def test_a_writing_task_takes_each_kind_of_row_as_the_rows_of_that_kind_in_order():
    """``_rows_of``: the rows of one kind, in order, whether they are one run (a slice) or not, and
    none for a kind without rows; :func:`cdclake.normalize.rows.tagged_batch` lays each kind out
    as one run, the fast path's changes with the others."""
    import pyarrow as pa

    from cdclake.normalize.files import _rows_of

    for kinds in (["change", "change", "control", "quarantine"], ["control", "change", "change", None],
                  ["change", "control", "change", "change"], [None, "quarantine", None, "quarantine"]):
        t = pa.table({"_kind": kinds, "i": list(range(len(kinds)))})
        for k in ("change", "quarantine", "control"):
            got = _rows_of(t, t.column("_kind"), k)
            want = [i for i, x in enumerate(kinds) if x == k]
            assert (got is None) == (not want) and (got is None or got.column("i").to_pylist() == want), (kinds, k)


def test_list_columns_of_shared_list_objects_convert_as_each_row_would():
    """``_arrow_values`` (the tagged batch's columns): rows sharing a few list objects, nulls and
    lists of their own among them, give the array ``pa.array`` gives."""
    import pyarrow as pa

    from cdclake.normalize.rows import _arrow_values

    a, b, empty = ["id", "name"], ["id", None, "é"], []
    shared = [a, b, None, empty, a, a, b] * 40
    own = [[f"c{i}"] for i in range(300)]
    t = pa.list_(pa.string())
    for values in (shared, shared[:10], own, shared + own[:5], [None] * 100):
        assert _arrow_values(values, t).to_pylist() == pa.array(values, t).to_pylist() == values
    assert _arrow_values(["x"] * 100, pa.string()).to_pylist() == ["x"] * 100
