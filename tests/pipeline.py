"""Test helpers: run the stages through the library, read silver tables back."""
from __future__ import annotations

import datetime as dt

from cdclake.config import load_pipeline
from cdclake.land import land
from cdclake.normalize import normalize
from cdclake.silver import build_silver
from cdclake.window import Window

UTC = dt.timezone.utc
H0 = dt.datetime(2024, 1, 1, 0, tzinfo=UTC)


def hour(i: int) -> dt.datetime:
    """Start of hour ``i`` after 2024-01-01T00:00Z."""
    return H0 + dt.timedelta(hours=i)


def ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def run_window(spark, pipeline_path, start: int, end: int, gates: bool = False) -> dict:
    """Run land, normalize, silver (and the gates) for hours ``[start, end)``; return stage results."""
    cfg = load_pipeline(pipeline_path)
    w = Window(hour(start), hour(end))
    out = {"land": land(spark, cfg, w), "normalize": normalize(spark, cfg, w), "silver": build_silver(spark, cfg, w)}
    if gates:
        from cdclake.gates import run_gate

        out["gates"] = {s: run_gate(s, cfg, w) for s in ("land", "normalize", "silver")}
    return out


def silver_rows(spark, pipeline_path, table: str, meta: bool = False) -> list[dict]:
    """All rows of a silver table as dicts sorted by their values (``_cdc_*`` columns dropped unless ``meta``)."""
    cfg = load_pipeline(pipeline_path)
    from cdclake.types import quote_ident

    df = spark.table(f"{cfg.catalog.name}.{quote_ident(cfg.silver.namespace)}.{quote_ident(table)}")
    if not meta:
        df = df.select([c for c in df.columns if not c.startswith("_cdc_")])
    rows = [r.asDict() for r in df.collect()]
    return sorted(rows, key=lambda r: tuple(str(r[k]) for k in sorted(r)))


def all_rows(spark, name: str) -> list:
    """Every row of table ``name`` (a Spark name), every column, as sorted plain values (maps as
    their sorted items, structs as dicts): for comparing two tables whatever their map order; []
    when the table does not exist."""
    if not spark.catalog.tableExists(name):
        return []

    def plain(v):
        if isinstance(v, dict):
            return sorted((k, plain(x)) for k, x in v.items())
        if hasattr(v, "asDict"):
            return plain(v.asDict())
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v
    return sorted((plain(r.asDict()) for r in spark.table(name).collect()), key=repr)


def raw_rows(spark, cfg, topic: str) -> list[tuple]:
    """``(partition, offset, timestamp ms, landed hour)`` of every raw record of ``topic``, in offset order."""
    from cdclake.catalog import qualified
    from cdclake.lake import RAW_TABLE

    return [(r.kafka_partition, r.kafka_offset, r.kafka_timestamp_ms, r.landed_hour.replace(tzinfo=UTC))
            for r in spark.table(qualified(cfg, RAW_TABLE)).where(f"kafka_topic = '{topic}'")
            .orderBy("kafka_partition", "kafka_offset").collect()]


def ledger_rows(spark, cfg, topic: str) -> list[tuple]:
    """``(partition, landed hour, start offset, end offset, records)`` of the offset ledger's ranges of ``topic``."""
    from cdclake.catalog import qualified
    from cdclake.lake import MANIFEST_TABLE

    return [(r.kafka_partition, r.landed_hour.replace(tzinfo=UTC), r.start_offset, r.end_offset, r.records)
            for r in spark.table(qualified(cfg, MANIFEST_TABLE)).where(f"kafka_topic = '{topic}'")
            .orderBy("kafka_partition", "landed_hour").collect()]
