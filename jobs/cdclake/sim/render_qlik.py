"""Rendering a simulated history as Qlik Replicate's Kafka target would write it (JSON or Avro).

Follows Qlik Replicate's "Metadata and data messages" and "The Replicate envelope" with metadata
messages published into the same topic as the data (one topic for all tables):

1. One metadata message (envelope ``type`` ``MD``) per table before any data: ``schemaId`` (32
   upper-case hex digits), ``lineage`` (server, task, schema = the database, table,
   ``tableVersion`` 1, timestamp), ``tableStructure.tableColumns`` (ordinal from 1, Qlik type,
   length, precision, scale, ``primaryKeyPosition``, nullable) and ``dataSchema`` (the Avro
   schema of the table's data messages). Kafka key: the ``schemaId``.
2. The bulk load at the start as full load: one ``REFRESH`` data message per row, without change
   sequence, timestamp, stream position, transaction or masks (all empty or null).
3. Every streamed change as one ``INSERT``/``UPDATE``/``DELETE`` data message: ``changeSequence``
   = commit time ``YYYYMMDDhhmmss`` followed by a 21-digit task-wide change counter (35 digits,
   strictly increasing), ``timestamp`` = commit time (UTC, ms), ``streamPosition`` =
   ``binlog file:position:row``, ``transactionId`` (32 hex digits from the GTID sequence),
   ``transactionEventCounter`` (from 1 within the transaction), ``transactionLastEvent``,
   ``changeMask`` (INSERT: all columns; UPDATE: the changed ones; DELETE: the key) and
   ``columnMask`` (all columns; with ``minimal_logging`` only the key and the changed columns
   for UPDATE and the key for DELETE, as from a source without full supplemental logging: the
   other columns are sent as null with their bit clear). UPDATE carries ``beforeData``; DELETE
   carries the deleted row in ``data``. Kafka key: the primary-key values joined by ``+`` (this
   rendering's choice; the parsers do not read keys).
4. Right after the middle transaction, a second metadata message for ``version_change_table``
   (``tableVersion`` 2, a new ``schemaId``, same columns): that table's later data messages name
   the new id.

Masks are little-endian hex (JSON) or bytes (Avro): byte ``k`` holds the bits of ordinals
``8k+1``..``8k+8``, least significant bit first.

Values: JSON as the Kafka target's "Supported data types" table has them (numbers for integer
and floating types, text for NUMERIC/DATE/DATETIME, hexadecimal digits for BYTES); Avro with the
logical types (``decimal`` bytes, ``date``, ``timestamp-micros``). The Avro envelope is
:data:`cdclake.formats.qlik.ENVELOPE_SCHEMA` with ``magic`` ``atMSG``; an Avro metadata message
embeds its own Avro schema in ``messageSchema``; a data message names its schema in
``messageSchemaId``. Kafka timestamps: commit + :func:`delivery_delay_ms`, never decreasing;
partition ``crc32(key) % partitions``.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import re
import zlib
from typing import Any, Callable, Mapping, Optional, Sequence

from cdclake.formats.qlik import ENVELOPE_SCHEMA, MAGIC
from cdclake.sim.model import DATABASE, Table, Transaction
from cdclake.sim.render import Message, delivery_delay_ms
from cdclake.types import TIMESTAMP_TYPES, decimal_precision_scale

SERVER = "replicate-01"
TASK = "shop-to-kafka"
_ARGS_RE = re.compile(r"\((\d+)(?:\s*,\s*(\d+))?\)")
_INT_TYPES = {"smallint": ("INT2", 5), "int": ("INT4", 10), "bigint": ("INT8", 19)}
_SIMPLE_TYPES = {"boolean": "BOOLEAN", "float": "REAL4", "double": "REAL8", "string": "STRING",
                 "binary": "BYTES", "date": "DATE", "timestamp": "DATETIME",
                 "timestamp_ntz": "DATETIME"}
_AVRO_TYPES = {"smallint": "int", "int": "int", "bigint": "long", "boolean": "boolean", "float": "float",
               "double": "double", "string": "string", "binary": "bytes",
               "date": {"type": "int", "logicalType": "date"},
               "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
               "timestamp_ntz": {"type": "long", "logicalType": "timestamp-micros"}}
_HEADERS_SCHEMA = {
    "type": "record", "name": "Headers", "namespace": "com.attunity.queue.msg",
    "fields": [
        {"name": "operation", "type": {"type": "enum", "name": "operation",
                                       "symbols": ["INSERT", "UPDATE", "DELETE", "REFRESH"]}},
        {"name": "changeSequence", "type": "string"},
        {"name": "timestamp", "type": "string"},
        {"name": "streamPosition", "type": "string"},
        {"name": "transactionId", "type": "string"},
        {"name": "changeMask", "type": ["null", "bytes"], "default": None},
        {"name": "columnMask", "type": ["null", "bytes"], "default": None},
        {"name": "transactionEventCounter", "type": ["null", "long"], "default": None},
        {"name": "transactionLastEvent", "type": ["null", "boolean"], "default": None},
    ],
}
_COLUMN_PROPS = [{"name": n, "type": t} for n, t in (
    ("ordinal", "int"), ("type", "string"), ("length", "int"), ("precision", "int"), ("scale", "int"),
    ("primaryKeyPosition", "int"), ("nullable", "boolean"))]


def qlik_column_type(col) -> tuple[str, int, int, int]:
    """``(Qlik type, length, precision, scale)`` of a simulated column (from its canonical type and
    MySQL type text): bigint → INT8, int → INT4, decimal(p,s) → NUMERIC p,s, double → REAL8,
    varchar(n) → STRING n, varbinary(n) → BYTES n, date → DATE, datetime(f) → DATETIME scale f."""
    ctype = col.ctype
    m = _ARGS_RE.search(col.mysql_type or "")
    n = int(m.group(1)) if m else 0
    if ctype in _INT_TYPES:
        return _INT_TYPES[ctype][0], _INT_TYPES[ctype][1], 0, 0
    ps = decimal_precision_scale(ctype)
    if ps:
        return "NUMERIC", ps[0] + 2, ps[0], ps[1]
    qtype = _SIMPLE_TYPES.get(ctype, "STRING")
    if qtype in ("STRING", "BYTES"):
        return qtype, n, 0, 0
    if qtype == "DATETIME":
        return qtype, 0, 0, n
    return qtype, 0, 0, 0


def data_schema(table: Table) -> dict:
    """The Avro schema of ``table``'s data messages (``dataSchema``): ``data`` (every column a
    union with null), ``beforeData`` (null or ``Data``) and ``headers`` (``Headers``)."""
    fields = []
    for c in table.columns:
        ps = decimal_precision_scale(c.ctype)
        t = ({"type": "bytes", "logicalType": "decimal", "precision": ps[0], "scale": ps[1]}
             if ps else _AVRO_TYPES.get(c.ctype, "string"))
        fields.append({"name": c.name, "type": ["null", t]})
    return {"type": "record", "name": "DataRecord", "fields": [
        {"name": "data", "type": {"type": "record", "name": "Data", "fields": fields}},
        {"name": "beforeData", "type": ["null", "Data"], "default": None},
        {"name": "headers", "type": _HEADERS_SCHEMA},
    ]}


def metadata_schema(table: Table) -> dict:
    """The Avro schema of ``table``'s metadata message (embedded in ``messageSchema``):
    ``tableColumns`` is a record with one record-typed field per column."""
    cols = [{"name": c.name, "type": {"type": "record", "name": c.name, "namespace": "columns",
                                      "fields": _COLUMN_PROPS}} for c in table.columns]
    lineage = [{"name": n, "type": "string"} for n in ("server", "task", "schema", "table")]
    lineage[4:4] = [{"name": "tableVersion", "type": "long"}, {"name": "timestamp", "type": "string"}]
    return {"type": "record", "name": "MetadataMessage", "fields": [
        {"name": "schemaId", "type": "string"},
        {"name": "lineage", "type": {"type": "record", "name": "Lineage", "fields": lineage}},
        {"name": "tableStructure", "type": {"type": "record", "name": "TableStructure", "fields": [
            {"name": "tableColumns", "type": {"type": "record", "name": "TableColumns", "fields": cols}}]}},
        {"name": "dataSchema", "type": "string"},
    ]}


def schema_id(server: str, task: str, database: str, table: str, version: int) -> str:
    """The ``schemaId`` of one table version: 32 upper-case hex digits."""
    return hashlib.md5(f"{server}/{task}/{database}.{table}/{version}".encode()).hexdigest().upper()


def metadata_message(table: Table, sid: str, version: int, database: str, server: str, task: str,
                     when_ms: int) -> dict:
    """The metadata message of one table version (JSON-compatible values)."""
    pk = {k: i + 1 for i, k in enumerate(table.primary_key)}
    columns = {}
    for i, c in enumerate(table.columns):
        qtype, length, precision, scale = qlik_column_type(c)
        columns[c.name] = {"ordinal": i + 1, "type": qtype, "length": length, "precision": precision,
                           "scale": scale, "primaryKeyPosition": pk.get(c.name, 0), "nullable": bool(c.nullable)}
    return {
        "schemaId": sid,
        "lineage": {"server": server, "task": task, "schema": database, "table": table.name,
                    "tableVersion": version, "timestamp": _text_time(when_ms)},
        "tableStructure": {"tableColumns": columns},
        "dataSchema": json.dumps(data_schema(table), separators=(",", ":")),
    }


def mask_bytes(ordinals) -> bytes:
    """A little-endian column mask: byte ``k`` holds ordinals ``8k+1``..``8k+8`` (LSB first)."""
    ordinals = list(ordinals)
    n = sum(1 << (o - 1) for o in ordinals)
    return n.to_bytes(max((max(ordinals, default=1) + 7) // 8, 1), "little")


def _text_time(ms: int) -> str:
    t = _dt.datetime(1970, 1, 1) + _dt.timedelta(milliseconds=ms)
    return f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond // 1000:03d}"


def _transaction_id(tx: Transaction) -> str:
    seq = tx.gtid.rsplit(":", 1)[-1] if tx.gtid else ""
    if seq.isdigit():
        return f"{int(seq):032X}"
    return hashlib.md5(tx.tx_id.encode()).hexdigest().upper()


def _json_value(col, value: Any) -> Any:
    if value is None:
        return None
    ctype = col.ctype
    if ctype == "binary":
        return bytes(value).hex().upper()
    if ctype.startswith("decimal"):
        return format(value, "f")
    if ctype in TIMESTAMP_TYPES:
        return value.isoformat(sep=" ", timespec="microseconds")
    if ctype == "date":
        return value.isoformat()
    return value


def _avro_value(col, value: Any) -> Any:
    if value is None:
        return None
    if col.ctype in TIMESTAMP_TYPES:
        return value.replace(tzinfo=_dt.timezone.utc) if value.tzinfo is None else value
    if col.ctype == "binary":
        return bytes(value)
    return value


def _partition(key: bytes, partitions: int) -> int:
    return zlib.crc32(key) % partitions


def _render(history: Sequence[Transaction], tables: Mapping[str, Table], database: str, partitions: int,
            server: str, task: str, version_change_table: Optional[str], minimal_logging: bool,
            encode_md: Callable[[Table, dict], bytes], encode_dt: Callable[[Table, str, dict], bytes]) -> list[Message]:
    history = list(history)
    out: list[Message] = []
    last_ts = 0
    current: dict[str, str] = {}
    if version_change_table is not None and version_change_table not in tables:
        version_change_table = list(tables)[-1] if tables else None

    def emit(key: bytes, value: bytes, ts: int, commit_ts: int, rows: int) -> None:
        nonlocal last_ts
        ts = last_ts = max(last_ts, ts)
        out.append(Message(key, value, ts, _partition(key, partitions), commit_ts, rows))

    def publish_metadata(table: Table, version: int, when_ms: int, kafka_ts: int) -> None:
        sid = schema_id(server, task, database, table.name, version)
        current[table.name] = sid
        md = metadata_message(table, sid, version, database, server, task, when_ms)
        emit(sid.encode(), encode_md(table, md), kafka_ts, when_ms, 0)

    if history:
        first = history[0].commit_ts_ms
        for t in tables.values():
            publish_metadata(t, 1, first, first)
    counter = 0
    middle = len(history) // 2
    for n, tx in enumerate(history):
        last_index = len(tx.changes) - 1
        for i, ch in enumerate(tx.changes):
            table = tables[ch.table]
            ordinals = {c.name: j + 1 for j, c in enumerate(table.columns)}
            pk_ords = {ordinals[k] for k in table.primary_key}
            all_ords = set(ordinals.values())
            if tx.snapshot:
                op, data, before = "REFRESH", ch.after, None
                headers = {"operation": "REFRESH", "changeSequence": "", "timestamp": "", "streamPosition": "",
                           "transactionId": "", "changeMask": None, "columnMask": None,
                           "transactionEventCounter": None, "transactionLastEvent": None}
            else:
                counter += 1
                commit = _dt.datetime(1970, 1, 1) + _dt.timedelta(milliseconds=tx.commit_ts_ms)
                if ch.op == "insert":
                    op, data, before, changed, present = "INSERT", ch.after, None, all_ords, all_ords
                elif ch.op == "update":
                    changed = {ordinals[c.name] for c in table.columns if ch.before[c.name] != ch.after[c.name]}
                    present = (pk_ords | changed) if minimal_logging else all_ords
                    op, data, before = "UPDATE", ch.after, ch.before
                else:
                    changed, present = pk_ords, (pk_ords if minimal_logging else all_ords)
                    op, data, before = "DELETE", ch.before, None
                headers = {"operation": op, "changeSequence": f"{commit:%Y%m%d%H%M%S}{counter:021d}",
                           "timestamp": _text_time(tx.commit_ts_ms),
                           "streamPosition": f"{ch.binlog_file}:{ch.binlog_pos}:{ch.row}",
                           "transactionId": _transaction_id(tx), "changeMask": mask_bytes(changed),
                           "columnMask": mask_bytes(present), "transactionEventCounter": i + 1,
                           "transactionLastEvent": i == last_index}
                data = {c: (v if ordinals[c] in present else None) for c, v in data.items()}
                if before is not None:
                    before = {c: (v if ordinals[c] in present else None) for c, v in before.items()}
            message = {"data": data, "beforeData": before, "headers": headers}
            key = "+".join(str(v) for v in ch.key).encode("utf-8")
            emit(key, encode_dt(table, current[ch.table], message),
                 tx.commit_ts_ms + delivery_delay_ms(tx.tx_id, i), tx.commit_ts_ms, 1)
        if n == middle and version_change_table is not None:
            publish_metadata(tables[version_change_table], 2, tx.commit_ts_ms, tx.commit_ts_ms + 300)
    return out


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def qlik_json(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
              partitions: int = 1, server: str = SERVER, task: str = TASK,
              version_change_table: Optional[str] = "orders", minimal_logging: bool = False) -> list[Message]:
    """Qlik Replicate JSON messages for ``history`` (see the module docstring for the stream).

    Each value is the envelope as JSON: ``{"magic": "atMSG", "type": "MD"|"DT", "headers": null,
    "messageSchemaId": ..., "messageSchema": null, "message": {...}}``; metadata messages carry
    their ``schemaId`` in ``messageSchemaId`` too, data messages the ``schemaId`` of their table's
    current metadata. Masks are upper-case hex text; binary values upper-case hex digits.
    """

    def encode_md(table: Table, md: dict) -> bytes:
        return _json_bytes({"magic": MAGIC.decode(), "type": "MD", "headers": None,
                            "messageSchemaId": md["schemaId"], "messageSchema": None, "message": md})

    def encode_dt(table: Table, sid: str, message: dict) -> bytes:
        cols = {c.name: c for c in table.columns}
        h = dict(message["headers"])
        for m in ("changeMask", "columnMask"):
            h[m] = None if h[m] is None else h[m].hex().upper()
        body = {"data": {c: _json_value(cols[c], v) for c, v in message["data"].items()},
                "beforeData": None if message["beforeData"] is None else
                {c: _json_value(cols[c], v) for c, v in message["beforeData"].items()},
                "headers": h}
        return _json_bytes({"magic": MAGIC.decode(), "type": "DT", "headers": None,
                            "messageSchemaId": sid, "messageSchema": None, "message": body})

    return _render(history, tables, database, partitions, server, task, version_change_table, minimal_logging,
                   encode_md, encode_dt)


def avro_envelope(kind: str, message: bytes, schema_id: Optional[str] = None,
                  schema_text: Optional[str] = None) -> bytes:
    """A Replicate envelope in Avro binary encoding (magic ``atMSG``)."""
    from fastavro import parse_schema, schemaless_writer

    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(ENVELOPE_SCHEMA), {
        "magic": MAGIC, "type": kind, "headers": None, "messageSchemaId": schema_id,
        "messageSchema": schema_text, "message": message})
    return buf.getvalue()


def avro_bytes(schema: dict, record: dict) -> bytes:
    """``record`` in Avro binary encoding with ``schema`` (no header)."""
    from fastavro import parse_schema, schemaless_writer

    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(schema), record)
    return buf.getvalue()


def qlik_avro(history: Sequence[Transaction], tables: Mapping[str, Table], database: str = DATABASE,
              partitions: int = 1, server: str = SERVER, task: str = TASK,
              version_change_table: Optional[str] = "orders", minimal_logging: bool = False) -> list[Message]:
    """Qlik Replicate Avro messages for ``history`` (see the module docstring for the stream).

    Each value is the Avro envelope. Metadata: ``messageSchema`` = the metadata message's own Avro
    schema (:func:`metadata_schema`), ``messageSchemaId`` null. Data: ``messageSchemaId`` = the
    table's current ``schemaId``, ``message`` = the record in that metadata's ``dataSchema``.
    """
    from fastavro import parse_schema

    parsed: dict = {}

    def encode_md(table: Table, md: dict) -> bytes:
        schema = metadata_schema(table)
        return avro_envelope("MD", avro_bytes(schema, md), None, json.dumps(schema, separators=(",", ":")))

    def encode_dt(table: Table, sid: str, message: dict) -> bytes:
        if table.name not in parsed:
            parsed[table.name] = parse_schema(data_schema(table))
        cols = {c.name: c for c in table.columns}
        record = {"data": {c: _avro_value(cols[c], v) for c, v in message["data"].items()},
                  "beforeData": None if message["beforeData"] is None else
                  {c: _avro_value(cols[c], v) for c, v in message["beforeData"].items()},
                  "headers": message["headers"]}
        from fastavro import schemaless_writer

        buf = io.BytesIO()
        schemaless_writer(buf, parsed[table.name], record)
        return avro_envelope("DT", buf.getvalue(), sid)

    return _render(history, tables, database, partitions, server, task, version_change_table, minimal_logging,
                   encode_md, encode_dt)
