"""A Spark standalone cluster on loopback from the pip package: one master and one worker.

``python -m cdclake.cluster start`` (what ``make cluster`` runs) starts
``org.apache.spark.deploy.master.Master`` on ``spark://127.0.0.1:7077`` (web UI on 8090) and one
``Worker`` with the machine's cores and ``--memory`` (default 2g), with pyspark's own
``spark-class``, and waits until the master counts the worker alive. While it runs,
:func:`cdclake.airflow_local.env` points Airflow's ``spark_default`` at it (client deploy
mode), so ``make airflow`` and the demo's ``airflow dags test`` submit the stage jobs to it;
``stop`` ends it. State and logs: ``$CDC_STATE_DIR/cluster/`` (``cluster.json``, ``*.log``,
the worker's ``work/`` directory).

Spark's standalone cluster manager runs Python applications in client deploy mode only (its
``spark-submit`` refuses ``--deploy-mode cluster`` for a Python application), so the stage jobs
run their driver where the Airflow task runs and their executors on the workers; the jobs'
Python path reaches the executors as ``spark.executorEnv.PYTHONPATH``
(:func:`cdclake.catalog.spark_conf`).
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

from cdclake.config import state_dir
from cdclake.embedded import pid_alive, port_open

MASTER_PORT = 7077
WEB_PORT = 8090
CLUSTER_FILE = "cluster/cluster.json"


def spark_class() -> Path:
    """pyspark's ``bin/spark-class`` (the pip package's launcher of Spark's JVM classes)."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def master_url(state: Optional[Path] = None) -> Optional[str]:
    """``spark://127.0.0.1:<port>`` of the cluster started by :func:`start` while it runs, else None."""
    f = (state or state_dir()) / CLUSTER_FILE
    if not f.exists():
        return None
    info = json.loads(f.read_text())
    if all(pid_alive(p) for p in info["pids"].values()) and port_open("127.0.0.1", info["port"]):
        return info["url"]
    return None


def alive_workers(web_port: int) -> int:
    """Workers the master's web UI (``/json/``) counts alive; 0 when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=2) as r:
            return int(json.load(r).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def start(state: Optional[Path] = None, port: int = MASTER_PORT, web_port: int = WEB_PORT,
          cores: Optional[int] = None, memory: str = "2g", timeout_s: float = 90.0) -> str:
    """Start a master on ``127.0.0.1:port`` and one worker (``cores``, default all; ``memory``);
    return the master's URL (the running cluster's, if one runs). Raises ``RuntimeError`` naming
    the log when the master or the worker does not come up within ``timeout_s`` seconds."""
    state = state or state_dir()
    running = master_url(state)
    if running:
        return running
    home = state / "cluster"
    (home / "work").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "TZ": "UTC", "PYSPARK_PYTHON": sys.executable}
    url = f"spark://127.0.0.1:{port}"
    worker_web = web_port + 1
    commands = {
        "master": ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                   "--webui-port", str(web_port)],
        "worker": ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                   "--cores", str(cores or os.cpu_count() or 1), "--memory", memory, "--webui-port", str(worker_web),
                   "--work-dir", str(home / "work")],
    }
    pids = {}
    deadline = time.monotonic() + timeout_s
    for name, args in commands.items():
        with open(home / f"{name}.log", "ab") as log:
            p = subprocess.Popen([str(spark_class()), *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        pids[name] = p.pid
        ready = (lambda: port_open("127.0.0.1", port)) if name == "master" else (lambda: alive_workers(web_port) > 0)
        while not ready():
            if p.poll() is not None or time.monotonic() > deadline:
                for pid in pids.values():
                    _kill(pid)
                raise RuntimeError(f"the Spark {name} did not start within {timeout_s:.0f} s; see {home / name}.log")
            time.sleep(0.5)
    (home / "cluster.json").write_text(json.dumps({"url": url, "port": port, "web_port": web_port, "pids": pids}))
    return url


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        pass


def stop(state: Optional[Path] = None, timeout_s: float = 20.0) -> bool:
    """Stop the cluster :func:`start` started; False when none was running."""
    f = (state or state_dir()) / CLUSTER_FILE
    if not f.exists():
        return False
    pids = json.loads(f.read_text())["pids"]
    for pid in reversed(list(pids.values())):  # the worker first
        _kill(pid)
    deadline = time.monotonic() + timeout_s
    while any(pid_alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    f.unlink()
    return True


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "status"
    if cmd == "start":
        url = start()
        info = json.loads((state_dir() / CLUSTER_FILE).read_text())
        print(f"Spark master {url} (web UI http://127.0.0.1:{info['web_port']}), one worker; "
              f"logs {state_dir() / 'cluster'}; Airflow's spark_default points at it while it runs")
    elif cmd == "stop":
        print("cluster stopped" if stop() else "no cluster running")
    elif cmd == "status":
        print(master_url() or "no cluster running")
    else:
        print("usage: python -m cdclake.cluster start|stop|status", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
