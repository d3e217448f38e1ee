"""Change shapes: what silver's batch summary needs of a bronze change besides its order, kept
once per distinct shape rather than read from every row's maps.

A change's *shape* is its primary key, its column types (names and canonical types, in order)
and the column names of its after and before images (null: no image). Changes of one source
table mostly repeat a few shapes. Normalize writes, with every bronze row, the shape's id
(``shape_id``: 32 hex digits, the first 128 bits of BLAKE2b over the shape's canonical JSON,
:func:`shape_id`) and whether the change is a *key change* under its own primary key
(``key_change``, as :func:`cdclake.silver.keys.key_change` tells it), and each shape once in
``bronze.change_shapes`` (:data:`SHAPES_SCHEMA`), committed before the bronze rows that name it.
Silver's summary then groups the batch's flat columns by shape id and reads the few shapes
(:func:`cdclake.silver.summary.summarize_batch`), instead of grouping every row's maps.

:func:`change_shapes` computes both columns for an Arrow batch of staged change rows column by
column (Arrow compute); :func:`change_shapes_exact`, row by row in Python, is its reference and
takes the batches the columnar form cannot prove it reads exactly (a name or type holding the
separator ``U+001F``, a null inside a list).
"""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Optional

from pyspark.sql.types import ArrayType, BooleanType, MapType, StringType, StructField, StructType

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from cdclake.config import PipelineConfig

#: ``bronze.change_shapes``: one row per shape (rows repeating a ``shape_id`` are the same shape).
#: ``primary_key``, ``after_columns``, ``before_columns``: names, in the change's order (null: none);
#: ``column_types``: column → canonical type, in the change's order.
SHAPES_SCHEMA = StructType([
    StructField("shape_id", StringType()), StructField("primary_key", ArrayType(StringType())),
    StructField("column_types", MapType(StringType(), StringType())),
    StructField("after_columns", ArrayType(StringType())), StructField("before_columns", ArrayType(StringType())),
])
#: The bronze columns normalize derives from a change's shape (after the ChangeRecord fields).
SHAPE_COLUMNS = [StructField("shape_id", StringType()), StructField("key_change", BooleanType())]
#: The staged columns a shape is made of (:data:`cdclake.lake.STAGED_SCHEMA`), in :func:`shape_id`'s order.
SHAPE_PARTS = ("primary_key", "column_types_k", "column_types_v", "after_k", "before_k")
#: Joins a list's names into one text in the columnar form: a control character, which names
#: never hold (:mod:`cdclake.names`); a batch whose names or types hold it is read row by row.
SEPARATOR = "\x1f"

Shape = tuple  # (primary_key, column_types keys, column_types values, after columns, before columns), lists or None


def shape_id(shape: Shape) -> str:
    """The id of ``shape`` (:data:`SHAPE_PARTS` values, lists or None): 32 lowercase hex digits,
    BLAKE2b (16-byte digest) of its JSON text (compact, names as written)."""
    text = json.dumps(list(shape), ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def key_change_of(op: Optional[str], shape: Shape, before_v: Optional[list], after_v: Optional[list]) -> Optional[bool]:
    """Whether a change is a key change under its own primary key, as
    :func:`cdclake.silver.keys.key_change` of the row's ``primary_key`` tells it in Spark SQL: an
    update with a before image, the before image holding every key column (not null) and the
    after image differing from it in one (null-safe; a map's first entry of a name counts). None
    when the change has no primary key, or no op and the rest holds (SQL's three-valued AND)."""
    pk, _tk, _tv, after_k, before_k = shape
    if pk is None:
        return None
    if before_k is None:
        return False
    before = dict(zip(reversed(before_k), reversed(before_v)))
    after = dict(zip(reversed(after_k), reversed(after_v))) if after_k is not None else {}
    rest = any(before.get(k) != after.get(k) for k in pk) and all(before.get(k) is not None for k in pk)
    if op is None:
        return None if rest else False
    return op == "update" and rest


def change_shapes_exact(staged: "pa.Table") -> tuple["pa.Array", "pa.Array", dict[str, Shape]]:
    """``(shape_id, key_change, shapes)`` of staged change rows, row by row: the id and flag of
    each row (:data:`SHAPE_COLUMNS`) and ``{id: shape}`` of the shapes seen. The reference of
    :func:`change_shapes`."""
    import pyarrow as pa

    cols = {c: staged.column(c).to_pylist() for c in (*SHAPE_PARTS, "op", "after_v", "before_v")}
    ids, flags, shapes, known = [], [], {}, {}
    for i in range(staged.num_rows):
        shape = tuple(cols[c][i] for c in SHAPE_PARTS)
        text = json.dumps(list(shape), ensure_ascii=False, separators=(",", ":"))
        sid = known.get(text)
        if sid is None:
            sid = known[text] = shape_id(shape)
            shapes[sid] = shape
        ids.append(sid)
        flags.append(key_change_of(cols["op"][i], shape, cols["before_v"][i], cols["after_v"][i]))
    return pa.array(ids, pa.string()), pa.array(flags, pa.bool_()), shapes


def _columnar_safe(lists: list) -> bool:
    """Whether joining every list of ``lists`` by :data:`SEPARATOR` keeps lists apart: no null
    inside a list, no name or type holding the separator."""
    import pyarrow.compute as pc

    for arr in lists:
        values = pc.list_flatten(arr)
        if len(values) and (values.null_count or pc.any(pc.match_substring(values, SEPARATOR)).as_py()):
            return False
    return True


def change_shapes(staged: "pa.Table") -> tuple["pa.Array", "pa.Array", dict[str, Shape]]:
    """:func:`change_shapes_exact`, column by column: each shape part's lists joined into one
    text and dictionary-encoded, the codes combined into one group per shape, the shape read from
    the group's first row; ``key_change`` from the key columns' values, found at the places the
    shape gives them. Falls back to :func:`change_shapes_exact` for a batch whose lists the
    joined texts might confuse (:func:`_columnar_safe`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = staged.num_rows
    lists = [staged.column(c).combine_chunks() for c in SHAPE_PARTS]
    if n == 0 or not _columnar_safe(lists):
        return change_shapes_exact(staged)
    code = None
    for arr in lists:
        enc = pc.dictionary_encode(pc.binary_join(arr, SEPARATOR), null_encoding="encode")
        idx = enc.indices.cast(pa.int64())
        code = idx if code is None else pc.add(pc.multiply(code, len(enc.dictionary)), idx)
        code = pc.dictionary_encode(code).indices.cast(pa.int64())  # 0 .. groups-1, in order of first row
    groups = int(pc.max(code).as_py()) + 1
    first = pa.table({"g": code, "i": pa.array(range(n), pa.int64())}).group_by("g").aggregate([("i", "min")])
    rep = dict(zip(first.column("g").to_pylist(), first.column("i_min").to_pylist()))
    shapes_of = [tuple(arr[rep[g]].as_py() for arr in lists) for g in range(groups)]
    ids = [shape_id(s) for s in shapes_of]
    sids = pa.array(ids, pa.string()).take(code)
    return sids, _key_changes(staged, code, shapes_of), dict(zip(ids, shapes_of))


def _key_changes(staged: "pa.Table", code: "pa.Array", shapes_of: list[Shape]) -> "pa.Array":
    """``key_change`` of every row of ``staged`` whose shape is ``shapes_of[code[row]]``
    (:func:`key_change_of`, column by column)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def first_place(names: Optional[list], k: str) -> Optional[int]:
        return names.index(k) if names is not None and k in names else None

    images = {c: staged.column(c).combine_chunks() for c in ("before_v", "after_v")}
    starts = {c: arr.offsets.slice(0, len(arr)).cast(pa.int64()) for c, arr in images.items()}  # into .values

    def values_at(column: str, places: list) -> "pa.Array":
        at = pc.add(starts[column], pc.take(pa.array(places, pa.int64()), code))
        return pc.take(images[column].values, at)

    width = max((len(s[0]) for s in shapes_of if s[0] is not None), default=0)
    any_differs = pa.array([False] * len(code), pa.bool_())
    all_held = pa.array([True] * len(code), pa.bool_())
    for j in range(width):
        keys = [s[0][j] if s[0] is not None and j < len(s[0]) else None for s in shapes_of]
        active = pc.take(pa.array([k is not None for k in keys], pa.bool_()), code)
        b = values_at("before_v", [first_place(s[4], k) if k is not None else None for s, k in zip(shapes_of, keys)])
        a = values_at("after_v", [first_place(s[3], k) if k is not None else None for s, k in zip(shapes_of, keys)])
        same = pc.if_else(pc.and_(pc.is_valid(b), pc.is_valid(a)), pc.equal(b, a), pc.and_(pc.is_null(b), pc.is_null(a)))
        any_differs = pc.or_(any_differs, pc.and_(active, pc.invert(same)))
        all_held = pc.and_(all_held, pc.or_(pc.invert(active), pc.is_valid(b)))
    update = pc.and_kleene(pc.equal(staged.column("op").combine_chunks(), "update"),
                           pc.is_valid(staged.column("before_k").combine_chunks()))
    moved = pc.and_kleene(update, pc.and_(any_differs, all_held))
    has_key = pc.take(pa.array([s[0] is not None for s in shapes_of], pa.bool_()), code)
    return pc.if_else(has_key, moved, pa.nulls(len(code), pa.bool_()))


def shapes_table(shapes: dict[str, Shape], schema: Optional["pa.Schema"] = None) -> "pa.Table":
    """``shapes`` (``{id: shape}``) as rows of :data:`SHAPES_SCHEMA` (as the Arrow ``schema``
    given: a pyiceberg table's), ordered by id."""
    import pyarrow as pa

    from cdclake.lake.schemas import arrow_schema

    rows = [{"shape_id": sid, "primary_key": pk, "column_types": list(zip(tk, tv)) if tk is not None else None,
             "after_columns": after, "before_columns": before}
            for sid, (pk, tk, tv, after, before) in sorted(shapes.items())]
    return pa.Table.from_pylist(rows, schema=schema or arrow_schema(SHAPES_SCHEMA))


def commit_shapes(cfg: "PipelineConfig", shapes: dict[str, Shape]) -> int:
    """Append to ``bronze.change_shapes`` the shapes of ``shapes`` (``{id: shape}``) it does not
    hold yet, in one pyiceberg commit (none when all are there); return how many. A shape's id is
    its content's hash, so a rerun, a backfill or a commit that another run got in first adds
    nothing twice that differs: a commit that lost the race is tried again on the new snapshot,
    as a locked catalog database is (:func:`cdclake.catalog.with_retries`). Normalize calls it
    before committing the bronze rows that name the shapes."""
    from pyiceberg.exceptions import CommitFailedException

    from cdclake.catalog import pyiceberg_catalog, with_retries
    from cdclake.lake.schemas import SHAPES_TABLE

    if not shapes:
        return 0
    cat = pyiceberg_catalog(cfg.catalog)
    added = [0]

    def append() -> None:
        table = cat.load_table(SHAPES_TABLE)
        held = set(table.scan(selected_fields=("shape_id",)).to_arrow().column("shape_id").to_pylist())
        new = {sid: s for sid, s in shapes.items() if sid not in held}
        if new:
            table.append(shapes_table(new, table.schema().as_arrow()))
        added[0] = len(new)

    try:
        with_retries(append, cfg.catalog, f"committing {SHAPES_TABLE}", transient=(CommitFailedException,))
    finally:
        cat.engine.dispose()
    return added[0]


def read_shapes(spark: "SparkSession", table: str, ids: list[str]) -> dict[str, Shape]:
    """``{id: shape}`` of the shapes of ``ids`` that ``table`` (the qualified name of
    ``bronze.change_shapes``) holds; an id it lacks is left out."""
    from pyspark.sql import functions as F

    out: dict[str, Shape] = {}
    if not ids:
        return out
    for r in spark.table(table).where(F.col("shape_id").isin(sorted(ids))).collect():
        types = r["column_types"]
        out[r["shape_id"]] = (r["primary_key"], None if types is None else list(types),
                              None if types is None else list(types.values()), r["after_columns"], r["before_columns"])
    return out
