"""One Kafka value as the ``auto`` rules look at it (:class:`Probe`), and the framings several rules share.

Each format's rule (:attr:`cdclake.formats.base.Format.detect`) is a predicate on a :class:`Probe`:
the value's bytes, its JSON (decoded once, None when it is not JSON text) and its Kafka Connect
payload (``payload`` of a ``{"schema", "payload"}`` object, else the object itself).
"""
from __future__ import annotations

import json
from typing import Any, Optional

_NOT_JSON = object()


class Probe:
    """One Kafka value as the rules look at it: ``value`` (bytes), :attr:`json` (the decoded JSON
    value, or None when the value is not JSON text) and :attr:`payload` (the Kafka Connect payload
    of a JSON object, or None), each decoded once."""

    def __init__(self, value: bytes):
        self.value = bytes(value)
        self._json: Any = None
        self._decoded = False

    @property
    def json(self) -> Any:
        """The value as JSON (None when it is not UTF-8 JSON text, or nests past Python's limit)."""
        if not self._decoded:
            self._decoded = True
            self._json = _NOT_JSON
            head = self.value.lstrip()[:1]
            if head in (b"{", b"["):
                try:
                    self._json = json.loads(self.value)
                except (ValueError, RecursionError):
                    pass
        return None if self._json is _NOT_JSON else self._json

    @property
    def obj(self) -> Optional[dict]:
        """The value as a JSON object, else None."""
        o = self.json
        return o if isinstance(o, dict) else None

    @property
    def payload(self) -> Optional[dict]:
        """The Kafka Connect payload: ``payload`` of ``{"schema", "payload"}``, else the object."""
        o = self.obj
        if o is None:
            return None
        if "payload" in o and "schema" in o and len(o) == 2:
            p = o["payload"]
            return p if isinstance(p, dict) else None
        return o


def confluent_body(p: Probe) -> Optional[bytes]:
    """The body of a value framed as Confluent's wire format (magic byte ``0``, a 4-byte
    big-endian schema id), or None."""
    v = p.value
    return v[5:] if len(v) > 5 and v[0] == 0 else None
