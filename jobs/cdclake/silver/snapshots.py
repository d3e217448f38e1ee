"""What a silver commit records in its Iceberg snapshot summary, and the hourly tags.

**Snapshot summary.** The commit that merges a window's changes into a silver table (Spark's
``MERGE INTO`` or ``INSERT``, pyiceberg's overwrite or append, Iceberg's ``RowDelta``: whichever
path took the table) carries these properties in its snapshot summary (Iceberg table spec,
"Snapshots": ``summary`` is a string map; keys of our own are prefixed ``cdc.``):

- ``cdc.window-start``, ``cdc.window-end``: the window ``[start, end)`` (ISO-8601, UTC);
- ``cdc.ledger-end-offsets``: JSON ``{topic: {partition: end offset}}`` of the table's topics: the
  offset ledger's end offset (exclusive) of the window's last landed range of every partition
  (:func:`ledger_end_offsets`);
- ``cdc.newest-source-position``: JSON array of decimal strings, the source position
  (``source_position``, :mod:`cdclake.positions`) of the newest change applied to the table so far;
- ``cdc.newest-source-ts-ms``: the newest source commit time applied so far (``source_ts_ms``,
  ms since the epoch), absent while no change carried one.

The two ``newest`` values are running maxima: the window's newest, or the one the table's last
silver commit recorded when that is newer (a rerun or a late hour never moves them back), read
from the newest snapshot in the current snapshot's ancestry that carries them
(:func:`recorded`). A table's freshness is read from them (:mod:`cdclake.freshness`): a topic that
goes silent leaves them where they are while the lag to now grows.

Spark's SQL commits take the properties from Iceberg's ``CommitMetadata``, a thread-local map
that ``SparkWrite`` and ``SparkPositionDeltaWrite`` add to every commit of the driver thread that
runs the write (Iceberg 1.10, ``org.apache.iceberg.spark.CommitMetadata``); silver merges several
tables at once from driver threads (``silver.parallel_tables``), each pinned to its own JVM thread
by PySpark, so :func:`spark_commit_properties` sets it for one write of one thread. pyiceberg's and
the ``RowDelta``'s commits take them as arguments (:class:`cdclake.silver.files.TableFiles`).

**Hourly tags.** After a window's silver commits, each silver table the window changed gets the
tag ``cdc-<YYYYMMDDHH>`` of the window's last hour ``H`` (:func:`hour_tag`: ``H = end - 1 h``) on
its current snapshot: ``VERSION AS OF 'cdc-2024010114'`` reads the table as it was once every
change landed in hours up to 14:00-15:00 UTC was applied, the state at the end of that hour. A
rerun replaces the tag (the same state: reruns leave silver unchanged); a window older than the
newest hour tagged on the table leaves the tags alone, since the table's state then holds later
hours. A window of several hours tags only its last one. Tables the window did not change keep
their tags: their state at the end of ``H`` is that of their newest tag before ``H``. A tag keeps
``max-ref-age-ms`` = ``maintenance.hourly_tag_retention_hours`` (Iceberg's ``expire_snapshots``
drops it once its snapshot is older), and the maintenance job removes the tags whose hour ended
more than that many hours ago (:func:`remove_hour_tags`); Iceberg never expires a snapshot a tag
references. ``silver.hourly_tags: false`` turns tagging off. A table the file-level path
rewrites (a pyiceberg overwrite) gets its tag in that same commit (:func:`commit_tag`); every
other one in a commit of its own after the window's merges (:func:`tag_tables`).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
from typing import TYPE_CHECKING, Iterator, Mapping, Optional

from cdclake.config import PipelineConfig
from cdclake.silver.files import _java
from cdclake.window import UTC, Window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

WINDOW_START, WINDOW_END = "cdc.window-start", "cdc.window-end"
LEDGER_END_OFFSETS = "cdc.ledger-end-offsets"
NEWEST_POSITION, NEWEST_TS_MS = "cdc.newest-source-position", "cdc.newest-source-ts-ms"
#: The prefix of the hourly tags, and their names' pattern: ``cdc-YYYYMMDDHH``.
TAG_PREFIX = "cdc-"
TAG_RE = re.compile(r"^cdc-(\d{10})$")


def ledger_end_offsets(cfg: PipelineConfig, window: Window, topics: list[str], cat=None) -> dict[str, dict[str, int]]:
    """``{topic: {partition (text): end offset}}``: the offset ledger's ``end_offset`` (exclusive)
    of the latest landed hour inside ``window`` of every partition of ``topics`` (topics without a
    range in the window are left out), from :func:`cdclake.lake.ledger_latest`; ``cat``: the
    pipeline's pyiceberg catalog (None: opened here)."""
    from cdclake.lake import ledger_latest

    if not topics:
        return {}
    rows = ledger_latest(cfg, topics, window.start, window.end, cat=cat)
    out: dict[str, dict[str, int]] = {}
    for t, p, end in zip(*(rows.column(c).to_pylist() for c in ("kafka_topic", "kafka_partition", "end_offset"))):
        out.setdefault(t, {})[str(p)] = int(end)
    return out


def batch_properties(window: Window, topics: list[str], ends: Mapping[str, Mapping[str, int]],
                     newest_position: Optional[list], newest_ts_ms: Optional[int]) -> dict[str, str]:
    """The snapshot summary properties (module docstring) of one table's batch before they meet
    what the table recorded (:func:`commit_properties`): ``topics`` the table's topics in the
    window, ``ends`` :func:`ledger_end_offsets`, ``newest_position`` and ``newest_ts_ms`` the
    batch's newest source position (a sequence of integers) and source time (ms)."""
    props = {WINDOW_START: window.start.isoformat(), WINDOW_END: window.end.isoformat(),
             LEDGER_END_OFFSETS: json.dumps({t: dict(ends[t]) for t in sorted(topics) if t in ends}, sort_keys=True)}
    if newest_position is not None:
        props[NEWEST_POSITION] = json.dumps([str(int(v)) for v in newest_position])
    if newest_ts_ms is not None:
        props[NEWEST_TS_MS] = str(int(newest_ts_ms))
    return props


def _position(text: Optional[str]) -> Optional[tuple[int, ...]]:
    return None if text is None else tuple(int(v) for v in json.loads(text))


def commit_properties(batch: Mapping[str, str], previous: Optional[Mapping[str, str]]) -> dict[str, str]:
    """``batch`` (:func:`batch_properties`) with the newest position and source time raised to
    what the table's last silver commit recorded (``previous``, :func:`recorded`; None: nothing),
    so that they are running maxima. Positions compare element by element as integers."""
    out = dict(batch)
    if previous:
        old_ts, new_ts = previous.get(NEWEST_TS_MS), batch.get(NEWEST_TS_MS)
        if old_ts is not None and (new_ts is None or int(old_ts) > int(new_ts)):
            out[NEWEST_TS_MS] = old_ts
        old_pos, new_pos = _position(previous.get(NEWEST_POSITION)), _position(batch.get(NEWEST_POSITION))
        if old_pos is not None and (new_pos is None or old_pos > new_pos):
            out[NEWEST_POSITION] = previous[NEWEST_POSITION]
    return out


def recorded(summaries: Iterator[Mapping[str, str]]) -> Optional[dict[str, str]]:
    """The first of ``summaries`` (snapshot summaries, the current snapshot's first, then its
    ancestors') that a silver commit wrote (it holds ``cdc.window-end``), or None."""
    for s in summaries:
        if s and WINDOW_END in s:
            return dict(s)
    return None


def pyiceberg_lineage(table) -> Iterator[dict[str, str]]:
    """The summaries of pyiceberg table ``table``'s current snapshot and its ancestors, newest first."""
    meta = table.metadata
    snap = meta.current_snapshot()
    while snap is not None:
        yield dict(snap.summary.additional_properties) if snap.summary is not None else {}
        snap = None if snap.parent_snapshot_id is None else meta.snapshot_by_id(snap.parent_snapshot_id)


def java_lineage(jt) -> Iterator[dict[str, str]]:
    """The summaries of Iceberg (Java) table ``jt``'s current snapshot and its ancestors, newest first."""
    snap = jt.currentSnapshot()
    while snap is not None:
        yield dict(snap.summary())
        parent = snap.parentId()
        snap = None if parent is None else jt.snapshot(parent)


def java_table(spark: "SparkSession", cfg: PipelineConfig, namespace: str, name: str):
    """Iceberg's (Java) table ``namespace.name`` of the pipeline's catalog, loaded now in the
    driver's JVM, or None when it does not exist (a batch of a new table that wrote nothing)."""
    jcat, _ = _java(spark, cfg.catalog.name)
    ice = spark._jvm.org.apache.iceberg
    levels = spark.sparkContext._gateway.new_array(spark._jvm.java.lang.String, 1)
    levels[0] = namespace
    ident = ice.catalog.TableIdentifier.of(ice.catalog.Namespace.of(levels), name)
    return jcat.loadTable(ident) if jcat.tableExists(ident) else None


@contextlib.contextmanager
def spark_commit_properties(spark: "SparkSession", props: Mapping[str, str]):
    """Inside the block, every Iceberg commit that Spark SQL makes from this driver thread carries
    ``props`` in its snapshot summary (Iceberg's thread-local ``CommitMetadata``, set through
    reflection since its Java ``withCommitProperties`` takes a Java callable); cleared on leaving.
    Needs PySpark's pinned threads (``PYSPARK_PIN_THREAD``, on by default), which give each Python
    thread its own JVM thread."""
    jvm = spark._jvm
    from py4j.java_gateway import get_java_class

    field = get_java_class(jvm.org.apache.iceberg.spark.CommitMetadata).getDeclaredField("COMMIT_PROPERTIES")
    field.setAccessible(True)
    local = field.get(None)
    values = jvm.java.util.HashMap()
    for k, v in props.items():
        values.put(k, v)
    local.set(values)
    try:
        yield
    finally:
        local.remove()


def hour_tag(window: Window) -> str:
    """``cdc-<YYYYMMDDHH>`` of the window's last hour (``end - 1 h``, UTC): the tag of the state
    at the end of that hour."""
    return _end_tag(window.end)


def _end_tag(end: dt.datetime) -> str:
    return TAG_PREFIX + (end.astimezone(UTC) - dt.timedelta(hours=1)).strftime("%Y%m%d%H")


def tag_max_age_ms(cfg: PipelineConfig) -> Optional[int]:
    """The hourly tags' ``max-ref-age-ms``: ``maintenance.hourly_tag_retention_hours`` in ms (None: kept)."""
    retention = cfg.maintenance.hourly_tag_retention_hours
    return None if retention is None else retention * 3_600_000


def commit_tag(cfg: PipelineConfig, props: Optional[Mapping[str, str]], tags: Iterator[str]) -> Optional[str]:
    """The hourly tag a pyiceberg silver commit carrying summary ``props`` (:func:`commit_properties`)
    sets on its own snapshot, in the same commit: :func:`hour_tag` of the window ``props`` name, or
    None when ``silver.hourly_tags`` is off, ``props`` name no window, or ``tags`` (the names of
    the table's refs) hold an hourly tag of a later hour (the rule of :func:`tag_tables`)."""
    if not cfg.silver.hourly_tags or not props or WINDOW_END not in props:
        return None
    tag = _end_tag(dt.datetime.fromisoformat(props[WINDOW_END]))
    hour = tag_hour(tag)
    if any(h is not None and h > hour for h in map(tag_hour, tags)):
        return None
    return tag


def tag_hour(tag: str) -> Optional[dt.datetime]:
    """The hour (aware, UTC) an hourly tag names, or None for another ref's name."""
    m = TAG_RE.match(tag)
    return None if m is None else dt.datetime.strptime(m.group(1), "%Y%m%d%H").replace(tzinfo=UTC)


def _tags(jt) -> dict[str, dt.datetime]:
    out = {}
    for entry in jt.refs().entrySet():
        name = entry.getKey()
        hour = tag_hour(name)
        if hour is not None and entry.getValue().isTag():
            out[name] = hour
    return out


def tag_tables(spark: "SparkSession", cfg: PipelineConfig, names: list[str], window: Window) -> list[str]:
    """Tag the current snapshot of each silver table ``names`` (unquoted names in
    ``silver.namespace``) with :func:`hour_tag` of ``window`` as the module docstring says (a
    replaced tag on a rerun; none when the table holds a tag of a later hour, has no snapshot or
    does not exist), with
    ``max-ref-age-ms`` from ``maintenance.hourly_tag_retention_hours``. Returns the names tagged.
    Iceberg's errors propagate (the tables are merged: a rerun of the window tags them)."""
    tag = hour_tag(window)
    hour = tag_hour(tag)
    max_age_ms = tag_max_age_ms(cfg)
    done = []
    for name in names:
        jt = java_table(spark, cfg, cfg.silver.namespace, name)
        snap = None if jt is None else jt.currentSnapshot()
        if snap is None:
            continue
        tags = _tags(jt)
        if any(h > hour for h in tags.values()):
            continue
        manage = jt.manageSnapshots()
        manage = (manage.replaceTag if tag in tags else manage.createTag)(tag, snap.snapshotId())
        if max_age_ms is not None:
            manage = manage.setMaxRefAgeMs(tag, max_age_ms)
        manage.commit()
        done.append(name)
    log.info("silver: tagged %d table(s) %s", len(done), tag)
    return done


def remove_hour_tags(spark: "SparkSession", cfg: PipelineConfig, namespace: str, name: str,
                     before: dt.datetime) -> list[str]:
    """Remove the hourly tags of table ``namespace.name`` whose hour ends at or before ``before``
    (aware), in one commit; return their names, oldest first."""
    jt = java_table(spark, cfg, namespace, name)
    if jt is None:
        return []
    old = sorted((h, t) for t, h in _tags(jt).items() if h + dt.timedelta(hours=1) <= before)
    if old:
        manage = jt.manageSnapshots()
        for _, t in old:
            manage = manage.removeTag(t)
        manage.commit()
    return [t for _, t in old]
