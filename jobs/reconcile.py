"""Spark job: reconcile a pipeline's silver tables with their source database (:mod:`cdclake.reconcile`).

Compares each silver table with its source table (``reconcile.connection``) by checksums over key
buckets, writes a row per table to ``bronze.reconciliation`` and logs a line per table. Exit codes
as the stage jobs' (:mod:`cdclake.cli`): 1 with ``error: drift found: ...`` when a table drifted.

Usage: spark-submit jobs/reconcile.py --pipeline config/pipelines/demo.yaml [--table NAME ...]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cdclake.cli import main, reconcile_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("reconcile", reconcile_job()))
