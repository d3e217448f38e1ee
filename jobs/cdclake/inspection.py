"""``python -m cdclake inspect --topic T``: what a topic holds, and a pipeline file that reads it.

Reads up to ``--sample`` records from the start of each partition of each topic (confluent-kafka,
assigned reads, nothing committed), detects each record's format
(:func:`cdclake.formats.detect.detect`), parses the records with the detected format's parser and
prints, as YAML comments: the records read per partition (first and last offsets), the count per
detected format (``unknown`` with the first reasons, ``tombstone``), the tables with their change
counts by operation, primary keys (as carried, or as found), column types (as carried, and the
type each value shows), the first and last source positions seen; then a pipeline file (the shape
of :mod:`cdclake.config`) whose ``sources`` read the topics. The whole output is a pipeline file:
``python -m cdclake inspect --topic T > config/pipelines/t.yaml``.

What the format does not carry is filled in from the messages, with a comment saying it is a guess
to confirm:

- ``primary_keys`` where records fail for want of a key (SharePlex inserts, AWS DMS): the keys
  other records of the topic carry (SharePlex update keys), else the ``primary-key`` of the
  AWS DMS ``create-table`` control messages;
- ``before_image_field`` (AWS DMS) when updates carry a before image under a field the parser
  names;
- ``column_types`` for columns without a carried type (SharePlex, Maxwell, GoldenGate, AWS DMS)
  and for columns whose carried type is coarser than their values (CDL's decimals as ``string``,
  DataWorks' ``DOUBLE``/``DATE``, DTS's decimal precision per value): the type the values show
  (:func:`guess_type`: integers, fixed-scale decimals, doubles, dates, timestamps, Base64 or
  ``0x`` hex binaries, booleans, else string). A decimal's precision is a guess (38);
- ``without_position: kafka-order`` (the default, written out) for a ``maxwell-json`` topic
  whose rows carry no ``position`` (Maxwell's ``output_binlog_position`` is off by default),
  with a comment saying why their Kafka order is binlog order: Maxwell's default
  ``producer_partition_by=database`` keeps each key in one partition, in binlog order (silver
  fails naming a key where it does not).

The report says how many changes (snapshot rows left out) carry no source position, per format.

A topic whose records are in several formats gets ``format: auto``. ``--pipeline P`` takes the
``kafka``, ``catalog`` and ``silver`` sections (as written, ``${VAR}`` kept) and the source's
options from P; without it the embedded stack's are printed. Exit codes: 0 done; 2 bad arguments
or pipeline file; 1 Kafka unreachable, a topic missing or no record recognised.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from cdclake.config import load_pipeline, stack_value, state_dir
from cdclake.errors import ConfigError, KafkaUnavailable
from cdclake.formats import format_named, get_parser
from cdclake.formats.detect import detect
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, SchemaAwareParser
from cdclake.types import guess_type, raw_numbers

DEFAULT_SAMPLE = 1000

@dataclass
class TableSeen:
    """What the sample shows of one table."""

    database: Optional[str]
    schema: Optional[str]
    table: str
    ops: Counter = field(default_factory=Counter)
    keys: Counter = field(default_factory=Counter)
    types: dict = field(default_factory=dict)   # column → Counter of carried types
    values: dict = field(default_factory=dict)  # column → list of non-null texts (first 500)
    raw: dict = field(default_factory=dict)     # column → numbers as the messages write them (first 500)
    nulls: Counter = field(default_factory=Counter)

    @property
    def name(self) -> str:
        return ".".join(p for p in (self.database, self.schema, self.table) if p)

    def add(self, c: ChangeRecord, raw: dict) -> None:
        self.ops[c.op] += 1
        self.keys[tuple(c.primary_key or ())] += 1
        for image in (c.before, c.after):
            for col, v in (image or {}).items():
                self.types.setdefault(col, Counter())
                if v is None:
                    self.nulls[col] += 1
                elif len(self.values.setdefault(col, [])) < 500:
                    self.values[col].append(v)
                    if col in raw and len(self.raw.setdefault(col, [])) < 500:
                        self.raw[col] += raw[col]
        for col, t in (c.column_types or {}).items():
            self.types.setdefault(col, Counter())[t] += 1


@dataclass
class TopicSeen:
    """What the sample of one topic shows (see the module docstring)."""

    topic: str
    offsets: dict = field(default_factory=dict)    # partition → (first, last, count)
    formats: Counter = field(default_factory=Counter)
    unknown: list = field(default_factory=list)
    format: Optional[str] = None
    options: dict = field(default_factory=dict)
    guessed_keys: dict = field(default_factory=dict)   # table → (columns, why)
    tables: dict = field(default_factory=dict)
    controls: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    positions: list = field(default_factory=list)
    changes: Counter = field(default_factory=Counter)        # format → changes (snapshot rows left out)
    without_position: Counter = field(default_factory=Counter)  # format → those without a source position
    proposed: dict = field(default_factory=dict)             # option → comment lines (set by inspect)


def sample(bootstrap: str, topic: str, n: int, client: Optional[dict] = None,
           timeout_s: float = 10.0) -> list[KafkaRecord]:
    """Up to ``n`` records from the start of each partition of ``topic``, in offset order per
    partition. Raises :class:`KafkaUnavailable` (broker unreachable, topic missing, no progress)."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    from cdclake.kafka_ranges import consumer, partitions

    out: list[KafkaRecord] = []
    for _, part in partitions(bootstrap, [topic], timeout_s, client):
        cons = consumer(bootstrap, client)
        try:
            cons.assign([TopicPartition(topic, part, OFFSET_BEGINNING)])
            got, idle = 0, time.monotonic()
            while got < n:
                msgs = cons.consume(num_messages=min(1000, n - got), timeout=0.2)
                if not msgs:
                    if time.monotonic() - idle > timeout_s:
                        raise KafkaUnavailable(f"{topic}[{part}]: nothing read for {timeout_s:.0f}s")
                    continue
                idle = time.monotonic()
                eof = False
                for m in msgs:
                    if m.error() is not None:
                        if m.error().code() == KafkaError._PARTITION_EOF:
                            eof = True
                            break
                        raise KafkaUnavailable(f"{topic}[{part}]: {m.error().str()}")
                    out.append(KafkaRecord(m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(),
                                           tuple(m.headers() or ())))
                    got += 1
                    if got >= n:
                        break
                if eof:
                    break
        finally:
            cons.close()
    return out


def _parse(fmt: str, options: dict, records: list[KafkaRecord]) -> list:
    parser = get_parser(fmt, options)
    if isinstance(parser, SchemaAwareParser):
        parser = parser.with_schemas([e for r in records for e in parser.schema_entries(r)])
    out = []
    for r in records:
        try:
            out.append((r, parser.parse(r)))
        except ParseError as exc:
            out.append((r, exc))
        except Exception as exc:  # noqa: BLE001  (normalize quarantines it too: report it, do not stop)
            out.append((r, ParseError(fmt, f"{type(exc).__name__}: {exc}", "value")))
    return out


def _dms_keys(records: list[KafkaRecord]) -> dict:
    """``{table: [key columns]}`` of the AWS DMS ``create-table`` control messages' ``table-def``."""
    import json

    keys = {}
    for r in records:
        try:
            msg = json.loads(r.value)
            keys[msg["metadata"]["table-name"]] = list(msg["control"]["table-def"]["primary-key"])
        except Exception:  # noqa: BLE001  (not such a message)
            continue
    return {t: k for t, k in keys.items() if k and all(isinstance(c, str) for c in k)}


#: The comment on the ``without_position: kafka-order`` inspect writes out for Maxwell rows without
#: ``position``.
MAXWELL_KAFKA_ORDER = (
    "the maxwell-json rows carry no position (Maxwell's output_binlog_position is off by default):",
    "they are ordered by Kafka partition and offset, which is binlog order while each key's changes",
    "reach one partition, as Maxwell's default producer_partition_by=database (or table, primary_key)",
    "keeps them; under random or column partitioning silver fails naming a key: confirm")

#: The formats whose values name a schema in a schema registry (Confluent's wire format).
REGISTRY_FORMATS = ("debezium-avro", "debezium-jsonschema")


def inspect_records(topic: str, records: list[KafkaRecord], options: Optional[dict] = None,
                    registry: Optional[str] = None) -> TopicSeen:
    """Detect and parse ``records`` of ``topic`` (see the module docstring); ``options``: the
    source's configured options (parser options), kept in what is printed; ``registry``: the
    schema registry's URL, put in the options (and printed) for a topic of a registry format that
    configures none."""
    seen = TopicSeen(topic)
    for r in records:
        first, last, count = seen.offsets.get(r.partition, (r.offset, r.offset, 0))
        seen.offsets[r.partition] = (min(first, r.offset), max(last, r.offset), count + 1)
        if not r.value:
            seen.formats["tombstone"] += 1
            continue
        try:
            seen.formats[detect(r.value)] += 1
        except ParseError as exc:
            seen.formats["unknown"] += 1
            if len(seen.unknown) < 3:
                seen.unknown.append(f"{r.partition}@{r.offset}: {exc}")
    found = [f for f in seen.formats if f not in ("tombstone", "unknown")]
    if not found:
        return seen
    seen.format = found[0] if len(found) == 1 else "auto"
    opts = dict(options or {})
    if registry and "schema_registry" not in opts and any(f in REGISTRY_FORMATS for f in found):
        opts["schema_registry"] = {"url": registry}
    results = _parse(seen.format, opts, records)
    errors = [e for _, e in results if isinstance(e, ParseError)]
    for e in errors:
        if e.field and "BeforeImageSettings" in str(e) and "before_image_field" not in opts:
            opts["before_image_field"] = e.field
    if any(e.field == "primary_key" for e in errors) and not opts.get("primary_key"):
        keys = {c.source_table: (list(c.primary_key), "the key other records of the table carry")
                for _, res in results if isinstance(res, list) for c in res if c.primary_key}
        for table, cols in _dms_keys(records).items():
            keys.setdefault(table, (cols, "the primary-key of the create-table control message"))
        configured = opts.get("primary_keys") or {}
        seen.guessed_keys = {t: v for t, v in keys.items() if t not in configured}
        opts["primary_keys"] = {**{t: cols for t, (cols, _) in seen.guessed_keys.items()}, **configured}
    if opts != dict(options or {}):
        results = _parse(seen.format, opts, records)
    seen.options = opts
    for r, res in results:
        if isinstance(res, ParseError):
            seen.errors[str(res)[:200]] += 1
        elif isinstance(res, ControlRecord):
            seen.controls[res.kind] += 1
        else:
            raw = raw_numbers(r.value)
            for c in res:
                key = (c.source_database, c.source_schema, c.source_table)
                seen.tables.setdefault(key, TableSeen(*key)).add(c, raw)
                if c.source_position:
                    seen.positions.append(tuple(c.source_position))
                if c.op != "snapshot":
                    seen.changes[c.source_format] += 1
                    if not c.source_position:
                        seen.without_position[c.source_format] += 1
    if seen.without_position["maxwell-json"] and "without_position" not in opts:
        seen.options["without_position"] = "kafka-order"
        seen.proposed["without_position"] = MAXWELL_KAFKA_ORDER
    return seen


def _config_name(seen: TopicSeen, t: TableSeen) -> str:
    """The name a table is configured under: the bare table name unless two tables share it."""
    same = [x for x in seen.tables.values() if x.table == t.table]
    return t.table if len(same) == 1 else t.name


def column_config(seen: TopicSeen, t: TableSeen) -> dict:
    """``{column: (type, comment)}`` to configure: columns the format does not type, or types
    coarser than the values (see the module docstring); configured types are kept."""
    configured = (seen.options.get("column_types") or {}).get(_config_name(seen, t)) or {}
    spec = format_named(seen.format)
    coarse = spec.coarse_types if spec is not None else {}
    out = {}
    for col, carried in t.types.items():
        if col in configured:
            out[col] = (configured[col], "configured")
            continue
        guess = guess_type(t.values.get(col, []), t.raw.get(col, []))
        kinds = set(carried)
        if not kinds:
            if guess is not None and guess != "string":
                out[col] = (guess, "guess from the values seen: confirm")
        elif len(kinds) > 1:
            if all(k.startswith("decimal(") for k in kinds):
                scale = max(int(k[:-1].split(",")[1]) for k in kinds)
                out[col] = (f"decimal(38,{scale})", f"the values carry {', '.join(sorted(kinds))}: confirm precision")
            else:
                out[col] = (guess or "string", f"the values carry {', '.join(sorted(kinds))}: confirm")
        else:
            (kind,) = kinds
            if guess is not None and any(guess.startswith(g) for g in coarse.get(kind, ())):
                out[col] = (guess, f"carried as {kind}; guess from the values seen: confirm")
    return out


def _flow(obj: Any) -> str:
    """``obj`` as one line of YAML (flow style)."""
    text = yaml.safe_dump(obj, default_flow_style=True, width=10_000)
    return (text[:-5] if text.endswith("\n...\n") else text).strip()


def report_lines(seen: TopicSeen) -> list[str]:
    """The report of one topic, as lines (printed as YAML comments)."""
    lines = [f"topic {seen.topic}: {sum(c for _, _, c in seen.offsets.values())} records read"]
    for p, (first, last, n) in sorted(seen.offsets.items()):
        lines.append(f"  partition {p}: offsets {first}..{last} ({n} records)")
    lines.append(f"  format: {seen.format or 'none recognised'}")
    lines.append("  records by detected format: " + ", ".join(f"{f} {n}" for f, n in seen.formats.most_common()))
    lines += [f"    unknown {u}" for u in seen.unknown]
    if seen.controls:
        lines.append("  control records: " + ", ".join(f"{k} {n}" for k, n in seen.controls.most_common()))
    for reason, n in seen.errors.most_common(5):
        lines.append(f"  quarantined ({n}): {reason}")
    if seen.positions:
        lines.append(f"  source positions: first {list(min(seen.positions))}, last {list(max(seen.positions))}")
    for fmt, n in sorted(seen.without_position.items()):
        lines.append(f"  source positions: absent from {n} of {seen.changes[fmt]} {fmt} changes (snapshot rows left "
                     "out): ordered by Kafka partition and offset, one partition per key needed")
    for t in sorted(seen.tables.values(), key=lambda x: x.name):
        lines.append(f"  table {t.name}: " + ", ".join(f"{op} {n}" for op, n in t.ops.most_common()))
        keys = [list(k) for k, _ in t.keys.most_common()]
        lines.append(f"    primary key: {keys[0] if len(keys) == 1 else keys}")
        for col, carried in t.types.items():
            lines.append(f"    {col}: carried {', '.join(sorted(carried)) or 'no type'}; values show "
                         f"{guess_type(t.values.get(col, []), t.raw.get(col, [])) or 'only nulls'}")
    return lines


def source_entry(seen: TopicSeen, prefix: Optional[str] = None) -> list[str]:
    """The ``sources[]`` entry of the topic as YAML lines (with comments on guessed values)."""
    out = [f"  - topic: {_flow(seen.topic)}", f"    format: {seen.format}"]
    if prefix:
        out.append(f"    table_prefix: {_flow(prefix)}")
    pks = dict(seen.options.get("primary_keys") or {})
    if seen.options.get("primary_key"):
        out.append(f"    primary_key: {_flow(list(seen.options['primary_key']))}")
    if pks:
        out.append("    primary_keys:")
        for t, cols in pks.items():
            why = seen.guessed_keys.get(t, (None, None))[1]
            out.append(f"      {_flow(t)}: {_flow(list(cols))}" + (f"  # guess ({why}): confirm" if why else ""))
    extra = {k: v for k, v in seen.options.items() if k not in ("primary_key", "primary_keys", "column_types")}
    types = {}
    for t in sorted(seen.tables.values(), key=lambda x: x.name):
        cols = column_config(seen, t)
        if cols:
            types[_config_name(seen, t)] = cols
    for name, cols in (seen.options.get("column_types") or {}).items():
        if not isinstance(cols, dict):
            types.setdefault("*", {})[name] = (cols, "configured")
        elif name not in types:
            types[name] = {c: (v, "configured") for c, v in cols.items()}
    if extra or types:
        out.append("    options:")
        for k, v in extra.items():
            out += [f"      # {line}" for line in seen.proposed.get(k, ())]
            out.append(f"      {k}: {_flow(v)}" + ("  # the field updates carry their before image in: confirm"
                                                   if k == "before_image_field" else ""))
        if types:
            out.append("      column_types:")
            for name, cols in types.items():
                if name == "*":
                    out += [f"        {_flow(c)}: {_flow(v)}" for c, (v, _) in cols.items()]
                    continue
                out.append(f"        {_flow(name)}:")
                out += [f"          {_flow(c)}: {_flow(v)}" + ("" if why == "configured" else f"  # {why}")
                        for c, (v, why) in cols.items()]
    return out


def pipeline_text(seens: list[TopicSeen], base: Optional[dict] = None) -> str:
    """A pipeline file reading the topics: the report as comments, then the file (``base``: the
    raw sections ``kafka``, ``catalog``, ``silver`` of a pipeline file, else the embedded stack's)."""
    lines = ["# python -m cdclake inspect: what the topics hold (records sampled from the start of each partition)"]
    for s in seens:
        lines += [f"# {x}" for x in report_lines(s)]
    base = dict(base or {})
    sections = {"kafka": base.get("kafka") or {"bootstrap_servers": "${CDC_KAFKA_BOOTSTRAP}"},
                "catalog": base.get("catalog") or {"name": "lake", "uri": "jdbc:sqlite:${CDC_STATE_DIR}/catalog.db",
                                                   "warehouse": "file://${CDC_STATE_DIR}/warehouse"}}
    lines.append(yaml.safe_dump(sections, sort_keys=False).rstrip())
    lines.append("sources:")
    for s in seens:
        if s.format is None:
            lines.append(f"  # topic {s.topic}: no record of a known format, left out")
            continue
        prefix = re.sub(r"[^A-Za-z0-9]+", "_", s.topic).strip("_") + "_" if len(seens) > 1 else None
        lines += source_entry(s, prefix)
    if base.get("silver"):
        lines.append(yaml.safe_dump({"silver": base["silver"]}, sort_keys=False).rstrip())
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    """``inspect --topic T [--topic T2] [--bootstrap B] [--pipeline P] [--sample N]``: print the
    report and pipeline file on stdout (see the module docstring); returns the exit code."""
    p = argparse.ArgumentParser(prog="python -m cdclake inspect",
                                description="Sample topics, detect their format and print a pipeline file reading them.")
    p.add_argument("--topic", action="append", required=True, help="topic to inspect (repeat for several)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the pipeline's, else $CDC_KAFKA_BOOTSTRAP)")
    p.add_argument("--pipeline", help="pipeline YAML file: its kafka, catalog and silver sections and source options")
    p.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, help="records read per partition (default %(default)s)")
    p.add_argument("--schema-registry", help="schema registry URL for Avro/JSON Schema topics "
                                             "(default: $CDC_SCHEMA_REGISTRY_URL, the embedded stack's)")
    args = p.parse_args(argv)
    try:
        base, client, bootstrap, configured = {}, {}, args.bootstrap, {}
        if args.pipeline:
            cfg = load_pipeline(args.pipeline)
            raw = yaml.safe_load(open(args.pipeline)) or {}
            base = {k: raw.get(k) for k in ("kafka", "catalog", "silver")}
            client = dict(cfg.kafka.client)
            bootstrap = bootstrap or cfg.kafka.bootstrap_servers
            configured = {s.topic: s.parser_options() for s in cfg.sources}
        if not bootstrap:
            bootstrap = stack_value("CDC_KAFKA_BOOTSTRAP")
        if not bootstrap:
            raise ConfigError(f"no Kafka to read: give --bootstrap or --pipeline, or start the stack ({state_dir()})")
        if args.sample < 1:
            raise ConfigError("--sample must be at least 1")
        registry = args.schema_registry or stack_value("CDC_SCHEMA_REGISTRY_URL")
        seens = [inspect_records(t, sample(bootstrap, t, args.sample, client), configured.get(t), registry)
                 for t in args.topic]
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(pipeline_text(seens, base))
    missing = [s.topic for s in seens if s.format is None]
    if missing:
        print(f"error: no record of a known format in {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0
