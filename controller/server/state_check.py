"""The online state hash check (docs/controller.md "State hash check"): etcd's corruption check
for our controllers.

The leader proposes a ``CheckStateHash`` marker every ``state_check_interval_s``. Every member
hashes its state where it applies that entry (``ControllerStateMachine.state_hashes``: the
same applied index on every member), then asks the other voters for theirs (``GetStateHash``)
and decides with ``verdict``:

* every answer agrees: nothing to say;
* a majority of the members holds another hash than ours: **our** state is the odd one. We
  silence ourselves (no votes, no campaign, no leadership; a leader steps down) and refuse
  reads (CONTROLLER_STATE_CORRUPT), and say what to do: rebuild this member (`recover-member`);
* we are with the majority and some peer differs: alarm naming it (it silences itself);
* no majority agrees on anything: alarm, nobody is silenced (the operator decides).

A member that cannot apply the marker (wedged at an index, its log conflicting with the leader's)
never hashes it and answers "not found": the comparison cannot see it. So the leader also watches
each follower's replication progress (``stuck_followers``): one whose match index has not moved for
``STUCK_AFTER_INTERVALS`` check intervals while the commit index moved on is named
(``raft_follower_not_progressing``, error; issue 59 item 2: a follower that had applied a forged
entry stayed wedged while the leader moved on, and nothing flagged it).

Pure decision here; the RPCs are PeerLiveness.state_hashes and the servicer's GetStateHash.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from autoswitch.controller import messages as m

OK, SELF_DIFFERS, PEERS_DIFFER, UNDECIDED = "ok", "self_differs", "peers_differ", "undecided"
ASK_ATTEMPTS = 20          # a peer that has not applied the marker yet is asked again, this often
ASK_GAP_S = 0.25
STUCK_AFTER_INTERVALS = 3  # a follower whose match index stood still this many intervals is named
MIN_STUCK_S = 10.0


@dataclass(frozen=True)
class Verdict:
    kind: str
    differ: tuple[str, ...] = ()     # the peers whose hash differs from ours
    majority_hash: str = ""


def verdict(own: str, peers: dict[str, str | None], members: int) -> Verdict:
    """``peers``: each other voter's hash at the same index (None: unknown). ``members``: voters,
    us included."""
    need = members // 2 + 1
    known = {p: h for p, h in peers.items() if h is not None}
    differ = tuple(sorted(p for p, h in known.items() if h != own))
    if not differ:
        return Verdict(OK)
    counts: dict[str, int] = {own: 1}
    for h in known.values():
        counts[h] = counts.get(h, 0) + 1
    top, n = max(counts.items(), key=lambda kv: (kv[1], kv[0] == own))
    if n < need:
        return Verdict(UNDECIDED, differ)
    if top != own:
        return Verdict(SELF_DIFFERS, differ, top)
    return Verdict(PEERS_DIFFER, differ, own)


class _Peers(Protocol):
    async def state_hashes(self, index: int, timeout_s: float) -> dict[str, Any]: ...


def stuck_followers(seen: dict[str, tuple[int, float]], commit: int, match: dict[str, int], now: float,
                    after_s: float) -> list[str]:
    """Update ``seen`` (peer -> (match index, when it last moved)) from the leader's ``match`` and
    return the peers whose match stood still for ``after_s`` while below ``commit``."""
    out = []
    for p, idx in match.items():
        prev = seen.get(p)
        if prev is None or idx > prev[0] or idx >= commit:
            seen[p] = (idx, now)
        elif now - prev[1] >= after_s:
            out.append(p)
    for p in [p for p in seen if p not in match]:
        del seen[p]
    return sorted(out)


class StateCheck:
    def __init__(self, node_id: str, hashes: Callable[[], list[tuple[int, str]]], peers: _Peers,
                 members: Callable[[], int], propose: Callable[[m.Request], Awaitable[Any]],
                 silence: Callable[[str], None], interval_s: float, timeout_s: float, log: Any,
                 progress: Callable[[], tuple[int, dict[str, int]]] | None = None) -> None:
        """``progress``: on the leader, (commit index, each follower's match index)."""
        self._progress = progress
        self._seen: dict[str, tuple[int, float]] = {}
        self._named: set[str] = set()            # followers named as not progressing (once each)
        self.node_id = node_id
        self._hashes = hashes
        self._peers = peers
        self._members = members
        self._propose = propose
        self._silence = silence
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.log = log
        self.corrupt: str | None = None      # set once: this member's state differs from the majority's
        self.checked = 0                     # comparisons done (metrics)
        self.mismatches = 0                  # comparisons where anyone differed
        self.last: dict[str, Any] = {}       # the last comparison (status page)
        self._done = 0                       # the highest index compared

    def hash_at(self, index: int) -> str | None:
        for i, h in self._hashes():
            if i == index:
                return h
        return None

    async def run(self, stopped: asyncio.Event, is_leader: Callable[[], bool]) -> None:
        """The leader proposes the marker; every member compares each hash it recorded."""
        next_propose = asyncio.get_running_loop().time() + self.interval_s
        while not stopped.is_set():
            now = asyncio.get_running_loop().time()
            if now >= next_propose:
                next_propose = now + self.interval_s
                if is_leader() and self.corrupt is None:
                    try:
                        await self._propose(m.CheckStateHashRequest())
                    except Exception as e:  # noqa: BLE001 - no majority, lost leadership: the next round tries again
                        self.log.info("state_check_propose_failed", error=type(e).__name__, detail=str(e)[:200])
            for index, own in self._hashes():
                if index > self._done:
                    self._done = index
                    await self.compare(index, own)
            if is_leader() and self._progress is not None:
                self._watch_progress(now)
            else:
                self._seen.clear()
            try:
                await asyncio.wait_for(stopped.wait(), min(0.5, self.interval_s))
            except TimeoutError:
                pass

    def _watch_progress(self, now: float) -> None:
        commit, match = self._progress() if self._progress is not None else (0, {})
        stuck = stuck_followers(self._seen, commit, match, now,
                                max(MIN_STUCK_S, STUCK_AFTER_INTERVALS * self.interval_s))
        for p in stuck:
            if p not in self._named:
                self._named.add(p)
                self.log.error("raft_follower_not_progressing", peer=p, match=match.get(p), commit=commit,
                               action="its log may conflict with the leader's (a forged or corrupt entry): compare "
                                      "its state (`admin snapshot-save` on it) and rebuild it with `autoswitch "
                                      "recover-member`")
        self._named &= set(stuck)

    async def compare(self, index: int, own: str) -> Verdict:
        answers: dict[str, str | None] = {}
        for _ in range(ASK_ATTEMPTS):
            got = await self._peers.state_hashes(index, self.timeout_s)
            for p, r in got.items():
                if r is not None and r.found:
                    answers[p] = r.hash
            if len(answers) == len(got):
                break
            await asyncio.sleep(ASK_GAP_S)
        peers = {p: answers.get(p) for p in got}
        v = verdict(own, peers, self._members())
        self.checked += 1
        self.last = {"index": index, "hash": own, "peers": peers, "verdict": v.kind, "differ": list(v.differ)}
        if v.kind == OK:
            self.log.info("state_hash_checked", index=index, hash=own, peers=len(answers))
            return v
        self.mismatches += 1
        if v.kind == SELF_DIFFERS:
            self.corrupt = f"state hash at index {index} is {own}; the majority's is {v.majority_hash}"
            self.log.critical("state_hash_mismatch", index=index, hash=own, majority=v.majority_hash,
                              differ=list(v.differ),
                              action="this member stopped voting, leading and answering reads: rebuild it from "
                                     "the others with `autoswitch recover-member` (docs/operations-controller.md)")
            self._silence("state_hash_mismatch")
        elif v.kind == PEERS_DIFFER:
            self.log.error("peer_state_hash_mismatch", index=index, hash=own, differ=list(v.differ),
                           action="the named members silence themselves; rebuild each with `autoswitch "
                                  "recover-member`")
        else:
            self.log.critical("state_hash_undecided", index=index, hash=own, peers=peers,
                              action="no majority holds one state: stop and compare the members' snapshots "
                                     "(`admin snapshot-save` on each) before rebuilding any")
        return v
