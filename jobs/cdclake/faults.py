"""Kill points: named places in the stages' writes where a test can kill the process with SIGKILL.

The fault tests run a stage job with ``CDC_KILL_AT=<point>`` in its environment; when the stage
reaches that point, :func:`kill_point` sends SIGKILL (to this process, or to the driver's pid from
inside a Spark task), exactly as an out-of-memory killer or a lost node would stop it: no
``finally``, no cleanup, no commit. Without the variable a kill point does nothing.

Points (each named ``<stage>.<where>``):

- ``land.writing``: inside a reading task, after its first Arrow batch went to the raw table's
  writer (data files of the write exist, nothing is committed).
- ``land.raw_written``: after the raw table's commit, before the offset ledger's.
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
