"""Kill points: named places in the stages' writes where a test can kill the process with SIGKILL.

The fault tests run a stage job with ``CDC_KILL_AT=<point>`` in its environment; when the stage
reaches that point, :func:`kill_point` sends SIGKILL (to this process, or to the driver's pid from
inside a Spark task), exactly as an out-of-memory killer or a lost node would stop it: no
``finally``, no cleanup, no commit. Without the variable a kill point does nothing.

Points (each named ``<stage>.<where>``):

- ``land.writing``: inside a reading task, after its first Arrow batch was handed to Spark: the
  raw write is under way, nothing is committed. (The raw table's writes are distributed by hour,
  so its data files are written in the stage after the reading tasks; the fault test also kills
  the job's JVM, whose own shutdown would otherwise abort the write tidily.)
- ``land.raw_written``: after the raw table's commit, before the offset ledger's.
- ``normalize.bronze_written``: after the ``bronze.changes`` overwrite of the window is
  committed, before the quarantine and control tables are written.
- ``silver.merged``: after the first silver table's ``MERGE`` (or file-level commit) is
  committed, before its tombstones (and history) are recorded; in a Spark task
  (:func:`cdclake.silver.small.merge_in_tasks`) it stops the driver's pid.

A killed stage leaves its writer lock behind (:mod:`cdclake.locks`); its rerun on the same host
takes it over at once, as the pid is gone. Files a killed write had written but not committed are
removed by :func:`cdclake.maintenance.remove_orphan_files`.
"""
from __future__ import annotations

import logging
import os
import signal
from typing import Optional

log = logging.getLogger(__name__)

#: The environment variable naming the kill point to fire.
KILL_AT = "CDC_KILL_AT"


def armed(name: str) -> bool:
    """True when ``$CDC_KILL_AT`` names point ``name``."""
    return os.environ.get(KILL_AT) == name


def kill_point(name: str, pid: Optional[int] = None) -> None:
    """SIGKILL process ``pid`` (default: this one) when ``$CDC_KILL_AT`` names ``name``."""
    if armed(name):
        log.warning("kill point %s: sending SIGKILL to pid %d", name, pid or os.getpid())
        os.kill(pid or os.getpid(), signal.SIGKILL)
