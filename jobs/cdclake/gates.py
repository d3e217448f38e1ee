"""Great Expectations gates between the stages.

A gate builds small pandas frames from the Iceberg tables (read with pyiceberg, no Spark
session needed) and validates them with the suite kept as data in ``expectations/<stage>.json``.
A failing gate raises :class:`GateFailed` with a readable summary and writes Data Docs HTML to
``gates.data_docs_dir`` (default ``$CDC_STATE_DIR/data_docs``).

Frames (one row each per the grain named):

- land, ``offsets`` (topic, partition, non-empty hour): ``kafka_start``/``kafka_end``/``expected``
  (the hour's offset range and record count, read from Kafka again by the gate),
  ``manifest_start``/``manifest_end``/``manifest_records`` (what land recorded), ``landed``,
  ``landed_distinct`` and ``out_of_range`` (counted in the raw table).
- normalize, ``counts`` (topic, hour): ``raw``, ``accounted`` (distinct Kafka records in bronze +
  quarantine + control), ``overlap`` (records in more than one of them); ``changes`` (bronze rows):
  op, source_table, source_position size, kafka coordinates.
- silver, ``keys:<table>``: the primary-key columns of every silver table the window touched.

Suite file shape: ``{"frames": {"<frame>": [{"type": "expect_...", "kwargs": {...}}]}}``; in the
silver suite, ``"$primary_key"`` in kwargs stands for the table's key column list and
``"$primary_key_column"`` for its only column, ``"when": "single_key"``/``"compound_key"`` keeps an
expectation for one-column or several-column keys, and ``"for_each": "primary_key"`` repeats an
expectation per key column (as ``column``).
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Optional

from cdclake.catalog import (BRONZE_TABLE, CONTROL_TABLE, MANIFEST_TABLE, QUARANTINE_TABLE, RAW_TABLE,
                             pyiceberg_catalog)
from cdclake.config import REPO_ROOT, PipelineConfig
from cdclake.window import Window, iso

log = logging.getLogger(__name__)
EXPECTATIONS_DIR = REPO_ROOT / "expectations"
STAGES = ("land", "normalize", "silver")


class GateFailed(RuntimeError):
    """A gate's expectations failed; the message lists each failed expectation and frame."""


def _scan(catalog, table: str, window: Window, topics: list[str], columns: tuple[str, ...]):
    from pyiceberg.expressions import And, GreaterThanOrEqual, In, LessThan

    flt = And(In("kafka_topic", topics), And(GreaterThanOrEqual("landed_hour", window.start.isoformat()),
                                             LessThan("landed_hour", window.end.isoformat())))
    return catalog.load_table(table).scan(row_filter=flt, selected_fields=columns).to_pandas()


def land_frames(cfg: PipelineConfig, window: Window) -> dict:
    """The land gate's ``offsets`` frame (see module docstring)."""
    import pandas as pd

    from cdclake import kafka_ranges

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    keys = ["kafka_topic", "kafka_partition", "landed_hour"]
    manifest = _scan(cat, MANIFEST_TABLE, window, topics, tuple(keys) + ("start_offset", "end_offset", "records"))
    raw = _scan(cat, RAW_TABLE, window, topics, tuple(keys) + ("kafka_offset",))
    k = cfg.kafka
    ranges = kafka_ranges.hour_ranges(k.bootstrap_servers, topics, window, k.timeout_s, k.client)
    kafka = pd.DataFrame([(r.topic, r.partition, r.hour, r.start, r.end, r.records) for r in ranges],
                         columns=keys + ["kafka_start", "kafka_end", "expected"])
    manifest = manifest.rename(columns={"start_offset": "manifest_start", "end_offset": "manifest_end",
                                        "records": "manifest_records"})
    for df in (manifest, raw, kafka):
        df["landed_hour"] = pd.to_datetime(df["landed_hour"], utc=True)
    frame = kafka.merge(manifest, on=keys, how="outer")
    m = raw.merge(frame[keys + ["kafka_start", "kafka_end"]], on=keys, how="left")
    m["out"] = ~((m["kafka_offset"] >= m["kafka_start"]) & (m["kafka_offset"] < m["kafka_end"]))
    agg = m.groupby(keys).agg(landed=("kafka_offset", "size"), landed_distinct=("kafka_offset", "nunique"),
                              out_of_range=("out", "sum")).reset_index()
    frame = frame.merge(agg, on=keys, how="outer")
    for c in ("landed", "landed_distinct", "out_of_range", "expected", "manifest_records"):
        frame[c] = frame[c].fillna(0).astype("int64")
    for c in ("kafka_start", "kafka_end", "manifest_start", "manifest_end"):
        frame[c] = frame[c].fillna(-1).astype("int64")
    return {"offsets": frame}


def normalize_frames(cfg: PipelineConfig, window: Window) -> dict:
    """The normalize gate's ``counts`` and ``changes`` frames."""
    import pandas as pd

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    coords = ("kafka_topic", "landed_hour", "kafka_partition", "kafka_offset")
    raw = _scan(cat, RAW_TABLE, window, topics, coords)
    changes = _scan(cat, BRONZE_TABLE, window, topics, coords + ("op", "source_table", "source_format", "source_position"))
    parts = {name: _scan(cat, table, window, topics, coords).drop_duplicates()
             for name, table in (("changes", BRONZE_TABLE), ("quarantine", QUARANTINE_TABLE), ("control", CONTROL_TABLE))}
    everything = pd.concat(parts.values(), ignore_index=True)
    per_record = everything.groupby(list(coords)).size().rename("n").reset_index()
    keys = ["kafka_topic", "landed_hour"]
    counts = raw.groupby(keys).size().rename("raw").reset_index()
    acc = per_record.groupby(keys).agg(accounted=("n", "size"), overlap=("n", lambda s: int((s > 1).sum()))).reset_index()
    counts = counts.merge(acc, on=keys, how="outer").fillna(0)
    for c in ("raw", "accounted", "overlap"):
        counts[c] = counts[c].astype("int64")
    changes = changes.assign(position_size=changes["source_position"].map(lambda p: 0 if p is None else len(p)))
    return {"counts": counts, "changes": changes.drop(columns=["source_position"])}


def silver_frames(cfg: PipelineConfig, window: Window) -> dict:
    """The silver gate's ``keys:<table>`` frames, one per silver table the window touched."""
    from cdclake.silver import SourceTable

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    prefixes = {s.topic: s.table_prefix for s in cfg.sources}
    bronze = _scan(cat, BRONZE_TABLE, window, topics,
                   ("kafka_topic", "source_database", "source_schema", "source_table", "op"))
    bronze = bronze[bronze["op"] != "truncate"]
    names = sorted({SourceTable(prefixes.get(r.kafka_topic, ""), r.source_database, r.source_schema,
                                r.source_table).silver_name
                    for r in bronze.drop_duplicates().itertuples()})
    frames = {}
    for name in names:
        tbl = cat.load_table((cfg.silver.namespace, name))
        pk = (tbl.properties.get("cdc.primary-key") or "").split(",")
        frames[f"keys:{name}"] = (tbl.scan(selected_fields=tuple(pk)).to_pandas(), pk)
    return frames


FRAME_BUILDERS = {"land": land_frames, "normalize": normalize_frames, "silver": silver_frames}


def load_suite(stage: str, directory: Optional[Path] = None) -> dict:
    """The suite of ``stage`` from ``expectations/<stage>.json``."""
    path = (directory or EXPECTATIONS_DIR) / f"{stage}.json"
    return json.loads(path.read_text())


def _expectations(spec: list[dict], pk: Optional[list[str]]):
    import great_expectations as gx

    for e in spec:
        cls = getattr(gx.expectations, "".join(w.capitalize() for w in e["type"].split("_")))
        when = e.get("when")
        if (when == "single_key" and len(pk or []) != 1) or (when == "compound_key" and len(pk or []) < 2):
            continue
        kwargs = {k: (pk if v == "$primary_key" else pk[0] if v == "$primary_key_column" else v)
                  for k, v in e.get("kwargs", {}).items()}
        if e.get("for_each") == "primary_key":
            for col in pk or []:
                yield cls(column=col, **kwargs)
        else:
            yield cls(**kwargs)


def validate(stage: str, frames: dict, docs_dir: Optional[Path] = None, suite: Optional[dict] = None) -> list[str]:
    """Run ``stage``'s suite on ``frames``; return one line per failed expectation (empty: pass).

    When something fails and ``docs_dir`` is given, Data Docs HTML is written there.
    """
    import os

    os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in task logs
    import great_expectations as gx

    logging.getLogger("great_expectations._docs_decorators").setLevel(logging.WARNING)
    suite = suite or load_suite(stage)
    ctx = gx.get_context(mode="ephemeral")
    if docs_dir is not None:
        ctx.add_data_docs_site(site_name="gates", site_config={
            "class_name": "SiteBuilder", "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)}})
    source = ctx.data_sources.add_pandas("gate")
    failures: list[str] = []
    for i, (frame_name, value) in enumerate(frames.items()):
        df, pk = value if isinstance(value, tuple) else (value, None)
        spec_name = frame_name.split(":")[0]
        spec = suite["frames"].get(spec_name, [])
        if not spec:
            continue
        safe = re.sub(r"[^A-Za-z0-9_]+", "_", frame_name)
        asset = source.add_dataframe_asset(f"{stage}_{safe}_{i}")
        batch = asset.add_batch_definition_whole_dataframe("all")
        gsuite = ctx.suites.add(gx.ExpectationSuite(name=f"{stage}.{safe}"))
        for exp in _expectations(spec, pk):
            gsuite.add_expectation(exp)
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"{stage}.{safe}", data=batch, suite=gsuite))
        res = vd.run(batch_parameters={"dataframe": df})
        for r in res.results:
            if not r.success:
                cfg = r.expectation_config
                detail = r.result.get("partial_unexpected_list") or r.result.get("observed_value") or r.exception_info
                failures.append(f"{frame_name}: {cfg.type} {_kwargs_text(cfg.kwargs)} failed "
                                f"(unexpected: {str(detail)[:200]})")
    if failures and docs_dir is not None:
        docs_dir.mkdir(parents=True, exist_ok=True)
        ctx.build_data_docs()
    return failures


def _kwargs_text(kwargs: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in kwargs.items() if k not in ("batch_id", "result_format"))


def run_gate(stage: str, cfg: PipelineConfig, window: Window) -> dict:
    """Build ``stage``'s frames for ``window`` and validate them.

    Returns ``{"stage", "window", "frames": {name: rows}}``. Raises :class:`GateFailed` listing
    every failed expectation (Data Docs written to ``cfg.gates.docs_dir()/<stage>``).
    """
    if stage not in STAGES:
        raise ValueError(f"unknown gate {stage!r}; gates: {STAGES}")
    frames = FRAME_BUILDERS[stage](cfg, window)
    docs = cfg.gates.docs_dir() / cfg.name / stage
    failures = validate(stage, frames, docs)
    summary = {"stage": stage, "window": str(window),
               "frames": {k: len(v[0] if isinstance(v, tuple) else v) for k, v in frames.items()}}
    if failures:
        raise GateFailed(f"{stage} gate failed for pipeline {cfg.name} {window}: {len(failures)} expectation(s) failed:\n  "
                         + "\n  ".join(failures) + f"\nData Docs: {docs / 'index.html'}")
    log.info("%s gate passed for %s %s: %s", stage, cfg.name, iso(window.start), summary["frames"])
    return summary
