"""Helpers shared by the JSON vendor formats (``debezium-json``, ``canal-json``).

- :func:`load_json` reads a Kafka value as one JSON object.
- :class:`SourceOptions` holds the options every parser accepts: ``primary_key``,
  ``primary_keys`` and ``column_types``.
- :func:`read_key` reads a Kafka record key that is a JSON object (with or without the Kafka
  Connect ``{"schema", "payload"}`` envelope).
- :func:`resolve_primary_key` and :func:`key_delete_image` apply the key rules: configured
  override, then what the message carries, then the Kafka key, else :class:`ParseError`.
- :func:`coerce_text` renders a JSON value in the canonical text of a canonical type
  (:mod:`cdclake.types`), raising ``ValueError`` when it cannot; :func:`convert_image` applies a
  converter to a whole before/after image.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Mapping, Optional, Sequence

from cdclake.record import ParseError
from cdclake.types import decimal_precision_scale, normalize_type, to_text


class _Absent:
    """Sentinel type of :data:`ABSENT`."""

    def __repr__(self) -> str:
        return "ABSENT"


#: Returned by an image value converter to leave a column out of the image (absent).
ABSENT = _Absent()

NO_KEY_REASON = "no primary key: set primary_key for the source or send Kafka keys"
_EPOCH = _dt.datetime(1970, 1, 1)
_ISO_START_RE = re.compile(r"^\d{4}-\d{2}-\d{2}")
_INT_TYPES = ("smallint", "int", "bigint")


def load_json(fmt: str, raw: bytes) -> dict:
    """Decode a Kafka value (UTF-8 JSON) into a dict.

    Raises :class:`ParseError` with field ``value`` when the bytes are not UTF-8, not valid JSON
    (e.g. truncated), or not a JSON object.
    """
    try:
        obj = json.loads(raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw)
    except UnicodeDecodeError as exc:
        raise ParseError(fmt, f"value is not UTF-8 text ({exc.reason} at byte {exc.start})", "value") from None
    except json.JSONDecodeError as exc:
        raise ParseError(fmt, f"value is not valid JSON ({exc.msg} at char {exc.pos})", "value") from None
    if not isinstance(obj, dict):
        raise ParseError(fmt, f"value is a JSON {type(obj).__name__}, not an object", "value")
    return obj


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


class EnvelopeReader:
    """Reads Kafka values holding one JSON document, learning the Kafka Connect envelopes it meets.

    ``EnvelopeReader(fmt).load(raw)`` gives what ``unwrap_envelope(load_json(fmt, raw))`` gives,
    plus the envelope's id: ``(payload, schema, envelope)``. A connector sends the same
    ``{"schema": {...}, "payload": ...}`` text before each payload of a table (about 2.7 kB of the
    3.2 kB of a Debezium MySQL message). Once a value of that shape has been read whole, the bytes
    up to its payload, ``{"schema":<schema>,"payload":``, are kept with the schema read from
    them; a later value that starts with the same bytes and ends with ``}`` has only its payload
    decoded and gets the kept schema object (shared: callers must not change it) and the
    envelope's id (an ``int``, for caches keyed by schema). This is exact: such a value is the
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

    def __init__(self, fmt: str, max_envelopes: int = 1024):
        self.fmt = fmt
        self.max_envelopes = max_envelopes
        self._known: dict[bytes, tuple[Optional[dict], int]] = {}
        self._lengths: list[int] = []

    def load(self, raw: bytes) -> tuple[Any, Optional[dict], Optional[int]]:
        """``(payload, schema or None, envelope id or None)`` of a Kafka value."""
        if raw[-1:] == b"}":
            for length in self._lengths:
                known = self._known.get(raw[:length])
                if known is not None:
                    try:
                        return json.loads(raw[length:-1].decode("utf-8")), known[0], known[1]
                    except ValueError:  # not one JSON value (or not UTF-8): read it whole
                        break
        obj = load_json(self.fmt, raw)
        payload, schema = unwrap_envelope(obj)
        envelope = None
        if len(self._known) < self.max_envelopes and list(obj) == ["schema", "payload"]:
            envelope = self._learn(raw, schema)
        return payload, schema, envelope

    def _learn(self, raw: bytes, schema: Optional[dict]) -> Optional[int]:
        """Keep the envelope of ``raw`` (read whole: a valid ``{"schema", "payload"}`` object)."""
        text = raw.decode("utf-8")
        head = self._HEAD.match(text)
        if head is None:
            return None
        _, end = _DECODER.raw_decode(text, head.end())
        join = self._JOIN.match(text, end)
        if join is None:
            return None
        prefix = text[:join.end()].encode("utf-8")
        if prefix in self._known:  # seen, but this value's payload is not one JSON value on its own
            return self._known[prefix][1]
        envelope = len(self._known)
        self._known[prefix] = (schema, envelope)
        if len(prefix) not in self._lengths:
            self._lengths.append(len(prefix))
        return envelope


class LearningParser:
    """Base of the JSON parsers that keep what they learn from a topic's records.

    ``options`` (:class:`SourceOptions`), an :class:`EnvelopeReader` for the format's values and
    one for its Kafka keys (:func:`read_key`), and the kept table plans (:meth:`kept`): what a
    parser derives once per envelope schema and table instead of once per record. What it learnt
    is dropped when the parser is pickled (shipped to a Spark task): each copy learns again from
    the records it reads, with the same results. Subclasses set ``format_name``.
    """

    format_name: str
    #: Table plans kept per parser; past that, plans are made per record.
    MAX_PLANS = 4096

    def __init__(self, options: Optional[Mapping[str, Any]] = None):
        self.options = SourceOptions(options or {})
        self._forget()

    def _forget(self) -> None:
        self._reader = EnvelopeReader(self.format_name)
        self._key_reader = EnvelopeReader(self.format_name)
        self._plans: dict = {}

    def __getstate__(self) -> dict:
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.options = state["options"]
        self._forget()

    def kept(self, key: Any, make: Callable[[], Any]) -> Any:
        """The plan kept under ``key``, made by ``make()`` on first use (``key`` None, or not
        hashable: made every time, not kept)."""
        if key is None:
            return make()
        try:
            plan = self._plans.get(key)
        except TypeError:
            return make()
        if plan is None:
            plan = make()
            if len(self._plans) < self.MAX_PLANS:
                self._plans[key] = plan
        return plan


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


def _names(value: Any, what: str) -> Optional[list[str]]:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"option {what} must be a list of column names, got {value!r}")
    return list(value) or None


def table_names(database: Optional[str], schema: Optional[str], table: str) -> list[str]:
    """Names a table may be configured under, most specific first.

    ``db.schema.table``, ``db.table``, ``schema.table``, ``table`` (parts that are None left out).
    """
    names = []
    for parts in ((database, schema, table), (database, table), (schema, table), (table,)):
        if all(parts):
            name = ".".join(parts)
            if name not in names:
                names.append(name)
    return names


class SourceOptions:
    """The options every JSON parser accepts (all optional; unknown options are ignored).

    - ``primary_key``: ``[col, ...]`` (or ``"a,b"``) for every table of the topic; overrides what
      messages and keys say.
    - ``primary_keys``: ``{"table" | "db.table" | "schema.table" | "db.schema.table": [col, ...]}``,
      a per-table override that wins over ``primary_key``.
    - ``column_types``: ``{col: type}`` for every table and/or ``{"db.table": {col: type}}`` per
      table; canonical type names (:func:`cdclake.types.normalize_type`), used for the columns a
      message does not type itself.

    Raises ``ValueError`` for a malformed option (a configuration error, not a record error).
    """

    def __init__(self, options: Mapping[str, Any]):
        self.primary_key = _names(options.get("primary_key"), "primary_key")
        per_table = options.get("primary_keys") or {}
        if not isinstance(per_table, Mapping):
            raise ValueError(f"option primary_keys must map table names to column lists, got {per_table!r}")
        self.primary_keys = {str(t): _names(cols, f"primary_keys[{t!r}]") for t, cols in per_table.items()}
        types = options.get("column_types") or {}
        if not isinstance(types, Mapping):
            raise ValueError(f"option column_types must be a mapping, got {types!r}")
        self.types_all: dict[str, str] = {}
        self.types_by_table: dict[str, dict[str, str]] = {}
        for name, value in types.items():
            if isinstance(value, Mapping):
                self.types_by_table[str(name)] = {str(c): normalize_type(t) for c, t in value.items()}
            else:
                self.types_all[str(name)] = normalize_type(value)

    def key_override(self, database: Optional[str], schema: Optional[str], table: str) -> Optional[list[str]]:
        """The configured key of a table (``primary_keys`` entry, else ``primary_key``), or None."""
        for name in table_names(database, schema, table):
            if self.primary_keys.get(name):
                return list(self.primary_keys[name])
        return list(self.primary_key) if self.primary_key else None

    def column_types(self, database: Optional[str], schema: Optional[str], table: str) -> dict[str, str]:
        """Configured canonical types of a table's columns (per-table entries win)."""
        out = dict(self.types_all)
        for name in reversed(table_names(database, schema, table)):
            out.update(self.types_by_table.get(name, {}))
        return out


def resolve_primary_key(
    fmt: str,
    override: Optional[Sequence[str]],
    carried: Optional[Sequence[str]],
    key_columns: Optional[Sequence[str]],
    required: bool = True,
) -> list[str]:
    """The key of a change: configured ``override``, else the message's ``carried`` key, else the
    Kafka key's columns.

    Raises ``ParseError(fmt, NO_KEY_REASON, "primary_key")`` when none is known and ``required``
    (a truncate passes ``required=False`` and gets ``[]``).
    """
    for cols in (override, carried, key_columns):
        if cols:
            return list(cols)
    if required:
        raise ParseError(fmt, NO_KEY_REASON, "primary_key")
    return []


def key_delete_image(
    fmt: str,
    primary_key: Sequence[str],
    before: Optional[dict],
    key_text: Optional[Mapping[str, Optional[str]]],
    field_name: str,
    hint: str,
) -> dict:
    """The before image of a delete, completed with the Kafka key's values where it lacks key columns.

    ``key_text`` maps key column names to canonical text (None when there is no usable Kafka key).
    A key column counts as carried when its value is present and not null. Raises
    :class:`ParseError` naming ``field_name`` when a key column stays without a value; ``hint``
    tells the operator how to fix the source.
    """
    image = dict(before or {})
    missing = [c for c in primary_key if image.get(c) is None]
    for col in missing:
        if key_text and key_text.get(col) is not None:
            image[col] = key_text[col]
    still = [c for c in primary_key if image.get(c) is None]
    if still:
        raise ParseError(fmt, f"delete carries no value for key column(s) {', '.join(still)}: {hint}", field_name)
    return image


def parse_timestamp(text: str) -> Optional[_dt.datetime]:
    """Read ``YYYY-MM-DD[T ]HH:MM[:SS[.f...]][Z|±HH:MM]`` as a naive UTC datetime.

    Text without an offset is taken as UTC; fractions beyond microseconds are truncated. MySQL
    zero dates (``0000-00-00 ...``) give None, as Debezium does. Raises ``ValueError`` otherwise.
    """
    text = text.strip()
    if text.startswith("0000-00-00"):
        return None
    if not _ISO_START_RE.match(text):
        raise ValueError(f"{text!r} is not a YYYY-MM-DD timestamp")
    m = re.search(r"\.(\d{7,})", text)
    if m:
        text = text[: m.start(1) + 6] + text[m.end(1):]
    value = _dt.datetime.fromisoformat(text)
    if value.tzinfo is not None:
        value = value.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return value


def epoch_timestamp(amount: int, per_second: int) -> _dt.datetime:
    """The naive UTC datetime ``amount`` units after the epoch (``per_second`` units a second:
    1000 for ms, 10**6 for µs, 10**9 for ns); sub-microsecond parts are truncated."""
    micros = amount * 10**6 // per_second
    return _EPOCH + _dt.timedelta(microseconds=micros)


def coerce_text(value: Any, ctype: str) -> Optional[str]:
    """Render a JSON value (string, number, bool, object, array) as canonical text of ``ctype``.

    Strings are read as their type's text (digits, ``1.5``, ``true``/``1``, ``YYYY-MM-DD``,
    ``YYYY-MM-DD HH:MM:SS[.f]``); numbers for ``date`` are days since the epoch and numbers for
    ``timestamp`` milliseconds since the epoch; ``binary`` strings are kept as the Base64 text they
    already are. Decimals keep their digits and are padded to the type's scale. Raises
    ``ValueError`` when the value does not fit the type.
    """
    return text_converter(ctype)(value)


_TEXT_CONVERTERS: dict[str, Callable[[Any], Optional[str]]] = {}


def text_converter(ctype: str) -> Callable[[Any], Optional[str]]:
    """:func:`coerce_text` for one type as a function of the value: ``text_converter(t)(v) ==
    coerce_text(v, t)`` for every value, errors included.

    The type is looked at once, when the function is made (and the function is kept per type),
    so a parser converting many values of the same column pays for that once. The value types a
    format commonly sends for the type (``int`` for integers, ``str`` for text, decimals and
    timestamps, ``float`` for doubles) take a direct path; every other value goes through the
    general rules of :func:`coerce_text`.
    """
    conv = _TEXT_CONVERTERS.get(ctype)
    if conv is None:
        conv = _TEXT_CONVERTERS[ctype] = _make_text_converter(ctype)
    return conv


def general_text(value: Any, ctype: str) -> Optional[str]:
    """:func:`coerce_text` by its general rules alone, without the direct paths of
    :func:`text_converter` (which give way to it for every value they do not read directly)."""
    if value is None:
        return None
    try:
        return _coerce(value, ctype)
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise ValueError(f"not a valid {ctype} value ({exc})") from None


def _make_text_converter(ctype: str) -> Callable[[Any], Optional[str]]:
    """One function per type: the type's common value types first, then the general rule.

    A direct path that raises gives way to the general rule, which then raises its own error.
    """

    def general(value: Any) -> Optional[str]:
        return general_text(value, ctype)

    if ctype in ("string", "binary"):
        def text(v: Any) -> Optional[str]:
            return v if type(v) is str else general(v)
        return text
    if ctype in _INT_TYPES:
        def integer(v: Any) -> Optional[str]:
            try:
                t = type(v)
                if t is int:
                    return str(v)
                if t is str:
                    return str(int(v.strip()))
            except (ValueError, TypeError, ArithmeticError):
                pass
            return general(v)
        return integer
    if ctype in ("float", "double"):
        def floating(v: Any) -> Optional[str]:
            try:
                t = type(v)
                if t is float:
                    return repr(v)
                if t is int or t is str:
                    return repr(float(v))
            except (ValueError, TypeError, ArithmeticError):
                pass
            return general(v)
        return floating
    ps = decimal_precision_scale(ctype)
    if ps is not None:
        scale, quantum = ps[1], Decimal(1).scaleb(-ps[1])

        def decimal(v: Any) -> Optional[str]:
            try:
                if type(v) is str:
                    number = Decimal(v.strip())
                    if number.is_finite():
                        if number.as_tuple().exponent > -scale:
                            number = number.quantize(quantum)
                        return format(number, "f")
            except (ValueError, TypeError, ArithmeticError):
                pass
            return general(v)
        return decimal
    if ctype == "timestamp":
        def timestamp(v: Any) -> Optional[str]:
            try:
                t = type(v)
                if t is str:
                    return to_text(parse_timestamp(v))
                if t is int:
                    return (_EPOCH + _dt.timedelta(microseconds=v * 1000)).isoformat(sep=" ")
            except (ValueError, TypeError, ArithmeticError):
                pass
            return general(v)
        return timestamp
    if ctype == "boolean":
        def boolean(v: Any) -> Optional[str]:
            return ("true" if v else "false") if type(v) is bool else general(v)
        return boolean
    return general


def _coerce(value: Any, ctype: str) -> Optional[str]:
    if ctype == "string" or isinstance(value, (dict, list)):
        return to_text(value)
    if ctype == "boolean":
        if isinstance(value, bool):
            return to_text(value)
        text = str(value).strip().lower()
        if text in ("1", "true", "t", "yes", "y"):
            return "true"
        if text in ("0", "false", "f", "no", "n"):
            return "false"
        raise ValueError(f"{value!r} is not a boolean")
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a {ctype}")
    if ctype in _INT_TYPES:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"{value!r} is not an integer")
            value = int(value)
        return str(int(str(value).strip()))
    if ctype in ("float", "double"):
        return to_text(float(value))
    if ctype.startswith("decimal"):
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError(f"{value!r} is not a decimal number") from None
        if not number.is_finite():
            raise ValueError(f"{value!r} is not a finite decimal number")
        return to_text(pad_scale(number, ctype))
    if ctype == "date":
        if isinstance(value, int):
            return to_text(_EPOCH.date() + _dt.timedelta(days=value))
        text = str(value).strip()
        if text.startswith("0000-00-00"):
            return None
        return to_text(_dt.date.fromisoformat(text[:10]))
    if ctype == "timestamp":
        if isinstance(value, (int, float)):
            return to_text(epoch_timestamp(int(value), 1000))
        return to_text(parse_timestamp(str(value)))
    if ctype == "binary":
        return value if isinstance(value, str) else to_text(value)
    return to_text(value)


def pad_scale(number: Decimal, ctype: str) -> Decimal:
    """``number`` with trailing zeros up to the scale of ``decimal(p,s)`` (never rounds)."""
    ps = decimal_precision_scale(ctype)
    if ps and number.as_tuple().exponent > -ps[1]:
        return number.quantize(Decimal(1).scaleb(-ps[1]))
    return number


def convert_image(
    fmt: str,
    image: Any,
    convert: Callable[[str, Any], Optional[str]],
    field_name: str,
) -> Optional[dict[str, Optional[str]]]:
    """Canonical text of every column of an image (None stays None).

    ``convert(column, json_value)`` renders one value and returns :data:`ABSENT` to leave the
    column out of the map. Raises :class:`ParseError` naming ``field_name`` when the image is not
    a JSON object, and ``field_name.column`` for a value that does not fit its type.
    """
    if image is None:
        return None
    if not isinstance(image, dict):
        raise ParseError(fmt, f"image is a JSON {type(image).__name__}, not an object", field_name)
    out: dict[str, Optional[str]] = {}
    for col, value in image.items():
        try:
            text = convert(col, value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise ParseError(fmt, f"cannot read {value!r}: {exc}", f"{field_name}.{col}") from None
        if text is not ABSENT:
            out[col] = text
    return out
