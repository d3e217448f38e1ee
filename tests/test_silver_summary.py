"""Silver's one summary of a window's bronze rows (:func:`cdclake.silver.summary.summarize_batch`).

Every source table of the window with its change count, latest truncate, primary key, column
types and column order, from one aggregation: the same schema as the table's own rows give
(:func:`cdclake.silver.summary.batch_schema`), topics of one silver prefix merged into one source
table, topics of different prefixes kept apart; and the same summary as Spark's own queries give
(:func:`cdclake.silver.summary.summarize_batch_in_spark`), orders compared as Spark compares them.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from cdclake.errors import SchemaChangeError
from cdclake.lake import BRONZE_SCHEMA, SHAPES_SCHEMA, SourceTable
from cdclake.silver.summary import _shaped, batch_schema, order_key, summarize_batch, summarize_batch_in_spark

HOUR = dt.datetime(2024, 1, 1, 1)


def change(table: str, op: str, pos: int, after=None, before=None, types=None, pk=("id",), topic: str = "t1",
           db: str = "shop", row: int = 0) -> dict:
    return {"source_format": "debezium-json", "source_database": db, "source_schema": None, "source_table": table,
            "op": op, "before": before, "after": after, "primary_key": list(pk), "column_types": types or {},
            "source_position": [Decimal(pos)], "source_ts_ms": 1_704_070_800_000 + pos, "tx_id": None,
            "tx_seq": None, "row_in_record": row, "kafka_topic": topic, "kafka_partition": 0, "kafka_offset": pos,
            "kafka_timestamp_ms": 1_704_070_800_000, "landed_hour": HOUR, "tx_last": None, "tx_size": None}


def frame(spark, rows):
    return spark.createDataFrame(rows, BRONZE_SCHEMA)


def shaped_frame(spark, rows) -> tuple:
    """``(frame, shapes view)``: ``rows`` with the shape columns normalize writes
    (:func:`cdclake.normalize.files.bronze_batch`), and a temporary view holding their shapes as
    ``bronze.change_shapes`` would. The shapes take each map's order as Spark holds it (a dict
    given to Spark loses its order; normalize writes and Spark reads the order of the message)."""
    import uuid

    import pyarrow as pa
    from pyspark.sql import functions as F

    from cdclake.lake import STAGED_MAPS, STAGED_SCHEMA, arrow_schema
    from cdclake.lake.shapes import shapes_table
    from cdclake.normalize.files import bronze_batch

    held_maps = frame(spark, rows).select(*[F.map_entries(m).alias(m) for m in STAGED_MAPS]).collect()
    staged = []
    for r, maps in zip(rows, held_maps):
        s = {n: r.get(n) for n in STAGED_SCHEMA.names}
        for m, (k, v) in STAGED_MAPS.items():
            s[k], s[v] = (None, None) if maps[m] is None else ([e[0] for e in maps[m]], [e[1] for e in maps[m]])
        staged.append(s)
    shapes: dict = {}
    out = bronze_batch(pa.Table.from_pylist(staged, schema=arrow_schema(STAGED_SCHEMA)), shapes)
    view = f"shapes_{uuid.uuid4().hex[:8]}"
    held = [dict(r, column_types=None if r["column_types"] is None else dict(r["column_types"]))
            for r in shapes_table(shapes).to_pylist()]
    spark.createDataFrame(held, SHAPES_SCHEMA).createOrReplaceTempView(view)
    return frame(spark, [dict(r, shape_id=s, key_change=k) for r, s, k in zip(
        rows, out.column("shape_id").to_pylist(), out.column("key_change").to_pylist())]), view


def test_tables_counts_truncates_and_keys(spark):
    rows = [
        change("a", "insert", 1, after={"id": "1", "v": "x"}, types={"id": "int", "v": "string"}),
        change("a", "update", 2, after={"id": "1", "v": "y", "w": "2"}, before={"id": "1", "v": "x"},
                types={"id": "bigint", "v": "string", "w": "int"}, pk=("id", "v")),
        change("a", "truncate", 3),  # latest, but not a change of rows: the key stays the update's
        change("a", "delete", 4, before={"id": "1", "old": "q"}, topic="t2"),
        change("b", "insert", 5, after={"k": "7"}, pk=("k",), db=None),
        change("c", "truncate", 6, topic="t3"),
    ]
    got = summarize_batch(frame(spark, rows), {"t1": "p_", "t2": "p_", "t3": "q_"})
    a, b, c = SourceTable("p_", "shop", None, "a"), SourceTable("p_", None, None, "b"), SourceTable("q_", "shop", None, "c")
    assert sorted(got, key=str) == sorted([a, b, c], key=str)
    assert (got[a].changes, got[a].rows, got[a].topics) == (4, 3, ["t1", "t2"])
    assert got[a].truncate == ([Decimal(3)], 0, 3)
    assert got[a].primary_key == ["id"]  # the delete's (position 4): the latest change that is not a truncate
    pk, types = got[a].schema("silver.a")
    assert pk == ["id"]
    assert types == {"id": "bigint", "v": "string", "w": "int", "old": "string"}  # int widened to bigint
    # source order: by the first change carrying a column, then its place in that image
    assert set(list(types)[:2]) == {"id", "v"} and list(types)[2:] == ["w", "old"]
    assert (got[b].changes, got[b].rows, got[b].truncate, got[b].primary_key) == (1, 1, None, ["k"])
    assert (got[c].changes, got[c].rows, got[c].primary_key, got[c].topics) == (1, 0, [], ["t3"])


def test_a_topic_without_a_prefix_has_none(spark):
    got = summarize_batch(frame(spark, [change("a", "insert", 1, after={"id": "1"}, topic="x")]), {"y": "p_"})
    assert list(got) == [SourceTable("", "shop", None, "a")]


def test_the_schema_equals_the_tables_own_rows(spark):
    rows = [change("a", "insert", i, after={"id": str(i), **({"n": "1"} if i % 2 else {"m": "2"})},
                   types={"id": "int", "n": "decimal(10,2)", "m": "string"}, row=i % 3) for i in range(20)]
    rows += [change("a", "update", 30, after={"id": "3", "n": "1.5"}, types={"id": "int", "n": "decimal(12,2)"})]
    summary = summarize_batch(frame(spark, rows))[SourceTable("", "shop", None, "a")]
    assert summary.schema() == batch_schema(frame(spark, rows))
    assert summary.schema()[1] == {"id": "int", "m": "string", "n": "decimal(12,2)"}


def test_a_type_change_iceberg_cannot_make_names_table_and_column(spark):
    rows = [change("a", "insert", 1, after={"id": "1", "n": "1"}, types={"n": "bigint"}),
            change("a", "update", 2, after={"id": "1", "n": "x"}, types={"n": "string"})]
    summary = summarize_batch(frame(spark, rows))[SourceTable("", "shop", None, "a")]
    with pytest.raises(SchemaChangeError, match=r"silver table s\.a: column 'n' changes type from bigint to string"):
        summary.schema("s.a")


def test_orders_sort_in_python_as_spark_sorts_them(spark):
    """:func:`order_key` sorts order structs (positions of several lengths, null elements and
    fields, decimals past 2**63) as Spark's ORDER BY does."""
    from pyspark.sql import functions as F

    big = 10 ** 30
    values = [([1, 2], 0, 5, 0), ([1, 2], 0, 5, 1), ([1], 3, 1, 0), ([1, 2, 0], 0, 0, 0), ([None, 5], 0, 0, 0),
              ([2], None, 0, 0), (None, 1, 1, 1), ([big], 0, 0, 0), ([big - 1, 7], 0, 0, 0), ([0], 0, -1, 0),
              ([1, 2], 1, 0, 0), ([], 0, 0, 0)]
    df = spark.createDataFrame([(i, [None if x is None else Decimal(x) for x in p] if p is not None else None, kp, ko, r)
                                for i, (p, kp, ko, r) in enumerate(values)],
                               "i int, p array<decimal(38,0)>, kp int, ko bigint, row int")
    rows = df.select("i", F.struct("p", "kp", "ko", "row").alias("o")).collect()
    by_spark = [r["i"] for r in df.select("i", F.struct("p", "kp", "ko", "row").alias("o")).orderBy("o").collect()]
    assert [r["i"] for r in sorted(rows, key=lambda r: order_key(r["o"]))] == by_spark


def test_the_summary_knows_whether_a_table_has_a_key_change(spark):
    """``moves``: whether a change updates a key column (its before image holds the whole key),
    known only when every data change of the table has the table's key (else silver asks the
    keyed rows themselves)."""
    from pyspark.sql import functions as F

    from cdclake.silver.keys import keyed_rows_with_moves

    def moves(rows):
        got = summarize_batch(frame(spark, rows))[SourceTable("", "shop", None, "a")].moves
        df, shapes = shaped_frame(spark, rows)
        assert summarize_batch(df, None, shapes)[SourceTable("", "shop", None, "a")].moves is got
        return got

    ins = change("a", "insert", 1, after={"id": "1", "v": "x"})
    same_key = change("a", "update", 2, after={"id": "1", "v": "y"}, before={"id": "1", "v": "x"})
    moved = change("a", "update", 3, after={"id": "2", "v": "y"}, before={"id": "1", "v": "y"})
    no_old_key = change("a", "update", 4, after={"id": "3", "v": "y"}, before={"v": "y"})  # not a move: no old key
    assert moves([ins, same_key, no_old_key, change("a", "delete", 5, before={"id": "1"})]) is False
    assert moves([ins, same_key, moved]) is True
    assert moves([ins, change("a", "truncate", 6), moved]) is True  # a truncate has no key: not asked
    assert moves([ins, dict(same_key, primary_key=["v"])]) is None  # two keys: unknown
    # the same answer as the keyed rows give, by their own flag and by their move rows
    for rows in ([ins, same_key, no_old_key], [ins, moved], [dict(moved, primary_key=["id", "v"])]):
        summary = summarize_batch(frame(spark, rows))[SourceTable("", "shop", None, "a")]
        keyed, flag = keyed_rows_with_moves(frame(spark, rows), summary.primary_key)
        assert summary.moves is flag is bool(keyed.where(F.col("_kind") == "move").take(1))


def test_key_change_over_known_key_names_flags_what_the_per_row_key_array_flags(spark):
    """The unrolled test (a table's known key as names) and the higher-order one (each row's own
    ``primary_key`` array) flag the same changes: composite keys, a null or missing key value in
    either image, a changed key column, no before or after image, inserts and deletes."""
    from pyspark.sql import functions as F

    from cdclake.silver.keys import key_change

    images = [None, {}, {"id": "1"}, {"id": "1", "v": "x"}, {"id": "2", "v": "x"}, {"id": "1", "v": "y"},
              {"id": None, "v": "x"}, {"id": "1", "v": None}, {"v": "x"}]
    keys = list(enumerate([("id",), ("id", "v"), ("v", "id")], start=1))  # (row_in_record, primary key)
    rows = [change("a", op, i, after=a, before=b, pk=pk, row=i)
            for op in ("insert", "update", "delete") for a in images for b in images for i, pk in keys]
    df = frame(spark, rows)
    checks = []
    for i, pk in keys:
        known = key_change(list(pk))
        per_row = key_change(F.col("primary_key"))
        checks.append(F.sum(F.when((F.col("row_in_record") == i) & (known != per_row), 1).otherwise(0)))
        checks.append(F.sum(F.when((F.col("row_in_record") == i) & known, 1).otherwise(0)))
    out = df.agg(*checks).first()
    assert [out[j] for j in range(0, 6, 2)] == [0, 0, 0]  # no change flagged differently
    assert all(out[j] > 0 for j in range(1, 6, 2))  # and moves exist under every key
    assert df.select(key_change([]).alias("m")).where("m").count() == 0


def test_the_summary_knows_whether_most_images_are_partial(spark):
    """``partial``: most changes with an after image lack a column another image of the table in
    the batch carries (SharePlex updates carry only the changed columns); deletes have none."""
    def partial(rows):
        return summarize_batch(frame(spark, rows))[SourceTable("", "shop", None, "a")].partial

    full = [change("a", "insert", i, after={"id": str(i), "v": "x", "w": "1"}) for i in range(3)]
    changed = [change("a", "update", 10 + i, after={"id": str(i), "v": "y"}) for i in range(3)]
    deletes = [change("a", "delete", 20 + i, before={"id": str(i)}) for i in range(9)]
    assert partial(full + deletes) is False
    assert partial(full + changed) is False  # half: not most
    assert partial(full + changed + changed[:1]) is True
    assert partial(changed) is False  # one column list: every image carries all the batch's columns


@pytest.mark.parametrize("case", ["mixed", "schema", "truncate only", "partial images", "key changes"])
def test_the_summary_equals_sparks_own_queries(spark, case):
    if case == "mixed":
        rows = [change("a", "insert", 1, after={"id": "1", "v": "x"}, types={"id": "int", "v": "string"}),
                change("a", "update", 2, after={"id": "1", "v": "y", "w": "2"}, before={"id": "1", "v": "x"},
                       types={"id": "bigint", "v": "string", "w": "int"}, pk=("id", "v")),
                change("a", "truncate", 3), change("a", "delete", 4, before={"id": "1", "old": "q"}, topic="t2"),
                change("b", "insert", 5, after={"k": "7"}, pk=("k",), db=None), change("c", "truncate", 6, topic="t3")]
    elif case == "schema":
        rows = [change("a", "insert", i, after={"id": str(i), **({"n": "1"} if i % 2 else {"m": "2"})},
                       types={"id": "int", "n": "decimal(10,2)", "m": "string"}, row=i % 3) for i in range(20)]
        rows += [change("a", "update", 30, after={"id": "3", "n": "1.5"}, types={"id": "int", "n": "decimal(12,2)"})]
    elif case == "truncate only":
        rows = [change("a", "truncate", 9), change("a", "truncate", 4, topic="t2")]
    elif case == "key changes":
        rows = [change("a", "insert", 1, after={"id": "1"}), change("a", "update", 2, after={"id": "2"}, before={"id": "1"}),
                change("b", "update", 3, after={"k": "1", "v": "2"}, before={"k": "1", "v": "1"}, pk=("k",)),
                change("c", "update", 4, after={"k": "1"}, before={"k": "1"}, pk=("k",)),
                change("c", "update", 5, after={"k": "1", "j": "2"}, before={"k": "1", "j": "1"}, pk=("k", "j"))]
    else:  # Maxwell-like partial before images, several per table, positions of two elements
        rows = [dict(change("a", "update", 10 + i, after={"id": str(i), "x": "1", "y": "2", "z": "3"},
                            before={c: "0" for c in "zyx"[: i % 3 + 1]}, types={"id": "int"}),
                     source_position=[Decimal(7), Decimal(100 - i)]) for i in range(12)]
    prefixes = {"t1": "p_", "t2": "p_", "t3": "q_"}
    got, want = summarize_batch(frame(spark, rows), prefixes), summarize_batch_in_spark(frame(spark, rows), prefixes)
    assert list(got) == list(want)
    # from the change shapes normalize writes (flat columns, each shape read once): the same summary
    df, shapes = shaped_frame(spark, rows)
    assert _shaped(df, prefixes, shapes) is not None and _shaped(frame(spark, rows), prefixes, shapes) is None
    assert summarize_batch(df, prefixes, shapes) == got
    assert summarize_batch(frame(spark, rows), prefixes, shapes) == got  # rows without shape ids: their maps
    for st in got:
        g, w = got[st], want[st]
        assert (g.changes, g.rows, g.truncate, g.primary_key, g.topics, g.columns, g.moves, g.partial) == (
            w.changes, w.rows, w.truncate, w.primary_key, w.topics, w.columns, w.moves, w.partial), st
        assert sorted(g.typed) == sorted(w.typed) and g.schema() == w.schema(), st
