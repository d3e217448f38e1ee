"""Hour tables at the catalog: loading one for the writing tasks, finding and reading a window's
data files, and replacing a window's files in one commit.

The driver replaces a window's hours in one commit (:func:`commit_hours`): every data file of the
window's partitions out, the files the tasks wrote (:mod:`cdclake.lake.files`) in, one snapshot,
as Spark's ``overwrite`` by a filter matching whole partitions made it. It reads small hour
tables (the offset ledger) itself (:func:`read_hours`) and deals a window's files to reading
tasks (:func:`plan_splits`, :func:`read_splits`).

The pyiceberg subclasses every commit of the library uses are here too: :func:`transaction`
(staged metadata computed once per state) and :func:`overwrite` (no manifest of deleted entries
carried forward).
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

from cdclake.catalog import pyiceberg_catalog, with_retries
from cdclake.config import PipelineConfig
from cdclake.lake.files import HourTable
from cdclake.window import Window

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

_PYICEBERG: dict = {}


def _classes() -> dict:
    """The pyiceberg subclasses of :func:`transaction` and :func:`overwrite`, made once."""
    if not _PYICEBERG:
        from pyiceberg.table import Transaction
        from pyiceberg.table.update import update_table_metadata
        from pyiceberg.table.update.snapshot import _OverwriteFiles

        class CachedTransaction(Transaction):
            _cached: tuple = (None, None, None)

            @property
            def table_metadata(self):
                base, updates, metadata = self._cached
                if not self._updates:  # pyiceberg's metadata models are frozen: no copy to protect
                    return self._table.metadata
                if base is not self._table.metadata or updates is not self._updates:
                    metadata = update_table_metadata(self._table.metadata, self._updates)
                    self._cached = (self._table.metadata, self._updates, metadata)
                return metadata

        class LiveManifestsOverwrite(_OverwriteFiles):
            def _existing_manifests(self) -> list:
                return [m for m in super()._existing_manifests()
                        if m.has_added_files() or m.has_existing_files() or m.added_snapshot_id == self._snapshot_id]

            def _build_manifest_evaluator(self, spec_id: int):
                evaluate, lock = super()._build_manifest_evaluator(spec_id), threading.Lock()

                def one_at_a_time(manifest) -> bool:
                    with lock:
                        return evaluate(manifest)

                return one_at_a_time

        _PYICEBERG.update(transaction=CachedTransaction, overwrite=LiveManifestsOverwrite)
    return _PYICEBERG


def transaction(table):
    """A pyiceberg ``Transaction`` on ``table`` whose ``table_metadata`` is computed once per
    staged state. pyiceberg's own replays the staged updates and deep-copies the whole metadata
    (every snapshot and log entry) on each read, about twenty times in one overwrite, so that a
    commit's cost grew with the table's history (apache/iceberg-python issue 2673). The cache is
    keyed on the identity of the table's metadata and of the staged updates' tuple, which every
    staged update replaces, as in the upstream proposal (apache/iceberg-python pull request 3302);
    with nothing staged it is the table's own metadata (pyiceberg's models are frozen)."""
    return _classes()["transaction"](table)


def overwrite(tx, properties: dict):
    """pyiceberg's overwrite of the table of transaction ``tx`` (a snapshot exists), with
    ``properties`` in its snapshot summary, whose new manifest list leaves out the manifests of
    earlier snapshots that hold no live file (only entries of files an earlier overwrite
    deleted), as Iceberg's Java commits do. pyiceberg carries them forward, so that every hourly
    rewrite of a table added one manifest that every later commit and scan read (the same fault
    was fixed in iceberg-go, apache/iceberg-go issue 1153). Its manifest evaluator is called by one
    thread at a time: pyiceberg calls it from a thread pool to find the deleted files, and its
    visitor keeps the manifest being evaluated in an attribute, so that two threads at once could
    skip the manifest of a file to delete and fail the commit ("Missing required files to
    delete"), as pyiceberg's partition evaluator once did (apache/iceberg-python pull request 115)."""
    from pyiceberg.table.refs import MAIN_BRANCH
    from pyiceberg.table.snapshots import Operation

    return _classes()["overwrite"](operation=Operation.OVERWRITE, transaction=tx, io=tx._table.io,
                                   branch=MAIN_BRANCH, snapshot_properties=properties)


def stage_replace(tx, old: list, new: list, properties: dict) -> None:
    """Stage in transaction ``tx`` (:func:`transaction`) one snapshot that deletes data files
    ``old`` and adds ``new`` (pyiceberg ``DataFile`` s), ``properties`` in its summary: an
    :func:`overwrite`, or a fast append when nothing is deleted."""
    with (overwrite(tx, properties) if old
          else tx.update_snapshot(snapshot_properties=properties).fast_append()) as update:
        for f in old:
            update.delete_data_file(f)
        for f in new:
            update.append_data_file(f)


def hour_table(cfg: PipelineConfig, name: str, order: tuple[str, ...] = (), plain: tuple[str, ...] = (),
               compressed_groups: bool = False) -> HourTable:
    """:class:`HourTable` ``name`` of the pipeline's catalog, loaded now (the driver). It must be
    partitioned by ``kafka_topic`` and ``hours(landed_hour)``: anything else raises ValueError."""
    table = _load(cfg, name)
    spec = table.spec()
    if [str(f.transform) for f in spec.fields] != ["identity", "hour"] or [
            table.schema().find_column_name(f.source_id) for f in spec.fields] != ["kafka_topic", "landed_hour"]:
        raise ValueError(f"{name}: partition spec {spec} is not (kafka_topic, hours(landed_hour))")
    return HourTable(name, table.metadata.model_dump_json(), tuple(order), tuple(plain), compressed_groups)


def _load(cfg: PipelineConfig, name: str, cat=None):
    """pyiceberg's table ``name`` (``namespace.table``), through catalog ``cat`` (None: opened and
    closed here)."""
    if cat is not None:
        return with_retries(lambda: cat.load_table(tuple(name.split("."))), cfg.catalog, f"loading {name}")
    cat = pyiceberg_catalog(cfg.catalog)
    try:
        return _load(cfg, name, cat)
    finally:
        cat.engine.dispose()


def hour_files(table, topics: Iterable[str], start: Optional[dt.datetime] = None,
               end: Optional[dt.datetime] = None) -> list:
    """The data files of pyiceberg ``table`` (an hour table: partitioned by ``kafka_topic`` and
    ``hours(landed_hour)``) in the partitions of ``topics`` whose hour is in ``[start, end)``
    (None: unbounded), at its current snapshot.

    The manifests are pruned by the hours (their partition summaries) and each live entry is
    matched by its partition values, without pyiceberg's scan planning: that evaluates a residual
    filter per file, about 1 ms each, most of the time of a gate over a thousand topics. Raises
    ValueError for delete files in those hours (hour tables are only ever overwritten) or a
    partition spec without those two fields."""
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThan
    from pyiceberg.expressions.visitors import manifest_evaluator
    from pyiceberg.manifest import ManifestContent

    wanted = set(topics)
    snapshot = table.current_snapshot()
    if snapshot is None or not wanted:
        return []
    lo = None if start is None else int(start.timestamp()) // 3600
    hi = None if end is None else int(end.timestamp()) // 3600
    schema, evaluators = table.schema(), {}
    for spec_id, spec in table.specs().items():
        fields = [(schema.find_column_name(f.source_id), str(f.transform)) for f in spec.fields]
        if fields[:2] != [("kafka_topic", "identity"), ("landed_hour", "hour")]:
            evaluators[spec_id] = None
            continue
        hours = AlwaysTrue()
        if lo is not None:
            hours = And(hours, GreaterThanOrEqual(spec.fields[1].name, lo))
        if hi is not None:
            hours = And(hours, LessThan(spec.fields[1].name, hi))
        evaluators[spec_id] = manifest_evaluator(spec, schema, hours)
    out = []
    for manifest in snapshot.manifests(table.io):
        evaluate = evaluators.get(manifest.partition_spec_id)
        if evaluate is None:
            raise ValueError(f"{table.name()}: partition spec {table.specs()[manifest.partition_spec_id]} is not "
                             f"(kafka_topic, hours(landed_hour))")
        if not evaluate(manifest):
            continue
        if manifest.content == ManifestContent.DELETES:
            raise ValueError(f"{table.name()}: delete files in an hour table")
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            topic, hour = f.partition[0], f.partition[1]
            if topic in wanted and (lo is None or hour >= lo) and (hi is None or hour < hi):
                out.append(f)
    return out


def window_files(table, window: Window, topics: list[str]) -> list:
    """:func:`hour_files` of ``topics`` in ``window``'s hours."""
    return hour_files(table, topics, window.start, window.end)


#: Threads reading an hour table's small files at once (:func:`read_hours`).
READ_THREADS = 8


def read_hours(cfg: PipelineConfig, name: str, topics: Iterable[str], start: Optional[dt.datetime] = None,
               end: Optional[dt.datetime] = None, columns: Optional[list[str]] = None, cat=None) -> "pa.Table":
    """The rows of hour table ``name`` in the partitions of ``topics`` and the hours ``[start,
    end)`` (:func:`hour_files`), read in this process by pyarrow (:data:`READ_THREADS` files at
    once, a tenth of the time of pyiceberg's scan over a thousand small files): for the driver's
    reads of an hour's small files, such as the offset ledger's and the gates'. Columns
    ``columns`` (None: all), by name (hour tables never rename a column), typed as the table's
    schema; a column added to the table after a file was written reads as nulls in its rows, as
    Iceberg reads it. ``cat``: the pipeline's pyiceberg catalog (None: opened and closed here)."""
    table = _load(cfg, name, cat)
    return read_files(table, hour_files(table, topics, start, end), columns)


def read_files(table, files: list, columns: Optional[list[str]] = None) -> "pa.Table":
    """The rows of the data files ``files`` (pyiceberg ``DataFile``\ s of hour table ``table``,
    as :func:`hour_files` lists them) read as :func:`read_hours` reads them."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = schema_to_pyarrow(table.schema())
    if columns is not None:
        schema = pa.schema([schema.field(c) for c in columns])
    paths = [f.file_path for f in files]

    def read(path: str) -> "pa.Table":
        with table.io.new_input(path).open() as stream:
            pf = pq.ParquetFile(stream)
            held = set(pf.schema_arrow.names)
            rows = pf.read(columns=[c for c in schema.names if c in held], use_threads=False)
        return pa.Table.from_arrays([rows[f.name].cast(f.type) if f.name in held else pa.nulls(rows.num_rows, f.type)
                                     for f in schema], schema=schema)

    with ThreadPoolExecutor(READ_THREADS) as pool:
        parts = list(pool.map(read, paths))
    return pa.concat_tables(parts) if parts else schema.empty_table()


#: The offset ledger's columns :func:`ledger_around` reads.
LEDGER_COLUMNS = ["kafka_topic", "kafka_partition", "landed_hour", "start_offset", "end_offset", "records"]


def ledger_around(cfg: PipelineConfig, parts: Iterable[tuple[str, int]], start: dt.datetime, end: dt.datetime,
                  cat=None) -> "pa.Table":
    """The offset ledger's rows around the hours ``[start, end)`` for the partitions ``parts``
    (``(topic, partition)``): every row of those hours, and per partition the rows of its latest
    hour before ``start`` and of its earliest hour at or after ``end``; columns
    :data:`LEDGER_COLUMNS` (kafka_topic string, kafka_partition int, landed_hour timestamp[us,
    UTC], start_offset, end_offset and records int64), sorted by topic, partition and hour.

    Land writes a range for every hour it lands, empty ones included, so after an hourly run the
    neighbours are the hour on each side: the ledger's files of the window and those two hours are
    read first (:func:`read_hours`), and every earlier (later) hour only for the topics of the
    partitions that have no range in the hour before (after) it (a first landing, a backfill after
    a gap). What is read so grows with the window and the topics, not with the hours kept: land
    plans from it (:func:`cdclake.land.plan`) and the land gate checks it
    (:func:`cdclake.gates.land_frames`), each window's ranges against its neighbours.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdclake.lake.schemas import MANIFEST_TABLE

    hour = dt.timedelta(hours=1)
    parts = sorted(set(parts))
    topics = sorted({t for t, _ in parts})
    read = [read_hours(cfg, MANIFEST_TABLE, topics, start - hour, end + hour, LEDGER_COLUMNS, cat)]

    def neighbours() -> tuple[dict, dict]:
        before: dict[tuple[str, int], dt.datetime] = {}
        after: dict[tuple[str, int], dt.datetime] = {}
        for rows in read:
            for t, p, h in zip(*(rows.column(c).to_pylist() for c in LEDGER_COLUMNS[:3])):
                if h < start and ((t, p) not in before or h > before[(t, p)]):
                    before[(t, p)] = h
                elif h >= end and ((t, p) not in after or h < after[(t, p)]):
                    after[(t, p)] = h
        return before, after

    before, after = neighbours()
    no_before = sorted({t for t, p in parts if (t, p) not in before})
    no_after = sorted({t for t, p in parts if (t, p) not in after})
    if no_before:
        read.append(read_hours(cfg, MANIFEST_TABLE, no_before, None, start - hour, LEDGER_COLUMNS, cat))
    if no_after:
        read.append(read_hours(cfg, MANIFEST_TABLE, no_after, end + hour, None, LEDGER_COLUMNS, cat))
    if len(read) > 1:
        before, after = neighbours()
    rows = pa.concat_tables(read)
    keep = [start <= h < end or h == before.get((t, p)) or h == after.get((t, p))
            for t, p, h in zip(*(rows.column(c).to_pylist() for c in LEDGER_COLUMNS[:3]))]
    rows = rows.filter(pa.array(keep, pa.bool_()))
    return rows.take(pc.sort_indices(rows, [(c, "ascending") for c in LEDGER_COLUMNS[:3]]))


def ledger_latest(cfg: PipelineConfig, topics: Iterable[str], start: Optional[dt.datetime] = None,
                  end: Optional[dt.datetime] = None, parts: Iterable[tuple[str, int]] = (), cat=None) -> "pa.Table":
    """Per partition of ``topics``, the offset ledger's row of its latest landed hour in ``[start,
    end)`` (None: unbounded); columns :data:`LEDGER_COLUMNS`, sorted by topic and partition. A
    partition with no range in those hours is absent.

    The ledger's files of each topic's latest hour are read first (the hours come from the
    manifests' partition values, no file is opened to find them); land writes a range for every
    partition it lands each hour, so after hourly runs that one hour holds every partition. Only
    the topics of the partitions ``parts`` (``(topic, partition)``) not found there are read in
    their earlier hours. What is read grows with the topics, not with the hours the ledger keeps:
    the end offsets a silver commit records (:func:`cdclake.silver.snapshots.ledger_end_offsets`)
    and where reconciliation starts reading Kafka (:mod:`cdclake.reconcile.inflight`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from cdclake.lake.schemas import MANIFEST_TABLE

    table = _load(cfg, MANIFEST_TABLE, cat)
    files = hour_files(table, topics, start, end)
    latest: dict[str, int] = {}
    for f in files:
        latest[f.partition[0]] = max(latest.get(f.partition[0], f.partition[1]), f.partition[1])
    rows = read_files(table, [f for f in files if f.partition[1] == latest[f.partition[0]]], LEDGER_COLUMNS)
    found = set(zip(rows.column("kafka_topic").to_pylist(), rows.column("kafka_partition").to_pylist()))
    missing = {t for t, p in parts if (t, p) not in found}
    if missing:
        earlier = [f for f in files if f.partition[0] in missing and f.partition[1] < latest[f.partition[0]]]
        rows = pa.concat_tables([rows, read_files(table, earlier, LEDGER_COLUMNS)])
    rows = rows.take(pc.sort_indices(rows, [(c, "ascending") for c in LEDGER_COLUMNS[:3]]))
    keys = list(zip(rows.column("kafka_topic").to_pylist(), rows.column("kafka_partition").to_pylist()))
    keep = [i == len(keys) - 1 or keys[i] != keys[i + 1] for i in range(len(keys))]
    return rows.filter(pa.array(keep, pa.bool_()))


#: Rows of the Arrow batches :func:`read_splits` yields (Spark's ``arrow.maxRecordsPerBatch``).
READ_BATCH_ROWS = 10_000


def plan_splits(cfg: PipelineConfig, table: HourTable, window: Window, topics: list[str], tasks: int,
                min_rows: int) -> list[list[tuple[str, list[int]]]]:
    """The data files of ``window``'s partitions of ``topics`` in hour table ``table`` (as
    :func:`window_files` finds them at the table's current snapshot) in about ``tasks`` reading
    tasks, or more of at least ``min_rows`` records each: each task a list of ``(file location, row
    group indexes)``. A file's row groups are dealt out one by one (their counts read from the
    files' footers) when there are fewer files than tasks; otherwise whole files are dealt,
    largest first, to the task holding the fewest records. ``[]`` when the window holds none."""
    import heapq

    import pyarrow.parquet as pq

    live = _load(cfg, table.name)
    files = [f for f in window_files(live, window, topics) if f.record_count]
    if not files:
        return []
    rows = sum(f.record_count for f in files)
    n = max(1, min(max(tasks, rows // max(1, min_rows)), rows))
    pieces: list[tuple[int, str, list[int]]] = []
    if len(files) < n:
        for f in files:
            with live.io.new_input(f.file_path).open() as stream:
                meta = pq.ParquetFile(stream).metadata
            pieces += [(meta.row_group(i).num_rows, f.file_path, [i]) for i in range(meta.num_row_groups)]
    else:
        pieces = [(f.record_count, f.file_path, []) for f in files]
    heap = [(0, i) for i in range(min(n, len(pieces)))]
    out: list[list[tuple[str, list[int]]]] = [[] for _ in heap]
    for size, path, groups in sorted(pieces, key=lambda p: -p[0]):
        load, i = heapq.heappop(heap)
        out[i].append((path, groups))
        heapq.heappush(heap, (load + size, i))
    return out


def read_splits(table: HourTable, split: list[tuple[str, list[int]]], columns: list[str]) -> Iterator:
    """The rows of one task of :func:`plan_splits` (``split``: file locations and row groups, all
    of a file's when none are named) as pyarrow ``RecordBatch`` es of ``columns`` (by name), read
    by pyarrow through the table's ``FileIO``: about :data:`READ_BATCH_ROWS` rows each, a file's
    small row groups put together (pyarrow reads a row group as batches of its own; the raw
    table's 8 MB row groups hold some 1,700 Debezium messages, and every batch costs its reader a
    fixed share of work), never rows of two files in one batch."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for path, groups in split:
        with table.io.new_input(path).open() as stream:
            pf = pq.ParquetFile(stream)
            held: list = []
            rows = 0
            for batch in pf.iter_batches(batch_size=READ_BATCH_ROWS, row_groups=groups or None, columns=columns,
                                         use_threads=False):
                if held and rows + batch.num_rows > READ_BATCH_ROWS:
                    yield held[0] if len(held) == 1 else pa.concat_batches(held)
                    held, rows = [], 0
                held.append(batch)
                rows += batch.num_rows
            if held:
                yield held[0] if len(held) == 1 else pa.concat_batches(held)


def commit_hours(cfg: PipelineConfig, name: str, window: Window, topics: list[str], files: list,
                 what: str) -> int:
    """Replace the rows of ``topics`` in ``window``'s hours of hour table ``name`` by the data files
    ``files`` (pyiceberg ``DataFile`` s written by :class:`HourFileWriter`), in one snapshot (an
    overwrite; an append when nothing is replaced; nothing when there is neither), ``what`` as its
    ``cdc.operation``. The table is loaded, its window's files found and the snapshot committed
    again while the catalog database is locked (:func:`cdclake.catalog.with_retries`: a locked
    commit wrote nothing; raises :class:`cdclake.errors.CatalogLocked` past the budget). Fails
    (pyiceberg's ``CommitFailedException``) when another commit came to the table after it was
    loaded. Returns the data files replaced."""
    cat = pyiceberg_catalog(cfg.catalog)

    def commit() -> list:
        table = _load(cfg, name, cat)
        old = window_files(table, window, topics)
        if old or files:
            with transaction(table) as tx:
                stage_replace(tx, old, files, {"cdc.operation": what, "cdc.window": str(window)})
        return old

    try:
        old = with_retries(commit, cfg.catalog, f"committing {name} for {window}")
    finally:
        cat.engine.dispose()
    log.info("%s: %d data files committed for %s (%d topics), %d replaced", name, len(files), window, len(topics),
             len(old))
    return len(old)
