"""The pipeline's cost per source table: ``python -m bench.run --tables N[,N...]``.

For each N in turn, on the run's broker and lake and in one warm Spark session:

1. input (not measured, in a child process, :func:`prepare`): a database of N tables
   (:class:`bench.tables_source.TablesSource`) over two hours with ``--table-changes`` row changes
   per table and hour, rendered as Debezium JSON (:func:`cdclake.sim.debezium_json`, the ``dbz``
   format, Connect schema envelope included) and produced to Kafka: one topic per table named
   ``n<N>.shop.<table>`` with one partition, as Debezium's MySQL connector writes them by default
   (``--tables-layout per-topic``), or every table in the one topic ``n<N>.shop`` with three
   partitions, as a topic-routing transform writes them (``routed``). The source's final state is
   written as ``expected/<table>.jsonl`` (:func:`bench.data._write_expected`).
2. the first hour (the tables created: mostly inserts), then the measured hour (inserts, updates
   and deletes of existing rows), each through land, the land gate, normalize, the normalize gate,
   silver and the silver gate (:func:`bench.pipeline.run_hour`: the library calls the DAG's jobs
   and gate tasks make) for every topic of a pipeline file that holds the N tables' topics, each
   source with the table prefix ``n<N>_``.
3. every silver table compared value by value with the source's final state
   (:func:`bench.pipeline.verify`, in a child process): a table that differs fails the run,
   named, and that N's figures are not reported.

The results file's ``tables`` section holds per N the wall times (s) of every stage and gate of
both hours, the measured hour's silver and whole hour in ms per table, the counts, and the check.
"""
from __future__ import annotations

import argparse
import datetime as dt
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Optional

log = logging.getLogger("bench")
FORMAT = "debezium-json"
LAYOUTS = ("per-topic", "routed")
#: Kafka partitions of a topic: one per table topic (Kafka's default for a topic Debezium creates),
#: three for the one routed topic (the ``dbz`` wire format's).
PARTITIONS = {"per-topic": 1, "routed": 3}
COLUMNS = (("land", "land"), ("land_gate", "gate"), ("normalize", "normalize"), ("normalize_gate", "gate"),
           ("silver", "silver"), ("silver_gate", "gate"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``--tables``, ``--tables-layout``, ``--table-changes`` on ``bench.run``'s parser."""
    p.add_argument("--tables", default="", metavar="N[,N...]",
                   help="only the cost per source table (bench/tables.py): for each N in turn, a first hour creating "
                        "N tables, then the measured hour of N tables, Debezium JSON (skips the formats' hour, peers "
                        "and merge scaling)")
    p.add_argument("--tables-layout", choices=LAYOUTS, default="per-topic",
                   help="--tables: one topic per table (Debezium's default), or every table in one topic (routed)")
    p.add_argument("--table-changes", type=int, default=100, help="--tables: row changes per table and hour (default 100)")


def parse_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``args.tables`` as a list of table counts (empty: not asked for); ``p.error`` on a bad one."""
    try:
        args.tables = [int(x) for x in args.tables.split(",") if x.strip()]
    except ValueError:
        p.error(f"--tables takes table counts separated by commas, not {args.tables!r}")
    if any(n < 1 for n in args.tables) or args.table_changes < 1:
        p.error("--tables and --table-changes take counts of at least 1")
    if len(set(args.tables)) < len(args.tables):
        p.error(f"--tables names a table count twice: {args.tables}")


def tag_of(n: int) -> str:
    """The topic and table prefix stem of the N-table run: ``n<N>``."""
    return f"n{n}"


def topics_of(n: int, layout: str, tag: Optional[str] = None) -> dict[str, str]:
    """``{table: topic}`` of the N tables (:func:`bench.tables_source.table_definitions`) in ``layout``:
    ``<tag>.shop.<table>`` or ``<tag>.shop`` (``tag`` default :func:`tag_of`)."""
    from bench.tables_source import table_definitions

    stem = f"{tag or tag_of(n)}.shop"
    return {t: (f"{stem}.{t}" if layout == "per-topic" else stem) for t in table_definitions(n)}


def sources_of(n: int, layout: str, tag: Optional[str] = None) -> list[dict]:
    """The pipeline file's ``sources[]`` for the N tables: one per topic, Debezium JSON, prefix ``<tag>_``."""
    topics = dict.fromkeys(topics_of(n, layout, tag).values())
    return [{"topic": t, "format": FORMAT, "table_prefix": f"{tag or tag_of(n)}_"} for t in topics]


def prepare(n: int, changes: int, seed: int, start: dt.datetime, layout: str, bootstrap: str, out: Path,
            tag: Optional[str] = None) -> dict:
    """Build, render and produce the N tables' two hours (step 1 of the module docstring); run in a
    child process. Writes ``out/expected/<table>.jsonl``.

    Returns ``{"tables": {table: {"primary_key": [col], "columns": {col: ctype}}}, "events":
    [row changes per hour], "ops": [{op: row changes} per hour], "kafka_records": [records per
    hour], "topics", "value_bytes", "generation_s", "produce_s"}``.
    """
    from bench import data as bdata
    from bench.tables_source import TablesSource
    from cdclake.sim import create_topics, debezium_json

    t0 = time.monotonic()
    src = TablesSource(n, changes, seed, start, hours=2)
    history = src.run()
    bdata._write_expected(src, out / "expected")
    messages = debezium_json(history, src.tables, partitions=PARTITIONS[layout])
    topic = topics_of(n, layout, tag)
    events, ops = [0, 0], [{}, {}]
    tables = [ch.table for tx in history for ch in tx.changes]
    for tx in history:
        h = src.hour_of(tx)
        events[h] += len(tx.changes)
        for ch in tx.changes:
            ops[h][ch.op] = ops[h].get(ch.op, 0) + 1
    records, per_partition, i, table = [], {}, 0, None
    kafka_records = [0, 0]
    for m in messages:
        if m.rows:  # a tombstone (no rows) follows its delete, to the same topic
            table, i = tables[i], i + m.rows
        tp = (topic[table], m.partition)
        per_partition[tp] = per_partition.get(tp, 0) + 1
        records.append((topic[table], m))
        kafka_records[(m.timestamp_ms - src.start_ms) // 3_600_000] += 1
    generation_s = time.monotonic() - t0
    t1 = time.monotonic()
    create_topics(bootstrap, sorted(set(topic.values())), PARTITIONS[layout], timeout=120)
    produced = bdata.produce_records(bootstrap, records, per_partition)
    if produced != len(messages):
        raise RuntimeError(f"produced {produced} of {len(messages)} messages")
    return {"tables": {name: {"primary_key": list(t.primary_key), "columns": {c.name: c.ctype for c in t.columns}}
                       for name, t in src.tables.items()},
            "events": events, "ops": ops, "kafka_records": kafka_records, "topics": len(set(topic.values())),
            "value_bytes": sum(len(m.value) for m in messages if m.value is not None),
            "generation_s": round(generation_s, 1), "produce_s": round(time.monotonic() - t1, 1)}


def check(verified: dict) -> Optional[str]:
    """None when every table of :func:`bench.pipeline.verify`'s result equals the source, else one
    line naming the tables that differ (the first five, each with its counts and an example)."""
    bad = {t: e for t, e in verified["tables"].items() if not e["ok"]}
    if not bad:
        return None
    parts = []
    for t, e in list(bad.items())[:5]:
        if "error" in e:
            parts.append(f"{t}: {e['error']}")
        else:
            parts.append(f"{t}: {e['rows']} rows, {e['expected']} expected, {e['missing']} missing, {e['extra']} "
                         f"extra, {e['different']} different" + (f" ({e['examples'][0]})" if e["examples"] else ""))
    return f"{len(bad)} silver table(s) differ from the source: " + "; ".join(parts)


def run_tables(spark, state: Path, bootstrap: str, n: int, changes: int, seed: int, layout: str, sampler,
               gates: bool = True, tag: Optional[str] = None, work: Optional[Path] = None, driver_memory: str = "3g",
               master: str = "local[2]") -> dict:
    """The N tables' input (step 1 of the module docstring, :func:`prepare` in a child process), their
    first and measured hour (step 2) in ``spark`` (a session on the catalog of
    :func:`bench.pipeline.write_pipeline` in ``state``), then the check (step 3).

    ``tag``: the topic and table prefix stem (default :func:`tag_of`); ``work``: where the expected
    state goes (default ``state/tables/<tag>``). Returns the input's counts (``events``, ``ops``,
    ``kafka_records`` per hour; ``topics``, ``value_bytes``, ``generation_s``, ``produce_s``), and
    when every silver table equals the source, ``first_hour`` and ``hour`` (:func:`bench.pipeline.run_hour`'s
    figures, wall times in s), ``silver_ms_per_table`` and ``hour_ms_per_table`` (the measured
    hour's silver and whole hour, ms per table) and ``verify`` (``{"ok", "tables", "differ"}``);
    else ``error`` (a stage, a gate, a landed count or the tables that differ) and no figure.
    """
    from bench import data as bdata
    from bench.pipeline import HOUR, run_hour, verify, write_pipeline
    from bench.run import MEASURED_START, WARM_START, in_child
    from cdclake.config import load_pipeline
    from cdclake.window import Window

    tag = tag or tag_of(n)
    work = work or state / "tables" / tag
    info = in_child(prepare, n, changes, seed, WARM_START, layout, bootstrap, work, tag)
    log.info("%s: %d topics, %s records produced in %.0f s (generated in %.0f s)", tag, info["topics"],
             info["kafka_records"], info["produce_s"], info["generation_s"])
    cfg = load_pipeline(write_pipeline(state, bootstrap, [], driver_memory, master, sources=sources_of(n, layout, tag)))
    topics = sorted(cfg.topics())
    out: dict = {"tables": n, **{k: v for k, v in info.items() if k != "tables"}}
    for key, start, h in (("first_hour", WARM_START, 0), ("hour", MEASURED_START, 1)):
        done = (lambda: bdata.delete_topics(bootstrap, topics)) if key == "hour" else None
        r = out[key] = run_hour(spark, cfg, sampler, f"{tag}/{key}", Window(start, start + HOUR), info["events"][h],
                                gates, after_land=done)
        landed = r["counts"].get("land", {}).get("raw_records")
        if "error" in r:
            out["error"] = f"{key}: {r['error']}"
        elif landed != info["kafka_records"][h]:
            out["error"] = f"{key}: landed {landed} of {info['kafka_records'][h]} records"
        elif r.get("gate_failures"):
            out["error"] = f"{key}: gate failed: {r['gate_failures'][0][:500]}"
        if "error" in out:
            break
        log.info("%s %s: %s", tag, key, ", ".join(f"{s} {f['wall_s']:.1f} s" for s, f in r["stages"].items()))
    else:
        verified = in_child(verify, cfg, tag, info["tables"], work / "expected")
        differ = check(verified)
        out["verify"] = {"ok": differ is None, "tables": len(verified["tables"]), "differ": differ}
        if differ:
            out["error"] = differ
    if "error" in out:
        for key in ("first_hour", "hour"):
            out.pop(key, None)  # no figure of an hour whose silver was not checked equal to the source
        return out
    out["silver_ms_per_table"] = round(out["hour"]["stages"]["silver"]["wall_s"] * 1000 / n, 1)
    out["hour_ms_per_table"] = round(out["hour"]["e2e"]["wall_s"] * 1000 / n, 1)
    return out


def table(section: dict) -> str:
    """The printed summary of a ``tables`` section: one line per N, wall times in s."""
    head = ["tables", "changes"] + [c for _, c in COLUMNS] + ["hour", "silver ms/table", "hour ms/table", "first hour"]
    rows = [head]
    for n, r in section["runs"].items():
        if "silver_ms_per_table" not in r:
            rows.append([n, "-", f"FAILED: {r.get('error', 'not measured')}"[:120]])
            continue
        st = r["hour"]["stages"]
        rows.append([n, str(r["hour"]["e2e"]["events"])] + [f"{st[s]['wall_s']:.1f}" if s in st else "-" for s, _ in COLUMNS]
                    + [f"{r['hour']['e2e']['wall_s']:.1f}", f"{r['silver_ms_per_table']:.0f}",
                       f"{r['hour_ms_per_table']:.0f}", f"{r['first_hour']['e2e']['wall_s']:.1f}"])
    widths = [max(len(row[i]) for row in rows if i < len(row) and len(row) == len(head)) for i in range(len(head))]
    lines = [f"{section['format']}, {section['layout']}: {section['changes_per_table']} row changes per table and hour; "
             "wall s per stage of the measured hour (first hour: the tables created, the whole hour)"]
    for row in rows:
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths)) if len(row) == len(head) else "  ".join(row))
    return "\n".join(lines)


def main(args: argparse.Namespace, state: Path, bootstrap: str, broker_pid: Optional[int], results: dict,
         json_path: Path) -> int:
    """``bench.run --tables``: each N of ``args.tables`` in turn (module docstring); writes
    ``results["tables"]`` to ``json_path`` after each N, prints the summary; returns the exit code."""
    from bench import pipeline, report
    from bench.run import MEASURED_START, WARM_START, spark_run
    from bench.sampler import RssSampler
    from cdclake.catalog import spark_session
    from cdclake.config import load_pipeline

    t_start = time.monotonic()
    results["config"] = {"tables": args.tables, "layout": args.tables_layout, "changes_per_table": args.table_changes,
                         "format": FORMAT, "seed": args.seed, "master": args.master, "driver_memory": args.driver_memory,
                         "gates": not args.no_gates, "state_dir": str(state), "first_hour": WARM_START.isoformat(),
                         "measured_hour": MEASURED_START.isoformat()}
    for k in ("formats", "peers"):
        results.pop(k, None)
    section = results["tables"] = {"format": FORMAT, "layout": args.tables_layout,
                                   "changes_per_table": args.table_changes, "runs": {}}
    sampler = RssSampler(interval=args.rss_interval, exclude=[broker_pid] if broker_pid else [])
    events_dir = state / "spark-events"  # Spark's event log: each stage's job timeline (bench.timeline)
    shutil.rmtree(events_dir, ignore_errors=True)
    events_dir.mkdir(parents=True)

    def stages() -> dict:
        return {f"{tag_of(int(n))}/{key}/{stage}": figs for n, r in section["runs"].items()
                for key in ("first_hour", "hour") for stage, figs in r.get(key, {}).get("stages", {}).items()}

    with spark_run(results, sampler, events_dir, args.master, stages) as run:
        first = pipeline.write_pipeline(
            state, bootstrap, [], args.driver_memory, args.master, sources=sources_of(args.tables[0], args.tables_layout),
            spark_conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": events_dir.as_uri()})
        with sampler.span("spark_startup") as s:
            spark = run.spark = spark_session(load_pipeline(first), app_name="cdc-bench-tables")
            spark.range(1).count()
        results["spark_startup"] = {"wall_s": round(s.wall_s, 2), **s.as_dict()}
        for n in args.tables:
            log.info("%s: %d tables, %d changes each per hour, %s", tag_of(n), n, args.table_changes,
                     args.tables_layout)
            r = section["runs"][str(n)] = run_tables(spark, state, bootstrap, n, args.table_changes, args.seed,
                                                     args.tables_layout, sampler, not args.no_gates,
                                                     driver_memory=args.driver_memory, master=args.master)
            if "error" in r:
                results["errors"].append(f"{n} tables: {r['error']}")
            else:
                log.info("%s: silver %.1f s (%.0f ms per table), hour %.1f s; every silver table equals the source",
                         tag_of(n), r["hour"]["stages"]["silver"]["wall_s"], r["silver_ms_per_table"],
                         r["hour"]["e2e"]["wall_s"])
            report.write_json(results, json_path)
    sampler.close()
    results["wall_s"] = round(time.monotonic() - t_start, 1)
    report.write_json(results, json_path)
    print(table(section))
    print(f"\nresults: {json_path}")
    for e in results["errors"]:
        print(f"error: {e}"[:2000], file=sys.stderr)
    return 1 if results["errors"] else 0
