"""Lindorm's change records: a declared variant of ``debezium-json``, chosen per record.

Implements "Lindorm: Debezium Format V2.0" (Alibaba Cloud Lindorm, *Message structure*, *Payload
fields*, *HBase tables*, *Sample records*). Lindorm writes Debezium-shaped documents to the topic a
``debezium-json`` source reads; :class:`cdclake.formats.debezium.DebeziumJsonParser` reads a record
with :data:`LINDORM` when its ``source`` block says it comes from Lindorm (:func:`is_lindorm`:
``source.namespace`` and no ``source.connector``), else as Debezium's own connectors write it.
What differs from those:

- **Names**: ``source.db`` is the instance id, ``source.namespace`` the schema (``source_schema``).
- **Schema**: ``"schema": {}`` (or a Connect schema, as in the first example); ``ts_ms`` only,
  hence the position ``(source.ts_ms,)`` of every source without a log position.
- **Column delete** (``op: "u"`` whose ``after`` omits a column of ``before``): the omitted column
  is set to null in the after image.
- **HBase tables** (an image holding ``ROW``, the row key): every value is Base64 of raw bytes
  (type ``binary``) and the primary key is ``ROW``.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from cdclake.formats.connect import is_toast
from cdclake.formats.text import ABSENT, text_converter

_BINARY = text_converter("binary")


def is_lindorm(source: Mapping[str, Any]) -> bool:
    """Whether a ``source`` block is Lindorm's: it has ``namespace`` and no ``connector``."""
    return "namespace" in source and "connector" not in source


def hbase_text(col: str, value: Any) -> Any:
    """An HBase value (Base64 text of raw bytes) as canonical ``binary`` text; :data:`ABSENT` for the
    unavailable-value placeholder."""
    return ABSENT if is_toast(value) else _BINARY(value)


class LindormVariant:
    """How a Lindorm record differs from Debezium's (the interface of
    :class:`cdclake.formats.debezium.DebeziumVariant`)."""

    #: The ``source`` member holding the schema name.
    schema_field = "namespace"

    @staticmethod
    def typed(plan: Any, raw_before: Any, raw_after: Any) -> tuple[dict, Callable[[str, Any], Any], Optional[list]]:
        """``(column types, converter, carried key)``: an HBase table's (every column ``binary``,
        key ``ROW``) when an image holds ``ROW``, else the plan's (a copy of its types)."""
        if any(isinstance(img, dict) and "ROW" in img for img in (raw_before, raw_after)):
            types = {col: "binary" for img in (raw_before, raw_after) if isinstance(img, dict) for col in img}
            return types, hbase_text, ["ROW"]
        return dict(plan.types), plan.convert, None

    @staticmethod
    def complete_after(op: str, after: Optional[dict], raw_before: Any, raw_after: Any) -> None:
        """The column delete: an update's after image gets null for each column of ``before`` it
        omits."""
        if op == "update" and isinstance(raw_before, dict) and isinstance(raw_after, dict):
            after.update({col: None for col in raw_before if col not in raw_after})


#: The Lindorm variant of ``debezium-json``.
LINDORM = LindormVariant()
