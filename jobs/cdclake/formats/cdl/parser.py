"""``cdl-json``: Huawei MRS CDL JSON (``message_version`` 1.0), with or without the Connect schema.

Implements "Huawei MRS: CDL JSON and Open-Source Debezium JSON" (section *Data Formats*, Table 1
"Data format changes" and the CDL JSON sample). A CDL data synchronization task writes each
database change as one Kafka record, a Kafka Connect JSON document ``{"schema", "payload"}``
whose payload holds:

=========================  =================================================================
payload field              read as
=========================  =================================================================
``DATA_STORE``             the source connector type (``POSTGRESQL`` ...): not a name, not kept
``SEG_OWNER``              the schema → ``source_schema``
``TABLE_NAME``             the table → ``source_table`` (``source_database`` is None: CDL JSON
                           1.0 carries no database name)
``TIMESTAMP``              the change time, ms since the epoch (Connect ``Timestamp``) →
                           ``source_ts_ms`` and the second position element
``OPERATION``              ``INSERT`` → insert, ``UPDATE`` → update, ``DELETE`` → delete
``transaction.properties`` ``[{"name", "value"}, ...]``: ``lsn`` (the log serial number: an
                           integer, digit text or PostgreSQL ``X/Y`` text) and ``txId`` → ``tx_id``
``unique``                 the primary key: its field names, in order, are the key columns and its
                           values key a delete whose ``before`` lacks them
``data``, ``before``       after and before images
``LOB_COLUMNS``            names of large-object columns: their values are read like any other
``message_version``        ``"1.0"`` here (absent: read as 1.0); ``"2.0"`` is the Debezium flavour,
                           read by ``debezium-json`` (:class:`ParseError` naming ``message_version``)
``message_type``,          ``message_type`` other than ``"0"`` marks a heartbeat; so does a payload
``HEARTBEAT_IDENTIFIER``   with no ``OPERATION``, no ``TABLE_NAME`` and no images but a
                           ``HEARTBEAT_IDENTIFIER``. Data messages carry the identifier too (the
                           document's INSERT sample does, with ``message_type`` ``"0"``), so its
                           presence alone does not make a heartbeat.
=========================  =================================================================

Position: ``(lsn, TIMESTAMP)`` — CDL orders changes by LSN, then by time; a message without an
``lsn`` property has 0 there. ``tx_seq`` is not carried (None).

Types come from the schema's ``data``/``before`` structs (and ``unique`` for key values), with the
Kafka Connect mapping of :func:`cdclake.formats.connect.connect_type` (``int32`` → int,
``int64`` → bigint, ``bytes`` → binary (Base64 text), ``org.apache.kafka.connect.data.Timestamp``
ms → UTC timestamp, ``Date`` days → date ...). CDL's own logical types (``com.<vendor>.cdc.data.*``,
e.g. ``com.xxx.cdc.data.Decimal``, a decimal sent as a string, or the string ``timestamp``) carry
no precision: such a column takes its type from ``column_types`` when configured, else from
``parameters`` (``scale`` and ``connect.decimal.precision`` or ``precision``) when the schema gives
them, else it is ``string``; a Decimal's value is checked and written as a plain decimal (no
exponent) whatever its type.

Options: those of :class:`cdclake.formats.options.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``); configured types also type the columns of messages sent
without a schema. Primary key: configured → ``unique`` → Kafka key (a JSON object) → ParseError.
"""
from __future__ import annotations

from decimal import Decimal
from typing import Any, Callable, Iterator, Mapping, Optional

from cdclake.formats.base import Event
from cdclake.formats.columnar import NO_MAP, convert_images, envelope_payloads, row_maker
from cdclake.formats.connect import (ConnectJsonParser, connect_converter, connect_text, connect_type,
                                     struct_fields)
from cdclake.formats.fields import element, json_object, table_name
from cdclake.formats.json_values import read_key
from cdclake.formats.options import SourceOptions, key_delete_image, resolve_primary_key
from cdclake.formats.text import coerce_text, convert_image, finite_decimal, text_converter
from cdclake.names import check_names
from cdclake.positions import MAX_ELEMENT, pg_lsn
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import normalize_type, to_text

FORMAT = "cdl-json"
#: The fast path's change row of a record.
_ROW = row_maker("source_schema", "source_table", "op", "before", "after", "primary_key", "column_types",
                 "source_position", "source_ts_ms", "tx_id", source_format=FORMAT, source_database=None)
OPS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
#: Suffix of CDL's string-encoded decimal logical type (``com.xxx.cdc.data.Decimal`` in the document).
CDL_DECIMAL_SUFFIX = ".cdc.data.Decimal"
_CDL_LOGICAL_MARK = ".cdc.data."
_DELETE_HINT = "neither 'before' nor 'unique' nor the Kafka key carries them"
_UNSET = object()


def is_cdl_logical(schema: Mapping[str, Any]) -> bool:
    """True for CDL's own logical types (``com.<vendor>.cdc.data.<Name>``), which carry no precision."""
    name = schema.get("name")
    return isinstance(name, str) and _CDL_LOGICAL_MARK in name


def cdl_type(schema: Mapping[str, Any], configured: Optional[str] = None) -> str:
    """Canonical type of one column's Connect field schema in a CDL message.

    CDL logical types (:func:`is_cdl_logical`) take ``configured`` (the column's
    ``column_types`` entry) when given; a CDL ``Decimal`` with ``parameters`` (``scale``, and
    ``connect.decimal.precision`` or ``precision``, default 38) is ``decimal(p,s)``; otherwise
    they are ``string``. Every other schema maps as :func:`cdclake.formats.connect.connect_type`.
    """
    if not is_cdl_logical(schema):
        return connect_type(schema)
    if configured:
        return configured
    params = schema.get("parameters") or {}
    if str(schema.get("name")).endswith(CDL_DECIMAL_SUFFIX) and isinstance(params, Mapping) and "scale" in params:
        precision = params.get("connect.decimal.precision", params.get("precision", 38))
        return normalize_type(f"decimal({precision},{params['scale']})")
    return "string"


def cdl_text(value: Any, schema: Mapping[str, Any], ctype: str) -> Optional[str]:
    """Canonical text of one value described by its field schema, as a column of type ``ctype``.

    A CDL ``Decimal`` must be a decimal number (string or JSON number): it is written without
    exponent (``"1.5E+3"`` → ``1500``) and padded to a configured decimal type's scale. Other CDL
    logical types are read as ``ctype`` (:func:`cdclake.formats.text.coerce_text`); Connect
    types as :func:`cdclake.formats.connect.connect_text`. Raises ``ValueError`` when the value
    does not fit.
    """
    if value is None:
        return None
    if not is_cdl_logical(schema):
        return connect_text(value, schema)
    if str(schema.get("name")).endswith(CDL_DECIMAL_SUFFIX):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{value!r} is not a decimal number")
        number = finite_decimal(value)
        return coerce_text(format(number, "f"), ctype if ctype.startswith("decimal") else "string")
    return coerce_text(value, ctype)


def transaction_properties(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``transaction.properties`` as ``{name: value}`` (``{}`` when there is no transaction block).

    The document's form is a list of ``{"name", "value"}`` objects; an object ``{name: value}``
    is accepted too. Raises :class:`ParseError` naming ``transaction.properties`` for any other
    shape.
    """
    transaction = payload.get("transaction")
    if transaction is None:
        return {}
    props = json_object(FORMAT, transaction, "transaction").get("properties")
    if props is None:
        return {}
    if isinstance(props, dict):
        return dict(props)
    if not isinstance(props, list):
        raise ParseError(FORMAT, f"expected a list of {{name, value}} objects, got {type(props).__name__}",
                         "transaction.properties")
    out: dict[str, Any] = {}
    for i, prop in enumerate(props):
        if not isinstance(prop, dict) or not isinstance(prop.get("name"), str):
            raise ParseError(FORMAT, f"entry {i} is not a {{name, value}} object: {prop!r}", "transaction.properties")
        out[prop["name"]] = prop.get("value")
    return out


def source_position(payload: Mapping[str, Any], props: Mapping[str, Any]) -> tuple[int, int]:
    """``(lsn, TIMESTAMP)``: the LSN from ``transaction.properties`` (0 when absent), then the
    change time in ms. Raises :class:`ParseError` naming ``transaction.properties.lsn`` or
    ``TIMESTAMP`` when one cannot be read (``TIMESTAMP`` is required)."""
    lsn = 0
    if props.get("lsn") is not None:
        try:
            lsn = pg_lsn(props["lsn"])
            if not 0 <= lsn <= MAX_ELEMENT:
                raise ValueError(f"LSN {props['lsn']!r} is out of range")
        except (ValueError, TypeError) as exc:
            raise ParseError(FORMAT, f"cannot read LSN: {exc}", "transaction.properties.lsn") from None
    return lsn, timestamp_ms(payload)


def timestamp_ms(payload: Mapping[str, Any]) -> int:
    """The payload's ``TIMESTAMP`` (ms since the epoch). Raises :class:`ParseError` naming
    ``TIMESTAMP`` when it is missing or not a non-negative integer."""
    ts = payload.get("TIMESTAMP")
    if ts is None:
        raise ParseError(FORMAT, "missing change time", "TIMESTAMP")
    return element(FORMAT, ts, "TIMESTAMP")


def _heartbeat(payload: Mapping[str, Any]) -> Optional[ControlRecord]:
    """The heartbeat control record a payload stands for, or None (see the module docstring)."""
    message_type = payload.get("message_type")
    detail = payload.get("HEARTBEAT_IDENTIFIER")
    detail = None if detail is None else str(detail)
    names = dict(source_schema=payload.get("SEG_OWNER") or None, source_table=payload.get("TABLE_NAME") or None)
    if message_type is not None and str(message_type) != "0":
        return ControlRecord("heartbeat", FORMAT, **names, detail=detail)
    if (payload.get("OPERATION") is None and detail is not None and not payload.get("TABLE_NAME")
            and payload.get("data") is None and payload.get("before") is None):
        return ControlRecord("heartbeat", FORMAT, **names, detail=detail)
    return None


class _Typed:
    """The column types of one record and its converters.

    ``types``: per column of the ``data``/``before`` structs :func:`cdl_type` (the configured type
    for CDL logical types), then the configured ``column_types``; :meth:`convert` (column, JSON
    value → canonical text) and :meth:`convert_key` (the same for ``unique`` and Kafka key values,
    typed by the ``unique`` struct where the images' structs do not type the column). Raises
    :class:`ParseError` naming ``schema.<column>`` for an unreadable field schema.
    """

    def __init__(self, schema: Optional[dict], configured: Mapping[str, str]):
        self.col_schemas = col_schemas = struct_fields(schema, ("data", "before"))
        self.unique_schemas = unique_schemas = struct_fields(schema, ("unique",))
        self.configured = configured
        self.types: dict[str, str] = {}
        for col, col_schema in {**unique_schemas, **col_schemas}.items():
            try:
                ctype = cdl_type(col_schema, configured.get(col))
            except (ValueError, TypeError, AttributeError) as exc:
                raise ParseError(FORMAT, f"unreadable field schema {col_schema!r}: {exc}", f"schema.{col}") from None
            if col in col_schemas:
                self.types[col] = ctype
        for col, ctype in configured.items():
            self.types.setdefault(col, ctype)

    def convert(self, col: str, value: Any) -> Optional[str]:
        """Canonical text of an image value (``ValueError`` when it does not fit)."""
        if col in self.col_schemas:
            return cdl_text(value, self.col_schemas[col], self.types[col])
        return coerce_text(value, self.types[col]) if col in self.types else to_text(value)

    def convert_key(self, col: str, value: Any) -> Optional[str]:
        """Canonical text of a ``unique`` or Kafka key value (``ValueError`` when it does not fit)."""
        if col in self.unique_schemas and col not in self.col_schemas:
            schema = self.unique_schemas[col]
            return cdl_text(value, schema, cdl_type(schema, self.configured.get(col)))
        return self.convert(col, value)


class CdlJsonParser(ConnectJsonParser):
    """Parser of ``cdl-json`` records: ``CdlJsonParser(options).parse(KafkaRecord)``.

    Returns one :class:`ChangeRecord` in a list, or a :class:`ControlRecord` for a Kafka tombstone
    (value None/empty, or an envelope with a null payload) and for a heartbeat. Raises
    :class:`ParseError` for unreadable JSON (field ``value``), a payload that is not an object
    (``payload``), ``message_version`` 2.0 (``message_version``: use ``debezium-json``), a missing
    or unknown ``OPERATION``, a missing ``TABLE_NAME`` or ``TIMESTAMP``, unreadable
    ``transaction.properties``, images that are not objects or values that do not fit their schema
    (``data.<col>``, ``before.<col>``, ``unique.<col>``), no resolvable primary key
    (``primary_key``), an insert or update without ``data`` (``data``) or a delete whose key
    cannot be found (``before``).
    """

    format_name = FORMAT

    def fast_members(self, records: list[KafkaRecord]) -> Iterator[tuple[Any, tuple]]:
        """The columnar fast path (:meth:`~cdclake.formats.base.FormatParser.fast_parse`) for row
        changes whose envelope the value reader has met (a record read whole first teaches it): a
        payload (an object) with ``message_version`` ``"1.0"`` or none, ``message_type`` ``"0"`` or
        none, an ``OPERATION`` of INSERT, UPDATE or DELETE (any case, blanks around), a text
        ``TABLE_NAME``, ``unique`` an object or null, and ``data``/``before`` images null or holding
        exactly the columns of the schema's ``data``/``before`` structs in their order. Records are
        grouped per envelope, schema and table; each image column is converted over the group by the
        converter of the column's field schema (what :meth:`parse` gives, value for value). The
        position, the transaction id, the primary key, a delete's key image (``unique`` and Kafka key
        values) and the names go through the functions :meth:`parse` calls. Anything else (heartbeats,
        other versions, messages without a schema, images of another shape, any value a converter
        refuses, anything those functions refuse) gives None: :meth:`parse` reads that record. Plan key
        ``(envelope id, SEG_OWNER, TABLE_NAME)``; member ``(index, payload, op, Connect schema)``."""
        for i, payload, schema, envelope in envelope_payloads(self._reader, records):
            if type(payload) is not dict:
                continue
            version, message_type = payload.get("message_version"), payload.get("message_type")
            if (version is not None and version != "1.0") or (message_type is not None and message_type != "0"):
                continue
            operation = payload.get("OPERATION")
            if type(operation) is not str:
                continue
            op = OPS.get(operation) or OPS.get(operation.strip().upper())
            table, owner = payload.get("TABLE_NAME"), payload.get("SEG_OWNER")
            if op is None or type(table) is not str or not table:
                continue
            schema_name = owner if type(owner) is str and owner else None
            yield (envelope, schema_name, table), (i, payload, op, schema)

    def fast_group(self, records: list[KafkaRecord], key: Any, members: list[tuple], out: list) -> None:
        """The changes of one table plan's records (``members``: index, payload, op, Connect schema: one
        envelope's) into ``out``."""
        envelope, schema_name, table = key
        schema = members[0][3]
        try:
            plan = self.kept(("fast",) + key, _FastPlan, self.options, schema, schema_name, table)
        except Exception:  # noqa: BLE001  (an unreadable field schema: parse() reports it)
            return
        columns, names = plan.columns, plan.names
        if not columns:
            return
        afters, after_refused = convert_images([m[1].get("data") for m in members], columns, plan.converters)
        befores, before_refused = convert_images([m[1].get("before") for m in members], columns, plan.converters)
        override, types_pair, key_reader = plan.key_override, plan.types_pair, self._key_reader
        for j, (i, payload, op, _) in enumerate(members):
            if j in after_refused or j in before_refused:
                continue
            after, before = afters[j], befores[j]
            if after is None and op != "delete":
                continue
            unique = payload.get("unique")
            if unique is not None and type(unique) is not dict:
                continue
            try:
                props = transaction_properties(payload)
                position = source_position(payload, props)
                tx_id = props.get("txId")
                carried = list(unique) if unique else None
                read = (read_key(records[i].key, key_reader) if op == "delete" or not (override or carried)
                        else None)
                pk = resolve_primary_key(FORMAT, override, carried, list(read[0]) if read else None)
                if op == "delete":
                    convert_key = plan.typed.convert_key
                    key_text = convert_image(FORMAT, unique, convert_key, "unique") if unique else None
                    if read:
                        key_text = {**convert_image(FORMAT, read[0], convert_key, "key"), **(key_text or {})}
                    image = key_delete_image(FORMAT, pk, None if before is None else dict(zip(names, before)),
                                             key_text, "before", _DELETE_HINT)
                    before_pair, after_pair = (list(image), list(image.values())), NO_MAP
                else:
                    at = plan.key_at(pk)
                    if at is None or any(after[k] is None for k in at):
                        continue
                    before_pair, after_pair = (NO_MAP if before is None else (names, before)), (names, after)
                if not plan.names_pass(schema_name, table, pk):
                    continue
            except Exception:  # noqa: BLE001  (the per-record parser reports it)
                continue
            out[i] = [_ROW(schema_name, table, op, before_pair, after_pair, pk, types_pair, list(position), position[1],
                           None if tx_id is None else str(tx_id))]

    def control(self, event: Event) -> Optional[ParseResult]:
        """``message_version`` 1.0 only; heartbeats; else the ``OPERATION``."""
        payload = event.message
        version = payload.get("message_version")
        if version is not None and str(version) != "1.0":
            if str(version) == "2.0":
                raise ParseError(FORMAT, "message_version 2.0 is the Debezium flavour of CDL: "
                                 "read this topic with format debezium-json", "message_version")
            raise ParseError(FORMAT, f"unknown message_version {version!r} (expected 1.0)", "message_version")
        heartbeat = _heartbeat(payload)
        if heartbeat is not None:
            return heartbeat
        operation = payload.get("OPERATION")
        if operation is None:
            raise ParseError(FORMAT, "missing operation", "OPERATION")
        if not isinstance(operation, str) or operation.strip().upper() not in OPS:
            raise ParseError(FORMAT, f"unknown operation {operation!r} (expected INSERT, UPDATE or DELETE)",
                             "OPERATION")
        event.op = OPS[operation.strip().upper()]
        return None

    def table(self, event: Event) -> None:
        """``TABLE_NAME`` and ``SEG_OWNER`` (no database)."""
        event.table = table_name(FORMAT, event.message.get("TABLE_NAME"), "TABLE_NAME")
        owner = event.message.get("SEG_OWNER")
        event.schema_name = owner if isinstance(owner, str) and owner else None

    def column_types(self, event: Event) -> None:
        """The record's types and converters (:class:`_Typed`)."""
        event.plan = typed = _Typed(event.schema, self.options.column_types(None, event.schema_name, event.table))
        event.types, event.convert = typed.types, typed.convert

    def images(self, event: Event) -> None:
        """``data`` (after) and ``before``; an insert or update needs ``data``, a delete has none."""
        op, payload = event.op, event.message
        event.after = convert_image(FORMAT, payload.get("data"), event.convert, "data")
        event.before = convert_image(FORMAT, payload.get("before"), event.convert, "before")
        if op in ("insert", "update") and event.after is None:
            raise ParseError(FORMAT, f"{op} has no after image", "data")
        if op == "delete":
            event.after = None

    def primary_key(self, event: Event) -> None:
        """Configured, else ``unique``, else the Kafka key's columns; a delete's key values from
        its ``before``, ``unique`` or Kafka key."""
        unique = event.message.get("unique")
        if unique is not None and not isinstance(unique, dict):
            raise ParseError(FORMAT, f"unique is a JSON {type(unique).__name__}, not an object", "unique")
        key = read_key(event.record.key, self._key_reader)
        event.primary_key = resolve_primary_key(
            FORMAT, self.options.key_override(None, event.schema_name, event.table), list(unique) if unique else None,
            list(key[0]) if key else None)
        if event.op == "delete":
            convert_key = event.plan.convert_key
            key_text = convert_image(FORMAT, unique, convert_key, "unique") if unique else None
            if key:
                key_text = {**convert_image(FORMAT, key[0], convert_key, "key"), **(key_text or {})}
            event.before = key_delete_image(FORMAT, event.primary_key, event.before, key_text, "before", _DELETE_HINT)

    def position(self, event: Event) -> None:
        """``(lsn, TIMESTAMP)`` (:func:`source_position`), ``TIMESTAMP`` and ``txId``."""
        props = transaction_properties(event.message)
        tx_id = props.get("txId")
        event.position = source_position(event.message, props)
        event.ts_ms = event.position[1]
        event.tx_id = None if tx_id is None else str(tx_id)


def _decimal_converter(schema: Mapping[str, Any], ctype: str) -> Callable[[Any], Optional[str]]:
    """:func:`cdl_text` for a CDL ``Decimal`` field schema of type ``ctype`` as a function of the value
    (same results and errors): decimal text written directly, anything else through :func:`cdl_text`."""
    text = text_converter(ctype if ctype.startswith("decimal") else "string")

    def decimal(v: Any) -> Optional[str]:
        if type(v) is str:
            try:
                number = Decimal(v.strip())
            except ArithmeticError:
                return cdl_text(v, schema, ctype)
            if number.is_finite():
                return text(format(number, "f"))
        return cdl_text(v, schema, ctype)
    return decimal


def _converter(typed: _Typed, col: str) -> Callable[[Any], Optional[str]]:
    """The converter of image column ``col`` (JSON value → canonical text): ``typed.convert(col, v)``
    for every value, errors included."""
    schema = typed.col_schemas.get(col)
    if schema is None:
        return text_converter(typed.types[col]) if col in typed.types else to_text
    if not is_cdl_logical(schema):
        return connect_converter(schema)
    if str(schema.get("name")).endswith(CDL_DECIMAL_SUFFIX):
        return _decimal_converter(schema, typed.types[col])
    return text_converter(typed.types[col])


class _FastPlan:
    """What the fast path derives from one envelope schema for one table, made once.

    ``typed`` (the :class:`_Typed` :meth:`CdlJsonParser.parse` makes for such a record),
    ``columns`` (the columns of the ``data``/``before`` structs, in order) and their
    ``converters``, ``types_pair`` (the column types as a (keys, values) pair), ``key_override``
    (the configured key or None), and per primary key the indices of its columns (``at``) and
    whether its names pass :func:`cdclake.names.check_names` (``checked``). Raises
    :class:`ParseError` as :class:`_Typed` does.
    """

    def __init__(self, options: SourceOptions, schema: Optional[dict], schema_name: Optional[str], table: str):
        self.typed = typed = _Typed(schema, options.column_types(None, schema_name, table))
        self.columns = tuple(typed.col_schemas)
        self.names = list(self.columns)
        self.converters = [_converter(typed, c) for c in self.columns]
        self.types_pair = (list(typed.types), list(typed.types.values()))
        self.key_override = options.key_override(None, schema_name, table)
        self.at: dict[tuple, Optional[list[int]]] = {}
        self.checked: dict[tuple, bool] = {}

    def names_pass(self, schema_name: Optional[str], table: str, pk: list) -> bool:
        """Whether a change of this plan with primary key ``pk`` passes :func:`check_names`: the names
        it carries are the schema, the table, ``pk`` and the column types' (its images' columns are
        among those)."""
        key = tuple(pk)
        ok = self.checked.get(key)
        if ok is None:
            try:
                check_names(ChangeRecord(FORMAT, None, schema_name, table, "insert", None, None, list(pk),
                                         self.typed.types))
                ok = True
            except Exception:  # noqa: BLE001
                ok = False
            if len(self.checked) < 4096:
                self.checked[key] = ok
        return ok

    def key_at(self, pk: list) -> Optional[list[int]]:
        """The indices of ``pk``'s columns in :attr:`columns` (None when one is not a column)."""
        key = tuple(pk)
        at = self.at.get(key, _UNSET)
        if at is _UNSET:
            at = [self.names.index(k) for k in pk] if set(pk) <= set(self.names) else None
            if len(self.at) < 4096:
                self.at[key] = at
        return at


