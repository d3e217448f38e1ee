"""Airflow on the embedded stack: metadata DB, UI/REST server, scheduler and DAG processor on loopback.

``python -m cdclake.airflow_local start`` (what ``make airflow`` runs) starts
``airflow api-server -H 127.0.0.1 -p 8080``, ``airflow scheduler`` and ``airflow dag-processor``
with :func:`cdclake.embedded.airflow_env`, waits until the UI answers and prints how to log in;
``stop`` ends them; ``dags-test DAG_ID START END`` runs ``airflow dags test`` for a window.
Logs: ``$CDC_STATE_DIR/airflow/*.log``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Optional

from cdclake.cluster import master_url
from cdclake.embedded import airflow_env

PROCESSES = {
    "api-server": ["api-server", "-H", "127.0.0.1", "-p", "8080"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
}


def airflow_bin() -> str:
    return str(Path(sys.executable).parent / "airflow")


def env() -> dict[str, str]:
    """The environment of the Airflow processes: :func:`cdclake.embedded.airflow_env`, with
    ``spark_default`` on the standalone cluster of ``make cluster`` while it runs
    (:func:`cdclake.cluster.master_url`; client deploy mode)."""
    out = {**os.environ, **airflow_env()}
    master = master_url()
    if master:
        out["AIRFLOW_CONN_SPARK_DEFAULT"] = spark_connection(master)
    return out


def spark_connection(master: str, deploy_mode: str = "client") -> str:
    """Airflow's ``spark_default`` connection (JSON, for ``AIRFLOW_CONN_SPARK_DEFAULT``) to ``master``."""
    return json.dumps({"conn_type": "spark", "host": master, "extra": {"deploy-mode": deploy_mode}})


def migrate() -> None:
    """Create or upgrade Airflow's metadata database (SQLite in ``AIRFLOW_HOME``), then the pools
    the pipelines name (:func:`create_pools`)."""
    home = Path(airflow_env()["AIRFLOW_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    subprocess.run([airflow_bin(), "db", "migrate"], env=env(), check=True, stdout=subprocess.DEVNULL)
    create_pools()


def create_pools() -> list[tuple[str, int]]:
    """Create the Airflow pool each pipeline of ``$CDC_PIPELINES_DIR`` names (``airflow.pool``),
    with its ``airflow.pool_slots`` slots (the largest where pipelines share a pool), keeping the
    slots of a pool that exists; return ``[(pool, slots)]`` created. Airflow never schedules a
    task of a missing pool."""
    from cdclake.config import load_pipelines

    wanted: dict[str, int] = {}
    for cfg in load_pipelines(resolve=False):
        if cfg.airflow.pool and cfg.airflow.pool != "default_pool":
            wanted[cfg.airflow.pool] = max(wanted.get(cfg.airflow.pool, 0), cfg.airflow.pool_slots)
    if not wanted:
        return []
    listed = subprocess.run([airflow_bin(), "pools", "list", "-o", "json"], env=env(), check=True,
                            capture_output=True, text=True).stdout
    existing = {p["pool"] for p in json.loads(listed or "[]")}
    created = []
    for pool, slots in sorted(wanted.items()):
        if pool not in existing:
            subprocess.run([airflow_bin(), "pools", "set", pool, str(slots), "CDC stage jobs (Spark)"], env=env(),
                           check=True, stdout=subprocess.DEVNULL)
            print(f"created Airflow pool {pool} with {slots} slot(s)", flush=True)
            created.append((pool, slots))
    return created


def dags_test(dag_id: str, start: str, end: str, topics: Optional[list[str]] = None) -> int:
    """Run ``airflow dags test DAG_ID -c '{"start": ..., "end": ...}'``; return its exit code."""
    migrate()
    conf = {"start": start, "end": end, **({"topics": topics} if topics else {})}
    cmd = [airflow_bin(), "dags", "test", dag_id, "-c", json.dumps(conf)]
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env()).returncode


def start(timeout_s: float = 90.0) -> None:
    """Start the UI/REST server, scheduler and DAG processor; print the login."""
    migrate()
    home = Path(airflow_env()["AIRFLOW_HOME"])
    pids = {}
    for name, args in PROCESSES.items():
        log = open(home / f"{name}.log", "ab")
        p = subprocess.Popen([airflow_bin(), *args], env=env(), stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        pids[name] = p.pid
    (home / "pids.json").write_text(json.dumps(pids))
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen("http://127.0.0.1:8080/api/v2/monitor/health", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"Airflow did not answer on 127.0.0.1:8080 within {timeout_s:.0f}s; see {home}/*.log")
            time.sleep(1)
    pw_file = home / "simple_auth_manager_passwords.json.generated"
    password = json.loads(pw_file.read_text()).get("admin") if pw_file.exists() else "(see api-server.log)"
    print(f"Airflow UI: http://127.0.0.1:8080  user: admin  password: {password}")
    print(f"Logs: {home}/*.log   Stop: make airflow-stop")


def stop() -> None:
    """Stop the processes started by :func:`start`."""
    f = Path(airflow_env()["AIRFLOW_HOME"]) / "pids.json"
    if not f.exists():
        print("Airflow is not running")
        return
    for name, pid in json.loads(f.read_text()).items():
        try:
            os.killpg(pid, signal.SIGTERM)
            print(f"stopped {name}")
        except OSError:
            pass
    f.unlink()


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "start":
        start()
    elif cmd == "stop":
        stop()
    elif cmd == "dags-test" and len(argv) >= 5:
        return dags_test(argv[2], argv[3], argv[4])
    else:
        print("usage: python -m cdclake.airflow_local start|stop|dags-test DAG_ID START END", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
