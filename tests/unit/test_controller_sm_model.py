"""Model check of the eligible-replica safety claim (docs/controller.md, "Safety argument").

A tiny model of one broker group drives the real state machine: replica logs are lists of
entry ids; the master acknowledges an entry only when every SSS member has it and the SSS has
at least minInSyncReplicas members (assumption A1); a slave joins the SSS only once it holds
every acknowledged entry; unclean restarts lose a random tail and are reported (A3).
Invariant checked after every step: every SSS member and eligible replica that does not report
an unclean shutdown holds every acknowledged entry — so any clean election keeps them.
"""

from __future__ import annotations

from autoswitch.controller.messages import (
    TRIGGER_CONTROLLER,
    AlterSyncStateSetRequest,
    ApplyBrokerIdRequest,
    BrokerLiveInfo,
    ElectMasterRequest,
    RegisterBrokerRequest,
    encode_request,
)
from autoswitch.controller.state.sm_config import SMConfig
from autoswitch.controller.state.statemachine import ControllerStateMachine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

G, C, IDS = "g", "c", (1, 2, 3)


class Model:
    def __init__(self, min_isr: int) -> None:
        self.sm = ControllerStateMachine(SMConfig(min_in_sync_replicas=min_isr, first_election_grace_ms=0))
        self.min_isr = min_isr
        self.index = 0
        self.logs: dict[int, list[int]] = {b: [] for b in IDS}
        self.alive = set(IDS)
        self.clean = dict.fromkeys(IDS, True)
        self.acked: set[int] = set()
        self.next_entry = 1
        self.pending: set[int] = set()   # restarted, RegisterBroker not yet applied
        # (brokerId, MasterEpoch) of a master that restarted uncleanly: like the real broker
        # (unclean_master_resume_refused) it does not act as master in that epoch again.
        self.no_resume: set[tuple[int, int]] = set()
        for b in IDS:
            self.w(ApplyBrokerIdRequest(C, G, b, f"h:{b};{b}"))
        assert self.elect().ok

    def w(self, req):
        self.index += 1
        return self.sm.apply(self.index, encode_request(req))

    @property
    def v(self):
        return self.sm.replica_view(G)

    def live_infos(self):
        return tuple(BrokerLiveInfo(b, 0, len(self.logs[b]), 0, 0, self.clean[b]) for b in sorted(self.alive))

    def elect(self):
        m = self.v.master_broker_id if self.v else None
        dead = (m,) if m is not None and m not in self.alive else ()
        return self.w(ElectMasterRequest(C, G, TRIGGER_CONTROLLER, 0, False, self.live_infos(), dead_broker_ids=dead))

    def master_ok(self):
        m = self.v.master_broker_id
        if m is None or m not in self.alive or (m, self.v.master_epoch) in self.no_resume:
            return None
        return m

    # --- steps ---

    def write(self):
        m = self.master_ok()
        if m is not None:
            self.logs[m].append(self.next_entry)
            self.next_entry += 1

    def replicate(self, b: int, k: int):
        m = self.master_ok()
        if m is None or b == m or b not in self.alive:
            return
        mine, theirs = self.logs[b], self.logs[m]
        common = 0
        while common < min(len(mine), len(theirs)) and mine[common] == theirs[common]:
            common += 1
        self.logs[b] = theirs[: min(len(theirs), common + k)]   # truncate divergence, then fetch k

    def ack(self):
        m = self.master_ok()
        sss = set(self.v.sync_state_set)
        if m is None or len(sss) < self.min_isr:
            return   # A1: IN_SYNC_REPLICAS_NOT_ENOUGH
        log = self.logs[m]
        n = len(log)
        for b in sss:
            other = self.logs[b]
            k = 0
            while k < min(n, len(other)) and other[k] == log[k]:
                k += 1
            n = k
        self.acked.update(log[:n])

    def alter(self, b: int, add: bool):
        m = self.master_ok()
        if m is None or b == m:
            return
        sss = set(self.v.sync_state_set)
        if add:
            log, other = self.logs[m], self.logs[b]
            if b not in self.alive or not self.acked <= set(other) or other != log[: len(other)]:
                return   # HA expand rule: caught up past confirmOffset, same history
            new = sss | {b}
        else:
            new = sss - {b}
        v = self.v
        r = self.w(AlterSyncStateSetRequest(G, m, v.master_epoch, tuple(sorted(new)), v.sync_state_set_epoch,
                                            tuple(sorted(self.alive))))
        if r.ok and add:
            self.clean[b] = True   # re-admitted: its report is clean again

    def kill(self, b: int):
        self.alive.discard(b)

    def register_pending(self):
        for b in sorted(self.pending):
            self.register(b)

    def kill_master(self):
        if self.v.master_broker_id is not None:
            self.alive.discard(self.v.master_broker_id)

    def catch_up(self):
        """Every alive slave fetches everything and the master adds it to the SSS."""
        for b in IDS:
            self.replicate(b, 1 << 20)
        for b in IDS:
            self.alter(b, True)

    def restart(self, b: int, clean: bool, keep: int, register_now: bool):
        """``register_now`` False: its heartbeats (with the unclean flag) reach the controller
        before its RegisterBroker does — the race the heartbeat flag closes."""
        if b in self.alive:
            return
        self.alive.add(b)
        if not clean:
            self.logs[b] = self.logs[b][: min(keep, len(self.logs[b]))]
            self.clean[b] = False
            if b == self.v.master_broker_id:
                self.no_resume.add((b, self.v.master_epoch))
        if register_now:
            self.register(b)
        else:
            self.pending.add(b)

    def register(self, b: int):
        self.pending.discard(b)
        assert self.w(RegisterBrokerRequest(C, G, b, f"h:{b}", clean_shutdown=self.clean[b])).ok

    def check(self):
        v = self.v
        for b in set(v.sync_state_set) | set(v.eligible_replicas):
            if self.clean[b]:
                assert self.acked <= set(self.logs[b]), (b, v, sorted(self.acked), self.logs[b])


step = st.one_of(
    st.tuples(st.just("write")), st.tuples(st.just("write")),
    st.tuples(st.just("replicate"), st.sampled_from(IDS), st.integers(0, 3)),
    st.tuples(st.just("alter"), st.sampled_from(IDS), st.booleans()),
    st.tuples(st.just("kill"), st.sampled_from(IDS)),
    st.tuples(st.just("restart"), st.sampled_from(IDS), st.booleans(), st.integers(0, 4), st.booleans()),
    st.tuples(st.just("register_pending")),
    st.tuples(st.just("elect")), st.tuples(st.just("kill_master")), st.tuples(st.just("catch_up")),
)


# derandomize: the default suite must not pass or fail by luck (a random run once drew a master
# resuming after an unclean restart, which the model allowed and the broker refuses).
@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1, 2, 3]), st.lists(step, min_size=10, max_size=80))
def test_clean_candidates_always_hold_every_acknowledged_entry(min_isr, steps):
    m = Model(min_isr)
    elections = 0
    for s in steps:
        kind = s[0]
        if kind == "elect":
            before = m.v.master_epoch
            r = m.elect()
            if r.ok and m.v.master_epoch > before:
                elections += 1
                new = m.v.master_broker_id
                assert m.acked <= set(m.logs[new]), "a clean election lost an acknowledged entry"
        else:
            getattr(m, kind)(*s[1:])
        m.ack()          # the master acknowledges whatever it may, continuously
        m.check()
