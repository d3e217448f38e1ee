"""The harness the parse-path tests share: Arrow batches of the raw table without the JVM, the rows
both parse paths give per record, and the edits that build unusual or malformed messages.

- :data:`RAW` and :data:`TAGGED` are the Arrow schemas Spark gives the raw table
  (:data:`cdclake.lake.RAW_SCHEMA`) and normalize's tagged rows
  (:data:`cdclake.normalize.rows.TAGGED_SCHEMA`); :func:`raw_batch` and :func:`raw_batches` build
  raw batches, :func:`outcomes` and :func:`run_batch` read what ``parse_batches`` gives per record.
- :func:`assert_same` is the record-by-record equality of the columnar fast path and the per-record
  path of one format (every ``test_fast_path_<vendor>.py`` calls it).
- :func:`edited_doc` / :func:`edited` change members of a message (:data:`DROP` removes one);
  :func:`variants` builds unusual and malformed Debezium records from real ones.
- :func:`outcome`, :data:`VALUES`, :data:`CONNECT_SCHEMAS` and :data:`CONNECT_VALUES` compare value
  converters, errors included.
"""
from __future__ import annotations

import base64
import copy
import datetime as dt
import json
from collections import defaultdict

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from cdclake.formats import get_parser
from cdclake.lake import RAW_SCHEMA
from cdclake.normalize import parse_batches
from cdclake.normalize.rows import TAGGED_SCHEMA

# --- Arrow batches without the JVM ----------------------------------------------------------------

def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark gives the typed schema ``schema`` (``to_arrow_schema``)."""
    return to_arrow_schema(schema)


TAGGED = arrow_schema(TAGGED_SCHEMA)
RAW = arrow_schema(RAW_SCHEMA)
LANDED = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def raw_batch(topic: str, records: list[tuple]) -> pa.RecordBatch:
    """A raw table Arrow batch of ``(key, value)`` pairs (optionally with headers) at offsets 0, 1, ..."""
    rows = [{"kafka_topic": topic, "kafka_partition": 0, "kafka_offset": i, "kafka_timestamp_ms": 1_704_067_200_000 + i,
             "key": key, "value": value, "headers": list(more[0]) if more else [], "landed_hour": LANDED}
            for i, (key, value, *more) in enumerate(records)]
    return pa.RecordBatch.from_pylist(rows, schema=RAW)


def raw_batches(records: list[tuple], size: int) -> list[pa.RecordBatch]:
    """Raw table batches of ``size`` records of ``(partition, key, value)`` of topic ``t``, offsets per partition."""
    offsets: dict[int, int] = defaultdict(int)
    rows = []
    for part, key, value in records:
        rows.append({"kafka_topic": "t", "kafka_partition": part, "kafka_offset": offsets[part],
                     "kafka_timestamp_ms": 1_704_067_200_000 + len(rows), "key": key, "value": value, "headers": [],
                     "landed_hour": LANDED})
        offsets[part] += 1
    return [pa.RecordBatch.from_pylist(rows[i:i + size], schema=RAW) for i in range(0, len(rows), size)]


def outcomes(batches) -> dict[tuple, list[dict]]:
    """The output rows of ``parse_batches`` per record (topic, partition, offset), checked against the schema."""
    out = defaultdict(list)
    for b in batches:
        assert b.schema == TAGGED
        for row in b.to_pylist():
            out[(row["kafka_topic"], row["kafka_partition"], row["kafka_offset"])].append(row)
    return out


def run_batch(parser, records, **limits) -> list[list[dict]]:
    """The output rows of each of ``records`` (``(key, value)`` pairs) parsed by ``parser`` in one batch."""
    topic = "t"
    got = outcomes(parse_batches({topic: parser}, TAGGED, [raw_batch(topic, records)], **limits))
    assert set(got) <= {(topic, 0, i) for i in range(len(records))}
    return [got.get((topic, 0, i), []) for i in range(len(records))]


def kinds(rows: list[dict]) -> list[str]:
    """The ``_kind`` of each row."""
    return [r["_kind"] for r in rows]


# --- the fast path against the per-record path --------------------------------------------------


def parser_outcomes(parser, batches: list, fast: bool) -> tuple[dict, int]:
    """``({(partition, offset): [row without _fast and quarantined_at]}, records read by the fast
    path)`` of ``parser`` over ``batches`` (``fast`` False: the parser's fast path is off, and no
    row may say it was read by it)."""
    out, read_fast = defaultdict(list), 0
    for b in parse_batches({"t": parser}, TAGGED, batches):
        assert b.schema == TAGGED
        for row in b.to_pylist():
            read_fast += bool(row["_fast"] and row["_first"])
            if not fast:
                assert row["_fast"] is False
            row = {k: v for k, v in row.items() if k not in ("_fast", "quarantined_at")}
            out[(row["kafka_partition"], row["kafka_offset"])].append(row)
    return out, read_fast


def _path_outcomes(fmt: str, batches: list, fast: bool, options=None) -> tuple[dict, int]:
    """:func:`parser_outcomes` of a new parser of ``fmt``, its fast path on or off."""
    parser = get_parser(fmt, options)
    if not fast:
        parser.FAST_PATH = False
    return parser_outcomes(parser, batches, fast)


def assert_same(fmt: str, records: list[tuple], size: int = 97, options=None) -> int:
    """Both paths give the same rows for every record of ``(partition, key, value)``; returns how
    many the fast path read."""
    batches = raw_batches(records, size)
    fast, read_fast = _path_outcomes(fmt, batches, True, options)
    slow, _ = _path_outcomes(fmt, batches, False, options)
    assert set(fast) == set(slow)
    differ = [(k, fast[k], slow[k]) for k in slow if fast[k] != slow[k]]
    assert not differ, differ[:2]
    assert sum(r["_first"] for rows in slow.values() for r in rows) == len(records)
    return read_fast


# --- edited messages ----------------------------------------------------------------------------


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


#: A member value that stands for the member removed (:func:`edited_doc`).
DROP = _Drop()


def dumps(obj) -> bytes:
    """Compact UTF-8 JSON, as the producers write it."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def edited_doc(message: dict, path: tuple, members: dict) -> dict:
    """``message`` (a copy) with the object at ``path`` given ``members`` (:data:`DROP`: removed)."""
    message = copy.deepcopy(message)
    target = message
    for p in path:
        target = target[p]
    for k, v in members.items():
        if v is DROP:
            target.pop(k, None)
        else:
            target[k] = v
    return message


def edited(message: dict, path: tuple, members: dict) -> bytes:
    """:func:`edited_doc` as JSON."""
    return dumps(edited_doc(message, path, members))


def first_of(messages, op):
    """``(key, document)`` of the first Debezium message of ``op`` in ``(key, value)`` pairs."""
    for key, value in messages:
        if value is not None and json.loads(value)["payload"]["op"] == op:
            return key, json.loads(value)
    raise LookupError(op)


def variants(messages):
    """(key, value) records built from real Debezium messages: valid but unusual, or malformed."""
    ins_key, ins = first_of(messages, "c")
    upd_key, upd = first_of(messages, "u")
    value = dumps(ins)
    out = []

    def doc(key, d, **payload):
        d = copy.deepcopy(d)
        d["payload"].update(payload)
        out.append((key, dumps(d)))

    doc(ins_key, ins, op="x")
    doc(ins_key, ins, op=None)
    doc(ins_key, ins, op="t")
    doc(ins_key, ins, message_type="1")
    doc(ins_key, ins, after=None)
    doc(ins_key, ins, after="text")
    doc(ins_key, ins, source={"table": 5})
    doc(upd_key, upd, before={**upd["payload"]["before"], "extra": [1]})
    doc(ins_key, ins, after={**ins["payload"]["after"], "name": "__debezium_unavailable_value"})
    doc(ins_key, ins, after={k: (v if k != "id" else "5") for k, v in ins["payload"]["after"].items()})
    doc(ins_key, ins, after={k: (True if isinstance(v, int) else v) for k, v in ins["payload"]["after"].items()})
    doc(ins_key, ins, after=dict(reversed(list(ins["payload"]["after"].items()))))
    out += [
        (ins_key, value + b' {"x":1}'),                                  # text after the document
        (ins_key, value + b"  "),                                         # whitespace after it (valid)
        (ins_key, value[:-1] + b',"payload":{"op":"d"}}'),                # a second payload
        (ins_key, value[:-1] + b',"extra":1}'),                           # a third member
        (ins_key, value[:-1] + b"  }"),                                   # whitespace before the end (valid)
        (ins_key, value.replace(b'"after":{', b'"after":{"x\xff":1,', 1)),  # invalid UTF-8 in the payload
        (ins_key, value.replace(b'"optional":', b'"opt\xfeional":', 1)),   # ... in the schema
        (ins_key, b"\xef\xbb\xbf" + value),                               # a BOM
        (ins_key, value[:-20]),                                           # truncated
        (ins_key, value[:-1] + b"]"),                                     # wrong closing bracket
        (ins_key, value.replace(b'"payload":', b'"payload": \n', 1)),     # whitespace around the payload (valid)
        (ins_key, json.dumps(ins, indent=1).encode()),                    # pretty-printed (valid)
        (ins_key, dumps({"payload": ins["payload"], "schema": ins["schema"]})),  # members swapped (valid)
        (ins_key, dumps(dict(ins, schema=None))),
        (ins_key, dumps(dict(ins, payload=None))),
        (ins_key, dumps(ins["payload"])),                                # no envelope
        (ins_key, b'{"schema":' + dumps(ins["schema"]) + b',"payload":'),  # the envelope alone
        (ins_key, b'{"schema":' + dumps(ins["schema"]) + b',"payload":}'),
        (ins_key, b'{"schema":' + dumps(ins["schema"]) + b',"payload":1,"x":2}'),
        (ins_key, b'{"schema":' + dumps(ins["schema"]) + b',"payload":NaN}'),
        (ins_key, b""),
        (None, value),
    ]
    return out


# --- value converters ---------------------------------------------------------------------------


def outcome(fn, *args):
    """``("ok", result)`` or ``("error", exception type, message)``."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # the comparison includes the errors
        return ("error", type(exc).__name__, str(exc))


TYPES = ["string", "boolean", "smallint", "int", "bigint", "float", "double", "decimal(10,2)", "decimal(38,0)",
         "decimal(5,5)", "decimal(38,38)", "date", "timestamp", "binary", "time", "decimal"]
VALUES = [None, "", " ", "abc", "12", " 12 ", "-7", "1_000", "٣", "1e3", "12.5", "12.50", "-0.001", "1E+2", "NaN",
          "inf", "-Infinity", "true", "False", "yes", "0", "1", "2024-01-02", "2024-01-02 03:04:05",
          "2024-01-02T03:04:05.1234567+02:00", "0000-00-00 00:00:00", "2024-13-40", "AAEC", "99999999999999999999999999999.5",
          "1" * 40, 0, 1, -1, 12, 2**63, -(2**70), 10**40, True, False, 1.5, 0.1 + 0.2, 1e20, 1e-7, -0.0, 12.0,
          float("nan"), float("inf"), 1e308 * 10, {"b": 1, "a": [1, 2]}, [1, "x"], [], {}]


def connect_schema(ctype, name=None, **params):
    s = {"type": ctype, "optional": True, "field": "c"}
    if name:
        s["name"] = name
    if params:
        s["parameters"] = params
    return s


CONNECT_SCHEMAS = [
    connect_schema("int32"), connect_schema("int64"), connect_schema("int16"), connect_schema("float64"), connect_schema("float32"), connect_schema("boolean"),
    connect_schema("string"), connect_schema("bytes"), connect_schema("array"), connect_schema("struct"), connect_schema("nope"),
    connect_schema("bytes", "org.apache.kafka.connect.data.Decimal", scale="2", **{"connect.decimal.precision": "10"}),
    connect_schema("bytes", "org.apache.kafka.connect.data.Decimal", scale="0"),
    connect_schema("bytes", "org.apache.kafka.connect.data.Decimal", scale="40", **{"connect.decimal.precision": "50"}),
    connect_schema("bytes", "org.apache.kafka.connect.data.Decimal", scale="x"),
    {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": [1], "field": "c"},
    connect_schema("struct", "io.debezium.data.VariableScaleDecimal"),
    connect_schema("int64", "io.debezium.time.Timestamp"), connect_schema("int64", "io.debezium.time.MicroTimestamp"),
    connect_schema("int64", "io.debezium.time.NanoTimestamp"), connect_schema("int64", "org.apache.kafka.connect.data.Timestamp"),
    connect_schema("int32", "io.debezium.time.Date"), connect_schema("int32", "org.apache.kafka.connect.data.Date"),
    connect_schema("int64", "io.debezium.time.MicroTime"), connect_schema("int32", "io.debezium.time.Time"),
    connect_schema("string", "io.debezium.time.ZonedTimestamp"), connect_schema("string", "io.debezium.data.Json"),
    connect_schema("string", "io.debezium.data.Enum"),
]
CONNECT_VALUES = VALUES + [base64.b64encode(b"\x01\x02").decode(), "/zg=", "AA==", "f////////w==", "gAAAAAAAAQ==",
                           base64.b64encode((10**35).to_bytes(15, "big")).decode(), "QUJ", "AB==", "A-B_",
                           {"scale": 2, "value": "MDk="}, {"scale": "x", "value": "MDk="}, 1700000000123, -1234567,
                           -4000, 19000, 86_399_999_999, "2024-01-02T03:04:05Z"]
