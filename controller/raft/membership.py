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

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from autoswitch.base.limits import MAX_CONTROLLERS

from .errors import RaftError

MAX_MEMBERS = MAX_CONTROLLERS
MAX_ID_LEN = 64
MAX_ADDR_LEN = 256
MAX_CONF_BYTES = 16 * 1024

_SNAP_MAGIC = b"ASRMEM1\0"      # membership only (written before configurations carried their index)
_SNAP_MAGIC2 = b"ASRMEM2\0"     # membership and the log index of its CONFIG entry
_LEN = struct.Struct(">I")
_INDEX = struct.Struct(">Q")


class BadMembership(RaftError):
    code = "RAFT_BAD_MEMBERSHIP"


@dataclass(frozen=True, slots=True)
class Member:
    client: str = ""       # the controller API address (brokers, admin, peer liveness queries)
    raft: str = ""         # the Raft peer address ("" = the client address serves Raft too)

    @property
    def raft_addr(self) -> str:
        return self.raft or self.client


@dataclass(frozen=True, slots=True)
class Membership:
    voters: dict[str, Member] = field(default_factory=dict)
    learners: dict[str, Member] = field(default_factory=dict)

    @classmethod
    def of_ids(cls, ids: list[str] | tuple[str, ...]) -> Membership:
        return cls({i: Member() for i in ids}, {})

    @property
    def voter_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.voters))

    @property
    def learner_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self.learners))

    def member(self, node_id: str) -> Member | None:
        return self.voters.get(node_id) or self.learners.get(node_id)

    def all(self) -> dict[str, Member]:
        return {**self.voters, **self.learners}

    @property
    def empty(self) -> bool:
        return not self.voters and not self.learners

    # ---- the steps an operator may take (each a valid single-server change of ``self``)
    def with_learner(self, node_id: str, member: Member) -> Membership:
        if node_id in self.voters or node_id in self.learners:
            raise BadMembership(f"{node_id!r} is already a member", node=node_id)
        out = Membership(dict(self.voters), {**self.learners, node_id: member})
        out.validate()
        return out

    def promoted(self, node_id: str) -> Membership:
        if node_id not in self.learners:
            raise BadMembership(f"{node_id!r} is not a learner", node=node_id)
        learners = dict(self.learners)
        m = learners.pop(node_id)
        return Membership({**self.voters, node_id: m}, learners)

    def without(self, node_id: str) -> Membership:
        if node_id in self.learners:
            learners = dict(self.learners)
            learners.pop(node_id)
            return Membership(dict(self.voters), learners)
        if node_id not in self.voters:
            raise BadMembership(f"{node_id!r} is not a member", node=node_id)
        if len(self.voters) == 1:
            raise BadMembership("cannot remove the last voter", node=node_id)
        voters = dict(self.voters)
        voters.pop(node_id)
        return Membership(voters, dict(self.learners))

    def voter_change(self, new: Membership) -> int:
        """How many voters differ between the two (a valid step changes at most one)."""
        return len(set(self.voters) ^ set(new.voters))

    # ---- encoding (the CONFIG entry's data)
    def encode(self) -> bytes:
        def side(d: dict[str, Member]) -> dict[str, dict[str, str]]:
            return {k: {"client": v.client, "raft": v.raft} for k, v in sorted(d.items())}
        return json.dumps({"voters": side(self.voters), "learners": side(self.learners)},
                          separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> Membership:
        """Every bound checked: a CONFIG entry is input from the network like any other."""
        if len(data) > MAX_CONF_BYTES:
            raise BadMembership(f"configuration of {len(data)} bytes (limit {MAX_CONF_BYTES})")
        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise BadMembership(f"configuration is not JSON: {e}") from None
        if not isinstance(raw, dict) or set(raw) != {"voters", "learners"}:
            raise BadMembership("configuration needs exactly 'voters' and 'learners'")

        def side(d: object) -> dict[str, Member]:
            if not isinstance(d, dict):
                raise BadMembership("members must be an object")
            out = {}
            for k, v in d.items():
                if not isinstance(v, dict) or set(v) != {"client", "raft"} \
                        or not all(isinstance(x, str) and len(x) <= MAX_ADDR_LEN for x in v.values()):
                    raise BadMembership(f"member {str(k)[:64]!r}: needs string 'client' and 'raft' addresses")
                out[k] = Member(v["client"], v["raft"])
            return out
        m = cls(side(raw["voters"]), side(raw["learners"]))
        m.validate()
        return m

    def validate(self) -> None:
        ids = list(self.voters) + list(self.learners)
        if len(ids) != len(set(ids)):
            raise BadMembership("a node is both voter and learner")
        if len(ids) > MAX_MEMBERS:
            raise BadMembership(f"{len(ids)} members (limit {MAX_MEMBERS})")
        for i in ids:
            if not isinstance(i, str) or not i or len(i) > MAX_ID_LEN or not i.isprintable():
                raise BadMembership(f"bad member id {str(i)[:64]!r}")


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
