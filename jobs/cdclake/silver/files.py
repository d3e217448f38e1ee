"""A silver table at the level of its files: read rows with their file and position, commit new
data and position-delete files, without a Spark job.

The table is Spark's own Iceberg table object (the catalog of the Spark session, reached in the
driver's JVM), so the commit is Iceberg's ``RowDelta`` as Spark's merge-on-read MERGE makes it
(Iceberg spec, "Row-level deletes": position delete files, ``file_path`` field id 2147483546,
``pos`` field id 2147483545). Files are read and written with pyarrow; the Arrow schema with
Iceberg field ids is pyiceberg's (:func:`pyiceberg.io.pyarrow.schema_to_pyarrow`), and each new
file's metrics are read back from its footer by Iceberg (``ParquetUtil.fileMetrics``), as its
``add_files`` procedure does.

Only what a small batch of the silver stage needs: tables of format version 2 whose partition
spec is the silver stage's own (``bucket(N, first key column) AS _cdc_bucket``, or none, as
tombstone tables have), with position deletes only. Anything else raises :class:`NotFileLevel`,
and the caller merges the table with Spark instead.
"""
from __future__ import annotations

import datetime as dt
import os
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Optional

from cdclake.errors import NotFileLevel

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

#: Column names of a read table's row file and position (:meth:`TableFiles.read`).
FILE_COLUMN, POS_COLUMN = "_cdc_file", "_cdc_pos"
#: Field ids of a position delete file's columns (Iceberg spec, reserved field ids).
DELETE_FILE_PATH_ID, DELETE_POS_ID = 2147483546, 2147483545
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def java_catalog(spark: "SparkSession", catalog: str):
    """The Iceberg ``Catalog`` behind Spark catalog ``catalog`` (the driver JVM's object)."""
    return spark._jsparkSession.sessionState().catalogManager().catalog(catalog).icebergCatalog()


@dataclass
class TableFiles:
    """One Iceberg table as loaded now: its schema (pyiceberg ``Schema``), its bucket partition
    (``bucket_source``: the name of the bucketed column, ``buckets``: N; None and 0 when
    unpartitioned) and the snapshot it was read at (``snapshot_id``, None: empty table).

    Raises :class:`NotFileLevel` for a table this module does not write (format version other
    than 2, another partition spec, equality delete files)."""

    spark: Any
    table: Any  # org.apache.iceberg.Table
    schema: Any  # pyiceberg.schema.Schema
    bucket_source: Optional[str]
    buckets: int
    snapshot_id: Optional[int]
    bucket_of_file: dict = field(default_factory=dict)

    @classmethod
    def load(cls, spark: "SparkSession", catalog: str, namespace: str, name: str) -> Optional["TableFiles"]:
        """The table ``namespace.name`` of Spark catalog ``catalog``, or None when it does not exist."""
        from pyiceberg.schema import Schema

        jvm = spark._jvm
        ice = jvm.org.apache.iceberg
        levels = spark.sparkContext._gateway.new_array(jvm.java.lang.String, 1)
        levels[0] = namespace
        ident = ice.catalog.TableIdentifier.of(ice.catalog.Namespace.of(levels), name)
        jcat = java_catalog(spark, catalog)
        if not jcat.tableExists(ident):
            return None
        table = jcat.loadTable(ident)
        _local(table.location())  # files are read and written with pyarrow's local filesystem
        if table.operations().current().formatVersion() != 2:
            raise NotFileLevel("format version is not 2")
        schema = Schema.model_validate_json(ice.SchemaParser.toJson(table.schema()))
        spec = table.spec()
        fields = list(spec.fields())
        source, buckets = None, 0
        if fields:
            transform = fields[0].transform().toString()
            if len(fields) != 1 or fields[0].name() != "_cdc_bucket" or not transform.startswith("bucket["):
                raise NotFileLevel(f"partition spec {spec.toString()}")
            source, buckets = schema.find_field(fields[0].sourceId()).name, int(transform[7:-1])
        snap = table.currentSnapshot()
        return cls(spark, table, schema, source, buckets, None if snap is None else snap.snapshotId())

    def property(self, key: str) -> Optional[str]:
        """The table property ``key``, or None."""
        return self.table.properties().get(key)

    def arrow_schema(self) -> "pa.Schema":
        """The table's Arrow schema, Iceberg field ids in each field's metadata."""
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        return schema_to_pyarrow(self.schema)

    def bucket_of(self, value: Any) -> int:
        """The ``_cdc_bucket`` of a row whose bucketed column holds ``value`` (Iceberg's bucket
        transform, Murmur3 of the value's single-value serialization; spec "Bucket Transform
        Details")."""
        from pyiceberg.transforms import BucketTransform

        ftype = self.schema.find_field(self.bucket_source).field_type
        if isinstance(value, dt.datetime):  # Iceberg's representation: µs since the epoch, days since it
            epoch = _EPOCH if value.tzinfo is not None else _EPOCH.replace(tzinfo=None)
            value = (value - epoch) // dt.timedelta(microseconds=1)
        elif isinstance(value, dt.date):
            value = (value - _EPOCH.date()).days
        return BucketTransform(self.buckets).transform(ftype)(value)

    def read(self, buckets: Optional[set[int]] = None) -> "pa.Table":
        """Every live row (position deletes applied) of the files in ``buckets`` (None: all), in
        the table's schema, with :data:`FILE_COLUMN` (the data file's location) and
        :data:`POS_COLUMN` (int64, the row's position in it). Columns a file lacks are null;
        promoted types are cast. Raises :class:`NotFileLevel` for equality delete files."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        target = self.arrow_schema()
        parts = []
        if self.snapshot_id is None:
            return pa.Table.from_batches([], _with_place(target))
        deleted: dict[str, pa.Array] = {}
        tasks = self.table.newScan().useSnapshot(self.snapshot_id).planFiles()
        try:
            for task in _iterate(tasks):
                data = task.file()
                bucket = data.partition().get(0, _int_class(self.spark)) if self.buckets else None
                if buckets is not None and bucket not in buckets:
                    continue
                path = data.location()
                drop = []
                for d in _iterate(task.deletes()):
                    if d.content().toString() != "POSITION_DELETES":
                        raise NotFileLevel("equality delete files")
                    loc = d.location()
                    if loc not in deleted:
                        deleted[loc] = pq.read_table(_local(loc), columns=["file_path", "pos"])
                    dt = deleted[loc]
                    drop.append(dt.filter(pc.equal(dt["file_path"], path))["pos"])
                raw = pq.read_table(_local(path))
                rows = _project(raw, target)
                rows = rows.append_column(FILE_COLUMN, pa.array([path] * rows.num_rows, pa.string()))
                rows = rows.append_column(POS_COLUMN, pa.array(range(rows.num_rows), pa.int64()))
                if drop:
                    gone = pa.chunked_array([c for x in drop for c in x.chunks], pa.int64())
                    rows = rows.filter(pc.invert(pc.is_in(rows[POS_COLUMN], gone)))
                self.bucket_of_file[path] = bucket
                parts.append(rows)
        finally:
            tasks.close()
        if not parts:
            return pa.Table.from_batches([], _with_place(target))
        return pa.concat_tables(parts)

    def commit(self, rows: list[dict], deletes: Iterable[tuple[str, int]], what: str = "") -> bool:
        """Write ``rows`` (dicts of the table's columns, Python values as pyarrow takes them) as
        new data files (one per bucket) and ``deletes`` (``(data file location, position)`` of
        rows read by :meth:`read`) as position delete files (one per bucket), then commit both in
        one ``RowDelta`` validated against concurrent changes since the snapshot read (the data
        files it deletes from must still exist). Returns False when there is nothing to commit."""
        import pyarrow as pa

        deletes = sorted(set(deletes))
        if not rows and not deletes:
            return False
        jvm = self.spark._jvm
        ice = jvm.org.apache.iceberg
        delta = self.table.newRowDelta()
        schema = self.arrow_schema()
        by_bucket: dict[Optional[int], list[dict]] = {}
        for r in rows:
            by_bucket.setdefault(self.bucket_of(r[self.bucket_source]) if self.buckets else None, []).append(r)
        for b, part in sorted(by_bucket.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
            loc = self._write(pa.Table.from_pylist(part, schema=schema), b)
            builder = ice.DataFiles.builder(self.table.spec()).withPath(loc).withFormat("parquet")
            delta.addRows(self._finish(builder, loc, b, ice.MetricsConfig.forTable(self.table)))
        del_schema = pa.schema([
            pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(DELETE_FILE_PATH_ID).encode()}),
            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(DELETE_POS_ID).encode()})])
        del_by_bucket: dict[Optional[int], list[tuple[str, int]]] = {}
        for path, pos in deletes:
            del_by_bucket.setdefault(self.bucket_of_file[path], []).append((path, pos))
        for b, part in sorted(del_by_bucket.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
            tbl = pa.table({"file_path": [p for p, _ in part], "pos": [x for _, x in part]}, schema=del_schema)
            loc = self._write(tbl, b)
            builder = (ice.FileMetadata.deleteFileBuilder(self.table.spec()).ofPositionDeletes().withPath(loc)
                       .withFormat("parquet"))
            delta.addDeletes(self._finish(builder, loc, b, ice.MetricsConfig.forPositionDelete(self.table)))
        if self.snapshot_id is not None:
            delta.validateFromSnapshot(self.snapshot_id)
        paths = sorted({p for p, _ in deletes})
        if paths:
            delta.validateDataFilesExist(jvm.java.util.ArrayList(paths))
            delta.validateDeletedFiles()
        delta.validateNoConflictingDataFiles()
        delta.validateNoConflictingDeleteFiles()
        if what:
            delta.set("cdc.operation", what)
        delta.commit()
        return True

    def _write(self, tbl: "pa.Table", bucket: Optional[int]) -> str:
        import pyarrow.parquet as pq

        name = f"{'' if bucket is None else f'_cdc_bucket={bucket}/'}{uuid.uuid4()}-arrow.parquet"
        loc = self.table.locationProvider().newDataLocation(name)
        path = _local(loc)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(tbl, path, compression="zstd")
        return loc

    def _finish(self, builder, loc: str, bucket: Optional[int], metrics_config):
        ice = self.spark._jvm.org.apache.iceberg
        infile = self.table.io().newInputFile(loc)
        metrics = ice.parquet.ParquetUtil.fileMetrics(infile, metrics_config)
        builder = builder.withFileSizeInBytes(infile.getLength()).withMetrics(metrics)
        if bucket is not None:
            builder = builder.withPartitionPath(f"_cdc_bucket={bucket}")
        return builder.build()


def _iterate(java_iterable):
    it = java_iterable.iterator()
    while it.hasNext():
        yield it.next()


_INT_CLASS: dict = {}


def _int_class(spark):
    if "c" not in _INT_CLASS:
        _INT_CLASS["c"] = spark._jvm.java.lang.Class.forName("java.lang.Integer")
    return _INT_CLASS["c"]


def _local(location: str) -> str:
    """A filesystem path for a ``file:`` location (the warehouse is a local or mounted path)."""
    if location.startswith("file://"):
        return location[len("file://"):]
    if location.startswith("file:"):
        return location[len("file:"):]
    if "://" in location:
        raise NotFileLevel(f"location {location.split('://')[0]}:// is not a local path")
    return location


def _with_place(schema: "pa.Schema") -> "pa.Schema":
    import pyarrow as pa

    return schema.append(pa.field(FILE_COLUMN, pa.string())).append(pa.field(POS_COLUMN, pa.int64()))


def _field_id(f: "pa.Field") -> Optional[int]:
    meta = f.metadata or {}
    v = meta.get(b"PARQUET:field_id")
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
