"""The measured work: the pipeline's stages and gates per format, Spark's ``from_json``, checks, exports.

Every stage is the library call the DAG's spark-submit job makes (``jobs/land.py`` →
:func:`cdclake.land.land`, ``jobs/normalize.py`` → :func:`cdclake.normalize.normalize`,
``jobs/silver.py`` → :func:`cdclake.silver.build_silver`, each ``(spark, cfg, window)``), and
every gate is :func:`cdclake.gates.run_gate` (what the DAG's ``GateOperator`` runs), for a window
of one hour narrowed to one topic. The jobs start one JVM per stage; here one warm Spark session
runs them all (its start-up is measured apart).
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import time
import traceback
from pathlib import Path
from typing import Callable, Optional, Sequence

import yaml

from bench.sampler import RssSampler

log = logging.getLogger("bench")
STAGES = ("land", "normalize", "silver")
HOUR = dt.timedelta(hours=1)


def topic_of(tag: str, warm: bool = False) -> str:
    return f"{'warm' if warm else 'bench'}.{tag}"


def prefix_of(tag: str, warm: bool = False) -> str:
    return f"{'warm_' if warm else ''}{tag}_"


def kept_lake(state: str) -> Optional[Path]:
    """The state directory ``state`` resolved, when it holds the lake a benchmark run left (its
    ``bench.yaml``), the process's time zone set to UTC as the run's; None, with a line on stderr,
    when it holds none (a tool on the last run's lake then exits with 2)."""
    import os
    import sys

    os.environ["TZ"] = "UTC"
    time.tzset()
    path = Path(state).resolve()
    if not (path / "bench.yaml").exists():
        print(f"no benchmark lake in {path}: run make bench first (it keeps its lake there)", file=sys.stderr)
        return None
    return path


def write_pipeline(state: Path, bootstrap: str, tags: list[str], driver_memory: str, master: str = "local[2]",
                   spark_conf: Optional[dict] = None, sources: Sequence[dict] = ()) -> Path:
    """The benchmark's pipeline file in ``state``: a measured and a warm-up topic per format of
    ``tags``, then ``sources`` (``sources[]`` entries of a pipeline file) as given."""
    from cdclake.sim.wire import WIRE_FORMATS

    by_tag = {wf.tag: wf for wf in WIRE_FORMATS}
    given, sources = list(sources), []
    for warm in (False, True):
        for tag in tags:
            wf = by_tag[tag]
            sources.append({"topic": topic_of(tag, warm), "format": wf.format, "table_prefix": prefix_of(tag, warm),
                            **json.loads(json.dumps(wf.options))})
    sources += given
    doc = {
        "kafka": {"bootstrap_servers": bootstrap, "timeout_s": 30},
        "catalog": {"name": "lake", "uri": f"jdbc:sqlite:{state / 'catalog.db'}", "warehouse": f"file://{state / 'warehouse'}"},
        "sources": sources,
        "silver": {"namespace": "silver", "delete_mode": "hard", "write_mode": "merge-on-read"},
        "gates": {"data_docs_dir": str(state / "data_docs")},
        # Python workers reused from task to task within a stage, Spark's default and what the DAG's
        # jobs run with: a fresh worker per task imports pyarrow, pyiceberg and the parsers again
        # (about half a second of CPU per task; the 1M-change Debezium normalize took 12 % longer).
        # One session runs every stage here, so a worker may carry a stage's memory into the next
        # stage's RSS figure: the figures can only be higher for it.
        "spark": {"master": master, "driver_memory": driver_memory,
                  "conf": {"spark.python.worker.reuse": "true", **(spark_conf or {})}},
        "airflow": {"schedule": None},
    }
    path = state / "bench.yaml"
    path.write_text("# written by bench/run.py for one benchmark run\n" + yaml.safe_dump(doc, sort_keys=False))
    return path


def figures(span, events: int, **extra) -> dict:
    import os

    wall = span.wall_s
    out = {"wall_s": round(wall, 2), "events": events, "events_per_s": round(events / wall) if wall > 0 else None,
           "load_1m_at_end": round(os.getloadavg()[0], 2)}
    out.update(span.as_dict())
    out.update(extra)
    return out


def run_format(spark, cfg, sampler: RssSampler, tag: str, start: dt.datetime, events: int, warm: bool = False,
               gates: bool = True, after_land: Optional[Callable[[], None]] = None) -> dict:
    """Land, normalize and silver one format's topic for the hour at ``start``, each followed by its gate:
    :func:`run_hour` on the window of the hour narrowed to the format's topic (``topic_of(tag, warm)``).

    Returns :func:`run_hour`'s figures with ``topic``.
    """
    from cdclake.window import Window

    topic = topic_of(tag, warm)
    out = run_hour(spark, cfg, sampler, f"{'warm/' if warm else ''}{tag}", Window(start, start + HOUR, (topic,)),
                   events, gates, after_land)
    return {"topic": topic, **out}


def run_hour(spark, cfg, sampler: RssSampler, label: str, window, events: int, gates: bool = True,
             after_land: Optional[Callable[[], None]] = None) -> dict:
    """Land, normalize and silver ``window`` (a :class:`cdclake.window.Window`; its topics, or every
    topic of ``cfg`` when it names none, as the DAG's run), each followed by its gate, in sequence.

    Returns ``{"window", "stages": {stage or stage_gate: figures}, "e2e": figures, "counts": {...}}``
    (wall times in s, ``events`` the source's row changes in the window, RSS sampled under the span
    ``<label>/<stage>``); ``counts`` adds up the window's topics (land: ``raw_records``; normalize:
    the topics' raw, change, quarantined and control records; silver: ``tables``, ``changes``,
    ``upserts``, ``deletes``). ``e2e``'s ``wall_s`` is the stages' and gates' wall times added, its
    ``span_wall_s`` the whole span with the memory released before each (:func:`release_memory`,
    about 1 s each); a failing stage stops the hour (``error``), a failing gate is recorded
    (``gate_failures``) and the hour goes on. ``after_land`` runs once the land gate has read Kafka
    (the caller may delete the topics there, so that the embedded broker's memory is free for the
    later stages).
    """
    from cdclake.gates import GateFailed, run_gate
    from cdclake.land import land
    from cdclake.normalize import normalize
    from cdclake.silver import build_silver

    topics = list(window.topics or cfg.topics())
    paths: dict = {}
    fns = {"land": land, "normalize": lambda *a: normalize(*a, paths=paths), "silver": build_silver}
    out: dict = {"window": str(window), "stages": {}, "counts": {}}
    with sampler.span(f"{label}/e2e") as e2e:
        for stage in STAGES:
            log.info("%s: %s", label, stage)
            release_memory(spark)
            with sampler.span(f"{label}/{stage}") as s:
                try:
                    result = fns[stage](spark, cfg, window)
                except Exception as exc:
                    out["error"] = f"{stage}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    log.error("%s %s failed\n%s", label, stage, traceback.format_exc())
                    result = None
            if result is None:
                break
            out["stages"][stage] = figures(s, events)
            out["counts"][stage] = _counts(stage, result, topics)
            if stage == "normalize" and paths:  # records read by the fast path / the per-record parser
                out["counts"]["normalize_paths"] = _added(paths.get(t, {}) for t in topics)
            if gates:
                release_memory(spark)  # the DAG's gate task runs without a JVM: the stage's heap is not its own
                with sampler.span(f"{label}/{stage}_gate") as g:
                    try:
                        run_gate(stage, cfg, window)
                        failure = None
                    except GateFailed as exc:
                        failure = str(exc)
                    except Exception as exc:
                        failure = f"{type(exc).__name__}: {exc}"
                out["stages"][f"{stage}_gate"] = figures(g, events, passed=failure is None)
                if failure:
                    out.setdefault("gate_failures", []).append(failure[:2000])
                    log.error("%s %s gate: %s", label, stage, failure[:2000])
            if stage == "land" and after_land is not None:
                after_land()
    # the hour's work: its stages and gates, without the heap released between them (the
    # benchmark's own step: the DAG runs each in a process of its own); the span keeps it
    out["e2e"] = figures(e2e, events, complete="error" not in out)
    work = sum(v["wall_s"] for v in out["stages"].values())
    if work > 0:
        out["e2e"].update(span_wall_s=out["e2e"]["wall_s"], wall_s=round(work, 2), events_per_s=round(events / work))
    return out


def release_memory(spark) -> None:
    """A full GC in the JVM (which then gives unused heap back: :data:`cdclake.catalog.JVM_OPTIONS`) and in
    Python, before a measured stage or gate.

    The DAG runs each stage in its own JVM and each gate in a task with no JVM at all; here one JVM
    runs them all, and without this a stage's or a gate's peak RSS would include the heap the stage
    before it left committed (3.8 GiB after normalizing a 5M-change hour). Two collections, half a
    second apart: after silver's 5M-change hour the JVM kept 3.8 GiB through one (Spark's context
    cleaner drops a checkpointed step's blocks only after a collection has found its frame gone).
    """
    import gc

    gc.collect()
    for _ in range(2):
        try:
            spark.sparkContext._jvm.java.lang.System.gc()
        except Exception:
            pass
        time.sleep(0.5)


def _added(counts) -> dict:
    """Dicts of counts added up key by key."""
    out: dict = {}
    for c in counts:
        for k, v in dict(c).items():
            out[k] = out.get(k, 0) + v
    return out


def _counts(stage: str, result, topics: list[str]) -> dict:
    if stage == "land":
        return {"raw_records": sum(int(result.get(t, 0)) for t in topics)}
    if stage == "normalize":
        return _added(result.get(t, {}) for t in topics)
    return {"tables": len(result), "changes": sum(r.changes for r in result), "upserts": sum(r.upserts for r in result),
            "deletes": sum(r.deletes for r in result)}


# ---------------------------------------------------------------------------------------------
# checks and exports (not measured)


def silver_names(cfg, tag: str, tables: list[str], warm: bool = False) -> dict[str, Optional[str]]:
    """``{source table: silver table name}`` of a format's topic (names as the demo finds them)."""
    from cdclake.catalog import pyiceberg_catalog

    cat = pyiceberg_catalog(cfg.catalog)
    names = [i[-1] for i in cat.list_tables(cfg.silver.namespace)]
    prefix = prefix_of(tag, warm)
    out = {}
    for t in tables:
        found = [n for n in names if n.startswith(prefix) and n.endswith(f"__{t}")]
        out[t] = found[0] if len(found) == 1 else None
    return out


def compare_to_expected(rows, schema: dict, expected_file: Path) -> dict:
    """Compare rows (dicts of Python values) with one table of the source's final state.

    ``expected_file`` is an ``expected/<table>.jsonl`` of :mod:`bench.data` (canonical texts);
    ``rows`` are made canonical with :func:`cdclake.types.to_text` by the column types of
    ``schema`` (``{"columns", "primary_key"}``). Returns ``{"ok", "rows", "expected", "missing",
    "extra", "different", "examples"}``.
    """
    import datetime as _dt

    from cdclake.types import to_text

    cols, pk = schema["columns"], schema["primary_key"]
    expected = {}
    with open(expected_file, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            expected[tuple(row[k] for k in pk)] = row
    got = {}
    for r in rows:
        text = {c: to_text(v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
                           if isinstance(v, _dt.datetime) and v.tzinfo else v, cols[c]) for c, v in r.items() if c in cols}
        got[tuple(text.get(k) for k in pk)] = text
    different = sorted((k for k in set(got) & set(expected) if any(got[k].get(c) != expected[k][c] for c in cols)),
                       key=str)
    out = {"rows": len(got), "expected": len(expected), "missing": len(set(expected) - set(got)),
           "extra": len(set(got) - set(expected)), "different": len(different),
           "examples": [f"key {k}: " + ", ".join(f"{c} expected {expected[k][c]!r} got {got[k].get(c)!r}"
                                                 for c in cols if got[k].get(c) != expected[k][c])
                        for k in different[:3]]}
    out["ok"] = not (out["missing"] or out["extra"] or out["different"])
    return out


def verify(cfg, tag: str, tables: dict, expected_dir: Path) -> dict:
    """Compare every silver table of ``tag`` with the source's final state, value by value.

    Returns ``{"ok": bool, "tables": {table: compare_to_expected(...)}}`` (``"silver table
    missing"`` for a table not found).
    """
    from cdclake.catalog import pyiceberg_catalog

    cat = pyiceberg_catalog(cfg.catalog)
    names = silver_names(cfg, tag, list(tables))
    out: dict = {"ok": True, "tables": {}}
    for t, schema in tables.items():
        if names[t] is None:
            entry = {"ok": False, "error": "silver table missing"}
        else:
            scan = cat.load_table((cfg.silver.namespace, names[t])).scan(selected_fields=tuple(schema["columns"]))
            entry = compare_to_expected(scan.to_arrow().to_pylist(), schema, expected_dir / f"{t}.jsonl")
        out["ok"] &= entry["ok"]
        out["tables"][t] = entry
    return out


# ---------------------------------------------------------------------------------------------
# Spark's own from_json, for comparison with normalize

_DBZ_ROW = ("struct<id:bigint,name:string,email:string,balance:string,created_at:bigint,birth_date:int,"
            "price:string,weight:double,stock:int,code:string,customer_id:bigint,product_id:int,quantity:int,"
            "status:string,amount:string,ordered_at:bigint,note:string>")
_DBZ_PAYLOAD = (
    f"struct<before:{_DBZ_ROW},after:{_DBZ_ROW},"
    "source:struct<version:string,connector:string,name:string,ts_ms:bigint,snapshot:string,db:string,"
    "table:string,server_id:bigint,gtid:string,file:string,pos:bigint,row:int,thread:bigint,query:string>,"
    "op:string,ts_ms:bigint,transaction:struct<id:string,total_order:bigint,data_collection_order:bigint>>")


def from_json_columns(values, enveloped: bool):
    """Debezium JSON values (a binary/string column ``value``) parsed by ``from_json`` into flat columns.

    The three shop tables' columns are one struct (a column a table lacks is null); Connect
    decimals stay Base64 text and times epoch numbers, as in the message.
    """
    from pyspark.sql import functions as F

    schema = f"struct<payload:{_DBZ_PAYLOAD}>" if enveloped else _DBZ_PAYLOAD
    parsed = values.select(F.from_json(F.col("value").cast("string"), schema).alias("m"))
    p = "m.payload" if enveloped else "m"
    row_cols = [c.split(":")[0] for c in _DBZ_ROW[len("struct<"):-1].split(",")]
    return parsed.select(
        F.col(f"{p}.op").alias("op"), F.col(f"{p}.ts_ms").alias("ts_ms"),
        *[F.col(f"{p}.source.{c}").alias(f"source_{c}") for c in ("db", "table", "ts_ms", "gtid", "file", "pos", "row")],
        F.col(f"{p}.transaction.id").alias("tx_id"), F.col(f"{p}.transaction.total_order").alias("tx_seq"),
        *[F.col(f"{p}.before.{c}").alias(f"before_{c}") for c in row_cols],
        *[F.col(f"{p}.after.{c}").alias(f"after_{c}") for c in row_cols])


def run_from_json(spark, cfg, sampler: RssSampler, start: dt.datetime, work: Path,
                  payload_dir: Optional[Path], warm: bool = False, parts: int = 4) -> dict:
    """Time ``from_json`` into columns, written to Parquet, on Debezium messages read from Parquet.

    ``pipeline``: the very values normalize read (the raw table's non-null values of the Debezium
    topic's hour, Connect schema envelope included), first copied (not timed) into ``parts``
    Parquet files, so that both cores work: the raw table holds the hour in one file, which Spark
    reads in one task. ``payload_only``: the same history rendered without the envelope
    (``debezium_json(..., with_schema=False)``, the ~600-byte shape), four Parquet files.
    """
    import shutil

    from pyspark.sql import functions as F

    from cdclake.catalog import qualified
    from cdclake.lake import RAW_TABLE, window_filter
    from cdclake.window import Window

    topic = topic_of("dbz", warm)
    window = Window(start, start + HOUR, (topic,))
    copy = work / "in_pipeline"
    (spark.table(qualified(cfg, RAW_TABLE)).where(window_filter(window, [topic])).where(F.col("value").isNotNull())
     .select("value").repartition(parts).write.mode("overwrite").parquet(str(copy)))
    inputs = {"pipeline": (copy, True)}
    if payload_dir is not None and payload_dir.exists():
        inputs["payload_only"] = (payload_dir, False)
    out: dict = {}
    for name, (path, enveloped) in inputs.items():
        values = spark.read.parquet(str(path)).select("value")
        n = values.count()
        avg = values.select(F.avg(F.length("value"))).first()[0] or 0
        target = work / f"out_{name}"
        with sampler.span(f"from_json/{name}") as s:
            from_json_columns(values, enveloped).write.mode("overwrite").parquet(str(target))
        out[name] = figures(s, n, mean_message_bytes=round(avg), input_tasks=values.rdd.getNumPartitions())
        shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(copy, ignore_errors=True)
    return out
