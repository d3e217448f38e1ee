"""The columnar fast path's shared parts: a batch of decoded images of one table converted column by column.

The fast path's driver (:meth:`cdclake.formats.base.FormatParser.fast_parse`) reads a batch of
Kafka records at once: a format's :meth:`~cdclake.formats.base.FormatParser.fast_members` decodes
the messages (JSON ones with :data:`JSON`: msgspec, stricter than the standard library's ``json``
and equal to it on every document both accept) and names each one's table plan (one Kafka Connect
envelope and table, one Canal table ...); the driver groups them; the format's
:meth:`~cdclake.formats.base.FormatParser.fast_group` converts each image column with the plan's
own converter over the whole group (:func:`convert_images`), so the canonical text is produced by
the very functions the per-record parser calls. A record the fast path cannot read
exactly (a shape it does not know, a value a converter refuses, a placeholder that leaves a column
out) is left to :meth:`~cdclake.formats.base.FormatParser.parse`, which gives its result or its
error: the fast path never reports an error of its own.

A change leaves the fast path as a *change row*: a plain tuple of the fields of
:class:`cdclake.record.ChangeRecord` in declaration order (:data:`CHANGE_FIELDS`; a field's index is
:data:`FIELD_INDEX`), each map (``before``, ``after``, ``column_types``) as a pair (keys list,
values list), or ``(None, None)`` for no map (:data:`NO_MAP`), the key and the position as lists.
A fast path builds its rows with a :func:`row_maker` (the fields it gives, by name) or
:func:`change_row` (a :class:`ChangeRecord` it made), never field by field in order; a plain tuple
(not a subclass) keeps :func:`cdclake.lake.staged_row`'s indexing at the interpreter's fast path.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Optional, Sequence

import msgspec

from cdclake.formats.json_values import EnvelopeReader, unwrap_envelope
from cdclake.names import check_names
from cdclake.record import ChangeRecord, KafkaRecord

#: The JSON decoder of the fast paths: ``JSON.decode(bytes)``; raises ``msgspec.DecodeError`` (a
#: ``ValueError``) for anything it does not accept, e.g. ``NaN``, numbers out of a double's range,
#: lone surrogates, all of which ``json.loads`` accepts (such records take the per-record parser).
JSON = msgspec.json.Decoder()

#: The pair of a map that does not exist.
NO_MAP = (None, None)

#: The fields of a change row: :class:`~cdclake.record.ChangeRecord`'s, in declaration order.
CHANGE_FIELDS = tuple(f.name for f in dataclasses.fields(ChangeRecord))
#: The ChangeRecord fields that are maps (a pair in a change row) and lists.
_MAPS = frozenset(f.name for f in dataclasses.fields(ChangeRecord) if f.type.startswith(("dict", "Optional[dict")))
_LISTS = frozenset(f.name for f in dataclasses.fields(ChangeRecord) if f.type.startswith(("list", "tuple")))


#: Field name → its index in a change row.
FIELD_INDEX = {name: i for i, name in enumerate(CHANGE_FIELDS)}


def _row_default(f: dataclasses.Field) -> Any:
    """A ChangeRecord field's default as a change row holds it (a map as a pair, a tuple as a list)."""
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if f.name in _MAPS:
        return None if value is None else (list(value), list(value.values()))
    return list(value) if f.name in _LISTS else value


#: Fields with a default: name → the default as a change row holds it.
_DEFAULTS = {f.name: _row_default(f) for f in dataclasses.fields(ChangeRecord)
             if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}


def _fresh(value: Any) -> str:
    """Python text that makes ``value`` anew for each row (lists and pairs of lists are copied)."""
    if type(value) is list:
        return f"list({value!r})"
    if type(value) is tuple and all(type(v) is list for v in value):
        return "(" + ", ".join(f"list({v!r})" for v in value) + ",)"
    return repr(value)


def row_maker(*varying: str, **fixed: Any) -> Callable[..., tuple]:
    """A function that makes the change row of one change from the fields named in
    ``varying``, given positionally in that order; the other fields are ``fixed`` (by name, the
    same for every row: names, types, constants) or take their ChangeRecord default. Made once (per
    module or table plan), called once per change. Raises ``ValueError`` for a name that is not a
    field, a field both varying and fixed, or a field without a default given neither way."""
    unknown = (set(varying) | set(fixed)) - set(CHANGE_FIELDS)
    if unknown:
        raise ValueError(f"not ChangeRecord fields: {sorted(unknown)}")
    if set(varying) & set(fixed):
        raise ValueError(f"fields both varying and fixed: {sorted(set(varying) & set(fixed))}")
    scope: dict[str, Any] = {}
    parts = []
    for name in CHANGE_FIELDS:
        if name in varying:
            parts.append(name)
        elif name in fixed:
            scope[f"_{name}"] = fixed[name]
            parts.append(f"_{name}")
        elif name in _DEFAULTS:
            parts.append(_fresh(_DEFAULTS[name]))
        else:
            raise ValueError(f"field {name!r} has no default: give it")
    code = f"def make_row({', '.join(varying)}):\n    return ({', '.join(parts)},)\n"
    exec(code, scope)  # the code places the fields of CHANGE_FIELDS; no value is part of it
    return scope["make_row"]


def _pair(m: Optional[dict]) -> tuple:
    return NO_MAP if m is None else (list(m), list(m.values()))


def change_row(c: ChangeRecord) -> tuple:
    """The change row of a :class:`ChangeRecord` (a fast path that builds changes with the
    per-record parser's functions)."""
    return tuple(_pair(getattr(c, n)) if n in _MAPS else list(getattr(c, n)) if n in _LISTS else getattr(c, n)
                 for n in CHANGE_FIELDS)


#: Name sets a fast path keeps the verdict of (:func:`names_pass`), per parser or plan.
MAX_CHECKED = 4096


def json_objects(records: Sequence[KafkaRecord], decode: Callable[[bytes], Any] = JSON.decode
                 ) -> Iterator[tuple[int, dict]]:
    """``(index in records, message)`` of each record whose value ``decode`` (default :data:`JSON`)
    reads as one JSON object; the others are not given (the per-record parser reads them)."""
    for i, rec in enumerate(records):
        try:
            msg = decode(rec.value)
        except (ValueError, TypeError):
            continue
        if type(msg) is dict:
            yield i, msg


def source_names(source: dict) -> Optional[tuple[Optional[str], Optional[str], str]]:
    """``(db, schema, table)`` of a Kafka Connect ``source`` block whose ``table`` is non-empty text
    and whose ``db`` and ``schema`` are text or absent; None for any other (the per-record parser
    reads it)."""
    table, db, schema = source.get("table"), source.get("db"), source.get("schema")
    if (type(table) is not str or not table or (db is not None and type(db) is not str)
            or (schema is not None and type(schema) is not str)):
        return None
    return db, schema, table


def connect_members(payloads: Iterator[tuple[int, Any, Optional[dict], Any]],
                    source_of: Callable[[int, dict], Optional[dict]]) -> Iterator[tuple[tuple, tuple]]:
    """Kafka Connect payloads as members of the fast path's driver
    (:meth:`~cdclake.formats.base.FormatParser.fast_members`): ``((envelope id, db, schema,
    table), (index, payload, source block, Connect schema))``. ``payloads`` as
    :func:`envelope_payloads` gives them; ``source_of(index, payload)`` gives the ``source`` block
    of a payload the fast path reads (an object payload), or None for one it leaves; a block
    without text names (:func:`source_names`) is left too."""
    for i, payload, schema, envelope in payloads:
        if type(payload) is not dict:
            continue
        source = source_of(i, payload)
        if source is None:
            continue
        names = source_names(source)
        if names is not None:
            yield (envelope, *names), (i, payload, source, schema)


def key_indices(cache: dict, key: Any, names: Sequence[str], pk: Sequence[str]) -> Optional[list[int]]:
    """The indices in ``names`` (an image's columns) of the primary key columns ``pk``, or None when
    one is not among them; kept in ``cache`` under ``key``."""
    at = cache.get(key, cache)
    if at is cache:
        at = cache[key] = [names.index(k) for k in pk] if set(pk) <= set(names) else None
    return at


def names_pass(checked: dict, key: Any, change: Callable[[], ChangeRecord]) -> bool:
    """Whether the change ``change()`` makes passes :func:`cdclake.names.check_names` (a change
    carrying the names of the records ``key`` stands for); the verdict is kept in ``checked`` under
    ``key`` (up to :data:`MAX_CHECKED` keys), so each name set is checked once. A hot loop asks
    ``checked.get(key) or names_pass(checked, key, ...)``: a name set that passed costs one lookup."""
    ok = checked.get(key)
    if ok is None:
        try:
            check_names(change())
            ok = True
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            ok = False
        if len(checked) < MAX_CHECKED:
            checked[key] = ok
    return ok


#: Values per batch a fast path reads whole to learn a Kafka Connect envelope it has not met.
MAX_LEARNT = 16


def envelope_payloads(reader: EnvelopeReader, records: Sequence[KafkaRecord], bare: bool = False,
                      learn: int = MAX_LEARNT) -> Iterator[tuple[int, Any, Optional[dict], Optional[int]]]:
    """The payloads of a batch of Kafka Connect JSON values, decoded with :data:`JSON`:
    ``(index in records, payload, schema, envelope id)``, for each value that starts with an
    envelope ``reader`` keeps (:meth:`~cdclake.formats.json_values.EnvelopeReader.kept_prefix`)
    and whose payload text is one JSON document. Up to ``learn`` values per call whose envelope
    the reader has not met are read whole by ``reader.load`` first, as the per-record parser
    would read them, which teaches it the envelope. With ``bare``, a value without an envelope
    (a bare payload, or a null or empty ``schema``) is decoded whole and given with schema and
    envelope id None. Other values are not given (the per-record parser reads them); never raises.
    """
    kept, decode = reader.kept_prefix, JSON.decode
    for i, rec in enumerate(records):
        raw = rec.value
        if not raw or type(raw) is not bytes:
            continue
        try:
            prefix = kept(raw) if raw[-1:] == b"}" else None
            if prefix is None:
                if bare:
                    payload, schema = unwrap_envelope(decode(raw))
                    if schema is None:
                        yield i, payload, None, None
                        continue
                if learn <= 0 or raw[-1:] != b"}":
                    continue
                learn -= 1
                reader.load(raw)
                prefix = kept(raw)
                if prefix is None:
                    continue
            length, schema, envelope = prefix
            payload = decode(raw[length:-1])
        except Exception:  # noqa: BLE001  (the per-record parser reports it)
            continue
        yield i, payload, schema, envelope


def convert_images(images: Sequence[Any], columns: tuple, converters: Sequence[Callable[[Any], Any]],
                   placeholders: frozenset = frozenset()) -> tuple[list[Optional[list]], set[int]]:
    """Canonical text of a batch of images of one table plan, column by column.

    ``images``: one decoded image per record (a dict, or None for no image); ``columns``: the
    plan's columns in message order; ``converters``: one per column, JSON value → canonical text
    (raising ``ValueError``, ``TypeError`` or ``ArithmeticError`` for a value that does not fit);
    ``placeholders``: text values that stand for a column left out (Debezium's unavailable value).

    Returns ``(texts, refused)``: per record the list of texts in column order (None where the
    image is None), and the indices of the records the batch cannot convert exactly: an image
    that is not a dict with exactly ``columns`` in that order, a value a converter refuses, a
    placeholder value, or (where there are placeholders) a list or object value, which may hold
    one. Their ``texts`` entries are undefined.
    """
    refused: set[int] = set()
    present = [i for i, image in enumerate(images) if image is not None]
    rows = []
    for i in present:
        image = images[i]
        if type(image) is not dict or tuple(image) != columns:
            refused.add(i)
            rows.append(None)
        else:
            rows.append(tuple(image.values()))
    if refused:
        keep = [(i, r) for i, r in zip(present, rows) if r is not None]
        present, rows = [i for i, _ in keep], [r for _, r in keep]
    out: list[Optional[list]] = [None] * len(images)
    if not present:
        return out, refused
    texts = []
    for values, conv in zip(zip(*rows), converters):
        if placeholders:
            try:
                clean = placeholders.isdisjoint(values)
            except TypeError:  # an unhashable value (an object, a list): records with one are refused
                clean = False
            if not clean:
                for i, v in zip(present, values):
                    if type(v) in (list, dict) or type(v) is str and v in placeholders:
                        refused.add(i)
        try:
            texts.append(list(map(conv, values)))
        except (ValueError, TypeError, ArithmeticError):
            column = []
            for i, v in zip(present, values):
                try:
                    column.append(conv(v))
                except (ValueError, TypeError, ArithmeticError):
                    refused.add(i)
                    column.append(None)
            texts.append(column)
    for i, row in zip(present, zip(*texts)):
        out[i] = list(row)
    return out, refused
