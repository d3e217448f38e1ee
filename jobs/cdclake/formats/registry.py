"""The closed list of vendor formats: :data:`PACKAGES`, and what derives from it.

Each vendor package ``cdclake.formats.<vendor>`` declares its formats in ``FORMATS`` (a tuple of
:class:`~cdclake.formats.base.Format`: name, parser class, document, ``auto`` rule, coarse types).
Adding a format is its package and one line here; :data:`cdclake.formats.FORMATS`, the ``auto``
rules (:mod:`cdclake.formats.detect`), ``inspect`` and the simulator read the list through
:func:`all_formats` when they run.
"""
from __future__ import annotations

from typing import Optional

from cdclake.formats import aliyun, arcion, canal, cdl, debezium, dms, dts, maxwell, ogg, qlik, shareplex
from cdclake.formats.base import Format

#: Every vendor package the pipeline reads, one per line of this closed list.
PACKAGES = (
    aliyun,
    arcion,
    canal,
    cdl,
    debezium,
    dms,
    dts,
    maxwell,
    ogg,
    qlik,
    shareplex,
)


#: (the list it was read from, format name → format), read again when :data:`PACKAGES` is replaced.
_READ: tuple = ((), {})


def by_name() -> dict[str, Format]:
    """Format name → format, for every format of :data:`PACKAGES` in the packages' order (do not
    change it). Raises ``ValueError`` when two formats share a name, or a format yields to a name
    that is not in the list."""
    global _READ
    packages, formats = _READ
    if packages is not PACKAGES:
        found = [f for package in PACKAGES for f in package.FORMATS]
        formats = {f.name: f for f in found}
        if len(formats) != len(found):
            names = [f.name for f in found]
            raise ValueError(f"format names repeat: {sorted(n for n in formats if names.count(n) > 1)}")
        unknown = {y for f in found for y in f.yields_to} - set(formats)
        if unknown:
            raise ValueError(f"formats yield to unknown formats: {sorted(unknown)}")
        _READ = (PACKAGES, formats)
    return formats


def all_formats() -> tuple[Format, ...]:
    """Every format of :data:`PACKAGES`, in the packages' order."""
    return tuple(by_name().values())


def format_named(name: str) -> Optional[Format]:
    """The format called ``name``, or None."""
    return by_name().get(name)
