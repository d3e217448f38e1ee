"""``ogg-json``: Oracle GoldenGate for Big Data, Kafka Handler with the JSON Formatter (operation modeled).

Implements "Oracle GoldenGate for Big Data: Using the Pluggable Formatters", section *Using the
JSON Formatter* → *Operation Formatted JSON* and *Sample Operation Modeled JSON Messages*
(https://docs.oracle.com/goldengate/bd123110/gg-bd/GADBD/using-pluggable-formatters.htm; the same
section in later releases), with the formatter's default metadata fields and its
``includePrimaryKeys``, ``includeTokens`` and transaction information options. One Kafka record is
one operation, a JSON object:

=================  ==========================================================================
field              read as
=================  ==========================================================================
``table``          the fully qualified table name, ``SCHEMA.TABLE`` or ``CATALOG.SCHEMA.TABLE``,
                   split on the dots outside double quotes (quotes removed, ``""`` inside quotes
                   is one ``"``) → ``source_database`` (the catalog), ``source_schema``,
                   ``source_table``; a name without a dot is the table alone
``op_type``        ``I`` insert, ``U`` update, ``D`` delete, ``T`` truncate (the formatter's
                   default ``insertOpKey``/``updateOpKey``/``deleteOpKey``/``truncateOpKey``)
``pos``            the position in the source trail: the trail file's sequence number then the
                   RBA (relative byte address), zero-padded digits (``00000000000000002928``) →
                   ``source_position`` ``(pos)``, one exact integer (at one width the number
                   orders as the pair does). This is the order; ``op_ts`` is not monotonic.
``op_ts``          the operation's commit timestamp, ``YYYY-MM-DD HH:MM:SS.ffffff``, UTC →
                   ``source_ts_ms`` (never used for order)
``current_ts``     when the formatter wrote the message: not used
``primary_keys``   the key column names (``includePrimaryKeys=true``) → ``primary_key`` unless
                   configured
``tokens``         token name → value (``includeTokens=true``): not used
``xid``            the source transaction id, when transaction information is included → ``tx_id``
``csn``            the commit sequence number: not used (``pos`` orders)
``before``         the before image (update, delete): may hold only some columns (the source logs
                   only the key and the changed columns): absent columns stay absent
``after``          the after image (insert, update): an update's after image may be partial
                   (compressed updates): absent columns stay absent, so silver keeps their values
=================  ==========================================================================

A column ``C`` beside a boolean ``C_isMissing`` (flags the formatter can write beside each column
to tell a value missing from the trail from a null) is absent when the flag is true and carried
when it is false; the flag itself is not a column. Values are JSON (numbers, text, null). The format carries no types: columns are typed by
``column_types`` and are otherwise untyped text, as for Debezium JSON without a schema (JSON
numbers keep their JSON text, ``17520.00`` → ``17520.0`` as a double reads it; configure
``decimal(p,s)`` to keep decimals exact). Configured ``timestamp`` and ``date`` columns also read
GoldenGate's ``YYYY-MM-DD:HH:MM:SS[.f]`` text.

A delete carries its before image; an update's key columns missing from ``after`` are taken from
``before``, then from the Kafka key. Primary key: configured (``primary_key``/``primary_keys``) →
``primary_keys`` → the Kafka key's columns when it is a JSON object (the Kafka Handler's default
key is the key values concatenated, not a JSON object) → ParseError. A truncate needs no key.

Not rows: a JSON schema document (``$schema``; the formatter can write one per table, normally to
a separate schema topic) is a ``metadata`` control record; an empty value is a tombstone. The
formatter's row modeled output (``format=json_row``: columns at the top level, no ``before``/
``after``) is not this format: such a record is quarantined (``after`` missing).

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``).
"""
from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Callable, Iterator, Optional

from cdclake.formats.base import ColumnPlan, Event, FormatParser
from cdclake.formats.fields import element, known_operation, split_quoted
from cdclake.formats.json_values import load_json, read_key
from cdclake.formats.options import SourceOptions, key_delete_image, resolve_primary_key
from cdclake.formats.text import EXACT, convert_image, parse_timestamp, text_converter, utc_ms
from cdclake.names import check_names
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import decimal_precision_scale, to_text

FORMAT = "ogg-json"
#: ``op_type`` → bronze op.
OPS = {"I": "insert", "U": "update", "D": "delete", "T": "truncate"}
#: The suffix of the formatter's missing-column flags (``<column>_isMissing``).
MISSING_SUFFIX = "_isMissing"
_OGG_DATETIME_RE = re.compile(r"^(\s*[0-9]{4}-[0-9]{2}-[0-9]{2}):([0-9]{2}:[0-9]{2})")
_DELETE_HINT = "the deleted row does not carry them; send Kafka keys holding the key columns"


def split_table(name: str) -> tuple[Optional[str], Optional[str], str]:
    """``CATALOG.SCHEMA.TABLE``, ``SCHEMA.TABLE`` or ``TABLE`` → ``(catalog, schema, table)``.

    Split on the dots outside double quotes; quoted parts lose their quotes (``""`` inside them
    is one ``"``): ``"MY.S"."T.1"`` → ``(None, "MY.S", "T.1")``. Raises ``ValueError`` for an
    empty part, more than three parts or an unterminated quote.
    """
    parts = split_quoted(name)
    if len(parts) > 3:
        raise ValueError(f"table name {name!r} has more than three parts (catalog.schema.table)")
    return (None, None, parts[0]) if len(parts) == 1 else (
        (None, parts[0], parts[1]) if len(parts) == 2 else (parts[0], parts[1], parts[2]))


def ogg_datetime(value: Any) -> Any:
    """GoldenGate's ``YYYY-MM-DD:HH:MM:SS[.f]`` text with a blank for the colon after the date
    (``1994-09-30:15:33:00`` → ``1994-09-30 15:33:00``); any other value unchanged."""
    if type(value) is str:
        m = _OGG_DATETIME_RE.match(value)
        if m:
            return f"{m.group(1)} {m.group(2)}{value[m.end():]}"
    return value


def _untyped_text(value: Any) -> Optional[str]:
    """:func:`to_text`: the canonical text of a column without a configured type."""
    return value if type(value) is str else to_text(value)


def ogg_converter(ctype: Optional[str]) -> Callable[[Any], Optional[str]]:
    """JSON value → canonical text of a column of canonical type ``ctype`` (None: untyped text).
    ``timestamp``, ``timestamp_ntz`` and ``date`` columns read :func:`ogg_datetime` text too. Raises ``ValueError``
    when a value does not fit the type."""
    if ctype is None:
        return _untyped_text
    conv = text_converter(ctype)
    if ctype in ("timestamp", "timestamp_ntz", "date"):
        return lambda v: conv(ogg_datetime(v))
    ps = decimal_precision_scale(ctype)
    if ps is not None:  # GoldenGate writes NUMBER as a JSON number: read as its shortest text, as coerce_text does
        scale, quantum = ps[1], Decimal(1).scaleb(-ps[1])

        def decimal(v: Any) -> Optional[str]:
            if type(v) is float:
                try:
                    number = Decimal(repr(v))
                    if number.is_finite():
                        if number.as_tuple().exponent > -scale:
                            number = number.quantize(quantum, context=EXACT)
                        return format(number, "f")
                except ArithmeticError:  # the general rule says why
                    pass
            return conv(v)
        return decimal
    return conv


class _TablePlan(ColumnPlan):
    """The configured ``column_types`` of one table and a converter per column, made once.

    ``types`` (column → canonical type), ``key_override`` (the configured key or None) and
    :meth:`convert` (column, JSON value → canonical text; ``ValueError`` when it does not fit).
    """

    def __init__(self, options: SourceOptions, catalog: Optional[str], schema: Optional[str], table: str):
        self.types = options.column_types(catalog, schema, table)
        self.key_override = options.key_override(catalog, schema, table)
        super().__init__()

    def make_converter(self, col: str) -> Callable[[Any], Optional[str]]:
        """The converter of column ``col`` (:func:`ogg_converter` of its configured type)."""
        return ogg_converter(self.types.get(col))


def _present(image: Any) -> Any:
    """An image without its missing-column flags: a column whose ``<column>_isMissing``
    is ``true`` is left out (absent), and every flag of a column the image holds is dropped.
    Anything that is not an object is returned as it is (the reader reports it)."""
    if type(image) is not dict:
        return image
    flags = [k for k, v in image.items() if type(v) is bool and k.endswith(MISSING_SUFFIX)
             and k[:-len(MISSING_SUFFIX)] in image]
    if not flags:
        return image
    out = dict(image)
    for flag in flags:
        del out[flag]
        if image[flag]:
            out.pop(flag[:-len(MISSING_SUFFIX)], None)
    return out


class OggJsonParser(FormatParser):
    """Parser of ``ogg-json`` records: ``OggJsonParser(options).parse(KafkaRecord)``.

    Returns a list of one :class:`ChangeRecord`, or a :class:`ControlRecord` for a JSON schema
    document (``metadata``) and a Kafka tombstone. Raises :class:`ParseError` for a value that is
    not one JSON object, a missing or unknown ``op_type``, a missing or malformed ``table``, a
    ``pos`` that is not digits, an ``op_ts`` that is not a timestamp, an image that is not an
    object or lacks where the operation needs one, a value that does not fit its configured
    type, ``primary_keys`` that is not a list of names, no resolvable key, or a key column
    without a value.
    """

    format_name = FORMAT
    #: The names and the position first, then the key, then the images (they need the key).
    STEPS = ("table", "position", "column_types", "primary_key", "images")

    LEARNT = {"_fast_checked": lambda parser: set()}

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`): each value
        decoded with :data:`cdclake.formats.columnar.JSON` (msgspec) and read by the row steps
        :meth:`parse` runs (the default :meth:`~cdclake.formats.base.FormatParser.fast_group`),
        with the table plans kept per table (the converters of each column made once). An
        insert, update or delete whose images hold no ``_isMissing`` flag and whose change the
        pipeline accepts (:meth:`fast_check`) gives its change row; anything else (a JSON
        document msgspec refuses, a truncate, a schema document, any error) gives None:
        :meth:`parse` reads that record. One plan key (None); member ``(index, Event)``."""
        return self.json_event_members(records, _fast_event)

    def fast_check(self, change: ChangeRecord) -> None:
        """Raise where normalize would refuse the change (:func:`_check`)."""
        _check(change, self._fast_checked)

    def decode(self, record: KafkaRecord) -> Event:
        """The operation, a JSON object."""
        return Event(record, load_json(FORMAT, record.value))

    def control(self, event: Event) -> Optional[ParseResult]:
        """A JSON schema document (``$schema``) is a ``metadata`` control record; else ``op_type``."""
        msg = event.message
        if "$schema" in msg:
            title = msg.get("title")
            return ControlRecord("metadata", FORMAT, detail=title if isinstance(title, str) else None)
        event.op = known_operation(FORMAT, msg.get("op_type"), OPS, "op_type", "operation type", "I, U, D or T",
                                   blank_is_missing=True)
        return None

    def table(self, event: Event) -> None:
        """``table``: ``[CATALOG.]SCHEMA.TABLE`` (see :func:`split_table`)."""
        name = event.message.get("table")
        if not isinstance(name, str) or not name.strip():
            raise ParseError(FORMAT, "missing table name", "table")
        try:
            event.database, event.schema_name, event.table = split_table(name.strip())
        except ValueError as exc:
            raise ParseError(FORMAT, str(exc), "table") from None

    def position(self, event: Event) -> None:
        """``(pos)``, ``op_ts`` → ``ts_ms``, ``xid`` → ``tx_id``. Without ``pos`` (the formatter's
        ``includePosition=false``) the position is ``()`` and changes keep their Kafka order."""
        msg = event.message
        pos = msg.get("pos")
        event.position = () if pos is None else (element(FORMAT, pos, "pos"),)
        event.ts_ms = op_ts_ms(msg.get("op_ts"))
        xid = msg.get("xid")
        if xid is not None and (isinstance(xid, bool) or not isinstance(xid, (str, int))):
            raise ParseError(FORMAT, f"transaction id {xid!r} is not text", "xid")
        event.tx_id = None if xid is None else str(xid)

    def column_types(self, event: Event) -> None:
        """The configured ``column_types`` (the format carries none), kept per table."""
        event.plan = plan = self.kept((event.database, event.schema_name, event.table), _TablePlan, self.options,
                                      event.database, event.schema_name, event.table)
        event.types, event.convert = dict(plan.types), plan.convert

    def primary_key(self, event: Event) -> None:
        """Configured, else ``primary_keys``, else the Kafka key's columns (none needed by a truncate)."""
        carried = event.message.get("primary_keys")
        if carried is not None and (not isinstance(carried, list) or not all(isinstance(c, str) for c in carried)):
            raise ParseError(FORMAT, f"primary_keys {carried!r} is not a list of column names", "primary_keys")
        event.key = key = read_key(event.record.key)
        event.primary_key = resolve_primary_key(FORMAT, event.plan.key_override, carried or None,
                                                list(key[0]) if key else None, required=event.op != "truncate")

    def images(self, event: Event) -> None:
        """``before`` and ``after`` as the operation needs them (see the module docstring)."""
        op, msg, convert = event.op, event.message, event.convert
        if op == "truncate":
            return
        before = convert_image(FORMAT, _present(msg.get("before")), convert, "before")
        after = convert_image(FORMAT, _present(msg.get("after")), convert, "after")
        key_text = None
        if event.key and op in ("update", "delete"):
            key_text = convert_image(FORMAT, {c: v for c, v in event.key[0].items() if c in event.primary_key},
                                     convert, "key")
        if op == "insert":
            if after is None:
                raise ParseError(FORMAT, "insert carries no after image", "after")
            event.after = after
        elif op == "update":
            if after is None:
                raise ParseError(FORMAT, "update carries no after image", "after")
            for col in event.primary_key:
                if col not in after:
                    if before and col in before:
                        after[col] = before[col]
                    elif key_text and col in key_text:
                        after[col] = key_text[col]
            missing = [c for c in event.primary_key if c not in after]
            if missing:
                raise ParseError(FORMAT, f"update carries no value for key column(s) {', '.join(missing)} "
                                 "in 'after' or 'before'", "after")
            event.before, event.after = before, after
        else:
            if before is None:
                raise ParseError(FORMAT, "delete carries no before image", "before")
            event.before = key_delete_image(FORMAT, event.primary_key, before, key_text, "before", _DELETE_HINT)


def op_ts_ms(value: Any) -> Optional[int]:
    """``op_ts`` (``YYYY-MM-DD HH:MM:SS[.f]``, UTC; ISO forms and GoldenGate's ``:`` after the date
    accepted) as ms since the epoch; None when absent. Raises :class:`ParseError` naming ``op_ts``."""
    if value is None:
        return None
    try:
        if not isinstance(value, str):
            raise ValueError("not text")
        ts = parse_timestamp(ogg_datetime(value))
    except ValueError:
        raise ParseError(FORMAT, f"op_ts {value!r} is not a timestamp", "op_ts") from None
    return None if ts is None else utc_ms(ts)


def _fast_event(record: KafkaRecord, msg: dict) -> Optional[Event]:
    """The :class:`Event` of an insert, update or delete whose images hold no ``_isMissing`` flag;
    None for another message (a truncate, a schema document ...)."""
    if OPS.get(msg.get("op_type")) in (None, "truncate") or "$schema" in msg:
        return None
    if any(type(im) is dict and any(k.endswith(MISSING_SUFFIX) for k in im) for im in (msg.get("before"), msg.get("after"))):
        return None
    return Event(record, msg)


def _check(c: ChangeRecord, checked: set) -> None:
    """Raise where normalize would refuse the change (its names, a key column missing or null in
    the image that keys it): the fast path then leaves the record to :meth:`OggJsonParser.parse`.
    ``checked`` keeps the names already checked (up to 4096 sets of them)."""
    names = (c.source_database, c.source_schema, c.source_table, tuple(c.primary_key), tuple(c.before or ()),
             tuple(c.after or ()), tuple(c.column_types))
    if names not in checked:
        check_names(c)
        if len(checked) < 4096:
            checked.add(names)
    image = c.before if c.op == "delete" else c.after
    if not c.primary_key or image is None or any(image.get(k) is None for k in c.primary_key):
        raise ValueError("key column missing or null")


__all__ = ["FORMAT", "OPS", "OggJsonParser", "ogg_converter", "ogg_datetime", "op_ts_ms", "split_table"]
