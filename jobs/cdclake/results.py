"""What the stages and the gates return: one frozen result type each.

- :class:`LandResult` (:func:`cdclake.land.land`): records landed and future-stamped, per topic.
- :class:`NormalizeResult` (:func:`cdclake.normalize.normalize`): :class:`TopicCounts` per topic.
- :class:`SilverResult` (:func:`cdclake.silver.build_silver`): one :class:`TableResult` per merged
  silver table.
- :class:`GateResult` (:func:`cdclake.gates.run_gate`): the frames a gate validated and its report.

The three stage results give their run metrics (:mod:`cdclake.metrics`) the same way, as
:class:`StageResult` says: :meth:`StageResult.metric_values` lists ``(topic, {run metrics column:
value})`` per row, and ``lag_from_bronze`` tells whether the rows' lag is read from the window's
bronze changes. The metrics read nothing else of them.

For the callers that read them as the plain values they replace, each result also reads as one:
a land result as ``{topic: records}``, a normalize result as ``{topic: counts}`` and its counts as
``{"raw", "changes", "quarantined", "control"}``, a gate result as ``{"stage", "window", "frames",
"data_docs"}`` (each indexes, iterates and compares equal to that dict), a silver result as the
sequence of its tables.

Counts are numbers of things (records, rows, keys), never bytes.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Protocol, runtime_checkable

__all__ = ["GateResult", "LandResult", "NormalizeResult", "SilverResult", "StageResult", "TableResult",
           "TopicCounts"]

#: ``(kafka_topic, {run metrics column: value})`` of one run metrics row (:data:`cdclake.metrics.METRIC_COLUMNS`).
MetricValues = tuple[str, dict[str, Any]]


@runtime_checkable
class StageResult(Protocol):
    """A stage result the run metrics read (:func:`cdclake.metrics.metric_rows`).

    ``lag_from_bronze``: whether the rows' ``newest_source_ts`` and ``lag_s`` are read from the
    window's bronze changes (:func:`cdclake.metrics.newest_source_ts`).
    """

    lag_from_bronze: ClassVar[bool]

    def metric_values(self, topics: Sequence[str]) -> list[MetricValues]:
        """One ``(topic, {column: value})`` per run metrics row of a run over ``topics`` (the
        window's topics), in row order; the columns are the stage's own figures, the rest of the
        row is the same for every stage."""
        ...


class _ReadsAsMapping(Mapping):
    """A result that reads as the mapping :meth:`_mapping` gives: ``result[key]``, ``get``,
    ``items``, ``len``, and ``==`` any mapping with the same items."""

    @abstractmethod
    def _mapping(self) -> Mapping:
        """The items the result reads as."""

    def __getitem__(self, key):
        return self._mapping()[key]

    def __iter__(self):
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self._mapping())


@dataclass(frozen=True, eq=False)
class LandResult(_ReadsAsMapping):
    """What :func:`cdclake.land.land` returns.

    ``records``: ``{topic: Kafka records landed}`` (records; one entry per topic of the window, 0
    when it had none). ``future_stamped``: ``{topic: records among them stamped more than
    ``land.max_future_skew_s`` ahead of the time they were read}`` (records); None when they were
    not counted (the run metric is then null).

    Reads as ``records``: ``result[topic]``, ``result == {topic: n}``.
    Run metrics: ``records_landed``, ``future_stamped``, one row per topic.
    """

    records: Mapping[str, int]
    future_stamped: Optional[Mapping[str, int]] = None

    lag_from_bronze: ClassVar[bool] = False

    def _mapping(self) -> Mapping[str, int]:
        return self.records

    def metric_values(self, topics: Sequence[str]) -> list[MetricValues]:
        future = self.future_stamped
        return [(t, {"records_landed": int(self.records.get(t, 0)),
                     "future_stamped": None if future is None else int(future.get(t, 0))}) for t in topics]


@dataclass(frozen=True, eq=False)
class TopicCounts(_ReadsAsMapping):
    """What normalize made of one topic's raw records of a window.

    ``raw``: raw records read (records); ``changes``: change rows written to ``bronze.changes``
    (rows: a multi-row record gives several); ``quarantined``: records written to
    ``bronze.quarantine``; ``control``: records written to ``bronze.control_events`` (records).

    Reads as ``{"raw": n, "changes": n, "quarantined": n, "control": n}``.
    """

    raw: int = 0
    changes: int = 0
    quarantined: int = 0
    control: int = 0

    def _mapping(self) -> dict[str, int]:
        return {"raw": self.raw, "changes": self.changes, "quarantined": self.quarantined, "control": self.control}


@dataclass(frozen=True, eq=False)
class NormalizeResult(_ReadsAsMapping):
    """What :func:`cdclake.normalize.normalize` returns.

    ``counts``: ``{topic: TopicCounts}``, one entry per topic of the window (zeros when it had no
    raw record).

    Reads as ``counts``: ``result[topic]["quarantined"]``, ``result == {topic: {"raw": …}}``.
    Run metrics: ``records_parsed`` (raw), ``change_rows``, ``quarantined``, ``control``, one row
    per topic, with the lag read from bronze.
    """

    counts: Mapping[str, TopicCounts]

    lag_from_bronze: ClassVar[bool] = True

    def _mapping(self) -> Mapping[str, TopicCounts]:
        return self.counts

    def metric_values(self, topics: Sequence[str]) -> list[MetricValues]:
        return [(t, {"records_parsed": int(c.raw), "change_rows": int(c.changes), "quarantined": int(c.quarantined),
                     "control": int(c.control)}) for t in topics for c in [self.counts.get(t, TopicCounts())]]


@dataclass
class TableResult:
    """What one silver table's merge did (:func:`cdclake.silver.apply_table`); filled in while it runs.

    ``table``: the silver table's quoted name (``catalog.namespace.table``); ``changes``: the
    window's bronze change rows of the table, over all its topics (rows); ``upserts``,
    ``deletes``: keys the MERGE inserted or updated, and deleted, after deduplication (keys);
    ``truncated``: a truncate emptied the table of older rows; ``added_columns``: columns added to
    the silver (or history) table (names); ``history_versions``: SCD type 2 version rows merged
    into its history table (rows; 0 without ``sources[].history``); ``topics``: the Kafka topics
    the table's changes of the window came from; ``silver_name``: the silver table's name in its
    namespace, unquoted; ``newest_source_ts_ms``: the newest source commit time applied to the
    table so far, as its silver commit recorded it (ms since the epoch; None: unknown,
    :mod:`cdclake.silver.snapshots`); ``hour_tag``: the hourly tag its file-level commit set on
    its own snapshot (empty: none, the stage tags the table after its commit).
    """

    table: str
    changes: int = 0
    upserts: int = 0
    deletes: int = 0
    truncated: bool = False
    added_columns: list[str] = field(default_factory=list)
    history_versions: int = 0
    topics: list[str] = field(default_factory=list)
    silver_name: str = ""
    newest_source_ts_ms: Optional[int] = None
    hour_tag: str = ""


@dataclass(frozen=True, eq=False)
class SilverResult(Sequence):
    """What :func:`cdclake.silver.build_silver` returns.

    ``tables``: one :class:`TableResult` per merged silver table, in the order they were summarized
    (grouped by silver name). Reads as that sequence: ``len(result)``, ``result[0]``, ``for t in result``.

    Run metrics: ``silver_table``, ``changes_merged`` (the table's changes, over all its topics),
    ``keys_upserted``, ``keys_deleted`` and ``newest_source_ts`` (the table's own freshness,
    :attr:`TableResult.newest_source_ts_ms` as an aware UTC datetime, when known), one row per
    table and topic of its ``topics``; a topic of the window with no change gets one row without
    table and 0 changes merged. Rows in topic, then table order; the lag of a row without its
    table's freshness is read from bronze.
    """

    tables: tuple[TableResult, ...] = ()

    lag_from_bronze: ClassVar[bool] = True

    def __getitem__(self, i):
        return self.tables[i]

    def __iter__(self):
        return iter(self.tables)

    def __len__(self) -> int:
        return len(self.tables)

    def metric_values(self, topics: Sequence[str]) -> list[MetricValues]:
        import datetime as dt

        def newest(r: TableResult) -> dict:
            if r.newest_source_ts_ms is None:
                return {}
            return {"newest_source_ts": dt.datetime.fromtimestamp(r.newest_source_ts_ms / 1000, dt.timezone.utc)}

        out = [(t, {"silver_table": r.table, "changes_merged": int(r.changes), "keys_upserted": int(r.upserts),
                    "keys_deleted": int(r.deletes), **newest(r)}) for r in self.tables for t in r.topics]
        seen = {t for t, _ in out}
        out += [(t, {"changes_merged": 0}) for t in topics if t not in seen]
        return sorted(out, key=lambda v: (v[0], v[1].get("silver_table") or ""))


@dataclass(frozen=True, eq=False)
class GateResult(_ReadsAsMapping):
    """What :func:`cdclake.gates.run_gate` returns for a gate that passed.

    ``stage``: ``land``, ``normalize`` or ``silver``; ``window``: the window as text
    (``str(Window)``); ``frames``: ``{frame name: rows validated}`` (rows); ``data_docs``: the path
    of the run's ``gate.html``.

    Reads as :meth:`as_dict`: ``result["frames"]``.
    """

    stage: str
    window: str
    frames: Mapping[str, int]
    data_docs: str

    def _mapping(self) -> dict[str, Any]:
        return {"stage": self.stage, "window": self.window, "frames": self.frames, "data_docs": self.data_docs}

    def as_dict(self) -> dict[str, Any]:
        """``{"stage", "window", "frames", "data_docs"}``, plain values (what an Airflow task returns)."""
        return {"stage": self.stage, "window": self.window, "frames": dict(self.frames), "data_docs": self.data_docs}
