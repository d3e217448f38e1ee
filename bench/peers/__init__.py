"""Benchmark peers: other engines given the same CDC input, for side-by-side figures.

- :mod:`flink` — PyFlink 2.3 (``debezium-json`` / ``canal-json`` changelog sources, run in
  ``.venv-flink`` as a subprocess, :mod:`flink_job`), its final rows written into Iceberg tables
  with pyiceberg (:mod:`iceberg_sink`).
- :mod:`pyiceberg_upsert` — pyiceberg's ``Table.upsert`` / ``Table.delete`` applying the
  deduplicated final changes to an Iceberg table.
- :mod:`compare` — equality of our silver rows and a peer's rows.
- :mod:`harness` — the benchmark's side: the calls, ``run_peer``, the check against the source.

Each peer exposes ``run(input_spec: dict) -> dict``.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Optional


def tree_rss(proc) -> int:
    """RSS in bytes of ``proc`` (a ``psutil.Process``) and all its descendants; 0 once it is gone."""
    import psutil

    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_child(cmd: list[str], log_path: Path, cwd: Path, timeout_s: float,
              env: Optional[dict] = None) -> tuple[Optional[int], float, int]:
    """Run a peer's job process, its output to ``log_path``, sampling its tree's RSS every 50 ms.

    Returns (exit code, None when killed at ``timeout_s``; wall seconds of the process; peak RSS
    in bytes of the process tree).
    """
    import psutil

    peak = 0
    stop = threading.Event()
    with open(log_path, "wb") as log:
        t0 = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(cwd))
        proc = psutil.Process(child.pid)

        def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                peak = max(peak, tree_rss(proc))
                stop.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            rc: Optional[int] = child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            rc = None
        wall = time.perf_counter() - t0
        stop.set()
        sampler.join()
    return rc, wall, peak
