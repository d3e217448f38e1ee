"""``make demo``: three hours of simulated shop traffic through the Airflow DAG, checked against the source.

1. Resets the demo's lake (catalog, warehouse, Data Docs) and starts the embedded broker.
2. Simulates a MySQL shop database (customers, products, orders) for three hours from
   ``2024-01-01T00:00Z`` and produces its changes in every supported wire format
   (``shop.<tag>`` topics, :data:`cdclake.sim.wire.WIRE_FORMATS`), plus the sample records of
   Lindorm's Debezium V2.0 document (``lindorm.sql``, ``lindorm.hbase``; ``config/samples/``).
3. Runs ``airflow dags test cdc_demo -c '{"start": ..., "end": ...}'`` over the three hours.
4. Prints every silver table's row count and PASS/FAIL against the source's final state;
   exits 1 on any FAIL.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

from cdclake import embedded
from cdclake.config import REPO_ROOT, load_pipeline, state_dir

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
HOURS = 3
SAMPLES = REPO_ROOT / "config" / "samples"

#: Final state of the Lindorm document's samples applied in order (insert, update, row delete,
#: column delete: an update of the deleted row that omits ``last_name``, which becomes null).
LINDORM_EXPECTED = {
    "lindorm_ld-xxxx__default__customers": (["id"], {("1004",): {"id": "1004", "first_name": "Anne Marie", "last_name": None}}),
    "lindorm_hbase_ld-xxxx__default__customers": (["ROW"], {(b"user1",): {"ROW": b"user1", "f_name": b"lucky"}}),
}


def reset_lake(state: Optional[Path] = None, extra: tuple[str, ...] = ()) -> None:
    """Delete the catalog, warehouse and Data Docs under ``state`` (default the state directory),
    and the files or directories named in ``extra``, and stop the embedded broker."""
    state = state or state_dir()
    for name in ("catalog.db", "warehouse", "data_docs", *extra):
        p = state / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    embedded.stop_broker(state)
    embedded.stop_registry(state)


def produce_traffic(bootstrap: str):
    """Produce the simulated shop in every wire format and the Lindorm samples; return the source."""
    from cdclake.sim import Message, SimulatedSource, create_topic, produce
    from cdclake.sim.wire import WIRE_FORMATS

    cfg = load_pipeline(REPO_ROOT / "config" / "pipelines" / "demo.yaml")
    src = SimulatedSource(seed=42, start=START, hours=HOURS, tx_per_hour=200)
    history = src.run()
    for wf in WIRE_FORMATS:
        topic = f"shop.{wf.tag}"
        source = cfg.source(topic)  # every wire format has its topic in demo.yaml
        assert source.format == wf.format and source.table_prefix == f"{wf.tag}_", (topic, source)
        assert source.model_dump(include=set(wf.options)) == wf.options, f"demo.yaml {topic}: settings differ"
        create_topic(bootstrap, topic, wf.partitions)
        n = produce(bootstrap, topic, wf.messages(history, src.tables))
        print(f"produced {n:>5} messages to {topic} ({wf.format})")
    t0 = int(START.timestamp() * 1000) + 60_000
    for topic, fname in (("lindorm.sql", "lindorm-sql.jsonl"), ("lindorm.hbase", "lindorm-hbase.jsonl")):
        lines = [ln.encode() for ln in (SAMPLES / fname).read_text().splitlines() if ln.strip()]
        create_topic(bootstrap, topic, 1)
        n = produce(bootstrap, topic, [Message(None, v, t0 + i, 0) for i, v in enumerate(lines)])
        print(f"produced {n:>5} messages to {topic} (samples of Lindorm's Debezium V2.0 document)")
    return src


def silver_tables() -> dict:
    """``{name: [rows]}`` of the demo pipeline's silver namespace, read with pyiceberg."""
    from cdclake.catalog import pyiceberg_catalog

    cfg = load_pipeline(REPO_ROOT / "config" / "pipelines" / "demo.yaml")
    cat = pyiceberg_catalog(cfg.catalog)
    out = {}
    for ident in cat.list_tables(cfg.silver.namespace):
        out[ident[-1]] = cat.load_table(ident).scan().to_arrow().to_pylist()
    return out


def check(src) -> bool:
    """Print each silver table's row count and PASS/FAIL against the source; True when all pass."""
    from cdclake.sim.compare import compare_table
    from cdclake.sim.wire import WIRE_FORMATS

    tables = silver_tables()
    expected = {}
    for wf in WIRE_FORMATS:
        for t, table in src.tables.items():
            names = [n for n in tables if n.startswith(f"{wf.tag}_") and n.endswith(f"__{t}")]
            name = names[0] if len(names) == 1 else f"{wf.tag}_…__{t}"
            expected[name] = (list(table.primary_key), src.final_state()[t])
    expected.update(LINDORM_EXPECTED)
    ok = True
    print(f"\n{'silver table':<45} {'rows':>6} {'source':>6}  result")
    for name, (pk, state) in sorted(expected.items()):
        rows = tables.get(name)
        diffs = ["table missing"] if rows is None else compare_table(state, rows, pk)
        ok &= not diffs
        print(f"{name:<45} {len(rows or []):>6} {len(state):>6}  {'PASS' if not diffs else 'FAIL'}")
        for d in diffs:
            print(f"    {d}")
    return ok


def main() -> int:
    from cdclake.airflow_local import dags_test
    from cdclake.window import iso

    t0 = time.monotonic()
    reset_lake()
    env = embedded.up(registry=True)
    os.environ["CDC_SCHEMA_REGISTRY_URL"] = env["CDC_SCHEMA_REGISTRY_URL"]  # the debezium-avro topics' registry
    print(f"embedded broker at {env['CDC_KAFKA_BOOTSTRAP']}, schema registry at {env['CDC_SCHEMA_REGISTRY_URL']}, "
          f"catalog and warehouse in {env['CDC_STATE_DIR']}")
    src = produce_traffic(env["CDC_KAFKA_BOOTSTRAP"])
    end = START + dt.timedelta(hours=HOURS)
    rc = dags_test("cdc_demo", iso(START), iso(end))
    if rc != 0:
        print(f"FAIL: airflow dags test exited {rc}")
        return 1
    ok = check(src)
    print(f"\n{'PASS' if ok else 'FAIL'}: demo finished in {time.monotonic() - t0:.0f}s. "
          "Browse the run in the UI with `make airflow`; tables are in the Iceberg catalog "
          f"{state_dir() / 'catalog.db'} (namespaces raw, bronze, silver).")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
