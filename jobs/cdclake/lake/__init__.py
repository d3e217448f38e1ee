"""Every table of the lake: its name, schema, partitioning and creation, and how silver tables are named.

The stages (land, normalize, silver) and the gates reach tables only through this package; they do
not import each other. Tables (all inside the pipeline's catalog, :mod:`cdclake.catalog`):

=============================  ====================================================  =====================
table                          rows                                                  schema
=============================  ====================================================  =====================
``raw.kafka_records``          landed Kafka records, partitioned by topic and hour   :data:`RAW_SCHEMA`
``raw.land_manifest``          offset range read per topic, partition and hour       :data:`MANIFEST_SCHEMA`
``bronze.changes``             canonical change records (``cdclake.record``)         :data:`BRONZE_SCHEMA`
``bronze.quarantine``          records that could not be parsed, with the reason     :data:`QUARANTINE_SCHEMA`
``bronze.control_events``      DDL, tombstones, heartbeats: recognised, not rows     :data:`CONTROL_SCHEMA`
``bronze.schema_registry``     table definitions from metadata messages (Qlik)       :data:`REGISTRY_SCHEMA`
``bronze.change_shapes``       each change shape bronze rows name (key, types ...)   :data:`SHAPES_SCHEMA`
``bronze.run_metrics``         one row per stage run, topic (and silver table)       :data:`RUN_METRICS_SCHEMA`
``bronze.reconciliation``      one row per silver table and reconciliation run       :data:`RECONCILIATION_SCHEMA`
``<silver>.<name>``            one table per source table (:func:`silver_table`)     source columns +
                                                                                     :data:`META_COLUMNS`
``<silver>_tombstones.<name>`` deletes and truncates of a silver table               :data:`TOMBSTONE_SCHEMA`
``<silver>_history.<name>``    SCD type 2 versions of a silver table's keys          source columns +
                                                                                     :data:`HISTORY_META`
=============================  ====================================================  =====================

Raw, manifest, bronze, quarantine and control tables are partitioned by (kafka_topic,
hours(landed_hour)), so that a window is replaced by an overwrite whose filter
(:func:`window_filter`) matches whole files; the registry by source_format; the change shapes
are not partitioned. All are Iceberg format 2.
Silver tables are named ``<table_prefix><database>__<schema>__<table>``, shortened past
:data:`MAX_NAME_CHARS`, each at a location of its own (:mod:`cdclake.lake.naming`).

The package's modules, whose public names are all importable from here:

- :mod:`cdclake.lake.schemas`: the table names and schemas, Spark StructTypes, every column
  nullable (as Spark reads a DDL column list); :func:`ddl` gives a schema's SQL column list,
  :func:`arrow_schema` its Arrow schema.
- :mod:`cdclake.lake.changes`: ``bronze.changes``'s schema, derived from
  :class:`cdclake.record.ChangeRecord`, and the staged rows normalize's Python workers write.
- :mod:`cdclake.lake.shapes`: change shapes, the ids and key-change flags normalize writes with
  each bronze row, and ``bronze.change_shapes``, which silver's batch summary reads.
- :mod:`cdclake.lake.naming`: the names and locations of silver, tombstone and history tables.
- :mod:`cdclake.lake.tables`: creating tables, replacing a window's hours, whether a table exists.
- :mod:`cdclake.lake.files`: hour tables' data files written by the Python workers.
- :mod:`cdclake.lake.hours`: hour tables at the catalog: a window's files found, read, dealt to
  reading tasks and replaced in one commit (pyiceberg), and the pyiceberg transaction and
  overwrite every file-level commit uses.
"""
from __future__ import annotations

from cdclake.lake.changes import (BRONZE_SCHEMA, CHANGE_PYTHON_TYPES, STAGED_MAPS, STAGED_SCHEMA, STAGED_TO_BRONZE,
                                  bronze_frame, bronze_row, staged_row)
from cdclake.lake.files import FILES_DDL, HourFileWriter, HourTable, data_files, file_batch, write_local
from cdclake.lake.hours import (LEDGER_COLUMNS, commit_hours, hour_files, hour_table, ledger_around, ledger_latest,
                                overwrite,
                                plan_splits, read_hours, read_splits, stage_replace, transaction)
from cdclake.lake.naming import (KEY_CHANGES_PROPERTY, MAX_NAME_CHARS, NAME_HASH_DIGITS, PRIMARY_KEY_PROPERTY,
                                 SOURCE_TABLE_PROPERTY, SourceTable, history_namespace, history_table,
                                 resolve_legacy_name, short_name, silver_table, table_location, tombstone_namespace,
                                 tombstone_table)
from cdclake.lake.schemas import (BRONZE_TABLE, CONTROL_SCHEMA, CONTROL_TABLE, HISTORY_META, KAFKA_COLUMNS,
                                  LAST_CHANGE_COLUMNS, MANIFEST_SCHEMA, MANIFEST_TABLE, META_COLUMNS, ORDER_STRUCT,
                                  ORDER_TYPE, QUARANTINE_SCHEMA, QUARANTINE_TABLE, RAW_SCHEMA, RAW_TABLE,
                                  RECONCILIATION_SCHEMA, RECONCILIATION_TABLE, REGISTRY_SCHEMA, REGISTRY_TABLE, RUN_METRICS_SCHEMA, RUN_METRICS_TABLE,
                                  SHAPES_TABLE, SOFT_DELETE_COLUMN, TOMBSTONE_SCHEMA, arrow_schema, column_ddl, ddl)
from cdclake.lake.tables import (BRONZE_ROW_GROUP_BYTES, BRONZE_TABLES, BRONZE_WRITE_ORDER,
                                 RAW_ROW_GROUP_BYTES, RAW_SPLIT_BYTES, ensure_bronze_tables, ensure_raw_tables,
                                 ensure_reconciliation_table, ensure_run_metrics_table, ensure_tombstone_table, table_exists,
                                 window_filter)
from cdclake.lake.shapes import (SHAPE_COLUMNS, SHAPES_SCHEMA, change_shapes, change_shapes_exact, commit_shapes,
                                 read_shapes, shape_id)

__all__ = [
    # schemas
    "BRONZE_TABLE", "CONTROL_SCHEMA", "CONTROL_TABLE", "HISTORY_META", "KAFKA_COLUMNS", "LAST_CHANGE_COLUMNS",
    "MANIFEST_SCHEMA", "MANIFEST_TABLE", "META_COLUMNS", "ORDER_STRUCT", "ORDER_TYPE", "QUARANTINE_SCHEMA",
    "QUARANTINE_TABLE", "RAW_SCHEMA", "RAW_TABLE", "RECONCILIATION_SCHEMA", "RECONCILIATION_TABLE", "REGISTRY_SCHEMA", "REGISTRY_TABLE", "RUN_METRICS_SCHEMA",
    "RUN_METRICS_TABLE", "SHAPES_TABLE", "SOFT_DELETE_COLUMN", "TOMBSTONE_SCHEMA", "arrow_schema", "column_ddl", "ddl",
    # changes
    "BRONZE_SCHEMA", "CHANGE_PYTHON_TYPES", "STAGED_MAPS", "STAGED_SCHEMA", "STAGED_TO_BRONZE", "bronze_frame",
    "bronze_row", "staged_row",
    # shapes
    "SHAPE_COLUMNS", "SHAPES_SCHEMA", "change_shapes", "change_shapes_exact", "commit_shapes", "read_shapes", "shape_id",
    # files
    "FILES_DDL", "HourFileWriter", "HourTable", "LEDGER_COLUMNS", "commit_hours", "data_files", "file_batch",
    "hour_table", "overwrite", "hour_files", "ledger_around", "ledger_latest", "plan_splits", "read_hours", "read_splits",
    "stage_replace", "transaction", "write_local",
    # naming
    "KEY_CHANGES_PROPERTY", "MAX_NAME_CHARS", "NAME_HASH_DIGITS", "PRIMARY_KEY_PROPERTY", "SOURCE_TABLE_PROPERTY",
    "SourceTable", "history_namespace", "history_table", "resolve_legacy_name", "short_name", "silver_table",
    "table_location", "tombstone_namespace", "tombstone_table",
    # tables
    "BRONZE_ROW_GROUP_BYTES", "BRONZE_TABLES", "BRONZE_WRITE_ORDER", "RAW_ROW_GROUP_BYTES",
    "RAW_SPLIT_BYTES", "ensure_bronze_tables", "ensure_raw_tables", "ensure_reconciliation_table",
    "ensure_run_metrics_table",
    "ensure_tombstone_table", "table_exists", "window_filter",
]
