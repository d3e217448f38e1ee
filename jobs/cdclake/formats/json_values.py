"""JSON values and keys of Kafka records, shared by the JSON formats.

- :func:`load_json` reads a Kafka value as one JSON object.
- :func:`unwrap_envelope` splits a Kafka Connect document ``{"schema", "payload"}``;
  :class:`EnvelopeReader` does both for a topic's values, learning its envelopes.
- :func:`read_key` reads a Kafka record key that is a JSON object (with or without the Kafka
  Connect ``{"schema", "payload"}`` envelope).
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

from cdclake.record import ParseError


def load_json(fmt: str, raw: bytes) -> dict:
    """Decode a Kafka value (UTF-8 JSON) into a dict.

    Raises :class:`ParseError` with field ``value`` when the bytes are not UTF-8, not valid JSON
    (e.g. truncated), or not a JSON object.
    """
    obj = _one_value(raw) if type(raw) is bytes else _NOT_ONE
    if obj is _NOT_ONE:  # not one JSON value: json.loads says why
        try:
            obj = json.loads(raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw)
        except UnicodeDecodeError as exc:
            raise ParseError(fmt, f"value is not UTF-8 text ({exc.reason} at byte {exc.start})", "value") from None
        except json.JSONDecodeError as exc:
            raise ParseError(fmt, f"value is not valid JSON ({exc.msg} at char {exc.pos})", "value") from None
    if not isinstance(obj, dict):
        raise ParseError(fmt, f"value is a JSON {type(obj).__name__}, not an object", "value")
    return obj


def map_leaves(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """``value`` (decoded JSON or Avro: lists and objects of leaves) with ``leaf`` applied to each
    value that is not a list or an object, the containers rebuilt (lists as lists, objects as
    dicts with the same keys in the same order)."""
    if isinstance(value, dict):
        return {k: map_leaves(v, leaf) for k, v in value.items()}
    if isinstance(value, list):
        return [map_leaves(v, leaf) for v in value]
    return leaf(value)


def unwrap_envelope(obj: Any) -> tuple[Any, Optional[dict]]:
    """Split a Kafka Connect JSON document into ``(payload, schema)``.

    A dict holding ``payload`` and nothing but ``schema`` beside it is the envelope
    (``schemas.enable=true``); an empty or null ``schema`` gives None. Anything else is its own
    payload with no schema.
    """
    if isinstance(obj, dict) and "payload" in obj and set(obj) <= {"schema", "payload"}:
        schema = obj.get("schema")
        return obj["payload"], (schema if isinstance(schema, dict) and schema else None)
    return obj, None


_DECODER = json.JSONDecoder()
_SCAN = _DECODER.scan_once
_BLANKS = json.decoder.WHITESPACE.match
_NOT_ONE: Any = object()


def _one_value(raw: bytes) -> Any:
    """The JSON value ``raw`` holds, as ``json.loads`` reads it (blanks around allowed); ``_NOT_ONE``
    where ``json.loads`` raises ``ValueError`` (not UTF-8, a byte order mark, no value, text after it)."""
    try:
        text = raw.decode("utf-8")
        if text[:1] == "\ufeff":
            return _NOT_ONE
        value, end = _SCAN(text, _BLANKS(text, 0).end())
    except (ValueError, StopIteration):
        return _NOT_ONE
    return value if _BLANKS(text, end).end() == len(text) else _NOT_ONE


class EnvelopeReader:
    """Reads Kafka values holding one JSON document, learning the Kafka Connect envelopes it meets.

    ``EnvelopeReader(fmt).load(raw)`` gives what ``unwrap_envelope(load_json(fmt, raw))`` gives,
    plus the envelope's id: ``(payload, schema, envelope)``. A connector sends the same
    ``{"schema": {...}, "payload": ...}`` text before each payload of a table (about 2.7 kB of the
    3.2 kB of a Debezium MySQL message). Once a value of that shape has been read whole, the bytes
    up to its payload, ``{"schema":<schema>,"payload":``, are kept with the schema read from
    them; a later value that starts with the same bytes and ends with ``}`` has only its payload
    decoded and gets the kept schema object (shared: callers must not change it) and the
    envelope's id (an ``int``, for caches keyed by schema). A value is compared, in place, only
    with the kept prefixes whose last bytes it has at their length. This is exact: such a value is the
    JSON object ``{"schema": S, "payload": P}`` exactly when what lies between is one JSON value
    P; when it is not (``}`` closes something else, invalid UTF-8, text after the document), the
    value is read whole, with :func:`load_json`'s error. Values without an envelope, or whose
    envelope does not come in the order ``schema``, ``payload``, are always read whole, with
    envelope id None.

    At most ``max_envelopes`` envelopes are kept (default 1,024); past that, unseen ones are read
    whole. Raises :class:`ParseError` as :func:`load_json` does.
    """

    _HEAD = re.compile(r'\{[ \t\n\r]*"schema"[ \t\n\r]*:[ \t\n\r]*')
    _JOIN = re.compile(r'[ \t\n\r]*,[ \t\n\r]*"payload"[ \t\n\r]*:')

    #: How many bytes before a payload (the end of a kept prefix) find the prefixes to compare.
    _TAIL = 32

    def __init__(self, fmt: str, max_envelopes: int = 1024):
        self.fmt = fmt
        self.max_envelopes = max_envelopes
        self._known: dict[bytes, tuple[Optional[dict], int]] = {}
        # per prefix length, in the order first seen: (length, tail start, {tail: [(prefix, schema, id)]})
        self._tails: list[tuple[int, int, dict[bytes, list]]] = []

    def load(self, raw: bytes) -> tuple[Any, Optional[dict], Optional[int]]:
        """``(payload, schema or None, envelope id or None)`` of a Kafka value."""
        if raw[-1:] == b"}":
            kept = self.kept_prefix(raw)
            if kept is not None:
                length, schema, envelope = kept
                payload = _one_value(raw[length:-1])
                if payload is not _NOT_ONE:
                    return payload, schema, envelope
        obj = load_json(self.fmt, raw)
        payload, schema = unwrap_envelope(obj)
        envelope = None
        if len(self._known) < self.max_envelopes and list(obj) == ["schema", "payload"]:
            envelope = self._learn(raw, schema)
        return payload, schema, envelope

    def kept_prefix(self, raw: bytes) -> Optional[tuple[int, Optional[dict], int]]:
        """``(prefix length, schema, envelope id)`` of the kept prefix ``raw`` starts with (the
        shortest length first seen first), or None: ``raw[length:-1]`` is then the payload's text,
        when ``raw`` ends with ``}`` and what lies between is one JSON value (the caller checks
        both). Only prefixes ending as ``raw`` does at their length are compared, in place."""
        for length, start, by_tail in self._tails:
            for prefix, schema, envelope in by_tail.get(raw[start:length], ()):
                if raw.startswith(prefix):
                    return length, schema, envelope
        return None

    def _learn(self, raw: bytes, schema: Optional[dict]) -> Optional[int]:
        """Keep the envelope of ``raw`` (read whole: a valid ``{"schema", "payload"}`` object)."""
        text = raw.decode("utf-8")
        head = self._HEAD.match(text)
        if head is None:
            return None
        first, end = _DECODER.raw_decode(text, head.end())
        join = self._JOIN.match(text, end)
        if join is None or first != schema:  # a later "schema" member is the one a whole read keeps
            return None
        prefix = text[:join.end()].encode("utf-8")
        if prefix in self._known:  # seen, but this value's payload is not one JSON value on its own
            return self._known[prefix][1]
        envelope = len(self._known)
        self._known[prefix] = (schema, envelope)
        length = len(prefix)
        start = max(length - self._TAIL, 0)
        for kept_length, _, by_tail in self._tails:
            if kept_length == length:
                break
        else:
            by_tail = {}
            self._tails.append((length, start, by_tail))
        by_tail.setdefault(prefix[start:], []).append((prefix, schema, envelope))
        return envelope


def read_key(raw: Optional[bytes], reader: Optional[EnvelopeReader] = None) -> Optional[tuple[dict, Optional[dict]]]:
    """Read a Kafka key holding a JSON object: ``(column → JSON value, Connect schema or None)``.

    Accepts ``{"schema": ..., "payload": {col: v}}`` and the plain ``{col: v}``; the column order
    is the key's. Returns None for a missing key or one that is not a JSON object (such keys are
    simply not used), never raises. With ``reader`` (an :class:`EnvelopeReader` kept for the
    topic's keys), keys with a known envelope have only their payload decoded.
    """
    if not raw:
        return None
    if reader is not None and isinstance(raw, bytes):
        try:
            payload, schema, _ = reader.load(raw)
        except (ParseError, RecursionError):  # not JSON, or nested deeper than the parser can follow
            return None
    else:
        try:
            obj = json.loads(raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None
        payload, schema = unwrap_envelope(obj)
    if not isinstance(payload, dict) or not payload:
        return None
    return payload, schema
