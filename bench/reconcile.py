"""Reconciliation at 1M rows: ``python -m bench.reconcile [--rows N] [--buckets B]``.

Builds a source table ``orders`` of ``--rows`` rows in the machine's PostgreSQL (127.0.0.1:5432,
user postgres; database ``cdc_recon_bench``, made anew) with ``generate_series``: id bigint key,
customer_id bigint, amount numeric(12,2), ordered_at timestamptz, status text, note text (32
characters), payload bytea (8 bytes). The equal silver table is written **directly with Spark**
(``spark.range``, the same values derived from the id; the silver table's properties
``cdc.source-table`` and ``cdc.primary-key-columns`` set as silver sets them), not through
Kafka and the pipeline: this measures reconciliation, not the pipeline.

Then :func:`cdclake.reconcile.reconcile_table` runs twice, timed: on the equal tables (in sync),
and after 10 updates, 2 deletes and 1 insert made in PostgreSQL behind the pipeline's back
(drift; the pipeline's topic is empty, so all 13 keys are drift). Prints one JSON object: the
seconds of each run (the Spark session already started), rounds, buckets, keys and the bytes
read from the source; before it, the two ``bronze.reconciliation`` rows written. Other work on the machine slows it: the figures are upper bounds.
"""
from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

DB = "cdc_recon_bench"
PG = dict(host="127.0.0.1", port=5432, user="postgres")
BASE_S = 1_704_067_200  # 2024-01-01T00:00Z

SOURCE_SQL = """
CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint, amount numeric(12,2), ordered_at timestamptz,
  status text, note text, payload bytea);
INSERT INTO orders SELECT id, id % 1000, (id % 100000)::numeric / 100, to_timestamp({base} + id),
  's' || (id % 7), md5(id::text), decode(lpad(to_hex(id), 16, '0'), 'hex')
FROM generate_series(1, {rows}) AS id;
ANALYZE orders;
"""
DRIFT_SQL = """
UPDATE orders SET amount = amount + 0.01 WHERE id IN (3, 77777, 123456, 200001, 333333, 444444, 555555, 666666,
  777777, 999999);
DELETE FROM orders WHERE id IN (10, 500000);
INSERT INTO orders VALUES ({rows} + 1, 1, 1.00, now(), 'new', 'new', '\\x00');
"""


def build_source(rows: int) -> float:
    import psycopg2

    admin = psycopg2.connect(dbname="postgres", **PG)
    admin.autocommit = True
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    admin.cursor().execute(f"CREATE DATABASE {DB}")
    admin.close()
    started = time.monotonic()
    conn = psycopg2.connect(dbname=DB, **PG)
    conn.autocommit = True
    conn.cursor().execute(SOURCE_SQL.format(rows=rows, base=BASE_S))
    conn.close()
    return time.monotonic() - started


def build_silver(spark, cfg, rows: int) -> str:
    """The silver table of ``orders``, written by Spark from ``spark.range``; returns its name."""
    from pyspark.sql import functions as F

    from cdclake.lake import PRIMARY_KEY_PROPERTY, SOURCE_TABLE_PROPERTY, SourceTable
    from cdclake.types import quote_ident

    st = SourceTable("", DB, "public", "orders")
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{quote_ident(cfg.silver.namespace)}")
    full = f"lake.{quote_ident(cfg.silver.namespace)}.{quote_ident(st.silver_name)}"
    spark.sql(f"DROP TABLE IF EXISTS {full} PURGE")
    ids = F.col("id")
    df = spark.range(1, rows + 1).select(
        ids, (ids % 1000).alias("customer_id"),
        ((ids % 100000).cast("decimal(12,0)") / 100).cast("decimal(12,2)").alias("amount"),
        F.timestamp_seconds(ids + BASE_S).alias("ordered_at"), F.concat(F.lit("s"), (ids % 7).cast("string"))
        .alias("status"), F.md5(ids.cast("string")).alias("note"),
        F.unhex(F.lpad(F.hex(ids), 16, "0")).alias("payload"),
        F.lit("insert").alias("_cdc_op"))
    (df.writeTo(full).using("iceberg").tableProperty("format-version", "2")
     .tableProperty(SOURCE_TABLE_PROPERTY, st.identity()).tableProperty(PRIMARY_KEY_PROPERTY, json.dumps(["id"]))
     .create())
    return st.silver_name


def main(argv: list[str] | None = None) -> int:
    import psycopg2
    import yaml

    from cdclake import embedded
    from cdclake.catalog import spark_session
    from cdclake.config import load_pipeline
    from cdclake.reconcile import drift_message, reconcile_table, write_results

    p = argparse.ArgumentParser(prog="python -m bench.reconcile", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--buckets", type=int, default=64)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    state = Path(tempfile.mkdtemp(prefix="cdclake-bench-reconcile-"))
    env = embedded.up(state)
    try:
        from cdclake import sim

        sim.create_topic(env["CDC_KAFKA_BOOTSTRAP"], "bench.reconcile", 1)
        doc = {"kafka": {"bootstrap_servers": env["CDC_KAFKA_BOOTSTRAP"]},
               "catalog": {"name": "lake", "uri": f"jdbc:sqlite:{state / 'catalog.db'}",
                           "warehouse": f"file://{state / 'warehouse'}"},
               "sources": [{"topic": "bench.reconcile", "format": "debezium-json"}],
               "silver": {"namespace": "bench_reconcile"},
               "reconcile": {"connection": "bench_pg", "buckets": args.buckets}}
        path = state / "bench_reconcile.yaml"
        path.write_text(yaml.safe_dump(doc))
        cfg = load_pipeline(path)
        conns = {"bench_pg": {"conn_type": "postgres", "host": PG["host"], "port": PG["port"], "login": PG["user"],
                              "password": None, "schema": DB, "extra": {}}}
        source_s = build_source(args.rows)
        spark = spark_session(cfg, app_name="bench-reconcile")
        started = time.monotonic()
        name = build_silver(spark, cfg, args.rows)
        silver_s = time.monotonic() - started
        out: dict = {"rows": args.rows, "buckets": args.buckets, "build_source_s": round(source_s, 1),
                     "build_silver_s": round(silver_s, 1)}
        results = []
        for phase in ("in_sync", "drift"):
            if phase == "drift":
                conn = psycopg2.connect(dbname=DB, **PG)
                conn.autocommit = True
                conn.cursor().execute(DRIFT_SQL.format(rows=args.rows))
                conn.close()
            r = reconcile_table(spark, cfg, name, conns.get)
            results.append(r)
            logging.getLogger("bench").info("%s", r.log_line())
            out[phase] = {"seconds": round(r.duration_s, 1), "status": r.status, "rows_source": r.rows_source,
                          "rows_silver": r.rows_silver, "rounds": r.rounds, "buckets_compared": r.buckets_compared,
                          "buckets_differing": r.buckets_differing, "keys_drifted": r.keys_drifted,
                          "keys_in_flight": r.keys_in_flight, "bytes_read_source": r.bytes_read_source,
                          "drift_samples": r.drift_samples[:13]}
        write_results(spark, cfg, results)
        spark.table("lake.bronze.reconciliation").orderBy("keys_drifted").show(vertical=True, truncate=False)
        spark.stop()
        print(f"error: {drift_message(results)}  (the line python -m cdclake reconcile prints for the drift run)")
        print(json.dumps(out, indent=1))
        return 0
    finally:
        embedded.stop_broker(state)
        admin = psycopg2.connect(dbname="postgres", **PG)
        admin.autocommit = True
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin.close()


if __name__ == "__main__":
    raise SystemExit(main())
