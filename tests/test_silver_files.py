"""The file-level merge's parts against Spark and Iceberg: text conversion equal to Spark's, rows
placed in Iceberg's buckets, files Spark reads back (:mod:`cdclake.silver.small`,
:mod:`cdclake.silver.files`). That the whole merge gives Spark's tables is
``tests/test_silver_properties.py``'s property (``both_paths``)."""
from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from conftest import write_pipeline

from cdclake.catalog import pyiceberg_catalog
from cdclake.config import load_pipeline
from cdclake.errors import NotFileLevel
from cdclake.silver.files import TableFiles
from cdclake.silver.rowmerge import converter
from cdclake.types import sql_cast

TEXTS = {
    "boolean": ["true", "false", "TRUE", "1", "yes"],
    "int": ["0", "-7", "2147483647", "-2147483648", "2147483648", "12.5", "007", " 3"],
    "bigint": ["9223372036854775807", "-9223372036854775808", "9223372036854775808", "42"],
    "double": ["3.14", "-0.0", "1e300", "inf", "-inf", "nan", "1.7976931348623157e308", "0.1", "1E-5", "Infinity"],
    "decimal(10,2)": ["12.50", "-12.345", "12.355", "99999999.995", "0.005", "-0.005", "1", "12345678901.1"],
    "decimal(38,0)": ["99999999999999999999999999999999999999", "0.5", "-1.5", "123"],
    "string": ["", "ünï", "a\nb"],
    "binary": ["AAEC", "", "/w==", "3q2+7w=="],
    "date": ["2024-02-29", "1970-01-01", "0001-01-01", "2023-02-29", "2024-1-5"],
    "timestamp": ["2024-01-01 10:00:00", "2024-01-01 10:00:00.123456", "2024-01-01 10:00:00.5",
                  "1969-12-31 23:59:59.999999", "2024-01-01T10:00:00", "2024-13-01 00:00:00"],
    "timestamp_ntz": ["2024-01-01 10:00:00", "2024-06-30 23:59:59.000001"],
}


def _bucketed_table(spark, stem: str, columns: str, buckets: int = 0):
    """A new Iceberg table ``lake.files_test.<stem>_<random>`` of ``columns`` (Spark DDL),
    partitioned ``bucket(buckets, k) AS _cdc_bucket`` when ``buckets``, and pyiceberg's catalog of
    a test pipeline: ``(namespace, name, quoted full name, catalog)``."""
    ns, name = "files_test", f"{stem}_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{ns}")
    full = f"lake.{ns}.{name}"
    spark.sql(f"CREATE TABLE {full} ({columns}) USING iceberg TBLPROPERTIES ('format-version'='2')")
    if buckets:
        spark.sql(f"ALTER TABLE {full} ADD PARTITION FIELD bucket({buckets}, k) AS _cdc_bucket")
    pycat = pyiceberg_catalog(load_pipeline(write_pipeline(f"files_{name}", [{"topic": "t", "format": "debezium-json"}])).catalog)
    return ns, name, full, pycat


@pytest.mark.parametrize("ctype", list(TEXTS))
def test_converted_texts_equal_sparks_conversion(spark, ctype):
    """Every text the converter takes gives the value Spark's conversion gives; the others it refuses."""
    texts = TEXTS[ctype]
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i int, t string")
    got = {r["i"]: r["v"] for r in df.selectExpr("i", f"{sql_cast('t', ctype)} AS v").collect()}
    conv = converter(ctype)
    taken = 0
    for i, text in enumerate(texts):
        try:
            mine = conv(text)
        except NotFileLevel:
            continue
        taken += 1
        theirs = got[i]
        if isinstance(theirs, dt.datetime) and ctype == "timestamp":  # Spark gives the session zone's wall clock
            theirs = theirs.replace(tzinfo=dt.timezone.utc)
        if isinstance(theirs, (bytes, bytearray)):
            theirs = bytes(theirs)
        if isinstance(mine, float) and mine != mine:
            assert theirs != theirs, (ctype, text)
            continue
        assert mine == theirs and type(mine) is type(theirs), (ctype, text, mine, theirs)
    assert taken >= 2, ctype


KEYS = {
    "int": [0, 1, -1, 17, 2147483647],
    "bigint": [0, 2 ** 40, -5],
    "string": ["", "a", "ünïcode", "k" * 50],
    "decimal(10,2)": [Decimal("0.00"), Decimal("12.50"), Decimal("-3.14")],
    "date": [dt.date(2024, 2, 29), dt.date(1970, 1, 1), dt.date(1900, 6, 1)],
    "timestamp": [dt.datetime(2024, 1, 1, 10, 0, 0, 123456, tzinfo=dt.timezone.utc),
                  dt.datetime(1960, 1, 1, tzinfo=dt.timezone.utc)],
}


@pytest.mark.parametrize("ktype", list(KEYS))
def test_rows_written_at_the_file_level_land_in_icebergs_buckets(spark, stack, ktype):
    """Rows committed by :meth:`TableFiles.commit` sit in the bucket Iceberg computes for their
    key (``system.bucket``), so Spark's bucket pruning finds each of them; a position delete
    removes exactly its row."""
    ns, name, full, pycat = _bucketed_table(spark, "t", f"k {ktype}, v string", 8)
    files = TableFiles.load(spark, pycat, "lake", ns, name)
    values = KEYS[ktype]
    files.commit([{"k": v, "v": f"v{i}"} for i, v in enumerate(values)], [])
    placed = {r["k"]: r["b"] for r in spark.sql(f"SELECT k, _partition._cdc_bucket AS b, "
                                                f"lake.system.bucket(8, k) AS want FROM {full}").collect()
              if r["b"] == r["want"]}
    assert len(placed) == len(values)
    table = spark.table(full)
    for i, v in enumerate(values):
        assert table.where(table["k"] == v).select("v").collect()[0][0] == f"v{i}"
    files = TableFiles.load(spark, pycat, "lake", ns, name)
    rows = files.read().to_pylist()
    assert sorted(files.buckets_of([r["k"] for r in rows])) == sorted(placed.values())
    gone = rows[0]
    files.commit([], [(gone["_cdc_file"], gone["_cdc_pos"])])
    left = sorted(r["v"] for r in spark.table(full).collect())
    assert left == sorted(r["v"] for r in rows[1:])


def test_data_files_written_directly_equal_pyicebergs_write_file(spark, stack):
    """The data files :meth:`TableFiles._data_files` writes with pyiceberg's Parquet writer alone
    equal those of pyiceberg's ``write_file`` (the reference): the same Parquet schema (names,
    types, field ids), the same rows, and in the ``DataFile`` the same partition, size, counts,
    bounds and split offsets; Spark reads the committed rows back."""
    import pyarrow.parquet as pq

    ns, name, full, pycat = _bucketed_table(
        spark, "w", "k bigint, s string, d decimal(12,2), b boolean, f double, bin binary, day date, ts timestamp, "
        "ntz timestamp_ntz, _cdc_position array<decimal(38,0)>", 4)
    files = TableFiles.load(spark, pycat, "lake", ns, name)
    utc = dt.timezone.utc
    rows = [{"k": i, "s": None if i % 5 == 0 else f"ünï {i}", "d": Decimal(f"{i}.{i % 100:02d}"), "b": i % 2 == 0,
             "f": i / 3, "bin": bytes([i % 256]) * 3, "day": dt.date(2024, 1, 1 + i % 28),
             "ts": dt.datetime(2024, 1, 1, i % 24, tzinfo=utc), "ntz": dt.datetime(2024, 2, 1, 0, i % 60),
             "_cdc_position": [Decimal(9), Decimal(1000 + i)]} for i in range(40)]
    metadata = files.table.metadata
    direct = sorted(files._data_files(metadata, rows), key=lambda f: f.partition[0])
    reference = sorted(files._data_files(metadata, rows, reference=True), key=lambda f: f.partition[0])
    assert len(direct) == len(reference) > 1
    for a, b in zip(direct, reference):
        for attr in ("partition", "record_count", "file_size_in_bytes", "column_sizes", "value_counts",
                     "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds", "split_offsets",
                     "content", "file_format"):
            assert getattr(a, attr) == getattr(b, attr), attr
        fa, fb = (pq.read_table(f.file_path.removeprefix("file:")) for f in (a, b))
        assert fa.schema.equals(fb.schema, check_metadata=True)
        assert pq.ParquetFile(a.file_path.removeprefix("file:")).schema.equals(
            pq.ParquetFile(b.file_path.removeprefix("file:")).schema)
        assert fa.equals(fb)
    with files.table.transaction() as tx, tx.update_snapshot().fast_append() as update:
        for f in direct:
            update.append_data_file(f)
    back = {r["k"]: r.asDict() for r in spark.table(full).collect()}
    assert sorted(back) == list(range(40))
    assert back[7]["s"] == "ünï 7" and back[7]["d"] == Decimal("7.07") and back[7]["_cdc_position"] == [9, 1007]


def test_a_transactions_metadata_is_computed_once_per_staged_state(spark, stack):
    """:func:`cdclake.lake.transaction` reads the staged metadata once until an update is
    staged, and then sees that update (pyiceberg replays and deep-copies it on every read);
    with nothing staged, it is the table's own."""
    from cdclake.lake import transaction

    ns, name, _, pycat = _bucketed_table(spark, "x", "k bigint")
    table = pycat.load_table((ns, name))
    tx = transaction(table)
    first = tx.table_metadata
    assert tx.table_metadata is first is table.metadata  # nothing staged: no copy
    tx.set_properties({"cdc.test": "1"})
    assert tx.table_metadata is not first and tx.table_metadata.properties["cdc.test"] == "1"
    tx.commit_transaction()
    assert pycat.load_table((ns, name)).properties["cdc.test"] == "1"


def test_repeated_rewrites_keep_the_manifest_list_bounded(spark, stack):
    """Each :meth:`TableFiles.rewrite` of a table's buckets leaves a manifest of the files it
    deleted; the next rewrite's manifest list leaves it out (it holds no live file), as Iceberg's
    Java commits do, so that a table rewritten every hour is not read through a manifest per hour
    it was rewritten. Spark reads the last rewrite's rows, and time travel still reads the first."""
    ns, name, full, pycat = _bucketed_table(spark, "m", "k bigint, v string", 4)
    counts = []
    for hour in range(6):
        files = TableFiles.load(spark, pycat, "lake", ns, name)
        files.read()
        files.rewrite([{"k": k, "v": f"h{hour}"} for k in range(20)], "merge")
        table = pycat.load_table((ns, name))
        counts.append(len(table.current_snapshot().manifests(table.io)))
    assert max(counts[1:]) <= 2, counts
    assert sorted(r["v"] for r in spark.table(full).collect()) == ["h5"] * 20
    first = pycat.load_table((ns, name)).snapshots()[0].snapshot_id
    assert {r["v"] for r in spark.sql(f"SELECT v FROM {full} VERSION AS OF {first}").collect()} == {"h0"}
