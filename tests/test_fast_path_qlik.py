"""The columnar fast path of ``qlik-json`` and ``qlik-avro`` gives, record by record, what the per-record parser gives.

Each batch of raw records runs through :func:`cdclake.normalize.parse_batches` twice, with two
parsers holding the same table definitions (the schema entries of the records' metadata
messages, as the normalize stage gives them: :meth:`with_schemas`): one with the fast path
(:meth:`cdclake.formats.qlik.QlikParser.fast_parse`), one with the per-record parser alone (the
reference). Every record must give the same output rows (change, quarantine and control rows,
quarantine reasons included; only ``_fast`` and the quarantine time may differ), on simulated
hours (column masks of every column and of the changed ones), with configured keys and types,
and on unusual and malformed variants of real messages: envelope and header fields removed,
null or of the wrong type, unknown operations and schema ids, images of another shape, values a
converter refuses, names a path cannot hold, truncated and invalid bytes. The fast path must
also read most data messages of a simulated hour: else the equality is empty.
"""
from __future__ import annotations

import copy
import datetime as dt
import io
import json
import pickle
from decimal import Decimal

import pytest
from fastavro import parse_schema, schemaless_reader
from parse_harness import dumps, parser_outcomes, raw_batches

from cdclake.formats import get_parser
from cdclake.formats.qlik import ENVELOPE_SCHEMA, QLIK_TYPES, value_text
from cdclake.formats.qlik.values import value_converter
from cdclake.record import KafkaRecord
from cdclake.sim import SimulatedSource
from cdclake.sim.render_qlik import avro_bytes, avro_envelope, qlik_avro, qlik_json

FORMATS = ("qlik-json", "qlik-avro")
RENDER = {"qlik-json": qlik_json, "qlik-avro": qlik_avro}
START = dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc)


# --- comparing the two parsers --------------------------------------------------------------------

def _entries(fmt: str, records: list[tuple]) -> list:
    """The schema entries of the metadata messages among ``records`` (``(partition, key, value)``)."""
    scanner = get_parser(fmt)
    return [e for _, key, value in records for e in scanner.schema_entries(KafkaRecord("t", 0, 0, 0, key, value))]


def _parser(fmt: str, entries: list, fast: bool, options=None):
    parser = get_parser(fmt, options).with_schemas(entries)
    if not fast:
        parser.FAST_PATH = False
    return parser


def assert_same(fmt: str, records: list[tuple], size: int = 97, options=None, entries=None) -> int:
    """Both parsers (the entries of ``records``' metadata messages, or ``entries``) give the same
    rows for every record; returns how many records the fast path read."""
    entries = _entries(fmt, records) if entries is None else entries
    batches = raw_batches(records, size)
    fast, read_fast = parser_outcomes(_parser(fmt, entries, True, options), batches, True)
    slow, _ = parser_outcomes(_parser(fmt, entries, False, options), batches, False)
    assert set(fast) == set(slow)
    differ = [(k, fast[k], slow[k]) for k in slow if fast[k] != slow[k]]
    assert not differ, differ[:2]
    assert sum(r["_first"] for rows in slow.values() for r in rows) == len(records)
    return read_fast


def _simulated(fmt: str, seed: int, hours: int = 2, partitions: int = 3, **options) -> list[tuple]:
    src = SimulatedSource(seed=seed, start=START, hours=hours)
    return [(m.partition, m.key, m.value) for m in RENDER[fmt](src.run(), src.tables, partitions=partitions, **options)]


def _data_messages(fmt: str, records: list[tuple]) -> int:
    scanner = get_parser(fmt)
    return sum(1 for _, k, v in records if v and not scanner.schema_entries(KafkaRecord("t", 0, 0, 0, k, v)))


# --- simulated hours ------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", [41, 42])
@pytest.mark.parametrize("size", [1, 64, 1000])
def test_simulated_hours_are_read_alike(fmt, seed, size):
    records = _simulated(fmt, seed)
    read_fast = assert_same(fmt, records, size)
    assert read_fast >= 0.9 * _data_messages(fmt, records), (read_fast, len(records))


@pytest.mark.parametrize("fmt", FORMATS)
def test_minimal_logging_masks_are_read_alike(fmt):
    """Column masks of the key and the changed columns only: the other columns are absent."""
    records = _simulated(fmt, 43, minimal_logging=True)
    read_fast = assert_same(fmt, records, 100)
    assert read_fast >= 0.9 * _data_messages(fmt, records)


@pytest.mark.parametrize("fmt", FORMATS)
def test_data_whose_metadata_is_not_held_is_left_to_the_parser(fmt):
    records = _simulated(fmt, 44, hours=1)
    assert assert_same(fmt, records, 50, entries=[]) == 0
    # only the second version of orders is held: the rest is never seen
    entries = [e for e in _entries(fmt, records) if e.table_version == 2]
    assert assert_same(fmt, records, 50, entries=entries) > 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_shipped_parser_reads_alike(fmt):
    records = _simulated(fmt, 45, hours=1, partitions=1)
    entries = _entries(fmt, records)
    parser = pickle.loads(pickle.dumps(_parser(fmt, entries, True)))
    recs = [KafkaRecord("t", 0, i, 0, k, v) for i, (_, k, v) in enumerate(records)]
    fast = parser.fast_parse(recs)
    assert sum(r is not None for r in fast) == _data_messages(fmt, records)
    reference = _parser(fmt, entries, False)
    for rec, rows in zip(recs, fast):
        if rows is not None:
            (change,) = reference.parse(rec)
            assert rows == [_change_row(change)]


def _change_row(c) -> tuple:
    def pair(m):
        return (None, None) if m is None else (list(m), list(m.values()))

    return (c.source_format, c.source_database, c.source_schema, c.source_table, c.op, pair(c.before), pair(c.after),
            c.primary_key, pair(c.column_types), list(c.source_position), c.source_ts_ms, c.tx_id, c.tx_seq,
            c.row_in_record, c.tx_last, c.tx_size)


# --- a table of every type, messages written here -------------------------------------------------

def _column(ordinal, qtype, pk=0, precision=0, scale=0):
    return {"ordinal": ordinal, "type": qtype, "length": 0, "precision": precision, "scale": scale,
            "primaryKeyPosition": pk}


#: Every kind of Qlik column; the key is (K2, ID), ordered by primaryKeyPosition, not by ordinal.
GEN_COLUMNS = {"ID": _column(1, "INT8", pk=2), "K2": _column(2, "STRING", pk=1),
               "AMOUNT": _column(3, "NUMERIC", precision=12, scale=2), "AT": _column(4, "DATETIME", scale=6),
               "DAY": _column(5, "DATE"), "PIC": _column(6, "BLOB"), "RATE": _column(7, "REAL4"),
               "FLAG": _column(8, "BOOLEAN"), "T": _column(9, "TIME"), "BIG": _column(10, "UINT8"),
               "W": _column(11, "REAL8"), "ODD": _column(12, "GEOMETRY"), "N": _column(13, "INT2")}
GEN_ROW = {"ID": 7, "K2": "a-7", "AMOUNT": "1234.5", "AT": "2024-05-01 10:15:30.123456", "DAY": "2024-02-01",
           "PIC": "89504E47", "RATE": 0.1, "FLAG": True, "T": "08:30:00", "BIG": 18446744073709551615,
           "W": 12.721, "ODD": "POINT(1 2)", "N": -3}
#: The Avro data schema of the messages written here: images and headers as maps (any column names,
#: any order, values of several types).
_VALUE = ["null", "boolean", "long", "double", "string", "bytes"]
GEN_DATA_SCHEMA = {"type": "record", "name": "GenRecord", "fields": [
    {"name": "data", "type": ["null", {"type": "map", "values": _VALUE}]},
    {"name": "beforeData", "type": ["null", {"type": "map", "values": _VALUE}]},
    {"name": "headers", "type": ["null", {"type": "map", "values": _VALUE}]}]}
_METADATA_SCHEMA = {"type": "record", "name": "Metadata", "fields": [
    {"name": "schemaId", "type": "string"},
    {"name": "lineage", "type": {"type": "map", "values": ["null", "long", "string"]}},
    {"name": "tableStructure", "type": {"type": "record", "name": "Structure", "fields": [
        {"name": "tableColumns", "type": {"type": "map", "values": {"type": "map", "values": ["long", "string"]}}}]}},
    {"name": "dataSchema", "type": ["null", "string"]}]}


def _metadata(sid, table, columns, version=1, schema="APP", data_schema=json.dumps(GEN_DATA_SCHEMA)) -> dict:
    return {"schemaId": sid, "lineage": {"server": "s", "task": "t", "schema": schema, "table": table,
                                         "tableVersion": version, "timestamp": "2024-05-01T00:00:00.000"},
            "tableStructure": {"tableColumns": columns}, "dataSchema": data_schema}


GEN = _metadata("GEN1", "GEN", GEN_COLUMNS)
GEN2 = _metadata("GEN2", "GEN", {**GEN_COLUMNS, "NEW": _column(14, "INT4")}, version=2)
METADATA = [
    GEN, GEN2,
    _metadata("NOKEY", "NOKEY", {"A": _column(1, "INT4"), "B": _column(2, "STRING")}),
    _metadata("SLASH", "a/b", {"ID": _column(1, "INT4", pk=1)}),
    _metadata("TABCOL", "TABCOL", {"ID": _column(1, "INT4", pk=1), "x\ty": _column(2, "STRING")}),
    _metadata("DOTS", "DOTS", {"ID": _column(1, "INT4", pk=1)}, schema=".."),
    _metadata("NOSCHEMA", "NOSCHEMA", {"ID": _column(1, "INT4", pk=1)}, data_schema=None),
    _metadata("BADSCHEMA", "BADSCHEMA", {"ID": _column(1, "INT4", pk=1)}, data_schema="{not a schema"),
]


def _md_value(fmt: str, md: dict) -> bytes:
    if fmt == "qlik-json":
        return dumps({"magic": "atMSG", "type": "MD", "headers": None, "messageSchemaId": md["schemaId"],
                       "messageSchema": None, "message": md})
    return avro_envelope("MD", avro_bytes(_METADATA_SCHEMA, md), None, json.dumps(_METADATA_SCHEMA))


def _dt_value(fmt: str, body, sid="GEN1", **envelope) -> bytes:
    """A data message ``body`` of the map-shaped data schema (``envelope``: members of the envelope to set)."""
    if fmt == "qlik-json":
        return dumps({"magic": "atMSG", "type": "DT", "headers": None, "messageSchemaId": sid,
                       "messageSchema": None, "message": body, **envelope})
    avro = {"magic": b"atMSG", "type": "DT", "headers": None, "messageSchemaId": sid, "messageSchema": None,
            "message": avro_bytes(GEN_DATA_SCHEMA, body) if isinstance(body, dict) else body, **envelope}
    return _avro_value(avro)


def _avro_value(envelope: dict) -> bytes:
    buf = io.BytesIO()
    from fastavro import schemaless_writer

    schemaless_writer(buf, parse_schema(ENVELOPE_SCHEMA), envelope)
    return buf.getvalue()


def _headers(op, seq="20240501101530000000000000000001234", **more) -> dict:
    h = {"operation": op, "changeSequence": seq, "timestamp": "2024-05-01T10:15:30.250", "streamPosition": "",
         "transactionId": "0000000000000000000000000006000A", "changeMask": "FF1F", "columnMask": "FF1F",
         "transactionEventCounter": 1, "transactionLastEvent": False}
    h.update(more)
    return h


def _gen_messages(fmt: str) -> list:
    """Data messages of GEN, odd or malformed (JSON-only shapes are left out of Avro)."""
    avro = fmt == "qlik-avro"
    row = dict(GEN_ROW, PIC=b"\x89PNG") if avro else GEN_ROW
    mask = (lambda text: bytes.fromhex(text)) if avro else (lambda text: text)
    out = []

    def msg(op="INSERT", data=row, before=None, **headers):
        h = _headers(op, changeMask=mask("FF1F"), columnMask=mask("FF1F"))
        h.update(headers)
        out.append({"data": data, "beforeData": before, "headers": h})

    for op in ("INSERT", "REFRESH", "UPDATE", "DELETE", "insert", "Delete", "MERGE", "", "ınsert"):
        msg(op)
    msg("UPDATE", before=row)
    msg("UPDATE", data=dict(row, K2="b"), before=row)
    msg("DELETE", data=None, before=row)
    msg("DELETE", data=None, before=None)
    msg("DELETE", before=dict(row, ID=None))
    msg("INSERT", before="ignored" if not avro else None)
    msg("UPDATE", data=None, before=row)
    msg("REFRESH", changeSequence="")
    for values in ({}, dict(reversed(list(row.items()))), dict(row, EXTRA="1"), dict(row, **{"x/y": "1"}),
                   dict(row, **{"ctl\x01": "1"}), {k: v for k, v in row.items() if k != "AT"},
                   {k: v for k, v in row.items() if k != "ID"}, dict(row, ID=None), dict(row, K2=None),
                   dict(row, K2=""), {"ID": 1, "K2": "x"}):
        msg("INSERT", data=values)
        msg("DELETE", data=values)
        msg("UPDATE", data=row, before=values)
    odd_values = [None, "", " 12 ", "abc", "1e3", "12.5", "-0.001", "2024-13-40", "2024-05-01 10:00:00+02:00",
                  "0000-00-00 00:00:00", "2024-05-01", "XYZ", "ABC", "nan", "inf", "true", "\u00e9\U0001F600",
                  "a\x00b", 0, 1, -1, 12, 2**63, -(2**63), 1.5, -0.0, 1e300, 1e-7, 12.0, True, False]
    if avro:
        odd_values += [b"", b"\x00\xff", float("nan"), float("inf")]
    else:
        odd_values += [10**40, [1, "x"], {"b": 1, "a": [2]}]
    for col in GEN_COLUMNS:
        for value in odd_values:
            msg("INSERT", data=dict(row, **{col: value}))
    for value in odd_values[:12]:
        msg("UPDATE", data=row, before=dict(row, AMOUNT=value))
    header_values = {
        "changeSequence": [None, "", "12a", "1" * 39, "1" * 38, " 77 ", "\u0663", 12, -1, 1.5, True, 10**40],
        "timestamp": [None, "", "yesterday", "2024-05-01T00:00:00+02:00", "0000-00-00 00:00:00", "2024-05-01",
                      1714521600000, -5, 1.5, True],
        "transactionId": [None, "", 5, 1.5, True, [1]],
        "transactionEventCounter": [None, "", "3", " 3 ", "-4", "x", 1.5, True, -1, 10**30],
        "transactionLastEvent": [None, "", "TRUE", " false ", "yes", 1, 0, True],
        "columnMask": [None, "", "0", "1", "03", "0302", "FF", "XY", "0B", "FF3F", "FF1F" + "00" * 12,
                       "FFFF" + "00" * 12, "00", 5, [1]],
        "changeMask": [None, "", "XY", "FFFF", "01", 5],
        "operation": [None, 5, True, ["INSERT"]],
    }
    for name, values in header_values.items():
        for value in values:
            if avro and name.endswith("Mask") and isinstance(value, str) and value not in ("XY", ""):
                msg("UPDATE", data=row, before=row, **{name: bytes.fromhex(value if len(value) % 2 == 0
                                                                            else "0" + value)})
            msg("UPDATE", data=row, before=row, **{name: value})
            msg("DELETE", **{name: value})
    no_headers = {"data": row, "beforeData": None}
    out += [no_headers, dict(no_headers, headers=None)]
    if not avro:
        out += [dict(no_headers, headers="x"), dict(no_headers, headers=[1]), dict(no_headers, data=[1]),
                dict(no_headers, data="x")]
    return out


def _gen_records(fmt: str) -> list[tuple]:
    """(partition, key, value): the metadata messages, then GEN's data messages and their envelopes."""
    avro = fmt == "qlik-avro"
    records = [(0, md["schemaId"].encode(), _md_value(fmt, md)) for md in METADATA]
    messages = _gen_messages(fmt)
    for message in messages:
        try:
            value = _dt_value(fmt, message)
        except (TypeError, ValueError, OverflowError):  # a value the Avro map of this schema cannot hold
            continue
        records.append((1, b"k", value))
    base = {"data": GEN_ROW if not avro else dict(GEN_ROW, PIC=b"\x89PNG"), "beforeData": None,
            "headers": _headers("INSERT", changeMask=None, columnMask=None)}
    for sid in ("GEN2", "NOKEY", "SLASH", "TABCOL", "DOTS", "NOSCHEMA", "BADSCHEMA", "NEVER", "", None):
        records.append((1, None, _dt_value(fmt, base, sid)))
    records.append((1, None, _dt_value(fmt, dict(base, data=dict(base["data"], NEW=5)), "GEN2")))
    for sid, data in (("SLASH", {"ID": 1}), ("TABCOL", {"ID": 1, "x\ty": "v"}), ("DOTS", {"ID": 1}),
                      ("NOKEY", {"A": 1, "B": "x"})):
        records.append((1, None, _dt_value(fmt, dict(base, data=data), sid)))
    for md in METADATA[:3]:
        records.append((1, None, _md_value(fmt, md)))
    value = _dt_value(fmt, base)
    records += [(1, None, v) for v in (value[:-1], value[:-7], value[:12], value[:5], value + b"\x00", value + b" ",
                                       b"\xef\xbb\xbf" + value, b"", None, b"atMSG", b"{}", b"[]", b"null")]
    if avro:
        payload = avro_bytes(GEN_DATA_SCHEMA, base)
        records += [(1, None, _dt_value(fmt, payload[:-3])), (1, None, _dt_value(fmt, payload + b"\x00")),
                    (1, None, _dt_value(fmt, b"")), (1, None, _dt_value(fmt, payload, "GEN2")),
                    (1, None, _dt_value(fmt, payload.replace(b"a-7", b"a\xff7", 1))),
                    (1, None, _dt_value(fmt, base, None, messageSchema=json.dumps(GEN_DATA_SCHEMA))),
                    (1, None, _dt_value(fmt, base, None, messageSchema="{not json")),
                    (1, None, _dt_value(fmt, base, "GEN1", messageSchema="{not json")),
                    (1, None, _dt_value(fmt, base, headers={"a": "b"})),
                    (1, None, _dt_value(fmt, base, type="MD")), (1, None, _dt_value(fmt, base, type="XX")),
                    (1, None, _dt_value(fmt, base, magic=b"atMSX")),
                    (1, None, value.replace(b"GEN1", b"GEN\xff", 1))]
    else:
        for members in ({"magic": None}, {"magic": "atMSX"}, {"magic": 5}, {"type": "MD"}, {"type": "dt"},
                        {"type": None}, {"type": 3}, {"headers": {"a": 1}}, {"headers": "x"},
                        {"messageSchemaId": 5}, {"messageSchemaId": ["GEN1"]}, {"messageSchema": "x"},
                        {"message": None}, {"message": 5}, {"message": []}, {"message": {}},
                        {"message": json.dumps(base)}, {"message": "{not json"}):
            records.append((1, None, _dt_value(fmt, base, **members)))
        envelope = json.loads(value)
        for member in ("magic", "type", "message", "messageSchemaId", "headers"):
            records.append((1, None, dumps({k: v for k, v in envelope.items() if k != member})))
        for lookup in ({"schema": "APP", "table": "GEN"}, {"table": "GEN"}, {"table": "GEN", "tableVersion": 1},
                       {"table": "GEN", "tableVersion": "1"}, {"table": "GEN", "tableVersion": "x"},
                       {"table": "GEN", "tableVersion": 9}, {"schema": "NO", "table": "GEN"}, {"table": "NOPE"},
                       {"table": 5}, {"headers": dict(base["headers"], externalSchemaId="GEN2")},
                       {"headers": dict(base["headers"], externalSchemaId="NEVER")},
                       {"headers": dict(base["headers"], externalSchemaId=5)},
                       {"headers": dict(base["headers"], tableVersion=1), "table": "GEN"}):
            records.append((1, None, _dt_value(fmt, dict(base, **lookup), None)))
        records += [(1, None, value.replace(b'"type":"DT"', b'"type":"MD","type":"DT"', 1)),
                    (1, None, value.replace(b'"type":"DT"', b'"type":"DT","type":"MD"', 1)),
                    (1, None, value.replace(b'"data":{', b'"data":{"ID":1,', 1)),
                    (1, None, value.replace(b'"data":{', b'"data":{"\\ud800":"1",', 1)),
                    (1, None, value.replace(b'"K2":"a-7"', b'"K2":"\\ud800"', 1)),
                    (1, None, value.replace(b'"K2":"a-7"', b'"K2":"a\xff"', 1)),
                    (1, None, value.replace(b'"W":12.721', b'"W":NaN', 1)),
                    (1, None, value.replace(b'"W":12.721', b'"W":1e400', 1)),
                    (1, None, value.replace(b'"ID":7', b'"ID":7.0', 1)),
                    (1, None, json.dumps(json.loads(value), indent=1).encode())]
    return records


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("size", [1, 9, 500])
def test_variants_are_read_alike(fmt, size):
    records = _gen_records(fmt)
    simulated = _simulated(fmt, 46, hours=1, partitions=1)
    read_fast = assert_same(fmt, simulated[:40] + records + simulated[40:80], size)
    assert read_fast >= 200


@pytest.mark.parametrize("fmt", FORMATS)
def test_configured_keys_and_types_are_read_alike(fmt):
    options = {"column_types": {"EXTRA": "int", "shop.customers": {"extra": "date"}},
               "primary_keys": {"customers": ["email"], "orders": ["id", "customer_id"], "APP.GEN": ["ID"]}}
    records = _simulated(fmt, 47, hours=1) + _gen_records(fmt)
    assert assert_same(fmt, records, 64, options) >= 200
    assert assert_same(fmt, _gen_records(fmt), 64, {"primary_key": ["K2", "AMOUNT"]}) >= 50
    if fmt == "qlik-json":
        base = {"data": GEN_ROW, "beforeData": None, "headers": _headers("INSERT")}
        named = [(0, None, _dt_value(fmt, base, None)), (0, None, _dt_value(fmt, dict(base, table="GEN"), None))]
        assert assert_same(fmt, _gen_records(fmt) + named, 50, {"table": "APP.GEN"}) >= 50


# --- variants of simulated messages ---------------------------------------------------------------

def _sim_variants_json(records: list[tuple]) -> list[tuple]:
    docs = [(k, json.loads(v)) for _, k, v in records if v]
    data = [(k, d) for k, d in docs if d["type"] == "DT"]

    def first(op):
        return next((k, d) for k, d in data if d["message"]["headers"]["operation"] == op)

    out = []
    for op in ("INSERT", "UPDATE", "DELETE", "REFRESH"):
        key, doc = first(op)
        message = doc["message"]
        row = message["data"]
        cols = list(row)

        def edited(path, **members):
            d = copy.deepcopy(doc)
            target = d
            for p in path:
                target = target[p]
            target.update(members)
            out.append((key, dumps(d)))

        edited(("message",), data=dict(reversed(list(row.items()))))
        edited(("message",), data={**row, "extra": "x"})
        edited(("message",), data={c: v for c, v in row.items() if c != cols[-1]})
        edited(("message",), data={**row, cols[0]: None})
        edited(("message",), beforeData=row)
        edited(("message",), beforeData={**row, cols[1]: 5})
        edited(("message",), data=None, beforeData=row)
        for col in cols:
            for value in ("x", -1, 1.5, None, True, "", "2024-13-01", "ZZ"):
                edited(("message", "data"), **{col: value})
        for name in ("changeSequence", "timestamp", "transactionId", "columnMask", "changeMask",
                     "transactionEventCounter", "transactionLastEvent", "operation"):
            edited(("message", "headers"), **{name: None})
            edited(("message", "headers"), **{name: ""})
        edited(("message", "headers"), columnMask="01", changeMask="01")
        edited(("message", "headers"), columnMask="3F", changeMask="7F")
        edited((), messageSchemaId=next(d["messageSchemaId"] for _, d in docs if d["type"] == "MD"
                                        and d["messageSchemaId"] != doc["messageSchemaId"]))
    return out


def _sim_variants_avro(records: list[tuple]) -> list[tuple]:
    envelope_schema = parse_schema(ENVELOPE_SCHEMA)
    schemas = {e.schema_id: json.loads(json.loads(e.definition)["dataSchema"]) for e in _entries("qlik-avro", records)}
    data = []
    for _, key, value in records:
        env = schemaless_reader(io.BytesIO(value), envelope_schema, None)
        if env["type"] == "DT":
            sid = env["messageSchemaId"]
            message = schemaless_reader(io.BytesIO(env["message"]), parse_schema(schemas[sid]), None)
            data.append((key, sid, message))
    out = []
    for op in ("INSERT", "UPDATE", "DELETE", "REFRESH"):
        key, sid, message = next(m for m in data if m[2]["headers"]["operation"] == op)
        row = message["data"]
        cols = list(row)

        def edited(sid=sid, schema_text=None, **parts):
            m = copy.deepcopy(message)
            for part, members in parts.items():
                if isinstance(members, dict) and isinstance(m.get(part), dict):
                    m[part].update(members)
                else:
                    m[part] = members
            try:
                payload = avro_bytes(schemas[sid if sid in schemas else message_sid], m)
            except (TypeError, ValueError, OverflowError):  # a value the data schema cannot hold
                return
            out.append((key, avro_envelope("DT", payload, sid, schema_text)))

        message_sid = sid
        edited(data={cols[0]: None})
        edited(beforeData=row)
        edited(beforeData=None)
        edited(beforeData=dict(row, **{cols[1]: None}))
        for col in cols:
            for value in (None, "", "\u00e9\x00", -(2**63), 2**63 - 1, 0, 1.5, float("nan"), b"", b"\xff",
                          Decimal("-0.01"), Decimal("99999999.99"), dt.date(1, 1, 1), dt.date(9999, 12, 31),
                          dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc),
                          dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc)):
                edited(data={col: value})
        for name, values in {"changeSequence": ["", "12a", "1" * 39, " 77 ", "\u0663"],
                             "timestamp": ["", "yesterday", "2024-05-01T00:00:00+02:00", "0000-00-00"],
                             "transactionId": [""], "changeMask": [None, b"", b"\x01", b"\xff\xff\xff", b"\x40"],
                             "columnMask": [None, b"", b"\x00", b"\x01", b"\x03", b"\xff\xff\xff", b"\x40",
                                            b"\x3f" + b"\x00" * 12, b"\xff" + b"\x00" * 12],
                             "transactionEventCounter": [None, -1, 2**62],
                             "transactionLastEvent": [None, True]}.items():
            for value in values:
                edited(headers={name: value})
        for other in schemas:
            if other != sid:
                edited(sid=other)
        edited(sid=None, schema_text=json.dumps(schemas[sid]))
        edited(sid=None)
        edited(sid="NEVER")
        value = avro_envelope("DT", avro_bytes(schemas[sid], message), sid)
        out += [(key, value[:-2]), (key, value + b"\x00"), (key, b"atMSX" + value[5:]), (key, value[:40])]
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("size", [1, 9, 500])
def test_simulated_message_variants_are_read_alike(fmt, size):
    records = _simulated(fmt, 48, hours=1, partitions=1)
    variants = (_sim_variants_json if fmt == "qlik-json" else _sim_variants_avro)(records)
    read_fast = assert_same(fmt, records[:30] + [(1, k, v) for k, v in variants], size)
    assert read_fast >= 0.3 * len(variants)


# --- the value converters -------------------------------------------------------------------------

def _outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # the comparison includes the errors
        return ("error", type(exc).__name__, str(exc))


CTYPES = sorted(set(QLIK_TYPES.values())) + ["decimal(12,2)", "decimal(38,0)", "decimal(5,5)", "decimal(20,0)"]
VALUES = [None, "", " ", "abc", "12", " 12 ", "-7", "1e3", "12.5", "-0.001", "NaN", "inf", "true", "0", "1",
          "2024-01-02", "2024-01-02 03:04:05.123456", "2024-01-02T03:04:05+02:00", "0000-00-00 00:00:00",
          "2024-13-40", "89504E47", "ABC", "XYZ", "08:30:00", "\u00e9", 0, 1, -1, 2**63, -(2**70), 10**40, True,
          False, 1.5, 0.1, 1e300, 3.5e38, -0.0, float("nan"), float("inf"), {"b": 1}, [1], b"", b"\x89PNG",
          bytearray(b"x"), Decimal("1.5"), Decimal("-0.001"), Decimal("NaN"), Decimal("1E+3"),
          dt.date(2024, 2, 1), dt.date(1, 1, 1), dt.datetime(2024, 1, 5, 10, 15, 30, 123456, tzinfo=dt.timezone.utc),
          dt.datetime(2024, 1, 5, 10, 15), dt.datetime(2024, 1, 5, tzinfo=dt.timezone(dt.timedelta(hours=2))),
          dt.time(8, 30, 0, 250000), dt.timedelta(1)]


@pytest.mark.parametrize("ctype", CTYPES)
def test_value_converter_is_value_text(ctype):
    conv = value_converter(ctype)
    for value in VALUES:
        assert _outcome(conv, value) == _outcome(value_text, value, ctype), (ctype, value)
