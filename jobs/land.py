"""Spark job: Land the hour window's Kafka records into the raw Iceberg table.

Usage: spark-submit jobs/land.py --pipeline config/pipelines/demo.yaml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cdclake.cli import main, spark_stage  # noqa: E402
from cdclake.land import land  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("land", spark_stage("land", land)))
