"""Normalize's writing tasks: the parsed rows of a task written as bronze, quarantine and control
data files by the Python worker that parsed them (:class:`cdclake.lake.HourFileWriter`), with the
counts per topic the driver logs and returns.

A task returns one row per data file (``table``, ``data_file``: the pickled pyiceberg ``DataFile``)
and one row of counts (``table`` null, ``counts``: a pickled :class:`TaskCounts`); the driver
commits the files table by table (:func:`cdclake.lake.commit_hours`).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

from cdclake.lake import BRONZE_SCHEMA, STAGED_MAPS, HourFileWriter, HourTable, change_shapes
from cdclake.normalize.rows import OUTPUT_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa

#: The Spark DDL of a writing task's rows.
TASK_OUTPUT_DDL = "table string, data_file binary, counts binary"
#: Quarantined records a task keeps per topic for the driver's log.
QUARANTINE_SAMPLES = 5
#: The kinds of parsed rows, in the order their tables are committed.
KINDS = ("change", "quarantine", "control")


@dataclass
class TaskCounts:
    """What the tasks of one normalize run parsed, per topic: ``counts[topic]`` is ``[raw
    records, change rows, quarantined, control, raw records read by the columnar fast path]``;
    ``samples[topic]`` up to :data:`QUARANTINE_SAMPLES` ``(partition, offset, reason)`` of its
    quarantined records. ``shapes``: ``{id: shape}`` of the change shapes its bronze rows name
    (:mod:`cdclake.lake.shapes`)."""

    counts: dict = field(default_factory=dict)
    samples: dict = field(default_factory=dict)
    shapes: dict = field(default_factory=dict)

    def add(self, other: "TaskCounts") -> None:
        """Add ``other``'s counts and samples (up to the limit) to these."""
        for t, c in other.counts.items():
            mine = self.counts.setdefault(t, [0] * 5)
            for i, n in enumerate(c):
                mine[i] += n
        for t, s in other.samples.items():
            mine = self.samples.setdefault(t, [])
            mine.extend(s[:QUARANTINE_SAMPLES - len(mine)])
        self.shapes.update(other.shapes)


def bronze_batch(staged: "pa.Table", shapes: Optional[dict] = None) -> "pa.Table":
    """Staged change rows (:data:`cdclake.lake.STAGED_SCHEMA`: maps as key and value arrays) as
    the columns of :data:`cdclake.lake.BRONZE_SCHEMA`, each map in its keys' order (null where its
    key array is null), as :func:`cdclake.lake.bronze_frame` builds them in Spark, and the shape
    columns ``shape_id`` and ``key_change`` (:func:`cdclake.lake.change_shapes`), whose shapes
    are added to ``shapes`` (``{id: shape}``) when given. Raises ValueError when a map's key and
    value arrays differ in length."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cols = {}
    for name in BRONZE_SCHEMA.names:
        if name in ("shape_id", "key_change"):
            continue
        if name not in STAGED_MAPS:
            cols[name] = staged.column(name)
            continue
        k, v = (staged.column(c).combine_chunks() for c in STAGED_MAPS[name])
        if not pc.all(pc.equal(pc.fill_null(pc.list_value_length(k), 0),
                               pc.fill_null(pc.list_value_length(v), 0))).as_py():
            raise ValueError(f"bronze column {name}: key and value arrays of different lengths")
        if not k.offsets.equals(v.offsets):
            v = pa.array(v.to_pylist(), v.type)  # the same layout as the keys'
        if not k.offsets.equals(v.offsets):
            raise ValueError(f"bronze column {name}: value arrays laid out unlike the keys")
        cols[name] = pa.MapArray.from_arrays(k.offsets, k.values, v.values, mask=k.is_null())
    ids, moved, seen = change_shapes(staged)
    if shapes is not None:
        shapes.update(seen)
    cols["shape_id"], cols["key_change"] = ids, moved
    return pa.table({name: cols[name] for name in BRONZE_SCHEMA.names})


def write_parsed(tables: dict[str, HourTable], parsed: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
    """``mapInArrow`` body after :func:`cdclake.normalize.rows.parse_batches`: its tagged batches
    (``parsed``) written into the data files of ``tables`` (``{kind: HourTable}`` of
    :data:`KINDS`); one Arrow batch of :data:`TASK_OUTPUT_DDL` at the end."""
    import pyarrow as pa

    writers = {kind: HourFileWriter(t) for kind, t in tables.items()}
    counts = TaskCounts()
    for batch in parsed:
        if batch.num_rows == 0:
            continue
        tagged = pa.Table.from_batches([batch])
        kind = tagged.column("_kind")
        _count(tagged, counts)
        for k in KINDS:
            part = _rows_of(tagged, kind, k)
            if part is None:
                continue
            part = part.select(OUTPUT_COLUMNS[k].names)
            writers[k].add(bronze_batch(part, counts.shapes) if k == "change" else part)
    names, files = [], []
    for k in KINDS:
        for f in writers[k].close():
            names.append(tables[k].name)
            files.append(pickle.dumps(f))
    names.append(None)
    files.append(None)
    yield pa.RecordBatch.from_arrays(
        [pa.array(names, pa.string()), pa.array(files, pa.binary()),
         pa.array([None] * (len(names) - 1) + [pickle.dumps(counts)], pa.binary())],
        names=["table", "data_file", "counts"])


def _rows_of(tagged: "pa.Table", kind: "pa.ChunkedArray", k: str) -> Optional["pa.Table"]:
    """The rows of ``tagged`` whose ``kind`` is ``k``, in their order; a slice when they are one
    run (as :func:`cdclake.normalize.rows.tagged_batch` lays them out), with no value copied.
    None when there are none."""
    import pyarrow.compute as pc

    mask = pc.fill_null(pc.equal(kind, k), False)
    n = pc.sum(mask).as_py() or 0
    if n == 0:
        return None
    first = pc.index(mask, True).as_py()
    if pc.all(mask.slice(first, n)).as_py():
        return tagged.slice(first, n)
    return tagged.filter(mask)


def _count(tagged: "pa.Table", counts: TaskCounts) -> None:
    """Add the counts of one tagged batch to ``counts`` (one group-by over its topics) and its
    first quarantined records to the samples."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = tagged.column("_kind")
    first = pc.fill_null(tagged.column("_first"), False)
    flags = {"raw": first, "change": pc.equal(kind, "change"), "quarantine": pc.equal(kind, "quarantine"),
             "control": pc.equal(kind, "control"), "fast": pc.and_(first, pc.fill_null(tagged.column("_fast"), False))}
    names = list(flags)
    grouped = pa.table({"kafka_topic": tagged.column("kafka_topic"),
                        **{n: f.cast(pa.int64()) for n, f in flags.items()}}
                       ).group_by("kafka_topic").aggregate([(n, "sum") for n in names])
    sums = [grouped.column(f"{n}_sum").to_pylist() for n in names]
    for j, topic in enumerate(grouped.column("kafka_topic").to_pylist()):
        c = counts.counts.setdefault(topic, [0] * 5)
        for i in range(5):
            c[i] += sums[i][j] or 0
    if pc.any(flags["quarantine"]).as_py():
        q = tagged.filter(flags["quarantine"])
        for topic, p, o, reason in zip(*(q.column(c).to_pylist()
                                         for c in ("kafka_topic", "kafka_partition", "kafka_offset", "reason"))):
            mine = counts.samples.setdefault(topic, [])
            if len(mine) < QUARANTINE_SAMPLES:
                mine.append((p, o, reason))


def task_results(rows: Iterable) -> tuple[dict[str, list], TaskCounts]:
    """The collected rows of :func:`write_parsed`'s tasks: ``({table: [DataFile]}, TaskCounts)``."""
    files: dict[str, list] = {}
    counts = TaskCounts()
    for r in rows:
        if r["table"] is None:
            counts.add(pickle.loads(r["counts"]))
        else:
            files.setdefault(r["table"], []).append(pickle.loads(r["data_file"]))
    return files, counts
