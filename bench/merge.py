"""Merge scaling: one batch of changes merged into silver tables of growing size, per write mode.

The silver table is the shop's ``orders`` table, created by :func:`cdclake.silver.ensure_silver_table`
(the layout silver gives every table: typed columns, the ``_cdc_*`` columns, Iceberg format 2,
``bucket(buckets, id)``, the write mode's table properties) and filled directly with Spark
(``spark.range``: ids ``1..rows``, values derived from the id, every row the result of an insert
at binlog position ``(7, 4 + 97 * id, 0)``), not through Kafka. The ``_cdc_*`` columns are filled
by name from the table's schema: position, partition, offset, op and source time of that insert,
an order-typed column (the latest reset) with the insert's order, any other one null.

The batch is ``batch`` bronze rows of ``shop.orders`` (the bronze table's schema, filled by column
name; one change per key, each its own transaction, all at binlog file 8, newer than every base row): 70 % full-image updates and 10 % deletes of keys
spread evenly over ``1..min(rows)`` (``id = 1 + (i * 7919) mod min(rows)``), 20 % inserts of keys
above the largest table. It is written once to an Iceberg table ``bench_merge_src.batch`` and read
from there, as silver reads bronze; the same batch goes into every table.

The timed call is :func:`cdclake.silver.apply_table` (collapse, tombstone filter, MERGE, tombstone
upsert): what ``build_silver`` does for one table. Between write modes the table is rolled back to
its base snapshot and its ``write.*.mode`` properties switched; the tombstone table is dropped.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bench.pipeline import release_memory
from bench.sampler import RssSampler

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("bench")
NAMESPACE = "bench_merge"
BATCH_TABLE = "bench_merge_src.batch"
MODES = ("copy-on-write", "merge-on-read")
ORDERS_TYPES = {"id": "bigint", "customer_id": "bigint", "product_id": "int", "quantity": "int", "status": "string",
                "amount": "decimal(12,2)", "ordered_at": "timestamp", "note": "string"}
BASE_MS = 1_704_067_200_000  # 2024-01-01T00:00Z
STRIDE = 7919  # prime: i -> 1 + (i * STRIDE) mod n is a permutation of 1..n when n is not a multiple


def _mode_cfg(cfg, mode: str):
    return cfg.model_copy(update={"silver": cfg.silver.model_copy(update={"namespace": NAMESPACE, "write_mode": mode})})


def _stride(n: int) -> int:
    s = STRIDE
    while n % s == 0:
        s += 2
    return s


def write_batch(spark: "SparkSession", cfg, batch: int, min_rows: int, max_rows: int, hour: int = 0) -> str:
    """Write the change batch (bronze rows, see module docstring) to :data:`BATCH_TABLE`; return its name.

    ``hour`` > 0 gives the batch of a later hour: binlog file ``8 + hour`` and source times an hour
    later each (newer than every earlier batch), and other keys (the index shifted by
    ``hour * batch`` before the stride)."""
    from pyspark.sql import functions as F

    from cdclake.catalog import ensure_namespace, qualified
    from cdclake.lake import BRONZE_SCHEMA

    ensure_namespace(spark, cfg, BATCH_TABLE.split(".")[0])
    name = qualified(cfg, BATCH_TABLE)
    n_upd, n_del = int(batch * 0.7), int(batch * 0.1)
    stride = _stride(min_rows)
    i = F.col("id")
    existing = (F.lit(1) + ((i + F.lit(hour * batch)) * F.lit(stride)) % F.lit(min_rows)).cast("bigint")
    key = F.when(i < n_upd + n_del, existing).otherwise(F.lit(max_rows) + i - F.lit(n_upd + n_del) + F.lit(1))
    op = F.when(i < n_upd, "update").when(i < n_upd + n_del, "delete").otherwise("insert")
    ts = F.lit(BASE_MS + 3_600_000 * (1 + hour)) + i * F.lit(30)

    def image(k, version: int):
        status = F.element_at(F.array(*[F.lit(s) for s in ("pending", "paid", "shipped", "delivered")]),
                              ((k + F.lit(version)) % 4 + 1).cast("int"))
        return F.create_map(
            F.lit("id"), k.cast("string"),
            F.lit("customer_id"), (k % 50_000 + 1).cast("string"),
            F.lit("product_id"), (k % 40 + 1).cast("string"),
            F.lit("quantity"), (k % 3 + 1 + F.lit(version)).cast("string"),
            F.lit("status"), status,
            F.lit("amount"), ((k % 100_000) / 100 + F.lit(version)).cast("decimal(12,2)").cast("string"),
            F.lit("ordered_at"), F.date_format(F.timestamp_millis(F.lit(BASE_MS) + k * 37), "yyyy-MM-dd HH:mm:ss.SSS"),
            F.lit("note"), F.when(k % 4 == 0, F.lit(None).cast("string")).otherwise(F.lit("ring twice")))

    types = F.create_map(*[x for c, t in ORDERS_TYPES.items() for x in (F.lit(c), F.lit(t))])
    before = F.when(op != "insert", image(key, 0))
    after = F.when(op != "delete", image(key, 1))
    known = {
        "source_format": F.lit("debezium-json"), "source_database": F.lit("shop"), "source_schema": F.lit(None),
        "source_table": F.lit("orders"), "op": op, "before": before, "after": after,
        "primary_key": F.array(F.lit("id")), "column_types": types,
        "source_position": F.array(F.lit(8 + hour), F.lit(194) + i * F.lit(211), F.lit(0)), "source_ts_ms": ts,
        # every change its own complete transaction
        "tx_id": F.concat(F.lit(f"bench:{hour}:"), i.cast("string")), "tx_seq": F.lit(1), "tx_last": F.lit(True),
        "tx_size": F.lit(1), "row_in_record": F.lit(0),
        "kafka_topic": F.lit("bench.merge"), "kafka_partition": i % 3, "kafka_offset": i / 3,
        "kafka_timestamp_ms": ts + F.lit(500), "landed_hour": F.timestamp_millis(F.lit(BASE_MS + 3_600_000 * (1 + hour))),
    }
    # by name from the bronze schema of the library; a column this harness does not know is null
    frame = spark.range(batch).select(*[
        (known[f.name] if f.name in known else F.lit(None)).cast(f.dataType).alias(f.name) for f in BRONZE_SCHEMA.fields])
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    frame.writeTo(name).using("iceberg").tableProperty("format-version", "2").create()
    return name


def build_base(spark: "SparkSession", cfg, st, rows: int, buckets_cfg) -> str:
    """Create the silver table of ``st`` with ``ensure_silver_table`` and fill it with ``rows`` rows."""
    from pyspark.sql import functions as F

    from cdclake.catalog import ensure_namespace
    from cdclake.silver import TableResult, ensure_silver_table, silver_table

    name = silver_table(buckets_cfg, st)
    ensure_namespace(spark, buckets_cfg, NAMESPACE)
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    ensure_silver_table(spark, buckets_cfg, name, ["id"], dict(ORDERS_TYPES), TableResult(table=name))
    k = F.col("id") + F.lit(1)
    statuses = F.array(*[F.lit(s) for s in ("pending", "paid", "shipped", "delivered")])
    position = F.array(F.lit(7), F.lit(4) + k * F.lit(97), F.lit(0)).cast("array<decimal(38,0)>")
    kp, ko = (k % 3).cast("int"), (k / 3).cast("bigint")
    known = {
        "id": k, "customer_id": k % 50_000 + 1, "product_id": k % 40 + 1, "quantity": k % 3 + 1,
        "status": F.element_at(statuses, (k % 4 + 1).cast("int")), "amount": (k % 100_000) / 100,
        "ordered_at": F.timestamp_millis(F.lit(BASE_MS) + k * 37),
        "note": F.when(k % 4 == 0, F.lit(None).cast("string")).otherwise(F.lit("ring twice")),
        # the metadata of the insert that made each row (see cdclake.silver.META_COLUMNS)
        "_cdc_position": position, "_cdc_kafka_partition": kp, "_cdc_kafka_offset": ko,
        "_cdc_op": F.lit("insert"), "_cdc_source_ts_ms": F.lit(BASE_MS) + k, "_cdc_deleted": F.lit(False),
    }
    cols = []
    for f in spark.table(name).schema.fields:
        t = f.dataType.simpleString()
        if f.name in known:
            cols.append(known[f.name].cast(t).alias(f.name))
        elif t == "struct<p:array<decimal(38,0)>,kp:int,ko:bigint>":  # an order struct: the insert's (a reset)
            cols.append(F.struct(position.alias("p"), kp.alias("kp"), ko.alias("ko")).alias(f.name))
        else:  # metadata this harness does not know: null, as for rows no change has touched since
            cols.append(F.lit(None).cast(t).alias(f.name))
    frame = spark.range(rows).select(*cols)
    frame.writeTo(name).append()
    return name


def _snapshot(spark, name: str) -> tuple[int, dict]:
    r = spark.sql(f"SELECT snapshot_id, summary FROM {name}.snapshots ORDER BY committed_at DESC LIMIT 1").first()
    return int(r["snapshot_id"]), dict(r["summary"] or {})


def _files(spark, name: str) -> dict:
    r = spark.sql(f"SELECT count(*) AS n, sum(file_size_in_bytes) AS b FROM {name}.files").first()
    return {"files": int(r["n"]), "bytes": int(r["b"] or 0)}


def merge_scaling(spark: "SparkSession", cfg, sampler: RssSampler, sizes: list[int], batch: int,
                  modes=MODES) -> list[dict]:
    """Time :func:`cdclake.silver.apply_table` of the batch into tables of ``sizes`` rows, per write mode."""
    from cdclake.silver import SourceTable, apply_table, tombstone_table

    results: list[dict] = []
    batch_name = write_batch(spark, cfg, batch, min(sizes), max(sizes))
    for rows in sizes:
        st = SourceTable(prefix=f"m{rows}_", database="shop", schema=None, table="orders")
        base_cfg = _mode_cfg(cfg, modes[0])
        log.info("merge scaling: building a %d-row base table", rows)
        with sampler.span(f"merge/build/{rows}") as b:
            name = build_base(spark, cfg, st, rows, base_cfg)
        base_snapshot, _ = _snapshot(spark, name)
        base_files = _files(spark, name)
        for mode in modes:
            mcfg = _mode_cfg(cfg, mode)
            if _snapshot(spark, name)[0] != base_snapshot:
                spark.sql(f"CALL {cfg.catalog.name}.system.rollback_to_snapshot("
                          f"'{NAMESPACE}.{st.silver_name}', {base_snapshot})")
            spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('write.merge.mode'='{mode}', "
                      f"'write.update.mode'='{mode}', 'write.delete.mode'='{mode}')")
            spark.sql(f"DROP TABLE IF EXISTS {tombstone_table(mcfg, st)} PURGE")
            log.info("merge scaling: %d changes into %d rows, %s", batch, rows, mode)
            release_memory(spark)
            with sampler.span(f"merge/{rows}/{mode}") as s:
                res = apply_table(spark, mcfg, st, spark.table(batch_name))
            _, summary = _snapshot(spark, name)
            after = spark.table(name).count()
            keep = ("added-data-files", "deleted-data-files", "added-delete-files", "added-records", "deleted-records",
                    "added-position-deletes", "added-files-size", "removed-files-size", "total-records")
            results.append({
                "rows": rows, "write_mode": mode, "batch": batch, "wall_s": round(s.wall_s, 2),
                "changes_per_s": round(batch / s.wall_s), "upserts": res.upserts, "deletes": res.deletes,
                "base_build_s": round(b.wall_s, 1), "base_files": base_files, "rows_after": after,
                "rows_after_expected": rows + int(batch * 0.2) - int(batch * 0.1),
                "snapshot": {k: summary[k] for k in keep if k in summary}, **s.as_dict()})
        spark.sql(f"DROP TABLE IF EXISTS {tombstone_table(_mode_cfg(cfg, modes[-1]), st)} PURGE")
        spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    spark.sql(f"DROP TABLE IF EXISTS {cfg.catalog.name}.{BATCH_TABLE} PURGE")
    return results


def _read_all(spark, name: str) -> None:
    """A full read of every column of ``name`` (its deletes applied), written nowhere."""
    spark.table(name).write.format("noop").mode("overwrite").save()


def maintenance_effect(spark: "SparkSession", cfg, sampler: RssSampler, rows: int = 1_000_000, hours: int = 48,
                       batch: int = 20_000) -> dict:
    """A merge-on-read silver table of ``rows`` rows after ``hours`` hourly merges of ``batch``
    changes (:func:`write_batch` of each hour, :func:`cdclake.silver.apply_table`), then: a full
    read and the next hour's MERGE; Iceberg's maintenance of the table as
    :func:`cdclake.maintenance.maintain` runs it (``rewrite_data_files`` with
    :data:`cdclake.maintenance.REWRITE_DATA_OPTIONS`, ``rewrite_position_delete_files``,
    ``expire_snapshots`` keeping the last snapshot); the same read and the MERGE of the hour
    after. Returns the seconds of each, the table's data and delete files and snapshots before
    and after, and its rows before and after maintenance (``rows_before_maintenance``,
    ``rows_after``: equal)."""
    import datetime as dt

    from cdclake.maintenance import REWRITE_DATA_OPTIONS
    from cdclake.silver import SourceTable, apply_table, tombstone_table

    st = SourceTable(prefix="maint_", database="shop", schema=None, table="orders")
    mcfg = _mode_cfg(cfg, "merge-on-read")
    ident = f"{NAMESPACE}.{st.silver_name}"
    cat = cfg.catalog.name

    def shape(name: str) -> dict:
        files = spark.sql(f"SELECT content, count(*) AS n FROM {name}.all_files GROUP BY content").collect()
        live = spark.sql(f"SELECT content, count(*) AS n FROM {name}.files GROUP BY content").collect()
        return {"data_files": sum(r["n"] for r in live if r["content"] == 0),
                "delete_files": sum(r["n"] for r in live if r["content"] != 0),
                "files_in_all_snapshots": sum(r["n"] for r in files),
                "snapshots": spark.sql(f"SELECT count(*) AS n FROM {name}.snapshots").first()["n"]}

    def merge(hour: int) -> float:
        src = write_batch(spark, cfg, batch, rows, rows, hour=hour)
        with sampler.span(f"maintenance/merge/{hour}") as s:
            apply_table(spark, mcfg, st, spark.table(src))
        return s.wall_s

    log.info("maintenance effect: a %d-row merge-on-read table, %d hourly merges of %d changes", rows, hours, batch)
    name = build_base(spark, cfg, st, rows, mcfg)
    spark.sql(f"DROP TABLE IF EXISTS {tombstone_table(mcfg, st)} PURGE")
    merges = [merge(h) for h in range(hours)]
    out: dict = {"rows": rows, "hours": hours, "batch": batch, "hourly_merge_s": [round(x, 2) for x in merges]}
    for phase, hour in (("before", hours), ("after", hours + 1)):
        if phase == "after":
            out["rows_before_maintenance"] = spark.table(name).count()
            options = ", ".join(f"'{k}', '{v}'" for k, v in REWRITE_DATA_OPTIONS.items())
            with sampler.span("maintenance/procedures") as m:
                spark.sql(f"CALL {cat}.system.rewrite_data_files(table => '{ident}', options => map({options}))").collect()
                spark.sql(f"CALL {cat}.system.rewrite_position_delete_files(table => '{ident}')").collect()
                now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
                spark.sql(f"CALL {cat}.system.expire_snapshots(table => '{ident}', "
                          f"older_than => TIMESTAMP '{now}', retain_last => 1)").collect()
            out["maintenance_s"] = round(m.wall_s, 2)
        release_memory(spark)
        out[f"table_{phase}"] = shape(name)
        out[f"rows_{phase}"] = spark.table(name).count()
        with sampler.span(f"maintenance/read/{phase}") as r:
            _read_all(spark, name)
        out[f"full_read_{phase}_s"] = round(r.wall_s, 2)
        release_memory(spark)
        out[f"next_merge_{phase}_s"] = round(merge(hour), 2)
    spark.sql(f"DROP TABLE IF EXISTS {tombstone_table(mcfg, st)} PURGE")
    spark.sql(f"DROP TABLE IF EXISTS {name} PURGE")
    spark.sql(f"DROP TABLE IF EXISTS {cfg.catalog.name}.{BATCH_TABLE} PURGE")
    log.info("maintenance effect: full read %.1f s -> %.1f s, next MERGE %.1f s -> %.1f s, delete files %d -> %d",
             out["full_read_before_s"], out["full_read_after_s"], out["next_merge_before_s"], out["next_merge_after_s"],
             out["table_before"]["delete_files"], out["table_after"]["delete_files"])
    return out
