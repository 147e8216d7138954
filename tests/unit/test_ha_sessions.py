"""Sans-IO master/slave sessions, driven through the real codec with in-memory logs."""

from __future__ import annotations

import dataclasses

import pytest
from autoswitch.epochfile import EpochCache, EpochEntry
from autoswitch.ha.codec import Ack, MasterSideDecoder, SlaveSideDecoder, Transfer, encode
from autoswitch.ha.config import HAConfig
from autoswitch.ha.errors import HAProtocolError, OffsetMismatch
from autoswitch.ha.master_session import MasterSession
from autoswitch.ha.slave_session import SlaveSession

from tests.unit.test_ha_memlog import MemLog, record


def _log_with(epochs: list[tuple[int, int]], end: int, rec: int = 100) -> MemLog:
    """A log whose epochs start where given; filled with `rec`-byte records up to `end`."""
    log = MemLog()
    bounds = [s for _, s in epochs] + [end]
    for i, (e, s) in enumerate(epochs):
        log.append_epoch(e, s)
        while log.max_offset < bounds[i + 1]:
            n = min(rec, bounds[i + 1] - log.max_offset)
            assert n >= 4, "epoch lengths must fit whole records"
            log.append([bytes([e]) * (n - 4)])
    assert log.max_offset == end
    return log


class Pair:
    """Master session + slave session joined by encoded bytes (both codecs in the loop)."""

    def __init__(self, mlog: MemLog, slog: MemLog, config: HAConfig | None = None, **slave_kw) -> None:
        self.cfg = (config or HAConfig(transfer_batch_size=256, heartbeat_interval_s=1.0)).validate()
        self.now = 0.0
        self.mlog, self.slog = mlog, slog
        self.m = MasterSession(mlog, self.cfg, master_broker_id=1, now=self.now)
        self.s = SlaveSession(slog, broker_id=2, **slave_kw)
        self.mdec = MasterSideDecoder()
        self.sdec = SlaveSideDecoder(self.cfg.max_body_size, self.cfg.max_epoch_entries)
        self.acks = []
        self.sent: list[Transfer] = []
        self.confirm = 0

    def to_master(self, frame) -> None:
        self.mdec.feed(encode(frame))
        for f in self.mdec.frames():
            if isinstance(f, Ack):
                self.acks.append(self.m.on_ack(f, self.now))
            else:
                self.to_slave(self.m.on_handshake(f, self.now))

    def to_slave(self, frame) -> None:
        self.sdec.feed(encode(frame))
        for f in self.sdec.frames():
            ack = self.s.on_frame(f)
            if ack is not None:
                self.to_master(ack)

    def handshake(self) -> None:
        self.to_master(self.s.start())

    def pump(self, max_frames: int = 10_000) -> int:
        n = 0
        while (f := self.m.poll_transfer(self.now, self.confirm)) is not None:
            self.sent.append(f)
            self.to_slave(f)
            n += 1
            assert n < max_frames
        return n


# ------------------------------------------------------------------ handshake truncation

def test_worked_example_truncates_to_450():
    slog = _log_with([(1, 100), (2, 300), (3, 500)], 700, rec=50)
    mlog = _log_with([(1, 100), (2, 300), (3, 450)], 900, rec=50)
    p = Pair(mlog, slog)
    p.handshake()
    assert p.s.truncated_to == 450
    assert slog.max_offset == 450
    # Entries starting after the cut are gone; epoch 3 started at 500 locally, so it is dropped.
    assert [e.epoch for e in slog.epochs.entries()] == [1, 2]
    p.pump()
    assert slog.bytes() == mlog.bytes()
    assert slog.epochs == mlog.epochs


def test_worked_example_no_common_point_is_an_error_and_nothing_is_cut():
    slog = _log_with([(1, 100), (2, 300), (3, 500)], 700)
    mlog = _log_with([(1, 200), (2, 500)], 900)
    before = slog.bytes()
    p = Pair(mlog, slog)
    with pytest.raises(HAProtocolError) as ei:
        p.handshake()
    assert ei.value.reason == "no_consistent_point"
    assert slog.bytes() == before and slog.max_offset == 700


def test_slave_ahead_in_same_epoch_is_cut_to_master_max():
    mlog = _log_with([(1, 0)], 500)
    slog = _log_with([(1, 0)], 800)
    assert slog.bytes()[:500] == mlog.bytes()
    p = Pair(mlog, slog)
    p.handshake()
    assert slog.max_offset == 500 and slog.bytes() == mlog.bytes()


def test_empty_slave_starts_at_master_min_offset_and_copies_epochs():
    mlog = _log_with([(1, 0), (2, 300), (3, 300), (4, 600)], 1000)   # epoch 2 wrote nothing
    slog = MemLog()
    p = Pair(mlog, slog)
    p.handshake()
    p.pump()
    assert slog.bytes() == mlog.bytes()
    assert slog.epochs == mlog.epochs, "a zero-message epoch must be replicated too"


def test_sync_from_last_file_starts_at_the_last_segment_base():
    mlog = _log_with([(1, 0), (2, 1200)], 2500)
    mlog.segment_size = 1000
    slog = MemLog()
    p = Pair(mlog, slog, sync_from_last_file=True)
    p.handshake()
    p.pump()
    base = mlog.segment_base(2500)
    assert 2000 <= base < 2500
    assert slog.min_offset == base and slog.max_offset == 2500
    assert slog.bytes() == mlog.bytes()[base:]
    assert p.sent[0].batch_start_offset == base


def _trim(log: MemLog, offset: int) -> None:
    """The master's retention: everything below ``offset`` (a record boundary) goes."""
    log._data = log._data[offset - log._start:]
    log._start = offset
    log._bounds = [b for b in log._bounds if b >= offset]
    log.epochs.truncate_prefix(offset)


def test_slave_behind_master_retention_resyncs_from_the_master_first_offset():
    """Issue 30 item 6: the slave's end is below what the master's retention kept. A version 1
    handshake cannot say so (refused for ever); a version 2 one carries masterMinOffset and the
    slave starts again there, as a new replica does."""
    mlog = _log_with([(1, 0)], 1000)
    _trim(mlog, 500)
    old = Pair(mlog, _log_with([(1, 0)], 300))
    with pytest.raises(HAProtocolError) as ei:
        old.to_master(dataclasses.replace(old.s.start(), version=1))      # a version 1 slave
    assert ei.value.reason in ("slave_behind_retention", "no_consistent_point")
    slog = _log_with([(1, 0)], 300)
    p = Pair(mlog, slog)
    p.handshake()
    assert p.s.resynced_from == 500 and slog.min_offset == slog.max_offset == 500
    p.pump()
    assert slog.bytes() == mlog.bytes() and slog.epochs == mlog.epochs


def test_a_slave_whose_only_common_epoch_was_trimmed_resyncs():
    """The master trimmed every byte of epoch 1, the only epoch the slave has: no consistent point
    can exist. With masterMinOffset the slave sees its whole log is older than the master's
    retained history and starts again at the master's first offset."""
    mlog = _log_with([(1, 0), (2, 400), (3, 700)], 1000)
    _trim(mlog, 500)
    assert [e.epoch for e in mlog.epochs.entries()] == [2, 3] and mlog.epochs.entries()[0].start_offset == 500
    slog = _log_with([(1, 0)], 300)
    p = Pair(mlog, slog)
    p.handshake()
    assert p.s.resynced_from == 500
    p.pump()
    assert slog.bytes() == mlog.bytes() and slog.epochs == mlog.epochs


def test_an_epoch_whose_start_the_master_trimmed_is_still_a_common_epoch():
    """The master's retention moved its first epoch's start to its first offset (500); ours starts
    at 400. Compared as a log starting at 500 sees them, the epochs agree and the slave keeps all
    it has (before: no consistent point, for ever)."""
    mlog = _log_with([(1, 0), (2, 400), (3, 700)], 1000)
    _trim(mlog, 500)
    slog = _log_with([(1, 0), (2, 400)], 600)
    p = Pair(mlog, slog)
    p.handshake()
    assert p.s.resynced_from is None and p.s.truncated_to == 600 and slog.min_offset == 0
    p.pump()
    assert slog.max_offset == mlog.max_offset and slog.bytes()[500:] == mlog.bytes()


def test_no_common_epoch_without_trimming_is_still_an_error():
    """A master whose history starts at offset 0 with a later epoch than all of ours (the worked
    example's divergence) is not a trimmed one: nothing is guessed, nothing is cut."""
    slog = _log_with([(1, 0)], 300)
    mlog = _log_with([(2, 0)], 900)
    before = slog.bytes()
    p = Pair(mlog, slog)
    with pytest.raises(HAProtocolError) as ei:
        p.handshake()
    assert ei.value.reason == "no_consistent_point" and slog.bytes() == before


# ------------------------------------------------------------------ batching

def test_batches_never_cross_an_epoch_boundary_and_are_bounded():
    mlog = _log_with([(1, 0), (2, 350), (3, 350), (5, 900)], 2000, rec=50)
    slog = MemLog()
    p = Pair(mlog, slog)
    p.handshake()
    p.pump()
    data = [f for f in p.sent if f.body]
    for f in data:
        entry = mlog.epochs.find_by_offset(f.batch_start_offset, mlog.max_offset)
        end = mlog.epochs.end_offset(entry.epoch, mlog.max_offset)
        assert (f.epoch, f.epoch_start_offset) == (entry.epoch, entry.start_offset)
        assert f.batch_start_offset + len(f.body) <= end
        assert len(f.body) <= p.cfg.transfer_batch_size
    assert {f.epoch for f in data} == {1, 3, 5}
    assert any(f.batch_start_offset + len(f.body) == 350 for f in data)
    assert slog.epochs == mlog.epochs and slog.bytes() == mlog.bytes()


def test_record_larger_than_batch_goes_alone():
    mlog = MemLog()
    mlog.append_epoch(1, 0)
    mlog.append([b"x" * 1000, b"y" * 10])
    p = Pair(mlog, MemLog())
    p.handshake()
    p.pump()
    # The fallback read is bounded by the body limit, not the batch size.
    assert [len(f.body) for f in p.sent] == [1018]
    assert p.s.log.bytes() == mlog.bytes()


def test_heartbeats_only_when_idle_and_carry_the_new_epoch():
    mlog = _log_with([(1, 0)], 500)
    slog = MemLog()
    p = Pair(mlog, slog)
    p.handshake()
    p.pump()
    assert p.pump() == 0                       # nothing new, interval not elapsed
    mlog.append_epoch(2, 500)                  # same master, new epoch, no message yet
    p.now += 1.0
    assert p.pump() == 1
    hb = p.sent[-1]
    assert hb.is_heartbeat and (hb.epoch, hb.epoch_start_offset, hb.batch_start_offset) == (2, 500, 500)
    assert slog.epochs.last() == EpochEntry(2, 500)
    assert p.acks[-1].offset == 500 and p.acks[-1].caught_up_at == 1.0


def test_confirm_offset_reaches_the_slave_but_never_past_its_log():
    mlog = _log_with([(1, 0)], 500)
    slog = MemLog()
    p = Pair(mlog, slog)
    p.confirm = 400
    p.handshake()
    p.pump()
    assert slog.confirm_offset == 400 and p.s.confirm_offset == 400


# ------------------------------------------------------------------ slave checks

def _slave_in_transfer(slog: MemLog, master_entries, master_max):
    mlog = MemLog()
    for e, s in master_entries:
        mlog._epochs.append(e, s)
    s = SlaveSession(slog, broker_id=2)
    s.start()
    from autoswitch.ha.codec import MasterHandshake

    s.on_frame(MasterHandshake(master_max, master_entries[-1][0], tuple(master_entries)))
    return s


def test_offset_mismatch_means_reconnect_and_nothing_is_written():
    slog = _log_with([(1, 0)], 300)
    s = _slave_in_transfer(slog, [(1, 0)], 1000)
    with pytest.raises(OffsetMismatch):
        s.on_frame(Transfer(400, 1, 0, 0, record(b"z" * 10)))
    assert slog.max_offset == 300
    # The reconnect's fresh handshake continues from the local end.
    s2 = SlaveSession(slog, broker_id=2)
    s2.start()
    from autoswitch.ha.codec import MasterHandshake

    assert s2.on_frame(MasterHandshake(1000, 1, ((1, 0),))) == Ack(300)


def test_epoch_going_backwards_is_an_error():
    slog = _log_with([(1, 0), (3, 100)], 300)
    s = _slave_in_transfer(slog, [(1, 0), (3, 100)], 1000)
    with pytest.raises(HAProtocolError) as ei:
        s.on_frame(Transfer(300, 1, 0, 0, record(b"a")))
    assert ei.value.reason == "epoch_backwards"
    assert slog.max_offset == 300


def test_epoch_start_mismatch_and_unknown_epoch_are_errors():
    slog = _log_with([(1, 0)], 300)
    s = _slave_in_transfer(slog, [(1, 0), (2, 300)], 1000)
    with pytest.raises(HAProtocolError) as ei:
        s.on_frame(Transfer(300, 1, 5, 0, record(b"a")))
    assert ei.value.reason == "epoch_start_mismatch"
    s = _slave_in_transfer(slog, [(1, 0), (2, 300)], 1000)
    with pytest.raises(HAProtocolError) as ei:
        s.on_frame(Transfer(300, 2, 200, 0, record(b"a")))
    assert ei.value.reason == "epoch_start_mismatch"
    assert slog.epochs.last() == EpochEntry(1, 0) and slog.max_offset == 300


def test_new_epoch_recorded_before_bytes_even_if_append_fails():
    slog = _log_with([(1, 0)], 300)
    s = _slave_in_transfer(slog, [(1, 0), (2, 300)], 1000)
    from autoswitch.base.errors import CorruptionError

    with pytest.raises(CorruptionError):
        s.on_frame(Transfer(300, 2, 300, 0, b"\x00\x00\x00\xffshort"))
    assert slog.epochs.last() == EpochEntry(2, 300)
    assert slog.max_offset == 300


def test_transfer_before_handshake_is_an_error():
    s = SlaveSession(MemLog(), broker_id=2)
    s.start()
    with pytest.raises(HAProtocolError):
        s.on_frame(Transfer(0, 1, 0, 0))


# ------------------------------------------------------------------ master checks

def test_master_rejects_acks_backwards_beyond_max_and_before_handshake():
    mlog = _log_with([(1, 0)], 500)
    p = Pair(mlog, MemLog())
    with pytest.raises(HAProtocolError) as ei:
        p.m.on_ack(Ack(0), 0.0)
    assert ei.value.reason == "ack_before_handshake"
    p.handshake()
    p.pump()
    assert p.m.ack_offset == 500
    with pytest.raises(HAProtocolError) as ei:
        p.m.on_ack(Ack(400), 0.0)
    assert ei.value.reason == "ack_backwards"
    with pytest.raises(HAProtocolError) as ei:
        p.m.on_ack(Ack(501), 0.0)
    assert ei.value.reason == "ack_beyond_master_max"


def test_master_rejects_second_handshake_and_self_connection():
    from autoswitch.ha.codec import SlaveHandshake

    m = MasterSession(_log_with([(1, 0)], 100), HAConfig(), master_broker_id=1, now=0)
    with pytest.raises(HAProtocolError) as ei:
        m.on_handshake(SlaveHandshake(1), 0)
    assert ei.value.reason == "self_connection"
    m.on_handshake(SlaveHandshake(2), 0)
    with pytest.raises(HAProtocolError) as ei:
        m.on_handshake(SlaveHandshake(2), 0)
    assert ei.value.reason == "unexpected_handshake"


def test_caught_up_time_is_the_send_time_of_the_master_max_the_slave_reached():
    mlog = _log_with([(1, 0)], 500)
    p = Pair(mlog, MemLog())
    p.handshake()
    p.now = 5.0
    p.pump()
    assert p.acks[-1].caught_up_at == 5.0
    mlog.append([b"q" * 96])
    p.now = 6.0
    # Master sends the new record; suppose another write lands before the ack.
    f = p.m.poll_transfer(p.now, 0)
    mlog.append([b"r" * 96])
    p.to_slave(f)
    assert p.acks[-1].offset == 600 and p.acks[-1].caught_up_at == 6.0
    p.now = 7.0
    p.pump()
    assert p.acks[-1].offset == 700 and p.acks[-1].caught_up_at == 7.0


def test_cache_helper_matches():
    # Guard for the helper above: epochs really start where asked.
    log = _log_with([(1, 0), (4, 200)], 400)
    assert log.epochs == EpochCache([EpochEntry(1, 0), EpochEntry(4, 200)])


# ------------------------------------------------------------------ issue 30: whom to follow, when whole

def test_master_stating_another_epoch_is_refused_before_anything_is_cut():
    """The slave follows the master the controller named at that MasterEpoch: a process at the
    HA address stating another epoch (a stale master, or one not switched yet) cannot make it
    truncate."""
    slog = _log_with([(1, 100), (2, 300), (3, 500)], 700, rec=50)
    mlog = _log_with([(1, 100), (2, 300), (3, 450)], 900, rec=50)
    before = slog.bytes()
    p = Pair(mlog, slog, expect_epoch=4)
    with pytest.raises(HAProtocolError) as ei:
        p.handshake()
    assert ei.value.reason == "master_epoch_mismatch"
    assert slog.bytes() == before and slog.max_offset == 700
    p = Pair(mlog, slog, expect_epoch=3)       # the named epoch: followed as before
    p.handshake()
    assert p.s.truncated_to == 450


def test_caught_up_only_once_the_log_reaches_a_confirm_offset_the_master_sent():
    mlog = _log_with([(1, 0)], 500)
    slog = MemLog()
    p = Pair(mlog, slog, config=HAConfig(transfer_batch_size=128, heartbeat_interval_s=1.0))
    p.confirm = 500
    p.handshake()
    assert not p.s.caught_up
    p.to_slave(p.m.poll_transfer(p.now, p.confirm))   # one batch: the log is below 500
    assert 0 < slog.max_offset < 500 and not p.s.caught_up
    p.pump()
    assert slog.max_offset == 500 and p.s.caught_up


# ------------------------------------------------------------------ ack clocking (transfer_hold_s)

def _held_pair(hold_s: float) -> Pair:
    """Slave caught up to the master; frames to the slave are delivered only when the test says."""
    cfg = HAConfig(transfer_batch_size=4096, heartbeat_interval_s=1.0, transfer_hold_s=hold_s)
    p = Pair(_log_with([(1, 0)], 300), _log_with([(1, 0)], 300), config=cfg)
    p.handshake()
    assert p.m.poll_transfer(p.now, 0) is None      # nothing to send
    return p


def test_a_small_tail_waits_for_the_ack_of_the_frame_in_flight_and_then_travels_in_one_frame():
    p = _held_pair(0.002)
    p.mlog.append([b"a" * 96])
    first = p.m.poll_transfer(p.now, 0)
    assert first is not None and len(first.body) == 100       # nothing in flight: sent at once
    for _ in range(3):                                          # concurrent writes meanwhile
        p.mlog.append([b"b" * 96])
    p.now += 0.001
    assert p.m.poll_transfer(p.now, 0) is None                  # held: the first is not acked
    assert p.m.held_until == pytest.approx(0.002)
    p.to_slave(first)                                           # its ack arrives
    assert p.acks[-1].offset == 400
    second = p.m.poll_transfer(p.now, 0)
    assert second is not None and (second.batch_start_offset, len(second.body)) == (400, 300)
    assert p.m.held_until is None
    p.to_slave(second)
    assert p.slog.bytes() == p.mlog.bytes()


def test_appends_to_a_held_tail_do_not_wake_the_transfer_loop_until_it_is_bulk():
    """HAMaster.notify_appended asks wants_wake: a held tail is woken by its ack or the hold's
    end, not by every append (each woken poll would only hold again)."""
    from autoswitch.ha.config import SMALL_FRAME_BYTES

    p = _held_pair(0.002)
    assert p.m.wants_wake()                   # nothing held: every append wakes
    p.mlog.append([b"a" * 96])
    first = p.m.poll_transfer(p.now, 0)
    assert first is not None and p.m.wants_wake()   # in flight, nothing held yet
    p.mlog.append([b"b" * 96])
    assert p.m.poll_transfer(p.now, 0) is None and p.m.held_until is not None
    for _ in range(3):
        p.mlog.append([b"c" * 96])
        assert not p.m.wants_wake()           # the ack will wake it
    while p.mlog.max_offset - p.m.next_offset < SMALL_FRAME_BYTES:
        assert not p.m.wants_wake()
        p.mlog.append([b"d" * 96])
    assert p.m.wants_wake()                   # bulk now: it goes without the ack
    assert p.m.poll_transfer(p.now, 0) is not None and p.m.held_until is None
    assert p.m.wants_wake()


def test_a_held_tail_goes_out_when_the_hold_runs_out_or_is_large_or_holding_is_off():
    p = _held_pair(0.002)
    p.mlog.append([b"a" * 96])
    assert p.m.poll_transfer(p.now, 0) is not None
    p.mlog.append([b"b" * 96])
    p.now = 0.0019
    assert p.m.poll_transfer(p.now, 0) is None
    p.now = 0.002                                              # no ack within the hold: sent anyway
    assert p.m.poll_transfer(p.now, 0) is not None
    assert p.m.held_until is None
    assert p.m.poll_transfer(p.now, 0) is None and p.m.held_until is None   # nothing pending: no hold
    # a tail of SMALL_FRAME_BYTES or more is bulk: never held
    from autoswitch.ha.config import SMALL_FRAME_BYTES

    for _ in range(SMALL_FRAME_BYTES // 100 + 1):
        p.mlog.append([b"c" * 96])
    assert p.m.poll_transfer(p.now, 0) is not None
    off = _held_pair(0.0)
    off.mlog.append([b"a" * 96])
    assert off.m.poll_transfer(off.now, 0) is not None
    off.mlog.append([b"b" * 96])
    assert off.m.poll_transfer(off.now, 0) is not None           # 0: every append at once
