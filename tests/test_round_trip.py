"""Round trip of every wire format: simulated history → messages → parse → reference model.

For each format of :data:`cdclake.sim.wire.WIRE_FORMATS`, a simulated shop (two hours from
2024-01-01 UTC, one seed per format: :data:`SEEDS`) is rendered by the format's renderer, landed
as Kafka records (:func:`helpers.landed`: offsets per partition), parsed hour by hour as normalize
parses (each hour by a new parser with the source's options; a schema-aware format, Qlik, given
the metadata entries stored up to that hour) and applied with
:func:`reference_model.apply_changes`. The result must be the source's final state (every row,
value by value as canonical text), every change must carry the table's primary key, and its
column types must be the declared ones (within what the format can say: :func:`check_types`).

Variants (:func:`variants`), each a parameter of every test here:

- partitions: the format's own (:attr:`WireFormat.partitions`), one, three;
- reversed delivery: three partitions, each partition's offsets reversed and read last first
  (not for AWS DMS, whose order is the Kafka order: :data:`KAFKA_ORDER`);
- untyped: for the formats whose topics configure ``column_types`` (CDL, SharePlex, DTS, Maxwell,
  AWS DMS, DataWorks,
  GoldenGate), the same deliveries without them (keys still configured);
- minimal logging (Qlik): updates carry only the changed columns.

Then per-format checks of the same runs: CDL heartbeats and transaction ids, SharePlex
transaction sizes and update keys, SharePlex text without configured types, the Qlik metadata
versions stored and the partial images of minimal logging, AWS DMS control records, full-load
rows and before images.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
import re
from dataclasses import dataclass

import pytest
from helpers import landed
from reference_model import apply_changes, changes

from cdclake.config import SourceConfig
from cdclake.formats import get_parser
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, SchemaAwareParser, parse_all
from cdclake.sim import SimulatedSource, as_text
from cdclake.sim.wire import WIRE_FORMATS

START = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
HOURS = 2
WIRE = {w.format: w for w in WIRE_FORMATS}
#: The simulated shop's seed per format.
SEEDS = {"debezium-json": 13, "canal-json": 17, "arcion-json": 29, "cdl-json": 23, "shareplex-json": 31,
         "qlik-json": 11, "qlik-avro": 11, "dts-avro": 41, "maxwell-json": 43, "aws-dms-json": 43, "aliyun-json": 43,
         "ogg-json": 43, "debezium-avro": 19,
         "debezium-jsonschema": 37}
#: The first part of the table names a format gives (default ``shop``, the MySQL database):
#: CDL names the PostgreSQL schema (``SEG_OWNER``) and no database.
NAMESPACE = {"cdl-json": "public"}
#: Formats that send values in the source's own notation (SharePlex: timestamps with
#: a ``T`` and nine fraction digits; Maxwell: untyped timestamps as written; AWS DMS: every value
#: as text; GoldenGate: ``YYYY-MM-DD:HH:MM:SS``, decimals as JSON numbers): without configured
#: types only the keys match the source.
TEXT_AS_SENT = {"shareplex-json", "maxwell-json", "aws-dms-json", "ogg-json"}
#: Formats whose messages carry no source position (AWS DMS): their order is the Kafka order of
#: a partition, so a delivery with each partition's offsets reversed is not one they can read.
KAFKA_ORDER = {"aws-dms-json"}
#: Formats whose own types are coarser than the source's (DataWorks JSON: a DECIMAL is a DOUBLE, a
#: DATE a timestamp without a zone): without configured types only the keys match the source.
COARSE_TYPES = {"aliyun-json"}


def extra_changes(fmt: str, messages: list) -> int:
    """Changes a format gives beyond one per row change of the history: DataWorks JSON's split
    updates (``UPDATE_BEFORE`` then ``UPDATE_AFTER``) give two, a delete of the old row and the
    update."""
    if fmt != "aliyun-json":
        return 0
    return sum(1 for m in messages if m.value and b'"op":"UPDATE_BEFORE"' in m.value)


@dataclass(frozen=True)
class Variant:
    """One delivery of a format's rendering: ``partitions``, ``reverse`` delivery, ``typed``
    (the topic's ``column_types`` configured) and Qlik's ``minimal_logging``."""

    partitions: int
    reverse: bool = False
    typed: bool = True
    minimal_logging: bool = False

    def __str__(self) -> str:
        return "-".join([f"{self.partitions}p"] + [name for name, on in (
            ("reversed", self.reverse), ("untyped", not self.typed), ("minimal-logging", self.minimal_logging)) if on])


def variants(fmt: str) -> list[Variant]:
    """The variants of ``fmt`` (see the module docstring), without repeats."""
    w = WIRE[fmt]
    deliveries = [(w.partitions, False), (1, False), (3, False)] + ([] if fmt in KAFKA_ORDER else [(3, True)])
    typings = (True, False) if "column_types" in w.options.get("options", {}) else (True,)
    out = [Variant(p, reverse, typed) for typed in typings for p, reverse in deliveries]
    if fmt.startswith("qlik"):
        out.append(Variant(3, minimal_logging=True))
    return list(dict.fromkeys(out))


def cases(*fmts: str) -> list:
    """``pytest.param(fmt, variant)`` for every variant of ``fmts`` (default: every format)."""
    return [pytest.param(f, v, id=f"{f}-{v}") for f in fmts or WIRE for v in variants(f)]


@dataclass
class RoundTrip:
    """A run: the source and its history, the messages, the landed records, the parse results
    ``(record, result)`` in record order, the change pairs, the reference model's state and the
    schema entries stored (Qlik) and the parser options."""

    source: SimulatedSource
    history: list
    messages: list
    records: list[KafkaRecord]
    results: list
    pairs: list[tuple[KafkaRecord, ChangeRecord]]
    state: dict
    stored: list
    options: dict


@functools.lru_cache(maxsize=None)
def simulated(fmt: str) -> tuple[SimulatedSource, list]:
    """The format's simulated source and its history."""
    src = SimulatedSource(seed=SEEDS[fmt], start=START, hours=HOURS)
    return src, src.run()


def parser_options(fmt: str, typed: bool = True) -> dict:
    """The parser options of the format's topic (its ``sources[]`` entry as normalize reads it),
    without ``column_types`` unless ``typed``."""
    options = SourceConfig(topic="shop", format=fmt, **WIRE[fmt].options).parser_options()
    if not typed:
        options.pop("column_types", None)
    return options


@functools.lru_cache(maxsize=None)
def round_trip(fmt: str, variant: Variant) -> RoundTrip:
    """Render, land, parse hour by hour and apply (see the module docstring)."""
    src, history = simulated(fmt)
    kw = {"minimal_logging": True} if variant.minimal_logging else {}
    messages = WIRE[fmt].render(history, src.tables, partitions=variant.partitions, **kw)
    records = landed(messages, reverse=variant.reverse)
    options = parser_options(fmt, variant.typed)
    results: list = []
    stored: list = []
    for hour_start, hour_end in src.hour_bounds():
        window = [r for r in records if hour_start <= r.timestamp_ms < hour_end]
        parser = get_parser(fmt, options)
        if isinstance(parser, SchemaAwareParser):
            stored += [e for r in window for e in parser.schema_entries(r)]
            parser = parser.with_schemas(list(stored))
        results += parse_all(parser, window)
    assert len(results) == len(records), "every record is in one of the hours"
    pairs = changes(results)  # raises the first ParseError
    return RoundTrip(src, history, messages, records, results, pairs, apply_changes(pairs), stored, options)


def expected_state(fmt: str, source: SimulatedSource) -> dict:
    """The source's final state as the reference model gives it: ``{namespace.table: {key text
    tuple: row of canonical text}}``."""
    namespace = NAMESPACE.get(fmt, "shop")
    return {f"{namespace}.{name}": {tuple(row[k] for k in source.tables[name].primary_key): row
                                    for row in rows.values()}
            for name, rows in as_text(source.final_state()).items()}


def check_types(fmt: str, typed: bool, change: ChangeRecord, declared: dict[str, str]) -> None:
    """Assert the column types of ``change`` against the table's ``declared`` types.

    Typed: exactly the declared types, except DTS Avro (it types a value by the value itself: a
    NULL of a VARCHAR/VARBINARY or DECIMAL column carries no type). Untyped: CDL's own Decimal
    has no precision (``string``); SharePlex carries no types; DTS gives each decimal value's
    precision with the column's scale; SharePlex and GoldenGate carry no types.
    """
    got = change.column_types
    if fmt == "dts-avro":
        image = change.after if change.after is not None else change.before
        assert set(declared) - set(got) <= {k for k, v in image.items() if v is None}
        for col, ctype in got.items():
            if typed or not ctype.startswith("decimal"):
                assert ctype == declared[col], (col, ctype)
            else:
                assert declared[col].startswith("decimal") and ctype.endswith(declared[col].split(",")[1]), col
    elif typed:
        assert got == declared
    elif fmt == "cdl-json":
        assert got == {c: "string" if t.startswith("decimal") else t for c, t in declared.items()}
    elif fmt == "aliyun-json":
        coarse = {"smallint": "bigint", "int": "bigint", "float": "double", "date": "timestamp_ntz"}
        assert got == {c: "double" if t.startswith("decimal") else coarse.get(t, t) for c, t in declared.items()}
    else:
        assert fmt in ("shareplex-json", "maxwell-json", "aws-dms-json", "ogg-json") and got == {}


@pytest.mark.parametrize("fmt, variant", cases())
def test_round_trip_reaches_the_final_state(fmt, variant):
    run = round_trip(fmt, variant)
    assert len(run.pairs) == sum(len(tx.changes) for tx in run.history) + extra_changes(fmt, run.messages)
    expected = expected_state(fmt, run.source)
    assert set(run.state) == set(expected)
    for table, rows in expected.items():
        if variant.typed or fmt not in TEXT_AS_SENT | COARSE_TYPES:
            assert run.state[table] == rows, table
        else:
            assert set(run.state[table]) == set(rows), table
    for _, change in run.pairs:
        table = run.source.tables[change.source_table]
        assert change.primary_key == list(table.primary_key)
        check_types(fmt, variant.typed, change, {c.name: c.ctype for c in table.columns})


# --- per format ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, variant", cases("cdl-json"))
def test_cdl_heartbeats_and_transaction_ids(fmt, variant):
    run = round_trip(fmt, variant)
    controls = [r for _, r in run.results if isinstance(r, ControlRecord)]
    assert controls and {c.kind for c in controls} == {"heartbeat"}
    assert len(controls) == sum(1 for m in run.messages if not m.rows)
    assert all(change.tx_id is not None for _, change in run.pairs)


@pytest.mark.parametrize("fmt, variant", cases("shareplex-json"))
def test_shareplex_transactions_and_update_keys(fmt, variant):
    """One message per row change; ``meta.size`` gives each transaction's size; updates are keyed
    by their ``key`` object (the key columns' before values)."""
    run = round_trip(fmt, variant)
    assert len(run.pairs) == len(run.messages)
    parser = get_parser(fmt, run.options)
    sizes = [parser.transaction_size(r) for r in landed(run.messages)]
    assert sizes == [len(tx.changes) for tx in run.history for _ in tx.changes]
    assert len({c.tx_id for _, c in run.pairs}) == len(run.history)
    updates = [c for _, c in run.pairs if c.op == "update"]
    assert updates and all(set(c.before) == set(c.primary_key) for c in updates)


@pytest.mark.parametrize("fmt, variant", [p for p in cases("shareplex-json") if not p.values[1].typed])
def test_shareplex_untyped_text_is_as_sent(fmt, variant):
    """Without ``column_types`` every column is text as SharePlex sent it; keys still come from
    configuration (inserts, deletes) and the ``key`` object (updates)."""
    run = round_trip(fmt, variant)
    assert all(c.column_types == {} for _, c in run.pairs)
    customers = run.state["shop.customers"]
    created = next(iter(customers.values()))["created_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}", created)
    assert len(customers) == len(run.source.final_state()["customers"])


@pytest.mark.parametrize("fmt, variant", cases("qlik-json", "qlik-avro"))
def test_qlik_metadata_versions_and_minimal_logging(fmt, variant):
    """Metadata stored across hours: two versions of orders; with minimal logging, updates
    without the unchanged columns."""
    run = round_trip(fmt, variant)
    assert sorted((e.source_table, e.table_version) for e in run.stored) == [
        ("customers", 1), ("orders", 1), ("orders", 2), ("products", 1)]
    if variant.minimal_logging:
        partial = [c for _, c in run.pairs if c.op == "update" and len(c.after) < len(c.column_types)]
        assert partial, "minimal logging must give updates without the unchanged columns"


@pytest.mark.parametrize("fmt, variant", cases("aws-dms-json"))
def test_aws_dms_control_records_load_rows_and_before_images(fmt, variant):
    """One ``create-table`` control record per table (a ``ddl`` control record); the bulk load as
    ``load`` rows (snapshot, no transaction details); CDC changes with ``transaction-id`` and
    ``transaction-record-id`` (tx_id, tx_seq from 1) and the commit time; updates' before images
    from the ``before-image`` field hold the key columns (``ColumnFilter`` ``pk-only``); no
    position (the Kafka order)."""
    run = round_trip(fmt, variant)
    controls = [r for _, r in run.results if isinstance(r, ControlRecord)]
    assert sorted((c.kind, c.source_table) for c in controls) == [
        ("ddl", t) for t in sorted(run.source.tables)]
    assert all(c.detail.startswith("create-table {") for c in controls)
    snapshots = [c for _, c in run.pairs if c.op == "snapshot"]
    assert len(snapshots) == sum(len(tx.changes) for tx in run.history if tx.snapshot) > 0
    assert all(c.tx_id is None and c.source_ts_ms is None for c in snapshots)
    live = [c for _, c in run.pairs if c.op != "snapshot"]
    assert live and all(c.tx_id is not None and c.tx_seq >= 1 and c.source_ts_ms for c in live)
    assert len({c.tx_id for c in live}) == sum(1 for tx in run.history if not tx.snapshot)
    updates = [c for c in live if c.op == "update"]
    assert updates and all(set(c.before) == set(c.primary_key) for c in updates)
    assert all(c.source_position == () for _, c in run.pairs)


@pytest.mark.parametrize("fmt, variant", cases("ogg-json"))
def test_ogg_trail_positions_and_partial_images(fmt, variant):
    """``pos`` (trail sequence number, then RBA) orders the changes as the history does, across
    trail files; updates carry the key and the changed columns only (compressed updates), deletes
    of orders only the key; every change keeps the transaction id."""
    run = round_trip(fmt, variant)
    sent = [json.loads(m.value)["pos"] for m in run.messages]  # in commit order
    positions = [(int(p),) for p in sent]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert {c.source_position for _, c in run.pairs} == set(positions)
    assert len({p[:10] for p in sent}) > 1, "the history spans trail files"
    updates = [c for _, c in run.pairs if c.op == "update"]
    assert updates and all(set(c.primary_key) <= set(c.after) for c in updates)
    assert any(len(c.after) < len(c.before) for c in updates)
    deletes = [c for _, c in run.pairs if c.op == "delete" and c.source_table == "orders"]
    assert deletes and all(set(c.before) == {"id"} for c in deletes)
    assert len({c.tx_id for _, c in run.pairs}) == len(run.history)
