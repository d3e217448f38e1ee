"""The PyFlink peer's Flink side: runs in ``.venv-flink`` as ``python flink_job.py --job JOB.json --out OUT.json``.

Started by :func:`bench.peers.flink.run` (the project venv), which writes the job description
(``JOB.json``: the format, the tables with their planned columns, the parallelism) and reads
back the figures this process writes (``OUT.json``) and each table's final rows, handed over as
one Arrow IPC file per table (``<out_dir>/<table>.arrow``). How the job works, and what each
figure means, is in :mod:`bench.peers.flink`'s docstring. This file imports nothing of the
project (the child runs it alone, without the project's ``PYTHONPATH``) and nothing at module
level imports pyflink.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _source_ddl(name: str, t: dict, fmt: str, path: str, normalize: bool) -> str:
    cols = [f"  {_q(c['name'])} {c['declared']}" for c in t["columns"]]
    if t["primary_key"]:
        cols.append(f"  PRIMARY KEY ({', '.join(_q(k) for k in t['primary_key'])}) NOT ENFORCED")
    opts = {"connector": "filesystem", "path": path, "format": fmt}
    if fmt == "debezium-json":
        opts["debezium-json.schema-include"] = "true" if t["schema_include"] else "false"
        if t["tombstones"]:
            opts["debezium-json.ignore-parse-errors"] = "true"
    elif t["other_ddl"]:
        opts["canal-json.ignore-parse-errors"] = "true"
    with_ = ",\n".join(f"  '{k}' = '{v}'" for k, v in opts.items())
    return f"CREATE TEMPORARY TABLE {_q(name)} (\n" + ",\n".join(cols) + f"\n) WITH (\n{with_}\n)"


def _select(name: str, t: dict) -> str:
    return f"SELECT {', '.join(c['expr'] for c in t['columns'])} FROM {_q(name)}"


def _slot(table: str, column: str) -> str:
    return f"{table}__{column}"


def _union_select(tables: dict) -> str:
    """One query over all tables (one Flink job): ``UNION ALL`` of each table's rows in its own
    column slots (``<table>__<column>``, NULL in the other tables' slots) plus a table tag."""
    slots = [(name, c) for name, t in tables.items() for c in t["columns"]]
    branches = []
    for name, t in tables.items():
        inner = _select(name, t)
        cols = [f"'{name}' AS `__table`"]
        for owner, c in slots:
            slot = _q(_slot(owner, c["name"]))
            cols.append(f"{_q(c['name'])} AS {slot}" if owner == name else f"CAST(NULL AS {c['result']}) AS {slot}")
        branches.append(f"SELECT {', '.join(cols)} FROM ({inner})")
    return "\nUNION ALL\n".join(branches)


def _split_union(wide, tables: dict) -> dict:
    """Per-table Arrow tables from the union query's result."""
    import pyarrow.compute as pc

    out = {}
    tag = wide.column("__table")
    for name, t in tables.items():
        part = wide.filter(pc.equal(tag, name))
        out[name] = part.select([_slot(name, c["name"]) for c in t["columns"]]).rename_columns(
            [c["name"] for c in t["columns"]])
    return out


def _hand_off(table, path: Path) -> dict:
    """Write a table's final rows to an Arrow IPC file for the parent, outside the timed span:
    ``{"rows_path", "handoff_write_s"}``."""
    import pyarrow as pa

    t0 = time.perf_counter()
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return {"rows_path": str(path), "handoff_write_s": time.perf_counter() - t0}


def _collect_arrow(t_env, table):
    """The final rows of a (changelog) table as a pyarrow Table: ``Table.to_pandas`` without pandas."""
    import pyarrow as pa
    import pytz
    from pyflink.java_gateway import get_gateway
    from pyflink.table.serializers import ArrowSerializer
    from pyflink.table.types import create_arrow_schema

    t_env._before_execute()
    gateway = get_gateway()
    j_table = table._j_table
    max_batch = j_table.getTableEnvironment().getConfig().get(
        gateway.jvm.org.apache.flink.python.PythonOptions.MAX_ARROW_BATCH_SIZE)
    schema = table.get_schema()
    arrow_schema = create_arrow_schema(schema.get_field_names(), schema.get_field_data_types())
    batches = gateway.jvm.org.apache.flink.table.runtime.arrow.ArrowUtils.collectAsPandasDataFrame(j_table, max_batch)
    if not batches.hasNext():
        return pa.Table.from_batches([], arrow_schema)
    serializer = ArrowSerializer(arrow_schema, schema.to_row_data_type(), pytz.timezone("UTC"))
    return pa.Table.from_batches(serializer.load_from_iterator(batches))


def _decode_decimals(table, columns: list[dict]):
    """Turn BYTES columns holding Connect Decimal unscaled values into decimal128 columns."""
    from decimal import Decimal

    import pyarrow as pa

    for c in columns:
        if not c["post"]:
            continue
        _, p, s = c["post"]
        i = table.schema.get_field_index(c["name"])
        values = [None if b is None else Decimal(int.from_bytes(b, "big", signed=True)).scaleb(-s)
                  for b in table.column(i).to_pylist()]
        table = table.set_column(i, pa.field(c["name"], pa.decimal128(p, s)), pa.array(values, pa.decimal128(p, s)))
    return table


def _start_session_cluster(slots: int):
    """Start a Flink MiniCluster inside the gateway JVM and settings that submit jobs to it.

    PyFlink's default local execution starts and stops a new MiniCluster for every job (about
    1-4 s each here, mostly loading the RPC system's classes again); a session cluster started
    once, as a deployment would have, leaves only the job in the timed part."""
    from pyflink.common import Configuration
    from pyflink.java_gateway import get_gateway
    from pyflink.table import EnvironmentSettings

    jvm = get_gateway().jvm
    jconf = jvm.org.apache.flink.configuration.Configuration()
    for k, v in (("rest.bind-address", "127.0.0.1"), ("rest.address", "127.0.0.1"), ("rest.bind-port", "0")):
        jconf.setString(k, v)
    mc_conf = (jvm.org.apache.flink.runtime.minicluster.MiniClusterConfiguration.Builder()
               .setConfiguration(jconf).setNumTaskManagers(1).setNumSlotsPerTaskManager(slots).build())
    cluster = jvm.org.apache.flink.runtime.minicluster.MiniCluster(mc_conf)
    cluster.start()
    uri = cluster.getRestAddress().get()
    conf = Configuration()
    conf.set_string("execution.target", "remote")
    conf.set_string("rest.address", uri.getHost())
    conf.set_string("rest.port", str(uri.getPort()))
    return cluster, EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf).build()


def _last_job_times(cluster) -> Optional[dict]:
    """Flink's own timestamps of the most recent job on the session cluster: seconds from
    submission (CREATED) to RUNNING and to FINISHED; and each operator chain (job vertex) of the
    job with the parallelism it ran at (``vertices``: ``[{"name", "parallelism"}]``)."""
    from pyflink.java_gateway import get_gateway

    if cluster is None:
        return None
    jvm = get_gateway().jvm
    jobs = list(cluster.listJobs().get())
    if not jobs:
        return None
    last = max(jobs, key=lambda j: j.getStartTime())
    graph = cluster.getExecutionGraph(last.getJobId()).get()
    status = jvm.org.apache.flink.api.common.JobStatus
    created, running, finished = (graph.getStatusTimestamp(getattr(status, s)) for s in ("CREATED", "RUNNING", "FINISHED"))
    vertices = []
    it = graph.getVerticesTopologically().iterator()
    while it.hasNext():
        v = it.next()
        vertices.append({"name": v.getName(), "parallelism": v.getParallelism()})
    return {"job_id": last.getJobId().toString(), "state": graph.getState().toString(),
            "created_ms": created, "finished_ms": finished,
            "to_running_s": (running - created) / 1000 if running else None,
            "duration_s": (finished - created) / 1000 if finished else None,
            "vertices": vertices}


def _client_side(times: Optional[dict], started: float, returned: float) -> Optional[dict]:
    """Add the client's share around a job: optimizing, translating and submitting before Flink
    created the job, and fetching the last results after it finished."""
    if times and times.get("created_ms") and times.get("finished_ms"):
        times["before_job_s"] = times["created_ms"] / 1000 - started
        times["after_job_s"] = returned - times["finished_ms"] / 1000
    return times


def _job(job: dict) -> dict:
    t_start = time.perf_counter()
    from pyflink.table import EnvironmentSettings, TableEnvironment

    fmt, out_dir = job["format"], Path(job["out_dir"])
    cluster = None
    if job.get("session_cluster", True):
        cluster, settings = _start_session_cluster(max(2, job["parallelism"]))
    else:
        settings = EnvironmentSettings.in_streaming_mode()
    t_env = TableEnvironment.create(settings)
    conf = t_env.get_config()
    conf.set("parallelism.default", str(job["parallelism"]))
    conf.set("table.local-time-zone", "UTC")
    conf.set("table.exec.source.cdc-events-duplicate", "true" if job["normalize"] else "false")
    conf.set("table.exec.resource.default-parallelism", str(job["parallelism"]))
    startup = time.perf_counter() - t_start
    try:
        from importlib.metadata import version

        flink_version = version("apache-flink")
    except Exception:  # noqa: BLE001
        flink_version = None

    warmup = 0.0
    if job["warmup"]:
        t0 = time.perf_counter()
        name, t = next(iter(job["tables"].items()))
        sample = out_dir / "warmup.jsonl"
        with open(t["path"], "rb") as src, open(sample, "wb") as dst:
            for i, line in enumerate(src):
                if i >= 200:
                    break
                dst.write(line)
        t_env.execute_sql(_source_ddl("warmup_src", t, fmt, str(sample), job["normalize"]))
        _decode_decimals(_collect_arrow(t_env, t_env.sql_query(_select("warmup_src", t))), t["columns"])
        t_env.execute_sql("DROP TEMPORARY TABLE warmup_src")
        warmup = time.perf_counter() - t0

    figures: dict[str, dict] = {}
    plans: dict[str, str] = {}
    if job.get("single_job", True):
        t0 = time.perf_counter()
        for name, t in job["tables"].items():
            t_env.execute_sql(_source_ddl(name, t, fmt, t["path"], job["normalize"]))
        query = t_env.sql_query(_union_select(job["tables"]))
        t1, e1 = time.perf_counter(), time.time()
        wide = _collect_arrow(t_env, query)
        t2, e2 = time.perf_counter(), time.time()
        flink_jobs = [_last_job_times(cluster)]
        _client_side(flink_jobs[0], e1, e2)
        results = _split_union(wide, job["tables"])
        t3 = time.perf_counter()
        for name, t in job["tables"].items():
            results[name] = _decode_decimals(results[name], t["columns"])
        t4 = time.perf_counter()
        plans["all tables"] = query.explain()
        for name, t in job["tables"].items():
            figures[name] = {"rows": results[name].num_rows, "events": t["events"],
                             **_hand_off(results[name], out_dir / f"{name}.arrow")}
        timing = {"plan_s": t1 - t0, "collect_s": t2 - t1, "split_s": t3 - t2, "decode_s": t4 - t3, "wall_s": t4 - t0}
    else:
        flink_jobs = []
        for name, t in job["tables"].items():
            t0 = time.perf_counter()
            t_env.execute_sql(_source_ddl(name, t, fmt, t["path"], job["normalize"]))
            query = t_env.sql_query(_select(name, t))
            t1, e1 = time.perf_counter(), time.time()
            rows = _collect_arrow(t_env, query)
            t2, e2 = time.perf_counter(), time.time()
            flink_jobs.append(_client_side(_last_job_times(cluster), e1, e2))
            rows = _decode_decimals(rows, t["columns"])
            t3 = time.perf_counter()
            figures[name] = {"rows": rows.num_rows, "events": t["events"], "plan_s": t1 - t0, "collect_s": t2 - t1,
                             "decode_s": t3 - t2, "job_s": t3 - t0, **_hand_off(rows, out_dir / f"{name}.arrow")}
            plans[name] = query.explain()
        timing = {k: sum(f[k] for f in figures.values()) for k in ("plan_s", "collect_s", "decode_s")}
        timing["wall_s"] = sum(f["job_s"] for f in figures.values())
    if cluster is not None:
        cluster.close()
    (out_dir / "plans.txt").write_text("\n\n".join(f"-- {n}\n{p}" for n, p in plans.items()))
    flink_jobs = [j for j in flink_jobs if j]
    if flink_jobs and all(j["duration_s"] is not None for j in flink_jobs):
        timing["flink_job_s"] = sum(j["duration_s"] for j in flink_jobs)
    return {"flink_version": flink_version, "startup_s": startup, "warmup_s": warmup, **timing, "flink_jobs": flink_jobs,
            "single_job": bool(job.get("single_job", True)), "tables": figures}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", required=True, help="job file written by bench.peers.flink.run")
    ap.add_argument("--out", required=True, help="where the figures go (JSON)")
    args = ap.parse_args(argv)
    res = _job(json.loads(Path(args.job).read_text()))
    Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
