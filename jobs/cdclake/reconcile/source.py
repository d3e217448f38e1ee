"""The source database side of reconciliation: a connection from an Airflow connection, a source
table's columns, checksums per key bucket and rows by bucket, each computed by the database in
one query (:mod:`cdclake.reconcile.canonical` gives the SQL), never the table pulled whole.

Drivers: psycopg2 for ``conn_type`` ``postgres``/``postgresql``, PyMySQL for ``mysql`` (MySQL and
MariaDB; its session reads ``TIMESTAMP`` columns in UTC, ``time_zone = '+00:00'``).
:class:`SourceDatabase` counts the bytes of every result it fetched (the UTF-8 length of each
text value, 8 per number): the ``bytes_read_source`` of a reconciliation.
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Mapping, Optional

from cdclake.errors import ConfigError, ServiceUnavailable
from cdclake.reconcile.canonical import kind_of, my_ident, pg_ident, sql_hash, sql_text, sql_value

#: ``conn_type`` of an Airflow connection → the dialect of :mod:`cdclake.reconcile.canonical`.
DIALECTS = {"postgres": "postgres", "postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql"}


class SourceUnavailable(ServiceUnavailable):
    """The source database of a reconciliation could not be reached or read (the message names it)."""


@dataclass(frozen=True)
class Column:
    """A source column: ``name``, ``data_type`` (``information_schema``) and its canonical ``kind``."""

    name: str
    data_type: str
    kind: str


@dataclass
class BucketSums:
    """The checksum of one key bucket: ``rows`` in it and ``hash_sum``, the sum of its row hashes
    (an exact integer)."""

    rows: int
    hash_sum: int


class SourceDatabase:
    """One connection to a source database, from ``conn`` (the dict of
    :func:`cdclake.config.parse_connection`: ``conn_type``, ``host``, ``port``, ``login``,
    ``password``, ``schema``). ``database``: the database to connect to (PostgreSQL; None: the
    connection's ``schema``). Raises :class:`ConfigError` for a ``conn_type`` that is neither
    PostgreSQL nor MySQL, :class:`SourceUnavailable` when the server refuses the connection."""

    def __init__(self, conn: Mapping[str, Any], conn_id: str, database: Optional[str] = None):
        ctype = str(conn.get("conn_type") or "").lower()
        if ctype not in DIALECTS:
            raise ConfigError(f"key 'reconcile.connection': connection {conn_id!r} has conn_type {ctype!r}; "
                              f"reconciliation reads {', '.join(sorted(DIALECTS))}")
        self.dialect = DIALECTS[ctype]
        self.bytes_read = 0
        host, port = conn.get("host") or "127.0.0.1", conn.get("port")
        self.where = f"{ctype}://{host}:{port or ('5432' if self.dialect == 'postgres' else '3306')}"
        try:
            if self.dialect == "postgres":
                import psycopg2

                self.database = database or conn.get("schema") or "postgres"
                self.conn = psycopg2.connect(host=host, port=port or 5432, user=conn.get("login") or "postgres",
                                             password=conn.get("password") or None, dbname=self.database,
                                             connect_timeout=10, application_name="cdclake-reconcile")
                self.conn.set_session(readonly=True, autocommit=True)
            else:
                import pymysql

                self.database = database or conn.get("schema")
                self.conn = pymysql.connect(host=host, port=port or 3306, user=conn.get("login") or "root",
                                            password=conn.get("password") or "", database=self.database,
                                            charset="utf8mb4", connect_timeout=10, autocommit=True,
                                            init_command="SET time_zone = '+00:00'")
        except Exception as exc:
            raise SourceUnavailable(f"cannot connect to the source database {self.where} (connection "
                                    f"{conn_id!r}): {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
                                    ) from None

    def close(self) -> None:
        self.conn.close()

    def query(self, sql: str, params: Optional[tuple] = None) -> list[tuple]:
        """The rows of ``sql``, their bytes added to :attr:`bytes_read`; :class:`SourceUnavailable`
        naming the server and the database's message when it fails."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql, params)
                rows = cur.fetchall()
        except Exception as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise SourceUnavailable(f"source database {self.where}: {text}") from None
        for row in rows:
            for v in row:
                self.bytes_read += len(v.encode("utf-8")) if isinstance(v, str) else (
                    len(v) if isinstance(v, (bytes, bytearray, memoryview)) else 8)
        return rows

    def ident(self, name: str) -> str:
        return (pg_ident if self.dialect == "postgres" else my_ident)(name)

    def table_sql(self, schema: Optional[str], table: str) -> str:
        """The quoted ``schema.table`` (PostgreSQL; schema default ``public``) or ``database.table``."""
        if self.dialect == "postgres":
            return f"{self.ident(schema or 'public')}.{self.ident(table)}"
        return f"{self.ident(schema)}.{self.ident(table)}" if schema else self.ident(table)

    def columns(self, schema: Optional[str], table: str) -> list[Column]:
        """The columns of a source table in their order; :class:`ConfigError` when it has none
        (the table does not exist)."""
        if self.dialect == "postgres":
            rows = self.query("SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                              "AND table_name = %s ORDER BY ordinal_position", (schema or "public", table))
        else:
            rows = self.query("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = "
                              "COALESCE(%s, DATABASE()) AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION", (schema, table))
        if not rows:
            raise ConfigError(f"source table {schema + '.' if schema else ''}{table} not found in {self.where}; set "
                              "'reconcile.source_tables' for its silver table")
        return [Column(str(n), str(t), kind_of(self.dialect, str(t))) for n, t in rows]

    def _hashed(self, schema: Optional[str], table: str, key: list[Column], columns: list[Column]) -> str:
        key_text = sql_text(self.dialect, [(c.name, c.kind) for c in key])
        row_text = sql_text(self.dialect, [(c.name, c.kind) for c in columns])
        return (f"SELECT {sql_hash(self.dialect, key_text)} AS hk, {sql_hash(self.dialect, row_text)} AS hr "
                f"FROM {self.table_sql(schema, table)}")

    def bucket_sums(self, schema: Optional[str], table: str, key: list[Column], columns: list[Column], modulus: int,
                    parents: Optional[tuple[int, list[int]]] = None) -> dict[int, BucketSums]:
        """``{bucket: BucketSums}`` of the table's rows by key hash modulo ``modulus``, computed in
        the database; ``parents`` ``(m, buckets)``: only rows whose key hash modulo ``m`` is one of
        ``buckets`` (the differing buckets of the round before)."""
        where = ""
        if parents is not None:
            where = f" WHERE q.hk % {int(parents[0])} IN ({', '.join(str(int(b)) for b in parents[1])})"
        rows = self.query(f"SELECT q.hk % {int(modulus)} AS b, count(*), sum(q.hr) FROM "
                          f"({self._hashed(schema, table, key, columns)}) q{where} GROUP BY 1")
        return {int(b): BucketSums(int(n), int(Decimal(s))) for b, n, s in rows}

    def bucket_rows(self, schema: Optional[str], table: str, key: list[Column], columns: list[Column], modulus: int,
                    buckets: list[int]) -> dict[str, tuple[int, list[Optional[str]]]]:
        """``{key text: (row hash, [key columns' canonical texts])}`` of the rows in ``buckets``
        (key hash modulo ``modulus``)."""
        key_values = ", ".join(sql_value(self.dialect, c.name, c.kind) for c in key)
        key_text = sql_text(self.dialect, [(c.name, c.kind) for c in key])
        row_text = sql_text(self.dialect, [(c.name, c.kind) for c in columns])
        rows = self.query(f"SELECT {key_values}, q._cdc_hr, q._cdc_kt FROM (SELECT *, "
                          f"{sql_hash(self.dialect, key_text)} AS _cdc_hk, {sql_hash(self.dialect, row_text)} AS _cdc_hr, "
                          f"{key_text} AS _cdc_kt FROM {self.table_sql(schema, table)}) q "
                          f"WHERE q._cdc_hk % {int(modulus)} IN ({', '.join(str(int(b)) for b in buckets)})")
        n = len(key)
        return {r[n + 1]: (int(r[n]), list(r[:n])) for r in rows}
