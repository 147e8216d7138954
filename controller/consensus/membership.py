"""Who the consensus layer's members are: voters, learners, and their addresses (pure values).

Our Raft changes a membership one server at a time through its log (controller/raft/membership.py
has the rules); a store backend's membership is its configured peers, all voters, and never
changes. Both describe it with these types, and a CONFIG entry's bytes are ``Membership.encode``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from autoswitch.base.limits import MAX_ADDRESS_LEN, MAX_CONTROLLERS

from .errors import RaftError

MAX_ID_LEN = 64
MAX_CONF_BYTES = 16 * 1024


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
                        or not all(isinstance(x, str) and len(x) <= MAX_ADDRESS_LEN for x in v.values()):
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
        if len(ids) > MAX_CONTROLLERS:
            raise BadMembership(f"{len(ids)} members (limit {MAX_CONTROLLERS})")
        for i in ids:
            if not isinstance(i, str) or not i or len(i) > MAX_ID_LEN or not i.isprintable():
                raise BadMembership(f"bad member id {str(i)[:64]!r}")
