"""The options every parser accepts, and the primary-key rules they feed.

- :class:`SourceOptions` holds ``primary_key``, ``primary_keys`` and ``column_types`` of a source
  in the pipeline YAML.
- :func:`resolve_primary_key` and :func:`key_delete_image` apply the key rules: configured
  override, then what the message carries, then the Kafka key, else :class:`ParseError`.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from cdclake.record import ParseError
from cdclake.types import normalize_type

NO_KEY_REASON = "no primary key: set primary_key for the source or send Kafka keys"


def _names(value: Any, what: str) -> Optional[list[str]]:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"sources[].{what} must be a list of column names, got {value!r}")
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
            raise ValueError(f"sources[].primary_keys must map table names to column lists, got {per_table!r}")
        self.primary_keys = {str(t): _names(cols, f"primary_keys[{t!r}]") for t, cols in per_table.items()}
        types = options.get("column_types") or {}
        if not isinstance(types, Mapping):
            raise ValueError(f"sources[].options.column_types must be a mapping, got {types!r}")
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
