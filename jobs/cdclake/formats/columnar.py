"""The columnar fast path's shared parts: a batch of decoded images of one table converted column by column.

A format's fast path (:meth:`cdclake.formats.base.FormatParser.fast_parse`) reads a batch of
Kafka records at once: it decodes the messages with :data:`JSON` (msgspec, stricter than the
standard library's ``json`` and equal to it on every document both accept), groups them by table
plan (one Kafka Connect envelope and table, one Canal table ...), and converts each image column
with the plan's own converter over the whole batch (:func:`convert_images`), so the canonical text
is produced by the very functions the per-record parser calls. A record the fast path cannot read
exactly (a shape it does not know, a value a converter refuses, a placeholder that leaves a column
out) is left to :meth:`~cdclake.formats.base.FormatParser.parse`, which gives its result or its
error: the fast path never reports an error of its own.

A change leaves the fast path as a *change row*: the fields of :class:`cdclake.record.ChangeRecord`
in declaration order, each map (``before``, ``after``, ``column_types``) as a pair (keys list,
values list), or ``(None, None)`` for no map (:data:`NO_MAP`).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence

import msgspec

from cdclake.formats.json_values import EnvelopeReader, unwrap_envelope
from cdclake.record import KafkaRecord

#: The JSON decoder of the fast paths: ``JSON.decode(bytes)``; raises ``msgspec.DecodeError`` (a
#: ``ValueError``) for anything it does not accept, e.g. ``NaN``, numbers out of a double's range,
#: lone surrogates, all of which ``json.loads`` accepts (such records take the per-record parser).
JSON = msgspec.json.Decoder()

#: The pair of a map that does not exist.
NO_MAP = (None, None)

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
