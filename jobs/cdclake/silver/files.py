"""A silver table at the level of its files: read rows with their file and position, commit new
data files, and replace data files or add position-delete files, without a Spark job.

The table is read with pyiceberg (its metadata, its scan planning, its ``FileIO``) and pyarrow.
New data files are written by pyiceberg's own Parquet writer and location provider, as its
``write_file`` (the one its ``append`` uses, kept as the reference) writes them: one file per
bucket, the bucket computed by its transform, column metrics from the Parquet footer. Commits go
through a pyiceberg transaction that computes its staged metadata once per state
(:func:`cdclake.lake.transaction`). Position delete
files (Iceberg spec, "Position Delete Files": ``file_path`` field id 2147483546, ``pos`` field id
2147483545, sorted by both) are written with pyarrow and their metrics computed the same way.
A small table's touched buckets are rewritten whole in one pyiceberg overwrite
(:meth:`TableFiles.rewrite`), which keeps their file count down; for the others, whose rows are
replaced by position deletes (:meth:`TableFiles.commit`): pyiceberg cannot commit delete files, so
that commit is Iceberg's own ``RowDelta`` on the Spark
session's catalog (the driver's JVM), as Spark's merge-on-read MERGE makes it: each file is
handed over as the JSON of Iceberg's ``ContentFileParser`` (a few calls per file), and the row
delta is validated against every change committed since the snapshot read.

Only what a small batch of the silver stage needs: tables of format version 2 whose partition
spec is the silver stage's own (``bucket(N, first key column) AS _cdc_bucket``) or none (as
tombstone tables have), with position deletes only. Anything else raises :class:`NotFileLevel`
before anything is written, and the caller merges the table with Spark instead.
"""
from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional

from cdclake.errors import NotFileLevel
from cdclake.lake.hours import stage_replace, transaction

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

#: Column names of a read table's row file and position (:meth:`TableFiles.read`).
FILE_COLUMN, POS_COLUMN = "_cdc_file", "_cdc_pos"
#: Field ids of a position delete file's columns (Iceberg spec, reserved field ids).
DELETE_FILE_PATH_ID, DELETE_POS_ID = 2147483546, 2147483545
#: The partition field of a silver table (:func:`cdclake.silver.tables.ensure_silver_table`).
BUCKET_FIELD = "_cdc_bucket"

_JAVA: dict = {}
_JAVA_LOCK = threading.Lock()


def _java(spark: "SparkSession", catalog: str) -> tuple:
    """``(Iceberg catalog, JSON mapper)`` of Spark catalog ``catalog`` in the driver's JVM (kept)."""
    key = (id(spark), catalog)
    with _JAVA_LOCK:
        if key not in _JAVA:
            jvm = spark._jvm
            jcat = spark._jsparkSession.sessionState().catalogManager().catalog(catalog).icebergCatalog()
            _JAVA[key] = (jcat, jvm.org.apache.iceberg.util.JsonUtil.mapper())
        return _JAVA[key]


@dataclass
class TableFiles:
    """One Iceberg table as loaded now (a pyiceberg ``Table``, ``table``), read at its current
    snapshot (``snapshot_id``; None: no snapshot yet), with its bucket partition
    (``bucket_source``: the bucketed column's name, ``buckets``: N; None and 0 when unpartitioned).
    ``bucket_of_file`` and ``data_files``: the bucket and the pyiceberg ``DataFile`` of every data
    file :meth:`read` read."""

    spark: Any
    catalog: str
    namespace: str
    name: str
    table: Any
    snapshot_id: Optional[int]
    bucket_source: Optional[str]
    buckets: int
    bucket_of_file: dict = field(default_factory=dict)
    data_files: dict = field(default_factory=dict)

    @classmethod
    def load(cls, spark: "SparkSession", pycat, catalog: str, namespace: str, name: str) -> Optional["TableFiles"]:
        """Table ``namespace.name`` of the catalog (``pycat``: pyiceberg's catalog of Spark catalog
        ``catalog``), or None when it does not exist. Raises :class:`NotFileLevel` for a table of
        another format version or partition spec, or whose data files go to an object-store layout."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            table = pycat.load_table((namespace, name))
        except NoSuchTableError:
            return None
        if table.metadata.format_version != 2:
            raise NotFileLevel("format version is not 2")
        if table.properties.get("write.object-storage.enabled", "false").lower() == "true":
            raise NotFileLevel("an object-storage data layout")
        spec = table.spec()
        source, buckets = None, 0
        if spec.fields:
            f = spec.fields[0]
            transform = str(f.transform)
            if len(spec.fields) != 1 or f.name != BUCKET_FIELD or not transform.startswith("bucket["):
                raise NotFileLevel(f"partition spec {spec}")
            source, buckets = table.schema().find_field(f.source_id).name, int(transform[7:-1])
        snap = table.current_snapshot()
        return cls(spark, catalog, namespace, name, table, None if snap is None else snap.snapshot_id, source, buckets)

    @property
    def schema(self):
        """The table's pyiceberg ``Schema``."""
        return self.table.schema()

    def property(self, key: str) -> Optional[str]:
        """The table property ``key``, or None."""
        return self.table.properties.get(key)

    def arrow_schema(self) -> "pa.Schema":
        """The table's Arrow schema, Iceberg field ids in each field's metadata."""
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        return schema_to_pyarrow(self.schema)

    def buckets_of(self, values: list) -> list[int]:
        """The ``_cdc_bucket`` of rows whose bucketed column holds ``values`` (Python values of
        the column's type), by pyiceberg's bucket transform (Iceberg spec, "Bucket Transform
        Details"), the one its writer partitions rows with."""
        import pyarrow as pa
        from pyiceberg.transforms import BucketTransform

        ftype = self.schema.find_field(self.bucket_source).field_type
        arrow_type = self.arrow_schema().field(self.bucket_source).type
        return BucketTransform(self.buckets).pyarrow_transform(ftype)(pa.array(values, arrow_type)).to_pylist()

    def read(self, buckets: Optional[set[int]] = None) -> "pa.Table":
        """Every live row (position deletes applied) of the data files in ``buckets`` (None:
        all), in the table's schema, with :data:`FILE_COLUMN` (the data file's location) and
        :data:`POS_COLUMN` (int64, the row's position in it). Columns a file lacks are null;
        promoted types are cast. Raises :class:`NotFileLevel` for equality delete files."""
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyiceberg.manifest import DataFileContent

        target = self.arrow_schema()
        place = target.append(pa.field(FILE_COLUMN, pa.string())).append(pa.field(POS_COLUMN, pa.int64()))
        if self.snapshot_id is None:
            return place.empty_table()
        deleted: dict[str, pa.Table] = {}
        parts = []
        for task in self.table.scan(snapshot_id=self.snapshot_id).plan_files():
            data = task.file
            bucket = data.partition[0] if self.buckets else None
            if buckets is not None and bucket not in buckets:
                continue
            path = data.file_path
            drop = []
            for d in task.delete_files:
                if d.content != DataFileContent.POSITION_DELETES:
                    raise NotFileLevel("equality delete files")
                if d.file_path not in deleted:
                    deleted[d.file_path] = self._read_parquet(d.file_path, ["file_path", "pos"])
                dt = deleted[d.file_path]
                drop.append(dt.filter(pc.equal(dt["file_path"], path))["pos"])
            rows = _project(self._read_parquet(path), target)
            rows = rows.append_column(FILE_COLUMN, pa.array([path] * rows.num_rows, pa.string()))
            rows = rows.append_column(POS_COLUMN, pa.array(range(rows.num_rows), pa.int64()))
            if drop:
                gone = pa.chunked_array([c for x in drop for c in x.chunks], pa.int64())
                rows = rows.filter(pc.invert(pc.is_in(rows[POS_COLUMN], gone)))
            self.bucket_of_file[path] = bucket
            self.data_files[path] = data
            parts.append(rows)
        return pa.concat_tables(parts) if parts else place.empty_table()

    def rewrite(self, rows: list[dict], what: str = "", props: Optional[dict] = None, tag: Optional[str] = None,
                tag_max_age_ms: Optional[int] = None) -> bool:
        """Replace the data files :meth:`read` read (every data file of the buckets it was asked
        for) by new ones holding ``rows`` (dicts of the table's columns), in one pyiceberg
        overwrite (copy-on-write; an append when it read none), which fails when another commit
        came after the snapshot read. Position delete files of the replaced files are left to
        maintenance (they no longer match a live file). ``what`` goes to the snapshot summary as
        ``cdc.operation``, with ``props`` (:mod:`cdclake.silver.snapshots`). ``tag``: a tag set on
        the new snapshot in the same commit (created or moved; ``max-ref-age-ms``
        ``tag_max_age_ms``). Returns False when there is nothing to commit."""
        old = list(self.data_files.values())
        if not old and not rows:
            return False
        props = {**(props or {}), **({"cdc.operation": what} if what else {})}
        with transaction(self.table) as tx:
            stage_replace(tx, old, self._data_files(tx.table_metadata, rows), props)
            if tag:
                from pyiceberg.table.update.snapshot import ManageSnapshots

                ManageSnapshots(tx).create_tag(tx.table_metadata.current_snapshot().snapshot_id, tag,
                                               tag_max_age_ms).commit()
        return True

    def _read_parquet(self, path: str, columns: Optional[list[str]] = None) -> "pa.Table":
        import pyarrow.parquet as pq

        with self.table.io.new_input(path).open() as f:
            return pq.ParquetFile(f).read(columns=columns)  # one file: no dataset discovery

    def commit(self, rows: list[dict], deletes: Iterable[tuple[str, int]], what: str = "",
               props: Optional[dict] = None) -> bool:
        """Write ``rows`` (dicts of the table's columns, Python values as pyarrow takes them) as
        new data files (pyiceberg's writer: one per bucket) and ``deletes`` (``(data file
        location, position)`` of rows :meth:`read` read) as position delete files (one per
        bucket), then commit both in one ``RowDelta`` validated against the changes committed
        since the snapshot read (the data files it deletes from must still exist). ``what`` goes
        to the snapshot summary as ``cdc.operation``, with ``props``. Returns False when there is
        nothing to commit.
        Raises :class:`NotFileLevel` before writing anything without a Spark session (in a task)."""
        deletes = sorted(set(deletes))
        if not rows and not deletes:
            return False
        if self.spark is None:
            raise NotFileLevel("a position-delete commit is the driver's (Iceberg's RowDelta)")
        files = [("DATA", f, f.partition[0] if self.buckets else None)
                 for f in self._data_files(self.table.metadata, rows)]
        by_bucket: dict[Optional[int], list[tuple[str, int]]] = {}
        for path, pos in deletes:
            by_bucket.setdefault(self.bucket_of_file[path], []).append((path, pos))
        for bucket, part in sorted(by_bucket.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
            files.append(("POSITION_DELETES", self._write_deletes(part, bucket), bucket))
        jcat, mapper = _java(self.spark, self.catalog)
        ice = self.spark._jvm.org.apache.iceberg
        levels = self.spark.sparkContext._gateway.new_array(self.spark._jvm.java.lang.String, 1)
        levels[0] = self.namespace
        jt = jcat.loadTable(ice.catalog.TableIdentifier.of(ice.catalog.Namespace.of(levels), self.name))
        spec = jt.spec()
        delta = jt.newRowDelta()
        for content, f, bucket in files:
            parsed = ice.ContentFileParser.fromJson(mapper.readTree(self._file_json(content, f, bucket)), spec)
            (delta.addRows if content == "DATA" else delta.addDeletes)(parsed)
        if self.snapshot_id is not None:
            delta.validateFromSnapshot(self.snapshot_id)
        if deletes:
            delta.validateDataFilesExist(sorted({p for p, _ in deletes}))
            delta.validateDeletedFiles()
        delta.validateNoConflictingDataFiles()
        delta.validateNoConflictingDeleteFiles()
        for k, v in (props or {}).items():
            delta.set(k, v)
        if what:
            delta.set("cdc.operation", what)
        delta.commit()
        return True

    def _data_files(self, metadata, rows: list[dict], reference: bool = False) -> list:
        """``rows`` written as new data files, one per bucket, by pyiceberg's Parquet writer (the
        table's file format settings, column metrics from the footer); pyiceberg ``DataFile`` s.

        The rows are built in the table's Arrow schema (Iceberg field ids included), so each file
        goes straight to pyiceberg's format writer and location provider. ``write_file``, which
        its ``append`` uses, first projects every batch onto the file schema, reads its
        configuration files and hands each file to a thread pool: a third of a small table's
        merge. ``reference`` (and a table whose column names Parquet needs sanitized, or whose
        data file format is not Parquet) takes ``write_file``, which the tests compare this path
        with."""
        import pyarrow as pa
        from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
        from pyiceberg.schema import sanitize_column_names
        from pyiceberg.table import WriteTask

        if not rows:
            return []
        groups: dict[Optional[int], list[dict]] = {}
        buckets = self.buckets_of([r[self.bucket_source] for r in rows]) if self.buckets else [None] * len(rows)
        for r, b in zip(rows, buckets):
            groups.setdefault(b, []).append(r)
        schema, arrow, spec, write = metadata.schema(), self.arrow_schema(), metadata.spec(), uuid.uuid4()
        tasks = [WriteTask(write_uuid=write, task_id=i, schema=schema,
                           record_batches=pa.Table.from_pylist(part, schema=arrow).to_batches(),
                           partition_key=None if b is None else PartitionKey(
                               field_values=[PartitionFieldValue(field=spec.fields[0], value=b)],
                               partition_spec=spec, schema=schema))
                 for i, (b, part) in enumerate(groups.items())]
        parquet = metadata.properties.get("write.format.default", "parquet").lower() == "parquet"
        if reference or not parquet or sanitize_column_names(schema) != schema:
            from pyiceberg.io.pyarrow import write_file

            return list(write_file(self.table.io, metadata, iter(tasks)))
        return self._write_data_files(metadata, tasks, arrow)

    def _write_data_files(self, metadata, tasks: list, arrow: "pa.Schema") -> list:
        """``WriteTask`` s (their batches in the table's Arrow schema ``arrow``) as Parquet data
        files, one each, named and placed, their writer set and their metrics computed as
        pyiceberg's ``write_file`` does, that set-up made once for all of them (pyiceberg makes it
        per file, a tenth of a small table's merge); pyiceberg ``DataFile`` s."""
        import pyarrow as pa
        from pyiceberg.io.pyarrow import _get_parquet_writer_kwargs
        from pyiceberg.table import TableProperties
        from pyiceberg.table.locations import load_location_provider
        from pyiceberg.typedef import Record
        from pyiceberg.utils.properties import property_as_int

        from cdclake.lake.files import close_parquet, open_parquet, parquet_statistics

        props = metadata.properties
        location = load_location_provider(table_location=metadata.location, table_properties=props)
        options, statistics = _get_parquet_writer_kwargs(props), parquet_statistics(metadata.schema(), props)
        group_rows = property_as_int(props, TableProperties.PARQUET_ROW_GROUP_LIMIT,
                                     TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT)
        files = []
        for task in tasks:
            path = location.new_data_location(data_file_name=task.generate_data_file_filename("parquet"),
                                              partition_key=task.partition_key)
            # without schema-level metadata, as write_file's projection leaves it
            rows = pa.Table.from_batches(task.record_batches, schema=arrow).replace_schema_metadata(None)
            out, sink, writer = open_parquet(self.table.io, path, rows.schema, options)
            writer.write_table(rows, row_group_size=group_rows)
            files.append(close_parquet(out, sink, writer, path,
                                       task.partition_key.partition if task.partition_key else Record(),
                                       metadata.default_spec_id, statistics))
        return files

    def _write_deletes(self, part: list[tuple[str, int]], bucket: Optional[int]):
        """A position delete file of ``part`` (sorted ``(data file, position)`` pairs) in ``bucket``,
        as a pyiceberg ``DataFile`` (content position deletes, metrics from its footer)."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyiceberg.io.pyarrow import (compute_statistics_plan, data_file_statistics_from_parquet_metadata,
                                          parquet_path_to_id_mapping, schema_to_pyarrow)
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.schema import Schema
        from pyiceberg.typedef import Record
        from pyiceberg.types import LongType, NestedField, StringType

        schema = Schema(NestedField(DELETE_FILE_PATH_ID, "file_path", StringType(), required=True),
                        NestedField(DELETE_POS_ID, "pos", LongType(), required=True))
        arrow = schema_to_pyarrow(schema)
        table = pa.table({"file_path": [p for p, _ in part], "pos": [x for _, x in part]}, schema=arrow)
        spec = self.table.spec()
        data_path = self.table.properties.get("write.data.path") or f"{self.table.location().rstrip('/')}/data"
        partition = "" if bucket is None else spec.partition_to_path(Record(bucket), self.schema) + "/"
        location = f"{data_path}/{partition}{uuid.uuid4()}-deletes.parquet"
        out = self.table.io.new_output(location)
        with out.create(overwrite=False) as sink, pq.ParquetWriter(sink, arrow) as writer:
            writer.write_table(table)
        # full bounds, as Iceberg keeps them for position deletes: a file whose file_path bounds are
        # equal is known to delete from that one data file
        full = {"write.metadata.metrics.default": "full"}
        stats = data_file_statistics_from_parquet_metadata(
            writer.writer.metadata, compute_statistics_plan(schema, full), parquet_path_to_id_mapping(schema))
        return DataFile.from_args(
            content=DataFileContent.POSITION_DELETES, file_path=location, file_format=FileFormat.PARQUET,
            partition=Record() if bucket is None else Record(bucket), file_size_in_bytes=len(out),
            spec_id=spec.spec_id, **stats.to_serialized_dict())

    def _file_json(self, content: str, f, bucket: Optional[int]) -> str:
        """File ``f`` (a pyiceberg ``DataFile``) as the JSON of Iceberg's ``ContentFileParser``."""
        spec = self.table.spec()
        out: dict = {"spec-id": spec.spec_id, "content": content, "file-path": f.file_path, "file-format": "PARQUET",
                     "partition": {} if bucket is None else {str(spec.fields[0].field_id): bucket},
                     "file-size-in-bytes": f.file_size_in_bytes, "record-count": f.record_count}
        for key, attr in (("column-sizes", "column_sizes"), ("value-counts", "value_counts"),
                          ("null-value-counts", "null_value_counts"), ("nan-value-counts", "nan_value_counts")):
            values = getattr(f, attr) or {}
            out[key] = {"keys": list(values), "values": list(values.values())}
        for key, attr in (("lower-bounds", "lower_bounds"), ("upper-bounds", "upper_bounds")):
            values = getattr(f, attr) or {}
            out[key] = {"keys": list(values), "values": [bytes(v).hex().upper() for v in values.values()]}
        if f.split_offsets:
            out["split-offsets"] = list(f.split_offsets)
        return json.dumps(out)


def _field_id(f: "pa.Field") -> Optional[int]:
    v = (f.metadata or {}).get(b"PARQUET:field_id")
    return int(v) if v is not None else None


def _project(raw: "pa.Table", target: "pa.Schema") -> "pa.Table":
    """``raw`` (a data file's rows) in schema ``target``, matched by Iceberg field id: a column
    the file lacks is null, a promoted one is cast."""
    import pyarrow as pa

    by_id = {_field_id(f): i for i, f in enumerate(raw.schema)}
    cols = []
    for f in target:
        i = by_id.get(_field_id(f))
        if i is None:
            cols.append(pa.nulls(raw.num_rows, f.type))
            continue
        col = raw.column(i)
        cols.append(col if col.type == f.type else col.cast(f.type))
    return pa.Table.from_arrays(cols, schema=target)
