"""``python -m cdclake <command>``: the library's own commands.

- ``inspect --topic T [--topic T2 ...] [--bootstrap B] [--pipeline P] [--sample N]``: sample the
  topics, detect their format and print a pipeline file reading them (:mod:`cdclake.inspection`).
"""
from __future__ import annotations

import sys

COMMANDS = ("inspect",)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m cdclake {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    from cdclake.inspection import main as inspect_main

    return inspect_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
