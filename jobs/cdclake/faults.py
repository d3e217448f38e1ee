"""Kill points: named places in the stages' writes where a test can kill the process with SIGKILL.

The fault tests run a stage job with ``CDC_KILL_AT=<point>`` in its environment; when the stage
reaches that point, :func:`kill_point` sends SIGKILL (to this process, or to the driver's pid from
inside a Spark task), exactly as an out-of-memory killer or a lost node would stop it: no
``finally``, no cleanup, no commit. Without the variable a kill point does nothing.

Points (each named ``<stage>.<where>``):

- ``land.writing``: inside a reading task, once its raw data files are written and closed, before
  it returns them: files are on disk, nothing is committed. (The fault test also kills the job's
  JVM and Python workers, whose own shutdown would otherwise end the task tidily.)
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
import time
from typing import Optional

log = logging.getLogger(__name__)

#: Seconds a kill point in a Spark task waits between its log line and the SIGKILL of the driver.
KILL_GRACE_S = 0.5
#: The environment variable naming the kill point to fire.
KILL_AT = "CDC_KILL_AT"


def armed(name: str) -> bool:
    """True when ``$CDC_KILL_AT`` names point ``name``."""
    return os.environ.get(KILL_AT) == name


def kill_point(name: str, pid: Optional[int] = None) -> None:
    """SIGKILL process ``pid`` (default: this one) when ``$CDC_KILL_AT`` names ``name``."""
    if armed(name):
        log.warning("kill point %s: sending SIGKILL to pid %d", name, pid or os.getpid())
        if pid is not None and pid != os.getpid():
            # a Spark task's output reaches the job's log through the JVM: give it time to pass
            time.sleep(KILL_GRACE_S)
        os.kill(pid or os.getpid(), signal.SIGKILL)
