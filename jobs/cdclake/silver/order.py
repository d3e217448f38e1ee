"""The order of a change: source position, then Kafka partition and offset, then row in the record.

Silver applies a key's changes in the source's own order (``source_position``, compared element
by element: :mod:`cdclake.positions`); arrival order (Kafka partition and offset) only breaks ties,
and the row's place inside a multi-row Kafka record (``row_in_record``) comes last. Silver stores
an order as the struct :data:`cdclake.lake.ORDER_TYPE`, fields ``p`` (array<decimal(38,0)>),
``kp`` (int) and ``ko`` (bigint); inside a batch an order also has ``row`` (int). An order read
back from a table has no row: it is :data:`STORED_ROW`, before every row of its Kafka record.

Every order the silver stage builds or compares is a :class:`ChangeOrder` turned into a struct,
as a column (:meth:`ChangeOrder.column`) or as SQL (:meth:`ChangeOrder.sql`), so that both sides of
a comparison have the same field names and types.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from pyspark.sql import Column

#: The row of an order read back from a table (tombstones, silver metadata): before every row of
#: its Kafka record.
STORED_ROW = -1


@dataclass(frozen=True)
class ChangeOrder:
    """Where the parts of a change's order are, as SQL expressions.

    ``source_position`` (array<decimal(38,0)>), ``kafka_partition`` (int), ``kafka_offset``
    (bigint) and ``row_in_record`` (int; None: an order read back from a table, whose row is
    :data:`STORED_ROW`).
    """

    source_position: str
    kafka_partition: str
    kafka_offset: str
    row_in_record: Optional[str] = None

    def _fields(self, row: bool) -> list[tuple[str, str]]:
        out = [("p", self.source_position), ("kp", self.kafka_partition), ("ko", self.kafka_offset)]
        if row:
            out.append(("row", str(STORED_ROW) if self.row_in_record is None else self.row_in_record))
        return out

    def column(self, row: bool = False) -> "Column":
        """The order as a struct column ``(p, kp, ko)``, with ``row`` ``(p, kp, ko, row)``."""
        from pyspark.sql import functions as F

        return F.struct(*[F.expr(e).alias(n) for n, e in self._fields(row)])

    def sql(self, row: bool = False) -> str:
        """The order as SQL ``named_struct('p', ..., 'kp', ..., 'ko', ...)`` (with ``row``: and ``'row', ...``)."""
        return "named_struct(" + ", ".join(f"'{n}', {e}" for n, e in self._fields(row)) + ")"


#: The order of a bronze change (columns of :data:`cdclake.lake.BRONZE_SCHEMA`).
BRONZE = ChangeOrder("source_position", "kafka_partition", "kafka_offset", "row_in_record")


def latest_change(alias: str = "") -> ChangeOrder:
    """The order of the latest change of a silver or tombstone row: its ``_cdc_position``,
    ``_cdc_kafka_partition`` and ``_cdc_kafka_offset`` (of table alias ``alias`` when given)."""
    a = f"{alias}." if alias else ""
    return ChangeOrder(f"{a}_cdc_position", f"{a}_cdc_kafka_partition", f"{a}_cdc_kafka_offset")


def in_struct(struct: str, row: bool = False) -> ChangeOrder:
    """The order held in the struct ``struct`` (SQL): its fields ``p``, ``kp``, ``ko`` (and ``row`` with ``row``)."""
    return ChangeOrder(f"{struct}.p", f"{struct}.kp", f"{struct}.ko", f"{struct}.row" if row else None)


def literal(at: tuple) -> ChangeOrder:
    """The order ``at`` = ``(position, Kafka partition, Kafka offset)`` (Python values) as SQL literals."""
    pos = ", ".join(f"CAST({int(x)} AS DECIMAL(38,0))" for x in at[0])
    return ChangeOrder(f"CAST(array({pos}) AS ARRAY<DECIMAL(38,0)>)", f"CAST({int(at[1])} AS INT)",
                       f"CAST({int(at[2])} AS BIGINT)")
