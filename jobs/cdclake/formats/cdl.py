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
Kafka Connect mapping of :func:`cdclake.formats.debezium.connect_type` (``int32`` → int,
``int64`` → bigint, ``bytes`` → binary (Base64 text), ``org.apache.kafka.connect.data.Timestamp``
ms → UTC timestamp, ``Date`` days → date ...). CDL's own logical types (``com.<vendor>.cdc.data.*``,
e.g. ``com.xxx.cdc.data.Decimal``, a decimal sent as a string, or the string ``timestamp``) carry
no precision: such a column takes its type from ``column_types`` when configured, else from
``parameters`` (``scale`` and ``connect.decimal.precision`` or ``precision``) when the schema gives
them, else it is ``string``; a Decimal's value is checked and written as a plain decimal (no
exponent) whatever its type.

Options: those of :class:`cdclake.formats._common.SourceOptions` (``primary_key``,
``primary_keys``, ``column_types``); configured types also type the columns of messages sent
without a schema. Primary key: configured → ``unique`` → Kafka key (a JSON object) → ParseError.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any, Mapping, Optional

from cdclake.formats._common import (
    LearningParser,
    coerce_text,
    convert_image,
    key_delete_image,
    read_key,
    resolve_primary_key,
)
from cdclake.formats.debezium import connect_text, connect_type
from cdclake.positions import MAX_ELEMENT, as_element, pg_lsn
from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError, ParseResult
from cdclake.types import normalize_type, to_text

FORMAT = "cdl-json"
OPS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
#: Suffix of CDL's string-encoded decimal logical type (``com.xxx.cdc.data.Decimal`` in the document).
CDL_DECIMAL_SUFFIX = ".cdc.data.Decimal"
_CDL_LOGICAL_MARK = ".cdc.data."
_DELETE_HINT = "neither 'before' nor 'unique' nor the Kafka key carries them"


def is_cdl_logical(schema: Mapping[str, Any]) -> bool:
    """True for CDL's own logical types (``com.<vendor>.cdc.data.<Name>``), which carry no precision."""
    name = schema.get("name")
    return isinstance(name, str) and _CDL_LOGICAL_MARK in name


def cdl_type(schema: Mapping[str, Any], configured: Optional[str] = None) -> str:
    """Canonical type of one column's Connect field schema in a CDL message.

    CDL logical types (:func:`is_cdl_logical`) take ``configured`` (the column's
    ``column_types`` entry) when given; a CDL ``Decimal`` with ``parameters`` (``scale``, and
    ``connect.decimal.precision`` or ``precision``, default 38) is ``decimal(p,s)``; otherwise
    they are ``string``. Every other schema maps as :func:`cdclake.formats.debezium.connect_type`.
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
    logical types are read as ``ctype`` (:func:`cdclake.formats._common.coerce_text`); Connect
    types as :func:`cdclake.formats.debezium.connect_text`. Raises ``ValueError`` when the value
    does not fit.
    """
    if value is None:
        return None
    if not is_cdl_logical(schema):
        return connect_text(value, schema)
    if str(schema.get("name")).endswith(CDL_DECIMAL_SUFFIX):
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{value!r} is not a decimal number")
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            raise ValueError(f"{value!r} is not a decimal number") from None
        if not number.is_finite():
            raise ValueError(f"{value!r} is not a finite decimal number")
        return coerce_text(format(number, "f"), ctype if ctype.startswith("decimal") else "string")
    return coerce_text(value, ctype)


def _struct_fields(schema: Optional[Mapping[str, Any]], names: tuple[str, ...]) -> dict[str, dict]:
    """Column → field schema of the envelope schema's structs named ``names`` (first one wins)."""
    out: dict[str, dict] = {}
    env_fields = (schema or {}).get("fields")
    for env_field in env_fields if isinstance(env_fields, list) else []:
        if isinstance(env_field, dict) and env_field.get("field") in names:
            cols = env_field.get("fields")
            for col in cols if isinstance(cols, list) else []:
                if isinstance(col, dict) and isinstance(col.get("field"), str):
                    out.setdefault(col["field"], col)
    return out


def transaction_properties(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``transaction.properties`` as ``{name: value}`` (``{}`` when there is no transaction block).

    The document's form is a list of ``{"name", "value"}`` objects; an object ``{name: value}``
    is accepted too. Raises :class:`ParseError` naming ``transaction.properties`` for any other
    shape.
    """
    transaction = payload.get("transaction")
    if transaction is None:
        return {}
    if not isinstance(transaction, dict):
        raise ParseError(FORMAT, f"transaction is a JSON {type(transaction).__name__}, not an object", "transaction")
    props = transaction.get("properties")
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
    try:
        return as_element(ts, "TIMESTAMP")
    except ValueError as exc:
        raise ParseError(FORMAT, str(exc), "TIMESTAMP") from None


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


class CdlJsonParser(LearningParser):
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

    def parse(self, record: KafkaRecord) -> ParseResult:
        """Parse one Kafka record (see the class docstring for results and errors)."""
        if not record.value:
            return ControlRecord("tombstone", FORMAT, detail=_key_detail(record.key))
        payload, schema, _ = self._reader.load(record.value)
        if payload is None:
            return ControlRecord("tombstone", FORMAT, detail=_key_detail(record.key))
        if not isinstance(payload, dict):
            raise ParseError(FORMAT, f"payload is a JSON {type(payload).__name__}, not an object", "payload")
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
        return [self._change(record, payload, schema, OPS[operation.strip().upper()])]

    def _change(self, record: KafkaRecord, payload: dict, schema: Optional[dict], kind: str) -> ChangeRecord:
        table = payload.get("TABLE_NAME")
        if not isinstance(table, str) or not table:
            raise ParseError(FORMAT, "missing table name", "TABLE_NAME")
        owner = payload.get("SEG_OWNER")
        owner = owner if isinstance(owner, str) and owner else None

        col_schemas = _struct_fields(schema, ("data", "before"))
        unique_schemas = _struct_fields(schema, ("unique",))
        configured = self.options.column_types(None, owner, table)
        types: dict[str, str] = {}
        for col, col_schema in {**unique_schemas, **col_schemas}.items():
            try:
                ctype = cdl_type(col_schema, configured.get(col))
            except (ValueError, TypeError, AttributeError) as exc:
                raise ParseError(FORMAT, f"unreadable field schema {col_schema!r}: {exc}", f"schema.{col}") from None
            if col in col_schemas:
                types[col] = ctype
        for col, ctype in configured.items():
            types.setdefault(col, ctype)

        def convert(col: str, value: Any) -> Optional[str]:
            if col in col_schemas:
                return cdl_text(value, col_schemas[col], types[col])
            return coerce_text(value, types[col]) if col in types else to_text(value)

        def convert_key(col: str, value: Any) -> Optional[str]:
            if col in unique_schemas and col not in col_schemas:
                return cdl_text(value, unique_schemas[col], cdl_type(unique_schemas[col], configured.get(col)))
            return convert(col, value)

        after = convert_image(FORMAT, payload.get("data"), convert, "data")
        before = convert_image(FORMAT, payload.get("before"), convert, "before")
        if kind in ("insert", "update") and after is None:
            raise ParseError(FORMAT, f"{kind} has no after image", "data")

        unique = payload.get("unique")
        if unique is not None and not isinstance(unique, dict):
            raise ParseError(FORMAT, f"unique is a JSON {type(unique).__name__}, not an object", "unique")
        key = read_key(record.key, self._key_reader)
        primary_key = resolve_primary_key(
            FORMAT, self.options.key_override(None, owner, table), list(unique) if unique else None,
            list(key[0]) if key else None)
        if kind == "delete":
            key_text = convert_image(FORMAT, unique, convert_key, "unique") if unique else None
            if key:
                key_text = {**convert_image(FORMAT, key[0], convert_key, "key"), **(key_text or {})}
            before = key_delete_image(FORMAT, primary_key, before, key_text, "before", _DELETE_HINT)

        props = transaction_properties(payload)
        tx_id = props.get("txId")
        position = source_position(payload, props)
        return ChangeRecord(
            source_format=FORMAT,
            source_database=None,
            source_schema=owner,
            source_table=table,
            op=kind,
            before=before,
            after=after if kind != "delete" else None,
            primary_key=primary_key,
            column_types=types,
            source_position=position,
            source_ts_ms=position[1],
            tx_id=None if tx_id is None else str(tx_id),
        )


def _key_detail(key: Optional[bytes]) -> Optional[str]:
    """The Kafka key as text, for the detail of a tombstone."""
    return key.decode("utf-8", errors="replace") if key else None
