"""The benchmark's input: ``bench.data.render`` renders a small hour of the simulated shop with the
source's net changes as Parquet (every column type of the simulator's tables, a timestamp without
a zone included), which ``make bench`` and ``make bench-profile`` read."""
from __future__ import annotations

import datetime as dt

import pyarrow.parquet as pq

from bench import data as bdata


def test_render_writes_the_hour_and_the_changes_of_every_column_type(tmp_path, monkeypatch):
    monkeypatch.setattr(bdata, "DATA_DIR", tmp_path)
    summary = bdata.render(300, 7, dt.datetime(2024, 1, 1, 1, tzinfo=dt.timezone.utc), ["dbz"], "fast", 1)
    assert summary["formats"]["dbz"]["messages"] > 0
    (cache,) = (tmp_path / "cache").iterdir()
    tables = {p.parent.name if p.parent.name != "changes" else p.stem: pq.read_table(p)
              for p in (cache / "changes").rglob("*.parquet")}
    assert tables
    types = {str(f.type) for t in tables.values() for f in t.schema}
    assert "timestamp[us]" in types  # created_at, ordered_at: MySQL DATETIME, without a zone
