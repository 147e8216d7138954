"""Raft cluster membership: who votes, who only learns, and where they are (pure).

Changes are **single-server** (Raft thesis §4.1): each CONFIG entry adds or removes at most one
voter (learners come and go freely), so any majority of the old voters and any majority of the new
ones share a member and no step needs joint consensus. A node uses the newest configuration in its
log, committed or not, and a truncated tail takes its configurations with it. The leader proposes
a change only after the previous one committed and after an entry of its own term committed
(Ongaro's fix for the single-server bug, raft-dev 2015). Joint consensus would allow replacing
several voters at once; operators replace one controller at a time anyway, and single-server steps
keep one code path and one rule to check. docs/raft.md "Membership" has the argument.

A configuration travels as a CONFIG log entry (the whole new membership, with every member's
client and Raft address) and inside every Raft snapshot (``pack_snapshot``), so a node restored
from a snapshot knows the members as of that index.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from autoswitch.controller.consensus.membership import MAX_CONF_BYTES, BadMembership, Membership

_SNAP_MAGIC = b"ASRMEM1\0"      # membership only (written before configurations carried their index)
_SNAP_MAGIC2 = b"ASRMEM2\0"     # membership and the log index of its CONFIG entry
_LEN = struct.Struct(">I")
_INDEX = struct.Struct(">Q")


class ConfHistory:
    """The configurations a node's log holds, oldest first: the base (from the snapshot or the
    bootstrap list) and one per CONFIG entry after it. The newest one is in force."""

    def __init__(self, base_index: int, base_term: int, base: Membership) -> None:
        self._items: list[tuple[int, int, Membership]] = [(base_index, base_term, base)]

    @property
    def current(self) -> Membership:
        return self._items[-1][2]

    @property
    def index(self) -> int:
        """Log index of the configuration in force (0 or the snapshot's for the base)."""
        return self._items[-1][0]

    def at(self, index: int) -> Membership:
        """The configuration in force after applying entry ``index``."""
        return self.newest_at(index)[1]

    def newest_at(self, index: int) -> tuple[int, Membership]:
        """(log index of its CONFIG entry, configuration) in force after applying entry ``index``."""
        for i, _t, m in reversed(self._items):
            if i <= index:
                return i, m
        return self._items[0][0], self._items[0][2]

    def add(self, index: int, term: int, conf: Membership) -> None:
        assert index > self._items[-1][0], (index, self._items[-1][0])
        self._items.append((index, term, conf))

    def truncate(self, matches: Callable[[int, int], bool]) -> bool:
        """Drop configurations whose entry is no longer in the log (``matches(index, term)`` is
        False); the base stays. True if the configuration in force changed."""
        changed = False
        while len(self._items) > 1 and not matches(self._items[-1][0], self._items[-1][1]):
            self._items.pop()
            changed = True
        return changed

    def reset(self, index: int, term: int, conf: Membership) -> None:
        self._items = [(index, term, conf)]

    def compact(self, index: int) -> None:
        """Entries up to ``index`` are gone from the log: keep only the newest configuration at or
        below it (as the base) and those after it."""
        keep = [x for x in self._items if x[0] > index]
        base = [x for x in self._items if x[0] <= index][-1:]
        self._items = base + keep


def pack_snapshot(conf: Membership | None, data: bytes, conf_index: int = 0) -> bytes:
    """A Raft snapshot: the membership as of its index and the log index of the CONFIG entry that
    made it (0 = the bootstrap list), then the state machine's bytes. The index travels because
    brokers and lease grants name a configuration by it (docs/controller.md "Controller
    membership"): a node restored from a snapshot must call it what every other node calls it."""
    if conf is None:
        return data
    c = conf.encode()
    return _SNAP_MAGIC2 + _LEN.pack(len(c)) + c + _INDEX.pack(conf_index) + data


def snapshot_membership(blob: bytes) -> tuple[Membership | None, int | None, bytes]:
    """(membership or None for a snapshot without one, e.g. restored from `snapshot-save`; the
    index of its CONFIG entry or None when the snapshot does not say; state machine bytes)."""
    v2 = blob.startswith(_SNAP_MAGIC2)
    if not v2 and not blob.startswith(_SNAP_MAGIC):
        return None, None, blob
    start = len(_SNAP_MAGIC) + _LEN.size
    if len(blob) < start:
        raise BadMembership("snapshot membership header cut short")
    (n,) = _LEN.unpack_from(blob, len(_SNAP_MAGIC))
    tail = _INDEX.size if v2 else 0
    if n > MAX_CONF_BYTES or len(blob) < start + n + tail:
        raise BadMembership("snapshot membership cut short or too large")
    conf = Membership.decode(blob[start:start + n])
    if not v2:
        return conf, None, blob[start + n:]
    (index,) = _INDEX.unpack_from(blob, start + n)
    return conf, index, blob[start + n + tail:]


def unpack_snapshot(blob: bytes) -> tuple[Membership | None, bytes]:
    """(membership or None, state machine bytes) of a snapshot."""
    conf, _index, data = snapshot_membership(blob)
    return conf, data


def base_conf_index(conf_index: int | None, snap_index: int) -> int:
    """The index a configuration from a snapshot goes by: its CONFIG entry's when the snapshot says
    (every node must name a configuration alike: brokers and lease grants compare it), else the
    snapshot's own, as before; never beyond the snapshot (a bad peer's number is not trusted)."""
    return snap_index if conf_index is None or conf_index > snap_index else conf_index
