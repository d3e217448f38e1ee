"""Peak memory of the Spark driver's process tree, sampled with psutil.

The tree is this process (the Python driver) and its descendants: the driver JVM (``java``,
started by pyspark's launcher) and the Python workers the JVM forks (``pyspark.daemon`` and its
workers). Every ``interval`` seconds the sampler adds up the RSS of the three groups; a
:meth:`RssSampler.span` records the peak of the total (and of each group) while it is open.
Processes listed in ``exclude`` (the embedded broker, data generators) are not counted, nor are
their descendants; nor are processes that are neither ``java`` nor ``python`` (shell wrappers, and
the JVM's short-lived forks before ``exec``, which show the JVM's own pages).

RSS counts pages shared between forked workers once per process, so the worker figure is an upper
bound of their real footprint.
"""
from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional

import psutil

MB = 1024 * 1024


class Span:
    """Peak figures of one measured interval (MiB); filled while the span is open."""

    def __init__(self, label: str):
        self.label = label
        self.start = time.monotonic()
        self.end: Optional[float] = None
        self.started_at = time.time()  # epoch s, to match Spark's event log (bench.timeline)
        self.ended_at: Optional[float] = None
        self.peak_total = 0.0
        self.at_peak: dict[str, float] = {}
        self.peak: dict[str, float] = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
        self.samples = 0
        self.processes: list = []
        self.start_total: Optional[float] = None

    def add(self, parts: dict[str, float], processes: Optional[list] = None) -> None:
        total = sum(parts.values())
        if self.start_total is None:
            self.start_total = total
        self.samples += 1
        if total > self.peak_total:
            self.peak_total = total
            self.at_peak = dict(parts)
            self.processes = list(processes or [])
        for k, v in parts.items():
            self.peak[k] = max(self.peak.get(k, 0.0), v)

    @property
    def wall_s(self) -> float:
        return (self.end if self.end is not None else time.monotonic()) - self.start

    def as_dict(self) -> dict:
        return {"peak_rss_mb": round(self.peak_total), "rss_at_start_mb": round(self.start_total or 0),
                "peak_rss_parts_mb": {k: round(v) for k, v in self.at_peak.items()},
                "peak_rss_each_mb": {k: round(v) for k, v in self.peak.items()}, "rss_samples": self.samples,
                "processes_at_peak": self.processes}


class RssSampler:
    """Samples the process tree of ``root_pid`` (default: this process) every ``interval`` seconds."""

    def __init__(self, root_pid: Optional[int] = None, interval: float = 0.2, exclude: Iterable[int] = ()):
        self.root = psutil.Process(root_pid or os.getpid())
        self.interval = interval
        self.exclude = set(exclude)
        self._spans: list[Span] = []
        self.intervals: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()

    def exclude_pid(self, pid: int) -> None:
        self.exclude.add(pid)

    def sample(self) -> dict[str, float]:
        """Current RSS (MiB) of ``driver``, ``jvm`` and ``workers``."""
        return self._sample()[0]

    def _sample(self) -> tuple[dict[str, float], list]:
        """Current RSS (MiB) per group, and ``[group, pid, name, MiB]`` per counted process."""
        parts = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
        procs: list = []
        try:
            parts["driver"] = self.root.memory_info().rss / MB
            procs.append(["driver", self.root.pid, "python (driver)", round(parts["driver"])])
            children = self.root.children(recursive=True)
        except psutil.Error:
            return parts, procs
        skipped: set[int] = set()
        for p in children:
            try:
                if p.pid in self.exclude or p.ppid() in self.exclude or p.ppid() in skipped:
                    skipped.add(p.pid)
                    continue
                name = p.name()
                rss = p.memory_info().rss / MB
            except psutil.Error:
                continue
            if name == "java":
                group = "jvm"
            elif name.startswith("python"):
                # python under the JVM: pyspark daemon and workers; python under the driver: helpers
                group = "workers" if _under_java(p) else "driver"
            else:
                # shells, and the JVM's short-lived forks before exec (Hadoop's local file system
                # runs chmod and the like): their RSS is the JVM's own pages, counted once already
                continue
            parts[group] += rss
            procs.append([group, p.pid, name, round(rss)])
        return parts, procs

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                active = list(self._spans)
            if active:
                parts, procs = self._sample()
                for s in active:
                    s.add(parts, procs)
            self._stop.wait(self.interval)

    @contextmanager
    def span(self, label: str) -> Iterator[Span]:
        """Measure wall time and peak RSS of the ``with`` block (each closed span is kept in
        ``intervals``: ``{label: (start, end)}``, epoch seconds)."""
        s = Span(label)
        s.add(*self._sample())
        with self._lock:
            self._spans.append(s)
        try:
            yield s
        finally:
            s.add(*self._sample())
            s.end = time.monotonic()
            s.ended_at = time.time()
            with self._lock:
                self._spans.remove(s)
            self.intervals[label] = (s.started_at, s.ended_at)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def _under_java(p: psutil.Process) -> bool:
    try:
        for parent in p.parents():
            if parent.name() == "java":
                return True
    except psutil.Error:
        pass
    return False
