"""Real databases as the truth: changes captured from a live PostgreSQL and a live MariaDB, through
the pipeline, and silver compared with ``SELECT *`` of the database.

- PostgreSQL 15 at ``127.0.0.1:5432`` (user ``postgres``, trust auth) with ``wal_level = logical``
  and the wal2json output plugin (``make deps``: tests/setup_sources.sh). A database of the
  test's own, two tables (REPLICA IDENTITY FULL and default), a wal2json slot, a workload of
  interleaved transactions from two connections; the slot's changes are rendered as Debezium
  PostgreSQL messages with the Connect schema (:mod:`cdclake.sim.pg_wal2json`).
- MariaDB at ``127.0.0.1:3306`` (root, no password) with a ROW binary log, full row images and
  metadata (``make deps``). A database of the test's own, the same kind of workload; the binlog
  read with python-mysql-replication and rendered as Canal flat messages and as Maxwell messages
  (:mod:`cdclake.sim.mysql_binlog`). The Maxwell topic runs only when ``maxwell-json`` is a
  registered format.

Every topic gets some messages twice (redelivery) and the hour boundary falls inside a
transaction (its later changes stamped in the next hour); the pipeline runs hour 0, then hour 1.
A server that cannot be reached fails the test (it is not skipped).
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import random
import uuid
from decimal import Decimal

import pytest
from conftest import write_pipeline
from helpers import pg_connect
from pipeline import all_rows, hour, ms, run_window

from cdclake import sim
from cdclake.config import load_pipeline
from cdclake.formats.canal import mysql_type
from cdclake.silver import build_silver
from cdclake.sim import mysql_binlog, pg_wal2json
from cdclake.types import quote_ident
from cdclake.window import Window

MY = dict(host="127.0.0.1", port=3306, user="root", password="")
RNG = random.Random(20240101)


def _big_text(n: int) -> str:
    """``n`` characters of text that compresses badly (so PostgreSQL stores it out of line: TOAST)."""
    return "".join(RNG.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(n))


# ---------------------------------------------------------------------------------------------
# PostgreSQL


PG_DDL = """
CREATE TABLE accounts (id integer PRIMARY KEY, owner varchar(40) NOT NULL, balance numeric(12,2),
  opened date, updated_at timestamptz, avatar bytea, ratio numeric);
ALTER TABLE accounts REPLICA IDENTITY FULL;
CREATE TABLE notes (id bigint PRIMARY KEY, title text, body text, amount numeric(10,3), due date,
  at timestamptz, blob bytea, score numeric);
"""
SLOT_OPTIONS = ("'format-version', '2', 'include-xids', '1', 'include-lsn', '1', 'include-timestamp', '1', "
                "'include-types', '1'")


def pg_workload(c1, c2, big: list[str]) -> None:
    """Interleaved transactions on two connections (autocommit off): updates with and without
    REPLICA IDENTITY FULL, key changes, delete and re-insert of a key, NULLs, TOAST."""
    a, b = c1.cursor(), c2.cursor()
    ins_acc = "INSERT INTO accounts VALUES (%s, %s, %s, %s, %s, %s, %s)"
    ins_note = "INSERT INTO notes VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    for i in range(1, 9):
        a.execute(ins_acc, (i, f"owner {i}", Decimal(f"{i * 1000}.{i:02d}"), dt.date(2020, 1, i),
                            f"2024-03-0{1 + i % 8} 1{i}:30:00.12345{i}+0{i % 5}", bytes([i, 0, 255, i * 7]),
                            Decimal(f"{i}.{'1' * i}")))
        b.execute(ins_note, (i, f"note {i}", big[i % 3] if i % 2 else f"short {i}", Decimal(f"-{i}.125"),
                             dt.date(1969, 12, 31) + dt.timedelta(days=i * 40), f"1999-12-31 23:59:5{i}.5-0{i}:30",
                             b"\x00" * i + b"\xfe", Decimal("1e-5") * i))
    c2.commit()
    c1.commit()
    # interleaved: c1 holds an open transaction over c2's commit
    a.execute("UPDATE accounts SET balance = balance + 0.01, updated_at = now() WHERE id = 1")
    b.execute("UPDATE notes SET title = 'renamed' WHERE id = 2")
    b.execute(ins_acc, (9, "owner 9", None, None, None, None, None))
    a.execute("UPDATE notes SET amount = 99999.999 WHERE id = 3")  # body (TOAST) unchanged, default identity
    c2.commit()
    a.execute("UPDATE accounts SET id = 20 WHERE id = 2")  # key change, FULL
    b.execute("UPDATE notes SET id = 40, score = 123456789.000000001 WHERE id = 4")  # key change, default
    c1.commit()
    a.execute("DELETE FROM accounts WHERE id = 5")
    c2.commit()
    c1.commit()
    # delete and re-insert of the same key, in one transaction and across two
    a.execute("DELETE FROM notes WHERE id = 1")
    a.execute(ins_note, (1, "again", "reborn", Decimal("0.001"), dt.date(2000, 2, 29), "2024-02-29 00:00:00+00",
                         b"", None))
    c1.commit()
    b.execute("DELETE FROM accounts WHERE id = 3")
    c2.commit()
    b.execute(ins_acc, (3, "owner three", Decimal("-0.99"), dt.date(1970, 1, 1), "1970-01-01 00:00:00+00",
                        b"\x80", Decimal("-12345678901234567890.123456789")))
    c2.commit()
    # TOAST changed, avatar set to NULL on a FULL table, an update of a FULL row with a TOASTed body
    b.execute("UPDATE notes SET body = %s WHERE id = 5", (big[2],))
    a.execute("UPDATE accounts SET avatar = NULL, owner = 'x' WHERE id = 4")
    c1.commit()
    c2.commit()
    # many small interleaved updates
    for n in range(40):
        cur, conn = (a, c1) if n % 2 else (b, c2)
        cur.execute("UPDATE accounts SET balance = coalesce(balance, 0) + %s, updated_at = %s WHERE id = %s",
                    (Decimal(n) / 4, f"2024-05-01 00:00:{n:02d}.{n:06d}+00", (1, 4, 6, 7, 9)[n % 5]))
        cur.execute("UPDATE notes SET score = %s, due = due + 1 WHERE id = %s",
                    (Decimal(n) / 7 if n % 3 else None, (1, 3, 5, 6, 7, 40)[n % 6]))
        if n % 3 == 0:
            conn.commit()
    c1.commit()
    c2.commit()


@pytest.fixture(scope="module")
def pg_source():
    """The PostgreSQL workload: ``{"messages", "tables", "truth", "transactions"}``."""
    db = f"cdc_truth_{uuid.uuid4().hex[:8]}"
    slot = f"{db}_slot"
    admin = pg_connect("postgres", autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {db}")
    c1 = c2 = None
    try:
        c1, c2 = pg_connect(db), pg_connect(db)
        cur = c1.cursor()
        cur.execute(PG_DDL)
        c1.commit()
        cur.execute("SELECT lsn FROM pg_create_logical_replication_slot(%s, 'wal2json')", (slot,))
        start_lsn = pg_wal2json.lsn_int(cur.fetchone()[0])
        c1.commit()
        pg_workload(c1, c2, [_big_text(6000), _big_text(9000), _big_text(12000)])
        cur.execute(f"SELECT data FROM pg_logical_slot_get_changes(%s, NULL, NULL, {SLOT_OPTIONS})", (slot,))
        rows = [r[0] for r in cur.fetchall()]
        tables = pg_wal2json.describe_tables(cur, "public", ["accounts", "notes"])
        truth = {}
        for name in tables:
            cur.execute(f"SELECT * FROM {name}")
            names = [d[0] for d in cur.description]
            truth[name] = [dict(zip(names, r)) for r in cur.fetchall()]
        c1.commit()
        cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        c1.commit()
    finally:
        for c in (c1, c2):
            if c is not None:
                c.close()
        cur = admin.cursor()
        cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    (slot,))
        cur.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.close()
    transactions = pg_wal2json.read_wal2json(rows)
    messages = pg_wal2json.debezium_pg_json(transactions, tables, db, server_name="pgtruth", partitions=2,
                                            last_commit_lsn=start_lsn)
    return {"messages": messages, "tables": tables, "truth": truth, "transactions": transactions, "raw": rows}


# ---------------------------------------------------------------------------------------------
# MariaDB


MY_DDL = [
    """CREATE TABLE accounts (id int PRIMARY KEY, owner varchar(40) NOT NULL, balance decimal(12,2),
       opened date, updated_at datetime(6), avatar blob, memo text) DEFAULT CHARSET = utf8mb4""",
    """CREATE TABLE notes (id bigint PRIMARY KEY, title varchar(100), body mediumtext, amount decimal(20,6),
       due date, at datetime, raw varbinary(32)) DEFAULT CHARSET = utf8mb4""",
]


def _my_connect(database=None):
    import pymysql

    try:
        return pymysql.connect(host=MY["host"], port=MY["port"], user=MY["user"], password="", database=database,
                               autocommit=False, connect_timeout=5, charset="utf8mb4")
    except pymysql.err.OperationalError as exc:
        pytest.fail(f"MariaDB at 127.0.0.1:3306 cannot be reached ({exc}): run `make deps`", pytrace=False)


def my_workload(c1, c2, big: list[str]) -> None:
    """The MariaDB counterpart of :func:`pg_workload` (decimal, date, datetime, blob, text, key
    change, delete and re-insert, multi-row statements, interleaved transactions)."""
    a, b = c1.cursor(), c2.cursor()
    ins_acc = "INSERT INTO accounts VALUES (%s, %s, %s, %s, %s, %s, %s)"
    ins_note = "INSERT INTO notes VALUES (%s, %s, %s, %s, %s, %s, %s)"
    a.executemany(ins_acc, [(i, f"owner {i} é", Decimal(f"{i * 1000}.{i:02d}"), dt.date(2020, 1, i),
                             dt.datetime(2024, 3, 1, i, 30, 0, 123450 + i), bytes([i, 0, 255, 128, i * 7]),
                             f"memo ✓ {i}") for i in range(1, 9)])
    for i in range(1, 9):
        b.execute(ins_note, (i, f"note {i}", big[i % 3] if i % 2 else f"short {i}", Decimal(f"-{i}.000125"),
                             dt.date(1969, 12, 31) + dt.timedelta(days=i * 40), dt.datetime(1999, 12, 31, 23, 59, i),
                             b"\x00" * i + b"\xfe"))
    c2.commit()
    c1.commit()
    a.execute("UPDATE accounts SET balance = balance + 0.01, updated_at = NOW(6) WHERE id = 1")
    b.execute("UPDATE notes SET title = 'renamed' WHERE id = 2")
    b.execute(ins_acc, (9, "owner 9", None, None, None, None, None))
    a.execute("UPDATE notes SET amount = 99999999999999.999999 WHERE id = 3")
    c2.commit()
    a.execute("UPDATE accounts SET id = 20 WHERE id = 2")  # key change
    b.execute("UPDATE notes SET id = 40, raw = NULL WHERE id = 4")  # key change
    c1.commit()
    a.execute("DELETE FROM accounts WHERE id = 5")
    c2.commit()
    c1.commit()
    a.execute("DELETE FROM notes WHERE id = 1")
    a.execute(ins_note, (1, "again", "reborn", Decimal("0.000001"), dt.date(2000, 2, 29),
                         dt.datetime(2024, 2, 29), b""))
    c1.commit()
    b.execute("DELETE FROM accounts WHERE id = 3")
    c2.commit()
    b.execute(ins_acc, (3, "owner three", Decimal("-0.99"), dt.date(1970, 1, 1), dt.datetime(1970, 1, 1),
                        b"\x80", None))
    c2.commit()
    b.execute("UPDATE notes SET body = %s WHERE id = 5", (big[2],))
    a.execute("UPDATE accounts SET avatar = NULL, owner = 'x' WHERE id = 4")
    a.execute("UPDATE accounts SET memo = CONCAT(memo, '!') WHERE id IN (6, 7, 8)")  # one event, three rows
    c1.commit()
    c2.commit()
    for n in range(40):
        cur, conn = (a, c1) if n % 2 else (b, c2)
        cur.execute("UPDATE accounts SET balance = COALESCE(balance, 0) + %s, updated_at = %s WHERE id = %s",
                    (Decimal(n) / 4, dt.datetime(2024, 5, 1, 0, 0, n, n * 1000), (1, 4, 6, 7, 9)[n % 5]))
        cur.execute("UPDATE notes SET amount = %s, due = due + INTERVAL 1 DAY WHERE id = %s",
                    (Decimal(n) / 8 if n % 3 else None, (1, 3, 5, 6, 7, 40)[n % 6]))
        if n % 3 == 0:
            conn.commit()
    c1.commit()
    c2.commit()


@pytest.fixture(scope="module")
def my_source():
    """The MariaDB workload: ``{"canal", "maxwell", "tables", "truth", "transactions"}``."""
    db = f"cdc_truth_{uuid.uuid4().hex[:8]}"
    admin = _my_connect()
    c1 = c2 = None
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {db}")
            for ddl in MY_DDL:
                cur.execute(f"USE {db}")
                cur.execute(ddl)
            cur.execute("SHOW MASTER STATUS")
            status = cur.fetchone()
            if status is None:
                pytest.fail("MariaDB's binary log is off: run `make deps`", pytrace=False)
            cur.execute("SELECT @@gtid_binlog_pos")
            gtid = cur.fetchone()[0]
        c1, c2 = _my_connect(db), _my_connect(db)
        my_workload(c1, c2, [_big_text(3000), _big_text(70000), _big_text(20000)])
        with admin.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            end = cur.fetchone()
        assert end[0] == status[0], f"the binary log rotated during the workload ({status[0]} -> {end[0]})"
        transactions = mysql_binlog.read_binlog(MY, db, status[0], int(status[1]), gtid, int(end[1]))
        with admin.cursor() as cur:
            tables = mysql_binlog.describe_tables(cur, db, ["accounts", "notes"])
            truth = {}
            for name in tables:
                cur.execute(f"SELECT * FROM {db}.{name}")
                names = [d[0] for d in cur.description]
                truth[name] = [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        for c in (c1, c2):
            if c is not None:
                c.close()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {db}")
        admin.close()
    return {"canal": mysql_binlog.canal_flat_json(transactions, tables, db),
            "maxwell": mysql_binlog.maxwell_json(transactions, tables, db),
            "tables": tables, "truth": truth, "transactions": transactions, "db": db}


# ---------------------------------------------------------------------------------------------
# delivery and the pipeline


def deliver(messages: list, dup_every: int = 7) -> list[tuple]:
    """``(partition, timestamp_ms, key, value)`` for :func:`conftest.produce`: the messages in order,
    their timestamps spread over hours 0 and 1 with the boundary inside a transaction (the first
    message after the middle whose transaction started before it), then every ``dup_every``-th
    message again at the end of hour 1 (a redelivery)."""
    n = len(messages)
    cut = n // 2
    while cut < n - 1 and messages[cut].commit_ts_ms != messages[cut - 1].commit_ts_ms:
        cut += 1
    assert 0 < cut < n - 1, "no transaction spans the middle of the messages"
    out = []
    for i, m in enumerate(messages):
        if i < cut:
            ts = ms(hour(0)) + 1000 + i * (3_500_000 // cut)
        else:
            ts = ms(hour(1)) + 1000 + (i - cut) * (3_000_000 // (n - cut))
        out.append((m.partition, ts, m.key, m.value))
    for j, m in enumerate(messages[::dup_every]):
        out.append((m.partition, ms(hour(1)) + 3_100_000 + j, m.key, m.value))
    return out


@pytest.fixture(scope="module")
def run(stack, spark, pg_source, my_source):
    """All topics through land, normalize, silver: hour 0, then hour 1."""
    u = uuid.uuid4().hex[:6]
    topics = {"pg": ("debezium-json", pg_source["messages"], 2), "canal": ("canal-json", my_source["canal"], 1),
              "maxwell": ("maxwell-json", my_source["maxwell"], 1)}
    # Maxwell's JSON names no column types: configured per table, from the server's COLUMN_TYPE
    options = {"maxwell": {"options": {"column_types": {
        t.name: {c.name: mysql_type(c.column_type) for c in t.columns} for t in my_source["tables"].values()}}}}
    sources = []
    for tag, (fmt, messages, partitions) in topics.items():
        topic = f"truth.{tag}.{u}"
        sim.create_topic(stack["bootstrap"], topic, partitions)
        sim.produce(stack["bootstrap"], topic, [sim.Message(k, v, ts, p) for p, ts, k, v in deliver(messages)])
        sources.append({"topic": topic, "format": fmt, "table_prefix": f"{tag}_", **options.get(tag, {})})
    path = write_pipeline(f"truth_{u}", sources, silver={"namespace": f"truth_{u}"})
    results = [run_window(spark, path, 0, 1), run_window(spark, path, 1, 2)]
    ns = f"truth_{u}"
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN lake.{quote_ident(ns)}").collect()]
    # the same bronze hours merged by Spark's MERGE alone (the run above took the file level)
    spark_only = load_pipeline(write_pipeline(f"truth_{u}_merge", sources, silver={
        "namespace": f"truth_{u}_merge", "file_merge_max_changes": 0}))
    for h in range(2):
        build_silver(spark, spark_only, Window(hour(h), hour(h + 1)))
    return {"ns": ns, "merge_ns": f"truth_{u}_merge", "tables": tables, "results": results,
            "topics": {t: s["topic"] for t, s in zip(topics, sources)}}


def test_file_level_and_spark_merge_give_equal_tables(spark, run):
    """Every silver table the run merged at the file level equals, every column included, the
    table Spark's MERGE makes of the same bronze hours."""
    for name in run["tables"]:
        file_level, merged = (all_rows(spark, f"lake.{quote_ident(ns)}.{quote_ident(name)}")
                              for ns in (run["ns"], run["merge_ns"]))
        assert file_level and file_level == merged, name


def silver(spark, run, tag: str, table: str) -> list[dict]:
    (name,) = [t for t in run["tables"] if t.startswith(f"{tag}_") and t.endswith(f"__{table}")]
    df = spark.table(f"lake.{quote_ident(run['ns'])}.{quote_ident(name)}")
    return [{k: v for k, v in r.asDict().items() if not k.startswith("_cdc_")} for r in df.collect()]


def norm(v: object) -> object:
    """A value compared by value: decimals (and decimal text) as Decimal, datetimes as naive UTC,
    bytes-like as bytes, text as text."""
    if isinstance(v, dt.datetime):
        return v.astimezone(dt.timezone.utc).replace(tzinfo=None) if v.tzinfo else v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, float):
        return Decimal(repr(v))
    if isinstance(v, (int, Decimal)):
        return Decimal(v).normalize()
    return v


def compare(truth: list[dict], rows: list[dict], key: str, typed: dict) -> list[str]:
    """Differences between the database rows and silver rows (at most 5); ``typed``: columns whose
    silver text is a number (VariableScaleDecimal → string)."""
    want = {r[key]: r for r in truth}
    got = {r[key]: r for r in rows}
    diffs = [f"keys only in the database: {sorted(set(want) - set(got))}"] if set(want) - set(got) else []
    if set(got) - set(want):
        diffs.append(f"keys only in silver: {sorted(set(got) - set(want))}")
    for k in sorted(set(want) & set(got)):
        w, g = want[k], got[k]
        if set(w) != set(g):
            diffs.append(f"{k}: columns {sorted(w)} != {sorted(g)}")
            continue
        for col in w:
            gv = Decimal(g[col]) if col in typed and isinstance(g[col], str) else g[col]
            if norm(w[col]) != norm(gv):
                diffs.append(f"{key}={k} {col}: database {w[col]!r} silver {g[col]!r}")
    return diffs[:5]


# ---------------------------------------------------------------------------------------------
# the renderers


def test_pg_changes_cover_the_workload(pg_source):
    """wal2json gave interleaved transactions with the workload's kinds of change, and the render
    has the connector's shapes: key changes as delete + create, TOAST placeholders, tombstones."""
    txs = pg_source["transactions"]
    assert len(txs) >= 20 and all(a.commit_lsn < b.commit_lsn for a, b in zip(txs, txs[1:]))
    # an interleaved transaction: a change whose LSN is below the previous transaction's commit
    assert any(ch and pg_wal2json.lsn_int(ch[0]["lsn"]) < prev.commit_lsn
               for prev, ch in zip(txs, [t.changes for t in txs[1:]]))
    values = [json.loads(m.value) for m in pg_source["messages"] if m.value is not None]
    payloads = [v["payload"] for v in values]
    assert {p["op"] for p in payloads} == {"c", "u", "d"}
    assert sum(m.value is None for m in pg_source["messages"]) == sum(p["op"] == "d" for p in payloads)
    full = [p for p in payloads if p["op"] == "u" and p["source"]["table"] == "accounts"]
    default = [p for p in payloads if p["op"] == "u" and p["source"]["table"] == "notes"]
    assert full and all(p["before"] is not None for p in full)
    assert default and all(p["before"] is None for p in default)
    assert any(p["after"]["body"] == pg_wal2json.UNAVAILABLE for p in default)  # TOAST left out by wal2json
    keys_changed = [(p["before"]["id"], p["source"]["lsn"]) for p in payloads if p["op"] == "d"]
    creates = {(p["after"]["id"], p["source"]["lsn"]) for p in payloads if p["op"] == "c"}
    assert any(old == 2 and (20, lsn) in creates for old, lsn in keys_changed)  # accounts 2 -> 20
    assert any(old == 4 and (40, lsn) in creates for old, lsn in keys_changed)  # notes 4 -> 40
    src = payloads[-1]["source"]
    assert src["connector"] == "postgresql" and json.loads(src["sequence"])[1] == str(src["lsn"])
    account = next(v for v in values if v["payload"]["source"]["table"] == "accounts")
    schema = {f["field"]: f for f in account["schema"]["fields"][1]["fields"]}
    assert schema["ratio"]["name"] == "io.debezium.data.VariableScaleDecimal"
    assert schema["updated_at"]["name"] == "io.debezium.time.ZonedTimestamp"


def test_mariadb_changes_cover_the_workload(my_source):
    """The binlog gave committed transactions with XIDs and real positions; Canal has one message
    per rows event (a three-row UPDATE among them), Maxwell one per row with xoffset/commit."""
    txs = my_source["transactions"]
    assert len(txs) >= 20 and all(tx.xid for tx in txs)
    positions = [(ev.file, ev.pos) for tx in txs for ev in tx.events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    canal = [json.loads(m.value) for m in my_source["canal"]]
    assert {c["type"] for c in canal} == {"INSERT", "UPDATE", "DELETE"}
    assert any(c["type"] == "UPDATE" and len(c["data"]) == 3 for c in canal)
    assert any(c["type"] == "UPDATE" and "id" in (c["old"] or [{}])[0] for c in canal)  # key change
    account = next(c for c in canal if c["table"] == "accounts")
    assert account["mysqlType"]["updated_at"] == "datetime(6)" and account["pkNames"] == ["id"]
    maxwell = [json.loads(m.value, parse_float=Decimal) for m in my_source["maxwell"]]
    assert sum(1 for m in maxwell if m.get("commit")) == len(txs)
    assert all(m["position"] == f"{ev.file}:{ev.pos}" for m, ev in
               zip(maxwell, [ev for tx in txs for ev in tx.events for _ in ev.rows]))
    assert any(isinstance(m["data"].get("amount"), Decimal) for m in maxwell)


# ---------------------------------------------------------------------------------------------
# silver = SELECT *


def test_pipeline_counts(run):
    """Nothing quarantined; both hours landed changes."""
    for result in run["results"]:
        for topic, n in result["normalize"].items():
            assert n["quarantined"] == 0, (topic, n)
            assert n["changes"] > 0, (topic, n)


@pytest.mark.parametrize("table", ["accounts", "notes"])
def test_postgres_silver_equals_database(spark, run, pg_source, table):
    """Debezium PostgreSQL JSON of wal2json's changes: silver = ``SELECT *``."""
    rows = silver(spark, run, "pg", table)
    diffs = compare(pg_source["truth"][table], rows, "id", {"ratio", "score"})
    assert not diffs, diffs
    assert len(rows) == len(pg_source["truth"][table])


@pytest.mark.parametrize("table", ["accounts", "notes"])
def test_mariadb_canal_silver_equals_database(spark, run, my_source, table):
    """Canal flat messages of the binlog: silver = ``SELECT *``."""
    rows = silver(spark, run, "canal", table)
    diffs = compare(my_source["truth"][table], rows, "id", set())
    assert not diffs, diffs


@pytest.mark.parametrize("table", ["accounts", "notes"])
def test_mariadb_maxwell_silver_equals_database(spark, run, my_source, table):
    """Maxwell messages of the binlog: silver = ``SELECT *``."""
    rows = silver(spark, run, "maxwell", table)
    diffs = compare(my_source["truth"][table], rows, "id", set())
    assert not diffs, diffs


def test_bytes_render_as_base64_in_both_json_forms(pg_source, my_source):
    """Spot check of the renderers' byte handling against the database's own bytes."""
    acc = {r["id"]: r for r in pg_source["truth"]["accounts"]}
    created = [json.loads(m.value)["payload"]["after"] for m in pg_source["messages"]
               if m.value is not None and b'"op":"c"' in m.value and b'"table":"accounts"' in m.value]
    seven = [a for a in created if a["id"] == 7][-1]
    assert base64.b64decode(seven["avatar"]) == bytes(acc[7]["avatar"])
    my = {r["id"]: r for r in my_source["truth"]["accounts"]}
    first = next(v for v in (json.loads(m.value) for m in my_source["maxwell"]) if v["table"] == "accounts")
    assert base64.b64decode(first["data"]["avatar"]) == my[first["data"]["id"]]["avatar"]
