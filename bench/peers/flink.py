"""Benchmark peer: PyFlink 2.3 materializing the final tables from Debezium / Canal JSON messages.

PyFlink's pins conflict with the project's, so the Flink job runs in its own venv
(``.venv-flink`` at the repo root, from ``bench/requirements-flink.txt``). This module has two
roles:

- imported anywhere (the project venv): :func:`run` launches ``.venv-flink/bin/python`` on this
  same file with a job description, samples the RSS of the process tree (Python + the JVM it
  starts) with psutil, and reads back the figures (JSON) and the final rows (Arrow IPC files);
- run as ``.venv-flink/bin/python bench/peers/flink.py --job JOB.json --out OUT.json``: the
  Flink job itself. Nothing at module level imports pyflink.

How the job works (what was found to work with Flink 2.3 and only the bundled jars):

- No Kafka connector jar is reachable, so each table's messages come from a file, one JSON
  message per line, through the bundled ``filesystem`` connector with the ``debezium-json`` or
  ``canal-json`` format. The filesystem source accepts these changelog formats, but only in
  **streaming** mode: batch mode rejects any source that produces more than INSERTs. Without
  ``source.monitor-interval`` the file source is bounded, so the streaming job finishes.
- The source table declares ``PRIMARY KEY (...) NOT ENFORCED`` and the job sets
  ``table.exec.source.cdc-events-duplicate=true``: the planner then adds
  ``DropUpdateBefore -> ChangelogNormalize(key)``, i.e. Flink keeps the current row per key in
  keyed state and emits a consistent changelog from it. This is also needed for correctness with
  canal-json (see below).
- The result is collected with the machinery of ``Table.to_pandas``
  (``ArrowUtils.collectAsPandasDataFrame``), which applies the changelog (+I/-U/+U/-D) inside
  the JVM and returns only the final rows as Arrow batches. We stop at the Arrow table (pandas
  would turn nullable integers into floats). So the final table lives in Flink's keyed state,
  but every changelog row still passes through the collect sink to the client, which applies
  it: Flink has no bundled sink that keeps an upserted table (the upsert-kafka, JDBC, Paimon
  and Iceberg connectors are separate jars, out of reach here).

Value conversions (documented limits of Flink's JSON formats, handled here):

- debezium-json ignores the Connect schema even with ``debezium-json.schema-include=true``
  (that option only unwraps ``payload``). So:
  * ``org.apache.kafka.connect.data.Decimal`` (Base64 of the unscaled two's complement): Flink
    cannot read it as DECIMAL (``NumberFormatException``); the column is declared BYTES (Jackson
    decodes the Base64) and the unscaled bytes are turned into decimals in Python after
    collection (timed as ``decode_s``, included in ``wall_s``).
  * ``io.debezium.time.Timestamp`` (epoch ms) is declared BIGINT and converted in Flink SQL with
    ``CAST(TO_TIMESTAMP_LTZ(x, 3) AS TIMESTAMP(3))`` (session zone UTC);
    ``io.debezium.time.MicroTimestamp`` (``timestamp_unit: "us"``) with ``TO_TIMESTAMP_LTZ(x, 6)``.
  * ``io.debezium.time.Date`` (days since epoch) is declared INT and converted with
    ``TIMESTAMPADD(DAY, x, DATE '1970-01-01')``.
  * binary (Base64 text) reads correctly as BYTES.
  * ``decimal_handling: "string"`` or ``"double"`` (Debezium's other modes) declares DECIMAL
    directly.
- canal-json values are text: DECIMAL, TIMESTAMP(p), DATE, numbers parse directly. Binary
  columns are ISO-8859-1 text in Canal: declared STRING and converted with
  ``ENCODE(x, 'ISO-8859-1')`` (BYTES would Base64-decode the text). Booleans (MySQL tinyint(1),
  ``"1"``/``"0"``) are declared STRING and mapped in SQL (Flink's BOOLEAN reads ``"1"`` as false).
- canal-json in Flink 2.3 rebuilds an UPDATE's before image with ``old.findValue(column)`` over
  the whole ``old`` array: in a multi-row UPDATE message where rows changed different columns,
  a row's -U image gets NULL for a column that only another row changed. Collected as is, the
  changelog does not apply (``Could not remove element ...``). With ``cdc-events-duplicate`` the
  -U images are dropped and ChangelogNormalize retracts from its own state, which is correct.
- canal-json skips DDL messages of type CREATE but fails on any other DDL type (ALTER ...:
  ``Unknown "type" value``), so ``canal-json.ignore-parse-errors=true`` is set when a file has
  such messages; it would also drop corrupt messages silently.
- Debezium tombstones (a delete's null-value follow-up) may be absent, empty lines or the line
  ``null``: the format skips an empty line, but fails on ``null`` (NullPointerException), so
  ``debezium-json.ignore-parse-errors`` is set when a file has ``null`` lines (it would also
  drop corrupt messages silently).

Execution: one session MiniCluster is started inside the gateway JVM and the jobs are submitted
to it (``execution.target=remote``); PyFlink's default would start and stop a MiniCluster for
every job (1-4 s each here). All tables go into one Flink job: a ``UNION ALL`` of the tables'
rows in their own column slots plus a table tag (``single_job``), split again after collection.

Figures:

- ``wall_s``: the timed Flink work, client included: CREATE TABLE, planning, submission, the job,
  fetching and materializing the result, splitting and decimal decoding. It follows a warm-up
  job over the first 200 lines of the first table (class loading, JIT: ``warmup_s``).
  ``events_per_s`` = events / ``wall_s``.
- ``breakdown_s.flink_job_s``: the job's own duration as Flink records it (CREATED to FINISHED);
  ``flink_job_events_per_s`` = events / that. ``flink_jobs[].before_job_s`` is the client's
  optimizing, translating and submitting; ``after_job_s`` the fetching of the last results.
- ``startup_s``: PyFlink import, gateway JVM start, MiniCluster start, TableEnvironment.
- ``process_wall_s``: the whole subprocess, from launch to exit (JVM shutdown included).
- ``peak_rss_bytes``: the highest summed RSS of the subprocess tree (Python + JVM), sampled
  every 50 ms by the caller.

The JVM's log goes to ``<work_dir>/flink-log/`` (``FLINK_LOG_DIR``); the plans of the timed
queries to ``<work_dir>/plans.txt``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

PEER = "pyflink-2.3"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = REPO_ROOT / ".venv-flink" / "bin" / "python"
FORMATS = ("debezium-json", "canal-json")

# ---------------------------------------------------------------------------------------------
# column types (canonical names of cdclake.types or Flink SQL names)

_DECIMAL_RE = re.compile(r"^(?:decimal|numeric|dec)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?$")
_TIMESTAMP_RE = re.compile(r"^timestamp(?:_ltz|_ntz)?\s*(?:\(\s*(\d)\s*\))?(?:\s+with(?:out)?\s+(?:local\s+)?time\s+zone)?$")
_SIMPLE = {
    "boolean": "BOOLEAN", "bool": "BOOLEAN",
    "tinyint": "TINYINT", "smallint": "SMALLINT", "int": "INT", "integer": "INT", "bigint": "BIGINT",
    "float": "FLOAT", "real": "FLOAT", "double": "DOUBLE", "double precision": "DOUBLE",
    "string": "STRING", "text": "STRING",
    "binary": "BYTES", "bytes": "BYTES", "varbinary": "BYTES",
    "date": "DATE",
}


def column_type(t: str) -> dict:
    """Parse a canonical or Flink type name into ``{"kind", "flink", "precision", "scale"}``.

    ``kind`` is one of boolean, int (any integer width), float, decimal, string, binary, date,
    timestamp. ``VARCHAR(n)``/``CHAR(n)``/``VARBINARY(n)``/``BINARY(n)`` are accepted.
    """
    s = re.sub(r"\s+not\s+null$", "", t.strip().lower())
    s = re.sub(r"\s+", " ", s)
    m = _DECIMAL_RE.match(s)
    if m:
        p = int(m.group(1)) if m.group(1) else 10
        sc = int(m.group(2)) if m.group(2) else 0
        return {"kind": "decimal", "flink": f"DECIMAL({p}, {sc})", "precision": p, "scale": sc}
    m = _TIMESTAMP_RE.match(s)
    if m:
        p = int(m.group(1)) if m.group(1) else 6  # canonical timestamp is microseconds
        return {"kind": "timestamp", "flink": f"TIMESTAMP({p})", "precision": p, "scale": None}
    base = re.sub(r"\s*\(\s*\d+\s*\)$", "", s)
    if base in ("varchar", "char", "character varying"):
        base = "string"
    if base == "binary" and s != "binary":
        base = "varbinary"
    flink = _SIMPLE.get(base)
    if flink is None:
        raise ValueError(f"unsupported column type {t!r}")
    kind = {"BOOLEAN": "boolean", "TINYINT": "int", "SMALLINT": "int", "INT": "int", "BIGINT": "int",
            "FLOAT": "float", "DOUBLE": "float", "STRING": "string", "BYTES": "binary", "DATE": "date"}[flink]
    return {"kind": kind, "flink": flink, "precision": None, "scale": None}


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def plan_columns(fmt: str, columns: dict[str, str], decimal_handling: str = "precise",
                 timestamp_unit: str = "ms") -> list[dict]:
    """Per column: the type declared on the Flink source, the SELECT expression and a post-step.

    ``result`` is the Flink type after the expression; ``post`` is None or
    ``("decimal", precision, scale)`` (unscaled bytes decoded after collection).
    """
    out = []
    for name, t in columns.items():
        ct = column_type(t)
        kind, q = ct["kind"], _q(name)
        declared, expr, post, result = ct["flink"], q, None, ct["flink"]
        if fmt == "debezium-json":
            if kind == "decimal" and decimal_handling == "precise":
                declared, post, result = "BYTES", ("decimal", ct["precision"], ct["scale"]), "BYTES"
            elif kind == "timestamp":
                declared = "BIGINT"
                digits = {"ms": 3, "us": 6}[timestamp_unit]
                p = min(ct["precision"], digits)
                expr = f"CAST(TO_TIMESTAMP_LTZ({q}, {digits}) AS TIMESTAMP({p}))"
                result = f"TIMESTAMP({p})"
            elif kind == "date":
                declared, expr = "INT", f"TIMESTAMPADD(DAY, {q}, DATE '1970-01-01')"
        elif fmt == "canal-json":
            if kind == "binary":
                declared, expr = "STRING", f"ENCODE({q}, 'ISO-8859-1')"
            elif kind == "boolean":
                declared = "STRING"
                expr = (f"CASE WHEN {q} IS NULL THEN CAST(NULL AS BOOLEAN) "
                        f"WHEN LOWER(TRIM({q})) IN ('1', 'true') THEN TRUE ELSE FALSE END")
        else:
            raise ValueError(f"unsupported format {fmt!r} (one of {FORMATS})")
        out.append({"name": name, "kind": kind, "type": t, "declared": declared, "result": result,
                    "expr": expr if expr == q else f"{expr} AS {q}", "post": post})
    return out


# ---------------------------------------------------------------------------------------------
# input inspection (outside the timed part)


def count_events(fmt: str, path: str) -> dict:
    """Row changes and messages in one JSONL file: Debezium lines that are not tombstones, Canal
    DML messages' ``data`` rows. Also whether the Debezium messages carry a schema envelope, and
    how many tombstone lines (``null``), empty lines and Canal messages of a type Flink's
    canal-json rejects (DDL other than CREATE) there are."""
    events = messages = tombstones = empty = other_ddl = 0
    schema_include: Optional[bool] = None
    with open(path, "rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                empty += 1
                continue
            if line == b"null":
                tombstones += 1
                continue
            messages += 1
            if fmt == "debezium-json":
                if schema_include is None:
                    obj = json.loads(line)
                    schema_include = isinstance(obj, dict) and "payload" in obj and "schema" in obj
                events += 1
            else:
                obj = json.loads(line)
                if not obj.get("isDdl") and obj.get("type") in ("INSERT", "UPDATE", "DELETE"):
                    events += len(obj.get("data") or ())
                elif obj.get("type") != "CREATE":
                    other_ddl += 1
    return {"events": events, "messages": messages, "tombstones": tombstones, "empty_lines": empty,
            "other_ddl": other_ddl, "schema_include": bool(schema_include)}


# ---------------------------------------------------------------------------------------------
# the parent side


def run(input_spec: dict) -> dict:
    """Run the Flink peer on ``input_spec`` and return its figures and final rows.

    ``input_spec``::

        {"format": "debezium-json" | "canal-json",
         "tables": {name: {"path": ".../name.jsonl", "columns": {col: type}, "primary_key": [...]}},
         # optional:
         "events": int,              # declared event count: reported as "events_declared"; "events"
                                     # is always counted from the files (row changes, tombstones out)
         "parallelism": 1,           # Flink default parallelism
         "warmup": True,             # warm-up job before the timed ones
         "normalize": True,          # table.exec.source.cdc-events-duplicate (see module doc)
         "single_job": True,         # all tables in one Flink job (UNION ALL), else one job per table
         "session_cluster": True,    # jobs go to a MiniCluster started once (else one per job)
         "decimal_handling": "precise" | "string" | "double",   # Debezium decimal.handling.mode
         "timestamp_unit": "ms" | "us",                         # Debezium Timestamp / MicroTimestamp
         "jvm_args": "-Xmx2g",       # passed as JVM_ARGS to the gateway JVM
         "work_dir": path,           # job file, log, figures and Arrow rows go here
         "python": path,             # defaults to <repo>/.venv-flink/bin/python
         "timeout_s": 3600,
         "return_rows": True}        # False: only "rows_paths"

    Returns ``{"peer", "format", "events", "messages", "wall_s", "events_per_s",
    "flink_job_events_per_s", "breakdown_s", "flink_jobs", "startup_s", "warmup_s",
    "process_wall_s", "peak_rss_bytes", "parallelism", "tables": {per-table figures},
    "rows": {table: [dict, ...]}, "rows_paths": {table: arrow file}, "notes", ...}`` (figures
    explained in the module docstring).
    Row values are Python values: int, float, str, bool, Decimal, bytes, ``datetime.date`` and
    naive ``datetime.datetime`` (UTC).
    """
    fmt = input_spec["format"]
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {FORMATS}")
    tables = input_spec["tables"]
    if not tables:
        raise ValueError("no tables")
    python = Path(input_spec.get("python") or os.environ.get("FLINK_PEER_PYTHON") or DEFAULT_PYTHON)
    if not python.exists():
        raise FileNotFoundError(f"{python} is missing: create .venv-flink from bench/requirements-flink.txt")
    work = Path(input_spec.get("work_dir") or tempfile.mkdtemp(prefix="flink-peer-"))
    work.mkdir(parents=True, exist_ok=True)

    job_tables = {}
    events = messages = 0
    for name, t in tables.items():
        path = str(Path(t["path"]).resolve())
        info = count_events(fmt, path)
        events += info["events"]
        messages += info["messages"]
        job_tables[name] = {
            "path": path, "primary_key": list(t["primary_key"]),
            "columns": plan_columns(fmt, dict(t["columns"]), input_spec.get("decimal_handling", "precise"),
                                    input_spec.get("timestamp_unit", "ms")),
            "schema_include": info["schema_include"], "tombstones": info["tombstones"],
            "other_ddl": info["other_ddl"], "events": info["events"],
        }
    job = {"format": fmt, "tables": job_tables, "parallelism": int(input_spec.get("parallelism", 1)),
           "warmup": bool(input_spec.get("warmup", True)), "normalize": bool(input_spec.get("normalize", True)),
           "single_job": bool(input_spec.get("single_job", True)),
           "session_cluster": bool(input_spec.get("session_cluster", True)),
           "out_dir": str(work)}
    job_path, out_path, log_path = work / "job.json", work / "result.json", work / "flink.log"
    job_path.write_text(json.dumps(job, indent=1))
    if out_path.exists():
        out_path.unlink()

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["FLINK_LOG_DIR"] = str(work / "flink-log")
    if input_spec.get("jvm_args"):
        env["JVM_ARGS"] = input_spec["jvm_args"]
    cmd = [str(python), str(Path(__file__).resolve()), "--job", str(job_path), "--out", str(out_path)]
    from bench.peers import run_child  # parent side only: the job process runs this file alone

    rc, process_wall, peak = run_child(cmd, log_path, work, float(input_spec.get("timeout_s", 3600)), env=env)
    if rc != 0 or not out_path.exists():
        tail = log_path.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"Flink peer failed (exit {rc}); log {log_path}:\n{tail}")
    res = json.loads(out_path.read_text())

    wall = res["wall_s"]
    out = {
        "peer": PEER, "format": fmt, "events": events, "messages": messages,
        "events_declared": input_spec.get("events"),
        "wall_s": wall, "events_per_s": events / wall if wall > 0 else None,
        "startup_s": res["startup_s"], "warmup_s": res["warmup_s"], "process_wall_s": process_wall,
        "peak_rss_bytes": peak, "parallelism": job["parallelism"], "normalize": job["normalize"],
        "single_job": job["single_job"], "session_cluster": job["session_cluster"],
        "flink_job_events_per_s": events / res["flink_job_s"] if res.get("flink_job_s") else None,
        "breakdown_s": {k: res[k] for k in ("plan_s", "collect_s", "split_s", "decode_s", "flink_job_s") if k in res},
        "flink_jobs": res.get("flink_jobs", []),
        "flink_version": res.get("flink_version"), "tables": res["tables"],
        "rows_paths": {t: r["rows_path"] for t, r in res["tables"].items()},
        "notes": res.get("notes", []), "log": str(log_path),
    }
    if input_spec.get("return_rows", True):
        out["rows"] = {t: read_rows(p) for t, p in out["rows_paths"].items()}
    return out


def read_rows(path: str) -> list[dict]:
    """Rows of an Arrow IPC file written by the job, as Python values."""
    import pyarrow as pa

    with pa.memory_map(path) as src:
        table = pa.ipc.open_file(src).read_all()
    return table.to_pylist()


# ---------------------------------------------------------------------------------------------
# the Flink side (runs in .venv-flink)


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


def _write_arrow(table, path: Path) -> str:
    import pyarrow as pa

    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return str(path)


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
    submission (CREATED) to RUNNING and to FINISHED."""
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
    return {"job_id": last.getJobId().toString(), "state": graph.getState().toString(),
            "created_ms": created, "finished_ms": finished,
            "to_running_s": (running - created) / 1000 if running else None,
            "duration_s": (finished - created) / 1000 if finished else None}


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
                             "rows_path": _write_arrow(results[name], out_dir / f"{name}.arrow")}
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
                             "decode_s": t3 - t2, "job_s": t3 - t0,
                             "rows_path": _write_arrow(rows, out_dir / f"{name}.arrow")}
            plans[name] = query.explain()
        timing = {k: sum(f[k] for f in figures.values()) for k in ("plan_s", "collect_s", "decode_s")}
        timing["wall_s"] = sum(f["job_s"] for f in figures.values())
    if cluster is not None:
        cluster.close()
    (out_dir / "plans.txt").write_text("\n\n".join(f"-- {n}\n{p}" for n, p in plans.items()))
    notes = []
    for name, t in job["tables"].items():
        for c in t["columns"]:
            if c["post"]:
                notes.append(f"{name}.{c['name']}: Connect Decimal read as BYTES, decoded after collection")
            elif c["declared"] != column_type(c["type"])["flink"]:
                notes.append(f"{name}.{c['name']}: declared {c['declared']}, converted in SQL")
    flink_jobs = [j for j in flink_jobs if j]
    if flink_jobs and all(j["duration_s"] is not None for j in flink_jobs):
        timing["flink_job_s"] = sum(j["duration_s"] for j in flink_jobs)
    return {"flink_version": flink_version, "startup_s": startup, "warmup_s": warmup, **timing, "flink_jobs": flink_jobs,
            "single_job": bool(job.get("single_job", True)), "tables": figures, "notes": notes}


def _main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", help="job file (Flink side, inside .venv-flink)")
    ap.add_argument("--out", help="where the Flink side writes its figures (JSON)")
    ap.add_argument("--spec", help="input_spec JSON file: run the peer and print its figures (any venv)")
    args = ap.parse_args(argv)
    if args.job:
        res = _job(json.loads(Path(args.job).read_text()))
        Path(args.out).write_text(json.dumps(res, indent=1))
        return 0
    if args.spec:
        spec = json.loads(Path(args.spec).read_text())
        spec["return_rows"] = False
        res: Any = run(spec)
        print(json.dumps(res, indent=1, default=str))
        return 0
    ap.error("one of --job or --spec is required")
    return 2


if __name__ == "__main__":
    sys.exit(_main())
