"""The simulated shop's binlog: GTIDs, threads and binlog coordinates of each transaction.

MySQL 5.7/8.0 row-based replication with GTIDs writes a transaction as a GTID event, a ``BEGIN``
query event, per run of row changes to one table a Table_map event and a rows event (rows events
are split at ``binlog-row-event-max-size``), then an XID event; the binlog rotates to the next file
(``mysql-bin.000007``, ``mysql-bin.000008`` ...) once a file reaches its maximum size, positions
restarting at 194 after the file's header events. Event sizes here are approximate: enough to give
realistic, strictly increasing ``(file number, pos, row)`` coordinates.
"""
from __future__ import annotations

import random
from typing import Mapping, Optional

from cdclake.sim.model import DATABASE, TABLES, RowChange, Table, Transaction

BINLOG_PREFIX = "mysql-bin"
#: Sequence number of the first binlog file of every history.
FIRST_BINLOG_FILE = 7
#: Position of the first transaction in a binlog file (after the 4-byte magic number, the
#: Format_description event and the Previous_gtids event).
FIRST_EVENT_POS = 194

# Event sizes in bytes (approximate, MySQL 5.7/8.0 row-based replication with GTIDs).
_GTID_EVENT = 65
_BEGIN_EVENT = 80
_XID_EVENT = 31
_ROWS_HEADER = 30
_MAX_ROWS_EVENT = 8192  # binlog-row-event-max-size
_FIXED_SIZES = {"bigint": 8, "int": 4, "double": 8, "timestamp": 7, "timestamp_ntz": 7, "date": 3}


def _row_image_size(table: Table, row: Mapping[str, object]) -> int:
    size = (len(table.columns) + 7) // 8
    for c in table.columns:
        v = row.get(c.name)
        if v is None:
            continue
        if c.ctype in _FIXED_SIZES:
            size += _FIXED_SIZES[c.ctype]
        elif c.ctype.startswith("decimal"):
            size += 6
        elif isinstance(v, bytes):
            size += 1 + len(v)
        else:
            size += 1 + len(str(v).encode("utf-8"))
    return size


def _change_size(table: Table, before: Optional[Mapping], after: Optional[Mapping]) -> int:
    return sum(_row_image_size(table, img) for img in (before, after) if img is not None)


def assign_binlog_coordinates(logical: list[tuple[int, str, list]], rng: random.Random,
                              tables: Mapping[str, Table] = TABLES) -> list[Transaction]:
    """The committed transactions of a logical history, with GTIDs, threads and binlog coordinates.

    ``logical`` is ``[(commit_ts_ms, kind, changes)]`` in commit order, ``changes`` a list of
    ``(table, op, before, after)`` with ``op`` ``insert``/``update``/``delete`` and row images as
    dicts (None for a missing image), tables from ``tables`` (default :data:`cdclake.sim.model.TABLES`,
    the shop's; any definitions whose names the changes use). The result
    has one :class:`Transaction` per entry: ``tx_id``/``gtid`` ``server_uuid:sequence``, binlog
    files rotating by size (about six per history, so every history crosses ``mysql-bin.000009``
    → ``mysql-bin.000010``), ``snapshot`` set for ``kind == "bulk_load"``. All randomness (server
    UUID, first GTID sequence number, thread ids) is drawn from ``rng``, in a fixed order.
    """
    server_uuid = "%08x-%04x-11ee-%04x-%012x" % (rng.getrandbits(32), rng.getrandbits(16),
                                               0x8000 | rng.getrandbits(14), rng.getrandbits(48))
    gtid_seq = rng.randint(1_000, 9_000)
    threads = [rng.randint(10, 500) for _ in range(6)]

    # Group each transaction's changes into rows events: runs of the same table and op.
    planned = []
    total = 0
    for ts, kind, changes in logical:
        events: list[list] = []
        for ch in changes:
            table = tables[ch[0]]
            size = _change_size(table, ch[2], ch[3])
            if events and events[-1][0] == (ch[0], ch[1]) and events[-1][1] + size <= _MAX_ROWS_EVENT:
                events[-1][1] += size
                events[-1][2].append(ch)
            else:
                events.append([(ch[0], ch[1]), _ROWS_HEADER + size, [ch]])
        tx_size = _GTID_EVENT + _BEGIN_EVENT + _XID_EVENT + sum(
            40 + len(DATABASE) + len(e[0][0]) + len(tables[e[0][0]].columns) + e[1] for e in events)
        planned.append((ts, kind, events, tx_size))
        total += tx_size
    # About six files per history, so every history crosses 000009 → 000010.
    max_binlog_size = max(4_096, total // 5)

    out: list[Transaction] = []
    file_no, pos = FIRST_BINLOG_FILE, FIRST_EVENT_POS
    for ts, kind, events, tx_size in planned:
        fname = f"{BINLOG_PREFIX}.{file_no:06d}"
        gtid = f"{server_uuid}:{gtid_seq}"
        gtid_seq += 1
        tx_pos = pos
        p = pos + _GTID_EVENT + _BEGIN_EVENT
        changes = []
        for (tname, _op), size, rows in events:
            p += 40 + len(DATABASE) + len(tname) + len(tables[tname].columns)  # Table_map event
            for i, (table, op, before, after) in enumerate(rows):
                key = tables[table].key_of(after if after is not None else before)
                changes.append(RowChange(table, op, before, after, key, fname, p, i))
            p += size
        pos = p + _XID_EVENT
        assert pos - tx_pos == tx_size
        out.append(Transaction(tx_id=gtid, gtid=gtid, commit_ts_ms=ts, changes=tuple(changes),
                               binlog_file=fname, binlog_pos=tx_pos, thread_id=rng.choice(threads),
                               snapshot=(kind == "bulk_load"), kind=kind))
        if pos >= max_binlog_size:
            file_no += 1
            pos = FIRST_EVENT_POS
    return out
