"""Freshness of the silver tables: the newest source commit time applied, the lag to now, and the
SLA check (``freshness`` section of the pipeline file, :class:`cdclake.config.FreshnessConfig`).

A silver table's freshness is the running maximum of the source commit times (``source_ts_ms``)
of the changes applied to it, which each silver commit records in its snapshot summary as
``cdc.newest-source-ts-ms`` (:mod:`cdclake.silver.snapshots`); it is read from the newest
snapshot in the current snapshot's ancestry that a silver commit made, with pyiceberg (no Spark).
A topic that goes silent upstream makes no silver commit, so its tables' freshness stays where
it was while their lag (now minus freshness) grows, even though every run succeeds.

The pipeline DAG's ``freshness`` task runs :func:`check_freshness` after silver's gate, when the
pipeline sets an SLA: it fails with :class:`cdclake.errors.FreshnessError` naming every table over
its SLA, and the task's failure fires ``airflow.on_failure_callback``.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Optional

from cdclake.catalog import pyiceberg_catalog
from cdclake.config import PipelineConfig
from cdclake.errors import FreshnessError
from cdclake.silver.snapshots import LEDGER_END_OFFSETS, NEWEST_TS_MS, pyiceberg_lineage, recorded
from cdclake.window import UTC

__all__ = ["FreshnessError", "TableFreshness", "check_freshness", "format_duration", "table_freshness"]


@dataclass(frozen=True)
class TableFreshness:
    """One silver table's freshness at ``now``.

    ``table``: ``<namespace>.<table>``; ``topics``: the Kafka topics its last silver commit
    recorded; ``newest_source_ts``: the newest source commit time applied (aware, UTC; None: no
    change carried one); ``lag_s``: seconds from it to ``now`` (None without it); ``max_lag_s``:
    its SLA in seconds (None: none).
    """

    table: str
    topics: tuple[str, ...]
    newest_source_ts: Optional[dt.datetime]
    lag_s: Optional[float]
    max_lag_s: Optional[float]

    @property
    def late(self) -> bool:
        """Whether the lag exceeds the SLA."""
        return self.max_lag_s is not None and self.lag_s is not None and self.lag_s > self.max_lag_s

    def line(self) -> str:
        """``<table>: lag 2h05m (newest source change 2024-01-01T00:59:00+00:00) > max_lag 1h``."""
        newest = self.newest_source_ts.isoformat() if self.newest_source_ts else "none"
        return (f"{self.table}: lag {format_duration(self.lag_s)} (newest source change {newest}) > "
                f"max_lag {format_duration(self.max_lag_s)}")


def format_duration(seconds: Optional[float]) -> str:
    """``seconds`` as ``1d2h03m``, ``2h05m``, ``4m10s`` or ``12s`` (``?`` for None)."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d{h}h{m:02d}m"
    if h:
        return f"{h}h{m:02d}m"
    return f"{m}m{s:02d}s" if m else f"{s}s"


def table_freshness(cfg: PipelineConfig, now: Optional[dt.datetime] = None, cat=None) -> list[TableFreshness]:
    """The freshness of every silver table of ``cfg`` at ``now`` (aware; default the current
    time), sorted by table: the tables in ``silver.namespace`` whose last silver commit recorded
    one of the pipeline's topics (``cdc.ledger-end-offsets``); tables no silver commit of this
    version recorded are left out. ``cat``: the pipeline's pyiceberg catalog (None: opened and
    closed here). Raises ``ValueError`` for a naive ``now``; catalog errors propagate."""
    now = dt.datetime.now(UTC) if now is None else now
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    own = cat is None
    cat = pyiceberg_catalog(cfg.catalog) if own else cat
    topics = set(cfg.topics())
    out = []
    try:
        namespace = cfg.silver.namespace
        if (namespace,) not in {tuple(n) for n in cat.list_namespaces()}:
            return []
        for ident in sorted(cat.list_tables(namespace)):
            props = recorded(pyiceberg_lineage(cat.load_table(ident)))
            if props is None:
                continue
            table_topics = tuple(sorted(json.loads(props.get(LEDGER_END_OFFSETS, "{}"))))
            if not topics & set(table_topics):
                continue
            ts = props.get(NEWEST_TS_MS)
            newest = None if ts is None else dt.datetime.fromtimestamp(int(ts) / 1000, UTC)
            out.append(TableFreshness(f"{namespace}.{ident[-1]}", table_topics, newest,
                                      None if newest is None else (now - newest).total_seconds(),
                                      cfg.freshness.table_max_lag_s(ident[-1])))
    finally:
        if own:
            cat.engine.dispose()
    return out


def check_freshness(cfg: PipelineConfig, now: Optional[dt.datetime] = None, cat=None) -> list[TableFreshness]:
    """Check every silver table of ``cfg`` against its SLA (``freshness.max_lag``, per table
    ``freshness.tables``) at ``now`` (:func:`table_freshness`); return the tables' freshness.

    Raises :class:`cdclake.errors.FreshnessError` with one line naming every table whose lag
    exceeds its SLA, its lag, its newest source change and the SLA."""
    tables = table_freshness(cfg, now, cat)
    late = [t for t in tables if t.late]
    if late:
        raise FreshnessError(f"{len(late)} silver table(s) of pipeline {cfg.name} past their freshness SLA "
                             "(freshness.max_lag): " + "; ".join(t.line() for t in late))
    return tables
