"""Connections: the secrets of a pipeline (Kafka, catalog, schema registry) taken from a connection
in Airflow's format (JSON or URI) instead of the file, looked up by id in Airflow or the
environment (``CDC_CONNECTION_<CONN_ID>``, then ``AIRFLOW_CONN_<CONN_ID>``).
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping, Optional
from urllib.parse import parse_qsl, unquote, urlsplit

from cdclake.config.models import PipelineConfig
from cdclake.errors import ConfigError

#: Environment variable prefixes of a connection: the value the stage job operator resolved and
#: handed to its job, then Airflow's own (``airflow connections`` format: JSON or URI).
CONNECTION_ENV_PREFIX = "CDC_CONNECTION_"
AIRFLOW_CONN_PREFIX = "AIRFLOW_CONN_"


Connections = Callable[[str], Optional[Mapping[str, Any]]]


def parse_connection(value: str, conn_id: str, where: str = "") -> dict[str, Any]:
    """A connection in Airflow's serialized forms, JSON or URI, as a dict of ``conn_type``,
    ``host``, ``port``, ``login``, ``password``, ``schema`` and ``extra`` (a dict).

    Parses as ``airflow.sdk.Connection.from_json``/``from_uri`` do, e.g.
    ``{"conn_type": "generic", "host": "b1:9092,b2:9092", "login": "u", "password": "p",
    "extra": {"security.protocol": "SASL_SSL"}}`` or
    ``generic://u:p@b1%3A9092%2Cb2%3A9092?security.protocol=SASL_SSL`` (a URI's host is
    percent-encoded when it holds several servers). Raises :class:`ConfigError` without echoing
    the value, which may hold a secret.
    """
    what = f"connection {conn_id!r}{f' ({where})' if where else ''}"
    text = value.strip()
    if text.startswith("{"):
        fields = _json_object(text, what)
    else:
        try:
            fields = _connection_from_uri(text)
        except ValueError:
            raise ConfigError(f"{what} is neither a JSON object nor a connection URI") from None
    extra = fields.get("extra") or {}
    if isinstance(extra, str):
        extra = _json_object(extra, f"{what}: its extra")
    if not isinstance(extra, dict):
        raise ConfigError(f"{what}: its extra is not a JSON object")
    port = fields.get("port")
    try:
        port = int(port) if port not in (None, "") else None
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: port is not an integer") from None
    return {"conn_type": fields.get("conn_type"), "host": fields.get("host") or None, "port": port,
            "login": fields.get("login") or None, "password": fields.get("password") or None,
            "schema": fields.get("schema") or None, "extra": extra}


def _json_object(text: str, what: str) -> dict:
    """The JSON object ``text`` holds; :class:`ConfigError` naming ``what`` (never the text, which
    may hold a secret) when it is not valid JSON or not an object."""
    try:
        value = json.loads(text)
    except ValueError:
        raise ConfigError(f"{what} is not valid JSON") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{what} is not a JSON object")
    return value


def _connection_from_uri(uri: str) -> dict[str, Any]:
    if "://" not in uri:
        raise ValueError(uri)
    scheme, rest = uri.split("://", 1)
    parts = urlsplit("//" + rest)
    host = unquote(parts.hostname or "")
    if "/" in host:  # as Airflow: a host holding a path is taken from the netloc as written
        host = unquote(parts.netloc.rsplit("@", 1)[-1].split(":", 1)[0])
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    extra = query["__extra__"] if "__extra__" in query else query
    return {"conn_type": "postgres" if scheme == "postgresql" else scheme.replace("-", "_"), "host": host,
            "port": parts.port, "login": unquote(parts.username) if parts.username else None,
            "password": unquote(parts.password) if parts.password else None,
            "schema": unquote(parts.path[1:]) if parts.path[1:] else None, "extra": extra}


def env_connection(conn_id: str) -> Optional[dict[str, Any]]:
    """The connection ``conn_id`` from the environment, or None: ``CDC_CONNECTION_<CONN_ID>``
    (handed over by the stage job operator), else ``AIRFLOW_CONN_<CONN_ID>`` (Airflow's own
    variable, JSON or URI). ``<CONN_ID>`` is the id upper-cased, as Airflow spells it."""
    for prefix in (CONNECTION_ENV_PREFIX, AIRFLOW_CONN_PREFIX):
        name = prefix + conn_id.upper()
        if os.environ.get(name):
            return parse_connection(os.environ[name], conn_id, name)
    return None


def _empty(v: Any) -> bool:
    return v is None or v == "" or v == {}


def _fill(section: dict, key: str, value: Any, where: str, conn_id: str) -> None:
    if _empty(value):
        return
    if not _empty(section.get(key)):
        raise ConfigError(f"key '{where}': set in the file and by connection {conn_id!r}; set it in one place only")
    section[key] = value


def apply_connections(raw: dict, connections: Optional[Connections] = None) -> dict:
    """``raw`` (an expanded pipeline mapping) with the values of the connections it names.

    ``kafka.connection``: host → ``bootstrap_servers``; extra → ``client`` settings; login and
    password → ``client`` ``sasl.username`` and ``sasl.password``. ``catalog.connection``: login
    and password → ``user`` and ``password``; host, port (default 5432) and schema →
    ``uri`` ``jdbc:postgresql://host:port/schema``, when the file has no ``uri``. The connection
    fills what the file leaves empty; a field set in both raises :class:`ConfigError` naming it.
    ``connections`` looks a connection up by id (None: :func:`env_connection`); a connection it
    does not find raises :class:`ConfigError` naming it.
    """
    lookup = connections or env_connection
    out = dict(raw)
    for section_name in ("kafka", "catalog"):
        section = out.get(section_name)
        if not isinstance(section, dict) or not section.get("connection"):
            continue
        conn_id = str(section["connection"])
        conn = lookup(conn_id)
        if conn is None:
            raise ConfigError(f"key '{section_name}.connection': connection {conn_id!r} is not defined (neither "
                              f"{CONNECTION_ENV_PREFIX}{conn_id.upper()} nor {AIRFLOW_CONN_PREFIX}{conn_id.upper()} "
                              "is set, nor is it in Airflow)")
        section = out[section_name] = dict(section)
        if section_name == "kafka":
            _fill(section, "bootstrap_servers", conn.get("host"), "kafka.bootstrap_servers", conn_id)
            client = section["client"] = dict(section.get("client") or {})
            settings = dict(conn.get("extra") or {})
            for key, field in (("sasl.username", "login"), ("sasl.password", "password")):
                if not _empty(conn.get(field)):
                    if not _empty(settings.get(key)):
                        raise ConfigError(f"connection {conn_id!r}: {key} is given as its {field} and in its extra; "
                                          "give it once")
                    settings[key] = conn[field]
            for key, value in settings.items():
                _fill(client, key, value, f"kafka.client.{key}", conn_id)
        else:
            _fill(section, "user", conn.get("login"), "catalog.user", conn_id)
            _fill(section, "password", conn.get("password"), "catalog.password", conn_id)
            if _empty(section.get("uri")) and conn.get("host"):
                schema = conn.get("schema") or ""
                section["uri"] = f"jdbc:postgresql://{conn['host']}:{conn.get('port') or 5432}/{schema}"
    sources = list(out["sources"]) if isinstance(out.get("sources"), list) else []
    for i, source in enumerate(sources):
        registry = _registry_section(source)
        if registry is None or not registry.get("connection"):
            continue
        where = f"sources[{i}].options.schema_registry"
        conn_id = str(registry["connection"])
        conn = lookup(conn_id)
        if conn is None:
            raise ConfigError(f"key '{where}.connection': connection {conn_id!r} is not defined (neither "
                              f"{CONNECTION_ENV_PREFIX}{conn_id.upper()} nor {AIRFLOW_CONN_PREFIX}{conn_id.upper()} "
                              "is set, nor is it in Airflow)")
        registry = dict(registry)
        host = conn.get("host")
        if host:
            scheme = conn.get("conn_type") if conn.get("conn_type") in ("http", "https") else "http"
            url = host if "://" in host else f"{scheme}://{host}" + (f":{conn['port']}" if conn.get("port") else "")
            _fill(registry, "url", url, f"{where}.url", conn_id)
        if not _empty(conn.get("login")):
            _fill(registry, "basic_auth_user_info", f"{conn['login']}:{conn.get('password') or ''}",
                  f"{where}.basic_auth_user_info", conn_id)
        sources[i] = dict(source, options=dict(source["options"], schema_registry=registry))
        out["sources"] = sources
    return out


def _registry_section(source: Any) -> Optional[dict]:
    """A source's ``options.schema_registry`` mapping (``debezium-avro``), or None."""
    options = source.get("options") if isinstance(source, dict) else None
    registry = options.get("schema_registry") if isinstance(options, dict) else None
    return registry if isinstance(registry, dict) else None


def connection_ids(cfg: "PipelineConfig") -> list[str]:
    """The connection ids a pipeline names (``kafka.connection``, ``catalog.connection``, a source's
    ``options.schema_registry.connection``, ``reconcile.connection``)."""
    registries = [_registry_section(s.model_dump()) for s in cfg.sources]
    reconcile = cfg.reconcile.connection if cfg.reconcile is not None else None
    return list(dict.fromkeys(c for c in (cfg.kafka.connection, cfg.catalog.connection, reconcile,
                                          *(str(r["connection"]) for r in registries if r and r.get("connection")))
                              if c))
