"""How fast Spark's Iceberg reader reads one format's bronze rows, by how their Parquet files were written.

Run after ``make bench`` (or ``python -m bench.run``), on the lake it left::

    PYTHONPATH=jobs:. python -m bench.bronze_layout --state .state/bench --format dbz --rounds 3

The measured hour's bronze data files of the format (written by normalize's Python workers with
pyarrow, :class:`cdclake.lake.HourFileWriter`) are added as they are to an unpartitioned Iceberg
table of namespace ``layout`` (pyiceberg ``add_files``); the same rows, row group by row group, are
written again by pyarrow with other settings into more such tables (``--variants``; their files in
``<state>/layout/<variant>/``), and once by
Iceberg's Java writer (a Spark ``CREATE TABLE ... AS SELECT``). Each round reads every table with
one Spark query that decodes every map of every row (``count(*)`` and a hash of the keys and
values of ``before``, ``after`` and ``column_types``), after a full GC, in turn; wall seconds per
table and round, and each table's data files and bytes, are printed and written as JSON
(``--out``). The source tables are only read; the ``layout`` tables are dropped first.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

#: pyarrow ``ParquetWriter`` settings per variant; ``plain_leaves``: the Parquet columns whose path
#: ends so are written without dictionary encoding (every other column with it).
VARIANTS = {
    "snappy": {"compression": "snappy"},
    "zstd_page_8mb": {"compression": "zstd", "data_page_size": 8 << 20},
    "zstd_nodict_values": {"compression": "zstd", "plain_leaves": "key_value.value"},
    "zstd_v2_pages": {"compression": "zstd", "data_page_version": "2.0"},
}
#: The query of a round: every map of every row decoded.
QUERY = ("SELECT count(*), sum(hash(map_keys(after), map_values(after))), "
         "sum(hash(map_keys(before), map_values(before))), "
         "sum(hash(map_keys(column_types), map_values(column_types))) FROM {}")


def _rewrite(source: str, target: str, variant: dict) -> None:
    """Write ``source``'s rows into ``target`` with the settings of a :data:`VARIANTS` entry, row
    group by row group."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(source)
    options = dict(variant)
    plain = options.pop("plain_leaves", None)
    if plain:
        leaves = [pf.schema.column(j).path for j in range(len(pf.schema))]
        options["use_dictionary"] = [p for p in leaves if not p.endswith(plain)]
    with pq.ParquetWriter(target, pf.schema_arrow, store_decimal_as_integer=True, **options) as writer:
        for g in range(pf.metadata.num_row_groups):
            rows = pf.read_row_group(g)
            writer.write_table(rows, row_group_size=rows.num_rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--state", default=".state/bench", help="the benchmark's state directory (its bench.yaml and lake)")
    p.add_argument("--format", default="dbz", help="the format's tag (its topic bench.<tag>)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS), help="pyarrow variants to write (comma list)")
    p.add_argument("--out", default=None, help="JSON results file (default: print only)")
    args = p.parse_args(argv)
    from bench.pipeline import kept_lake

    state = kept_lake(args.state)
    if state is None:
        return 2

    from cdclake.catalog import pyiceberg_catalog, qualified, spark_session
    from cdclake.config import load_pipeline
    from cdclake.lake import BRONZE_TABLE

    cfg = load_pipeline(state / "bench.yaml")
    spark = spark_session(cfg, app_name="bronze-layout")
    cat = pyiceberg_catalog(cfg.catalog)
    topic = f"bench.{args.format}"
    bronze = cat.load_table(BRONZE_TABLE)
    files = [t.file.file_path for t in bronze.scan(row_filter=f"kafka_topic == '{topic}'").plan_files()]
    if not files:
        print(f"no bronze rows of {topic} in {state}", file=sys.stderr)
        return 2
    if ("layout",) not in cat.list_namespaces():
        cat.create_namespace("layout")
    work = state / "layout"

    def table(name: str, paths: list[str]) -> str:
        full = f"layout.{name}"
        if cat.table_exists(full):
            cat.drop_table(full)  # the files stay: the source table's, or ours rewritten below
        cat.create_table(full, schema=bronze.schema()).add_files(paths)
        return name

    names = [table("pyarrow_as_written", files)]
    for v in [v for v in args.variants.split(",") if v]:
        d = work / v
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, f in enumerate(files):
            target = d / f"{i}.parquet"
            _rewrite(f.removeprefix("file://"), str(target), VARIANTS[v])
            paths.append(target.as_uri())
        names.append(table(v, paths))
    java = qualified(cfg, "layout.java_writer")
    spark.sql(f"DROP TABLE IF EXISTS {java}")
    spark.sql(f"CREATE TABLE {java} USING iceberg AS SELECT * FROM {qualified(cfg, BRONZE_TABLE)} "
              f"WHERE kafka_topic = '{topic}' ORDER BY kafka_partition, kafka_offset")
    names.append("java_writer")

    rounds: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names:
            spark.sparkContext._jvm.System.gc()
            t0 = time.monotonic()
            spark.sql(QUERY.format(qualified(cfg, f"layout.{n}"))).collect()
            rounds[n].append(round(time.monotonic() - t0, 2))
            print(f"round {r + 1} {n}: {rounds[n][-1]:.2f} s", flush=True)
    sizes = {}
    for n in names:
        row = spark.sql(f"SELECT count(*), sum(file_size_in_bytes) FROM {qualified(cfg, f'layout.{n}')}.files").first()
        sizes[n] = {"files": int(row[0]), "bytes": int(row[1])}
        print(f"{n}: {sizes[n]['files']} files, {sizes[n]['bytes']:,} bytes, rounds {rounds[n]}")
    if args.out:
        Path(args.out).write_text(json.dumps({"format": args.format, "topic": topic, "query": QUERY,
                                              "variants": {n: VARIANTS.get(n) for n in names},
                                              "rounds_s": rounds, "files": sizes}, indent=1))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
