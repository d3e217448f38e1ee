"""The writer lock: one run at a time writes a topic's partitions in a catalog.

The raw, bronze and silver tables are partitioned by Kafka topic, and every writing stage
(land, normalize, silver) replaces the window's partitions of its topics. Two runs writing the
same topic at once (two pipelines naming one topic, a command-line job beside a DAG run) could
interleave their overwrites and merges, so each writing stage holds this lock for all of its
topics while it runs (:func:`cdclake.cli.main` takes it before the Spark session starts).

A lock is a row of table ``cdc_writer_locks`` in the catalog's own database (the SQLite file or
PostgreSQL database of ``catalog.uri``, beside Iceberg's ``iceberg_tables``), one per
(``catalog_name``, ``topic``), its primary key. Columns: ``owner`` (a random token per run),
``pipeline``, ``stage``, ``run_window`` (``[start, end)``), ``host``, ``pid``, ``pid_start`` (the
process's start time in clock ticks, from ``/proc``: tells a reused pid from the holder),
``dag_id``/``run_id`` (``$AIRFLOW_CTX_DAG_ID``/``$AIRFLOW_CTX_DAG_RUN_ID`` when set),
``acquired_ms`` and ``renewed_ms`` (epoch milliseconds, the holder's clock).

- Taking: an ``INSERT`` (the primary key lets one run win). When a row is there, its holder is
  *gone* if it is on this host and its process no longer runs (a SIGKILLed stage: its rerun takes
  over at once), or if it has not renewed the row for ``locks.stale_s`` seconds (a host that
  died); a gone holder's row is taken over by an ``UPDATE`` conditional on the owner and renewal
  time read, so that two runs cannot both take it over. Otherwise the run polls every
  :data:`POLL_S` seconds, up to ``locks.wait_s`` seconds for all its topics together, then
  raises :class:`WriterLockBusy` naming the holding run.
- A run takes its topics in sorted order, so two runs wanting overlapping topics cannot wait for
  each other in a cycle; a run that gives up releases what it had taken.
- A heartbeat thread renews the rows every ``min(5, stale_s / 4)`` seconds; a run that finds
  its rows taken over (it stalled for ``stale_s``) ends with :class:`WriterLockLost`.
- Release deletes the run's rows; a killed run leaves them, to be taken over as above.

Hosts are told apart by ``socket.gethostname()``; the staleness rule compares the holder's
renewal time with this host's clock, so host clocks must agree to well within ``stale_s``.
Every statement goes through :func:`cdclake.catalog.with_retries` (a locked SQLite catalog is
retried, then :class:`cdclake.catalog.CatalogLocked`).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import Iterable, Optional

from cdclake.config import PipelineConfig
from cdclake.errors import WriterLockBusy, WriterLockLost
from cdclake.window import UTC, Window

log = logging.getLogger(__name__)

LOCK_TABLE = "cdc_writer_locks"
#: Seconds between two attempts of a run waiting for a lock.
POLL_S = 1.0
#: Stages that write tables and so take the writer lock.
WRITING_STAGES = ("land", "normalize", "silver")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _table():
    import sqlalchemy as sa

    md = sa.MetaData()
    return sa.Table(
        LOCK_TABLE, md,
        sa.Column("catalog_name", sa.String(255), primary_key=True),
        sa.Column("topic", sa.String(255), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("pipeline", sa.String(255)),
        sa.Column("stage", sa.String(64)),
        sa.Column("run_window", sa.String(128)),
        sa.Column("host", sa.String(255)),
        sa.Column("pid", sa.Integer),
        sa.Column("pid_start", sa.String(32)),
        sa.Column("dag_id", sa.String(255)),
        sa.Column("run_id", sa.String(255)),
        sa.Column("acquired_ms", sa.BigInteger, nullable=False),
        sa.Column("renewed_ms", sa.BigInteger, nullable=False),
    )


def _proc_stat(pid: int) -> Optional[tuple[str, str]]:
    """``(state, start time in clock ticks)`` of ``pid`` from ``/proc``, None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
        return rest[0], rest[19]
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> Optional[str]:
    """Start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), or None."""
    st = _proc_stat(pid)
    return st[1] if st else None


def pid_running(pid: int, start: Optional[str] = None) -> bool:
    """True when process ``pid`` of this host runs (not a zombie) and, when ``start`` is given and
    ``/proc`` is readable, is the process that started at ``start`` (a reused pid is not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    st = _proc_stat(pid)
    if st is None:
        return True
    state, started = st
    if state in ("Z", "X"):
        return False
    return start is None or started == start


def holder_text(row) -> str:
    """One line naming the run that holds a lock row: pipeline, stage, window, host, pid, Airflow ids."""
    airflow = ""
    if row.dag_id or row.run_id:
        airflow = f" (Airflow dag {row.dag_id or '?'} run {row.run_id or '?'})"
    return (f"pipeline {row.pipeline} stage {row.stage} window {row.run_window} on host {row.host} "
            f"pid {row.pid}{airflow}")


class WriterLock:
    """The writer lock of ``topics`` (default: the window's, else all of the pipeline's) for one run.

    ``cfg``: the pipeline (catalog, ``locks.wait_s``, ``locks.stale_s``); ``stage``: the writing
    stage (``land``, ``normalize``, ``silver``, or a maintenance task's name); ``window``: the run's
    window (None for maintenance). Use as a context manager, or :meth:`acquire` and :meth:`release`.
    ``wait_s``/``stale_s`` override the pipeline's settings (seconds).
    """

    def __init__(self, cfg: PipelineConfig, stage: str, window: Optional[Window] = None,
                 topics: Optional[Iterable[str]] = None, wait_s: Optional[float] = None,
                 stale_s: Optional[float] = None):
        self.cfg = cfg
        self.stage = stage
        self.window = window
        if topics is None:
            topics = (window.topics if window is not None and window.topics else None) or cfg.topics()
        self.topics = sorted(set(topics))
        self.wait_s = cfg.locks.wait_s if wait_s is None else wait_s
        self.stale_s = cfg.locks.stale_s if stale_s is None else stale_s
        self.owner = uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.pid_start = process_start(self.pid)
        self.held: list[str] = []
        self.lost: list[str] = []
        self._engine = None
        self._tbl = _table()
        self._stop = threading.Event()
        self._beat: Optional[threading.Thread] = None

    # -- database -------------------------------------------------------------------------
    def _db(self, fn, what: str):
        from cdclake.catalog import with_retries

        return with_retries(fn, self.cfg.catalog, what)

    def _connect(self) -> None:
        if self._engine is not None:
            return
        from sqlalchemy.schema import CreateTable

        from cdclake.catalog import pyiceberg_catalog

        self._engine = pyiceberg_catalog(self.cfg.catalog).engine

        def create():
            import sqlalchemy as sa

            try:
                with self._engine.begin() as conn:
                    conn.execute(CreateTable(self._tbl, if_not_exists=True))
            except (sa.exc.IntegrityError, sa.exc.ProgrammingError):  # created at the same moment elsewhere
                if not sa.inspect(self._engine).has_table(LOCK_TABLE):
                    raise

        self._db(create, "creating the writer lock table")

    def _key(self, topic: str):
        t = self._tbl.c
        return (t.catalog_name == self.cfg.catalog.name) & (t.topic == topic)

    def _row(self, now: int) -> dict:
        return {"owner": self.owner, "pipeline": self.cfg.name, "stage": self.stage,
                "run_window": str(self.window) if self.window is not None else "-", "host": self.host,
                "pid": self.pid, "pid_start": self.pid_start, "dag_id": os.environ.get("AIRFLOW_CTX_DAG_ID"),
                "run_id": os.environ.get("AIRFLOW_CTX_DAG_RUN_ID"), "acquired_ms": now, "renewed_ms": now}

    def _gone(self, row, now: int) -> Optional[str]:
        """Why the holder of ``row`` is gone (its lock may be taken over), or None while it holds."""
        if row.host == self.host and not pid_running(row.pid, row.pid_start):
            return f"its process {row.pid} on this host is gone"
        idle = (now - row.renewed_ms) / 1000
        if idle > self.stale_s:
            return f"not renewed for {idle:.0f}s (locks.stale_s {self.stale_s:g})"
        return None

    def _try_take(self, topic: str):
        """Take ``topic``'s lock; None when taken, else the holder's row."""
        import sqlalchemy as sa

        t = self._tbl
        while True:  # a row released between our insert and our read: insert again
            now = _now_ms()

            def insert():
                with self._engine.begin() as conn:
                    conn.execute(t.insert().values(catalog_name=self.cfg.catalog.name, topic=topic, **self._row(now)))

            try:
                self._db(insert, f"taking the writer lock of topic {topic}")
                return None
            except sa.exc.IntegrityError:
                pass

            def read():
                with self._engine.connect() as conn:
                    return conn.execute(sa.select(t).where(self._key(topic))).first()

            row = self._db(read, f"reading the writer lock of topic {topic}")
            if row is None:
                continue
            if row.owner == self.owner:
                return None
            why = self._gone(row, now)
            if why is None:
                return row

            def take_over():
                with self._engine.begin() as conn:
                    res = conn.execute(t.update().where(self._key(topic) & (t.c.owner == row.owner)
                                                        & (t.c.renewed_ms == row.renewed_ms))
                                       .values(**self._row(now)))
                    return res.rowcount

            if self._db(take_over, f"taking over the writer lock of topic {topic}") == 1:
                log.warning("took over the writer lock of topic %s in catalog %s from %s: %s", topic,
                            self.cfg.catalog.name, holder_text(row), why)
                return None
            # another run took it over first, or the holder renewed it meanwhile: read it again

    # -- public ---------------------------------------------------------------------------
    def acquire(self) -> "WriterLock":
        """Take every topic's lock (sorted order), waiting up to ``wait_s`` seconds in all.

        Returns self. Raises :class:`WriterLockBusy` (one line naming the holding run and how long
        this run waited; locks already taken are released first) and
        :class:`cdclake.catalog.CatalogLocked`.
        """
        self._connect()
        started = time.monotonic()
        deadline = started + self.wait_s
        try:
            for topic in self.topics:
                told = False
                while True:
                    holder = self._try_take(topic)
                    if holder is None:
                        self.held.append(topic)
                        break
                    now = time.monotonic()
                    if now >= deadline:
                        since = _iso_ms(holder.acquired_ms)
                        raise WriterLockBusy(
                            f"topic {topic} in catalog {self.cfg.catalog.name} is being written by "
                            f"{holder_text(holder)} since {since}; {self.cfg.name} {self.stage} gave up after "
                            f"waiting {now - started:.0f}s (locks.wait_s {self.wait_s:g})")
                    if not told:
                        log.info("waiting up to %.0fs for the writer lock of topic %s, held by %s",
                                 deadline - now, topic, holder_text(holder))
                        told = True
                    time.sleep(min(POLL_S, max(0.05, deadline - now)))
        except BaseException:
            self.release()
            raise
        log.info("writer lock taken for topics %s in catalog %s (%s %s, pid %d)", ", ".join(self.topics),
                 self.cfg.catalog.name, self.stage, self.window if self.window is not None else "-", self.pid)
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name="writer-lock-heartbeat", daemon=True)
        self._beat.start()
        return self

    def heartbeat_s(self) -> float:
        """Seconds between two renewals: ``min(5, stale_s / 4)``."""
        return min(5.0, self.stale_s / 4)

    def renew(self) -> int:
        """Renew the held rows now; return how many were still this run's (the rest go to ``lost``)."""
        t = self._tbl

        def update():
            with self._engine.begin() as conn:
                res = conn.execute(t.update().where((t.c.catalog_name == self.cfg.catalog.name)
                                                    & t.c.topic.in_(self.held) & (t.c.owner == self.owner))
                                   .values(renewed_ms=_now_ms()))
                return res.rowcount

        n = self._db(update, "renewing the writer lock")
        if n < len(self.held) and not self.lost:
            import sqlalchemy as sa

            def mine():
                with self._engine.connect() as conn:
                    return {r.topic for r in conn.execute(sa.select(t.c.topic).where(
                        (t.c.catalog_name == self.cfg.catalog.name) & (t.c.owner == self.owner)))}

            still = self._db(mine, "reading the writer lock")
            self.lost = [x for x in self.held if x not in still]
            log.error("writer lock of topics %s in catalog %s was taken over by another run", ", ".join(self.lost),
                      self.cfg.catalog.name)
        return n

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.heartbeat_s()):
            try:
                self.renew()
            except Exception as exc:  # the next beat tries again; stale_s allows several misses
                log.warning("renewing the writer lock failed: %s", exc)

    def release(self) -> None:
        """Stop the heartbeat and delete this run's rows (idempotent; errors are logged, not raised)."""
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=30)
        self._beat = None
        if self._engine is None:
            return
        t = self._tbl

        def delete():
            with self._engine.begin() as conn:
                conn.execute(t.delete().where((t.c.catalog_name == self.cfg.catalog.name) & (t.c.owner == self.owner)))

        try:
            if self.held:
                self._db(delete, "releasing the writer lock")
                log.info("writer lock released for topics %s in catalog %s", ", ".join(self.held),
                         self.cfg.catalog.name)
        except Exception as exc:
            log.error("releasing the writer lock failed (it will be taken over as stale): %s", exc)
        finally:
            self.held = []
            self._engine.dispose()
            self._engine = None

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, exc_type, exc, tb) -> None:
        lost = list(self.lost)
        self.release()
        if lost and exc_type is None:
            raise WriterLockLost(f"the writer lock of topics {', '.join(lost)} in catalog {self.cfg.catalog.name} was "
                                 f"taken over by another run while {self.cfg.name} {self.stage} wrote (it had not "
                                 f"renewed it for locks.stale_s {self.stale_s:g}s); rerun the window")


def _iso_ms(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def writer_lock(cfg: PipelineConfig, stage: str, window: Optional[Window] = None,
                topics: Optional[Iterable[str]] = None) -> WriterLock:
    """The :class:`WriterLock` of a run (a context manager: taken on enter, released on exit)."""
    return WriterLock(cfg, stage, window, topics)


def holders(cfg: PipelineConfig) -> list[dict]:
    """The lock rows of ``cfg``'s catalog as dicts (columns of ``cdc_writer_locks``), sorted by topic."""
    import sqlalchemy as sa

    from cdclake.catalog import pyiceberg_catalog, with_retries

    engine = pyiceberg_catalog(cfg.catalog).engine
    try:
        tbl = _table()

        def read():
            if not sa.inspect(engine).has_table(LOCK_TABLE):
                return []
            with engine.connect() as conn:
                return [dict(r._mapping) for r in conn.execute(
                    sa.select(tbl).where(tbl.c.catalog_name == cfg.catalog.name).order_by(tbl.c.topic))]

        return with_retries(read, cfg.catalog, "reading the writer locks")
    finally:
        engine.dispose()
