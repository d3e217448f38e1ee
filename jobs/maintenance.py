"""Spark job: the daily table maintenance of a pipeline (:func:`cdclake.maintenance.maintain`).

Compacts data and position-delete files, expires snapshots, removes orphan files and deletes raw
and bronze hours past retention, as the pipeline's ``maintenance`` section says; each step is
logged with its table, procedure and result. Exit codes as the stage jobs' (:mod:`cdclake.cli`).

Usage: spark-submit jobs/maintenance.py --pipeline config/pipelines/demo.yaml
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cdclake.cli import main, maintenance_job  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("maintenance", maintenance_job()))
