"""Helpers shared by the format tests: Kafka records, parsing one message, vendor samples, landing.

- :func:`krec` builds one :class:`~cdclake.record.KafkaRecord` from a value and a key given as
  bytes, text or JSON-able objects; :func:`parse`, :func:`one` and :func:`parse_error` parse it
  with a format's parser. A test module binds its format once, e.g.
  ``parse = functools.partial(helpers.parse, "canal-json")``.
- :func:`sample` reads a vendor sample message stored under ``tests/samples/<vendor>/``: the
  samples of the vendor documents, byte for byte as the tests use them (the test module that
  loads a sample names the document and section it comes from).
- :func:`landed` turns simulated messages (:class:`cdclake.sim.render.Message`) into the Kafka
  records a consumer reads, with per-partition offsets.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import pytest

from cdclake.formats import get_parser
from cdclake.record import ChangeRecord, KafkaRecord, ParseError, ParseResult, RecordParser

#: Vendor sample messages: ``samples/<vendor>/<name>``.
SAMPLES = Path(__file__).resolve().parent / "samples"


def enc(v: Any) -> Optional[bytes]:
    """dict/list → JSON bytes, str → UTF-8 bytes, bytes and None unchanged."""
    if isinstance(v, (dict, list)):
        return json.dumps(v).encode()
    return v.encode() if isinstance(v, str) else v


def krec(value: Any, key: Any = None, offset: int = 0, partition: int = 0, ts: int = 0, topic: str = "topic",
         encode_value: Optional[Callable[[dict], bytes]] = None) -> KafkaRecord:
    """A Kafka record of ``topic`` at ``partition``/``offset`` with timestamp ``ts`` (epoch ms).

    ``value`` and ``key`` go through :func:`enc`; a dict value goes through ``encode_value``
    instead when one is given (an Avro format's writer).
    """
    if encode_value is not None and isinstance(value, dict):
        value = encode_value(value)
    return KafkaRecord(topic, partition, offset, ts, enc(key), enc(value))


def parse(fmt: Union[str, RecordParser], value: Any, key: Any = None, *,
          make_record: Callable[..., KafkaRecord] = krec, **options) -> ParseResult:
    """The result of parsing one Kafka record built by ``make_record(value, key)``.

    ``fmt`` is a format name (its parser is built with ``options``, the source's options of a
    pipeline file) or a parser (then no options). Returns a list of
    :class:`~cdclake.record.ChangeRecord` or a :class:`~cdclake.record.ControlRecord`; raises
    :class:`~cdclake.record.ParseError` for bad input and ``TypeError`` for options given with a
    parser.
    """
    if isinstance(fmt, str):
        parser = get_parser(fmt, options)
    elif options:
        raise TypeError(f"options {sorted(options)} are for a format name, not for a parser")
    else:
        parser = fmt
    return parser.parse(make_record(value, key))


def one(fmt: Union[str, RecordParser], value: Any, key: Any = None, **kwargs) -> ChangeRecord:
    """The one change of a record (see :func:`parse`); fails the test unless there is exactly one."""
    result = parse(fmt, value, key, **kwargs)
    assert isinstance(result, list) and len(result) == 1
    return result[0]


def parse_error(fmt: Union[str, RecordParser], value: Any, key: Any = None, **kwargs) -> ParseError:
    """The :class:`~cdclake.record.ParseError` parsing a record raises (see :func:`parse`); fails
    the test when it raises none."""
    with pytest.raises(ParseError) as info:
        parse(fmt, value, key, **kwargs)
    return info.value


def sample(vendor: str, name: str, binary: bool = False) -> Union[str, bytes]:
    """The sample message ``samples/<vendor>/<name>``: UTF-8 text, or bytes when ``binary``.

    The text is the file's content exactly (no line-end translation, no final line end added).
    Raises ``FileNotFoundError`` for an unknown sample.
    """
    data = (SAMPLES / vendor / name).read_bytes()
    return data if binary else data.decode("utf-8")


def landed(messages: Sequence, topic: str = "shop", reverse: bool = False) -> list[KafkaRecord]:
    """Kafka records of simulated messages, offsets counted per partition in arrival order.

    With ``reverse`` the delivery is reversed: within each partition the last message gets offset
    0, and the records are listed last first (the order a consumer reads them in).
    """
    offsets: Counter = Counter()
    out = []
    for m in messages:
        out.append(KafkaRecord(topic, m.partition, offsets[m.partition], m.timestamp_ms, m.key, m.value))
        offsets[m.partition] += 1
    if reverse:
        out = [KafkaRecord(r.topic, r.partition, offsets[r.partition] - 1 - r.offset, r.timestamp_ms, r.key, r.value)
               for r in out][::-1]
    return out


#: The machine's PostgreSQL 15 (trust auth, ``wal_level = logical``: ``make deps``), over TCP.
PG = dict(host="127.0.0.1", port=5432, user="postgres")


def pg_connect(dbname: str, autocommit: bool = False):
    """A psycopg2 connection to database ``dbname`` of :data:`PG`; fails the test (never skips it)
    when the server cannot be reached."""
    import psycopg2

    try:
        conn = psycopg2.connect(dbname=dbname, connect_timeout=5, **PG)
    except psycopg2.OperationalError as exc:
        pytest.fail(f"PostgreSQL at 127.0.0.1:5432 cannot be reached ({exc}): run `make deps`", pytrace=False)
    conn.autocommit = autocommit
    return conn
