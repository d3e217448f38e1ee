"""The peers from the benchmark's side: which calls it makes, running one, checking its rows.

:func:`run_peers` runs after the Spark session has stopped (``bench.run``): for every peer named
on the command line and every format it takes (:data:`PEERS`), :func:`run_peer` calls
``bench.peers.<name>.run(input_spec) -> dict`` (:func:`input_spec`, described in
``bench/README.md``), times it and samples its RSS; :func:`check_peer_rows` compares the final
rows it returns with the source's final state before any ratio is quoted
(:func:`bench.report.peer_ratios`).

Peers in :data:`PARALLEL_PEERS` run twice per format: at the parallelism of the benchmark's cores
(Spark's ``local[N]`` on our side), the headline figure, then at 1 beside it, the figure the
runs before 2026-12 quoted.
"""
from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import logging
import os
import re
import traceback
from pathlib import Path
from typing import Optional

from bench import data as bdata
from bench.sampler import RssSampler

log = logging.getLogger("bench")

#: Peer module names and the wire formats each is run on (one ``run`` call per format).
PEERS = {"flink": ("debezium-json", "canal-json"), "pyiceberg_upsert": ("debezium-json",)}
#: Peers run at the benchmark's cores (``parallelism_role`` "headline") and at 1 ("continuity").
PARALLEL_PEERS = ("flink",)


def spark_cores(master: str) -> int:
    """The cores Spark's ``master`` runs tasks on: N of ``local[N]``, the machine's for
    ``local[*]`` or any other master, 1 for ``local``."""
    if master == "local":
        return 1
    m = re.fullmatch(r"local\[(\d+)(?:,\s*\d+)?\]", master.strip())
    return int(m.group(1)) if m else (os.cpu_count() or 1)


def run_peer(name: str, input_spec: dict, sampler: Optional[RssSampler] = None) -> dict:
    """Run peer ``bench.peers.<name>``: its ``run(input_spec) -> dict``, timed and memory-sampled.

    Returns the peer's dict with ``name``, ``status`` (``ok`` unless the peer says otherwise) and a
    ``harness`` entry (wall seconds and peak RSS of this process tree while the peer ran); a peer whose
    module does not exist or does not import is ``not run``, one that raises is ``failed``.
    """
    module = f"bench.peers.{name}"
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return {"name": name, "status": "not run", "reason": f"module {module} not found"}
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        return {"name": name, "status": "not run", "reason": f"import of {module} failed: {type(exc).__name__}: {exc}"}
    if not callable(getattr(mod, "run", None)):
        return {"name": name, "status": "not run", "reason": f"{module} has no run(input_spec)"}
    own = RssSampler() if sampler is None else sampler
    spec = dict(input_spec, work_dir=str(Path(input_spec["work_dir"]) / name))
    Path(spec["work_dir"]).mkdir(parents=True, exist_ok=True)
    label = f"peer/{name}" + (f"/p{input_spec['parallelism']}" if "parallelism" in input_spec else "")
    try:
        with own.span(label) as s:
            try:
                result = mod.run(spec)
                error = None
            except Exception as exc:
                result, error = None, f"{type(exc).__name__}: {exc}"
                log.error("peer %s failed\n%s", name, traceback.format_exc())
    finally:
        if sampler is None:
            own.close()
    out = {"name": name, "status": "failed", "error": error} if error else dict(result or {})
    out.setdefault("name", name)
    out.setdefault("status", "ok")
    out["harness"] = {"wall_s": round(s.wall_s, 2), **s.as_dict()}
    return out


def input_spec(cfg, summary: dict, state: Path, tags: list[str], hour_start: dt.datetime) -> dict:
    """The input every peer call gets (see ``bench/README.md``); :func:`peer_calls` adds ``format``/``tables``
    (and ``parallelism``/``parallelism_role`` for :data:`PARALLEL_PEERS`)."""
    from bench.pipeline import silver_names
    from cdclake.lake import BRONZE_TABLE

    fmts = {}
    for tag, fmt in bdata.EXPORTED.items():
        d = bdata.DATA_DIR / fmt
        if tag in tags and d.is_dir():
            info = summary["formats"][tag]
            fmts[fmt] = {
                "files": {t: str(d / f"{t}.jsonl") for t in summary["tables"] if (d / f"{t}.jsonl").exists()},
                "ddl_file": str(d / "_ddl.jsonl") if (d / "_ddl.jsonl").exists() else None,
                "messages": info.get("exported", {}),
                "schema_include": fmt == "debezium-json",
                "topic": f"bench.{tag}", "kafka_partitions": info["partitions"],
                "silver_tables": {t: (f"{cfg.silver.namespace}.{n}" if n else None)
                                  for t, n in silver_names(cfg, tag, list(summary["tables"])).items()},
                "silver": {k: v for k, v in results_of(tag).items()},
            }
    cat = cfg.catalog
    return {
        "events": summary["events"], "transactions": summary["transactions"],
        "hour": {"start": hour_start.isoformat(), "end": (hour_start + dt.timedelta(hours=1)).isoformat()},
        "schemas": summary["tables"],
        "formats": fmts,
        "expected": {"format": "jsonl, one row per line, values in cdclake.types canonical text (null = NULL)",
                     "files": {t: str(bdata.DATA_DIR / "expected" / f"{t}.jsonl") for t in summary["tables"]},
                     "rows": summary["expected_rows"]},
        "changes": {"format": "parquet file per table: the table's columns typed as in silver, plus _op "
                              "('upsert' with the final row, or 'delete' with only the key set); one row per key "
                              "the hour touched",
                    "files": {t: str(bdata.DATA_DIR / "changes" / f"{t}.parquet") for t in summary["tables"]},
                    "rows": summary.get("changes_rows")},
        "bronze": {"table": f"{cat.name}.{BRONZE_TABLE}", "kafka_topic": "bench.dbz",
                   "landed_hour": hour_start.isoformat()},
        "catalog": {"name": cat.name, "uri": "sqlite:///" + cat.uri.removeprefix("jdbc:sqlite:"),
                    "jdbc_uri": cat.uri, "warehouse": cat.warehouse},
        "spark_master": cfg.spark.master,
        "spark_cores": spark_cores(cfg.spark.master),
        "cores": os.cpu_count(),
        "work_dir": str(state / "peers"),
        "return_rows": True,
    }


_OURS: dict = {}


def results_of(tag: str) -> dict:
    """Our figures for a format (filled by :func:`run_peers`), handed to peers for reference."""
    return _OURS.get(tag, {})


def peer_calls(names: list[str], spec: dict) -> list[tuple[str, dict]]:
    """``(peer, input_spec)`` per peer and format: ``spec`` plus ``format`` and ``tables``
    (``{table: {"path", "columns", "primary_key"}}``: that format's message file per table); a
    peer of :data:`PARALLEL_PEERS` gets two calls per format, ``parallelism`` of
    ``spec["spark_cores"]`` (``parallelism_role`` "headline") then 1 ("continuity"), one call
    at 1 when the benchmark runs on one core."""
    calls = []
    cores = int(spec.get("spark_cores") or 1)
    for name in names:
        for fmt in PEERS.get(name, ("debezium-json",)):
            f = spec["formats"].get(fmt)
            if f is None:
                continue
            tables = {t: {"path": f["files"][t], "columns": s["columns"], "primary_key": s["primary_key"],
                          "changes": spec["changes"]["files"][t]}
                      for t, s in spec["schemas"].items() if t in f["files"]}
            call = dict(spec, peer=name, format=fmt, tables=tables)
            if name not in PARALLEL_PEERS:
                calls.append((name, call))
                continue
            runs = [(cores, "headline")] + ([(1, "continuity")] if cores > 1 else [])
            calls += [(name, dict(call, parallelism=p, parallelism_role=role)) for p, role in runs]
    return calls


def check_peer_rows(result: dict, spec: dict) -> dict:
    """Compare a peer's final ``rows`` (``{table: [row dict]}``) with the source's final state; drop the rows.

    Sets ``result["matches_source"]``: ``{"ok": bool, "rows_from": where the peer read them,
    "tables": {table: bench.pipeline.compare_to_expected(...)}}``."""
    from bench.pipeline import compare_to_expected

    rows = result.pop("rows", None)
    if isinstance(rows, dict):
        tables = {t: compare_to_expected(rows.get(t, []), schema, Path(spec["expected"]["files"][t]))
                  for t, schema in spec["schemas"].items()}
        result["matches_source"] = {"ok": all(e["ok"] for e in tables.values()),
                                    "rows_from": result.get("rows_from", "the rows the peer returned"),
                                    "tables": tables}
    return result


def run_peers(names: list[str], cfg, summary: dict, state: Path, tags: list[str], hour_start: dt.datetime,
              results: dict, sampler: RssSampler) -> None:
    """Run every call of :func:`peer_calls` for ``names`` in turn, after our hours: fills
    ``results["input_spec"]`` (the shared input, without our figures), ``results["peers"]`` (one
    entry per call, checked against the source) and ``results["peer_ratios"]``
    (:func:`bench.report.peer_ratios`)."""
    from bench import report

    for tag, r in results["formats"].items():
        _OURS[tag] = {"e2e": r.get("e2e"), "stages": r.get("stages")}
    spec = input_spec(cfg, summary, state, tags, hour_start)
    results["input_spec"] = {k: v for k, v in spec.items() if k != "formats"} | {
        "formats": {f: {k: v for k, v in x.items() if k != "silver"} for f, x in spec["formats"].items()}}
    for name, call in peer_calls(names, spec):
        log.info("peer %s on %s%s", name, call["format"],
                 f" at parallelism {call['parallelism']}" if "parallelism" in call else "")
        res = check_peer_rows(run_peer(name, call, sampler), call)
        res.setdefault("format", call["format"])
        if "parallelism" in call:
            res.setdefault("parallelism", call["parallelism"])
            res.setdefault("parallelism_role", call["parallelism_role"])
        results["peers"].append(res)
    not_called = [n for n in names if not any(p.get("name") == n for p in results["peers"])]
    for name in not_called:
        results["peers"].append({"name": name, "status": "not run", "reason": "none of its formats was measured"})
    results["peer_ratios"] = report.peer_ratios(results)
