"""Normalize's Python workers: raw records in, one change, quarantine or control row tuple per outcome out.

Each raw record gives one quarantine row (:data:`cdclake.lake.QUARANTINE_SCHEMA`), one control row
(:data:`cdclake.lake.CONTROL_SCHEMA`), or one or more staged change rows
(:data:`cdclake.lake.STAGED_SCHEMA`, :func:`cdclake.lake.bronze_row`); they leave the parser as
Arrow batches of :data:`TAGGED_SCHEMA`, one wide row per outcome tagged with its kind, which
:mod:`cdclake.normalize.files` writes. Whatever
fails for one record quarantines that record with a reason naming the format and the field.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Iterable, Iterator, Optional

from pyspark.sql.types import BooleanType, StringType, StructField, StructType

from cdclake.lake import (CHANGE_PYTHON_TYPES, CONTROL_SCHEMA, QUARANTINE_SCHEMA, STAGED_SCHEMA, STAGED_TO_BRONZE,
                          arrow_schema, bronze_row, staged_row)
from cdclake.normalize.limits import MAX_NESTING_DEPTH, MAX_VALUE_BYTES, NOT_OPENING, check_limits, is_json_format
from cdclake.errors import RunError, is_run_error
from cdclake.record import OPS, ChangeRecord, ControlRecord, KafkaRecord, ParseError


def kafka_record(r) -> KafkaRecord:
    """The :class:`KafkaRecord` of a raw table row."""
    return KafkaRecord(r.kafka_topic, r.kafka_partition, r.kafka_offset, r.kafka_timestamp_ms,
                       None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
                       [(h.name, None if h.value is None else bytes(h.value)) for h in (r.headers or [])])


#: Quarantine reasons are cut to this many characters (a parser may quote a huge value).
MAX_REASON_CHARS = 2000


def quarantine_reason(text: str) -> str:
    """``text`` as a quarantine reason: at most :data:`MAX_REASON_CHARS` characters (the cut
    is said), with characters UTF-8 cannot hold (lone surrogates) as backslash escapes."""
    if len(text) > MAX_REASON_CHARS:
        text = f"{text[:MAX_REASON_CHARS]}... ({len(text) - MAX_REASON_CHARS} more characters)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def run_error(exc: BaseException, fmt: str, where: str) -> RunError:
    """The :class:`cdclake.errors.RunError` that stops normalize for ``exc`` (an
    :func:`cdclake.errors.is_run_error` error met while reading ``where``, e.g. ``topic[0]@12``):
    one line naming the format, where, and the cause; a ``RunError`` keeps its class."""
    text = " ".join(_exception_text(exc).split())
    if isinstance(exc, RunError):
        return type(exc)(f"reading {where}: {text}")
    return RunError(f"{fmt}: reading {where}: {type(exc).__name__}: {text}; nothing was quarantined, "
                    "a rerun applies the window")


def _exception_text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001  (an exception whose message cannot be made)
        return repr(type(exc))


def check_change(c: ChangeRecord) -> None:
    """Reject a change the silver stage could not apply. Raises :class:`ParseError`."""
    if c.op not in OPS:
        raise ParseError(c.source_format, f"operation {c.op!r} is not one of {OPS}", "op")
    if not c.source_table:
        raise ParseError(c.source_format, "no source table", "table")
    from cdclake.names import check_names

    check_names(c)  # names with a path separator, '.'/'..' or control characters are refused
    if c.op != "truncate":
        if not c.primary_key:
            raise ParseError(c.source_format, f"no primary key for table {c.source_table!r}", "primary_key")
        image = c.after if c.op != "delete" else (c.before or {})
        missing = [k for k in c.primary_key if image is None or image.get(k) is None]
        if missing:
            raise ParseError(c.source_format, f"primary key column(s) {missing} missing or null in the "
                             f"{'before' if c.op == 'delete' else 'after'} image", "primary_key")


def may_pass_limits(value: Optional[bytes], key: Optional[bytes], is_json: bool, max_value_bytes: int,
                    max_nesting_depth: int) -> bool:
    """Whether a record's value or key may be past the limits (:func:`check_limits` then decides):
    larger than ``max_value_bytes``, or, for a JSON format, holding more opening brackets than
    ``max_nesting_depth`` (an upper bound of its nesting). False for nearly every record, cheaply."""
    return ((value is not None and (len(value) > max_value_bytes or is_json
                                    and len(value.translate(None, NOT_OPENING)) > max_nesting_depth))
            or (key is not None and (len(key) > max_value_bytes or is_json
                                     and len(key.translate(None, NOT_OPENING)) > max_nesting_depth)))


def classify(parser, rows: Iterable) -> Iterator[tuple]:
    """Parse raw rows with one parser; yield ``(kind, row_tuple)`` with kind change/quarantine/control.

    ``rows`` carry the raw table's columns (see :func:`classify_records` for the rest).
    """
    return classify_records(parser, (((r.kafka_topic, r.kafka_partition, r.kafka_offset, r.kafka_timestamp_ms,
                                       r.landed_hour), kafka_record(r)) for r in rows))


def classify_records(parser, records: Iterable[tuple[tuple, KafkaRecord]], max_value_bytes: int = MAX_VALUE_BYTES,
                     max_nesting_depth: int = MAX_NESTING_DEPTH) -> Iterator[tuple]:
    """Parse ``(kafka columns, KafkaRecord)`` pairs with one parser; yield ``(kind, row_tuple)``.

    The Kafka columns are (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp_ms,
    landed_hour). Row tuples have the columns of :data:`cdclake.lake.STAGED_SCHEMA` (kind ``change``),
    :data:`cdclake.lake.QUARANTINE_SCHEMA` or :data:`cdclake.lake.CONTROL_SCHEMA`; each record gives one quarantine row,
    one control row, or one or more change rows. Never raises for bad input: a record past the
    limits (``max_value_bytes``, ``max_nesting_depth``: :func:`check_limits`), a parser error, or
    any exception while the record is parsed, its changes checked (:func:`check_change`) or its
    bronze rows built, becomes a quarantine row whose reason starts with the format's name and
    names the field (``value`` for an unexpected exception of the parser; the first field of a
    wrong type for one after it). An error that is not a property of the record's bytes
    (:func:`cdclake.errors.is_run_error`: a schema registry that cannot be reached, a timeout,
    ``MemoryError`` ...) raises :class:`cdclake.errors.RunError` (:func:`run_error`) instead: the
    run stops, and nothing is quarantined for it.
    """
    import datetime as dt

    fmt = parser.format_name
    is_json = is_json_format(fmt)
    for kcols, rec in records:
        result = _UNPARSED
        try:
            value, key = rec.value, rec.key
            if may_pass_limits(value, key, is_json, max_value_bytes, max_nesting_depth):
                check_limits(fmt, rec, max_value_bytes, max_nesting_depth)  # the exact check, by its reason
            result = parser.parse(rec)
            if isinstance(result, ControlRecord):
                control = kcols + (fmt, result.kind, result.source_database, result.source_schema,
                                   result.source_table, result.detail, result.tx_id, result.tx_end)
            else:
                control = None
                for c in result:
                    check_change(c)
                out = [bronze_row(c, kcols) for c in result]
        except ParseError as exc:
            yield "quarantine", kcols + (fmt, quarantine_reason(str(exc)), rec.key, rec.value,
                                         dt.datetime.now(dt.timezone.utc))
            continue
        except Exception as exc:
            if is_run_error(exc):  # a service, a timeout, the runtime: not this record's fault
                raise run_error(exc, fmt, f"{rec.topic}[{rec.partition}]@{rec.offset}") from None
            # a parser bug must not crash the run: quarantine with the cause
            where = "value" if result is _UNPARSED else _change_field(result)
            reason = f"{fmt}: field '{where}': unexpected {type(exc).__name__}: {_exception_text(exc)}"
            yield "quarantine", kcols + (fmt, quarantine_reason(reason), rec.key, rec.value,
                                         dt.datetime.now(dt.timezone.utc))
            continue
        if control is not None:
            yield "control", control
            continue
        if not out:
            yield "control", kcols + (fmt, "empty", None, None, None, "record carried no row change", None, None)
        for row in out:
            yield "change", row


_UNPARSED = object()


def _change_field(result) -> str:
    """The first field of a wrong type in a parser's ``result`` (``value`` when none is)."""
    try:
        for c in result:
            if not isinstance(c, ChangeRecord):
                return "value"
            for name, types in CHANGE_PYTHON_TYPES.items():
                if not isinstance(getattr(c, name), types):
                    return name
    except Exception:  # noqa: BLE001  (not iterable: the parser's result itself is wrong)
        pass
    return "value"


#: The columns of each kind of row :func:`classify` yields (a schema each): staged change,
#: quarantine and control.
OUTPUT_COLUMNS = {"change": STAGED_SCHEMA, "quarantine": QUARANTINE_SCHEMA, "control": CONTROL_SCHEMA}
#: The outputs of :func:`classify` as one wide row (:data:`TAGGED_SCHEMA`): ``_kind``
#: (change/quarantine/control), the columns of every kind (shared names have one type), ``_first``
#: (the record's first row: one per raw record, what normalize counts) and ``_fast`` (the row
#: comes from the format's columnar fast path, not the per-record parser).
_TAGGED: dict[str, StructField] = {"_kind": StructField("_kind", StringType())}
for _schema in OUTPUT_COLUMNS.values():
    for _field in _schema.fields:
        assert _TAGGED.setdefault(_field.name, _field).dataType == _field.dataType, _field.name
_TAGGED.update({n: StructField(n, BooleanType()) for n in ("_first", "_fast")})
TAGGED_SCHEMA = StructType(list(_TAGGED.values()))


#: A raw table row with the attributes :func:`classify` reads (headers: items with ``name`` and ``value``).
RawRow = namedtuple("RawRow", "kafka_topic kafka_partition kafka_offset kafka_timestamp_ms landed_hour key value headers")
#: Where each kind's row tuple puts each column of :data:`_TAGGED` (absent: the kind has no such column).
_SLOTS = {kind: {name: i for i, name in enumerate(schema.names)} for kind, schema in OUTPUT_COLUMNS.items()}


def tagged_arrow_schema():
    """The Arrow schema of :data:`TAGGED_SCHEMA`."""
    return arrow_schema(TAGGED_SCHEMA)


def batch_records(batch) -> Iterator[tuple[tuple, KafkaRecord]]:
    """The ``(kafka columns, KafkaRecord)`` pairs (:func:`classify_records`) of an Arrow batch of
    the raw table (:data:`cdclake.lake.RAW_SCHEMA`), read column by column; ``landed_hour`` as
    one ``datetime`` per distinct hour, shared by its records (a timestamp column's ``to_pylist``
    makes one per value: 7 % of the Debezium parse)."""
    cols = {n: batch.column(n) for n in batch.schema.names}
    topics, parts, offsets, stamps, keys, values, headers_ = (
        cols[n].to_pylist() for n in ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp_ms",
                                      "key", "value", "headers"))
    hours = _shared_values(cols["landed_hour"])
    for i, (key, value, headers) in enumerate(zip(keys, values, headers_)):
        yield ((topics[i], parts[i], offsets[i], stamps[i], hours[i]),
               KafkaRecord(topics[i], parts[i], offsets[i], stamps[i], key, value,
                           [(h["name"], h["value"]) for h in headers] if headers else []))


def _shared_values(column) -> list:
    """``column.to_pylist()`` for an Arrow column of few distinct values (a record batch's hours),
    each distinct value made once and shared by its rows (a timestamp column's own ``to_pylist``
    makes a ``datetime`` per row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_timestamp(column.type):
        return column.to_pylist()
    distinct = pc.unique(column)
    made = dict(zip(distinct.cast(pa.int64()).to_pylist(), distinct.to_pylist()))
    return [made[v] for v in column.cast(pa.int64()).to_pylist()]


_TABLE_SLOTS = tuple(_SLOTS["change"][n] for n in ("source_table", "source_schema", "source_database"))


def _by_table(item: tuple) -> tuple:
    """The sort key of a fast path's ``(staged row, first)``: its table's names, so that the bronze
    writer finds each table's rows as one run (its files are ordered by table)."""
    row = item[0]
    return tuple("" if row[i] is None else str(row[i]) for i in _TABLE_SLOTS)


def tagged_batch(found: dict[str, list[tuple]], schema, fast: Optional[list[tuple]] = None):
    """One Arrow batch of ``schema`` (:func:`tagged_arrow_schema`) from the row tuples of each kind
    (``{"change": [...], "quarantine": [...], "control": [...]}``, a record's change rows one after
    the other) and the change rows of the fast path (``fast``: ``(staged row, first)`` pairs),
    built column by column; the rows of one kind one after the other (changes, the per-record
    parser's then the fast path's, then quarantine, then control), so that a writer takes each
    kind as a slice."""
    import pyarrow as pa

    fast = fast or []
    kinds = {"change": found["change"], "fast": [r for r, _ in fast],
             **{k: v for k, v in found.items() if k != "change"}}
    columns = {kind: list(zip(*rows)) for kind, rows in kinds.items()}
    slots = dict(_SLOTS, fast=_SLOTS["change"])
    changes = found["change"]
    t, p, o = (_SLOTS["change"][n] for n in ("kafka_topic", "kafka_partition", "kafka_offset"))
    first_change = [i == 0 or r[o] != changes[i - 1][o] or r[p] != changes[i - 1][p] or r[t] != changes[i - 1][t]
                    for i, r in enumerate(changes)]
    arrays = []
    for f in schema:
        values: list = []
        for kind, rows in kinds.items():
            if f.name == "_kind":
                values += ["change" if kind == "fast" else kind] * len(rows)
            elif f.name == "_fast":
                values += [kind == "fast"] * len(rows)
            elif f.name == "_first":
                values += (first_change if kind == "change" else [first for _, first in fast] if kind == "fast"
                           else [True] * len(rows))
            elif f.name in slots[kind] and rows:
                values += columns[kind][slots[kind][f.name]]
            else:
                values += [None] * len(rows)
        arrays.append(_arrow_values(values, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _arrow_values(values: list, type_):
    """``pa.array(values, type_)``; a list column whose rows share a few list objects (the fast
    paths give every change of a table plan the same column name and type lists) converts each
    object once and repeats it by index."""
    import pyarrow as pa

    if pa.types.is_list(type_) and len(values) > 64:
        at: dict[int, int] = {}
        index = [at.setdefault(id(v), len(at)) for v in values]
        if len(at) * 8 <= len(values):
            distinct = list({id(v): v for v in values}.values())  # first seen first, as ``at`` numbers them
            return pa.array(distinct, type=type_).take(pa.array(index, pa.int32()))
    return pa.array(values, type=type_)


def writable_rows(found: dict[str, list[tuple]], schema, parsers: dict, items_by_topic: dict) -> dict[str, list[tuple]]:
    """``found`` (as :func:`tagged_batch` takes it) without the records one of whose change or
    control rows has a value that does not convert to its column of ``schema``: each such record
    gives one quarantine row instead (and none of its other rows), whose reason names the format
    and the bronze column, e.g. ``debezium-json: field 'after': cannot be written as
    list<element: string> (UnicodeEncodeError: ...)``.

    ``parsers`` is ``{topic: parser}``; ``items_by_topic`` ``{topic: [(kafka columns,
    KafkaRecord)]}``, the records the rows came from (a record is known by topic, partition and
    offset). Converts column by column, and value by value only in the columns that fail. Never
    raises for a value; returns ``found`` itself when every value converts.
    """
    import datetime as dt

    import pyarrow as pa

    types = {f.name: f.type for f in schema}
    bad: dict[tuple, str] = {}
    for kind in ("change", "control"):
        rows, slots = found[kind], _SLOTS[kind]
        where = (slots["kafka_topic"], slots["kafka_partition"], slots["kafka_offset"])
        for name, i in slots.items():
            try:
                pa.array([r[i] for r in rows], type=types[name])
                continue
            except Exception:  # noqa: BLE001  (find the values that fail)
                pass
            for r in rows:
                try:
                    pa.array([r[i]], type=types[name])
                except Exception as exc:  # noqa: BLE001
                    record = tuple(r[j] for j in where)
                    if record not in bad:
                        bad[record] = quarantine_reason(
                            f"{parsers[record[0]].format_name}: field '{STAGED_TO_BRONZE.get(name, name)}': cannot be "
                            f"written as {types[name]} ({type(exc).__name__}: {_exception_text(exc)})")
    if not bad:
        return found
    out: dict[str, list[tuple]] = {}
    for kind, rows in found.items():
        slots = _SLOTS[kind]
        t, p, o = slots["kafka_topic"], slots["kafka_partition"], slots["kafka_offset"]
        out[kind] = rows if kind == "quarantine" else [r for r in rows if (r[t], r[p], r[o]) not in bad]
    out["quarantine"] = list(out["quarantine"])
    now = dt.datetime.now(dt.timezone.utc)
    for topic, items in items_by_topic.items():
        fmt = parsers[topic].format_name
        for kcols, rec in items:
            reason = bad.get(kcols[:3])
            if reason is not None:
                out["quarantine"].append(kcols + (fmt, reason, rec.key, rec.value, now))
    return out


def parse_batches(parsers: dict, schema, batches, max_value_bytes: int = MAX_VALUE_BYTES,
                  max_nesting_depth: int = MAX_NESTING_DEPTH) -> Iterator:
    """Raw table Arrow batches in (as :func:`cdclake.lake.read_splits` reads them), Arrow batches
    of ``schema`` (:func:`tagged_arrow_schema`) out.

    Each record goes through :func:`classify_records` with its topic's parser and the limits
    ``max_value_bytes`` and ``max_nesting_depth``; the rows leave as Arrow columns, grouped by kind.
    When a value of an unexpected type (a parser's bug) or one Arrow cannot hold (a lone
    surrogate in a string) fails the batch, the records whose rows do not convert are
    quarantined instead (:func:`writable_rows`) and the rest of the batch is kept.
    Python's cyclic garbage collector is paused while a batch is parsed: the batch's rows are
    many objects without cycles, freed by reference counting, and the collections they would set
    off find nothing to free (they cost a quarter of the parse). It is enabled again once they
    are freed: else the first collection after the batch visits every one of them.
    """
    import gc

    for batch in batches:
        enabled = gc.isenabled()
        gc.disable()
        try:
            out = _parse_batch(parsers, schema, batch, max_value_bytes, max_nesting_depth)
        finally:
            if enabled:
                gc.enable()
        yield out


def _parse_batch(parsers: dict, schema, batch, max_value_bytes: int, max_nesting_depth: int):
    """One raw batch of :func:`parse_batches` as one tagged Arrow batch of ``schema``."""
    by_topic: dict[str, list] = {}
    for item in batch_records(batch):
        by_topic.setdefault(item[0][0], []).append(item)
    found: dict[str, list[tuple]] = {"change": [], "quarantine": [], "control": []}
    fast: list[tuple] = []
    for topic, items in by_topic.items():
        parser = parsers[topic]
        if parser.FAST_PATH:
            items = fast_rows(parser, items, fast, max_value_bytes, max_nesting_depth)
        for kind, row in classify_records(parser, items, max_value_bytes, max_nesting_depth):
            found[kind].append(row)
    fast.sort(key=_by_table)  # each table's changes one run (records stay whole: stable)
    try:
        return tagged_batch(found, schema, fast)
    except Exception as exc:  # noqa: BLE001  (one record's value fails its whole column)
        if is_run_error(exc):
            raise
        for row, _ in fast:  # the per-record rows of the fast path's records: the same rows
            found["change"].append(row)
        return tagged_batch(writable_rows(found, schema, parsers, by_topic), schema)


def fast_rows(parser, items: list[tuple[tuple, KafkaRecord]], fast: list[tuple], max_value_bytes: int = MAX_VALUE_BYTES,
              max_nesting_depth: int = MAX_NESTING_DEPTH) -> list[tuple[tuple, KafkaRecord]]:
    """Read ``(kafka columns, KafkaRecord)`` pairs with the parser's columnar fast path
    (:meth:`cdclake.formats.base.FormatParser.fast_parse`): append ``(staged change row, first)``
    to ``fast`` for each change of a record it reads (``first``: the record's first row) and return
    the pairs it leaves to :func:`classify_records`, in their order. Records that may be past the
    limits (:func:`check_limits`) are left to it unread; so are tombstones."""
    is_json = is_json_format(parser.format_name) or parser.format_name == "auto"  # an upper bound: see check_limits
    offered, rest = [], []
    for item in items:
        rec = item[1]
        value, key = rec.value, rec.key
        if not value or may_pass_limits(value, key, is_json, max_value_bytes, max_nesting_depth):
            rest.append(item)
        else:
            offered.append(item)
    if not offered:
        return rest
    try:
        results = parser.fast_parse([rec for _, rec in offered])
    except Exception as exc:  # noqa: BLE001  (a fast path's bug: the per-record parser reads the batch)
        if is_run_error(exc):  # a service, a timeout, the runtime: the run stops (classify_records)
            first = offered[0][1]
            raise run_error(exc, parser.format_name, f"{first.topic}[{first.partition}] from offset {first.offset}") from None
        return items
    left = []
    for item, result in zip(offered, results):
        if result is None:
            left.append(item)
            continue
        kcols = item[0]
        for n, change in enumerate(result):
            fast.append((staged_row(change, kcols), n == 0))
        if not result:
            left.append(item)  # no change: the per-record parser says what the record is
    return rest + left  # the order of records does not matter: each record's rows stay together
