"""A plain-Python reference model of applying canonical change records to tables.

It states what the pipeline's result must be for a set of parsed records, without Spark:

- Records are grouped per table (:func:`table_key`) and applied in the order
  ``(source_position, Kafka partition, Kafka offset, row_in_record)``.
- ``insert`` / ``snapshot``: the row under the after image's key is replaced by the after image
  (columns absent from the image are null, i.e. missing from the row dict).
- ``update``: the present columns of the after image are laid over the existing row (the row
  found under the before image's key when the before image carries the key, else under the after
  image's key); when the key changes the old key is removed.
- ``delete``: the row under the before image's key (else the after image's) is removed.
- ``truncate``: the table is emptied.
- A change delivered twice (same table, source position, op and images) is applied once;
  different changes at one position are applied in arrival order.

Control records and parse errors are not changes: use :func:`changes` to keep only the
``(KafkaRecord, ChangeRecord)`` pairs from :func:`cdclake.record.parse_all` output.
"""
from __future__ import annotations

from typing import Iterable, Optional

from cdclake.record import ChangeRecord, ControlRecord, KafkaRecord, ParseError

Row = dict[str, Optional[str]]
State = dict[str, dict[tuple, Row]]


def table_key(change: ChangeRecord) -> str:
    """The table a change belongs to: ``database.schema.table`` with None parts left out."""
    return ".".join(p for p in (change.source_database, change.source_schema, change.source_table) if p)


def changes(results: Iterable[tuple[KafkaRecord, object]]) -> list[tuple[KafkaRecord, ChangeRecord]]:
    """Flatten ``(KafkaRecord, list[ChangeRecord] | ControlRecord)`` pairs into change pairs.

    Control records are dropped; a :class:`ParseError` result is raised.
    """
    out = []
    for record, result in results:
        if isinstance(result, ParseError):
            raise result
        if isinstance(result, ControlRecord):
            continue
        out.extend((record, change) for change in result)
    return out


def _key(image: Optional[Row], primary_key: list[str]) -> Optional[tuple]:
    if image is None or any(image.get(c) is None for c in primary_key):
        return None
    return tuple(image[c] for c in primary_key)


def apply_changes(pairs: Iterable[tuple[KafkaRecord, ChangeRecord]]) -> State:
    """Apply changes and return the final state ``{table_key: {pk tuple: row dict}}``.

    ``pairs`` are ``(KafkaRecord, ChangeRecord)``; the Kafka record gives the partition and offset
    that break ties between equal source positions. Rows map column names to canonical text;
    a column missing from a row is null. Raises ``ValueError`` for a change without a usable key.
    """
    ordered = sorted(
        pairs,
        key=lambda p: (table_key(p[1]), tuple(p[1].source_position), p[0].partition, p[0].offset, p[1].row_in_record),
    )
    state: State = {}
    seen = set()
    for record, change in ordered:
        ident = (table_key(change), tuple(change.source_position), change.op,
                 tuple(sorted((change.before or {}).items())), tuple(sorted((change.after or {}).items())))
        if change.source_position and ident in seen:
            continue
        seen.add(ident)
        table = state.setdefault(table_key(change), {})
        if change.op == "truncate":
            table.clear()
            continue
        old_key = _key(change.before, change.primary_key)
        new_key = _key(change.after, change.primary_key)
        if change.op in ("insert", "snapshot"):
            if new_key is None:
                raise ValueError(f"{change.op} at offset {record.offset} has no key in its after image")
            table[new_key] = dict(change.after)
        elif change.op == "update":
            if new_key is None:
                raise ValueError(f"update at offset {record.offset} has no key in its after image")
            row = table.pop(old_key if old_key is not None else new_key, {})
            table[new_key] = {**row, **change.after}
        elif change.op == "delete":
            key = old_key if old_key is not None else new_key
            if key is None:
                raise ValueError(f"delete at offset {record.offset} carries no key")
            table.pop(key, None)
        else:
            raise ValueError(f"unknown op {change.op!r}")
    return state
