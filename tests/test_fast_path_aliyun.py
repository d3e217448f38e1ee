"""The ``aliyun-json`` columnar fast path gives, record by record, exactly what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` with and without
:meth:`cdclake.formats.aliyun.AliyunJsonParser.fast_parse` (``assert_same``): every record must
give the same output rows, quarantine reasons included. The records are simulated hours of the
shop rendered as DataWorks JSON (with and without the configured types of its topic), and unusual
and malformed variants: every ``schema``, ``schema.source`` and ``payload`` member removed, null or
of another JSON type, every operation (control operations too), column lists and types, images
in another column order or with columns more or fewer, key columns null or missing, Kafka keys,
``sequenceId`` of every shape, bytes that are not one JSON document. The fast path must also read
nearly all of a simulated hour: else the equality is empty.
"""
from __future__ import annotations

import datetime as dt
import json
import pickle

import pytest
from parse_harness import DROP, assert_same, dumps, edited_doc

from cdclake.formats import get_parser
from cdclake.record import KafkaRecord
from cdclake.sim import SimulatedSource, aliyun_json
from cdclake.sim.wire import WIRE_FORMATS

FMT = "aliyun-json"
#: The topic's configured types (the columns DataWorks' six types say too little about).
TYPED = next(w for w in WIRE_FORMATS if w.format == FMT).options["options"]
ODD = [DROP, None, "", "x", 0, 1, -1, 1.5, 10**40, True, [1], {"a": 1}, []]


def _simulated(seed: int, hours: int = 2, partitions: int = 2) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return [(m.partition, m.key, m.value) for m in aliyun_json(src.run(), src.tables, partitions=partitions)]


@pytest.mark.parametrize("size", [5, 1000])
def test_simulated_hours_are_read_alike(size):
    records = _simulated(51)
    read_fast = assert_same(FMT, records, size, TYPED)
    assert read_fast >= 0.95 * len(records), (read_fast, len(records))


def test_simulated_hour_untyped_is_read_alike():
    records = _simulated(53, hours=1)
    read_fast = assert_same(FMT, records, 64)
    assert read_fast >= 0.95 * len(records), (read_fast, len(records))


def test_with_configured_keys_and_types_is_read_alike():
    """Keys other than the tables' and types some values do not fit (``email`` as a date,
    ``name`` as an int, a DATE as a date)."""
    options = {"primary_key": ["id"], "primary_keys": {"shop.customers": ["email"], "orders": ["id", "customer_id"]},
               "column_types": {"name": "int", "shop.customers": {"email": "date", "birth_date": "date"},
                                "orders": {"ordered_at": "date", "quantity": "boolean", "amount": "decimal(4,1)"}}}
    records = _simulated(54, hours=1)
    assert assert_same(FMT, records, 64, options) > 0


def _first(docs: list[dict], op: str) -> dict:
    return next(d for d in docs if d["payload"]["op"] == op and d["payload"]["sequenceId"] != "-1")


def _variants(records: list[tuple]) -> list[tuple]:
    """``(Kafka key, value)`` variants of simulated DataWorks messages: unusual but valid, or malformed."""
    docs = [json.loads(v) for _, _, v in records]
    load = next(d for d in docs if d["payload"]["sequenceId"] == "-1")
    ins, dele = _first(docs, "INSERT"), _first(docs, "DELETE")
    upd = next(d for d in docs if d["payload"]["op"] == "UPDATE_AFTER" and d["payload"]["before"])
    half = _first(docs, "UPDATE_BEFORE")
    out: list[tuple] = []

    def doc(d, path=(), kafka=None, **members):
        out.append((kafka, dumps(edited_doc(d, path, members))))

    bases = (load, ins, upd, half, dele)
    for base in bases:
        for member in ("schema", "payload", "version"):
            for value in ODD:
                doc(base, **{member: value})
        for field in ("dataColumn", "primaryKey", "source"):
            for value in ODD:
                doc(base, ("schema",), **{field: value})
        for field in ("dbName", "tableName", "schemaName", "dbType"):
            for value in ODD + ["a/b", "..", "t\x01", "ok"]:
                doc(base, ("schema", "source"), **{field: value})
        for field in ("before", "after", "sequenceId", "timestamp", "op", "ddl"):
            for value in ODD:
                doc(base, ("payload",), **{field: value})
        for value in ODD:
            doc(base, ("payload", "timestamp"), eventTime=value)
    for op in ("INSERT", "insert", "UPDATE_AFTER", "UPDATE_BEFORE", "UPDATE_BEFOR", "DELETE", "TRUNCATE", "MHEARTBEAT",
               "TRANSACTION_BEGIN", "GTID", "ALTER", "CREATE", "UPSERT", " INSERT", ""):
        for base in (ins, upd, half, dele):
            doc(base, ("payload",), op=op)
    for seq in ("-1", -1, "0", "1", " 12 ", "+1", "-2", "1.5", "1e3", "\u0661", str(10**38 - 1), str(10**38),
                10**38, 7, 7.0, True):
        doc(ins, ("payload",), sequenceId=seq)
        doc(dele, ("payload",), sequenceId=seq)
    doc(ins, ("payload",), ddl="ALTER TABLE t ADD c INT")
    cols = ins["schema"]["dataColumn"]
    row = ins["payload"]["after"]["dataColumn"]
    first = cols[0]["name"]
    doc(ins, ("schema",), dataColumn=list(reversed(cols)))
    doc(ins, ("schema",), dataColumn=cols[1:])
    doc(ins, ("schema",), dataColumn=cols + [{"name": "extra", "type": "STRING"}])
    doc(ins, ("schema",), dataColumn=[{**cols[0], "type": "INT"}] + cols[1:])
    doc(ins, ("schema",), dataColumn=[{**cols[0], "type": None}] + cols[1:])
    doc(ins, ("schema",), dataColumn=[{"type": "LONG"}] + cols[1:])
    doc(ins, ("schema",), dataColumn=[cols[0]["name"]] + cols[1:])
    doc(ins, ("schema",), dataColumn=[{**c, "type": "STRING"} for c in cols])
    doc(ins, ("schema",), dataColumn=[{**c, "type": "DATE"} for c in cols])
    doc(ins, ("schema",), dataColumn=[{**c, "type": "BOOLEAN"} for c in cols])
    for pk in ([], None, "id", [1], ["nope"], [first, cols[1]["name"]]):
        doc(ins, ("schema",), primaryKey=pk)
        doc(dele, ("schema",), primaryKey=pk)
    for value in (5, -1, 1.5, 10**30, True, [1, "x"], {"b": 1}, "\u00e9", None, "2024-13-40", "", "x" * 3):
        doc(ins, ("payload", "after"), dataColumn={**row, **{c["name"]: value for c in cols[1:4]}})
    doc(ins, ("payload", "after"), dataColumn=dict(reversed(list(row.items()))))
    doc(ins, ("payload", "after"), dataColumn={**row, "extra": "1"})
    doc(ins, ("payload", "after"), dataColumn={k: v for k, v in row.items() if k != first})
    doc(ins, ("payload", "after"), dataColumn={**row, first: None})
    doc(ins, ("payload", "after"), dataColumn={})
    doc(ins, ("payload", "after"), dataColumn=None)
    doc(ins, ("payload", "after"), dataColumn=[row])
    drow = dele["payload"]["before"]["dataColumn"]
    doc(dele, ("payload", "before"), dataColumn={k: v for k, v in drow.items() if k != first})
    doc(dele, ("payload", "before"), dataColumn={**drow, first: None})
    doc(upd, ("payload", "before"), dataColumn={**upd["payload"]["before"]["dataColumn"], first: None})
    doc(upd, ("payload",), before={"dataColumn": None})
    doc(half, ("payload",), after=upd["payload"]["after"])
    for name in ("a/b", "x\x01", ".", "..", "", "é"):
        doc(ins, ("payload", "after"), dataColumn={**row, name: "1"})
    for kafka_key in (b'{"id": 5}', b'{"id": null}', b'{"other": 1}', b"not json", b"{}", b"[1]", b"\xff"):
        for base in bases:
            doc(base, kafka=kafka_key)
        doc(dele, ("payload", "before"), kafka=kafka_key, dataColumn={k: v for k, v in drow.items() if k != first})
        doc(ins, ("schema",), kafka=kafka_key, primaryKey=None)
    raw = dumps(ins)
    out += [(None, raw + b" x"), (None, raw + b"  \n"), (None, raw[:-1]), (None, raw[:-5]), (None, b"\xef\xbb\xbf" + raw),
            (None, raw.replace(b'"op":"INSERT"', b'"op":"INSERT","op":"DELETE"', 1)),
            (None, raw.replace(b'"dataColumn":{', b'"dataColumn":{"\\ud800":"1",', 1)),
            (None, raw.replace(b'"dataColumn":{', b'"dataColumn":{"x":NaN,', 1)),
            (None, raw.replace(b'"dataColumn":{', b'"dataColumn":{"x":1e999,', 1)),
            (None, b""), (None, b"[]"), (None, b'"x"'), (None, b"null"), (None, b"{}"), (None, b'{"payload":{}}')]
    return out


@pytest.fixture(scope="module")
def ordinary():
    return _simulated(55, hours=1, partitions=1)


@pytest.mark.parametrize("options", [TYPED, None], ids=["typed", "untyped"])
@pytest.mark.parametrize("size", [4, 500])
def test_variants_are_read_alike(ordinary, size, options):
    variants = [(1, k, v) for k, v in _variants(ordinary)]
    mixed = [r for pair in zip(ordinary[:len(variants)], variants) for r in pair]
    assert_same(FMT, ordinary[:30] + mixed, size, options)
    read_fast = assert_same(FMT, variants, size, options)
    if size < 500:
        assert read_fast >= len(variants) // 5, (read_fast, len(variants))


def test_fast_path_leaves_control_records_and_errors_to_parse():
    parser = get_parser(FMT)
    schema = {"dataColumn": [{"name": "id", "type": "LONG"}], "primaryKey": ["id"], "source": {"tableName": "t"}}
    values = [{"schema": schema, "payload": {"op": op, "sequenceId": "9", "after": {"dataColumn": {"id": 1}},
                                             "before": {"dataColumn": {"id": 1}}, "ddl": None}}
              for op in ("MHEARTBEAT", "ALTER", "TRUNCATE", "UPSERT")]
    raws = [dumps(v) for v in values] + [b"{", b"[]", b'{"payload":{"op":"INSERT"}}']
    records = [KafkaRecord("t", 0, n, 0, None, raw) for n, raw in enumerate(raws)]
    assert parser.fast_parse(records) == [None] * len(records)


def test_pickled_parser_reads_alike(ordinary):
    """The fast path's kept plans are learnt state: dropped when pickled, learnt again."""
    parser = get_parser(FMT, TYPED)
    records = [KafkaRecord("t", p, n, 0, k, v) for n, (p, k, v) in enumerate(ordinary[:200])]
    first = parser.fast_parse(records)
    assert all(r is not None for r in first)
    clone = pickle.loads(pickle.dumps(parser))
    assert clone.fast_parse(records) == first
