"""``python -m cdclake <command>``: the library's own commands.

- ``inspect --topic T [--topic T2 ...] [--bootstrap B] [--pipeline P] [--sample N]``: sample the
  topics, detect their format and print a pipeline file reading them (:mod:`cdclake.inspection`).
- ``reconcile --pipeline P [--table T ...]``: compare silver tables with their source database
  (:mod:`cdclake.reconcile`); exit 1 with one line ``error: drift found: ...`` on drift.
"""
from __future__ import annotations

import sys

COMMANDS = ("inspect", "reconcile")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m cdclake {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    if argv[0] == "reconcile":
        from cdclake.cli import main as job_main
        from cdclake.cli import reconcile_job

        return job_main("reconcile", reconcile_job(), argv[1:])
    from cdclake.inspection import main as inspect_main

    return inspect_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
