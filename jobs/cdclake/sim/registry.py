"""A small schema registry over HTTP: it stands in for Confluent Schema Registry in the tests and the demo.

It serves exactly the endpoints of the Confluent Schema Registry REST API ("Schema Registry API
Reference", https://docs.confluent.io/platform/current/schema-registry/develop/api.html) that
``confluent_kafka.schema_registry.SchemaRegistryClient`` calls to register a schema and to read
one back for deserialising:

- ``POST /subjects/{subject}/versions`` with ``{"schema": "<text>", "schemaType": "AVRO"|"JSON"}``
  (``schemaType`` defaults to ``AVRO``; ``references`` must be empty): ``{"id": N}``. The same
  schema text and type always get the same id, whatever the subject (as Confluent's does);
  ids count from 1.
- ``GET /schemas/ids/{id}`` (query ``subject``, ``format`` ignored): ``{"schema": "<text>"}``,
  plus ``"schemaType"`` when it is not ``AVRO``; an unknown id is HTTP 404 with
  ``{"error_code": 40403, "message": "Schema {id} not found"}``.

Anything else is 404 (``error_code`` 404). No compatibility checks, no authentication, no
deletion. :class:`Registry` runs the server in a daemon thread of the calling process
(:func:`registry_url` starts one per process); ``python -m cdclake.sim.registry --port N
[--store FILE]`` runs one in the foreground (the embedded stack's, ``cdclake.embedded``),
keeping its schemas in ``FILE`` across restarts.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Optional
from urllib.parse import unquote, urlsplit

#: The environment variable naming the registry the simulated Avro topics use.
ENV = "CDC_SCHEMA_REGISTRY_URL"

_SCHEMA_BY_ID = re.compile(r"/schemas/ids/([0-9]+)")
_REGISTER = re.compile(r"/subjects/([^/]+)/versions")


class Registry:
    """A schema registry on ``127.0.0.1:port`` (0: a free port), served from a daemon thread.

    ``url`` (``http://127.0.0.1:PORT``), :meth:`register` (the same as the HTTP call),
    :meth:`close`. ``store``: a JSON file the schemas are loaded from and written to.
    """

    def __init__(self, port: int = 0, store: Optional[Path] = None):
        self._lock = threading.Lock()
        self._schemas: list[tuple[str, str]] = []  # id - 1 → (schema type, schema text)
        self._ids: dict[tuple[str, str], int] = {}
        self._subjects: dict[str, list[int]] = {}
        self._store = store
        if store is not None and store.exists():
            for stype, text in json.loads(store.read_text()):
                self._add(stype, text)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="schema-registry", daemon=True)
        self._thread.start()

    def _add(self, stype: str, text: str) -> int:
        key = (stype, text)
        sid = self._ids.get(key)
        if sid is None:
            self._schemas.append(key)
            sid = self._ids[key] = len(self._schemas)
        return sid

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """The id of ``schema`` (text) of ``schema_type``, registered under ``subject``."""
        with self._lock:
            known = len(self._schemas)
            sid = self._add(schema_type, schema)
            versions = self._subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            if self._store is not None and len(self._schemas) > known:
                self._store.write_text(json.dumps(self._schemas))
        return sid

    def schema(self, sid: int) -> Optional[tuple[str, str]]:
        """``(schema type, schema text)`` of id ``sid``, or None."""
        with self._lock:
            return self._schemas[sid - 1] if 0 < sid <= len(self._schemas) else None

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()


def _handler(registry: Registry) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK wait

        def log_message(self, format: str, *args) -> None:  # noqa: A002  (quiet)
            pass

        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802
            m = _SCHEMA_BY_ID.fullmatch(urlsplit(self.path).path)
            if not m:
                return self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
            found = registry.schema(int(m.group(1)))
            if found is None:
                return self._reply(404, {"error_code": 40403, "message": f"Schema {m.group(1)} not found"})
            stype, text = found
            return self._reply(200, {"schema": text} if stype == "AVRO" else {"schemaType": stype, "schema": text})

        def do_POST(self) -> None:  # noqa: N802
            m = _REGISTER.fullmatch(urlsplit(self.path).path)
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self._reply(422, {"error_code": 42201, "message": "Invalid JSON body"})
            if not m:
                return self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
            if not isinstance(body, dict) or not isinstance(body.get("schema"), str) or body.get("references"):
                return self._reply(422, {"error_code": 42201, "message": "Invalid schema"})
            stype = body.get("schemaType") or "AVRO"
            return self._reply(200, {"id": registry.register(unquote(m.group(1)), body["schema"], stype)})

    return Handler


_PROCESS_REGISTRY: Optional[Registry] = None


def registry_url() -> str:
    """The URL of the registry the simulated Avro topics use: ``$CDC_SCHEMA_REGISTRY_URL`` when
    set (the embedded stack's), else a :class:`Registry` started once in this process (whose URL
    is then put in the environment, for the processes this one starts)."""
    global _PROCESS_REGISTRY
    url = os.environ.get(ENV)
    if url:
        return url
    if _PROCESS_REGISTRY is None:
        _PROCESS_REGISTRY = Registry()
    os.environ[ENV] = _PROCESS_REGISTRY.url
    return _PROCESS_REGISTRY.url


def main(argv: Optional[list[str]] = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--port", type=int, default=0)
    args.add_argument("--store", type=Path, default=None)
    opts = args.parse_args(argv)
    registry = Registry(opts.port, opts.store)
    print(registry.url, flush=True)
    registry._thread.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
