"""``auto``: which known format a Kafka record is in, read from the record itself.

:data:`RULES` holds one rule per format (format name → a predicate on a :class:`Probe`): what
marks that format's messages, as its document describes them. :func:`detect` runs every rule and
names the format only when exactly one matches; a record that matches none, or more than one, is
a :class:`ParseError` of format ``auto`` (field ``value``) whose reason says what was seen. A
format added to :data:`cdclake.formats.FORMATS` adds its rule here (a test checks that every
format but ``auto`` has one).

=================  ================================================================================
format             what marks its messages
=================  ================================================================================
qlik-json          a JSON object whose ``magic`` is ``"atMSG"`` (Replicate envelope)
qlik-avro          a value that starts with the bytes ``atMSG`` (the Avro envelope's magic)
dts-avro           not JSON, not ``atMSG``: a value that decodes as exactly one DTS Avro ``Record``
canal-json         a JSON object with ``isDdl``, ``type`` and ``data`` or ``pkNames`` (flat message)
maxwell-json       a JSON object with ``database``, ``type``, ``ts`` and ``data``, ``def`` or ``sql``,
                   and none of Canal's ``isDdl``/``es``
ogg-json           a JSON object with ``op_type``, ``table`` and ``pos``
aws-dms-json       a JSON object whose ``metadata`` object holds ``record-type``
shareplex-json     a JSON object whose ``meta`` is an object, with ``data``
aliyun-json        ``{"schema", "payload"}`` whose payload holds ``sequenceId`` or whose schema holds
                   ``dataColumn`` (DataWorks)
cdl-json           a Kafka Connect payload holding ``message_version`` other than ``2.0``
arcion-json        a Kafka Connect payload with ``op`` and a ``source`` block whose ``connector`` is
                   upper case (``MYSQL``, ``ORACLE``: Replicant's spelling), without ``transaction``
                   or ``message_version``
debezium-avro      Confluent's wire format (a ``0`` byte, a 4-byte schema id) whose body does not
                   start with ``{`` (a Debezium value's first Avro byte is a union index, 0 or 2),
                   and not a whole DTS Avro record
debezium-jsonschema  Confluent's wire format whose body starts with ``{`` (JsonSchemaConverter's JSON)
debezium-json      a Kafka Connect payload (enveloped or bare) that is a change (``op`` and a
                   ``source`` block), a transaction marker (``status`` ``BEGIN``/``END``), a schema
                   change (``ddl``, ``historyRecord``, ``tableChanges``) or a heartbeat, and is not
                   Arcion's, CDL's (Debezium 2.0 flavour of CDL included) or DataWorks'
=================  ================================================================================

The two formats framed as Confluent's wire format (a ``0`` byte, a 4-byte schema id, then Avro or
JSON) are told apart by the body; DTS Avro values also start with a ``0`` byte (the version), so
the Avro rule also requires the value not to be a whole DTS record (``not _dts_avro(probe)``), and
the ambiguity check quarantines any value both rules still match. Whether the schema id is known
is the registry's to say: the detected format's parser quarantines a value the registry does not
know.

A Kafka Connect payload is ``payload`` of a ``{"schema", "payload"}`` object, else the object
itself (``schemas.enable=false``). An empty value (a Kafka tombstone) is no format's: the ``auto``
parser makes it a ``tombstone`` control record of its own.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Optional

from cdclake.errors import ParseError

FORMAT = "auto"
#: The bytes Qlik Replicate's envelopes start with (JSON ``magic`` field; Avro fixed magic).
QLIK_MAGIC = b"atMSG"
_NOT_JSON = object()
#: Debezium's schema change fields and heartbeat fields (see :mod:`cdclake.formats.debezium`).
_DEBEZIUM_DDL = ("ddl", "historyRecord", "tableChanges")
_DEBEZIUM_HEARTBEAT = {"ts_ms", "serverName", "HEARTBEAT_IDENTIFIER", "message_type", "message_version"}


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


def _qlik_json(p: Probe) -> bool:
    o = p.obj
    return o is not None and o.get("magic") == "atMSG"


def _qlik_avro(p: Probe) -> bool:
    return p.value.startswith(QLIK_MAGIC)


def _dts_avro(p: Probe) -> bool:
    if p.json is not None or p.value.startswith(QLIK_MAGIC):
        return False
    from cdclake.formats.dts.schema import decode

    try:
        decode(p.value)
    except ParseError:
        return False
    return True


def _confluent_body(p: Probe) -> Optional[bytes]:
    """The body of a value framed as Confluent's wire format (magic byte ``0``, a 4-byte
    big-endian schema id), or None."""
    v = p.value
    return v[5:] if len(v) > 5 and v[0] == 0 else None


def _debezium_avro(p: Probe) -> bool:
    body = _confluent_body(p)
    return body is not None and body[:1] != b"{" and not _dts_avro(p)


def _debezium_jsonschema(p: Probe) -> bool:
    body = _confluent_body(p)
    return body is not None and body[:1] == b"{"


def _canal(p: Probe) -> bool:
    o = p.obj
    return o is not None and "isDdl" in o and "type" in o and ("data" in o or "pkNames" in o)


def _maxwell(p: Probe) -> bool:
    o = p.obj
    return (o is not None and all(k in o for k in ("database", "type", "ts"))
            and any(k in o for k in ("data", "def", "sql")) and "isDdl" not in o and "es" not in o)


def _ogg(p: Probe) -> bool:
    o = p.obj
    return o is not None and all(k in o for k in ("op_type", "table", "pos"))


def _dms(p: Probe) -> bool:
    o = p.obj
    return o is not None and isinstance(o.get("metadata"), dict) and "record-type" in o["metadata"]


def _shareplex(p: Probe) -> bool:
    o = p.obj
    return o is not None and isinstance(o.get("meta"), dict) and "data" in o


def _aliyun(p: Probe) -> bool:
    o = p.obj
    if o is None or not ("schema" in o and "payload" in o):
        return False
    schema, payload = o.get("schema"), o.get("payload")
    return ((isinstance(payload, dict) and "sequenceId" in payload)
            or (isinstance(schema, dict) and "dataColumn" in schema))


def _cdl(p: Probe) -> bool:
    pl = p.payload
    return pl is not None and "message_version" in pl and str(pl["message_version"]) != "2.0" and not _aliyun(p)


def _arcion(p: Probe) -> bool:
    pl = p.payload
    if pl is None or "op" not in pl or "transaction" in pl or "message_version" in pl or _aliyun(p):
        return False
    source = pl.get("source")
    connector = source.get("connector") if isinstance(source, dict) else None
    return isinstance(connector, str) and connector != "" and connector == connector.upper() \
        and connector != connector.lower()


def _debezium(p: Probe) -> bool:
    pl = p.payload
    if pl is None or _aliyun(p) or _cdl(p) or _arcion(p):
        return False
    if "op" in pl and isinstance(pl.get("source"), dict):
        return True
    if pl.get("status") in ("BEGIN", "END") and "id" in pl:
        return True
    if any(k in pl for k in _DEBEZIUM_DDL):
        return True
    return bool(pl) and set(pl) <= _DEBEZIUM_HEARTBEAT and ("serverName" in pl or "message_type" in pl
                                                             or "HEARTBEAT_IDENTIFIER" in pl)


#: Format name → its rule (see the module docstring). One entry per format of ``FORMATS``.
RULES: dict[str, Callable[[Probe], bool]] = {
    "aliyun-json": _aliyun,
    "arcion-json": _arcion,
    "aws-dms-json": _dms,
    "canal-json": _canal,
    "cdl-json": _cdl,
    "debezium-avro": _debezium_avro,
    "debezium-json": _debezium,
    "debezium-jsonschema": _debezium_jsonschema,
    "dts-avro": _dts_avro,
    "maxwell-json": _maxwell,
    "ogg-json": _ogg,
    "qlik-avro": _qlik_avro,
    "qlik-json": _qlik_json,
    "shareplex-json": _shareplex,
}


def matches(value: bytes) -> list[str]:
    """The formats whose rule matches ``value`` (non-empty bytes), sorted."""
    probe = Probe(value)
    return [name for name, rule in sorted(RULES.items()) if rule(probe)]


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
