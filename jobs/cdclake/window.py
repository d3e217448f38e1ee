"""Hour windows: the unit every stage processes, reruns and backfills.

A window is ``[start, end)`` in UTC, both on whole hours. A DAG run's window comes from its
params (``start``/``end``, ISO-8601) when given, else from the run's data interval, else (runs
triggered from the UI or REST API with no logical date) the hour before ``run_after``.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Iterator, Optional

from cdclake.errors import WindowError

UTC = dt.timezone.utc
HOUR = dt.timedelta(hours=1)


def parse_hour(value: "str | dt.datetime", name: str = "time") -> dt.datetime:
    """Parse an ISO-8601 time on a whole hour into an aware UTC datetime.

    Naive values are taken as UTC; ``Z`` and offsets are accepted. Raises :class:`WindowError`.
    """
    if isinstance(value, dt.datetime):
        t = value
    else:
        text = str(value).strip()
        try:
            t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise WindowError(f"{name} {value!r} is not an ISO-8601 time such as 2024-01-01T03:00:00Z") from None
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    if t.minute or t.second or t.microsecond:
        raise WindowError(f"{name} {value!r} is not on a whole hour (UTC)")
    return t


@dataclass(frozen=True)
class Window:
    """``[start, end)`` in UTC on whole hours; ``topics`` optionally narrows the sources."""

    start: dt.datetime
    end: dt.datetime
    topics: Optional[tuple[str, ...]] = None

    def __post_init__(self):
        if self.end <= self.start:
            raise WindowError(f"window end {self.end.isoformat()} is not after start {self.start.isoformat()}")

    def hours(self) -> Iterator[dt.datetime]:
        """The start of every hour in the window."""
        h = self.start
        while h < self.end:
            yield h
            h += HOUR

    @property
    def start_ms(self) -> int:
        return int(self.start.timestamp() * 1000)

    @property
    def end_ms(self) -> int:
        return int(self.end.timestamp() * 1000)

    def __str__(self) -> str:
        return f"[{iso(self.start)}, {iso(self.end)})"


def iso(t: dt.datetime) -> str:
    """``2024-01-01T03:00:00Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_window(start: str, end: str, topics: "str | list[str] | None" = None,
                known_topics: Optional[list[str]] = None, now: Optional[dt.datetime] = None) -> Window:
    """Validate a window given as text (job arguments, DAG params).

    ``topics`` may be a comma-separated string or a list; every topic must be in
    ``known_topics`` when that is given. Refuses windows ending in the future (an open hour
    cannot be landed completely). Raises :class:`WindowError`.
    """
    w_start, w_end = parse_hour(start, "start"), parse_hour(end, "end")
    if isinstance(topics, str):
        topics = [t for t in (x.strip() for x in topics.split(",")) if t]
    chosen = tuple(topics) if topics else None
    if chosen and known_topics is not None:
        unknown = [t for t in chosen if t not in known_topics]
        if unknown:
            raise WindowError(f"topics {unknown} are not sources of this pipeline (known: {known_topics})")
    now = now or dt.datetime.now(UTC)
    if w_end > now:
        raise WindowError(f"window end {iso(w_end)} is in the future: an hour can be processed once it has ended")
    return Window(w_start, w_end, chosen)


def resolve_run_window(params: dict, data_interval_start: Optional[dt.datetime] = None,
                       data_interval_end: Optional[dt.datetime] = None,
                       run_after: Optional[dt.datetime] = None) -> dict:
    """The window of a DAG run as ``{"start": iso, "end": iso, "topics": "a,b" or ""}``.

    Precedence: ``params.start``/``params.end``; else the data interval (scheduled runs);
    else the whole hour before ``run_after`` (manual runs without a logical date).
    Raises :class:`WindowError` when only one of start/end is given.
    """
    p_start, p_end = params.get("start"), params.get("end")
    if bool(p_start) != bool(p_end):
        raise WindowError("give both params 'start' and 'end', or neither")
    if p_start:
        start, end = parse_hour(p_start, "start"), parse_hour(p_end, "end")
    elif data_interval_start is not None and data_interval_end is not None and data_interval_end > data_interval_start:
        start, end = parse_hour(data_interval_start, "data_interval_start"), parse_hour(data_interval_end, "data_interval_end")
    else:
        ref = (run_after or dt.datetime.now(UTC)).astimezone(UTC)
        end = ref.replace(minute=0, second=0, microsecond=0)
        start = end - HOUR
    topics = params.get("topics") or []
    if isinstance(topics, str):
        topics = [t.strip() for t in topics.split(",") if t.strip()]
    Window(start, end)  # validates start < end
    return {"start": iso(start), "end": iso(end), "topics": ",".join(topics)}
