"""Fuzzing: no Kafka record stops normalize, in any format, and every record is accounted for.

Hypothesis draws batches of Kafka records for every registered format
(:func:`cdclake.formats.formats`):

- random bytes as values and as keys, Kafka tombstones (no value), no key;
- valid messages of the format, rendered by the simulator (:data:`cdclake.sim.wire.WIRE_FORMATS`
  on a simulated shop hour), with their keys;
- those messages mutated, once or twice: truncated, bytes replaced, invalid UTF-8 inserted,
  a slice repeated; for the JSON formats, a value anywhere in the document replaced by one of
  the wrong JSON type, NaN, Infinity, numbers past 64 bits, a huge string, a lone surrogate
  (``\\ud800``), JSON text nested past the depth limit, nesting past the limit, or a value from
  elsewhere in the document, a member removed, a member added, a member's key duplicated,
  written with ASCII escapes or as raw UTF-8 (lone surrogates then as invalid UTF-8); for the
  Avro formats, the decoded record (DTS ``Record``, the Qlik envelope and its metadata or data
  message) with such values put into its fields and written again where Avro can hold them;
  keys mutated the same way.

Each batch runs through :func:`cdclake.normalize.parse_batches` (hence ``classify_records`` and
the Arrow output, with its fallback) as an Arrow batch of the raw table's schema, with the
default limits or small ones. Properties: ``parse_batches`` never raises; its output is Arrow
batches of the tagged schema; each input record yields exactly one quarantine row whose reason
starts with ``<format>: field '``, or one control row, or one or more change rows, never a mix;
no reason is an unexpected exception (every failure is a parser's :class:`ParseError`, a limit,
or a row Arrow cannot hold). The parsers are the ones normalize uses, warmed on the valid
messages (Debezium envelopes learnt, Qlik metadata given with ``with_schemas``).

``CDC_FUZZ_EXAMPLES`` sets the examples per format (default 200; ``make test`` runs the
default); ``CDC_FUZZ_SEED`` runs random examples from that seed instead of the fixed ones.

One Spark-level test produces a few hundred fuzzed records of two formats (Debezium and Canal
JSON) to the embedded broker, runs ``land``, ``normalize`` and their gates, and checks every
record is in exactly one of the bronze tables. The tests at the end are the fuzzing's finds.
"""
from __future__ import annotations

import copy
import functools
import io
import json
import os
import random
import re
from collections import Counter
from typing import Any, Optional

import pytest
from conftest import json_edit, produce, write_pipeline
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from pipeline import H0, hour, ms
from parse_harness import TAGGED, arrow_schema, outcomes, raw_batch

from cdclake.formats import dts
from cdclake.formats.qlik import ENVELOPE_SCHEMA
from cdclake.normalize import json_nesting_depth, parse_batches
from cdclake.normalize.rows import TAGGED_SCHEMA as _TAGGED_SCHEMA
from cdclake.formats import formats, get_parser
from cdclake.record import KafkaRecord, ParseError
from cdclake.sim import SimulatedSource
from cdclake.sim.render_dts import encode as dts_encode
from cdclake.sim.wire import WIRE_FORMATS

EXAMPLES = int(os.environ.get("CDC_FUZZ_EXAMPLES", "200"))
_SEED = os.environ.get("CDC_FUZZ_SEED")
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not _SEED, database=None,
                phases=[Phase.explicit, Phase.generate, Phase.shrink], print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example, HealthCheck.function_scoped_fixture])
seeded = seed(int(_SEED)) if _SEED else (lambda f: f)
WIRE = {w.format: w for w in WIRE_FORMATS}


# ---------------------------------------------------------------------------------------------
# random choices, from Hypothesis or from a seeded generator


class Draw:
    """Random choices: from Hypothesis (``Draw(draw)``) or from ``random.Random`` (``Draw(rng=...)``).

    ``huge`` caps the size of the huge strings and nestings drawn (the Spark test keeps its
    records under the broker's message size)."""

    def __init__(self, draw=None, rng: Optional[random.Random] = None, huge: int = 1_000_000):
        self.draw, self.rng, self.huge = draw, rng, huge

    def int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi)) if self.draw else self.rng.randint(lo, hi)

    def pick(self, seq):
        return seq[self.int(0, len(seq) - 1)]

    def bytes(self, max_size: int) -> bytes:
        if self.draw:
            return self.draw(st.binary(max_size=max_size))
        return self.rng.randbytes(self.rng.randint(0, max_size))

    def text(self, max_size: int) -> str:
        if self.draw:
            return self.draw(st.text(max_size=max_size))
        return "".join(chr(self.rng.choice((self.rng.randint(32, 126), self.rng.randint(0, 0xD7FF))))
                       for _ in range(self.rng.randint(0, max_size)))


# ---------------------------------------------------------------------------------------------
# the corpus: valid messages and warmed parsers, per format


def parser_options(fmt: str) -> dict:
    """The parser options of ``fmt``'s simulated topic (``sources[]`` shape flattened as normalize does)."""
    opts = json.loads(json.dumps(WIRE[fmt].options))
    options = dict(opts.get("options") or {})
    for k in ("primary_key", "primary_keys"):
        if k in opts:
            options[k] = opts[k]
    return options


@functools.lru_cache(maxsize=None)
def corpus(fmt: str, task: str = "fuzz") -> tuple[list[tuple], Any]:
    """``(valid (key, value) pairs, parser)`` of ``fmt``: a simulated hour and the parser normalize
    would use for it (Qlik metadata given, every message read once)."""
    src = SimulatedSource(seed=17, start=H0, hours=1, tx_per_hour=20)
    kw = {"task": task} if fmt.startswith("qlik") else {}
    messages = [(m.key, m.value) for m in WIRE[fmt].render(src.run(), src.tables, partitions=1, **kw)]
    parser = get_parser(fmt, parser_options(fmt))
    if hasattr(parser, "with_schemas"):
        scanner = get_parser(fmt)
        entries = [e for k, v in messages for e in scanner.schema_entries(KafkaRecord("t", 0, 0, 0, k, v))]
        parser = parser.with_schemas(entries)
    rows = [kind for b in parse_batches({"t": parser}, TAGGED, [raw_batch("t", messages)])
            for kind in b.column("_kind").to_pylist()]
    assert "quarantine" not in rows, fmt  # the valid messages are valid
    return messages, parser


# ---------------------------------------------------------------------------------------------
# mutations


class Raw:
    """JSON text put as it is into a document being written (NaN, deep nesting, odd numbers)."""

    def __init__(self, text: str):
        self.text = text


class Pairs:
    """A JSON object written with these (key, value) pairs, keys repeated as they are."""

    def __init__(self, items: list):
        self.items = items


def dump(v: Any, ascii_only: bool) -> str:
    """JSON text of a document holding :class:`Raw` and :class:`Pairs` nodes."""
    if isinstance(v, Raw):
        return v.text
    if isinstance(v, (dict, Pairs)):
        items = v.items if isinstance(v, Pairs) else v.items()
        return "{" + ",".join(json.dumps(str(k), ensure_ascii=ascii_only) + ":" + dump(x, ascii_only)
                              for k, x in items) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(dump(x, ascii_only) for x in v) + "]"
    return json.dumps(v, ensure_ascii=ascii_only)


ODD_JSON = [None, True, False, 0, -1, 1.5, -0.0, 2**63, -(2**63) - 1, 10**40, "", " ", "x", "0", "-1", "1e400",
            "NaN", "true", "null", "2024-13-45 25:61:61", "ZZ", "\x00", "\ud800", "a\udfff\ud800", "é", "\U0001f600",
            "c", "u", "d", "r", "INSERT", "DELETE", "MD", "DT", [], {}, [None], {"": None}, {"a": {"b": []}},
            Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("1e999"), Raw("-1e999"), Raw("1E+2"), Raw("-0"),
            Raw("123456789012345678901234567890.123456789"), Raw("0.0000000000000000000000000001")]
DEPTHS = [3, 63, 64, 65, 100, 1_000, 100_000]


def odd_json(d: Draw, doc: Any) -> Any:
    """A JSON value for a mutation: one of :data:`ODD_JSON`, a huge string, deep nesting, deep JSON
    text in a string, random text, or a copy of a value from elsewhere in ``doc``."""
    kind = d.int(0, 9)
    if kind == 0:
        return "x" * min(d.pick([1_000, 70_000, 1_000_000]), d.huge)
    if kind == 1:
        n = min(d.pick(DEPTHS), d.huge // 2)
        return Raw(d.pick(["[" * n + "]" * n, '{"a":' * n + "1" + "}" * n]))
    if kind == 2:
        n = min(d.pick(DEPTHS), d.huge // 2)
        return "[" * n + "]" * n                      # JSON text that a parser may read again
    if kind == 3:
        return d.text(12) + d.pick(["", "", "\ud800", "\udfff"])   # lone surrogates: \ud800 escapes
    if kind == 4:
        nodes = paths(doc)
        if nodes:
            parent, k = d.pick(nodes)
            return copy.deepcopy(parent[k])
    return copy.deepcopy(d.pick(ODD_JSON))


def paths(doc: Any, limit: int = 2000) -> list[tuple]:
    """``(container, key or index)`` of every value inside ``doc`` (lists, dicts), in document order."""
    out, todo = [], [doc]
    while todo and len(out) < limit:
        node = todo.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append((node, k))
            if isinstance(v, (dict, list)):
                todo.append(v)
    return out


def mutate_tree(d: Draw, doc: Any, values) -> Any:
    """``doc`` (decoded JSON or Avro) with one change: a value replaced by ``values(d, doc)``, a member
    or element removed, a member added, or (JSON) a member's key duplicated."""
    nodes = paths(doc)
    if not nodes:
        return values(d, doc)
    parent, k = d.pick(nodes)
    op = d.int(0, 5)
    if op <= 2:
        parent[k] = values(d, doc)
    elif op == 3:
        del parent[k]
    elif op == 4:
        if isinstance(parent, dict):
            parent[d.pick(["extra", "", k + "_x" if isinstance(k, str) else "x", "op", "type", "data"])] = values(d, doc)
        else:
            parent.insert(k, values(d, doc))
    elif isinstance(parent, dict):  # the parent written with the key twice
        items = list(parent.items())
        items.insert(len(items) if d.int(0, 1) else 0, (k, values(d, doc)))
        if parent is doc:
            return Pairs(items)
        for holder, at in nodes:
            if holder[at] is parent:
                holder[at] = Pairs(items)
                break
    return doc


ODD_TEXT = ["", " ", "0", "-0", "1e400", "NaN", "99999999999999999999999999999999999999999", "2024-13-45 25:61:61",
            "0000-00-00 00:00:00", "ZZ", "\x00", "é", "\U0001f600", "null"]
ODD_NUMBERS = [0, -1, 2**31, 2**63, -(2**63) - 1, 10**40, 1.5, -0.0, 1e308, Raw("NaN"), Raw("-Infinity"), Raw("1e999")]


def mutate_leaf(d: Draw, doc: Any) -> Any:
    """``doc`` with a text or number replaced by one of the same JSON type: text with a lone surrogate
    in it, odd text, or an extreme number."""
    leaves = [(p, k) for p, k in paths(doc) if isinstance(p[k], (str, int, float)) and not isinstance(p[k], bool)]
    if not leaves:
        return doc
    parent, k = d.pick(leaves)
    if isinstance(parent[k], str):
        text = parent[k]
        at = d.int(0, len(text))
        parent[k] = text[:at] + d.pick(["\ud800", "\udfff", "\udc80x"]) + text[at:] if d.int(0, 1) else d.pick(ODD_TEXT)
    else:
        parent[k] = d.pick(ODD_NUMBERS)
    return doc


def mutate_json(d: Draw, raw: bytes) -> bytes:
    """A structural mutation of the JSON text ``raw`` (bytes mutation when it is not JSON)."""
    if json_nesting_depth(raw) > 100:  # json.loads may or may not reach the bottom: it depends on the stack
        return mutate_bytes(d, raw)
    try:
        doc = json.loads(raw)
    except ValueError:
        return mutate_bytes(d, raw)
    for _ in range(d.int(1, 2)):
        doc = mutate_tree(d, doc, odd_json) if d.int(0, 2) else mutate_leaf(d, doc)
    ascii_only = d.int(0, 3) > 0
    return dump(doc, ascii_only).encode("utf-8", "surrogatepass")


ODD_AVRO = [None, 0, -1, 2**31, 2**63 - 1, -(2**63), 1.5, float("nan"), float("inf"), "", "x" * 70_000, b"",
            b"\xff\xfe\x00", "NaN", "{}", "[]", '{"PRIMARY":["nope"]}', "0000-00-00", "abc@def", "INSERT", "DELETE",
            "DDL", "MD", "DT", {}, [], [None], True]


def odd_avro(d: Draw, doc: Any) -> Any:
    """A value for an Avro field: extremes, random bytes and text, JSON texts, or a copy of another."""
    kind = d.int(0, 6)
    if kind == 0:
        return d.bytes(40)
    if kind == 1:
        return d.text(12)
    if kind == 2:
        n = min(d.pick(DEPTHS), d.huge // 2)
        return d.pick(["[" * n + "]" * n, '{"PRIMARY":' * n + "1" + "}" * n])
    if kind == 3:
        nodes = paths(doc)
        if nodes:
            parent, k = d.pick(nodes)
            return copy.deepcopy(parent[k])
    return copy.deepcopy(d.pick(ODD_AVRO))


def _avro_write(schema, record) -> bytes:
    from fastavro import schemaless_writer

    buf = io.BytesIO()
    schemaless_writer(buf, schema, record)
    return buf.getvalue()


def _avro_read(schema, data: bytes, **kw):
    from fastavro import schemaless_reader

    return schemaless_reader(io.BytesIO(data), schema, None, **kw)


@functools.lru_cache(maxsize=None)
def _parsed(schema_text: str):
    from fastavro import parse_schema

    return parse_schema(json.loads(schema_text))


def mutate_avro(d: Draw, fmt: str, raw: bytes, parser) -> bytes:
    """A structural mutation of an Avro value of ``fmt``, written again (bytes mutation when the
    value cannot be read, or the mutated record cannot be written)."""
    try:
        if fmt in ("debezium-avro", "debezium-jsonschema"):  # the body mutated (Avro: written with its
            from cdclake.formats.debezium.avro import wire_parts, wire_value  # schema); sometimes another id

            schema_id, body = wire_parts(fmt, raw)
            if fmt == "debezium-jsonschema":
                body = mutate_json(d, body)
            else:
                parsed = parser.decoder(schema_id).parsed
                body = _avro_write(parsed, mutate_tree(d, _avro_read(parsed, body), odd_avro))
            if d.int(0, 3) == 0:
                schema_id = d.pick(sorted(parser._decoders) + [0, 2**32 - 1])
            return wire_value(schema_id, body)
        if fmt == "dts-avro":
            record = dts.decode(raw)
            record = mutate_tree(d, record, odd_avro)
            return dts_encode(record)
        envelope_schema = _parsed(json.dumps(ENVELOPE_SCHEMA))
        env = _avro_read(envelope_schema, raw)
        inner = None
        if env.get("messageSchema"):
            inner = env["messageSchema"]
        elif env.get("messageSchemaId") in parser.entries:
            inner = json.loads(parser.entries[env["messageSchemaId"]].definition).get("dataSchema")
        if inner and d.int(0, 2):
            schema = _parsed(inner)
            message = mutate_tree(d, _avro_read(schema, env["message"]), odd_avro)
            env["message"] = _avro_write(schema, message)
        else:
            env = mutate_tree(d, env, odd_avro)
        return _avro_write(envelope_schema, env)
    except Exception:  # noqa: BLE001  (not readable, or the mutated record is not writable Avro)
        return mutate_bytes(d, raw)


INVALID_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xe2\x82"]


def mutate_bytes(d: Draw, raw: bytes) -> bytes:
    """``raw`` truncated, with a slice replaced by random bytes, with invalid UTF-8 put in, or with a slice repeated."""
    if not raw:
        return d.bytes(20)
    op = d.int(0, 3)
    i = d.int(0, len(raw) - 1)
    if op == 0:
        return raw[:i]
    if op == 1:
        j = d.int(i, min(len(raw), i + 16))
        return raw[:i] + d.bytes(16) + raw[j:]
    if op == 2:
        return raw[:i] + d.pick(INVALID_UTF8) + raw[i:]
    j = d.int(i, min(len(raw), i + 64))
    return raw[:j] + raw[i:j] * d.int(1, 3) + raw[j:]


def mutate(d: Draw, fmt: str, raw: Optional[bytes], parser) -> Optional[bytes]:
    """One or two mutations of a value or key of ``fmt``: structural ones (three in four) where it can
    be read, else bytes."""
    if raw is None:
        return d.pick([None, b"", d.bytes(40)])
    for _ in range(d.int(1, 2)):
        if d.int(0, 3) == 0:
            raw = mutate_bytes(d, raw)
        elif fmt.endswith("-json"):
            raw = mutate_json(d, raw)
        else:
            raw = mutate_avro(d, fmt, raw, parser)
    return raw


def fuzzed_record(d: Draw, fmt: str) -> tuple[Optional[bytes], Optional[bytes]]:
    """A ``(key, value)`` of ``fmt``: random, a tombstone, valid, or a mutated valid message."""
    messages, parser = corpus(fmt)
    key, value = d.pick(messages)
    kind = d.int(0, 9)
    if kind == 0:
        return d.pick([None, key, d.bytes(40)]), d.bytes(300)
    if kind == 1:
        return key, None
    if kind == 2:
        return key, value
    value = mutate(d, fmt, value, parser)
    k = d.int(0, 5)
    if k == 0:
        key = d.bytes(40)
    elif k == 1:
        key = None
    elif k == 2:
        key = mutate(d, fmt, key, parser)
    return key, value


@st.composite
def batches(draw, fmt: str):
    """``(records, limits)``: one to six fuzzed records of ``fmt`` and the limits to parse them with."""
    d = Draw(draw)
    records = [fuzzed_record(d, fmt) for _ in range(d.int(1, 6))]
    limits = d.pick([{}] * 8 + [{"max_value_bytes": d.int(1, 4000)}, {"max_nesting_depth": d.int(2, 8)}])
    return records, limits


# ---------------------------------------------------------------------------------------------
# the property


def check_accounted(fmt: str, outputs: dict, expected: dict[tuple, tuple]) -> Counter:
    """Every record of ``expected`` (``{(topic, partition, offset): (key, value)}``) has exactly one
    quarantine row, or one control row, or one or more change rows in ``outputs`` (rows of each
    record as dicts); returns the count of outcomes."""
    assert set(outputs) == set(expected)
    seen: Counter = Counter()
    for where, rows in outputs.items():
        kinds = {r["_kind"] for r in rows}
        assert len(kinds) == 1, (where, rows)
        (kind,) = kinds
        seen[kind] += 1
        if kind == "change":
            assert all(r["source_format"] == fmt and r["op"] in ("insert", "update", "delete", "snapshot", "truncate")
                       for r in rows), rows
            continue
        assert len(rows) == 1, (where, rows)
        row = rows[0]
        if kind == "quarantine":
            reason = row["reason"]
            assert reason.startswith(f"{fmt}: field '") and len(reason) > len(f"{fmt}: field ''"), reason
            assert not re.match(rf"{re.escape(fmt)}: field '[^']*': unexpected [A-Z]\w*: ", reason), reason
            assert (row["key"] or None, row["value"] or None) == tuple(b or None for b in expected[where]), where
        else:
            assert row["source_format"] == fmt and row["kind"], row
    return seen


#: The wire formats: every registered format but ``auto``, which reads them (tests/test_formats_auto.py).
WIRE_NAMES = [f for f in formats() if f != "auto"]


@pytest.mark.parametrize("fmt", WIRE_NAMES)
def test_every_record_is_parsed_or_quarantined(fmt):
    assert set(WIRE_NAMES) == set(WIRE), "every registered format needs a renderer in cdclake.sim.wire"
    corpus(fmt)
    totals: Counter = Counter()

    @FUZZ
    @seeded
    @given(batches(fmt))
    def run(case):
        records, limits = case
        out = outcomes(parse_batches({"t": corpus(fmt)[1]}, TAGGED, [raw_batch("t", records)], **limits))
        totals.update(check_accounted(fmt, out, {("t", 0, i): r for i, r in enumerate(records)}))

    run()
    assert totals["change"] and totals["quarantine"], totals  # both ends were reached


# ---------------------------------------------------------------------------------------------
# through Spark: land, normalize and their gates


def test_fuzzed_topics_through_land_normalize_and_gates(stack, spark, unique):
    from cdclake.config import load_pipeline
    from cdclake.gates import run_gate
    from cdclake.land import land
    from cdclake.normalize import normalize, tagged_arrow_schema
    from cdclake.window import Window

    assert arrow_schema(_TAGGED_SCHEMA) == tagged_arrow_schema()   # the schema the fuzzing above uses
    rng = random.Random(20240101)
    sources, produced = [], {}
    # formats that keep nothing in the catalog's shared schema registry (fuzzed Qlik metadata would
    # stay there for later tests); Qlik through Spark: tests/test_normalize_containment.py
    for fmt, tag in (("debezium-json", "dbz"), ("canal-json", "canal")):
        messages, _ = corpus(fmt)
        d = Draw(rng=rng, huge=200_000)
        records = list(messages[:150]) + [fuzzed_record(d, fmt) for _ in range(250)]
        topic = f"fuzz.{tag}.{unique}"
        t0 = ms(H0)
        produce(stack["bootstrap"], topic, [(0, t0 + i, k, v) for i, (k, v) in enumerate(records)])
        produced[topic] = (fmt, records)
        sources.append({"topic": topic, "format": fmt, **WIRE[fmt].options})
    # topics of fuzzed records (most of each quarantined): the quarantine budget is the whole topic
    path = write_pipeline(f"fuzz_{unique}", sources, silver={"namespace": f"fuzz_{unique}"},
                          normalize={"max_quarantine_share": 1.0})
    cfg = load_pipeline(path)
    window = Window(hour(0), hour(1))
    land(spark, cfg, window)
    stats = normalize(spark, cfg, window)
    for gate in ("land", "normalize"):
        run_gate(gate, cfg, window)
    for topic, (fmt, records) in produced.items():
        outputs: dict = {}
        for table, kind in (("changes", "change"), ("quarantine", "quarantine"), ("control_events", "control")):
            for r in spark.table(f"lake.bronze.{table}").where(f"kafka_topic = '{topic}'").collect():
                row = {**r.asDict(), "_kind": kind}
                for b in ("key", "value"):
                    if row.get(b) is not None:
                        row[b] = bytes(row[b])
                outputs.setdefault((topic, r.kafka_partition, r.kafka_offset), []).append(row)
        seen = check_accounted(fmt, outputs, {(topic, 0, i): r for i, r in enumerate(records)})
        assert stats[topic] == {"raw": len(records), "changes": sum(len(v) for v in outputs.values()
                                                                    if v[0]["_kind"] == "change"),
                                "quarantined": seen["quarantine"], "control": seen["control"]}, stats[topic]
        assert seen["quarantine"] and seen["change"], seen


# ---------------------------------------------------------------------------------------------
# what the fuzzing found: each was an exception other than ParseError (quarantined, but with
# "unexpected <type>" for a reason) or a metadata message the schema registry could not store


def _parse_error(fmt: str, value: bytes, key: Optional[bytes] = None, parser=None) -> ParseError:
    with pytest.raises(ParseError) as info:
        (parser or get_parser(fmt, parser_options(fmt))).parse(KafkaRecord("t", 0, 0, 0, key, value))
    return info.value


def test_debezium_schema_of_the_wrong_json_type_is_a_parse_error():
    messages, _ = corpus("debezium-json")
    key, value = next((k, v) for k, v in messages if v and b'"op":"c"' in v)
    doc = json.loads(value)
    assert doc["schema"]["fields"][0]["field"] == "before"   # its column schemas are the ones read
    fields = doc["schema"]["fields"][0]["fields"]
    decimal = next(i for i, f in enumerate(fields) if f.get("name") == "org.apache.kafka.connect.data.Decimal")
    cases = [(("schema", "fields", 0, "fields", decimal, "parameters", "x"), "schema",
              "not a Kafka Connect struct schema (ValueError: parameters 'x' are not an object)"),
             (("schema", "fields", 0, "fields", 1.5), "schema", "not a Kafka Connect struct schema (TypeError: "),
             (("schema", "fields", 0, "fields", 0, "field", {"a": 1}), "schema", "not a Kafka Connect struct schema"),
             (("payload", "source", "db", ["shop"]), "source.db", "name ['shop'] is not text")]
    for *path, field_name, reason in cases:
        err = _parse_error("debezium-json", json_edit(value, *path[0]), key)
        assert err.field == field_name and str(err).startswith(f"debezium-json: field '{field_name}': {reason}"), err
    # a Decimal value read with parameters that are not an object is a value error of its column
    from cdclake.formats.connect import connect_text

    with pytest.raises(ValueError, match="are not an object"):
        connect_text("AQ==", {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": "x"})


def test_canal_names_of_the_wrong_json_type_are_parse_errors():
    messages, _ = corpus("canal-json")
    _, value = next((k, v) for k, v in messages if v and b'"isDdl":false' in v)
    for name, bad in (("database", ["shop"]), ("database", 7), ("table", {"t": 1})):
        err = _parse_error("canal-json", json_edit(value, name, bad))
        assert str(err) == f"canal-json: field '{name}': name {bad!r} is not text", err


def test_keys_nested_past_the_parser_are_not_used():
    from cdclake.formats.json_values import EnvelopeReader, read_key

    deep = b"[" * 100_000 + b"]" * 100_000
    assert read_key(deep) is None and read_key(deep, EnvelopeReader("debezium-json")) is None


def test_qlik_json_message_text_nested_past_the_parser_is_a_parse_error():
    messages, parser = corpus("qlik-json")
    value = next(v for _, v in messages if b'"type":"DT"' in v)
    deep = "[" * 100_000 + "]" * 100_000
    err = _parse_error("qlik-json", json_edit(value, "message", deep), parser=parser)
    assert str(err) == "qlik-json: field 'message': message text is JSON nested too deeply to read"


def test_qlik_metadata_the_registry_cannot_store_is_a_parse_error_or_stored_escaped():
    from cdclake.formats.qlik import table_from_entry

    messages, _ = corpus("qlik-json")
    md = next(v for _, v in messages if b'"type":"MD"' in v)
    err = _parse_error("qlik-json", json_edit(md, "message", "lineage", "tableVersion", 2**40))
    assert str(err) == "qlik-json: field 'lineage.tableVersion': table version 1099511627776 does not fit 32 bits"
    doc = json.loads(md)
    columns = doc["message"]["tableStructure"]["tableColumns"]
    first = next(iter(columns))
    columns["caf\udce9"] = columns.pop(first)   # a column name with a lone surrogate (a \udce9 escape)
    (entry,) = get_parser("qlik-json").schema_entries(KafkaRecord("t", 0, 0, 0, None, json.dumps(doc).encode()))
    entry.definition.encode("utf-8")             # storable
    assert "caf\udce9" in table_from_entry("qlik-json", entry).by_name


def test_debezium_decimal_scale_past_any_type_is_a_parse_error_not_a_hang():
    messages, _ = corpus("debezium-json")
    key, value = next((k, v) for k, v in messages if v and b'"op":"c"' in v and b'"amount"' in v)
    doc = json.loads(value)
    fields = doc["schema"]["fields"][0]["fields"]
    decimal = next(i for i, f in enumerate(fields) if f.get("name") == "org.apache.kafka.connect.data.Decimal")
    column = fields[decimal]["field"]
    for scale in ("2147483647", str(10**40)):  # 10 ** scale was computed for the converter: hours, gigabytes
        err = _parse_error("debezium-json", json_edit(value, "schema", "fields", 0, "fields", decimal, "parameters",
                                                  "scale", scale), key)
        assert err.field == f"after.{column}" and "InvalidOperation" in str(err), err


def test_qlik_mask_far_past_the_table_is_refused_before_its_bits_are_expanded():
    messages, parser = corpus("qlik-json")
    value = next(v for _, v in messages if b'"type":"DT"' in v and b'"columnMask":"' in v)
    mask = json.loads(value)["message"]["headers"]["columnMask"]
    huge = mask + "FF" * 4_000_000                # 32 million bits: gigabytes as a set of ordinals
    err = _parse_error("qlik-json", json_edit(value, "message", "headers", "columnMask", huge), parser=parser)
    assert err.field == "headers.columnMask" and f"mask of {len(huge) // 2} bytes sets ordinal(s) past" in str(err)
    padded = mask + "00" * 4_000_000              # zero bytes past the table's ordinals are read as before
    (change,) = parser.parse(KafkaRecord("t", 0, 0, 0, None, json_edit(value, "message", "headers", "columnMask", padded)))
    assert change == parser.parse(KafkaRecord("t", 0, 0, 0, None, value))[0]


def test_dts_pk_uk_info_nested_past_the_parser_is_a_parse_error():
    messages, _ = corpus("dts-avro")
    record = next(r for r in (dts.decode(v) for _, v in messages if v) if r["operation"] == "INSERT")
    record["tags"]["pk_uk_info"] = "[" * 100_000 + "]" * 100_000
    err = _parse_error("dts-avro", dts_encode(record))
    assert str(err) == "dts-avro: field 'tags.pk_uk_info': pk_uk_info is JSON nested too deeply to read", err
