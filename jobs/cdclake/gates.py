"""Great Expectations gates between the stages.

A gate builds small pandas frames from the Iceberg tables (read with pyiceberg, no Spark
session needed) and validates them with the suite kept as data in ``expectations/<stage>.json``.
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
- land, ``ledger`` (topic, partition): the partition's whole ledger in hour order: ``ranges``,
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

import functools
import json
import logging
import re
from pathlib import Path
from typing import Optional

from cdclake.catalog import pyiceberg_catalog
from cdclake.config import REPO_ROOT, PipelineConfig
from cdclake.errors import GateFailed
from cdclake.lake import (BRONZE_TABLE, CONTROL_TABLE, MANIFEST_TABLE, PRIMARY_KEY_PROPERTY, QUARANTINE_TABLE,
                          RAW_TABLE, SourceTable, resolve_legacy_name)
from cdclake.results import GateResult
from cdclake.window import Window, iso

log = logging.getLogger(__name__)
EXPECTATIONS_DIR = REPO_ROOT / "expectations"
STAGES = ("land", "normalize", "silver")


def _scan_arrow(catalog, table: str, window: Optional[Window], topics: list[str], columns: tuple[str, ...]):
    """``columns`` of ``topics``' rows in the hours of ``window`` (None: every hour) of hour table
    ``table``, an Arrow table.

    The scan is planned for the window's hours, its files chosen by their ``kafka_topic``
    partition value (one set lookup each: pyiceberg evaluates an ``In`` filter literal by literal
    for every file, which cost the gates of a thousand-topic hour a minute each) and read without
    a row filter (a file's rows are all of its partition's topic and hour); the rows are filtered
    by topic and hour afterwards, in one pass (a file of a partition spec without them)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThan
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.transforms import IdentityTransform

    tbl = catalog.load_table(table)
    hours = AlwaysTrue() if window is None else And(GreaterThanOrEqual("landed_hour", window.start.isoformat()),
                                                    LessThan("landed_hour", window.end.isoformat()))
    scan = tbl.scan(row_filter=hours, selected_fields=tuple(dict.fromkeys(columns + ("kafka_topic", "landed_hour"))))
    wanted, schema = set(topics), tbl.schema()
    position = {spec_id: next((i for i, f in enumerate(spec.fields) if isinstance(f.transform, IdentityTransform)
                               and schema.find_column_name(f.source_id) == "kafka_topic"), None)
                for spec_id, spec in tbl.specs().items()}
    tasks = [t for t in scan.plan_files()
             if position[t.file.spec_id] is None or t.file.partition[position[t.file.spec_id]] in wanted]
    rows = ArrowScan(tbl.metadata, tbl.io, scan.projection(), AlwaysTrue(), scan.case_sensitive).to_table(tasks)
    keep = pc.is_in(rows["kafka_topic"], pa.array(topics, pa.string()))
    if window is not None:
        hour = rows["landed_hour"]
        keep = pc.and_(keep, pc.and_(pc.greater_equal(hour, pa.scalar(window.start, hour.type)),
                                     pc.less(hour, pa.scalar(window.end, hour.type))))
    return rows.filter(keep).select(list(columns))


def _scan(catalog, table: str, window: Window, topics: list[str], columns: tuple[str, ...]):
    """:func:`_scan_arrow` as a pandas frame."""
    return _scan_arrow(catalog, table, window, topics, columns).to_pandas()


def land_frames(cfg: PipelineConfig, window: Window) -> dict:
    """The land gate's ``offsets`` and ``ledger`` frames (see module docstring)."""
    import pandas as pd

    from cdclake import kafka_ranges

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    keys = ["kafka_topic", "kafka_partition", "landed_hour"]
    ledger = _scan(cat, MANIFEST_TABLE, None, topics, tuple(keys) + ("start_offset", "end_offset", "records"))
    raw = _scan(cat, RAW_TABLE, window, topics, tuple(keys) + ("kafka_offset",))
    for df in (ledger, raw):
        df["landed_hour"] = pd.to_datetime(df["landed_hour"], utc=True)
    ledger = ledger.sort_values(keys, kind="stable").reset_index(drop=True)
    start, end = pd.Timestamp(window.start), pd.Timestamp(window.end)
    inside = ledger[(ledger["landed_hour"] >= start) & (ledger["landed_hour"] < end)]

    # A range the raw table holds at every offset exactly once needs no read of Kafka: Kafka holds
    # nothing there the raw table lacks (its count comes from the log start). Only ranges with
    # offsets the raw table lacks (compacted records, transaction markers, a loss) are read again.
    in_range = raw.merge(inside[keys + ["start_offset", "end_offset"]], on=keys, how="inner")
    in_range = in_range[(in_range["kafka_offset"] >= in_range["start_offset"])
                        & (in_range["kafka_offset"] < in_range["end_offset"])]
    held = in_range.groupby(keys).agg(rows=("kafka_offset", "size"), distinct=("kafka_offset", "nunique"))
    held = {k_: (int(v.rows), int(v.distinct)) for k_, v in held.iterrows()}
    k = cfg.kafka
    parts = kafka_ranges.partitions(k.bootstrap_servers, topics, k.timeout_s, k.client)
    wanted: dict[tuple[str, int], list[tuple[int, int]]] = {tp: [] for tp in parts}
    dense: dict[tuple[str, int], list[bool]] = {tp: [] for tp in parts}
    hours: dict[tuple[str, int], list] = {tp: [] for tp in parts}
    for r in inside.itertuples():
        tp = (r.kafka_topic, r.kafka_partition)
        wanted.setdefault(tp, []).append((r.start_offset, r.end_offset))
        hours.setdefault(tp, []).append(r.landed_hour)
        size = r.end_offset - r.start_offset
        dense.setdefault(tp, []).append(held.get((r.kafka_topic, r.kafka_partition, r.landed_hour)) == (size, size))
    seen = {(o.topic, o.partition): o for o in
            kafka_ranges.observe_ranges(k.bootstrap_servers, wanted, max(k.timeout_s, 30.0), k.client, dense=dense)}

    # offsets: every partition of the topics and every hour of the window
    grid = pd.DataFrame([(t, p, pd.Timestamp(h)) for t, p in parts for h in window.hours()], columns=keys)
    observed = pd.DataFrame([(t, p, h, o.records[i], o.log_start) for (t, p), o in seen.items()
                             for i, h in enumerate(hours[(t, p)])], columns=keys + ["kafka_records", "log_start"])
    observed["landed_hour"] = pd.to_datetime(observed["landed_hour"], utc=True)
    frame = grid.merge(inside, on=keys, how="left").rename(columns={
        "start_offset": "manifest_start", "end_offset": "manifest_end", "records": "manifest_records"})
    frame = frame.merge(observed, on=keys, how="left")
    m = raw.merge(frame[keys + ["manifest_start", "manifest_end", "log_start"]], on=keys, how="left")
    m["out"] = ~((m["kafka_offset"] >= m["manifest_start"]) & (m["kafka_offset"] < m["manifest_end"]))
    m["expired"] = m["kafka_offset"] < m["log_start"]
    agg = m.groupby(keys).agg(landed=("kafka_offset", "size"), landed_distinct=("kafka_offset", "nunique"),
                              out_of_range=("out", "sum"), expired=("expired", "sum")).reset_index()
    frame = frame.merge(agg, on=keys, how="outer")
    for c in ("landed", "landed_distinct", "out_of_range", "expired", "manifest_records", "kafka_records"):
        frame[c] = frame[c].fillna(0).astype("int64")
    for c in ("manifest_start", "manifest_end", "log_start"):
        frame[c] = frame[c].fillna(-1).astype("int64")
    frame["landed_present"] = frame["landed"] - frame["expired"]

    # ledger: each partition's whole ledger, ranges in hour order
    rows = []
    for (t, p), g in ledger.groupby(["kafka_topic", "kafka_partition"], sort=True):
        s, e = g["start_offset"].to_numpy(), g["end_offset"].to_numpy()
        o = seen.get((t, p))
        low = o.log_start if o else -1
        rows.append((t, p, len(g), int((s[1:] > e[:-1]).sum()), int((s[1:] < e[:-1]).sum()), int((e < s).sum()),
                     int(s[0]), int(e[-1]), low, o.log_end if o else -1,
                     max(0, min(low, int(e[-1])) - int(s[0])) if low >= 0 else 0))
    ledger_frame = pd.DataFrame(rows, columns=["kafka_topic", "kafka_partition", "ranges", "gaps", "overlaps",
                                               "backwards", "first_start", "last_end", "log_start", "log_end",
                                               "expired_offsets"])
    expired = ledger_frame[ledger_frame["expired_offsets"] > 0]
    for r in expired.itertuples():
        log.warning("land gate: %s[%d] offsets %d..%d of the ledger are no longer on the broker (log starts at %d)",
                    r.kafka_topic, r.kafka_partition, r.first_start, min(r.log_start, r.last_end), r.log_start)
    return {"offsets": frame, "ledger": ledger_frame}


def normalize_frames(cfg: PipelineConfig, window: Window) -> dict:
    """The normalize gate's ``counts`` and ``changes`` frames.

    The counts are computed in Arrow (grouped, never a row per record in pandas), and the
    ``changes`` frame holds its text columns as categories: a 5M-change hour as Python strings
    took gigabytes of the gate's memory."""
    import pyarrow as pa
    import pyarrow.compute as pc

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    coords = ["kafka_topic", "landed_hour", "kafka_partition", "kafka_offset"]
    keys = ["kafka_topic", "landed_hour"]
    changes = _scan_arrow(cat, BRONZE_TABLE, window, topics, tuple(coords) + ("op", "source_table", "source_format"))

    def records(table):
        """Each record (coordinates, none null) once: then a record two tables hold is an overlap."""
        every = functools.reduce(pc.and_, [pc.is_valid(table[c]) for c in coords])
        return _distinct(table.select(coords).filter(every), coords)

    held = [records(changes)] + [records(_scan_arrow(cat, table, window, topics, tuple(coords)))
                                 for table in (QUARANTINE_TABLE, CONTROL_TABLE)]
    per_record = pa.concat_tables([t.cast(held[0].schema) for t in held]).group_by(coords).aggregate([([], "count_all")])
    per_record = per_record.append_column("_twice", pc.cast(pc.greater(per_record["count_all"], 1), pa.int64()))
    acc = per_record.group_by(keys).aggregate([([], "count_all"), ("_twice", "sum")])
    raw = _scan_arrow(cat, RAW_TABLE, window, topics, tuple(coords)).group_by(keys).aggregate([([], "count_all")])
    counts = raw.rename_columns([{"count_all": "raw"}.get(c, c) for c in raw.column_names]).to_pandas()
    acc = acc.rename_columns([{"count_all": "accounted", "_twice_sum": "overlap"}.get(c, c)
                              for c in acc.column_names]).to_pandas()
    counts = counts[keys + ["raw"]].merge(acc[keys + ["accounted", "overlap"]], on=keys, how="outer").fillna(0)
    for c in ("raw", "accounted", "overlap"):
        counts[c] = counts[c].astype("int64")
    reasons = _scan_arrow(cat, QUARANTINE_TABLE, window, topics, ("kafka_topic", "landed_hour", "reason"))
    budget = quarantine_frame(counts, reasons.to_pandas(), cfg.normalize.max_quarantined,
                              cfg.normalize.max_quarantine_share)
    # converted column by column, each Arrow column freed once converted
    return {"counts": counts, "quarantine": budget,
            "changes": changes.to_pandas(strings_to_categorical=True, split_blocks=True, self_destruct=True)}


#: How many of a topic hour's quarantine reasons, most frequent first, the normalize gate names.
TOP_REASONS = 3
_QUOTED = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\b\d+\b|\b(?=\w*\d)\w{8,}\b""")
_FIELD_PREFIX = re.compile(r"^[^:]+: field '[^']*': ")


def reason_kind(reason: str) -> str:
    """A quarantine reason with the record's own values taken out, so that reasons of one kind count
    together: after the ``<format>: field '<field>': `` prefix, quoted text becomes ``'…'`` and
    numbers ``N``, identifiers of eight or more characters holding a digit ``…`` (a schema id)
    (``debezium-json: field 'op': unknown operation 'x'`` →
    ``debezium-json: field 'op': unknown operation '…'``)."""
    reason = reason or ""
    m = _FIELD_PREFIX.match(reason)
    head, rest = (reason[:m.end()], reason[m.end():]) if m else ("", reason)
    return head + _QUOTED.sub(_placeholder, rest)[:300]


def _placeholder(m: re.Match) -> str:
    """What :func:`reason_kind` puts for a value: ``N`` for a number, ``'…'`` for quoted text, ``…``
    for an identifier holding digits (a schema id, a hash)."""
    text = m.group(0)
    if text.isdigit():
        return "N"
    return text[0] + "…" + text[0] if text[0] in "'\"" else "…"


def quarantine_frame(counts, reasons, max_quarantined: int, max_share: float):
    """The normalize gate's ``quarantine`` frame: one row per topic and hour of ``counts`` (the
    ``counts`` frame: ``raw`` records per topic and hour): ``raw``, ``quarantined``, ``share``
    (quarantined / raw), ``top_reasons`` (the :data:`TOP_REASONS` most frequent kinds of reason,
    :func:`reason_kind`, as ``"<n>× <reason>"`` joined by `` | ``) and ``over_budget``: null within
    the budget, else one line naming the topic, the hour, the counts, the setting exceeded
    (``normalize.max_quarantined``, ``normalize.max_quarantine_share``) and the top reasons.
    ``reasons``: the window's quarantine rows (kafka_topic, landed_hour, reason)."""
    import pandas as pd

    keys = ["kafka_topic", "landed_hour"]
    out = counts[keys + ["raw"]].copy()
    if len(reasons):
        reasons = reasons.assign(kind=reasons["reason"].map(reason_kind))
        per_kind = reasons.groupby(keys + ["kind"]).size().rename("n").reset_index()
        per_kind = per_kind.sort_values(keys + ["n", "kind"], ascending=[True, True, False, True], kind="stable")
        top = per_kind.groupby(keys).apply(
            lambda g: " | ".join(f"{int(n)}× {k}" for k, n in zip(g["kind"][:TOP_REASONS], g["n"][:TOP_REASONS])),
            include_groups=False).rename("top_reasons").reset_index()
        total = reasons.groupby(keys).size().rename("quarantined").reset_index()
        for df in (top, total):
            df["landed_hour"] = pd.to_datetime(df["landed_hour"], utc=True)
        out["landed_hour"] = pd.to_datetime(out["landed_hour"], utc=True)
        out = out.merge(total, on=keys, how="left").merge(top, on=keys, how="left")
    else:
        out["quarantined"], out["top_reasons"] = 0, None
    out["quarantined"] = out["quarantined"].fillna(0).astype("int64")
    out["share"] = (out["quarantined"] / out["raw"].where(out["raw"] > 0)).fillna(0.0)

    def verdict(r) -> Optional[str]:
        exceeded = [f"normalize.max_quarantined {max_quarantined}" if r.quarantined > max_quarantined else None,
                    f"normalize.max_quarantine_share {max_share:g}" if r.share > max_share else None]
        exceeded = [e for e in exceeded if e]
        if not exceeded:
            return None
        hour = pd.Timestamp(r.landed_hour).strftime("%Y-%m-%dT%H:%MZ")
        return (f"topic {r.kafka_topic} hour {hour}: {r.quarantined} of {r.raw} records quarantined "
                f"({r.share:.0%}), over {' and '.join(exceeded)}; top reasons: {r.top_reasons}")

    out["over_budget"] = [verdict(r) for r in out.itertuples()]
    return out


def _distinct(table, columns: list[str]):
    """The distinct rows of ``columns`` of Arrow ``table`` (nulls a value like any other)."""
    return table.group_by(columns, use_threads=False).aggregate([])


def silver_frames(cfg: PipelineConfig, window: Window) -> dict:
    """The silver gate's ``keys:<n> key columns`` frames: every row of every silver table the
    window touched as its table (``_table``) and key values (``key_1`` .. ``key_<n>``), one frame
    per key width (a window of a thousand tables is one validation, not a thousand). Key columns:
    the table property ``cdc.primary-key-columns`` (JSON), else ``cdc.primary-key`` (comma-joined);
    tables are read four at a time."""
    from concurrent.futures import ThreadPoolExecutor

    import pandas as pd
    import pyarrow.compute as pc

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    prefixes = {s.topic: s.table_prefix for s in cfg.sources}
    ids = ["kafka_topic", "source_database", "source_schema", "source_table"]
    bronze = _scan_arrow(cat, BRONZE_TABLE, window, topics, tuple(ids) + ("op",))
    bronze = _distinct(bronze.filter(pc.invert(pc.fill_null(pc.equal(bronze["op"], "truncate"), False))), ids).to_pandas()
    ns = cfg.silver.namespace
    names = sorted({resolve_legacy_name(SourceTable(prefixes.get(r.kafka_topic, ""), r.source_database,
                                                    r.source_schema, r.source_table),
                                        lambda n: cat.table_exists((ns, n))).silver_name
                    for r in bronze.itertuples()})

    def keys(name: str):
        tbl = cat.load_table((ns, name))
        stored = tbl.properties.get(PRIMARY_KEY_PROPERTY)
        pk = json.loads(stored) if stored else (tbl.properties.get("cdc.primary-key") or "").split(",")
        df = tbl.scan(selected_fields=tuple(pk)).to_pandas()[pk].astype(object)
        df.columns = [f"key_{i + 1}" for i in range(len(pk))]
        df.insert(0, "_table", f"{ns}.{name}")
        return df

    by_width: dict[int, list] = {}
    with ThreadPoolExecutor(4) as pool:
        for df in pool.map(keys, names):
            by_width.setdefault(df.shape[1] - 1, []).append(df)
    return {f"keys:{n} key column{'s' if n > 1 else ''}": (pd.concat(dfs, ignore_index=True),
                                                           ["_table"] + [f"key_{i + 1}" for i in range(n)])
            for n, dfs in sorted(by_width.items())}


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
