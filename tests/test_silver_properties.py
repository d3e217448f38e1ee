"""Property-based tests of silver: random histories on random schemas, delivered badly, must end as the model says.

A history is a list of committed row changes (:class:`silver_model.Change`) on 1-2 random tables
(1-2 key columns of type int, bigint or string; 1-4 value columns of type bigint, string,
decimal(10,2) or timestamp): inserts, snapshot reads, full and partial updates, deletes, deletes
followed by a re-insert of the same key, key changes, truncates. Every change has a strictly
increasing MySQL binlog position ``(file, pos, row)``; the binlog file rolls over from
``mysql-bin.000009`` (large positions) to ``mysql-bin.000010`` (small positions again).

Each change is rendered as one Debezium MySQL JSON message (JsonConverter with the schema
envelope; Connect ``Decimal`` and ``io.debezium.time.Timestamp`` logical types), and delivered
over 1-3 Kafka partitions and 1-3 hours: in any order inside a partition's hour (the pipeline
orders by source position, so nothing relies on partition order), some messages twice (the same
bytes), some late (in a later hour than their commit), a Kafka tombstone after some deletes.
Kafka timestamps never decrease inside a partition, so each message lands in the hour it was put
in.

What a partial update is on this wire: the Debezium parser (``cdclake.formats.debezium``) keeps a
column missing from ``after`` out of the image (absent, not null), and turns the PostgreSQL TOAST
placeholder ``__debezium_unavailable_value`` into an absent column too. A partial update is
therefore rendered as an ``op: "u"`` message whose ``after`` leaves the unchanged columns out (or,
for string columns, carries the TOAST placeholder); a before image is full, key columns only, or
missing. Real MySQL connectors send full images; partial after images are what PostgreSQL TOAST
columns, Qlik Replicate's ``columnMask`` and SharePlex updates give the silver stage. (Canal JSON
could not carry them: its ``data`` rows are full, only ``old`` is partial.)

Properties:

- :func:`test_parsed_history_reaches_the_model` (no Spark, many examples): the rendered messages,
  parsed by the real parser and applied by ``tests/reference_model.py``, give the model's state.
  This pins the renderer, so that the slow properties below test silver only.
- :func:`test_full_images_any_delivery`: full images, late and duplicate messages, every op.
  Land and normalize run once over the whole range (a record lands in the hour of its Kafka
  timestamp whatever the window, so bronze is what hourly runs give); silver must equal the
  model after running silver hour by hour, and, in a second silver namespace on the same bronze,
  after running the hours in a random order followed by one run over the whole range.
- :func:`test_partial_updates_any_delivery` (with ``CDC_EXTENDED_PROPERTIES=1``): partial
  updates, late and duplicate messages: silver
  equals the model hour by hour, after a rerun of the whole range, and with the hours run in a
  random order then the whole range.

With ``partial``, key changes may have partial after images too: the new key's row takes the
other columns from the old row, also when a change of the old key lands after the key change was
merged (silver replays the chain of keys), and along chains of key changes.

Examples the properties found are kept as plain tests at the end of the file.

Hypothesis runs ``derandomize=True`` without its example database, and without the shrink phase
(each example runs Spark jobs for several seconds). To explore: ``CDC_PROPERTY_EXAMPLES=n`` runs
more examples, ``CDC_PROPERTY_SEED=n`` other ones, ``CDC_PROPERTY_SHRINK=1`` shrinks a failure.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Optional

import pytest
from conftest import write_pipeline
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from pipeline import all_rows, hour, ms
from silver_model import Change, Column, TableSchema, diff_table, final_state

from cdclake.sim.render import MYSQL_SOURCE_SCHEMA, Message, decimal_to_base64

DATABASE = "src"
SERVER = "prop"
PREFIX = "p_"
KEY_TYPES = ("int", "bigint", "string")
VALUE_TYPES = ("bigint", "string", "decimal(10,2)", "timestamp")
TOAST = "__debezium_unavailable_value"
EPOCH = dt.datetime(1970, 1, 1)

_PHASES = [Phase.explicit, Phase.generate] + ([Phase.shrink] if os.environ.get("CDC_PROPERTY_SHRINK") else [])
_SEED = os.environ.get("CDC_PROPERTY_SEED")
#: Examples per slow property: 3 in ``make test`` (the suite stays under 25 minutes), 8 with
#: ``CDC_EXTENDED_PROPERTIES=1``, or ``CDC_PROPERTY_EXAMPLES``.
_EXAMPLES = os.environ.get("CDC_PROPERTY_EXAMPLES", "8" if os.environ.get("CDC_EXTENDED_PROPERTIES") else "3")
SLOW = settings(max_examples=int(_EXAMPLES), deadline=None, derandomize=not _SEED,
                database=None, phases=_PHASES, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
FAST = settings(max_examples=300, deadline=None, derandomize=not _SEED, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: Properties whose examples take minutes each on two cores run with ``CDC_EXTENDED_PROPERTIES=1``.
EXTENDED = pytest.mark.skipif(not os.environ.get("CDC_EXTENDED_PROPERTIES"),
                              reason="set CDC_EXTENDED_PROPERTIES=1 (minutes per example)")
#: ``CDC_PROPERTY_SEED=n`` explores other examples than the fixed ones CI runs.
seeded = seed(int(_SEED)) if _SEED else (lambda f: f)


# ---------------------------------------------------------------------------------------------
# Scenarios: a history, how each change is rendered, and how the messages are delivered


@dataclass(frozen=True)
class Style:
    """How one change is rendered: its before image (``full``, ``key`` = key columns only with the
    others null, ``none``), absent string columns as the TOAST placeholder instead of left out, and
    a Kafka tombstone after a delete."""

    before: str = "full"
    toast: bool = False
    tombstone: bool = False


@dataclass(frozen=True)
class Send:
    """One delivery of change ``change``: Kafka partition, hour, and rank among that partition's
    messages of the hour (lower first). Two sends of one change are a duplicate (same bytes)."""

    change: int
    partition: int
    hour: int
    rank: int = 0


@dataclass(frozen=True)
class Scenario:
    schemas: tuple[TableSchema, ...]
    changes: tuple[Change, ...]
    styles: tuple[Style, ...]
    hours: int
    partitions: int
    sends: tuple[Send, ...]
    #: the order in which the hours are run one by one in the second pass (then the whole range)
    hour_order: tuple[int, ...] = ()

    @property
    def schema_map(self) -> dict[str, TableSchema]:
        return {s.name: s for s in self.schemas}

    def describe(self) -> str:
        """The scenario as readable lines (for failure messages)."""
        out = [f"hours={self.hours} partitions={self.partitions} hour_order={self.hour_order}"]
        for s in self.schemas:
            out.append(f"table {s.name}: key {[(c.name, c.ctype) for c in s.key]} values "
                       f"{[(c.name, c.ctype) for c in s.values]}")
        sends: dict[int, list[str]] = {}
        for d in self.sends:
            sends.setdefault(d.change, []).append(f"p{d.partition}@h{d.hour}#{d.rank}")
        for i, (c, style) in enumerate(zip(self.changes, self.styles)):
            img = {k: v for k, v in (c.after or c.before or {}).items()}
            out.append(f"  [{i}] {c.table} {c.op} pos={c.position} commit_h={(c.commit_ms - ms(hour(0))) // 3_600_000} "
                       f"before={c.before if c.op in ('update', 'delete') else None} image={img} style={style} "
                       f"sent={sends.get(i, [])}")
        return "\n".join(out)


def _ms_precision(t: dt.datetime) -> dt.datetime:
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def values(ctype: str) -> st.SearchStrategy:
    """Values of a column type (Python values as silver returns them)."""
    if ctype == "int":
        return st.integers(-2**31, 2**31 - 1)
    if ctype == "bigint":
        return st.integers(-2**63, 2**63 - 1)
    if ctype == "string":
        return st.text(st.characters(blacklist_categories=("Cs",)), max_size=6)
    if ctype == "decimal(10,2)":
        return st.decimals(min_value=Decimal("-99999999.99"), max_value=Decimal("99999999.99"), places=2)
    if ctype == "timestamp":
        return st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)).map(_ms_precision)
    raise ValueError(ctype)


def key_values(ctype: str) -> st.SearchStrategy:
    """Key values: mostly from a small pool (so keys come back), sometimes anything of the type."""
    pool = st.sampled_from(["a", "b", "A", "a ", "ü", ""]) if ctype == "string" else st.integers(0, 4)
    return st.one_of(pool, pool, pool, values(ctype))


#: Names that need quoting in SQL (spaces, dots, quotes, backticks, keywords, non-ASCII, leading digit).
COLUMN_NAMES = ("id", "Name", "order", "a b", "x.y", "it's", "b`t", "ünï", "2nd", "select", "C")
TABLE_NAMES = ("t0", "t1", "Orders", "order lines", "ü", "x.y")


@st.composite
def table_schemas(draw) -> tuple[TableSchema, ...]:
    """1-2 tables with 1-2 key and 1-4 value columns: plain names (``t0``, ``k0``, ``v0``) or names
    that need quoting."""
    out = []
    n = draw(st.integers(1, 2))
    exotic = draw(st.booleans())
    tables = draw(st.lists(st.sampled_from(TABLE_NAMES), min_size=n, max_size=n, unique_by=str.lower)) if exotic \
        else [f"t{i}" for i in range(n)]
    for name in tables:
        nk, nv = draw(st.integers(1, 2)), draw(st.integers(1, 4))
        cols = draw(st.lists(st.sampled_from(COLUMN_NAMES), min_size=nk + nv, max_size=nk + nv, unique_by=str.lower)) \
            if exotic else [f"k{i}" for i in range(nk)] + [f"v{i}" for i in range(nv)]
        key = tuple(Column(c, draw(st.sampled_from(KEY_TYPES))) for c in cols[:nk])
        vals = tuple(Column(c, draw(st.sampled_from(VALUE_TYPES))) for c in cols[nk:])
        out.append(TableSchema(name, key, vals))
    return tuple(out)


#: Op weights: drawn from this list (a truncate is rarer: it empties the table).
_OPS = ["insert"] * 4 + ["update"] * 5 + ["delete"] * 2 + ["reinsert"] * 2 + ["keychange"] * 2 + ["snapshot"] + ["truncate"] * 2


@st.composite
def histories(draw, schemas: tuple[TableSchema, ...], hours: int, partial: bool, max_changes: int = 40):
    """A valid history on ``schemas`` (changes in commit order) and the render style of each change.

    ``partial``: updates, key changes included, may leave value columns out of the after image.
    """
    n = draw(st.integers(min(4, max_changes), max_changes))
    state: dict[str, dict[tuple, dict]] = {s.name: {} for s in schemas}
    deleted: dict[str, list[tuple]] = {s.name: [] for s in schemas}
    commit_hours = sorted(draw(st.lists(st.integers(0, hours - 1), min_size=n, max_size=n)))
    file_no, pos, row = 9, draw(st.integers(4, 2**32)), 0
    switch_at = draw(st.integers(0, n))
    changes: list[Change] = []
    styles: list[Style] = []

    def new_row(schema: TableSchema, key: tuple) -> dict:
        r = dict(zip(schema.key_names, key))
        for c in schema.values:
            r[c.name] = draw(st.one_of(st.none(), values(c.ctype)))
        return r

    def fresh_key(schema: TableSchema, rows: dict) -> Optional[tuple]:
        for _ in range(3):
            k = tuple(draw(key_values(c.ctype)) for c in schema.key)
            if k not in rows:
                return k
        return None

    for i in range(n):
        if i == 0:
            pass
        elif i == switch_at:
            file_no, pos, row = 10, draw(st.integers(4, 1000)), 0
        elif draw(st.integers(0, 3)) == 0:
            row += 1
        else:
            pos, row = pos + draw(st.integers(1, 10**6)), 0
        position = (file_no, pos, row)
        commit_ms = ms(hour(commit_hours[i])) + 60_000 + i * 1_000
        schema = draw(st.sampled_from(schemas))
        rows = state[schema.name]
        op = draw(st.sampled_from(_OPS))
        key = None
        if op in ("update", "delete", "keychange") and not rows:
            op = "insert"
        if op == "reinsert":
            back = [k for k in deleted[schema.name] if k not in rows]
            op, key = "insert", (draw(st.sampled_from(back)) if back else None)
        if op in ("insert", "snapshot") and key is None:
            key = fresh_key(schema, rows)
            if key is None:
                op = "update"
        if op == "truncate":
            change = Change(schema.name, "truncate", position, commit_ms)
            for k in rows:
                deleted[schema.name].append(k)
            rows.clear()
            style = Style()
        elif op in ("insert", "snapshot"):
            after = new_row(schema, key)
            change = Change(schema.name, op, position, commit_ms, None, after)
            rows[key] = dict(after)
            style = Style()
        elif op == "delete":
            key = draw(st.sampled_from(sorted(rows, key=repr)))
            change = Change(schema.name, "delete", position, commit_ms, dict(rows.pop(key)), None)
            deleted[schema.name].append(key)
            style = Style(before=draw(st.sampled_from(["full", "key", "none"])), tombstone=draw(st.booleans()))
        else:
            key = draw(st.sampled_from(sorted(rows, key=repr)))
            before = rows[key]
            new_key = key
            if op == "keychange":
                pool = [k for k in deleted[schema.name] if k not in rows]
                new_key = draw(st.sampled_from(pool)) if pool and draw(st.booleans()) else fresh_key(schema, rows)
                if new_key is None:
                    new_key = key
            after = dict(zip(schema.key_names, new_key))
            cols = list(schema.values)
            if partial:
                cols = [c for c in cols if draw(st.booleans())]
            for c in cols:
                after[c.name] = draw(st.one_of(st.just(before[c.name]), st.none(), values(c.ctype)))
            change = Change(schema.name, "update", position, commit_ms, dict(before), after)
            del rows[key]
            if new_key != key:
                deleted[schema.name].append(key)
            rows[new_key] = {**before, **after}
            choices = ["full", "key"] if new_key != key else ["full", "key", "none"]
            style = Style(before=draw(st.sampled_from(choices)), toast=draw(st.booleans()))
        changes.append(change)
        styles.append(style)
    return tuple(changes), tuple(styles)


@st.composite
def scenarios(draw, partial: bool, late: bool, max_changes: int = 40) -> Scenario:
    """A random scenario: schemas, history, render styles and delivery.

    ``late``: a message may be delivered in any hour from its commit hour on (also after a newer
    truncate of its table); otherwise in its commit hour. Duplicates follow the same rule.
    """
    schemas = draw(table_schemas())
    hours = draw(st.sampled_from((2, 3, 1, 2, 3)))  # mostly more than one hour: lateness needs two
    parts = draw(st.integers(1, 3))
    changes, styles = draw(histories(schemas, hours, partial, max_changes))

    def commit_hour(c: Change) -> int:
        return (c.commit_ms - ms(hour(0))) // 3_600_000

    sends = []
    for i, c in enumerate(changes):
        h0 = commit_hour(c)
        last = hours - 1 if late else h0
        for _ in range(1 + (draw(st.integers(0, 4)) == 0)):
            h = draw(st.integers(h0, last))
            sends.append(Send(i, draw(st.integers(0, parts - 1)), h, draw(st.integers(0, 1000))))
    order = tuple(draw(st.permutations(range(hours))))
    return Scenario(schemas, changes, styles, hours, parts, tuple(sends), order)


# ---------------------------------------------------------------------------------------------
# Rendering: Debezium MySQL JSON with the schema envelope


def _connect_field(col: Column) -> dict:
    if col.ctype == "int":
        f: dict = {"type": "int32", "optional": True}
    elif col.ctype == "bigint":
        f = {"type": "int64", "optional": True}
    elif col.ctype == "timestamp":
        f = {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp", "version": 1}
    elif col.ctype.startswith("decimal"):
        f = {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
             "parameters": {"scale": "2", "connect.decimal.precision": "10"}}
    else:
        f = {"type": "string", "optional": True}
    return {**f, "field": col.name}


def _json_value(col: Column, value: object) -> object:
    if value is None:
        return None
    if col.ctype.startswith("decimal"):
        return decimal_to_base64(value, 2)
    if col.ctype == "timestamp":
        return (value - EPOCH) // dt.timedelta(milliseconds=1)
    return value


_SOURCE_FIELDS = MYSQL_SOURCE_SCHEMA["fields"]


def _dumps(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def render(schema: TableSchema, change: Change, style: Style) -> tuple[Optional[bytes], bytes]:
    """``(Kafka key, value)`` of one change as the Debezium MySQL connector would send it."""
    prefix = f"{SERVER}.{DATABASE}.{schema.name}"
    row_schema = {"type": "struct", "fields": [_connect_field(c) for c in schema.columns], "optional": True,
                  "name": f"{prefix}.Value"}
    value_schema = {"type": "struct", "optional": False, "name": f"{prefix}.Envelope", "fields": [
        dict(row_schema, field="before"), dict(row_schema, field="after"),
        {"type": "struct", "fields": _SOURCE_FIELDS, "optional": False, "name": "io.debezium.connector.mysql.Source",
         "field": "source"},
        {"type": "string", "optional": False, "field": "op"}, {"type": "int64", "optional": True, "field": "ts_ms"}]}
    file_no, pos, row = change.position
    source = {"version": "2.5.0.Final", "connector": "mysql", "name": SERVER, "ts_ms": change.commit_ms,
              "snapshot": "true" if change.op == "snapshot" else "false", "db": DATABASE, "table": schema.name,
              "server_id": 223344, "gtid": None, "file": f"mysql-bin.{file_no:06d}", "pos": pos, "row": row,
              "thread": 7, "query": None}

    def image(img: Optional[dict], kind: str) -> Optional[dict]:
        if img is None or kind == "none":
            return None
        if kind == "key":
            return {c.name: (_json_value(c, img[c.name]) if c in schema.key else None) for c in schema.columns}
        out = {}
        for c in schema.columns:
            if c.name in img:
                out[c.name] = _json_value(c, img[c.name])
            elif style.toast and c.ctype == "string":
                out[c.name] = TOAST
        return out

    op = {"insert": "c", "snapshot": "r", "update": "u", "delete": "d", "truncate": "t"}[change.op]
    before = image(change.before, style.before) if change.op in ("update", "delete") else None
    after = image(change.after, "full") if change.op in ("insert", "snapshot", "update") else None
    payload = {"before": before, "after": after, "source": source, "op": op, "ts_ms": change.commit_ms + 20}
    value = _dumps({"schema": value_schema, "payload": payload})
    if change.op == "truncate":
        return None, value
    key_image = change.after if change.op != "delete" else change.before
    key_schema = {"type": "struct", "optional": False, "name": f"{prefix}.Key",
                  "fields": [_connect_field(c) for c in schema.key]}
    key = _dumps({"schema": key_schema, "payload": {c.name: _json_value(c, key_image[c.name]) for c in schema.key}})
    return key, value


def messages(sc: Scenario) -> list[Message]:
    """Every Kafka message of the scenario, in produce order (timestamps increase per partition)."""
    schemas = sc.schema_map
    slots: dict[tuple[int, int], list[tuple[int, int, list[tuple[Optional[bytes], Optional[bytes]]]]]] = {}
    for n, s in enumerate(sc.sends):
        change, style = sc.changes[s.change], sc.styles[s.change]
        key, value = render(schemas[change.table], change, style)
        recs = [(key, value)] + ([(key, None)] if change.op == "delete" and style.tombstone else [])
        slots.setdefault((s.partition, s.hour), []).append((s.rank, n, recs))
    out = []
    for (part, h), items in slots.items():
        i = 0
        for _, _, recs in sorted(items, key=lambda x: (x[0], x[1])):
            for key, value in recs:
                i += 1
                out.append(Message(key, value, ms(hour(h)) + 1_000 * i + part, part))
    return sorted(out, key=lambda m: (m.timestamp_ms, m.partition))


def model_state(sc: Scenario) -> dict:
    return final_state(sc.changes, sc.schema_map)


# ---------------------------------------------------------------------------------------------
# Running the pipeline


def _silver_rows(spark, namespace: str, table: str) -> list[dict]:
    """The rows of a silver table without ``_cdc_*`` columns (soft-delete mode: the live rows)."""
    from cdclake.types import quote_ident

    name = f"lake.{quote_ident(namespace)}.{quote_ident(PREFIX + DATABASE + '__' + table)}"
    if not spark.catalog.tableExists(name):
        return []
    return [{k: v for k, v in r.asDict().items() if not k.startswith("_cdc_")} for r in spark.table(name).collect()
            if not r.asDict().get("_cdc_deleted")]


def _all_rows(spark, namespace: str, table: str) -> list:
    from cdclake.types import quote_ident

    return all_rows(spark, f"lake.{quote_ident(namespace)}.{quote_ident(PREFIX + DATABASE + '__' + table)}")


def check_silver(spark, sc: Scenario, namespace: str, what: str) -> None:
    expected = model_state(sc)
    problems = []
    for s in sc.schemas:
        diffs = diff_table(expected[s.name], _silver_rows(spark, namespace, s.name), s)
        problems += [f"{s.name}: {d}" for d in diffs]
    assert not problems, f"{what}: silver differs from the model:\n" + "\n".join(problems) + "\n" + sc.describe()


def run_scenario(stack, spark, sc: Scenario, shuffled_pass: bool = True, rerun_whole: bool = False,
                 delete_mode: str = "hard", both_paths: bool = False) -> None:
    """Produce the scenario's messages to a new topic and check silver against the model.

    Land and normalize run once over the whole range (each record lands in the hour of its Kafka
    timestamp whatever the window, so bronze is the same as after hourly runs). Pass 1 runs silver
    hour by hour, in order, small batches merged at the file level (the default) in Spark tasks
    (``silver.file_merge_task_tables`` 1; what needs the driver falls back to it). With
    ``both_paths``, the same hours run through Spark's MERGE alone into a third namespace, and
    through the file level with position deletes instead of rewrites into a fourth, whose tables
    must equal pass 1's, every metadata column included. Pass 2 (``shuffled_pass``) runs
    silver into a second namespace over the same bronze hours in ``sc.hour_order``, then over the
    whole range, with Spark's MERGE alone. ``rerun_whole`` runs pass
    1's whole range once more at the end. ``delete_mode``: the pipelines' ``silver.delete_mode``.
    """
    from cdclake.config import load_pipeline
    from cdclake.land import land
    from cdclake.normalize import normalize
    from cdclake.silver import build_silver
    from cdclake.sim import create_topic, produce
    from cdclake.window import Window

    u = uuid.uuid4().hex[:10]
    topic = f"prop.{u}"
    create_topic(stack["bootstrap"], topic, sc.partitions)
    produce(stack["bootstrap"], topic, messages(sc))
    source = [{"topic": topic, "format": "debezium-json", "table_prefix": PREFIX}]
    # file level, in Spark tasks from the first table on (tables to create, or first tombstones: the driver)
    first = load_pipeline(write_pipeline(f"prop_{u}_a", source, silver={
        "namespace": f"prop_{u}_a", "delete_mode": delete_mode, "file_merge_task_tables": 1}))
    whole = Window(hour(0), hour(sc.hours))
    landed = land(spark, first, whole)
    assert landed[topic] == len(messages(sc))
    stats = normalize(spark, first, whole)
    assert stats[topic]["quarantined"] == 0, f"records quarantined\n{sc.describe()}"
    for h in range(sc.hours):
        build_silver(spark, first, Window(hour(h), hour(h + 1)))
    check_silver(spark, sc, f"prop_{u}_a", "hour by hour")
    if both_paths:  # the same batches through Spark's MERGE only: equal tables, metadata columns included
        spark_only = load_pipeline(write_pipeline(f"prop_{u}_c", source, silver={
            "namespace": f"prop_{u}_c", "delete_mode": delete_mode, "file_merge_max_changes": 0}))
        for h in range(sc.hours):
            build_silver(spark, spark_only, Window(hour(h), hour(h + 1)))
        deltas = load_pipeline(write_pipeline(f"prop_{u}_d", source, silver={  # position deletes, no rewrite
            "namespace": f"prop_{u}_d", "delete_mode": delete_mode, "file_rewrite_max_rows": 0}))
        for h in range(sc.hours):
            build_silver(spark, deltas, Window(hour(h), hour(h + 1)))
        for s in sc.schemas:
            a, c, d = (_all_rows(spark, f"prop_{u}_{x}", s.name) for x in "acd")
            assert a == c, f"{s.name}: the file-level rewrite and Spark's MERGE differ\n{a}\n{c}\n{sc.describe()}"
            assert d == c, f"{s.name}: the file-level row delta and Spark's MERGE differ\n{d}\n{c}\n{sc.describe()}"
    if rerun_whole:
        build_silver(spark, first, whole)
        check_silver(spark, sc, f"prop_{u}_a", "hour by hour, then the whole range again")
    if shuffled_pass and sc.hours == 1:  # a second pass would only rerun the one hour
        build_silver(spark, first, whole)
        check_silver(spark, sc, f"prop_{u}_a", "the hour, then the hour again")
    elif shuffled_pass:
        second = load_pipeline(write_pipeline(f"prop_{u}_b", source, silver={
            "namespace": f"prop_{u}_b", "delete_mode": delete_mode, "file_merge_max_changes": 0}))
        for h in sc.hour_order:
            build_silver(spark, second, Window(hour(h), hour(h + 1)))
        build_silver(spark, second, whole)
        check_silver(spark, sc, f"prop_{u}_b", f"hours in the order {sc.hour_order}, then the whole range")


# ---------------------------------------------------------------------------------------------
# Properties


def _text_state(sc: Scenario) -> dict:
    """The model's state in canonical bronze text (what ``reference_model`` computes)."""
    from cdclake.formats.text import pad_scale
    from cdclake.types import to_text

    out = {}
    for s in sc.schemas:
        types = {c.name: c.ctype for c in s.columns}
        table = {}
        for row in model_state(sc)[s.name].values():
            text = {c: (to_text(pad_scale(v, types[c])) if isinstance(v, Decimal) else to_text(v)) for c, v in row.items()}
            table[tuple(text[k] for k in s.key_names)] = text
        out[f"{DATABASE}.{s.name}"] = table
    return out


@FAST
@seeded
@given(sc=scenarios(partial=True, late=True))
def test_parsed_history_reaches_the_model(sc: Scenario):
    """Rendered messages parsed by the real Debezium parser reach the model's state (reference_model)."""
    import reference_model

    from cdclake.formats import get_parser
    from cdclake.record import KafkaRecord, parse_all

    parser = get_parser("debezium-json")
    offsets: dict[int, int] = {}
    records = []
    for m in messages(sc):
        off = offsets[m.partition] = offsets.get(m.partition, -1) + 1
        records.append(KafkaRecord("t", m.partition, off, m.timestamp_ms, m.key, m.value))
    state = reference_model.apply_changes(reference_model.changes(parse_all(parser, records)))
    expected = _text_state(sc)
    got = {t: {k: {c: v for c, v in row.items()} for k, row in rows.items()} for t, rows in state.items()}
    for t, rows in expected.items():
        got_rows = got.get(t, {})
        assert {k: {c: v for c, v in r.items() if v is not None} for k, r in rows.items()} == \
               {k: {c: v for c, v in r.items() if v is not None} for k, r in got_rows.items()}, sc.describe()


@SLOW
@seeded
@given(sc=scenarios(partial=False, late=True))
def test_full_images_any_delivery(stack, spark, sc: Scenario):
    """Full images, late and duplicate messages, every op: silver equals the model whatever the hour
    order, and the file-level merge gives the tables Spark's MERGE gives."""
    run_scenario(stack, spark, sc, both_paths=True)


@EXTENDED
@SLOW
@seeded
@given(sc=scenarios(partial=True, late=True))
def test_partial_updates_any_delivery(stack, spark, sc: Scenario):
    """Partial updates and partial key changes, late and duplicate messages, every op: silver equals
    the model hour by hour, after a whole-range rerun, and whatever the hour order."""
    run_scenario(stack, spark, sc, rerun_whole=True, both_paths=True)


# ---------------------------------------------------------------------------------------------
# Examples found by the properties, kept as plain tests

T0 = TableSchema("t0", (Column("k0", "bigint"),), (Column("v0", "string"), Column("v1", "bigint")))


def handmade(changes: list[tuple], sends: list[tuple], hours: int, styles: Optional[list[Style]] = None,
             hour_order: tuple[int, ...] = (), partitions: int = 1) -> Scenario:
    """A scenario on table ``T0`` from ``(op, binlog pos, commit hour, before, after)`` changes (file
    ``mysql-bin.000009``, row 0) and ``(change index, partition, hour)`` sends (rank = list order)."""
    made = tuple(Change(T0.name, op, (9, pos, 0), ms(hour(h)) + 60_000 + i * 1_000, before, after)
                 for i, (op, pos, h, before, after) in enumerate(changes))
    return Scenario((T0,), made, tuple(styles or [Style()] * len(made)), hours, partitions,
                    tuple(Send(c, p, h, rank) for rank, (c, p, h) in enumerate(sends)), hour_order or tuple(range(hours)))


def test_late_insert_after_truncate_is_not_resurrected(stack, spark):
    """Insert k0=1 (pos 100), then TRUNCATE (pos 200), both committed in hour 0; the insert's message
    is late and lands in hour 1. The table must end empty: the insert is older than the truncate."""
    sc = handmade([("insert", 100, 0, None, {"k0": 1, "v0": "a", "v1": 1}),
                   ("truncate", 200, 0, None, None)],
                  sends=[(1, 0, 0), (0, 0, 1)], hours=2)
    assert model_state(sc) == {"t0": {}}
    run_scenario(stack, spark, sc, shuffled_pass=False)


def test_key_change_with_partial_after_image_keeps_the_other_columns(stack, spark):
    """k0=1 is inserted (hour 0); an update moves it to k0=2 with after = {k0, v0} and a before image
    of the key only (hour 1). The row under k0=2 keeps v1 from the old row, as the source does."""
    sc = handmade([("insert", 100, 0, None, {"k0": 1, "v0": "a", "v1": 7}),
                   ("update", 200, 1, {"k0": 1, "v0": "a", "v1": 7}, {"k0": 2, "v0": "b"})],
                  sends=[(0, 0, 0), (1, 0, 1)], hours=2, styles=[Style(), Style(before="key")])
    assert model_state(sc) == {"t0": {(2,): {"k0": 2, "v0": "b", "v1": 7}}}
    run_scenario(stack, spark, sc)


def test_key_change_delivered_again_in_a_later_hour_keeps_the_carried_columns(stack, spark):
    """The partial key change k0=1 -> 2 is delivered in hour 1 and again, on another partition, in
    hour 2. The second copy is the same change: it must not reset the row under k0=2 to its own
    partial image (v1 carried from the old row stays)."""
    sc = handmade([("insert", 100, 0, None, {"k0": 1, "v0": "a", "v1": 7}),
                   ("update", 200, 1, {"k0": 1, "v0": "a", "v1": 7}, {"k0": 2, "v0": "b"})],
                  sends=[(0, 0, 0), (1, 0, 1), (1, 1, 2)], hours=3, styles=[Style(), Style(before="key")],
                  partitions=2)
    assert model_state(sc) == {"t0": {(2,): {"k0": 2, "v0": "b", "v1": 7}}}
    run_scenario(stack, spark, sc)


def test_late_partial_update_sets_its_column_under_a_newer_one(stack, spark):
    """Insert (pos 100), partial update of v0 (pos 200) delivered an hour late, partial update of v1
    (pos 300): the row ends with both updates; the late one is not dropped for being older than the row."""
    sc = handmade([("insert", 100, 0, None, {"k0": 1, "v0": "a", "v1": 1}),
                   ("update", 200, 0, {"k0": 1, "v0": "a", "v1": 1}, {"k0": 1, "v0": "b"}),
                   ("update", 300, 0, {"k0": 1, "v0": "b", "v1": 1}, {"k0": 1, "v1": 2})],
                  sends=[(0, 0, 0), (2, 0, 0), (1, 0, 1)], hours=2)
    assert model_state(sc) == {"t0": {(1,): {"k0": 1, "v0": "b", "v1": 2}}}
    run_scenario(stack, spark, sc)


def test_late_insert_under_newer_partial_update(stack, spark):
    """The insert (pos 100) arrives an hour after a partial update of v0 (pos 200): silver first holds
    the update alone, then the insert fills v1 but not v0."""
    sc = handmade([("insert", 100, 0, None, {"k0": 1, "v0": "a", "v1": 1}),
                   ("update", 200, 0, {"k0": 1, "v0": "a", "v1": 1}, {"k0": 1, "v0": "b"})],
                  sends=[(1, 0, 0), (0, 0, 1)], hours=2)
    assert model_state(sc) == {"t0": {(1,): {"k0": 1, "v0": "b", "v1": 1}}}
    run_scenario(stack, spark, sc)


@pytest.mark.parametrize("delete_mode", ["hard", pytest.param("soft", marks=pytest.mark.extended)])  # soft: make test-extended
def test_change_of_the_old_key_arriving_after_the_key_change_was_merged_reaches_the_new_key(stack, spark,
                                                                                           delete_mode):
    """Partial update of v1 on k0=1 (pos 150) is delivered an hour late, after the partial key change
    k0=1 -> 2 (pos 200) was merged: the row under k0=2 ends with v1 = 5, as in the source. In
    soft-delete mode the old key's row is flagged, not deleted, and the late change still gets there."""
    sc = handmade([("insert", 100, 0, None, {"k0": 1, "v0": "a", "v1": 1}),
                   ("update", 150, 0, {"k0": 1, "v0": "a", "v1": 1}, {"k0": 1, "v1": 5}),
                   ("update", 200, 0, {"k0": 1, "v0": "a", "v1": 5}, {"k0": 2, "v0": "b"})],
                  sends=[(0, 0, 0), (2, 0, 0), (1, 0, 1)], hours=2,
                  styles=[Style(), Style(before="key"), Style(before="key")])
    assert model_state(sc) == {"t0": {(2,): {"k0": 2, "v0": "b", "v1": 5}}}
    if delete_mode == "hard":
        run_scenario(stack, spark, sc)
    else:
        run_scenario(stack, spark, sc, shuffled_pass=False, rerun_whole=True, delete_mode="soft")


def test_chain_of_partial_key_changes_in_one_hour_carries_the_first_row(stack, spark):
    """k0=1 -> 2 (pos 200) then 2 -> 3 (pos 300), both partial, in the hour of the insert: the row
    under k0=3 keeps v1 from the insert through both moves."""
    sc = handmade([("insert", 100, 0, None, {"k0": 1, "v0": "a", "v1": 1}),
                   ("update", 200, 0, {"k0": 1, "v0": "a", "v1": 1}, {"k0": 2, "v0": "b"}),
                   ("update", 300, 0, {"k0": 2, "v0": "b", "v1": 1}, {"k0": 3, "v0": "c"})],
                  sends=[(0, 0, 0), (2, 0, 0), (1, 0, 0)], hours=1,
                  styles=[Style(), Style(before="key"), Style(before="key")])
    assert model_state(sc) == {"t0": {(3,): {"k0": 3, "v0": "c", "v1": 1}}}
    run_scenario(stack, spark, sc)


def test_late_change_of_the_first_key_follows_a_chain_of_merged_key_changes(stack, spark):
    """k0=1 -> 2 -> 3 (partial key changes at pos 200 and 300, merged in hour 0); a partial update of
    v1 on k0=1 at pos 150 lands in hour 1 and must reach k0=3; one on k0=2 at pos 250 lands in
    hour 2 and wins over it."""
    sc = handmade([("insert", 100, 0, None, {"k0": 1, "v0": "a", "v1": 1}),
                   ("update", 150, 0, {"k0": 1, "v0": "a", "v1": 1}, {"k0": 1, "v1": 5}),
                   ("update", 200, 0, {"k0": 1, "v0": "a", "v1": 5}, {"k0": 2, "v0": "b"}),
                   ("update", 250, 0, {"k0": 2, "v0": "b", "v1": 5}, {"k0": 2, "v1": 6}),
                   ("update", 300, 0, {"k0": 2, "v0": "b", "v1": 6}, {"k0": 3, "v0": "c"})],
                  sends=[(0, 0, 0), (2, 0, 0), (4, 0, 0), (1, 0, 1), (3, 0, 2)], hours=3,
                  styles=[Style(), Style(before="key"), Style(before="key"), Style(before="key"),
                          Style(before="key")])
    assert model_state(sc) == {"t0": {(3,): {"k0": 3, "v0": "c", "v1": 6}}}
    run_scenario(stack, spark, sc, shuffled_pass=False, rerun_whole=True)
