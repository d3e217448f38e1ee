"""The normalize stage's first pass over a window of Qlik Replicate topics: the metadata messages.

:func:`cdclake.normalize.window_entries` decodes only the records whose value a parser's
``may_hold_schema`` lets through. The test of a few bytes must let every metadata message through
(a metadata message refused would leave its table's data messages quarantined as never seen), the
unusual spellings included: a JSON ``type`` written with ``\\u`` escapes, an Avro string length
written in more varint bytes than it needs. The pass gives the registry rows the record-by-record
reading gives (:func:`cdclake.normalize.registry_row` of every record's ``schema_entries``).
Vectors: the Qlik renderer's streams (``cdclake.sim.render_qlik``, checked against Qlik's
"Metadata and data messages" in ``test_formats_qlik.py``) and the envelope of
``MessageEnvelope.avsc``.
"""
from __future__ import annotations

import datetime as dt
import json

import pytest
from helpers import landed
from parse_harness import RAW, raw_batch

from cdclake.formats import get_parser
from cdclake.formats.qlik import ENVELOPE_SCHEMA
from cdclake.normalize import registry_row, window_entries
from cdclake.record import KafkaRecord, SchemaAwareParser
from cdclake.sim.render_qlik import qlik_avro, qlik_json
from cdclake.sim.source import SimulatedSource

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
RENDER = {"qlik-json": qlik_json, "qlik-avro": qlik_avro}


def stream(fmt: str) -> list[KafkaRecord]:
    src = SimulatedSource(seed=11, start=START, hours=2)
    return landed(RENDER[fmt](src.run(), src.tables, partitions=2))


def json_spelled(value: bytes) -> bytes:
    """A JSON metadata message whose ``type`` is written as ``\\u`` escapes (the same JSON value)."""
    doc = json.loads(value)
    assert doc["type"] == "MD"
    return json.dumps(doc).replace('"type": "MD"', '"type": "\\u004d\\u0044"').encode()


def avro_spelled(value: bytes) -> bytes:
    """An Avro metadata envelope whose ``type`` length (2) is the two-byte varint ``0x84 0x00``."""
    assert value[5:8] == b"\x04MD" and ENVELOPE_SCHEMA["fields"][1]["name"] == "type"
    return value[:5] + b"\x84\x00" + value[6:]


@pytest.mark.parametrize("fmt,spell", [("qlik-json", json_spelled), ("qlik-avro", avro_spelled)])
def test_every_metadata_message_passes_the_byte_test_and_data_messages_do_not(fmt, spell):
    records = stream(fmt)
    parser = get_parser(fmt)
    metadata = [r for r in records if parser.schema_entries(r)]
    assert len(metadata) == 4
    spelled = [KafkaRecord(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, spell(r.value)) for r in metadata]
    assert [parser.schema_entries(r) for r in spelled] == [parser.schema_entries(r) for r in metadata]
    tombstone = KafkaRecord("shop", 0, 0, 0, b"k", None)
    for p in (parser, get_parser("auto")):
        for r in records + spelled + [tombstone]:
            if p.schema_entries(r):
                assert p.may_hold_schema(r.value), (p.format_name, r.value[:40])
        assert [r for r in records if p.may_hold_schema(r.value)] == metadata  # the data messages are not decoded


def test_the_byte_test_is_kept_to_the_metadata_type():
    avro, js = get_parser("qlik-avro"), get_parser("qlik-json")
    assert not avro.may_hold_schema(b"atMSG\x04DT") and not avro.may_hold_schema(b"xxMSG\x04MD")
    assert not avro.may_hold_schema(b"atMSG") and not avro.may_hold_schema(None)
    assert avro.may_hold_schema(b"atMSG\x04MD") and avro.may_hold_schema(b"atMSG\x84\x00MD")
    assert not js.may_hold_schema(b'{"magic": "atMSG", "type": "DT"}') and not js.may_hold_schema(b"")
    assert js.may_hold_schema(b'{"type":"MD"}') and js.may_hold_schema(b'{"type": "\\u004dD"}')
    assert SchemaAwareParser.may_hold_schema(b"{}")  # the default: every record is decoded


@pytest.mark.parametrize("fmt", ["qlik-json", "qlik-avro"])
def test_window_entries_are_the_record_by_record_entries(fmt):
    records = stream(fmt)
    parser = get_parser(fmt)
    big = next(r for r in records if parser.schema_entries(r))
    pairs = [(r.key, r.value) for r in records] + [(b"k", None), (big.key, big.value)]
    batch = raw_batch("t", pairs)
    assert batch.schema == RAW
    limit = max(len(v) for _, v in pairs if v)
    want = [registry_row(e, row) for row in (_Row(i) for i in range(len(pairs)))
            for e in parser.schema_entries(KafkaRecord("t", 0, row.kafka_offset, 0, *pairs[row.kafka_offset]))]
    assert len(want) == 5
    got = [tuple(row.values()) for b in window_entries({"t": parser}, [batch.slice(0, 40), batch.slice(40)], limit)
           for row in b.to_pylist()]
    assert got == want
    # past the limits (the bytes of a value), a metadata message gives no entry: its parse quarantines it
    short = [tuple(row.values()) for b in window_entries({"t": parser}, [batch], len(big.value) - 1)
             for row in b.to_pylist()]
    assert short == [r for r in want if len(pairs[r[8]][1]) < len(big.value)]


class _Row:
    """The Kafka columns of :func:`parse_harness.raw_batch`'s row ``offset``."""

    def __init__(self, offset: int):
        self.kafka_topic, self.kafka_partition, self.kafka_offset = "t", 0, offset
        self.landed_hour = START
