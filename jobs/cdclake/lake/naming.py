"""How the tables named after source tables are named and placed: silver, tombstone and history tables.

Silver tables live in ``<catalog>.<silver.namespace>`` and are named
``<table_prefix><database>__<schema>__<table>`` (missing parts left out). A name longer than
:data:`MAX_NAME_CHARS` (255, what catalogs hold: PostgreSQL's Iceberg JDBC catalog keeps table
names in VARCHAR(255)) is shortened deterministically to its first 238 characters, ``~`` and the
first 16 hex digits of the SHA-256 of the whole name (UTF-8): 255 characters
(:attr:`SourceTable.silver_name`); a table an earlier version created under the whole name keeps
it. Tombstone and history tables take the silver table's name in their own namespaces. New
tables record their source table in the property ``cdc.source-table`` (JSON ``[prefix, database,
schema, table]``). Names from messages never become paths: every table named after a source
table gets an explicit location ``<warehouse>/<namespace>/<slug>-<hash>`` (:func:`table_location`).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from cdclake import types as T
from cdclake.config import PipelineConfig


#: Longest table name the pipeline gives a table (characters): what catalogs hold.
MAX_NAME_CHARS = 255
#: Hex digits of the SHA-256 that end a shortened name and a table location.
NAME_HASH_DIGITS = 16
#: Table property naming the source table of a silver table (JSON [prefix, database, schema, table]).
SOURCE_TABLE_PROPERTY = "cdc.source-table"
#: Table property holding the primary key columns as a JSON array (``cdc.primary-key`` joins them with commas).
PRIMARY_KEY_PROPERTY = "cdc.primary-key-columns"
#: Silver table property set once a key change has been merged (see :func:`cdclake.silver.keys.replay_rows`).
KEY_CHANGES_PROPERTY = "cdc.key-changes"


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:NAME_HASH_DIGITS]


def short_name(name: str) -> str:
    """``name`` when it has at most :data:`MAX_NAME_CHARS` characters, else its shortened form.

    Shortened: the first 238 characters, ``~``, and the first 16 hex digits of the SHA-256 of the
    whole name in UTF-8 (255 characters), e.g. ``short_name("a" * 300) == "a" * 238 + "~" + hex16``.
    """
    if len(name) <= MAX_NAME_CHARS:
        return name
    return name[:MAX_NAME_CHARS - NAME_HASH_DIGITS - 1] + "~" + _digest(name)


def table_location(cfg: PipelineConfig, namespace: str, name: str) -> str:
    """The location given to a new table ``name`` of ``namespace``: ``<warehouse>/<namespace>/<slug>-<hash>``.

    ``slug``: the first 40 ASCII letters, digits and underscores of ``name`` (other runs become
    one ``_``; ``t`` when none is left), ``hash``: the first 16 hex digits of the SHA-256 of
    ``name`` (UTF-8). So a name from a message never becomes a path, and the location is under
    the warehouse, in the namespace's directory (as Iceberg's default location would be).
    """
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", name)[:40].strip("_") or "t"
    return f"{cfg.catalog.warehouse.rstrip('/')}/{namespace}/{slug}-{_digest(name)}"


@dataclass(frozen=True)
class SourceTable:
    """A source table as bronze names it, plus the topic's silver table prefix.

    ``legacy_name``: the silver table was created by an earlier version under :attr:`full_name`
    though that is longer than :data:`MAX_NAME_CHARS` (see :func:`resolve_legacy_name`).
    """

    prefix: str
    database: Optional[str]
    schema: Optional[str]
    table: str
    legacy_name: bool = field(default=False, compare=False)

    @property
    def full_name(self) -> str:
        """``<prefix><database>__<schema>__<table>`` (missing parts left out), however long."""
        return self.prefix + "__".join(p for p in (self.database, self.schema, self.table) if p)

    @property
    def silver_name(self) -> str:
        """The silver table name: :attr:`full_name`, shortened by :func:`short_name` when too long."""
        return self.full_name if self.legacy_name else short_name(self.full_name)

    def identity(self) -> str:
        """The value of :data:`SOURCE_TABLE_PROPERTY`: JSON ``[prefix, database, schema, table]``."""
        return json.dumps([self.prefix, self.database, self.schema, self.table], ensure_ascii=False)

    def __str__(self) -> str:
        return ".".join(p for p in (self.database, self.schema, self.table) if p)


def resolve_legacy_name(st: SourceTable, exists: Callable[[str], bool]) -> SourceTable:
    """``st``, marked :attr:`SourceTable.legacy_name` when its silver table has its long name.

    An earlier version named every silver table :attr:`SourceTable.full_name`, however long (a
    catalog on an object store could hold such names). When that name is longer than
    :data:`MAX_NAME_CHARS` and ``exists(full_name)`` (the silver table of that name exists in the
    silver namespace), the table keeps it; otherwise ``st`` is returned unchanged.
    """
    if st.legacy_name or len(st.full_name) <= MAX_NAME_CHARS:
        return st
    return replace(st, legacy_name=True) if exists(st.full_name) else st


def tombstone_namespace(cfg: PipelineConfig) -> str:
    """The namespace of the tombstone tables: ``<silver.namespace>_tombstones``."""
    return cfg.silver.namespace + "_tombstones"


def history_namespace(cfg: PipelineConfig) -> str:
    """The namespace of the history tables: ``<silver.namespace>_history``."""
    return cfg.silver.namespace + "_history"


def _table_name(cfg: PipelineConfig, namespace: str, name: str) -> str:
    return f"{cfg.catalog.name}.{T.quote_ident(namespace)}.{T.quote_ident(name)}"


def silver_table(cfg: PipelineConfig, st: SourceTable) -> str:
    """Fully qualified, quoted Spark name of the silver table of ``st``."""
    return _table_name(cfg, cfg.silver.namespace, st.silver_name)


def tombstone_table(cfg: PipelineConfig, st: SourceTable) -> str:
    """Quoted name of the tombstone table of ``st``: ``<namespace>_tombstones.<silver name>``.

    Columns (:data:`cdclake.lake.TOMBSTONE_SCHEMA`): key array<string> (primary-key values in canonical text;
    empty for a truncate), and the ``_cdc_*`` position columns and source time (ms) of the delete.
    """
    return _table_name(cfg, tombstone_namespace(cfg), st.silver_name)


def history_table(cfg: PipelineConfig, silver_name: str) -> str:
    """Quoted name of the history table of silver table ``silver_name``: ``<namespace>_history.<silver name>``."""
    return _table_name(cfg, history_namespace(cfg), silver_name)
