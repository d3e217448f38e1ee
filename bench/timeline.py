"""Spark's job timeline of each measured stage, from Spark's event log: how busy the cores were.

The benchmark's Spark session writes Spark's event log (``spark.eventLog.enabled``, one JSON
object per line, Spark's listener events) to ``<state>/spark-events``. After the session stops,
:func:`stage_timelines` reads the task and job events and, for a time interval (a measured
stage), gives the Spark jobs that ran in it, their tasks, the task time, and the share of the
interval during which 0, 1, 2 ... tasks were running. On ``local[N]`` a stage whose share of
"N tasks running" is low cannot get N times faster with N cores: the figures show where a stage
runs on one core (a single-task stage) or none (the driver between jobs).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def read_event_log(path: Path) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """``(tasks, jobs)`` of one Spark event log: ``(launch, finish)`` of every task and
    ``(submitted, completed)`` of every finished job, epoch milliseconds."""
    tasks, started, jobs = [], {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if '"SparkListenerTask' not in line and '"SparkListenerJob' not in line:
                continue
            e = json.loads(line)
            kind = e.get("Event")
            if kind == "SparkListenerTaskEnd":
                info = e["Task Info"]
                tasks.append((int(info["Launch Time"]), int(info["Finish Time"])))
            elif kind == "SparkListenerJobStart":
                started[e["Job ID"]] = int(e["Submission Time"])
            elif kind == "SparkListenerJobEnd" and e["Job ID"] in started:
                jobs.append((started.pop(e["Job ID"]), int(e["Completion Time"])))
    return tasks, jobs


def occupancy(tasks: list[tuple[int, int]], jobs: list[tuple[int, int]], start_ms: int, end_ms: int,
              cores: int) -> dict:
    """The timeline of ``[start_ms, end_ms)``: ``jobs`` and ``tasks`` that ran in it, ``task_s``
    (their seconds inside it), ``running_share`` (``{"0": share, "1": share, ...}``: the share of
    the interval with that many tasks running) and ``core_use`` (``task_s`` over the interval
    times ``cores``; 1.0 is every core busy all the time)."""
    wall = max(1, end_ms - start_ms)
    inside = [(max(a, start_ms), min(b, end_ms)) for a, b in tasks if b > start_ms and a < end_ms]
    edges = sorted([(a, 1) for a, _ in inside] + [(b, -1) for _, b in inside])
    share: dict[int, int] = {}
    running, last = 0, start_ms
    for t, step in edges:
        share[running] = share.get(running, 0) + t - last
        running, last = running + step, t
    share[running] = share.get(running, 0) + end_ms - last
    task_ms = sum(b - a for a, b in inside)
    return {"jobs": sum(1 for a, b in jobs if b > start_ms and a < end_ms), "tasks": len(inside),
            "task_s": round(task_ms / 1000, 1),
            "running_share": {str(k): round(v / wall, 3) for k, v in sorted(share.items()) if v > 0},
            "core_use": round(task_ms / (wall * cores), 3)}


def stage_timelines(event_log: Optional[Path], spans: dict[str, tuple[float, float]], cores: int) -> dict:
    """``{label: occupancy}`` for each ``label: (start, end)`` (epoch seconds) of ``spans``; ``{}``
    without an event log."""
    if event_log is None or not event_log.exists():
        return {}
    tasks, jobs = read_event_log(event_log)
    return {label: occupancy(tasks, jobs, int(a * 1000), int(b * 1000), cores) for label, (a, b) in spans.items()}


def describe(t: dict) -> str:
    """One line: jobs, and the share of the time with each number of tasks running."""
    shares = ", ".join(f"{k} running {100 * v:.0f}%" for k, v in t.get("running_share", {}).items())
    return f"{t.get('jobs', 0)} Spark jobs, {t.get('tasks', 0)} tasks, core use {t.get('core_use', 0):.2f} ({shares})"
