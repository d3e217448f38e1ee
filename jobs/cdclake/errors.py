"""Every error the pipeline raises on purpose, and the exit code each gives a stage job.

The stage jobs (``jobs/land.py``, ``normalize.py``, ``silver.py`` through :func:`cdclake.cli.main`)
print one line ``error: <message>`` and exit with :func:`exit_code`: 2 for bad input the operator
must fix before a rerun can help (:data:`BAD_INPUT`), 1 for a stage that failed
(:data:`STAGE_FAILED`: everything else, including errors not listed here). A record the parsers
cannot read is not an error of the run: :class:`ParseError` puts it in quarantine.
"""
from __future__ import annotations

import re
from typing import Optional


class ParseError(ValueError):
    """Raised by a parser for a record it cannot read; the message is the quarantine reason.

    The message names the format and the field, e.g.
    ``debezium-json: field 'op': unknown operation 'x'``.
    """

    def __init__(self, fmt: str, reason: str, field_name: Optional[str] = None):
        self.format = fmt
        self.field = field_name
        where = f"field '{field_name}': " if field_name else ""
        super().__init__(f"{fmt}: {where}{reason}")


class ConfigError(ValueError):
    """A pipeline file is missing, unreadable or invalid; the message names file and key."""


class UnknownFormat(ConfigError, KeyError):
    """A source names a format that is not in :data:`cdclake.formats.FORMATS`; the message lists the
    known ones. A :class:`KeyError` as well, for callers that look a format up like a mapping."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnknownSchema(LookupError):
    """A schema registry does not know a schema id (HTTP 404): a property of the record, which names
    the id, so the record is quarantined (:mod:`cdclake.formats.debezium.avro`)."""


class NotOneRecord(ValueError):
    """Avro bytes were read, but they are not one whole record: bytes remain after it, or an enum
    before its images holds an index the schema lacks (:mod:`cdclake.formats.dts.schema`)."""


class WindowError(ValueError):
    """A window is malformed (not ISO-8601, not on an hour, empty, or in the future)."""


class CatalogLocked(RuntimeError):
    """The catalog database stayed locked by another connection for the whole retry budget."""


class KafkaUnavailable(RuntimeError):
    """The broker cannot be reached, the topic does not exist, or reading stalls."""


class LandingShrinks(RuntimeError):
    """Re-landing would replace landed records with fewer (Kafka retention or compaction removed them)."""


class WriterLockError(RuntimeError):
    """The writer lock could not be held; the message is one line."""


class WriterLockBusy(WriterLockError):
    """Another run held a topic's lock for the whole wait; the message names that run."""


class WriterLockLost(WriterLockError):
    """A run's lock was taken over while it ran (it had not renewed it for ``stale_s`` seconds)."""


class RunError(RuntimeError):
    """An error that is not a property of one record's bytes: a service that cannot be reached, a
    timeout, an error of the runtime (memory, a missing module). It fails the stage with one line
    naming it; no record is quarantined for it, and a rerun after it applies the window."""


class ServiceUnavailable(RunError):
    """A service a stage needs (a schema registry ...) could not be asked: connection refused, a
    timeout, HTTP 5xx."""


class SchemaRegistryUnavailable(ServiceUnavailable):
    """The schema registry of a ``debezium-avro`` or ``debezium-jsonschema`` source could not be
    asked (its ``sources[].options.schema_registry.url``)."""


#: Built-in exceptions that are never a property of a record's bytes (:func:`is_run_error`).
RUNTIME_ERRORS: tuple[type, ...] = (RunError, OSError, MemoryError, ImportError, SystemError)


def is_run_error(exc: BaseException) -> bool:
    """Whether ``exc`` fails the run instead of quarantining the record being read: a
    :class:`RunError`, or an ``OSError`` (connections, timeouts, files), ``MemoryError``,
    ``ImportError`` or ``SystemError`` that is not also a ``ValueError`` (such as
    ``io.UnsupportedOperation``, which bad input can raise)."""
    return isinstance(exc, RUNTIME_ERRORS) and not isinstance(exc, ValueError)


def _error_names() -> frozenset[str]:
    """The class names a task's traceback line starts with for :func:`is_run_error` errors
    (``cdclake.errors.SchemaRegistryUnavailable``, ``ConnectionRefusedError`` ...)."""
    import builtins

    names = set()
    todo = list(RUNTIME_ERRORS)
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if issubclass(cls, ValueError):
            continue
        names.add(cls.__name__ if getattr(builtins, cls.__name__, None) is cls else f"{cls.__module__}.{cls.__name__}")
    return frozenset(names)


class GateFailed(RuntimeError):
    """A gate's expectations failed; the message lists each failed expectation and frame."""


class SilverError(RuntimeError):
    """One or more tables could not be merged; the others were. The message lists them."""


class SchemaChangeError(SilverError):
    """An incompatible column type change (e.g. bigint → string) for one table."""


class DriftFound(RuntimeError):
    """Reconciliation found keys whose silver row differs from the source table's, with no change
    of them in Kafka after the offset ledger (:mod:`cdclake.reconcile`); the message names the
    tables, the counts and the first keys."""


class FreshnessError(RuntimeError):
    """Silver tables lag behind their source by more than their SLA (``freshness.max_lag``): one
    line naming each table, its lag and its SLA (:func:`cdclake.freshness.check_freshness`)."""


class NotFileLevel(Exception):
    """A table or batch the file-level merge (:mod:`cdclake.silver.small`) does not take: the
    message says what; the table is merged by Spark's MERGE instead. Never leaves the silver stage."""


#: Exit code 2: the input is wrong (pipeline file, window, catalog directory); fix it, then rerun.
BAD_INPUT = 2
#: Exit code 1: the stage failed; a rerun of the same window is safe (every stage is idempotent).
STAGE_FAILED = 1

#: Errors whose message alone is printed (no traceback needed to act on them), and their exit code.
EXIT_CODES: dict[type, int] = {
    ConfigError: BAD_INPUT,
    WindowError: BAD_INPUT,
    KafkaUnavailable: STAGE_FAILED,
    LandingShrinks: STAGE_FAILED,
    WriterLockError: STAGE_FAILED,
    CatalogLocked: STAGE_FAILED,
    RunError: STAGE_FAILED,
    DriftFound: STAGE_FAILED,
}


def exit_code(exc: BaseException) -> int:
    """The exit code of a stage job that ended with ``exc``: :data:`EXIT_CODES` of its class (or a
    base class), else :data:`STAGE_FAILED`."""
    for cls in type(exc).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return STAGE_FAILED


def expected(exc: BaseException) -> bool:
    """Whether ``exc`` is one of :data:`EXIT_CODES`: its one-line message is the whole story."""
    return any(cls in EXIT_CODES for cls in type(exc).__mro__)


_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\n(?:[ \t].*\n|\n)*?(\S[^\n]*)")


def task_failure(exc: BaseException) -> str | None:
    """The exception line (``module.Class: message``) of the Python traceback a failed Spark task
    sent back inside ``exc`` (pyspark's ``PythonException``, or a py4j error whose cause carries
    one), or None when ``exc`` holds no Python traceback. With chained tracebacks, the last one's.
    """
    texts = [str(exc)]
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            while java is not None and len(texts) < 20:
                texts.append(str(java.getMessage() or ""))
                java = java.getCause()
        except Exception:
            pass
    for text in texts:
        found = _TRACEBACK.findall(text)
        if found:
            return found[-1].strip()
    return None


def task_error(exc: BaseException, cls: type) -> Optional[str]:
    """The message of the ``cls`` a failed Spark task raised inside ``exc`` (the last line of its
    traceback, :func:`task_failure`, reads ``module.Class: message``), or None when the task's
    exception was not a ``cls`` or ``exc`` holds no Python traceback."""
    cause, raised = task_failure(exc), f"{cls.__module__}.{cls.__name__}: "
    return cause.removeprefix(raised) if cause and cause.startswith(raised) else None


def task_run_error(exc: BaseException) -> Optional[RunError]:
    """The :class:`RunError` for an :func:`is_run_error` error that a failed Spark task raised
    inside ``exc`` (:func:`task_failure`), or None when the task failed otherwise: a ``RunError``
    of this module keeps its class and message; another (``ConnectionRefusedError: ...``) becomes a
    ``RunError`` whose message is its exception line."""
    line = task_failure(exc)
    if not line or ":" not in line:
        return None
    name, message = (part.strip() for part in line.split(":", 1))
    if name not in _error_names():
        return None
    cls = globals().get(name.removeprefix(f"{__name__}."))
    if name.startswith(f"{__name__}.") and isinstance(cls, type) and issubclass(cls, RunError):
        return cls(message)
    return RunError(line)
