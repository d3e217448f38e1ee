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

Changes without a source position. A format whose message holds none gives the empty position
``()`` (AWS DMS always; Maxwell without ``output_binlog_position``, under
``sources[].options.without_position: kafka-order``, its default; SharePlex without ``scn``;
GoldenGate without ``pos``). The empty array sorts before every other position, and between two
empty positions the struct comparison falls to ``kp`` then ``ko``: such changes are ordered by
Kafka partition number first, then offset. Offsets order the records of one partition, as the
producer wrote them; the partition number orders nothing. So two changes of one key without a
position are in the source's order only when they come from one partition; from two partitions,
the one in the higher-numbered partition would win whatever the source did, in a batch (the
collapse) and across batches (the silver row's ``_cdc_kafka_partition`` against the new
change's, in the MERGE: a later hour's change in a lower-numbered partition is taken as older
and dropped). Silver does not guess: the collapse also reports, per key, the least and the
greatest partition of its changes without a position (:func:`unordered_partitions`, columns
:data:`UNORDERED_PARTITIONS`), and :func:`cdclake.silver.keys.check_kafka_order` fails the table
before its MERGE when they differ, or when they differ from the partition of the silver row's
latest change made without a position, naming the key, the partitions and what to change
(:data:`KAFKA_ORDER_HINT`). A change with a position is never compared by partition with one
of another partition unless their positions are equal.
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


#: The columns of a collapsed batch (:func:`cdclake.silver.merge.collapse`) holding, per key, the
#: least and the greatest Kafka partition of its changes without a source position (null: none).
UNORDERED_PARTITIONS = ("_kp_lo", "_kp_hi")

#: What to change when a key's changes without a source position come from several partitions
#: (:func:`cdclake.silver.keys.check_kafka_order`): every name a setting of the pipeline file or
#: of the producer.
KAFKA_ORDER_HINT = ("the Kafka order of changes without a source position (maxwell-json under "
                    "sources[].options.without_position: kafka-order, its default; aws-dms-json always) holds only "
                    "when each key's changes reach one Kafka partition: partition the producer so that they do "
                    "(Maxwell producer_partition_by database, table or primary_key; AWS DMS partition-key-type "
                    "schema-table or primary-key), or have it send positions (Maxwell output_binlog_position=true), "
                    "or quarantine Maxwell rows without one (sources[].options.without_position: quarantine)")


def unordered_partitions(order: str = "_ord") -> list:
    """Two aggregates over a key's changes (struct column ``order``: :data:`BRONZE` or a stored
    order): the least and the greatest Kafka partition of those without a source position (empty
    ``p``), named :data:`UNORDERED_PARTITIONS`; null when every change has a position."""
    from pyspark.sql import functions as F

    kp = F.when(F.size(F.col(f"{order}.p")) == 0, F.col(f"{order}.kp"))
    return [F.min(kp).alias(UNORDERED_PARTITIONS[0]), F.max(kp).alias(UNORDERED_PARTITIONS[1])]
