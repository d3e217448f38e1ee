"""Hour tables' data files written by the Python workers that hold the rows.

A stage's Spark tasks hand their rows to a :class:`HourFileWriter` (pyarrow's Parquet writer, the
settings pyiceberg's writer takes from the table's properties, Iceberg field ids in the Parquet
schema, column metrics from the footer as pyiceberg computes them: Iceberg spec, "Parquet" and
"Manifests"), one file per table partition (topic and landed hour) the task holds; each task
returns only the files' pyiceberg ``DataFile`` s, pickled (:data:`FILES_DDL`), which the driver
commits (:mod:`cdclake.lake.hours`). A task that fails or is retried leaves files no snapshot
names: orphans, which maintenance removes (Iceberg's ``remove_orphan_files``).

The JVM's writer (Iceberg's ``SparkWrite``) cost about 25 ms per file on the local file system
(a Hadoop configuration copied per writer, a ``chmod`` process per file without Hadoop's native
library, its checksum file), so that one topic per source table made land and normalize grow
with the topics, not with the records; and every value crossed from the Python workers into the
JVM to be written.
"""
from __future__ import annotations

import functools
import pickle
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Iterable, Iterator, Optional

if TYPE_CHECKING:
    import pyarrow as pa

#: The Spark DDL of what a writing task returns: one row per data file it wrote, the pyiceberg
#: ``DataFile`` pickled.
FILES_DDL = "data_file binary"
#: A file's buffered rows are written as one Parquet row group once they hold this many bytes of
#: Arrow data, before compression, unless the table's ``write.parquet.row-group-size-bytes`` says
#: another size (Iceberg's default; the Java writer counts compressed bytes, where CDC values
#: compress 20 to 50 times, so these row groups are smaller than its).
ROW_GROUP_ARROW_BYTES = 128 << 20
#: A task's rows buffered in all its files together, in Arrow bytes: past it, the largest buffer
#: is written out as a row group.
TASK_BUFFER_BYTES = 256 << 20
#: Arrow bytes per Parquet byte assumed for a table of ``compressed_groups`` until its writer has
#: written a row group (bronze's changes compress about 7 to 8 times): so that a file's first row
#: group is not an eighth of the others, a Spark task of its own for every reader.
FIRST_COMPRESSION_RATIO = 4.0
#: Files a task keeps open at once; the least recently written is finished past it (a partition
#: written again later starts a second file).
MAX_OPEN_FILES = 64
#: The table property of the row group size in bytes, which pyiceberg's Parquet settings do not
#: implement (they warn on each file); :class:`HourFileWriter` honours it in Arrow bytes.
ROW_GROUP_BYTES_PROPERTY = "write.parquet.row-group-size-bytes"


@dataclass(frozen=True)
class HourTable:
    """One hour table as its writing tasks need it (picklable): ``name`` (``namespace.table``),
    its metadata as JSON (``metadata_json``: the current schema, partition spec, properties and
    location, as the driver loaded them), ``order``: columns each row group's rows are sorted by,
    and ``plain``: columns written without dictionary encoding (values that seldom repeat, such as
    raw keys and values: a dictionary tried and dropped for every page costs more than it saves),
    and ``compressed_groups``: row groups sized in Parquet bytes, as Iceberg's
    ``write.parquet.row-group-size-bytes`` means them, rather than in Arrow bytes (bronze, whose
    readers skip row groups by their statistics, wants few large sorted ones; raw, which normalize
    deals out to its tasks by row group, many small ones)."""

    name: str
    metadata_json: str
    order: tuple[str, ...] = ()
    plain: tuple[str, ...] = ()
    compressed_groups: bool = False

    @cached_property
    def metadata(self):
        """The pyiceberg ``TableMetadata``."""
        from pyiceberg.table.metadata import TableMetadataUtil

        return TableMetadataUtil.parse_raw(self.metadata_json)

    @cached_property
    def row_group_bytes(self) -> int:
        """Arrow bytes of a row group (:data:`ROW_GROUP_BYTES_PROPERTY`, :data:`ROW_GROUP_ARROW_BYTES`)."""
        return int(self.metadata.properties.get(ROW_GROUP_BYTES_PROPERTY, ROW_GROUP_ARROW_BYTES))

    @cached_property
    def arrow_schema(self) -> "pa.Schema":
        """The table's Arrow schema, Iceberg field ids in the fields' metadata."""
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        return schema_to_pyarrow(self.metadata.schema())

    @cached_property
    def statistics(self) -> tuple:
        """pyiceberg's column metrics plan and Parquet path to field id mapping of the table's
        schema and properties, as its writer computes them for each file (here once)."""
        return parquet_statistics(self.metadata.schema(), self.metadata.properties)

    @cached_property
    def locations(self):
        """pyiceberg's location provider of the table (where its writer puts data files)."""
        from pyiceberg.table.locations import load_location_provider

        return load_location_provider(table_location=self.metadata.location, table_properties=self.metadata.properties)

    @cached_property
    def writer_options(self) -> dict:
        """pyarrow ``ParquetWriter`` options from the table's properties, as pyiceberg's writer
        takes them (codec, level, page and dictionary sizes), dictionary encoding off for ``plain``."""
        from pyiceberg.io.pyarrow import _get_parquet_writer_kwargs

        props = {k: v for k, v in self.metadata.properties.items() if k != ROW_GROUP_BYTES_PROPERTY}
        options = _get_parquet_writer_kwargs(props)
        if self.plain:
            options["use_dictionary"] = [c for c in _leaves(self.arrow_schema) if c.split(".")[0] not in self.plain]
        return options

    @cached_property
    def io(self):
        """The table's pyiceberg ``FileIO``."""
        from pyiceberg.io import load_file_io

        return load_file_io(dict(self.metadata.properties), self.metadata.location)


#: Microseconds in an hour (the ``hours`` partition transform's unit over ``landed_hour``).
HOUR_US = 3_600_000_000


#: Runs of one partition and sort key a batch may hand :meth:`HourFileWriter.add` (more when its
#: rows are many: one per 256 rows) before it is sorted there (a gather of every column).
MAX_RUNS = 64


def _runs(topics, hours, ordered: list) -> list[int]:
    """Where each run of rows of one topic, hour and sort key (``ordered``: columns) starts."""
    import pyarrow.compute as pc

    n = len(topics)
    if n <= 1:
        return [0]
    changed = functools.reduce(pc.or_, [_differs(c.slice(1), c.slice(0, n - 1)) for c in (topics, hours, *ordered)])
    return [0, *[i + 1 for i in pc.indices_nonzero(changed).to_pylist()]]


def _differs(a, b):
    """Row by row, whether ``a`` and ``b`` differ, a null equal to a null only (a null sort key,
    such as MySQL's schema, is one run, not a run per row)."""
    import pyarrow.compute as pc

    return pc.coalesce(pc.not_equal(a, b), pc.xor(pc.is_null(a), pc.is_null(b)))


@dataclass
class _File:
    key: tuple[str, int]
    buffered: list = field(default_factory=list)
    buffered_bytes: int = 0
    path: Optional[str] = None
    out: object = None
    sink: object = None
    writer: object = None
    partition: object = None


class HourFileWriter:
    """The files a task writes into :class:`HourTable` ``table``: :meth:`add` takes Arrow batches
    holding its columns (by name; others are ignored, missing ones are null), :meth:`close`
    returns the pyiceberg ``DataFile`` of every file written. One file per ``(kafka_topic,
    landed_hour)`` partition, more when it is written again after :data:`MAX_OPEN_FILES` others;
    row groups of about ``table.row_group_bytes`` Arrow bytes (Parquet bytes, as Iceberg's
    property means them, for a table of ``compressed_groups``), each sorted by
    ``table.order``. Files are placed and named as pyiceberg's writer places them (its location
    provider: ``<location>/data/kafka_topic=<topic>/landed_hour_hour=<yyyy-mm-dd-hh>/...``)."""

    def __init__(self, table: HourTable):
        self.table = table
        self._files: dict[tuple[str, int], _File] = {}
        self._open: dict[tuple[str, int], None] = {}  # insertion order: least recently written first
        self._done: list = []
        self._bytes = 0
        self._arrow_written = 0  # Arrow bytes written, and the Parquet bytes they became
        self._parquet_written = 0

    def add(self, batch) -> None:
        """Buffer the rows of ``batch`` (a pyarrow ``RecordBatch`` or ``Table``), by partition."""
        import pyarrow as pa

        if batch.num_rows == 0:
            return
        table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        table = self._conform(table)
        n = table.num_rows

        def keyed(t):
            """``(topics, hours, sort key columns, run starts)`` of ``t``."""
            topics, hours = t.column("kafka_topic"), t.column("landed_hour").cast(pa.int64())
            ordered = [t.column(c) for c in self.table.order]
            return topics, hours, ordered, _runs(topics, hours, ordered)

        topics, hours, ordered, starts = keyed(table)
        if self.table.order and len(starts) > max(MAX_RUNS, n // 256):  # sort keys interleaved: sorted here
            table = table.sort_by([(c, "ascending") for c in ("kafka_topic", "landed_hour", *self.table.order)])
            topics, hours, ordered, starts = keyed(table)
        topic_list, hour_list = topics.take(starts).to_pylist(), hours.take(starts).to_pylist()
        sort_keys = list(zip(*(c.take(starts).to_pylist() for c in ordered))) if ordered else [()] * len(starts)
        for j, start in enumerate(starts):
            stop = starts[j + 1] if j + 1 < len(starts) else n
            if topic_list[j] is None or hour_list[j] is None:
                raise ValueError(f"{self.table.name}: a row without kafka_topic or landed_hour")
            self._buffer((topic_list[j], hour_list[j] // HOUR_US), table.slice(start, stop - start), sort_keys[j])
        while self._bytes > TASK_BUFFER_BYTES:
            self._flush(max(self._files.values(), key=lambda f: f.buffered_bytes))

    def _conform(self, table: "pa.Table") -> "pa.Table":
        """``table``'s columns in the file schema: ordered, typed and named as the table's."""
        import pyarrow as pa

        cols = [table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
                for f in self.table.arrow_schema]
        return pa.Table.from_arrays(cols, names=self.table.arrow_schema.names).cast(self.table.arrow_schema)

    def _buffer(self, key: tuple[str, int], rows: "pa.Table", sort_key: tuple) -> None:
        f = self._files.setdefault(key, _File(key))
        f.buffered.append((sort_key, rows))
        size = rows.nbytes
        f.buffered_bytes += size
        self._bytes += size
        if f.buffered_bytes >= self._group_arrow_bytes():
            self._flush(f)

    def _flush(self, f: _File) -> None:
        """Write ``f``'s buffered rows as one row group (opening its file); past
        :data:`MAX_OPEN_FILES` open files, finish the least recently written."""
        if not f.buffered:
            return
        self._write_group(f)
        self._open.pop(f.key, None)
        self._open[f.key] = None
        while len(self._open) > MAX_OPEN_FILES:
            self._finish(self._files[next(iter(self._open))])

    def _write_group(self, f: _File) -> None:
        """Write ``f``'s buffered rows (sorted by ``table.order``) as row groups of its file.

        The buffer holds runs of rows of one sort key each (:meth:`add`): the runs are put in
        the order of their keys, ascending, nulls last, runs of one key in the order they came,
        which is the stable sort of the rows by ``table.order`` without moving a value (the
        sort's gather of every column cost a twelfth of a normalize task)."""
        import pyarrow as pa

        runs = f.buffered
        if self.table.order:
            runs = sorted(runs, key=lambda run: tuple((v is None, "" if v is None else v) for v in run[0]))
        rows = pa.concat_tables([r for _, r in runs])
        self._bytes -= f.buffered_bytes
        f.buffered, f.buffered_bytes = [], 0
        if f.writer is None:
            self._start(f)
        # a buffer past the size (one large batch) is cut into row groups of about the size, all
        # of one size (no small last group)
        groups = max(1, -(-rows.nbytes // self._group_arrow_bytes()))
        before = f.sink.tell()
        f.writer.write_table(rows, row_group_size=max(1, -(-rows.num_rows // groups)))
        self._arrow_written += rows.nbytes
        self._parquet_written += f.sink.tell() - before

    def _group_arrow_bytes(self) -> int:
        """Arrow bytes of a row group: ``table.row_group_bytes``; for a table of
        ``compressed_groups``, as many as make that many Parquet bytes by the compression of the
        rows this writer wrote so far (none yet: :data:`FIRST_COMPRESSION_RATIO`), at most
        :data:`TASK_BUFFER_BYTES`."""
        if not self.table.compressed_groups:
            return self.table.row_group_bytes
        ratio = self._arrow_written / self._parquet_written if self._parquet_written > 0 else FIRST_COMPRESSION_RATIO
        return int(min(TASK_BUFFER_BYTES, max(1, self.table.row_group_bytes * max(1.0, ratio))))

    def _start(self, f: _File) -> None:
        from pyiceberg.partitioning import PartitionFieldValue, PartitionKey

        meta = self.table.metadata
        spec, schema = meta.spec(), meta.schema()
        f.partition = PartitionKey(field_values=[PartitionFieldValue(field=p, value=v)
                                                 for p, v in zip(spec.fields, f.key)],
                                   partition_spec=spec, schema=schema)
        f.path = self.table.locations.new_data_location(data_file_name=f"00000-0-{uuid.uuid4()}.parquet",
                                                        partition_key=f.partition)
        f.out, f.sink, f.writer = open_parquet(self.table.io, f.path, self.table.arrow_schema, self.table.writer_options)

    def _finish(self, f: _File) -> None:
        """Write ``f``'s buffered rows, close its file and keep its ``DataFile``; its partition
        starts a new file when written again."""
        self._open.pop(f.key, None)
        self._files.pop(f.key, None)
        if f.buffered:
            self._write_group(f)
        if f.writer is None:
            return
        self._done.append(close_parquet(f.out, f.sink, f.writer, f.path, f.partition.partition,
                                        self.table.metadata.default_spec_id, self.table.statistics))

    def close(self) -> list:
        """Write every buffered row, close every file; the pyiceberg ``DataFile`` s written."""
        for f in list(self._files.values()):
            self._finish(f)
        done, self._done = self._done, []
        return done


def parquet_statistics(schema, properties: dict) -> tuple:
    """pyiceberg's column metrics plan and Parquet path to field id mapping of Iceberg ``schema``
    and table ``properties``, as its writer computes them for each file: compute them once per
    table and pass them to :func:`close_parquet` for each of its files."""
    from pyiceberg.io.pyarrow import compute_statistics_plan, parquet_path_to_id_mapping

    return compute_statistics_plan(schema, properties), parquet_path_to_id_mapping(schema)


def open_parquet(io, path: str, schema: "pa.Schema", options: dict) -> tuple:
    """A new Parquet data file at ``path`` through pyiceberg ``FileIO`` ``io``: ``(output file,
    stream, pyarrow ParquetWriter)``, the writer on Arrow ``schema`` (Iceberg field ids in its
    fields' metadata) with ``options`` (as pyiceberg takes them from the table's properties:
    :attr:`HourTable.writer_options`) and decimals stored as integers, as pyiceberg's writer does."""
    import pyarrow.parquet as pq

    out = io.new_output(path)
    sink = out.create(overwrite=True)
    return out, sink, pq.ParquetWriter(sink, schema, store_decimal_as_integer=True, **options)


def close_parquet(out, sink, writer, path: str, partition, spec_id: int, statistics: tuple):
    """Close a file of :func:`open_parquet`; its pyiceberg ``DataFile`` (content data, Parquet, in
    partition ``partition`` (a pyiceberg ``Record``) of spec ``spec_id``), its size and column
    metrics from the written footer as pyiceberg computes them (``statistics``: its statistics
    plan and Parquet path to field id mapping, :attr:`HourTable.statistics`)."""
    from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    try:
        writer.close()
    finally:
        sink.close()
    stats = data_file_statistics_from_parquet_metadata(writer.writer.metadata, *statistics)
    return DataFile.from_args(content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
                              partition=partition, file_size_in_bytes=len(out), sort_order_id=None,
                              spec_id=spec_id, equality_ids=None, key_metadata=None, **stats.to_serialized_dict())


def _leaves(schema: "pa.Schema") -> Iterator[str]:
    import pyarrow as pa

    def walk(prefix: str, t) -> Iterator[str]:
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                yield from walk(f"{prefix}.{t.field(i).name}", t.field(i).type)
        elif pa.types.is_map(t):
            yield from walk(f"{prefix}.key_value.key", t.key_type)
            yield from walk(f"{prefix}.key_value.value", t.item_type)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            yield from walk(f"{prefix}.list.element", t.value_type)
        else:
            yield prefix

    for f in schema:
        yield from walk(f.name, f.type)


def file_batch(files: Iterable) -> "pa.RecordBatch":
    """``files`` (pyiceberg ``DataFile`` s) as one Arrow batch of :data:`FILES_DDL`."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([pa.array([pickle.dumps(f) for f in files], pa.binary())],
                                      names=["data_file"])


def data_files(rows: Iterable) -> list:
    """The pyiceberg ``DataFile`` s of collected :data:`FILES_DDL` rows."""
    return [pickle.loads(r["data_file"] if isinstance(r, dict) else r.data_file) for r in rows]


def write_local(table: HourTable, batches: Iterable) -> list:
    """``batches`` written by one :class:`HourFileWriter` in this process (the driver's few rows,
    e.g. the offset ledger's); the ``DataFile`` s."""
    w = HourFileWriter(table)
    for b in batches:
        w.add(b)
    return w.close()
