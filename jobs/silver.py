"""Spark job: Order, deduplicate and MERGE the window's bronze changes into the silver tables.

Usage: spark-submit jobs/silver.py --pipeline config/pipelines/demo.yaml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cdclake.cli import main, spark_stage  # noqa: E402
from cdclake.silver import build_silver  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("silver", spark_stage("silver", build_silver)))
