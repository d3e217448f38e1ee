"""Complete transactions only: hold back the changes of a transaction until all of it has landed.

With ``silver.complete_transactions: true``, the silver stage applies a change that belongs to a
transaction (``tx_id``) only once the transaction is complete, so that silver never shows half of
one. Whether a transaction is complete is read from the markers its format sends, over every
landed hour (a transaction may span hours and partitions):

===============  =============================================================================
format           a transaction is complete when
===============  =============================================================================
Qlik Replicate   one of its changes has ``transactionLastEvent`` true (bronze ``tx_last``)
Maxwell          its last row, the one with ``commit: true``, has landed (bronze ``tx_last``)
SharePlex        its distinct operation numbers (``meta.seq``/``idx``, bronze ``tx_seq``) number
                 ``meta.size`` (bronze ``tx_size``)
Alibaba DTS      its ``COMMIT`` record has landed (``bronze.control_events`` kind ``transaction``,
                 ``tx_end`` true)
===============  =============================================================================

A topic whose records carry none of these markers (other formats, or the vendor set not to send
them) is applied as it lands. So is a change without a transaction id (Qlik refresh, DTS without
``sourceTxid``). Transaction ids are scoped by topic, so a topic must carry whole transactions.

When an hour completes a transaction, the transaction's changes from every landed hour are
applied with it (changes applied before are applied again, which changes nothing). A transaction
that never completes (a change quarantined, a topic that carries part of it) is held: the silver
run logs it with its topic, id and count of changes every time.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.catalog import materialize, qualified
from cdclake.config import PipelineConfig
from cdclake.lake import CONTROL_TABLE, window_filter
from cdclake.window import Window

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass
class Held:
    """Changes of the window held back: per topic, the number of incomplete transactions and changes."""

    topic: str
    transactions: int
    changes: int
    examples: list[str]


def complete_changes(spark: "SparkSession", cfg: PipelineConfig, every: "DataFrame", window: Window,
                     topics: list[str]) -> tuple["DataFrame", list[Held]]:
    """The bronze changes to apply for ``window``: those of complete transactions and those outside any.

    ``every`` is the bronze table (every landed hour). Returns the rows (bronze columns) and what
    was held back. The rows are the window's changes that are not in an incomplete transaction,
    plus every landed change of each transaction that the window touches (a change or a COMMIT in
    the window) and that is complete.
    """
    from pyspark.sql import functions as F

    in_window = window_filter(window, topics)
    mine = every.where(F.col("kafka_topic").isin(topics))
    ctl = (spark.table(qualified(cfg, CONTROL_TABLE))
           .where(F.col("kafka_topic").isin(topics) & (F.col("kind") == "transaction") & F.col("tx_id").isNotNull()))
    # topics whose records mark transaction boundaries at all
    marked = (mine.where(F.col("tx_last").isNotNull() | F.col("tx_size").isNotNull()).select("kafka_topic")
              .union(ctl.select("kafka_topic")).distinct())
    touched = (every.where(in_window & F.col("tx_id").isNotNull()).select("kafka_topic", "tx_id")
               .union(ctl.where(in_window).select("kafka_topic", "tx_id")).distinct()
               .join(marked, "kafka_topic"))
    tx_changes = mine.join(touched, ["kafka_topic", "tx_id"])
    by_changes = tx_changes.groupBy("kafka_topic", "tx_id").agg(
        F.max(F.coalesce("tx_last", F.lit(False))).alias("last_seen"), F.max("tx_size").alias("size"),
        F.count_distinct("tx_seq").alias("seqs"))
    commits = ctl.where(F.col("tx_end")).select("kafka_topic", "tx_id").distinct().withColumn("committed", F.lit(True))
    status = (touched.join(by_changes, ["kafka_topic", "tx_id"], "left").join(commits, ["kafka_topic", "tx_id"], "left")
              .withColumn("complete", F.coalesce(
                  F.col("last_seen") | (F.col("size").isNotNull() & (F.col("seqs") >= F.col("size")))
                  | F.coalesce("committed", F.lit(False)), F.lit(False))))
    status = materialize(status)  # read twice: complete and held
    complete = status.where("complete").select("kafka_topic", "tx_id")
    held_ids = status.where(~F.col("complete")).select("kafka_topic", "tx_id")
    window_rows = every.where(in_window)
    free = window_rows.join(held_ids, ["kafka_topic", "tx_id"], "left_anti").join(
        complete, ["kafka_topic", "tx_id"], "left_anti")
    rows = free.unionByName(mine.join(complete, ["kafka_topic", "tx_id"]).select(*every.columns))
    rows = materialize(rows)  # every silver table reads it
    held = []
    for r in (window_rows.join(held_ids, ["kafka_topic", "tx_id"]).groupBy("kafka_topic")
              .agg(F.count_distinct("tx_id").alias("tx"), F.count("*").alias("n"),
                   F.slice(F.sort_array(F.collect_set("tx_id")), 1, 5).alias("ids")).collect()):
        held.append(Held(r["kafka_topic"], int(r["tx"]), int(r["n"]), list(r["ids"])))
        log.warning("topic %s, %s: holding %d change(s) of %d incomplete transaction(s) (e.g. %s) until they complete",
                    r["kafka_topic"], window, r["n"], r["tx"], ", ".join(r["ids"]))
    return rows, held
