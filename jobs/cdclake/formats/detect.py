"""``auto``: which known format a Kafka record is in, read from the record itself.

Each format carries its rule (:attr:`cdclake.formats.base.Format.detect`, a predicate on a
:class:`~cdclake.formats.probe.Probe`): what marks that format's messages, as its document
describes them. A rule that also matches another format's messages names that format in
``yields_to``, and a value the other format's rule claims is not its own. :func:`detect` runs
every rule of the closed list (:mod:`cdclake.formats.registry`) and names the format only when
exactly one matches; a record that matches none, or more than one, is a :class:`ParseError` of
format ``auto`` (field ``value``) whose reason says what was seen. :func:`rules` gives each
format's rule with its ``yields_to`` applied.

What each rule looks for is said in words by its format's ``marks`` (the table in
``docs/formats.md``).

The two formats framed as Confluent's wire format (a ``0`` byte, a 4-byte schema id, then Avro or
JSON) are told apart by the body; DTS Avro values also start with a ``0`` byte (the version), so
the Avro rule yields to ``dts-avro`` (the value must not be a whole DTS record), and
the ambiguity check quarantines any value both rules still match. Whether the schema id is known
is the registry's to say: the detected format's parser quarantines a value the registry does not
know.

A Kafka Connect payload is ``payload`` of a ``{"schema", "payload"}`` object, else the object
itself (``schemas.enable=false``). An empty value (a Kafka tombstone) is no format's: the ``auto``
parser makes it a ``tombstone`` control record of its own.
"""
from __future__ import annotations

from typing import Callable

from cdclake.errors import ParseError
from cdclake.formats.probe import Probe
from cdclake.formats.registry import by_name

FORMAT = "auto"


def _claims(formats: dict, probe: Probe) -> list[str]:
    """The names of ``formats`` (name → Format) whose rule, with ``yields_to`` applied, matches
    ``probe``, sorted. Each rule runs at most once per probe."""
    raw: dict[str, bool] = {}
    claimed: dict[str, bool] = {}

    def matched(name: str) -> bool:
        if name not in raw:
            raw[name] = bool(formats[name].detect(probe))
        return raw[name]

    def claims(name: str) -> bool:
        if name not in claimed:
            claimed[name] = matched(name) and not any(claims(other) for other in formats[name].yields_to)
        return claimed[name]

    return [name for name in sorted(formats) if claims(name)]


def rules() -> dict[str, Callable[[Probe], bool]]:
    """Format name → its rule with ``yields_to`` applied (a predicate on a :class:`Probe`), for
    every format of the closed list."""
    formats = by_name()
    return {name: (lambda probe, name=name: name in _claims(formats, probe)) for name in sorted(formats)}


def matches(value: bytes) -> list[str]:
    """The formats whose rule matches ``value`` (non-empty bytes), sorted."""
    return _claims(by_name(), Probe(value))


def seen(value: bytes) -> str:
    """A short description of what ``value`` holds, for a reason: its top-level JSON keys, or its
    first bytes."""
    probe = Probe(value)
    o = probe.json
    if isinstance(o, dict):
        keys = sorted(o)
        text = ", ".join(keys[:12]) + (", ..." if len(keys) > 12 else "")
        pl = probe.payload
        if pl is not None and pl is not o:
            pk = sorted(pl)
            text += "; payload keys: " + ", ".join(pk[:12]) + (", ..." if len(pk) > 12 else "")
        return f"a JSON object with keys {text}" if keys else "an empty JSON object"
    if o is not None:
        return f"a JSON {type(o).__name__}"
    return f"{len(value)} bytes starting {value[:8]!r}"


def detect(value: bytes) -> str:
    """The one format whose rule matches ``value`` (non-empty bytes).

    Raises :class:`ParseError` (format ``auto``, field ``value``) when no rule matches or several
    do, naming what was seen (and the formats that matched).
    """
    found = matches(value)
    if len(found) == 1:
        return found[0]
    if not found:
        raise ParseError(FORMAT, f"matches no known format: {seen(value)}", "value")
    raise ParseError(FORMAT, f"matches several formats ({', '.join(found)}): {seen(value)}", "value")
