"""Reconciliation against the machine's real PostgreSQL and MariaDB (:mod:`cdclake.reconcile`).

Each database gets a database of the test's own and a table with decimal, timestamp, date, binary
and text columns; its changes are captured (PostgreSQL: a wal2json slot rendered as Debezium
messages; MariaDB: the binary log rendered as Canal flat messages, as tests/test_real_sources.py
does), produced to a topic and run through land, normalize and silver for hour 0. Then:

1. reconciling finds the table in sync;
2. rows changed behind the pipeline's back (PostgreSQL: the slot advanced past them, never
   rendered; MariaDB: ``SET sql_log_bin = 0``, so the binary log never holds them): an UPDATE, a
   DELETE of a row silver still holds, an INSERT, all found as drift with their keys, and the
   run fails with one line;
3. rows changed and captured but produced in hour 1, which is not landed: found in flight, not drift.

A server that cannot be reached fails the test (it is not skipped).
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
import uuid
from decimal import Decimal

import pytest
from conftest import REPO, write_pipeline
from helpers import pg_connect
from pipeline import hour, ms, run_window

from cdclake import sim
from cdclake.config import load_pipeline
from cdclake.errors import DriftFound
from cdclake.reconcile import reconcile, reconcile_table
from cdclake.sim import mysql_binlog, pg_wal2json
from cdclake.types import quote_ident

MY = dict(host="127.0.0.1", port=3306, user="root", password="")
MY_CONNECTION = {"conn_type": "mysql", "host": "127.0.0.1", "port": 3306, "login": "root", "schema": None}
SLOT_OPTIONS = ("'format-version', '2', 'include-xids', '1', 'include-lsn', '1', 'include-timestamp', '1', "
                "'include-types', '1'")


def _produce(bootstrap: str, topic: str, messages: list, hour_index: int) -> None:
    """``messages`` (sim Messages of a renderer) into ``topic``, stamped inside hour ``hour_index``."""
    step = 3_000_000 // max(len(messages), 1)
    sim.produce(bootstrap, topic, [sim.Message(m.key, m.value, ms(hour(hour_index)) + 1000 + i * step, m.partition)
                                   for i, m in enumerate(messages)])


def _key_ids(samples: list[str]) -> list[int]:
    return sorted(int(json.loads(s)["id"]) for s in samples)


def _run_hour_0(stack, spark, src, kind: str, fmt: str, partitions: int, connection: dict, **sections) -> dict:
    """Capture ``src``'s changes so far into a new topic of ``partitions`` partitions, stamped in
    hour 0, and run land, normalize and silver over hour 0 with a pipeline of ``fmt`` whose
    tables are prefixed ``<kind>_`` and whose ``reconcile.connection`` is ``recon_<kind>``
    (``connection``, an Airflow connection's fields). ``sections``: more of the pipeline file
    (``reconcile`` options are added to the connection). Returns ``src``, ``cfg``, ``topic``,
    ``path`` and ``connections`` (``{conn id: fields}.get``)."""
    topic = f"recon.{kind}.{uuid.uuid4().hex[:6]}"
    sim.create_topic(stack["bootstrap"], topic, partitions)
    _produce(stack["bootstrap"], topic, src.capture(), 0)
    ns = f"recon_{kind}_{uuid.uuid4().hex[:6]}"
    reconcile_section = dict(sections.pop("reconcile", {}), connection=f"recon_{kind}")
    silver = dict(sections.pop("silver", {}), namespace=ns)
    path = write_pipeline(ns, [{"topic": topic, "format": fmt, "table_prefix": f"{kind}_"}], silver=silver,
                          reconcile=reconcile_section, **sections)
    run_window(spark, path, 0, 1)
    conns = {f"recon_{kind}": dict(connection, password=None, extra={})}
    return {"src": src, "cfg": load_pipeline(path), "topic": topic, "path": path, "connections": conns.get}


# ---------------------------------------------------------------------------------------------
# PostgreSQL


PG_DDL = """CREATE TABLE items (id integer PRIMARY KEY, name text NOT NULL, price numeric(12,2), ratio numeric,
  at timestamptz, born date, blob bytea, ok boolean); ALTER TABLE items REPLICA IDENTITY FULL"""


class PgSource:
    """A database of the test's own with table ``items`` and a wal2json slot."""

    def __init__(self):
        self.db = f"cdc_recon_{uuid.uuid4().hex[:8]}"
        self.slot = f"{self.db}_slot"
        self.admin = pg_connect("postgres", autocommit=True)
        self.admin.cursor().execute(f"CREATE DATABASE {self.db}")
        self.conn = pg_connect(self.db, autocommit=True)
        cur = self.conn.cursor()
        cur.execute(PG_DDL)
        cur.execute("SELECT lsn FROM pg_create_logical_replication_slot(%s, 'wal2json')", (self.slot,))
        self.last_lsn = pg_wal2json.lsn_int(cur.fetchone()[0])
        self.tables = pg_wal2json.describe_tables(cur, "public", ["items"])

    def run(self, *statements) -> None:
        cur = self.conn.cursor()
        for sql, *params in statements:
            cur.execute(sql, tuple(params[0]) if params else None)

    def capture(self) -> list:
        """Debezium messages of the changes since the last capture."""
        cur = self.conn.cursor()
        cur.execute(f"SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, {SLOT_OPTIONS})", (self.slot,))
        txs = pg_wal2json.read_wal2json([r[0] for r in cur.fetchall()])
        messages = pg_wal2json.debezium_pg_json(txs, self.tables, self.db, server_name="recon", partitions=2,
                                                last_commit_lsn=self.last_lsn)
        if txs:
            self.last_lsn = txs[-1].commit_lsn
        return messages

    def skip_capture(self) -> None:
        """Changes so far are never captured: the slot moves past them (replication off for them)."""
        self.conn.cursor().execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (self.slot,))

    def close(self) -> None:
        self.conn.close()
        cur = self.admin.cursor()
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    (self.slot,))
        cur.execute(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)")
        self.admin.close()


def pg_rows(n: int) -> list[tuple]:
    return [(i, f"item {i} é", Decimal(f"{i}.{i % 100:02d}"), Decimal(f"{i}.5000") if i % 3 else Decimal("1e-5") * i,
             f"2024-03-01 1{i % 10}:30:00.{i:06d}+0{i % 5}", dt.date(2020, 1, 1) + dt.timedelta(days=i),
             bytes([i % 256, 0, 255]), i % 2 == 0) for i in range(1, n + 1)]


@pytest.fixture(scope="module")
def pg_run(stack, spark):
    src = PgSource()
    try:
        ins = "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
        src.conn.cursor().executemany(ins, pg_rows(300))
        src.run(("UPDATE items SET price = price + 1, at = now() WHERE id % 7 = 0",),
                ("DELETE FROM items WHERE id IN (5, 6)",),
                ("UPDATE items SET ratio = NULL, blob = NULL WHERE id = 9",))
        run = _run_hour_0(stack, spark, src, "pg", "debezium-json", 2,
                          {"conn_type": "postgres", "host": "127.0.0.1", "port": 5432, "login": "postgres",
                           "schema": src.db}, reconcile={"buckets": 16, "fetch_rows": 50})
        yield dict(run, name=f"pg_{src.db}__public__items")
    finally:
        src.close()


def test_pg_in_sync_then_drift_then_in_flight(spark, stack, pg_run):
    src, cfg, name = pg_run["src"], pg_run["cfg"], pg_run["name"]
    r = reconcile_table(spark, cfg, name, pg_run["connections"])
    assert r.status == "in sync", r.log_line()
    assert r.rows_source == r.rows_silver == 298 and r.buckets_compared == 16 and r.buckets_differing == 0
    assert r.bytes_read_source > 0

    # behind the pipeline's back: never captured
    src.run(("UPDATE items SET price = 0.01 WHERE id = 3",), ("DELETE FROM items WHERE id = 8",),
            ("INSERT INTO items VALUES (1000, 'new', 1, 1, now(), '2000-01-01', '\\x00', true)",),
            ("UPDATE items SET at = at + interval '1 microsecond' WHERE id = 12",))
    src.skip_capture()
    # captured, produced in hour 1, which no run has landed
    src.run(("UPDATE items SET name = 'later' WHERE id = 20",), ("DELETE FROM items WHERE id = 21",),
            ("UPDATE items SET price = price WHERE id = 22",))
    _produce(stack["bootstrap"], pg_run["topic"], src.capture(), 1)

    r = reconcile_table(spark, cfg, name, pg_run["connections"])
    assert r.status == "drift", r.log_line()
    assert _key_ids(r.drift_samples) == [3, 8, 12, 1000], r.log_line()
    assert r.keys_drifted == 4 and r.keys_in_flight == 2, r.log_line()  # 22 is unchanged: not differing
    assert _key_ids(r.in_flight_samples) == [20, 21]
    assert r.rows_source == 297 and r.rows_silver == 298  # 8 and 21 deleted, 1000 inserted
    assert r.rounds >= 1 and 0 < r.buckets_differing

    with pytest.raises(DriftFound) as err:
        reconcile(spark, cfg, [name], pg_run["connections"])
    assert "\n" not in str(err.value) and name in str(err.value) and '{"id":"3"}' in str(err.value)
    rows = spark.table("lake.bronze.reconciliation").where(f"silver_table = '{name}'").collect()
    assert [(x.status, x.keys_drifted, x.keys_in_flight) for x in rows] == [("drift", 4, 2)]
    assert _key_ids(rows[0].drift_samples) == [3, 8, 12, 1000] and rows[0].bytes_read_source > 0


def test_cli_fails_with_one_line_on_drift(pg_run):
    """``python -m cdclake reconcile``: the connection from ``CDC_CONNECTION_<ID>``, exit 1 and one
    ``error: drift found: ...`` line naming the table and its first keys (the drift of the test before)."""
    conn = json.dumps({"conn_type": "postgres", "host": "127.0.0.1", "port": 5432, "login": "postgres",
                       "schema": pg_run["src"].db})
    env = dict(os.environ, CDC_CONNECTION_RECON_PG=conn, PYTHONPATH=str(REPO / "jobs"))
    proc = subprocess.run([sys.executable, "-m", "cdclake", "reconcile", "--pipeline", str(pg_run["path"]),
                           "--table", pg_run["name"]], capture_output=True, text=True, timeout=600, env=env)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-3000:]
    assert errors[0].startswith(f"error: drift found: {pg_run['name']}: 4 key(s) differ from postgres://")
    assert '{"id":"3"}' in errors[0]
    assert any(f"reconcile: {pg_run['name']} vs " in ln and "drift;" in ln for ln in proc.stderr.splitlines())


def test_maintenance_dag_reconciles_when_configured(stack):
    """A pipeline file with a ``reconcile`` section gets task ``reconcile`` after ``run`` in its
    maintenance DAG: ``jobs/reconcile.py``, never retried, the source connection handed over."""
    with_section = write_pipeline("recondag", [{"topic": "recondag.t", "format": "debezium-json"}],
                                  reconcile={"connection": "shop_db"})
    without = write_pipeline("recondag_none", [{"topic": "recondag.u", "format": "debezium-json"}])
    try:
        spec = importlib.util.spec_from_file_location("cdc_maintenance_reconcile", REPO / "dags" / "cdc_maintenance.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        with_section.unlink()
        without.unlink()
    dag = module.cdc_recondag_maintenance
    assert sorted(t.task_id for t in dag.tasks) == ["reconcile", "run"]
    task = dag.get_task("reconcile")
    assert task.upstream_task_ids == {"run"} and task.retries == 0
    assert task.application.endswith("jobs/reconcile.py")
    assert task.application_args == ["--pipeline", str(with_section.resolve())]
    assert task.execution_timeout == dt.timedelta(hours=2)
    assert "shop_db" in task.connections
    assert [t.task_id for t in module.cdc_recondag_none_maintenance.tasks] == ["run"]


def test_pg_differences_of_form_only_are_no_drift(spark, pg_run):
    """A variable-scale numeric rewritten with another scale (``2.5000`` → ``2.50``, equal by
    value; silver holds the first text) behind the pipeline's back is no difference."""
    src, cfg, name = pg_run["src"], pg_run["cfg"], pg_run["name"]
    src.run(("UPDATE items SET ratio = 2.50 WHERE id = 2",))
    src.skip_capture()
    r = reconcile_table(spark, cfg, name, pg_run["connections"])
    assert 2 not in _key_ids(r.drift_samples + r.in_flight_samples), r.log_line()


# ---------------------------------------------------------------------------------------------
# MariaDB


MY_DDL = """CREATE TABLE items (id int PRIMARY KEY, name varchar(60) NOT NULL, price decimal(12,2),
  at datetime(6), born date, bytes_ varbinary(16), memo text) DEFAULT CHARSET = utf8mb4"""


def _my_connect(database=None):
    import pymysql

    try:
        return pymysql.connect(host=MY["host"], port=MY["port"], user=MY["user"], password="", database=database,
                               autocommit=True, connect_timeout=5, charset="utf8mb4")
    except pymysql.err.OperationalError as exc:
        pytest.fail(f"MariaDB at 127.0.0.1:3306 cannot be reached ({exc}): run `make deps`", pytrace=False)


class MySource:
    """A database of the test's own with table ``items``, captured from the binary log."""

    def __init__(self):
        self.db = f"cdc_recon_{uuid.uuid4().hex[:8]}"
        self.admin = _my_connect()
        with self.admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {self.db}")
            cur.execute(f"USE {self.db}")
            cur.execute(MY_DDL)
        self.conn = _my_connect(self.db)
        self.file, self.pos, self.gtid = self._status()
        with self.admin.cursor() as cur:
            self.tables = mysql_binlog.describe_tables(cur, self.db, ["items"])

    def _status(self):
        with self.admin.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            status = cur.fetchone()
            if status is None:
                pytest.fail("MariaDB's binary log is off: run `make deps`", pytrace=False)
            cur.execute("SELECT @@gtid_binlog_pos")
            return status[0], int(status[1]), cur.fetchone()[0]

    def run(self, *statements, log_bin: bool = True) -> None:
        with self.conn.cursor() as cur:
            if not log_bin:
                cur.execute("SET sql_log_bin = 0")
            for sql, *params in statements:
                cur.execute(sql, tuple(params[0]) if params else None)
            if not log_bin:
                cur.execute("SET sql_log_bin = 1")

    def capture(self) -> list:
        """Canal flat messages of the binary log since the last capture."""
        file, pos, gtid = self._status()
        assert file == self.file, "the binary log rotated"
        txs = mysql_binlog.read_binlog(MY, self.db, self.file, self.pos, self.gtid, pos)
        self.pos, self.gtid = pos, gtid
        return mysql_binlog.canal_flat_json(txs, self.tables, self.db)

    def close(self) -> None:
        self.conn.close()
        with self.admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {self.db}")
        self.admin.close()


@pytest.fixture(scope="module")
def my_run(stack, spark):
    src = MySource()
    try:
        ins = "INSERT INTO items VALUES (%s, %s, %s, %s, %s, %s, %s)"
        src.conn.cursor().executemany(ins, [
            (i, f"item {i} ✓", Decimal(f"{i}.{i % 100:02d}"), dt.datetime(2024, 3, 1, i % 24, 30, 0, i * 7),
             dt.date(2020, 1, 1) + dt.timedelta(days=i), bytes([i % 256, 0, 255]), None if i % 4 else f"memo {i}")
            for i in range(1, 201)])
        src.run(("UPDATE items SET price = price + 1 WHERE id % 9 = 0",), ("DELETE FROM items WHERE id = 5",))
        run = _run_hour_0(stack, spark, src, "my", "canal-json", 1, MY_CONNECTION,
                          reconcile={"buckets": 8, "fetch_rows": 40})
        yield dict(run, name=f"my_{src.db}__items")
    finally:
        src.close()


def test_mariadb_in_sync_then_drift_then_in_flight(spark, stack, my_run):
    src, cfg, name = my_run["src"], my_run["cfg"], my_run["name"]
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN lake.{quote_ident(cfg.silver.namespace)}").collect()]
    assert tables == [name]
    r = reconcile_table(spark, cfg, name, my_run["connections"])
    assert r.status == "in sync", r.log_line()
    assert r.rows_source == r.rows_silver == 199

    src.run(("UPDATE items SET memo = 'edited behind' WHERE id = 4",), ("DELETE FROM items WHERE id = 7",),
            ("UPDATE items SET at = '2024-03-01 00:00:00.000001' WHERE id = 11",),
            ("INSERT INTO items VALUES (500, 'new', 1.00, NULL, NULL, x'00', NULL)",), log_bin=False)
    src.run(("UPDATE items SET price = 99.99 WHERE id = 30",), ("DELETE FROM items WHERE id = 31",))
    _produce(stack["bootstrap"], my_run["topic"], src.capture(), 1)

    r = reconcile_table(spark, cfg, name, my_run["connections"])
    assert _key_ids(r.drift_samples) == [4, 7, 11, 500], r.log_line()
    assert _key_ids(r.in_flight_samples) == [30, 31], r.log_line()
    assert (r.keys_drifted, r.keys_in_flight, r.status) == (4, 2, "drift")


def test_mariadb_soft_deletes_and_a_source_table_named_in_the_config(spark, stack):
    """In soft-delete mode silver keeps a deleted row (``_cdc_deleted``), and reconciliation
    leaves it out: in sync. ``reconcile.source_tables`` points the silver table at another
    source table (here a copy lacking key 9, made with the binary log off): that table is read."""
    src = MySource()
    try:
        src.conn.cursor().executemany("INSERT INTO items (id, name, price) VALUES (%s, %s, %s)",
                                      [(i, f"item {i}", Decimal(i)) for i in range(1, 31)])
        src.run(("DELETE FROM items WHERE id = 5",))
        run = _run_hour_0(stack, spark, src, "my", "canal-json", 1, MY_CONNECTION, silver={"delete_mode": "soft"},
                          reconcile={"buckets": 4, "fetch_rows": 10})
        cfg, name = run["cfg"], f"my_{src.db}__items"
        full = f"lake.{quote_ident(cfg.silver.namespace)}.{quote_ident(name)}"
        assert spark.sql(f"SELECT count(*) AS n, count_if(_cdc_deleted) AS d FROM {full}").first() == (30, 1)
        r = reconcile_table(spark, cfg, name, run["connections"])
        assert (r.status, r.rows_source, r.rows_silver) == ("in sync", 29, 29), r.log_line()

        src.run(("CREATE TABLE items_copy LIKE items",), ("INSERT INTO items_copy SELECT * FROM items WHERE id <> 9",),
                log_bin=False)
        cfg.reconcile.source_tables[name] = f"{src.db}.items_copy"
        r = reconcile_table(spark, cfg, name, run["connections"])
        assert (r.status, _key_ids(r.drift_samples), r.rows_source) == ("drift", [9], 28), r.log_line()
        assert r.source_table.endswith(f"{src.db}.items_copy"), r.source_table
    finally:
        src.close()


# ---------------------------------------------------------------------------------------------
# one canonical text in three engines


def test_canonical_text_is_the_same_in_postgres_mariadb_and_spark(spark):
    """Edge values (a decimal below 10^-6, which Spark prints with an exponent; 20 integer digits;
    trailing zeros; a timestamp before 1970 and one with an offset; bytes with 0x00 and 0xff;
    text with the separators; NULLs) give the same row text in the database's SQL and in Spark
    over the silver types the pipeline gives them."""
    from pyspark.sql.types import (BinaryType, BooleanType, DateType, DecimalType, DoubleType, IntegerType, StringType,
                                   StructField, StructType, TimestampType)

    from cdclake.reconcile.canonical import kind_of, spark_text, sql_text
    from cdclake.reconcile.source import SourceDatabase

    utc = dt.timezone.utc
    rows = [(1, Decimal("0.000000001"), "1.5000", dt.datetime(2024, 1, 1, 8, 0, 0, 123456, utc),
             b"\x00\xff", dt.date(1969, 12, 31), "é,1:x-", True, 1e-7),
            (2, Decimal("-12345678901234567890.123456789"), "0", dt.datetime(1969, 12, 31, 23, 59, 59, 500000, utc),
             b"", dt.date(2000, 2, 29), "", False, -2.5),
            (3, None, None, None, None, None, None, None, None)]
    names = ["id", "n", "v", "t", "b", "d", "s", "f", "x"]
    silver = spark.createDataFrame(rows, StructType([
        StructField("id", IntegerType()), StructField("n", DecimalType(38, 18)), StructField("v", StringType()),
        StructField("t", TimestampType()), StructField("b", BinaryType()), StructField("d", DateType()),
        StructField("s", StringType()), StructField("f", BooleanType()), StructField("x", DoubleType())]))
    types = {f.name: f.dataType.simpleString() for f in silver.schema.fields}

    # PostgreSQL
    db = f"cdc_recon_{uuid.uuid4().hex[:8]}"
    admin = pg_connect("postgres", autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {db}")
    try:
        conn = pg_connect(db, autocommit=True)
        cur = conn.cursor()
        cur.execute("CREATE TABLE e (id int PRIMARY KEY, n numeric(38,18), v numeric, t timestamptz, b bytea, d date, "
                    "s text, f boolean, x double precision)")
        cur.executemany("INSERT INTO e VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        [(r[0], r[1], None if r[2] is None else Decimal(r[2]), *r[3:]) for r in rows])
        src = SourceDatabase({"conn_type": "postgres", "host": "127.0.0.1", "schema": db}, "t")
        cols = [(c.name, c.kind) for c in src.columns("public", "e")]
        pg = dict(src.query(f"SELECT id, {sql_text('postgres', cols)} FROM e"))
        src.close()
        conn.close()
    finally:
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.close()
    kinds = dict(cols)
    got = dict(silver.select("id", spark_text([(c, kinds[c], types[c]) for c in names]).alias("t"))
               .rdd.map(tuple).collect())
    assert got == pg

    # MariaDB: no boolean, no variable-scale numeric; datetime(6) holds the UTC wall clock
    my = _my_connect()
    try:
        with my.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            cur.execute(f"CREATE TABLE {db}.e (id int PRIMARY KEY, n decimal(38,18), t datetime(6), b varbinary(8), "
                        "d date, s text, x double) DEFAULT CHARSET = utf8mb4")
            cur.executemany(f"INSERT INTO {db}.e VALUES (%s, %s, %s, %s, %s, %s, %s)",
                            [(r[0], r[1], None if r[3] is None else r[3].replace(tzinfo=None), r[4], r[5], r[6], r[8])
                             for r in rows])
        src = SourceDatabase({"conn_type": "mysql", "host": "127.0.0.1"}, "t")
        cols = [(c.name, c.kind) for c in src.columns(db, "e")]
        assert [k for _, k in cols] == ["int", "decimal", "timestamp", "binary", "date", "text", "float"]
        mine = dict(src.query(f"SELECT id, {sql_text('mysql', cols)} FROM {db}.e"))
        src.close()
    finally:
        with my.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        my.close()
    kinds = dict(cols)
    got = dict(silver.select("id", spark_text([(c, kinds[c], types[c]) for c, _ in cols]).alias("t"))
               .rdd.map(tuple).collect())
    assert got == mine
    assert kind_of("postgres", "timestamp with time zone") == kind_of("mysql", "datetime") == "timestamp"
