"""The gates' frames, built from the Iceberg tables with pyiceberg (no Spark session): what each
gate validates (:mod:`cdclake.gates`, whose docstring describes every frame and column).

Hour tables (raw, ledger, bronze, quarantine, control) are read by :func:`_scan_arrow`, which
reads a window's files with pyarrow; silver tables by :func:`_table_keys`, in worker processes
when a window touches many.
"""
from __future__ import annotations

import functools
import json
import logging
import re
from typing import Optional

from cdclake.catalog import pyiceberg_catalog
from cdclake.config import PipelineConfig
from cdclake.lake import (BRONZE_TABLE, CONTROL_TABLE, PRIMARY_KEY_PROPERTY, QUARANTINE_TABLE, RAW_TABLE,
                          SourceTable, ledger_around, read_hours, resolve_legacy_name)
from cdclake.window import Window

log = logging.getLogger(__name__)


def _scan_arrow(cfg: PipelineConfig, catalog, table: str, window: Optional[Window], topics: list[str],
                columns: tuple[str, ...]):
    """``columns`` of ``topics``' rows in the hours of ``window`` (None: every hour) of hour table
    ``table``, an Arrow table, read by pyarrow from the partitions' files
    (:func:`cdclake.lake.read_hours`: pyiceberg's scan planned and read a thousand topics' files
    in about ten times the time)."""
    return read_hours(cfg, table, topics, None if window is None else window.start,
                      None if window is None else window.end, list(columns), cat=catalog)


def _scan(cfg: PipelineConfig, catalog, table: str, window: Optional[Window], topics: list[str],
          columns: tuple[str, ...]):
    """:func:`_scan_arrow` as a pandas frame."""
    return _scan_arrow(cfg, catalog, table, window, topics, columns).to_pandas()


def land_frames(cfg: PipelineConfig, window: Window) -> dict:
    """The land gate's ``offsets`` and ``ledger`` frames (see module docstring)."""
    import pandas as pd

    from cdclake import kafka_ranges

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    keys = ["kafka_topic", "kafka_partition", "landed_hour"]
    k = cfg.kafka
    parts = kafka_ranges.partitions(k.bootstrap_servers, topics, k.timeout_s, k.client)
    ledger = ledger_around(cfg, parts, window.start, window.end, cat).to_pandas()
    raw = _scan(cfg, cat, RAW_TABLE, window, topics, tuple(keys) + ("kafka_offset",))
    for df in (ledger, raw):
        df["landed_hour"] = pd.to_datetime(df["landed_hour"], utc=True)
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

    # ledger: each partition's ranges around the window, in hour order
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
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    coords = ["kafka_topic", "landed_hour", "kafka_partition", "kafka_offset"]
    keys = ["kafka_topic", "landed_hour"]
    changes = _scan_arrow(cfg, cat, BRONZE_TABLE, window, topics, tuple(coords) + ("op", "source_table", "source_format"))

    def records(table, which: int):
        """The coordinates of the rows of ``table`` whose coordinates are none null, with ``_in``:
        ``which`` (the table's number)."""
        every = functools.reduce(pc.and_, [pc.is_valid(table[c]) for c in coords])
        rows = table.select(coords).filter(every)
        return rows.append_column("_in", pa.array(np.full(rows.num_rows, which, np.int8)))

    held = [records(changes, 0)] + [records(_scan_arrow(cfg, cat, table, window, topics, tuple(coords)), i)
                                    for i, table in enumerate((QUARANTINE_TABLE, CONTROL_TABLE), 1)]
    # one grouping by record: the tables holding it (a record of several change rows is one
    # record; one two tables hold is an overlap)
    per_record = pa.concat_tables([t.cast(held[0].schema) for t in held]).group_by(
        coords, use_threads=False).aggregate([("_in", "count_distinct")])
    per_record = per_record.append_column("_twice", pc.cast(pc.greater(per_record["_in_count_distinct"], 1),
                                                            pa.int64()))
    acc = per_record.group_by(keys).aggregate([([], "count_all"), ("_twice", "sum")])
    raw = _scan_arrow(cfg, cat, RAW_TABLE, window, topics, tuple(coords)).group_by(keys).aggregate([([], "count_all")])
    counts = raw.rename_columns([{"count_all": "raw"}.get(c, c) for c in raw.column_names]).to_pandas()
    acc = acc.rename_columns([{"count_all": "accounted", "_twice_sum": "overlap"}.get(c, c)
                              for c in acc.column_names]).to_pandas()
    counts = counts[keys + ["raw"]].merge(acc[keys + ["accounted", "overlap"]], on=keys, how="outer").fillna(0)
    for c in ("raw", "accounted", "overlap"):
        counts[c] = counts[c].astype("int64")
    reasons = _scan_arrow(cfg, cat, QUARANTINE_TABLE, window, topics, ("kafka_topic", "landed_hour", "reason"))
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


#: A silver gate over at least this many tables reads their keys in worker processes, one per
#: core (:func:`silver_frames`): reading a table's keys is pyiceberg's Python work (its metadata,
#: manifests and files), which threads of one interpreter do one at a time.
PROCESS_READ_TABLES = 64
_GATE_CATALOG: list = []


def _open_gate_catalog(catalog) -> None:
    """A worker process's pyiceberg catalog (:func:`silver_frames`)."""
    _GATE_CATALOG[:] = [pyiceberg_catalog(catalog)]


def _table_keys(cat, namespace: str, name: str):
    """Silver table ``namespace.name``'s rows as ``_table`` and ``key_1`` .. ``key_<n>`` (object
    columns), a pandas frame (:func:`_live_columns`, else pyiceberg's scan). Key columns: the
    table property ``cdc.primary-key-columns`` (JSON), else ``cdc.primary-key`` (comma-joined)."""
    tbl = cat.load_table((namespace, name))
    stored = tbl.properties.get(PRIMARY_KEY_PROPERTY)
    pk = json.loads(stored) if stored else (tbl.properties.get("cdc.primary-key") or "").split(",")
    keys = _live_columns(tbl, pk)
    if keys is None:
        keys = tbl.scan(selected_fields=tuple(pk)).to_arrow()
    df = keys.select(pk).to_pandas().astype(object)
    df.columns = [f"key_{i + 1}" for i in range(len(pk))]
    df.insert(0, "_table", f"{namespace}.{name}")
    return df


def _live_columns(tbl, columns: list[str]):
    """Top-level ``columns`` of every row of pyiceberg table ``tbl`` at its current snapshot, an
    Arrow table typed as the table's schema, read by pyarrow from its data files, each column
    found by its Iceberg field id (the silver gate's frames of a thousand small tables took half
    the time of pyiceberg's scan). None when the scan must read them: the snapshot holds delete
    files, or a file lacks field ids or one of the columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.manifest import ManifestContent

    snapshot = tbl.current_snapshot()
    if snapshot is None:
        return None
    manifests = snapshot.manifests(tbl.io)
    if any(m.content == ManifestContent.DELETES for m in manifests):
        return None
    schema = tbl.schema()
    ids = [schema.find_field(c).field_id for c in columns]
    target = pa.schema([schema_to_pyarrow(schema).field(c) for c in columns])
    parts = []
    for manifest in manifests:
        for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
            with tbl.io.new_input(entry.data_file.file_path).open() as stream:
                pf = pq.ParquetFile(stream)
                named = {int(f.metadata[b"PARQUET:field_id"]): f.name for f in pf.schema_arrow
                         if f.metadata and b"PARQUET:field_id" in f.metadata}
                if not all(i in named for i in ids):
                    return None
                rows = pf.read(columns=[named[i] for i in ids], use_threads=False)
            parts.append(pa.Table.from_arrays([rows[named[i]].cast(f.type) for i, f in zip(ids, target)],
                                              schema=target))
    return pa.concat_tables(parts) if parts else target.empty_table()


def _keys_in_worker(namespace: str, names: list[str]) -> list:
    """:func:`_table_keys` of ``names`` with the worker process's catalog."""
    return [_table_keys(_GATE_CATALOG[0], namespace, n) for n in names]


def silver_frames(cfg: PipelineConfig, window: Window) -> dict:
    """The silver gate's ``keys:<n> key columns`` frames: every row of every silver table the
    window touched as its table (``_table``) and key values (``key_1`` .. ``key_<n>``), one frame
    per key width (a window of a thousand tables is one validation, not a thousand), read by
    :func:`_table_keys`: four threads, or with :data:`PROCESS_READ_TABLES` tables or more, one
    worker process per core."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    import pandas as pd
    import pyarrow.compute as pc

    topics = list(window.topics or cfg.topics())
    cat = pyiceberg_catalog(cfg.catalog)
    prefixes = {s.topic: s.table_prefix for s in cfg.sources}
    ids = ["kafka_topic", "source_database", "source_schema", "source_table"]
    bronze = _scan_arrow(cfg, cat, BRONZE_TABLE, window, topics, tuple(ids) + ("op",))
    bronze = _distinct(bronze.filter(pc.invert(pc.fill_null(pc.equal(bronze["op"], "truncate"), False))), ids).to_pandas()
    ns = cfg.silver.namespace
    names = sorted({resolve_legacy_name(SourceTable(prefixes.get(r.kafka_topic, ""), r.source_database,
                                                    r.source_schema, r.source_table),
                                        lambda n: cat.table_exists((ns, n))).silver_name
                    for r in bronze.itertuples()})
    workers = os.cpu_count() or 1
    if len(names) >= PROCESS_READ_TABLES and workers > 1:
        chunks = [names[i:i + 16] for i in range(0, len(names), 16)]
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_open_gate_catalog, initargs=(cfg.catalog,)) as pool:
            frames = [df for part in pool.map(_keys_in_worker, [ns] * len(chunks), chunks) for df in part]
    else:
        with ThreadPoolExecutor(4) as pool:
            frames = list(pool.map(lambda n: _table_keys(cat, ns, n), names))
    by_width: dict[int, list] = {}
    for df in frames:
        by_width.setdefault(df.shape[1] - 1, []).append(df)
    return {f"keys:{n} key column{'s' if n > 1 else ''}": (pd.concat(dfs, ignore_index=True),
                                                           ["_table"] + [f"key_{i + 1}" for i in range(n)])
            for n, dfs in sorted(by_width.items())}
