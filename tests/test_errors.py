"""Bad input fails with one line naming the cause: through the real job entry points."""
from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO, STATE, write_pipeline

from cdclake.config import load_pipeline
from cdclake.errors import ConfigError

WINDOW = ["--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]


def run_job(stage: str, path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "jobs" / f"{stage}.py"), "--pipeline", str(path), *WINDOW, *extra],
                          capture_output=True, text=True, timeout=300)


def error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


def test_unknown_format_names_the_key(stack, unique):
    path = write_pipeline(f"badfmt_{unique}", [{"topic": "t", "format": "nope-json"}])
    try:
        with pytest.raises(ConfigError, match=r"key 'sources\.0\.format': unknown format 'nope-json'; known formats: "):
            load_pipeline(path)
        proc = run_job("land", path)
        assert proc.returncode == 2
        assert "unknown format 'nope-json'" in error_line(proc)
    finally:
        path.unlink()


def test_unreachable_broker(stack, unique):
    from cdclake.embedded import free_port

    path = write_pipeline(f"nobroker_{unique}", [{"topic": "t", "format": "debezium-json"}])
    text = path.read_text().replace("${CDC_KAFKA_BOOTSTRAP}", f"127.0.0.1:{free_port()}").replace("timeout_s: 10", "timeout_s: 2")
    path.write_text(text)
    try:
        proc = run_job("land", path)
        assert proc.returncode == 1
        line = error_line(proc)
        assert line.startswith("error: cannot reach Kafka at 127.0.0.1:"), line
    finally:
        path.unlink()


def test_missing_catalog_directory(stack, unique):
    path = write_pipeline(f"nocat_{unique}", [{"topic": "t", "format": "canal-json"}])
    path.write_text(path.read_text().replace("${CDC_STATE_DIR}/catalog.db", f"{STATE}/missing-{unique}/catalog.db"))
    try:
        proc = run_job("normalize", path)
        assert proc.returncode == 2
        assert error_line(proc) == f"error: catalog directory {STATE}/missing-{unique} does not exist " \
                                   f"(catalog.uri jdbc:sqlite:{STATE}/missing-{unique}/catalog.db)"
    finally:
        path.unlink()


def test_bad_window(stack, unique):
    path = write_pipeline(f"badwin_{unique}", [{"topic": "t", "format": "canal-json"}])
    try:
        proc = subprocess.run([sys.executable, str(REPO / "jobs" / "silver.py"), "--pipeline", str(path),
                               "--start", "2024-01-01T00:30:00Z", "--end", "2024-01-01T01:00:00Z"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2
        assert "not on a whole hour" in error_line(proc)
    finally:
        path.unlink()
