"""The layer contract (``.importlinter``): the library as it is keeps it, and an import that runs
upward or closes a circle breaks it.

The contract is checked by ``lint-imports`` over the real tree; the broken cases run it over a copy
of ``jobs/cdclake`` with one import added.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(jobs: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(jobs))
    return subprocess.run([str(LINT), "--no-logo", "--no-cache", str(REPO / ".importlinter")], cwd=jobs,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_library_keeps_its_layers():
    done = lint(REPO / "jobs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("module, added, broken", [
    # the bottom layer reaching up into a stage
    ("types.py", "from cdclake import silver", "cdclake.types is not allowed to import cdclake.silver"),
    # one stage importing another
    ("gates/__init__.py", "from cdclake import land", "cdclake.gates is not allowed to import cdclake.land"),
    # a parser importing the lake
    ("formats/canal/parser.py", "from cdclake import lake", "- cdclake.formats.canal.parser -> cdclake.lake"),
    # a circle inside the silver package
    ("silver/order.py", "from cdclake.silver import merge", "No cycles are allowed in cdclake.silver"),
])
def test_an_upward_import_or_a_circle_breaks_the_contract(tmp_path, module, added, broken):
    jobs = tmp_path / "jobs"
    shutil.copytree(REPO / "jobs" / "cdclake", jobs / "cdclake", ignore=shutil.ignore_patterns("__pycache__"))
    target = jobs / "cdclake" / module
    target.write_text(target.read_text() + f"\n{added}  # noqa: E402,F401\n")
    done = lint(jobs)
    assert done.returncode != 0
    assert broken in done.stdout, done.stdout
