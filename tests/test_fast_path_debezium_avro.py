"""The ``debezium-avro`` and ``debezium-jsonschema`` columnar fast paths give, record by record, exactly what
the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` with and without
:meth:`cdclake.formats.debezium.avro.DebeziumAvroParser.fast_parse` (``assert_same``): every
record must give the same output rows, quarantine reasons included. The records are simulated
hours of the shop rendered as Debezium Avro and as JSON with JSON Schema
(:mod:`cdclake.sim.render_debezium_avro`), and unusual and malformed variants: Debezium JSON
documents edited (operations, ``source`` members, positions, transactions, images, column
order, a PostgreSQL ``source``, values the converters refuse) and written in the format again,
Kafka keys of every kind, and wire-format bytes that are truncated, carry bytes after the
record, a wrong magic byte or an unknown schema id. The fast path must also read nearly all of a
simulated hour: else the equality is empty.
"""
from __future__ import annotations

import base64
import datetime as dt
import json

import pytest
from parse_harness import assert_same, edited_doc

from cdclake.formats.debezium.avro import wire_parts, wire_value
from cdclake.sim import SimulatedSource
from cdclake.sim.registry import registry_url
from cdclake.sim.render import debezium_json
from cdclake.sim.render_debezium_avro import AvroWriter, JsonSchemaWriter, debezium_avro, debezium_jsonschema

OPTIONS = {"schema_registry": {"url": registry_url()}}
RENDER = {"debezium-avro": debezium_avro, "debezium-jsonschema": debezium_jsonschema}
WRITERS = {"debezium-avro": AvroWriter(registry_url()), "debezium-jsonschema": JsonSchemaWriter(registry_url())}
BOTH = pytest.mark.parametrize("fmt", sorted(RENDER))


def _source(seed: int, hours: int = 2):
    src = SimulatedSource(seed=seed, start=dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc), hours=hours)
    return src.run(), src.tables


def _simulated(fmt: str, seed: int, hours: int = 2, partitions: int = 3) -> list[tuple]:
    history, tables = _source(seed, hours)
    return [(m.partition, m.key, m.value) for m in RENDER[fmt](history, tables, partitions=partitions)]


#: One record per batch for one format only: the batching is the same code for both (suite time).
@pytest.mark.parametrize("fmt,seed,size,hours", [("debezium-avro", 41, 1, 1)] + [
    (fmt, seed, size, 2) for fmt in sorted(RENDER) for seed, size in ((42, 64), (43, 1000))])
def test_simulated_hours_are_read_alike(fmt, seed, size, hours):
    records = _simulated(fmt, seed, hours)
    read_fast = assert_same(fmt, records, size, OPTIONS)
    changes = sum(1 for _, _, v in records if v)
    assert read_fast >= 0.99 * changes, (read_fast, changes)  # all but the tombstones


@BOTH
def test_with_configured_keys_and_types_is_read_alike(fmt):
    options = {**OPTIONS, "column_types": {"name": "int", "shop.customers": {"email": "date"}},
               "primary_keys": {"customers": ["email"], "orders": ["id", "customer_id"]}}
    assert assert_same(fmt, _simulated(fmt, 44, hours=1), 64, options) > 0


# ---------------------------------------------------------------------------------------------
# variants


def _docs(seed: int = 45) -> list[tuple[dict, dict]]:
    history, tables = _source(seed, 1)
    return [(json.loads(m.key), json.loads(m.value)) for m in debezium_json(history, tables) if m.value]


def _first(docs, op: str, table: str = "") -> tuple[dict, dict]:
    return next((k, v) for k, v in docs if v["payload"]["op"] == op and v["payload"]["source"]["table"].endswith(table))


def _write(fmt: str, doc: dict, subject: str = "shop.shop.x-value"):
    try:
        return WRITERS[fmt].write(subject, doc)
    except Exception:  # noqa: BLE001  (an edit Avro cannot carry: no such variant)
        return None


def _variants(fmt: str) -> list[tuple]:
    docs = _docs()
    out: list[tuple] = []
    ins_k, ins = _first(docs, "c", "orders")
    upd_k, upd = _first(docs, "u", "products")
    del_k, dele = _first(docs, "d")
    snap_k, snap = _first(docs, "r")
    keys = {id(d): _write(fmt, k, "shop.shop.x-key")
            for k, d in ((ins_k, ins), (upd_k, upd), (del_k, dele), (snap_k, snap))}

    def doc(base, path=(), kafka=None, **members):
        value = _write(fmt, edited_doc(base, ("payload",) + tuple(path), members))
        if value is not None:
            out.append((keys[id(base)] if kafka is None else kafka, value))

    for base in (ins, upd, dele, snap):
        doc(base)
        for op in ("x", "", "t", "m", "c", "u", "d", "r"):
            doc(base, op=op)
        doc(base, before=None)
        doc(base, after=None)
        doc(base, transaction=None)
        doc(base, transaction={"id": "tx", "total_order": -1, "data_collection_order": 0})
        doc(base, ts_ms=None)
        src = ("source",)
        for table in ("", "a/b", "we'ird", "x\x00y", "t" * 300):
            doc(base, src, table=table)
        doc(base, src, table=None)
        doc(base, src, db="")
        for file in ("", "mysql-bin.x", "bin.000009", "mysql-bin.999999999999999999999"):
            doc(base, src, file=file)
        for pos in (-1, 0, 2**62):
            doc(base, src, pos=pos)
        doc(base, src, row=-3)
        doc(base, src, ts_ms=-5)
        doc(base, src, gtid="abc:12")
        doc(base, src, connector="postgresql")
        doc(base, src, connector="oracle")
        doc(base, kafka=b"")
        doc(base, kafka=b"\x00\x00\x00\x00\x01")
        doc(base, kafka=b"\x01garbage")
        doc(base, kafka=wire_value(2**31, b"\x02"))
        doc(base, kafka=keys[id(ins)] if base is not ins else keys[id(upd)])
    # images: values the converters refuse or read specially
    image = dict(ins["payload"]["after"])
    for col, values in {"amount": ["", base64.b64encode(b"\x7f" * 40).decode(), "AA=="],
                        "ordered_at": [2**62, -(2**62), 0], "note": ["__debezium_unavailable_value", "\x00", ""],
                        "quantity": [-(2**31), 2**31 - 1], "id": [-(2**63), 2**63 - 1]}.items():
        for v in values:
            doc(ins, after=dict(image, **{col: v}))
    doc(ins, after=dict(image, id=None))
    doc(upd, before=dict(upd["payload"]["before"], weight=float("nan")))
    doc(upd, after=dict(upd["payload"]["after"], weight=float("inf")))
    # another schema: the columns in another order, one more column, a PostgreSQL source
    for edit in ("reversed", "extra", "postgres"):
        d = json.loads(json.dumps(ins))
        row = d["schema"]["fields"][0]
        if edit == "reversed":
            row["fields"] = row["fields"][::-1]
            d["schema"]["fields"][1] = dict(row, field="after")
            d["payload"]["after"] = dict(reversed(list(d["payload"]["after"].items())))
        elif edit == "extra":
            row["fields"] = row["fields"] + [{"type": "int32", "optional": True, "field": "extra"}]
            d["schema"]["fields"][1] = dict(row, field="after")
            d["payload"]["after"]["extra"] = 5
        else:
            source = d["schema"]["fields"][2]
            source["fields"] = [f for f in source["fields"] if f["field"] not in ("file", "pos", "row")] + [
                {"type": "int64", "optional": True, "field": "lsn"},
                {"type": "string", "optional": True, "field": "sequence"}]
            s = d["payload"]["source"]
            for f in ("file", "pos", "row"):
                s.pop(f)
            s.update(connector="postgresql", lsn=24023128, sequence='["24023000","24023128"]')
        v = _write(fmt, d)
        out.append((keys[id(ins)], v))
        out.append((keys[id(ins)], _write(fmt, edited_doc(d, ("payload", "source"), {"sequence": "[1]"}))
                    if edit == "postgres" else v))
    # wire-format bytes
    value = _write(fmt, ins)
    sid, body = wire_parts(fmt, value)
    out += [(keys[id(ins)], raw) for raw in (
        value[:-3], value[:5], value[:4], value + b"\x00", b"\x01" + value[1:], wire_value(10**6, body),
        wire_value(sid, body[:1]), b"", b"\x00\x00\x00\x00\x00", b'{"payload": {}}', None)]
    out.append((None, value))
    return [v for v in out if v[1] is not None or v[0] is not None]


@pytest.mark.parametrize("fmt,size", [("debezium-avro", 1), ("debezium-avro", 500), ("debezium-jsonschema", 7)])
def test_variants_are_read_alike(fmt, size):
    variants = _variants(fmt)
    head = [(0, k, v) for _, k, v in _simulated(fmt, 46, hours=1)[:40]]
    assert_same(fmt, head + [(1, k, v) for k, v in variants], size, OPTIONS)
    assert_same(fmt, [(1, k, v) for k, v in variants], size, OPTIONS)


@BOTH
def test_the_variants_reach_both_paths(fmt):
    """Some variants are read by the fast path, some only by the per-record parser (quarantined)."""
    variants = _variants(fmt)
    assert len(variants) > 150
    read_fast = assert_same(fmt, [(0, k, v) for k, v in variants], 500, OPTIONS)
    assert 0 < read_fast < len(variants)
