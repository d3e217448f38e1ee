"""Results of a benchmark run: the machine description, the JSON file and the chart."""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

NORMALIZE_TARGET = 80_000  # Debezium JSON events/s, the figure of Spark's from_json on 570-byte messages
STAGE_ORDER = ("land", "normalize", "silver", "e2e")


def machine() -> dict:
    """CPU model, cores, RAM, OS, Java/Python/Spark/Iceberg versions, the code's git commit."""
    import psutil

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    out = {
        "cpu_model": cpu, "cores": os.cpu_count(), "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(), "python": platform.python_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr
        out["java"] = java.splitlines()[0] if java else None
    except (OSError, subprocess.SubprocessError):
        out["java"] = None
    for mod, key in (("pyspark", "spark"), ("pyiceberg", "pyiceberg"), ("confluent_kafka", "confluent_kafka"),
                     ("great_expectations", "great_expectations"), ("pyarrow", "pyarrow")):
        try:
            m = __import__(mod)
            out[key] = m.version()[0] if mod == "confluent_kafka" else m.__version__
        except Exception:
            out[key] = None
    try:
        from cdclake.catalog import iceberg_jar

        m = re.search(r"runtime-[\d.]+_[\d.]+-([\d.]+)\.jar$", iceberg_jar().name)
        out["iceberg_spark_runtime"] = m.group(1) if m else iceberg_jar().name
    except Exception:
        out["iceberg_spark_runtime"] = None
    out["git_commit"] = git_commit()
    return out


def git_commit() -> Optional[str]:
    """``HEAD`` of the checkout the benchmark runs from, ``+changes`` appended when the work tree
    differs from it; None outside a git checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+changes" if dirty else "")


def write_json(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str) + "\n")
    tmp.replace(path)


def chart(results: dict, path: Path) -> Optional[Path]:
    """Events/s per stage and format, peak RSS per stage and format, merge time against table size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    formats = {t: f for t, f in results.get("formats", {}).items() if f.get("stages")}
    merge = results.get("merge") or []
    fig, axes = plt.subplots(3, 1, figsize=(15, 14))
    ax = axes[0]
    tags = list(formats)
    width = 0.8 / len(STAGE_ORDER)
    for i, stage in enumerate(STAGE_ORDER):
        vals = [(formats[t]["e2e"] if stage == "e2e" else formats[t]["stages"].get(stage, {})).get("events_per_s") or 0
                for t in tags]
        xs = [j + (i - (len(STAGE_ORDER) - 1) / 2) * width for j in range(len(tags))]
        bars = ax.bar(xs, vals, width, label=stage if stage != "e2e" else "end to end (stages + gates)")
        for b, v in zip(bars, vals):
            if v:
                ax.annotate(f"{v / 1000:.0f}k" if v >= 1000 else f"{v}", (b.get_x() + b.get_width() / 2, v),
                            ha="center", va="bottom", fontsize=7)
    fj = results.get("from_json") or {}
    for name, style in (("pipeline", "--"), ("payload_only", ":")):
        if fj.get(name, {}).get("events_per_s"):
            v = fj[name]["events_per_s"]
            ax.axhline(v, color="grey", linestyle=style, linewidth=1,
                       label=f"Spark from_json, Debezium {'as landed' if name == 'pipeline' else 'without envelope'} "
                             f"({fj[name].get('mean_message_bytes')} B): {v / 1000:.0f}k/s")
    tag_of = {f.get("format"): j for j, f in enumerate(formats.values())}
    for peer in results.get("peers") or []:
        eps, fmt = peer.get("events_per_s"), peer.get("format")
        if peer.get("status") == "ok" and eps and fmt in tag_of:
            side = peer.get("parallelism_role") == "continuity"
            x = tag_of[fmt] + (0.35 if side else 0.45)
            ax.scatter([x], [eps], marker="^" if side else "*", s=70 if side else 120, zorder=5,
                       label=f"peer {_peer_label(peer)} on {fmt}: {eps / 1000:.1f}k/s")
    ax.axhline(NORMALIZE_TARGET, color="red", linestyle="-.", linewidth=1, label="normalize target (Debezium): 80k/s")
    ax.set_xticks(range(len(tags)))
    ax.set_xticklabels([f"{t}\n{formats[t].get('format', '')}" for t in tags], fontsize=8)
    ax.set_ylabel("source row changes per second")
    ev = results.get("input", {}).get("events")
    ax.set_title(f"Throughput per stage, one hour of {ev:,} changes per format (local[2])" if ev else "Throughput per stage")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_yscale("log")

    ax = axes[1]
    stages = ("land", "land_gate", "normalize", "normalize_gate", "silver", "silver_gate")
    width = 0.8 / len(stages)
    for i, stage in enumerate(stages):
        vals = [formats[t]["stages"].get(stage, {}).get("peak_rss_mb") or 0 for t in tags]
        xs = [j + (i - (len(stages) - 1) / 2) * width for j in range(len(tags))]
        ax.bar(xs, [v / 1024 for v in vals], width, label=stage)
    ax.set_xticks(range(len(tags)))
    ax.set_xticklabels(tags)
    ax.set_ylabel("peak RSS, GiB (driver JVM + Python driver + workers)")
    ax.set_title(f"Peak memory per stage (spark.driver.memory {results.get('config', {}).get('driver_memory')})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))

    ax = axes[2]
    if merge:
        for mode, marker in (("copy-on-write", "o"), ("merge-on-read", "s")):
            pts = sorted((m["rows"], m["wall_s"]) for m in merge if m["write_mode"] == mode)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=mode)
                for x, y in pts:
                    ax.annotate(f"{y:.1f}s", (x, y), textcoords="offset points", xytext=(5, 5), fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("silver table rows")
        ax.set_ylabel("seconds (apply_table: collapse + MERGE + tombstones)")
        ax.set_title(f"Merging the same {merge[0]['batch']:,}-change batch into silver tables of growing size")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.grid(True, which="both", alpha=0.3)
    else:
        ax.text(0.5, 0.5, "merge scaling not run", ha="center", va="center")
        ax.set_axis_off()
    fig.suptitle(f"cdc-lakehouse benchmark {results.get('date')} - {results.get('machine', {}).get('cpu_model')}, "
                 f"{results.get('machine', {}).get('cores')} cores", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def from_json_ratios(results: dict) -> list[str]:
    """Each format's normalize and silver as a ratio to the run's ``from_json`` reference (its
    ``pipeline`` wall time divided by the stage's: above 1.0 is faster than Spark's own parse of
    the Debezium hour), one text line per format; none without the reference."""
    ref = (results.get("from_json") or {}).get("pipeline") or {}
    if not ref.get("wall_s"):
        return []
    lines = [f"against from_json {ref['wall_s']:.1f} s" + (f" ({ref['when']})" if ref.get("when") else "") + ":"]
    for tag, f in results.get("formats", {}).items():
        walls = {s: (f.get("stages", {}).get(s) or {}).get("wall_s") for s in ("normalize", "silver")}
        lines.append(f"{tag:8} " + "  ".join(f"{s} {ref['wall_s'] / w:.2f}" for s, w in walls.items() if w))
    return lines


def _peer_label(peer: dict) -> str:
    """A peer run's name, its parallelism when it has one, and whether it left a table."""
    label = str(peer.get("peer") or peer.get("name"))
    if peer.get("parallelism") is not None:
        label += f", parallelism {peer['parallelism']}"
    if peer.get("leaves_table"):
        label += ", table written"
    return label


def _headline_run(runs: list[dict]) -> dict:
    """The headline run among one format's runs of a peer (not empty): the one whose role is
    ``headline``, else (results written before the parallelism-2 headline) the one of the highest
    parallelism."""
    marked = [r for r in runs if r.get("parallelism_role") == "headline"]
    return marked[0] if marked else max(runs, key=lambda r: r.get("parallelism") or 1)


def _ratio_text(run: dict, key: str) -> str:
    return f"{run[key]:.2f}" if run.get(key) is not None else "not quoted"


def peer_ratios(results: dict, peer: str = "flink") -> dict:
    """Our hour against each run of ``peer`` (a peer module's name) on the same wire format.

    A ratio is the peer's wall seconds over ours: our speed as a fraction of the peer's (above 1.0
    ours is faster), for the whole hour (``e2e``: land, normalize, silver and the three gates) and
    for normalize and silver alone. It is quoted only when every table of the peer's run equalled
    the source (``matches_source``) and so did every silver table of ours (``verify``); else it is
    None and ``not_quoted`` says why. Returns ``{"peer", "ratio", "formats": {tag: {"format",
    "ours": {"whole_hour_s", "normalize_silver_s", "verified"}, "runs": [{"parallelism",
    "parallelism_role", "headline", "wall_s", "flink_wall_s", "table_write_s", "leaves_table",
    "equal_to_source", "whole_hour", "normalize_silver", "not_quoted"}], "headline": {"parallelism",
    "leaves_table", "whole_hour", "normalize_silver"}}}}`` (seconds; runs in the order they ran;
    ``headline`` the run at the benchmark's cores)."""
    out: dict = {"peer": peer, "ratio": "peer wall_s / our wall_s (above 1.0: ours faster)", "formats": {}}
    by_format: dict[str, list[dict]] = {}
    for p in results.get("peers") or []:
        if p.get("name") == peer and p.get("status") == "ok" and p.get("wall_s"):
            by_format.setdefault(p.get("format"), []).append(p)
    for tag, f in results.get("formats", {}).items():
        runs = by_format.get(f.get("format"))
        whole = (f.get("e2e") or {}).get("wall_s")
        if not runs or not whole:
            continue
        stages = f.get("stages") or {}
        ns = [(stages.get(s) or {}).get("wall_s") for s in ("normalize", "silver")]
        ns_s = sum(ns) if all(ns) else None
        verified = bool((f.get("verify") or {}).get("ok"))
        entries = []
        for r in runs:
            equal = bool((r.get("matches_source") or {}).get("ok"))
            why = None if equal and verified else (
                "the peer's tables differ from the source or were not checked" if not equal
                else "our silver differs from the source or was not checked")
            entries.append({
                "parallelism": r.get("parallelism"), "parallelism_role": r.get("parallelism_role"),
                "wall_s": r["wall_s"], "flink_wall_s": r.get("flink_wall_s"), "table_write_s": r.get("table_write_s"),
                "leaves_table": bool(r.get("leaves_table")), "equal_to_source": equal,
                "whole_hour": round(r["wall_s"] / whole, 2) if why is None else None,
                "normalize_silver": round(r["wall_s"] / ns_s, 2) if why is None and ns_s else None,
                "not_quoted": why})
        head = _headline_run(entries)
        for e in entries:
            e["headline"] = e is head
        out["formats"][tag] = {
            "format": f.get("format"),
            "ours": {"whole_hour_s": whole, "normalize_silver_s": ns_s, "verified": verified},
            "runs": entries,
            "headline": {k: head[k] for k in ("parallelism", "leaves_table", "whole_hour", "normalize_silver")}}
    return out


def peer_lines(results: dict) -> list[str]:
    """The peers' figures, one line per run (its parallelism stated), then our hour against the
    PyFlink peer per format: the headline ratio against its run at the benchmark's cores that wrote
    its Iceberg tables, the parallelism-1 run's beside it."""
    lines = []
    for p in results.get("peers") or []:
        name = f"{p.get('peer') or p.get('name')} {p.get('format', '')}"
        if p.get("parallelism") is not None:
            name += f" p{p['parallelism']}" + (f" ({p['parallelism_role']})" if p.get("parallelism_role") else "")
        if p.get("status") != "ok" or not p.get("wall_s"):
            lines.append(f"peer {name}: {p.get('status')} {p.get('error') or p.get('reason') or ''}".rstrip())
            continue
        parts = f" (Flink {p['flink_wall_s']:.1f} + Iceberg write {p['table_write_s']:.1f})" if p.get("leaves_table") else ""
        eq = (p.get("matches_source") or {}).get("ok")
        lines.append(f"peer {name}: {p['wall_s']:.1f} s{parts}, {p.get('events_per_s') or 0:,.0f} events/s, "
                     + {True: "equal to the source", False: "DIFFERS from the source", None: "not checked"}[eq])
    ratios = results.get("peer_ratios") or peer_ratios(results)
    if ratios["formats"]:
        lines.append("our hour against PyFlink (its wall over ours; above 1.0 ours is faster):")
    for tag, f in ratios["formats"].items():
        head, rest = f["headline"], [r for r in f["runs"] if not r.get("headline")]
        side = "".join(f" ({_ratio_text(r, 'whole_hour')} at parallelism {r['parallelism']})" for r in rest)
        side_ns = "".join(f" ({_ratio_text(r, 'normalize_silver')})" for r in rest)
        written = ", its tables written" if head["leaves_table"] else ""
        lines.append(f"{tag:8} whole hour {_ratio_text(head, 'whole_hour')} at parallelism {head['parallelism']}"
                     f"{written}{side}; normalize and silver alone {_ratio_text(head, 'normalize_silver')}{side_ns}")
    return lines


def table(results: dict) -> str:
    """A plain-text summary of the per-stage figures (printed at the end of a run)."""
    lines = [f"{'format':8} {'stage':16} {'wall s':>8} {'events/s':>10} {'peak RSS MiB':>13}"]
    for tag, f in results.get("formats", {}).items():
        for stage, v in list(f.get("stages", {}).items()) + [("e2e", f.get("e2e", {}))]:
            if v:
                lines.append(f"{tag:8} {stage:16} {v.get('wall_s', 0):>8.1f} {v.get('events_per_s') or 0:>10,} "
                             f"{v.get('peak_rss_mb', 0):>13,}")
        if f.get("error"):
            lines.append(f"{tag:8} error: {f['error']}")
    fj = results.get("from_json") or {}
    for m in fj.get("measurements") or [fj]:
        for name, v in m.items():
            if isinstance(v, dict) and "wall_s" in v:
                when = f"  ({m['when']})" if m.get("when") else ""
                lines.append(f"{'from_json':8} {name:16} {v['wall_s']:>8.1f} {v['events_per_s'] or 0:>10,} "
                             f"{v['peak_rss_mb']:>13,}{when}")
    lines += from_json_ratios(results)
    lines += peer_lines(results)
    for m in results.get("merge") or []:
        lines.append(f"merge {m['rows']:>10,} rows {m['write_mode']:14} {m['wall_s']:>7.1f} s  peak RSS {m['peak_rss_mb']:,} MiB")
    mt = results.get("maintenance")
    if mt:
        lines.append(f"maintenance, {mt['rows']:,} rows after {mt['hours']} hourly merges: full read "
                     f"{mt['full_read_before_s']:.1f} -> {mt['full_read_after_s']:.1f} s, next MERGE "
                     f"{mt['next_merge_before_s']:.1f} -> {mt['next_merge_after_s']:.1f} s, delete files "
                     f"{mt['table_before']['delete_files']} -> {mt['table_after']['delete_files']}")
    return "\n".join(lines)


if __name__ == "__main__":  # re-draw the chart of a results file: python -m bench.report bench/results/DATE.json
    src = Path(sys.argv[1])
    chart(json.loads(src.read_text()), src.with_suffix(".png"))
