"""Master self-fencing lease: majority counting, late replies, drift, and the safety inequality."""

from __future__ import annotations

import pytest
from autoswitch.broker.replicas.lease import LeaseConfig, MasterLease
from hypothesis import given, settings
from hypothesis import strategies as st

from autoswitch.base.errors import ConfigError
from autoswitch.base.quorum import majority

C3 = ("a", "b", "c")


def lease3(**kw) -> MasterLease:
    return MasterLease(C3, LeaseConfig(**{"master_lease_ms": 6000, "heartbeat_timeout_ms": 10000, **kw}))


def test_not_valid_before_any_majority():
    m = lease3()
    assert not m.valid(0.0)
    r = m.on_round_sent(0.0)
    m.on_reply("a", r, 0.01)
    assert not m.valid(0.02), "one of three controllers is not a majority"


def test_majority_grants_lease_from_send_time():
    m = lease3()
    r = m.on_round_sent(10.0)
    m.on_reply("a", r, 10.2)
    assert m.on_reply("b", r, 10.3)
    assert m.expires_at() == pytest.approx(16.0)  # from the SEND time, not the reply time
    assert m.valid(15.99) and not m.valid(16.0)


def test_late_reply_cannot_stretch_the_lease():
    m = lease3()
    r = m.on_round_sent(0.0)
    m.on_reply("a", r, 0.1)
    m.on_reply("b", r, 5.9)  # answered very late
    assert m.expires_at() == pytest.approx(6.0)
    m2 = lease3()
    r = m2.on_round_sent(0.0)
    m2.on_reply("a", r, 7.0)
    m2.on_reply("b", r, 7.5)  # after the lease it could grant had ended
    assert not m2.valid(7.5)


def test_replies_to_different_rounds_combine_from_the_older_send():
    m = lease3()
    r1 = m.on_round_sent(0.0)
    r2 = m.on_round_sent(1.0)
    m.on_reply("a", r1, 0.1)  # a's reply to round 2 is lost
    m.on_reply("b", r2, 1.1)  # b's reply to round 1 was lost
    assert m.expires_at() == pytest.approx(6.0)


def test_lease_runs_out_when_only_a_minority_keeps_answering():
    m = lease3()
    r = m.on_round_sent(0.0)
    m.on_reply("a", r, 0.1)
    m.on_reply("b", r, 0.1)
    for t in range(1, 20):  # b and c are partitioned away; a keeps answering
        m.on_reply("a", m.on_round_sent(float(t)), t + 0.1)
    assert m.expires_at() == pytest.approx(6.0)
    assert not m.valid(6.0)


def test_reply_from_unknown_controller_or_forgotten_round_is_ignored():
    m = lease3()
    r = m.on_round_sent(0.0)
    assert not m.on_reply("zz", r, 0.1)
    for t in range(1, 100):
        m.on_round_sent(float(t))
    m.on_reply("a", r, 100.0)
    m.on_reply("b", r, 100.0)  # round r fell out of the bounded table
    assert m.expires_at() is None


def test_disabled_lease_is_always_valid():
    m = lease3(enabled=False)
    assert m.valid(0.0) and m.valid(1e9)


def test_majority_sizes():
    assert [majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    single = MasterLease(["only"], LeaseConfig())
    single.on_reply("only", single.on_round_sent(0.0), 0.5)
    assert single.valid(5.9)


@pytest.mark.parametrize(
    "lease_ms,timeout_ms,drift,safety_ms,ok",
    [
        (6000, 10000, 0.01, 2000, True),  # defaults: margin 1.94 s
        (600, 1000, 0.01, 300, True),  # fast failover profile: margin 94 ms
        (8000, 10000, 0.01, 2000, False),  # 8.08 + 2 > 10
        (700, 1000, 0.01, 300, False),
    ],
)
def test_config_inequality(lease_ms, timeout_ms, drift, safety_ms, ok):
    cfg = LeaseConfig(True, lease_ms, timeout_ms, drift, safety_ms)
    if ok:
        assert cfg.validate().margin_ms() > 0
    else:
        with pytest.raises(ConfigError):
            cfg.validate()
    LeaseConfig(False, lease_ms, timeout_ms, drift, safety_ms).validate()  # disabled: not checked


def test_heartbeat_interval_must_fit_in_the_lease():
    with pytest.raises(ConfigError):
        LeaseConfig(master_lease_ms=600, heartbeat_timeout_ms=1000, safety_ms=300).validate(heartbeat_interval_ms=600)


# The safety argument, attacked with random schedules: drops, delays, and clocks that run at
# different rates within max_clock_rate_drift. A controller calls the master dead when its OWN
# clock shows heartbeat_timeout since its last receipt; a new master needs a majority of such
# opinions. The master's lease (on its own clock) must end strictly before that moment.

@st.composite
def schedules(draw):
    n = draw(st.sampled_from([1, 3, 5]))
    rounds = draw(st.integers(1, 12))
    gaps = draw(st.lists(st.floats(0.2, 3.0), min_size=rounds, max_size=rounds))
    drift = 0.01
    # clock rates relative to real time; any two differ by at most ~drift
    broker_rate = draw(st.floats(1 - drift / 2, 1 + drift / 2))
    rates = draw(st.lists(st.floats(1 - drift / 2, 1 + drift / 2), min_size=n, max_size=n))
    fate = draw(st.lists(st.lists(st.tuples(st.booleans(), st.floats(0.0, 4.0), st.floats(0.0, 4.0)),
                                  min_size=n, max_size=n), min_size=rounds, max_size=rounds))
    return n, gaps, broker_rate, rates, fate


@settings(max_examples=100, deadline=None)
@given(schedules())
def test_lease_ends_before_a_controller_majority_can_declare_the_master_dead(sched):
    n, gaps, broker_rate, rates, fate = sched
    cfg = LeaseConfig(True, 6000, 10000, 0.01, 2000).validate()
    ctrls = [f"c{i}" for i in range(n)]
    lease = MasterLease(ctrls, cfg)
    last_recv = [0.0] * n  # real time of each controller's last receipt (registration at t=0)
    events = []  # (broker-local reply time, controller, round)
    real = 0.0
    for gap, per_ctrl in zip(gaps, fate, strict=True):
        real += gap
        rnd = lease.on_round_sent(real * broker_rate)
        for i, (delivered, delay_in, delay_out) in enumerate(per_ctrl):
            if not delivered:
                continue
            recv = real + delay_in
            last_recv[i] = max(last_recv[i], recv)
            events.append(((recv + delay_out) * broker_rate, ctrls[i], rnd))
    for local_t, c, rnd in sorted(events):
        lease.on_reply(c, rnd, local_t)
    # Real time at which controller i thinks the master is dead, on its own clock:
    dead_at = sorted(last_recv[i] + (cfg.heartbeat_timeout_ms / 1000.0) / rates[i] for i in range(n))
    majority_dead = dead_at[majority(n) - 1]
    exp = lease.expires_at()
    if exp is None:
        return  # never granted: nothing to check
    lease_end_real = exp / broker_rate
    assert lease_end_real + cfg.safety_ms / 1000.0 <= majority_dead + 1e-9


def test_a_clock_that_stood_still_voids_the_lease():
    """Issue 30: CLOCK_MONOTONIC stands still while the host is suspended; after the resume the
    lease still looked valid though real time had run past it (a successor may exist)."""
    from autoswitch.broker.replicas.lease import ClockGapDetector

    d = ClockGapDetector(0.1)
    assert d.observe(10.0, 110.0) is None                  # first reading
    assert d.observe(11.0, 111.00001) is None              # both advance alike
    assert d.observe(11.5, 141.5) == pytest.approx(30.0)   # 30 s of suspend the monotonic clock missed
    assert d.observe(12.0, 142.0) is None

    lease = MasterLease(["c1", "c2", "c3"], LeaseConfig(master_lease_ms=6000, heartbeat_timeout_ms=10000))
    r = lease.on_round_sent(0.0)
    lease.on_reply("c1", r, 0.1)
    lease.on_reply("c2", r, 0.1)
    assert lease.valid(1.0)
    lease.void()
    assert not lease.valid(1.0)
    lease.on_reply("c3", r, 1.1)                            # a reply to a round sent before the gap
    assert not lease.valid(1.2)
    r2 = lease.on_round_sent(2.0)
    lease.on_reply("c1", r2, 2.1)
    lease.on_reply("c2", r2, 2.1)
    assert lease.valid(2.2)


def test_the_adapter_fences_a_master_after_a_clock_gap(tmp_path):
    """The adapter reads both clocks whenever the write path asks may_acknowledge: a gap voids
    the lease at once, before anything is acknowledged on the stale one."""
    import asyncio

    from tests.unit.test_rm_adapter import make, wait_for

    async def main():
        boot = [1000.0]
        api, broker, a = make(tmp_path)
        a.boot_clock = lambda: boot[0] + a.clock()
        await a.start()
        await wait_for(lambda: broker.role == "master" and a.may_acknowledge(), "master with a lease")
        boot[0] += 60.0                                  # a minute of suspend the monotonic clock missed
        assert not a.may_acknowledge(), "the lease is void after the gap"
        await wait_for(a.may_acknowledge, "renewed by fresh heartbeat rounds")
        await a.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_one_controller_under_several_addresses_counts_once():
    """Issue 30: the lease counted addresses; a controller listed under three spellings of its
    address made a quorum of three alone (majority of 4 listed). Grants count per node id now."""
    lease = MasterLease(("n1-a", "n1-b", "n1-c", "n2"), LeaseConfig(master_lease_ms=6000, heartbeat_timeout_ms=10000))
    r = lease.on_round_sent(0.0)
    for addr in ("n1-a", "n1-b", "n1-c"):
        lease.on_reply(addr, r, 0.1, node_id="n1")
    assert not lease.valid(0.2), "one node answering three times is not three grants"
    lease.on_reply("n2", r, 0.1, node_id="n2")
    assert not lease.valid(0.2), "two nodes are not the 3 of 4 listed"
    old = MasterLease(("n1-a", "n1-b", "n1-c", "n2"), LeaseConfig(master_lease_ms=6000, heartbeat_timeout_ms=10000))
    r = old.on_round_sent(0.0)
    for addr in ("n1-a", "n1-b", "n1-c"):
        old.on_reply(addr, r, 0.1)                    # no node id stated: counted by address, as before
    assert old.valid(0.2)
