"""What the per-record parser and the fast path of ``dts-avro`` share: the operations, object
names, positions, transaction ids and primary key tags of a DTS record (see
:mod:`cdclake.formats.dts.parser`).
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping, Optional

from cdclake.positions import MAX_ELEMENT

# ---------------------------------------------------------------------------------------------
# operations and names

ROW_OPERATIONS = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
#: Control record kind of each non-row operation.
CONTROL_OPERATIONS = {
    "DDL": "ddl", "COMMAND": "ddl",
    "BEGIN": "transaction", "COMMIT": "transaction", "ROLLBACK": "transaction", "ABORT": "transaction",
    "HEARTBEAT": "heartbeat", "CHECKPOINT": "heartbeat", "NOOP": "heartbeat",
    "FILL": "metadata", "FINISH": "metadata", "CONTROL": "metadata", "RDB": "metadata", "INIT": "metadata",
}
_POSITION_RE = re.compile(r"^([0-9]+)@([0-9]+)$")
_DELETE_HINT = "the deleted row's image does not carry them"
_IDENT = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_TRUNCATE_RE = re.compile(rf"^\s*truncate\s+(?:table\s+)?(?P<name>{_IDENT}(?:\s*\.\s*{_IDENT})?)\s*;?\s*$", re.I)
_NAME_PART_RE = re.compile(_IDENT)


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def split_object_name(name: Optional[str]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """``(database, schema, table)`` of an ``objectName``.

    ``db`` → (db, None, None); ``db.table`` → (db, None, table); ``db.schema.table`` →
    (db, schema, table). Parts are split at dots; ``\\u002E`` inside a part is a dot of the name
    (the SDK's ``ObjectNameUtils`` escaping). None or empty gives (None, None, None). Raises
    ``ValueError`` for more than three parts or an empty part.
    """
    if not name:
        return None, None, None
    parts = [p.replace("\\u002E", ".") for p in name.split(".")]
    if len(parts) > 3 or not all(parts):
        raise ValueError(f"objectName {name!r} is not db, db.table or db.schema.table")
    if len(parts) == 1:
        return parts[0], None, None
    if len(parts) == 2:
        return parts[0], None, parts[1]
    return parts[0], parts[1], parts[2]


def parse_position(source_position: Optional[str], record_id: int) -> tuple[int, ...]:
    """The position tuple of a record.

    ``offset@fileindex`` (MySQL binlog: end offset of the event @ binlog file number) gives
    ``(fileindex, offset, id)``: numbers compare as numbers, the file first (``"194@10"`` sorts
    after ``"99999@9"``). Any other ``sourcePosition`` (other sources, or numbers beyond
    ``10**38``) gives ``(id,)``. Raises ``ValueError`` for a negative ``id``.
    """
    if isinstance(record_id, bool) or not isinstance(record_id, int) or not 0 <= record_id <= MAX_ELEMENT:
        raise ValueError(f"id {record_id!r} is not a non-negative integer")
    m = _POSITION_RE.match((source_position or "").strip())
    if m:
        offset, file_index = int(m.group(1)), int(m.group(2))
        if offset <= MAX_ELEMENT and file_index <= MAX_ELEMENT:
            return (file_index, offset, record_id)
    return (record_id,)


def _txid(msg: Mapping[str, Any]) -> Optional[str]:
    """``sourceTxid``, None for the empty and ``"0"`` ids MySQL sources send."""
    txid = (msg.get("sourceTxid") or "").strip()
    return None if txid in ("", "0") else txid


def primary_key_info(tags: Mapping[str, str]) -> Optional[list[str]]:
    """Key columns from the ``pk_uk_info`` tag: ``PRIMARY``, else the first unique index, else None.

    Raises ``ValueError`` when the tag is present but not a JSON object of column-name lists.
    """
    text = tags.get("pk_uk_info")
    if not text:
        return None
    try:
        info = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"pk_uk_info is not JSON ({exc.msg})") from None
    except RecursionError:
        raise ValueError("pk_uk_info is JSON nested too deeply to read") from None
    if not isinstance(info, dict) or not all(
            isinstance(cols, list) and all(isinstance(c, str) for c in cols) for cols in info.values()):
        raise ValueError(f"pk_uk_info {text!r} is not an object of column-name lists")
    if info.get("PRIMARY"):
        return list(info["PRIMARY"])
    for cols in info.values():
        if cols:
            return list(cols)
    return None
