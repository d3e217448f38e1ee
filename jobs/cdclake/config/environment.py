"""Where a pipeline's paths and ``${VAR}`` values come from: the repository, the state and pipeline
directories, the embedded stack's env file, and the expansion of ``${VAR}`` and
``${VAR:-default}`` in a pipeline file's values (the environment first, then ``stack.env``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Optional

from cdclake.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[3]
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def state_dir() -> Path:
    """The directory holding embedded state (broker, catalog, warehouse, Airflow home).

    ``$CDC_STATE_DIR``, default ``<repo>/.state``.
    """
    return Path(os.environ.get("CDC_STATE_DIR") or REPO_ROOT / ".state").resolve()


def pipelines_dir() -> Path:
    """The directory of pipeline YAML files: ``$CDC_PIPELINES_DIR``, default ``<repo>/config/pipelines``."""
    return Path(os.environ.get("CDC_PIPELINES_DIR") or REPO_ROOT / "config" / "pipelines").resolve()


def stack_value(name: str) -> Optional[str]:
    """``$name`` from the environment, else from the embedded stack's ``stack.env`` (what ``make
    stack`` and the demo write: ``CDC_KAFKA_BOOTSTRAP``, ``CDC_SCHEMA_REGISTRY_URL`` ...), else None."""
    return os.environ.get(name) or _stack_env().get(name)


def _stack_env() -> dict[str, str]:
    env_file = state_dir() / "stack.env"
    out: dict[str, str] = {"CDC_STATE_DIR": str(state_dir())}
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def _expand(obj: Any, where: str, lookup: dict[str, str]) -> Any:
    if isinstance(obj, dict):
        return {k: _expand(v, f"{where}.{k}" if where else str(k), lookup) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_expand(v, f"{where}[{i}]", lookup) for i, v in enumerate(obj)]
    if isinstance(obj, str):

        def sub(m: re.Match) -> str:
            name, default = m.group(1), m.group(2)
            val = os.environ.get(name) or lookup.get(name)
            if val is None:
                if default is None:
                    raise ConfigError(f"key '{where}': environment variable {name} is not set (and no default given)")
                return default
            return val

        return _VAR_RE.sub(sub, obj)
    return obj
