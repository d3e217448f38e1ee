"""Benchmark peer: PyFlink 2.3 materializing the final tables from Debezium / Canal JSON messages.

PyFlink's pins conflict with the project's, so the Flink job runs in its own venv
(``.venv-flink`` at the repo root, from ``bench/requirements-flink.txt``). Three modules:

- this one, imported in the project venv: :func:`run` makes the peer's Iceberg tables, launches
  ``.venv-flink/bin/python bench/peers/flink_job.py`` with a job description, samples the RSS of
  that process tree (Python + the JVM it starts) with psutil, reads back its figures (JSON),
  then writes the final rows it handed over (one Arrow IPC file per table) into the Iceberg
  tables, timed, and reads the tables back for the benchmark's check;
- :mod:`bench.peers.flink_job`: the Flink job itself (nothing at module level imports pyflink);
- :mod:`bench.peers.iceberg_sink`: the Iceberg tables (pyiceberg, in this process).

Parallelism: the job runs at ``input_spec["parallelism"]`` (default 2, the benchmark's two cores,
as Spark's ``local[2]`` on our side; the harness also runs it at 1 beside it). Every operator
runs at it (``parallelism.default``, ``table.exec.resource.default-parallelism``) except the
collect sink, which Flink always runs at 1; ``flink_jobs[].vertices`` gives each operator
chain's parallelism as Flink ran it.

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
- The final rows are then written into one Apache Iceberg table per source table with pyiceberg
  (:mod:`bench.peers.iceberg_sink`: a SQLite ``SqlCatalog`` at ``<work_dir>/catalog.db``, the
  warehouse at ``<work_dir>/warehouse``, namespace ``<format>_p<parallelism>``, e.g.
  ``debezium_json_p2.customers``), so that the peer, like our pipeline, leaves a table behind.
  pyiceberg does not install in ``.venv-flink`` (its pyarrow extra needs pyarrow >= 18, the Flink
  lock holds 16.1), so **the write runs in the parent process** (the project venv) right after
  the Flink process returns, timed, and its seconds (``table_write_s``: reading the hand-off
  files, the cast to the table's schema, the Parquet data files and the commit) are added to the
  peer's ``wall_s``. The tables are made before the Flink process starts, not timed.
- The rows the benchmark checks against the source (``rows``) are read back from those Iceberg
  tables with a pyiceberg scan, not from the hand-off files.

Value conversions (documented limits of Flink's JSON formats, handled here):

- debezium-json ignores the Connect schema even with ``debezium-json.schema-include=true``
  (that option only unwraps ``payload``). So:
  * ``org.apache.kafka.connect.data.Decimal`` (Base64 of the unscaled two's complement): Flink
    cannot read it as DECIMAL (``NumberFormatException``); the column is declared BYTES (Jackson
    decodes the Base64) and the unscaled bytes are turned into decimals in Python after
    collection (timed as ``decode_s``, included in ``flink_wall_s``).
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

Figures (seconds unless named otherwise):

- ``wall_s``: the peer's timed span, ``flink_wall_s + table_write_s``. ``flink_wall_s``: the
  timed Flink work, client included: CREATE TABLE, planning, submission, the job, fetching and
  materializing the result, splitting and decimal decoding. It follows a warm-up job over the
  first 200 lines of the first table (class loading, JIT: ``warmup_s``). ``table_write_s``: the
  Iceberg write in the parent (above; per table under ``table.tables``). The hand-off between
  them (the Flink process writing its Arrow files, ``tables.<t>.handoff_write_s``, and exiting)
  is not timed. ``events_per_s`` = events / ``wall_s``.
- ``breakdown_s.flink_job_s``: the job's own duration as Flink records it (CREATED to FINISHED);
  ``flink_job_events_per_s`` = events / that. ``flink_jobs[].before_job_s`` is the client's
  optimizing, translating and submitting; ``after_job_s`` the fetching of the last results.
- ``startup_s``: PyFlink import, gateway JVM start, MiniCluster start, TableEnvironment.
- ``process_wall_s``: the whole subprocess, from launch to exit (JVM shutdown included).
- ``peak_rss_bytes``: the highest summed RSS of the subprocess tree (Python + JVM), sampled
  every 50 ms by the caller; the table write's memory, in the caller's process, is in the
  harness's figures (``harness``), not here.

Each call's job files go to ``<work_dir>/<format>-p<parallelism>/``: the job description, the
figures, the hand-off files, the process's output (``flink.log``), the JVM's log (``flink-log/``,
``FLINK_LOG_DIR``) and the plans of the timed queries (``plans.txt``).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

PEER = "pyflink-2.3"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = REPO_ROOT / ".venv-flink" / "bin" / "python"
FORMATS = ("debezium-json", "canal-json")
DEFAULT_PARALLELISM = 2  # the benchmark's cores: Spark runs local[2] on our side
JOB_SCRIPT = Path(__file__).resolve().with_name("flink_job.py")

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
    """Run the Flink peer on ``input_spec``, write its final rows into Iceberg tables, and return
    its figures and those tables' rows.

    ``input_spec``::

        {"format": "debezium-json" | "canal-json",
         "tables": {name: {"path": ".../name.jsonl", "columns": {col: type}, "primary_key": [...]}},
         # optional:
         "events": int,              # declared event count: reported as "events_declared"; "events"
                                     # is always counted from the files (row changes, tombstones out)
         "parallelism": 2,           # Flink default parallelism (every operator but the collect sink)
         "parallelism_role": str,    # echoed: "headline" or "continuity" (set by the harness)
         "warmup": True,             # warm-up job before the timed ones
         "normalize": True,          # table.exec.source.cdc-events-duplicate (see module doc)
         "single_job": True,         # all tables in one Flink job (UNION ALL), else one job per table
         "session_cluster": True,    # jobs go to a MiniCluster started once (else one per job)
         "decimal_handling": "precise" | "string" | "double",   # Debezium decimal.handling.mode
         "timestamp_unit": "ms" | "us",                         # Debezium Timestamp / MicroTimestamp
         "jvm_args": "-Xmx2g",       # passed as JVM_ARGS to the gateway JVM
         "work_dir": path,           # the Iceberg catalog and warehouse; job files in <format>-p<N>/
         "namespace": str,           # of the Iceberg tables (default "<format>_p<parallelism>")
         "table_buckets": 0,         # 0: unpartitioned tables; n: bucket(n, first key column)
         "python": path,             # defaults to <repo>/.venv-flink/bin/python
         "timeout_s": 3600,
         "return_rows": True}        # False: no "rows" (the tables stay in the catalog)

    Returns ``{"peer", "format", "parallelism", "parallelism_role", "events", "messages",
    "wall_s", "flink_wall_s", "table_write_s", "leaves_table": True, "table_write_in",
    "events_per_s", "flink_job_events_per_s", "breakdown_s", "flink_jobs", "startup_s",
    "warmup_s", "process_wall_s", "peak_rss_bytes", "table": {"catalog", "namespace",
    "identifiers", "partitioning", "format_version", "setup_s", "pyiceberg_version", "tables"},
    "tables": {per-table figures}, "rows": {table: [dict, ...]}, "rows_from", "handoff_paths",
    "notes", ...}``: seconds, bytes and events per second as named; the figures are explained in
    the module docstring. ``rows`` are read from the Iceberg tables (pyiceberg scan), as Python
    values: int, float, str, bool, Decimal, bytes, ``datetime.date``, ``datetime.datetime``
    (naive for ``timestamp_ntz`` columns, UTC-aware for ``timestamp``).
    """
    from bench.peers import iceberg_sink

    fmt = input_spec["format"]
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} is not one of {FORMATS}")
    tables = input_spec["tables"]
    if not tables:
        raise ValueError("no tables")
    python = Path(input_spec.get("python") or os.environ.get("FLINK_PEER_PYTHON") or DEFAULT_PYTHON)
    if not python.exists():
        raise FileNotFoundError(f"{python} is missing: create .venv-flink from bench/requirements-flink.txt")
    parallelism = int(input_spec.get("parallelism", DEFAULT_PARALLELISM))
    base = Path(input_spec.get("work_dir") or tempfile.mkdtemp(prefix="flink-peer-")).resolve()
    work = base / f"{fmt}-p{parallelism}"
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
    job = {"format": fmt, "tables": job_tables, "parallelism": parallelism,
           "warmup": bool(input_spec.get("warmup", True)), "normalize": bool(input_spec.get("normalize", True)),
           "single_job": bool(input_spec.get("single_job", True)),
           "session_cluster": bool(input_spec.get("session_cluster", True)),
           "out_dir": str(work)}
    job_path, out_path, log_path = work / "job.json", work / "result.json", work / "flink.log"
    job_path.write_text(json.dumps(job, indent=1))
    if out_path.exists():
        out_path.unlink()

    # the Iceberg tables, made before the job as a deployment has them (not timed)
    catalog = iceberg_sink.open_catalog(base)
    namespace = input_spec.get("namespace") or f"{fmt.replace('-', '_')}_p{parallelism}"
    made = iceberg_sink.create_tables(catalog, namespace, tables, int(input_spec.get("table_buckets", 0)))

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["FLINK_LOG_DIR"] = str(work / "flink-log")
    if input_spec.get("jvm_args"):
        env["JVM_ARGS"] = input_spec["jvm_args"]
    cmd = [str(python), str(JOB_SCRIPT), "--job", str(job_path), "--out", str(out_path)]
    from bench.peers import run_child

    rc, process_wall, peak = run_child(cmd, log_path, work, float(input_spec.get("timeout_s", 3600)), env=env)
    if rc != 0 or not out_path.exists():
        tail = log_path.read_text(errors="replace")[-4000:]
        raise RuntimeError(f"Flink peer failed (exit {rc}); log {log_path}:\n{tail}")
    res = json.loads(out_path.read_text())
    handoff = {t: r["rows_path"] for t, r in res["tables"].items()}

    # the timed table write, right after the Flink process returned
    write = iceberg_sink.write_tables(catalog, made["identifiers"], handoff)

    import pyiceberg

    flink_wall, table_write = res["wall_s"], write["table_write_s"]
    wall = flink_wall + table_write
    out = {
        "peer": PEER, "format": fmt, "parallelism": parallelism,
        "parallelism_role": input_spec.get("parallelism_role"),
        "events": events, "messages": messages, "events_declared": input_spec.get("events"),
        "wall_s": wall, "flink_wall_s": flink_wall, "table_write_s": table_write, "leaves_table": True,
        "table_write_in": f"parent process (project venv, pyiceberg {pyiceberg.__version__}), right after the "
                          "Flink process returned; timed and added to wall_s",
        "events_per_s": events / wall if wall > 0 else None,
        "startup_s": res["startup_s"], "warmup_s": res["warmup_s"], "process_wall_s": process_wall,
        "peak_rss_bytes": peak, "normalize": job["normalize"],
        "single_job": job["single_job"], "session_cluster": job["session_cluster"],
        "flink_job_events_per_s": events / res["flink_job_s"] if res.get("flink_job_s") else None,
        "breakdown_s": {**{k: res[k] for k in ("plan_s", "collect_s", "split_s", "decode_s", "flink_job_s") if k in res},
                        "table_write_s": table_write},
        "flink_jobs": res.get("flink_jobs", []),
        "flink_version": res.get("flink_version"), "tables": res["tables"],
        "table": {"catalog": iceberg_sink.catalog_info(base), "namespace": namespace,
                  "identifiers": made["identifiers"], "partitioning": made["partitioning"], "format_version": 2,
                  "setup_s": made["setup_s"], "pyiceberg_version": pyiceberg.__version__,
                  "tables": write["tables"]},
        "handoff_paths": handoff, "notes": _notes(job_tables), "log": str(log_path),
    }
    if input_spec.get("return_rows", True):
        out["rows"] = iceberg_sink.read_tables(catalog, made["identifiers"])
        out["rows_from"] = "the Iceberg tables (pyiceberg scan of the committed snapshots)"
    return out


def _notes(job_tables: dict) -> list[str]:
    """What the job does to each column that Flink's format does not read as its type."""
    notes = []
    for name, t in job_tables.items():
        for c in t["columns"]:
            if c["post"]:
                notes.append(f"{name}.{c['name']}: Connect Decimal read as BYTES, decoded after collection")
            elif c["declared"] != column_type(c["type"])["flink"]:
                notes.append(f"{name}.{c['name']}: declared {c['declared']}, converted in SQL")
    return notes


def _main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="input_spec JSON file: run the peer and print its figures")
    args = ap.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    spec["return_rows"] = False
    res: Any = run(spec)
    print(json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
