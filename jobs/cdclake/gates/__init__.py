"""Great Expectations gates between the stages.

A gate builds small pandas frames from the Iceberg tables (read with pyiceberg, no Spark
session needed; :mod:`cdclake.gates.frames`) and validates them with the suite kept as data in ``expectations/<stage>.json``.
A failing gate raises :class:`GateFailed` with a readable summary naming its report page;
every gate run, pass or fail, writes to ``gates.data_docs_dir`` (default
``$CDC_STATE_DIR/data_docs``), under ``<pipeline>/<stage>/<window>`` (:func:`docs_path`; the latest
run of each window, so a failed window's pages stay after later windows pass): ``gate.html``, a
static page of every expectation's result that reads the same offline (:func:`write_report`), and
Great Expectations' Data Docs (``index.html``, whose list and styling load from CDNs, and one
static page per validated frame under ``validations/``).

Frames (one row each per the grain named):

- land, ``offsets`` (topic, every partition, every hour of the window):
  ``manifest_start``/``manifest_end``/``manifest_records`` (the offset ledger's range; -1 when the
  hour has no range), ``kafka_records`` and ``log_start`` (records Kafka holds now in that range,
  and the partition's first offset: the range is read again by offset when the raw table lacks
  any of its offsets or holds one twice; a range the raw table holds at every offset exactly
  once needs no read, as Kafka cannot hold a record there the raw table lacks), ``landed``,
  ``landed_distinct``, ``out_of_range`` and ``expired`` (counted in the raw table: rows, distinct
  offsets, offsets outside the range, offsets below the log start), ``landed_present`` (landed
  minus expired).
- land, ``ledger`` (topic, partition): the partition's ranges around the window in hour order
  (:func:`cdclake.lake.ledger_around`: its latest hour before the window, the window's hours and
  its earliest hour after it; each hour's gate checks its window against its neighbours, so a
  gate reads as much ledger after a year as after a day): ``ranges``,
  ``gaps`` and ``overlaps`` (a range starting after or before the end of the one before it),
  ``backwards`` (end before start), ``first_start``, ``last_end``, ``log_start``, ``log_end`` and
  ``expired_offsets`` (ledger offsets the broker no longer has: reported, not a failure).
- normalize, ``counts`` (topic, hour): ``raw``, ``accounted`` (distinct Kafka records in bronze +
  quarantine + control), ``overlap`` (records in more than one of them); ``quarantine`` (topic,
  hour): the quarantine budget (:func:`quarantine_frame`: ``quarantined``, ``share``,
  ``top_reasons``, ``over_budget``); ``changes`` (bronze rows): op, source_table, source_position
  size, kafka coordinates.
- silver, ``keys:<n> key columns`` (silver rows of the tables the window touched, per key width):
  ``_table``, ``key_1`` .. ``key_<n>``; the key is ``[_table, key_1, ...]``: a failure names its table.

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

from cdclake.config import REPO_ROOT, PipelineConfig
from cdclake.errors import GateFailed
from cdclake.gates.frames import (TOP_REASONS, land_frames, normalize_frames, quarantine_frame, reason_kind,
                                  silver_frames)
from cdclake.results import GateResult
from cdclake.window import Window, iso

__all__ = ["FRAME_BUILDERS", "GateFailed", "STAGES", "TOP_REASONS", "build_frames", "docs_path", "land_frames",
           "load_suite", "normalize_frames", "quarantine_frame", "reason_kind", "run_gate", "silver_frames",
           "validate", "write_report"]

log = logging.getLogger(__name__)
EXPECTATIONS_DIR = REPO_ROOT / "expectations"
STAGES = ("land", "normalize", "silver")


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


def validate(stage: str, frames: dict, docs_dir: Optional[Path] = None, suite: Optional[dict] = None,
             outcomes: Optional[list] = None) -> list[str]:
    """Run ``stage``'s suite on ``frames``; return one line per failed expectation (empty: pass).

    Given ``docs_dir``, Data Docs HTML of the run (pass or fail) is written there: ``index.html``
    and one page per validated frame. Given ``outcomes``, one dict per expectation run is appended
    to it: ``frame``, ``expectation`` (type), ``kwargs`` (text), ``success`` (bool), ``detail``
    (the unexpected values or observed value, text; empty when it passed).
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
        gsuite = ctx.suites.add(gx.ExpectationSuite(name=f"{stage}.{safe}_{i}"))
        for exp in _expectations(spec, pk):
            gsuite.add_expectation(exp)
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"{stage}.{safe}_{i}", data=batch, suite=gsuite))
        res = vd.run(batch_parameters={"dataframe": df})
        for r in res.results:
            cfg = r.expectation_config
            detail = "" if r.success else str(r.result.get("partial_unexpected_list") or r.result.get("observed_value")
                                              or r.exception_info)[:DETAIL_CHARS]
            if outcomes is not None:
                outcomes.append({"frame": frame_name, "expectation": cfg.type, "kwargs": _kwargs_text(cfg.kwargs),
                                 "success": bool(r.success), "detail": detail})
            if not r.success:
                failures.append(f"{frame_name}: {cfg.type} {_kwargs_text(cfg.kwargs)} failed (unexpected: {detail})")
    if docs_dir is not None:
        docs_dir.mkdir(parents=True, exist_ok=True)
        ctx.build_data_docs()
    return failures


#: A failed expectation's unexpected or observed values are cut to this many characters.
DETAIL_CHARS = 1000


def _kwargs_text(kwargs: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in kwargs.items() if k not in ("batch_id", "result_format"))


def docs_path(cfg: PipelineConfig, stage: str, window: Window) -> Path:
    """Where a gate run of ``stage`` over ``window`` writes its pages:
    ``<gates.data_docs_dir>/<pipeline>/<stage>/<start>_<end>`` (hours as ``YYYY-MM-DDTHH``, UTC)."""
    tag = f"{window.start:%Y-%m-%dT%H}_{window.end:%Y-%m-%dT%H}"
    return cfg.gates.docs_dir() / cfg.name / stage / tag


def write_report(path: Path, title: str, outcomes: list[dict]) -> Path:
    """Write ``path`` (HTML, no scripts, no styles from elsewhere: it reads the same offline): the
    gate's verdict, then one table row per expectation of ``outcomes`` (see :func:`validate`),
    failed ones first, with links to Great Expectations' page of each frame next to it."""
    import html

    path.parent.mkdir(parents=True, exist_ok=True)
    failed = [o for o in outcomes if not o["success"]]
    pages = {p.parent.parent.parent.name: p.relative_to(path.parent).as_posix()
             for p in path.parent.glob("validations/*/*/*/*/*.html")}
    rows = []
    for o in failed + [o for o in outcomes if o["success"]]:
        safe = re.sub(r"[^A-Za-z0-9_]+", "_", o["frame"])
        link = next((href for name, href in pages.items() if name.rsplit("_", 1)[0] == safe), None)
        frame = html.escape(o["frame"])
        if link:
            frame = '<a href="' + html.escape(link, quote=True) + '">' + frame + "</a>"
        cells = ["FAILED" if not o["success"] else "passed", frame, html.escape(o["expectation"]),
                 html.escape(o["kwargs"]), html.escape(o["detail"])]
        rows.append(f"<tr class={'pass' if o['success'] else 'fail'}><td>" + "</td><td>".join(cells) + "</td></tr>")
    verdict = f"FAILED: {len(failed)} of {len(outcomes)} expectations" if failed else f"passed: {len(outcomes)} expectations"
    path.write_text(
        "<!doctype html><html><head><meta charset=utf-8><title>" + html.escape(title) + "</title><style>"
        "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}td,th{border:1px solid #bbb;"
        "padding:.3em .6em;text-align:left;vertical-align:top}tr.fail td:first-child{color:#b00;font-weight:bold}"
        "tr.pass td:first-child{color:#070}</style></head><body><h1>" + html.escape(title) + "</h1><p><b>"
        + verdict + "</b></p><table><tr><th>result</th><th>frame</th><th>expectation</th><th>arguments</th>"
        "<th>unexpected / observed</th></tr>" + "".join(rows) + "</table><p>Great Expectations' Data Docs: "
        "<a href=index.html>index.html</a> (its list needs the network)</p></body></html>\n")
    return path


#: How long, in seconds, a gate retries building its frames after transient read errors.
GATE_RETRY_S = 60.0


def build_frames(stage: str, cfg: PipelineConfig, window: Window, wait_s: Optional[float] = None) -> dict:
    """``stage``'s frames for ``window`` (``FRAME_BUILDERS``), rebuilt with backoff after a transient read error.

    Transient: a locked catalog database, ``OSError`` (files of the warehouse, sockets) and
    ``KafkaUnavailable``, retried for up to ``wait_s`` seconds (default :data:`GATE_RETRY_S`) by
    :func:`cdclake.catalog.with_retries`; each attempt is logged (``building frames, attempt n``).
    Raises :class:`cdclake.catalog.CatalogLocked` when the catalog stays locked, the last error
    when another transient error outlasts the budget, any other error at once.
    """
    from cdclake.catalog import with_retries
    from cdclake.errors import KafkaUnavailable

    attempts = 0

    def build() -> dict:
        nonlocal attempts
        attempts += 1
        log.info("%s gate for %s %s: building frames, attempt %d", stage, cfg.name, window, attempts)
        return FRAME_BUILDERS[stage](cfg, window)

    return with_retries(build, cfg.catalog, f"{stage} gate for {cfg.name} {window}",
                        transient=(OSError, KafkaUnavailable), wait_s=GATE_RETRY_S if wait_s is None else wait_s)


def _release_arrow_memory() -> None:
    """Hand the memory Arrow's pool keeps for reuse back to the system: a process that runs more
    than one gate (a backfill, the benchmark) would otherwise hold each gate's largest frames."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def run_gate(stage: str, cfg: PipelineConfig, window: Window) -> GateResult:
    """Build ``stage``'s frames for ``window`` and validate them.

    Returns a :class:`cdclake.results.GateResult` (``stage``, ``window``, ``frames``: ``{name:
    rows}``, ``data_docs``: path of gate.html; it reads as the dict of those keys); every
    run, pass or fail, writes ``gate.html`` and Great Expectations' Data Docs to :func:`docs_path`.
    Raises :class:`GateFailed` listing every failed expectation and the Data Docs page; a failed
    expectation is never retried, whereas reading the frames is, after transient errors
    (:func:`build_frames`; :class:`cdclake.catalog.CatalogLocked` when the catalog stays locked).
    """
    if stage not in STAGES:
        raise ValueError(f"unknown gate {stage!r}; gates: {STAGES}")
    frames = build_frames(stage, cfg, window)
    docs = docs_path(cfg, stage, window)
    outcomes: list[dict] = []
    failures = validate(stage, frames, docs, outcomes=outcomes)
    report = write_report(docs / "gate.html", f"{stage} gate, pipeline {cfg.name}, {window}", outcomes)
    counts = {k: len(v[0] if isinstance(v, tuple) else v) for k, v in frames.items()}
    del frames
    _release_arrow_memory()
    if failures:
        raise GateFailed(f"{stage} gate failed for pipeline {cfg.name} {window}: {len(failures)} expectation(s) failed:\n  "
                         + "\n  ".join(failures) + f"\nData Docs: {report}")
    log.info("%s gate passed for %s %s: %s; Data Docs: %s", stage, cfg.name, iso(window.start), counts, report)
    return GateResult(stage=stage, window=str(window), frames=counts, data_docs=str(report))
