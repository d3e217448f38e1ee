"""The change rows of ``bronze.changes``: the table's schema, derived from
:class:`cdclake.record.ChangeRecord`, and the staged form in which change rows leave normalize's
Python workers (maps as key and value arrays), with the functions that build and read it.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Optional

from pyspark.sql.types import (ArrayType, BooleanType, DataType, DecimalType, IntegerType, LongType, MapType,
                               StringType, StructField, StructType)

from cdclake.lake.schemas import KAFKA_COLUMNS
from cdclake.lake.shapes import SHAPE_COLUMNS
from cdclake.record import ChangeRecord

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


#: The Spark type of a :class:`ChangeRecord` field, by its annotation. A required integer is an
#: index inside a Kafka record (int: ``row_in_record``), an optional one a time, sequence or count
#: (bigint); a source position (a tuple of non-negative integers) is ``array<decimal(38,0)>``.
_SPARK_TYPES: dict[str, DataType] = {
    "str": StringType(), "Optional[str]": StringType(), "int": IntegerType(), "Optional[int]": LongType(),
    "Optional[bool]": BooleanType(), "list[str]": ArrayType(StringType()),
    "tuple[int, ...]": ArrayType(DecimalType(38, 0)), "dict[str, str]": MapType(StringType(), StringType()),
    "Optional[dict[str, Optional[str]]]": MapType(StringType(), StringType()),
}
#: The last field of the first version of bronze: the Kafka columns come after it, and fields
#: added since after them (an existing table gets them appended: :func:`cdclake.lake.ensure_bronze_tables`).
_FIRST_VERSION_LAST_FIELD = "row_in_record"


def _change_fields() -> list[tuple[str, DataType, bool]]:
    """``[(field, Spark type, optional)]`` of :class:`ChangeRecord`, in declaration order."""
    out = []
    for f in dataclasses.fields(ChangeRecord):
        if f.type not in _SPARK_TYPES:
            raise TypeError(f"ChangeRecord.{f.name}: no bronze column type for annotation {f.type!r} "
                            "(add it to cdclake.lake.changes._SPARK_TYPES)")
        out.append((f.name, _SPARK_TYPES[f.type], f.type.startswith("Optional[")))
    return out


_FIELDS = _change_fields()
_SPLIT = [n for n, _, _ in _FIELDS].index(_FIRST_VERSION_LAST_FIELD) + 1
#: ``bronze.changes``: the :class:`ChangeRecord` fields up to ``row_in_record``, the Kafka
#: columns, then the fields added since (``tx_last``, ``tx_size``), then the columns normalize
#: derives from the change's shape (:data:`cdclake.lake.shapes.SHAPE_COLUMNS`: ``shape_id``,
#: ``key_change``). Derived from the dataclass: a new field of ChangeRecord is a new bronze column.
_CHANGE_SCHEMA = StructType([StructField(n, t) for n, t, _ in _FIELDS[:_SPLIT]] + KAFKA_COLUMNS
                            + [StructField(n, t) for n, t, _ in _FIELDS[_SPLIT:]])
BRONZE_SCHEMA = StructType(_CHANGE_SCHEMA.fields + SHAPE_COLUMNS)
#: The Python types each ChangeRecord field may hold to be written to its bronze column.
CHANGE_PYTHON_TYPES = {n: ((dict,) if isinstance(t, MapType) else (list, tuple) if isinstance(t, ArrayType)
                           else (bool,) if isinstance(t, BooleanType) else (str,) if isinstance(t, StringType)
                           else (int,))
                       + ((type(None),) if optional else ()) for n, t, optional in _FIELDS}
#: Each map column of bronze, as it leaves the Python workers: key and value arrays (PySpark's
#: dict conversion does not keep key order, and silver creates columns in the message's order).
STAGED_MAPS = {f.name: (f"{f.name}_k", f"{f.name}_v") for f in _CHANGE_SCHEMA.fields if isinstance(f.dataType, MapType)}
#: How change rows leave the Python workers (:func:`bronze_row`): bronze without the shape
#: columns, maps as key and value arrays.
STAGED_SCHEMA = StructType([c for f in _CHANGE_SCHEMA.fields
                            for c in ([StructField(k, ArrayType(StringType())) for k in STAGED_MAPS[f.name]]
                                      if f.name in STAGED_MAPS else [f])])
#: The bronze column of each staged column (a map's key and value arrays: the map).
STAGED_TO_BRONZE = {s: n for n, pair in STAGED_MAPS.items() for s in pair}


def _pairs(m: Optional[dict]) -> tuple:
    return (None, None) if m is None else (list(m), list(m.values()))


def _optional_list(v) -> Optional[list]:
    return None if v is None else list(v)


def _row_builder(name: str, arg: str,
                 field: Callable[[int, str, DataType, bool], str]) -> Callable[[Any, tuple], tuple]:
    """A function ``name(arg, kcols)`` returning the staged bronze row (:data:`STAGED_SCHEMA`) as one
    tuple expression written out from :data:`BRONZE_SCHEMA` (it runs once per change row in
    normalize's Python workers, where a loop over the columns costs twice as much): ``field(i,
    name, type, optional)`` gives the expression of ChangeRecord field ``i``, and ``*kcols`` goes
    where the Kafka columns go. For :func:`bronze_row` and today's fields the source it compiles is::

        def bronze_row(c, kcols):
            return (c.source_format, c.source_database, c.source_schema, c.source_table, c.op,
                    *_pairs(c.before), *_pairs(c.after), list(c.primary_key), *_pairs(c.column_types),
                    list(c.source_position), c.source_ts_ms, c.tx_id, c.tx_seq, c.row_in_record,
                    *kcols, c.tx_last, c.tx_size)

    and for :func:`staged_row`::

        def staged_row(t, kcols):
            return (t[0], t[1], t[2], t[3], t[4], *t[5], *t[6], t[7], *t[8], t[9], t[10], t[11], t[12],
                    t[13], *kcols, t[14], t[15])
    """
    parts = []
    for i, (n, t, optional) in enumerate(_FIELDS):
        if i == _SPLIT:
            parts.append("*kcols")
        parts.append(field(i, n, t, optional))
    if _SPLIT == len(_FIELDS):
        parts.append("*kcols")
    scope = {"__name__": __name__, "_pairs": _pairs, "_optional_list": _optional_list}
    exec(f"def {name}({arg}, kcols):\n    return ({', '.join(parts)})\n", scope)
    return scope[name]


bronze_row = _row_builder("bronze_row", "c", lambda i, n, t, optional: (
    f"*_pairs(c.{n})" if isinstance(t, MapType) else
    (f"_optional_list(c.{n})" if optional else f"list(c.{n})") if isinstance(t, ArrayType) else f"c.{n}"))
staged_row = _row_builder("staged_row", "t",
                          lambda i, n, t, optional: f"*t[{i}]" if isinstance(t, MapType) else f"t[{i}]")
staged_row.__doc__ = """The staged bronze row tuple (:data:`STAGED_SCHEMA`) of a change row of a columnar fast path
(:mod:`cdclake.formats.columnar`: the ChangeRecord fields in order, maps as (keys, values) pairs,
arrays as lists) and ``kcols`` (the values of :data:`KAFKA_COLUMNS`). ``staged_row`` of a fast
path's change row equals :func:`bronze_row` of the ChangeRecord ``parse`` gives."""
bronze_row.__doc__ = """The staged bronze row tuple of ChangeRecord ``c`` (:data:`STAGED_SCHEMA`; ``kcols``: the
values of :data:`KAFKA_COLUMNS`): maps as key and value lists (None: both None), arrays as lists
(the position as ints, which Arrow writes as ``decimal(38,0)`` exactly). Raises ``TypeError`` for
a required array field that is None, ``AttributeError`` for a map field that is not a dict."""


def bronze_frame(staged: "DataFrame") -> "DataFrame":
    """Staged change rows (:data:`STAGED_SCHEMA`) as :data:`BRONZE_SCHEMA`, maps built in key
    order, the shape columns null (silver's summary then reads the rows' maps)."""
    from pyspark.sql import functions as F

    shaped = {f.name: f.dataType for f in SHAPE_COLUMNS}

    def column(n: str):
        if n in shaped:
            return F.lit(None).cast(shaped[n]).alias(n)
        if n not in STAGED_MAPS:
            return F.col(n)
        k, v = STAGED_MAPS[n]
        return F.when(F.col(k).isNotNull(), F.map_from_arrays(k, v)).alias(n)

    return staged.select(*[column(n) for n in BRONZE_SCHEMA.names])
