"""Spark job: Parse the window's raw records into canonical bronze rows, quarantine and control events.

Usage: spark-submit jobs/normalize.py --pipeline config/pipelines/demo.yaml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cdclake.cli import main, spark_stage  # noqa: E402
from cdclake.normalize import normalize  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("normalize", spark_stage("normalize", normalize)))
