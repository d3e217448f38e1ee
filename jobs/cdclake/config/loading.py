"""Loading pipeline files: read the YAML, expand ``${VAR}`` values, fill in the connections,
validate, and report the first bad key as a :class:`cdclake.errors.ConfigError` naming the file.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import yaml
from pydantic import ValidationError

from cdclake.config.connections import Connections, apply_connections
from cdclake.config.environment import _expand, _stack_env, pipelines_dir
from cdclake.config.models import PipelineConfig
from cdclake.errors import ConfigError


def load_pipeline(path: str | os.PathLike, *, connections: Optional[Connections] = None,
                  resolve: bool = True) -> PipelineConfig:
    """Load, expand and validate one pipeline file.

    ``resolve``: fill in the connections the file names (:func:`apply_connections`, looked up
    by ``connections``, default the environment); False leaves them unresolved (DAG parsing,
    which needs no secrets: ``bootstrap_servers`` or ``uri`` may then be None).
    Raises :class:`ConfigError` naming the file and the first bad key.
    """
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{p}: pipeline file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level")
    raw.setdefault("name", p.stem)
    try:
        expanded = _expand(raw, "", _stack_env())
        if resolve:
            expanded = apply_connections(expanded, connections)
        cfg = PipelineConfig.model_validate({**expanded, "path": str(p.resolve())})
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        raise ConfigError(f"{p}: key '{key}': {msg}") from None
    if resolve and not cfg.kafka.bootstrap_servers:
        raise ConfigError(f"{p}: key 'kafka.bootstrap_servers': not set, and connection {cfg.kafka.connection!r} "
                          "has no host")
    if resolve and not cfg.catalog.uri:
        raise ConfigError(f"{p}: key 'catalog.uri': not set, and connection {cfg.catalog.connection!r} has no host")
    return cfg


def load_pipelines(directory: str | os.PathLike | None = None, *, resolve: bool = True) -> list[PipelineConfig]:
    """All pipelines in ``directory`` (default :func:`pipelines_dir`), sorted by file name
    (``resolve``: as :func:`load_pipeline`)."""
    d = Path(directory) if directory else pipelines_dir()
    return [load_pipeline(f, resolve=resolve) for f in sorted(d.glob("*.y*ml"))]
