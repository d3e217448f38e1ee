"""What a pipeline's runs read and write, named for Airflow Assets and OpenLineage.

- **Assets** (Airflow): every silver table, and the history table beside it
  (``sources[].history``), is the asset ``iceberg://<catalog>/<namespace>/<table>``
  (:func:`asset_uri`; catalog: ``catalog.name``, namespace: ``silver.namespace`` or
  ``<silver.namespace>_history``). The silver gate adds one asset event per table the window's
  latest silver run changed (:func:`window_changes`: the run's rows of ``bronze.run_metrics``
  with ``changes_merged`` > 0), with :meth:`ChangedTable.extra` as the event's extra; a table the
  run did not change gets none.
- **Lineage** (OpenLineage): :func:`stage_datasets` lists a stage's inputs and outputs as
  :class:`LineageDataset` (namespace, name, schema fields). Kafka topics follow OpenLineage's
  naming spec (https://openlineage.io/docs/spec/naming: namespace ``kafka://<host>:<port>`` of the
  first bootstrap server, name the topic); an Iceberg table is named by where its files are, as
  OpenLineage's Spark integration names Iceberg tables (namespace ``file`` for a local path, else
  ``<scheme>://<authority>``; name the table location's path), its schema from the table's
  Iceberg schema. land: the window's topics -> ``raw.kafka_records``, ``raw.land_manifest``;
  normalize: ``raw.kafka_records`` -> ``bronze.changes``, ``bronze.quarantine``,
  ``bronze.control_events``; silver: ``bronze.changes`` -> the tables :func:`window_changes` lists.

Plain values only: Airflow and OpenLineage objects are made from them in ``plugins/cdc_operators.py``.
"""
from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import Iterable, Optional
from urllib.parse import quote, urlsplit

from cdclake.catalog import pyiceberg_catalog
from cdclake.config import PipelineConfig
from cdclake.lake import (BRONZE_TABLE, CONTROL_TABLE, MANIFEST_TABLE, QUARANTINE_TABLE, RAW_TABLE, RUN_METRICS_TABLE,
                          history_namespace)
from cdclake.window import UTC, Window

log = logging.getLogger(__name__)

#: The Asset URI scheme of a lake table.
ASSET_SCHEME = "iceberg"
#: Each stage's lake tables read and written (``namespace.table``); silver's outputs are the tables it changed.
STAGE_TABLES = {
    "land": ((), (RAW_TABLE, MANIFEST_TABLE)),
    "normalize": ((RAW_TABLE,), (BRONZE_TABLE, QUARANTINE_TABLE, CONTROL_TABLE)),
    "silver": ((BRONZE_TABLE,), ()),
}


def asset_uri(cfg: PipelineConfig, namespace: str, table: str) -> str:
    """``iceberg://<catalog.name>/<namespace>/<table>``, each part percent-encoded (a name from
    messages may hold any character)."""
    return f"{ASSET_SCHEME}://{quote(cfg.catalog.name, safe='')}/{quote(namespace, safe='')}/{quote(table, safe='')}"


def split_quoted(name: str) -> list[str]:
    """The parts of a Spark name as the run metrics store it (``lake.silver.`a.b```, backticks
    doubled inside a quoted part): ``["lake", "silver", "a.b"]``."""
    parts, cur, quoted, i = [], "", False, 0
    while i < len(name):
        c = name[i]
        if c == "`":
            if quoted and name[i + 1:i + 2] == "`":
                cur += "`"
                i += 1
            else:
                quoted = not quoted
        elif c == "." and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    return parts + [cur]


@dataclass(frozen=True)
class ChangedTable:
    """A lake table a silver run changed, and by how much.

    ``namespace``, ``table``: the table's Iceberg identifier (unquoted); ``uri``: its Asset URI
    (:func:`asset_uri`); ``changes``: the window's change rows merged (rows), ``upserts``,
    ``deletes``: keys inserted or updated, and deleted (keys; for a history table those of its
    silver table); ``topics``: the Kafka topics the changes came from; ``window``: the run's window.
    """

    namespace: str
    table: str
    uri: str
    window: Window
    changes: int
    upserts: int
    deletes: int
    topics: tuple[str, ...] = ()

    def extra(self, pipeline: str) -> dict:
        """The asset event's extra (JSON values): ``pipeline``, ``table`` (``namespace.table``),
        ``window_start``, ``window_end`` (ISO-8601, UTC), ``changes``, ``keys_upserted``,
        ``keys_deleted`` (counts) and ``topics``."""
        return {"pipeline": pipeline, "table": f"{self.namespace}.{self.table}",
                "window_start": self.window.start.isoformat(), "window_end": self.window.end.isoformat(),
                "changes": self.changes, "keys_upserted": self.upserts, "keys_deleted": self.deletes,
                "topics": list(self.topics)}


def _utc(ts: Optional[dt.datetime]) -> Optional[dt.datetime]:
    return None if ts is None else (ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC))


def changed_tables(cfg: PipelineConfig, window: Window, rows: Iterable[dict]) -> list[ChangedTable]:
    """The tables the latest silver run of ``window`` changed, from run metrics rows (dicts of
    ``bronze.run_metrics`` columns, any stage, window and pipeline).

    Keeps the rows of stage ``silver``, pipeline ``cfg.name``, the window's bounds and topics, and
    of those the latest ``run_at`` (one run's rows share it); a table is changed when its rows'
    ``changes_merged`` sum to more than 0. A changed silver table whose topic keeps a history
    (``sources[].history``) changed its history table too. Sorted by namespace and table.
    """
    topics = set(window.topics or cfg.topics())
    mine = [r for r in rows if r.get("stage") == "silver" and r.get("pipeline") == cfg.name
            and r.get("kafka_topic") in topics and _utc(r.get("window_start")) == window.start
            and _utc(r.get("window_end")) == window.end]
    if not mine:
        return []
    latest = max(_utc(r["run_at"]) for r in mine)
    totals: dict[str, dict] = {}
    for r in mine:
        if _utc(r["run_at"]) != latest or not r.get("silver_table") or not r.get("changes_merged"):
            continue
        t = totals.setdefault(r["silver_table"], {"changes": 0, "upserts": 0, "deletes": 0, "topics": []})
        t["changes"] += int(r["changes_merged"])
        t["upserts"] += int(r.get("keys_upserted") or 0)
        t["deletes"] += int(r.get("keys_deleted") or 0)
        t["topics"].append(r["kafka_topic"])
    out = []
    for quoted, t in totals.items():
        *_, namespace, table = split_quoted(quoted)
        topics_of = tuple(sorted(t["topics"]))
        counts = dict(window=window, changes=t["changes"], upserts=t["upserts"], deletes=t["deletes"], topics=topics_of)
        out.append(ChangedTable(namespace, table, asset_uri(cfg, namespace, table), **counts))
        if any(cfg.source(topic).history for topic in topics_of):
            hist = history_namespace(cfg)
            out.append(ChangedTable(hist, table, asset_uri(cfg, hist, table), **counts))
    return sorted(out, key=lambda c: (c.namespace, c.table))


def window_changes(cfg: PipelineConfig, window: Window) -> list[ChangedTable]:
    """:func:`changed_tables` of the window's silver rows in ``bronze.run_metrics``, read with
    pyiceberg (the pipeline's and stage's rows of the window's bounds). An empty list when the
    table does not exist or holds no silver row of the window (the silver job's metrics were not
    written: it logs a warning then, and so does this). Raises what opening the catalog raises
    (:func:`cdclake.catalog.pyiceberg_catalog`)."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.expressions import And, EqualTo

    cat = pyiceberg_catalog(cfg.catalog)
    try:
        try:
            table = cat.load_table(RUN_METRICS_TABLE)
        except NoSuchTableError:
            rows = []
        else:
            where = And(EqualTo("pipeline", cfg.name), EqualTo("stage", "silver"),
                        EqualTo("window_start", window.start.isoformat()), EqualTo("window_end", window.end.isoformat()))
            rows = table.scan(row_filter=where).to_arrow().to_pylist()
    finally:
        cat.engine.dispose()
    if not rows:
        log.warning("no silver run metrics in %s for %s: no table is reported as changed", RUN_METRICS_TABLE, window)
    return changed_tables(cfg, window, rows)


@dataclass(frozen=True)
class LineageDataset:
    """A dataset as OpenLineage names it: ``namespace``, ``name``, ``fields`` (``(column, type)``
    in table order; Iceberg's type names, as ``map<string, string>``), ``table`` (the lake table's
    ``namespace.table``; empty for a Kafka topic)."""

    namespace: str
    name: str
    fields: tuple[tuple[str, str], ...] = field(default=())
    table: str = ""


def kafka_dataset(cfg: PipelineConfig, topic: str) -> LineageDataset:
    """A Kafka topic: namespace ``kafka://<host>:<port>`` of the first of ``kafka.bootstrap_servers``
    (resolved: a pipeline naming ``kafka.connection`` must be loaded with its connections), name the topic."""
    first = (cfg.kafka.bootstrap_servers or "").split(",")[0].strip()
    first = first.split("://", 1)[-1]  # a listener written with its protocol, as PLAINTEXT://host:port
    return LineageDataset(f"kafka://{first}", topic)


def location_name(location: str) -> tuple[str, str]:
    """``(namespace, name)`` of a table location: ``file`` and the path for a local one
    (``file:///w/t`` or ``/w/t``), else ``<scheme>://<authority>`` and the path."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        return "file", parts.path
    return f"{parts.scheme}://{parts.netloc}", parts.path


def table_datasets(cfg: PipelineConfig, tables: Iterable[tuple[str, str]]) -> list[LineageDataset]:
    """The lake tables ``tables`` (``(namespace, table)``) as :class:`LineageDataset`, named by their
    location, with their Iceberg schemas; a table that does not exist is left out. One catalog opened."""
    from pyiceberg.exceptions import NoSuchTableError

    out = []
    cat = pyiceberg_catalog(cfg.catalog)
    try:
        for namespace, table in tables:
            try:
                tbl = cat.load_table((namespace, table))
            except NoSuchTableError:
                continue
            ns, path = location_name(tbl.location())
            out.append(LineageDataset(ns, path, tuple((f.name, str(f.field_type)) for f in tbl.schema().fields),
                                      f"{namespace}.{table}"))
    finally:
        cat.engine.dispose()
    return out


def stage_datasets(cfg: PipelineConfig, stage: str, window: Window) -> tuple[list[LineageDataset], list[LineageDataset]]:
    """``(inputs, outputs)`` of one run of ``stage`` (``land``, ``normalize``, ``silver``) over
    ``window``, after it ran (module docstring); ``([], [])`` for another stage. Raises what
    opening the catalog raises."""
    if stage not in STAGE_TABLES:
        return [], []
    reads, writes = ([tuple(t.split(".", 1)) for t in names] for names in STAGE_TABLES[stage])
    inputs = [kafka_dataset(cfg, t) for t in (window.topics or cfg.topics())] if stage == "land" else []
    if stage == "silver":
        writes = [(c.namespace, c.table) for c in window_changes(cfg, window)]
    return inputs + table_datasets(cfg, reads), table_datasets(cfg, writes)
