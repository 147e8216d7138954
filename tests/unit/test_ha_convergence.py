"""Property: whatever the sequence of writes, cut connections and role switches, once every
slave has completed one full connection to the final master, all logs and EpochFiles equal the
master's. Driven through the real codec and sessions (sans-IO), in-memory logs."""

from __future__ import annotations

from autoswitch.ha.codec import Ack, MasterSideDecoder, SlaveSideDecoder, encode
from autoswitch.ha.config import HAConfig
from autoswitch.ha.errors import OffsetMismatch
from autoswitch.ha.master_session import MasterSession
from autoswitch.ha.slave_session import SlaveSession
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.test_ha_memlog import MemLog

CFG = HAConfig(transfer_batch_size=200, heartbeat_interval_s=1.0).validate()


def connect(master: MemLog, master_id: int, slave: MemLog, slave_id: int, max_frames: int | None) -> None:
    """One connection: handshake, then up to max_frames transfer frames (None: until caught up)."""
    now = 0.0
    m = MasterSession(master, CFG, master_id, now)
    s = SlaveSession(slave, slave_id)
    mdec, sdec = MasterSideDecoder(), SlaveSideDecoder()

    def to_master(frame) -> None:
        mdec.feed(encode(frame))
        for f in mdec.frames():
            if isinstance(f, Ack):
                m.on_ack(f, now)
            else:
                to_slave(m.on_handshake(f, now))

    def to_slave(frame) -> None:
        sdec.feed(encode(frame))
        for f in sdec.frames():
            ack = s.on_frame(f)
            if ack is not None:
                to_master(ack)

    to_master(s.start())
    sent = 0
    while max_frames is None or sent < max_frames:
        now += 1.0                       # lets a heartbeat carry a zero-message epoch
        f = m.poll_transfer(now, 0)
        if f is None:
            break
        to_slave(f)
        sent += 1
        if f.is_heartbeat:
            break


ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(1, 6), st.integers(1, 120)),
    st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 4)),
    st.tuples(st.just("elect"), st.integers(0, 2), st.booleans()),
), max_size=25)


@settings(max_examples=120, deadline=None)
@given(ops)
def test_logs_and_epoch_files_converge(steps):
    logs = [MemLog() for _ in range(3)]
    master, epoch = 0, 1
    logs[0].append_epoch(1, 0)
    for step in steps:
        kind = step[0]
        if kind == "write":
            _, n, size = step
            logs[master].append([bytes([epoch]) * size] * n)
        elif kind == "sync":
            _, who, frames = step
            if who != master:
                try:
                    connect(logs[master], master + 1, logs[who], who + 1, frames or None)
                except OffsetMismatch:
                    raise AssertionError("a fresh connection never mismatches") from None
        else:
            _, who, write_nothing = step
            # Only replicas that share the group's history are electable (the controller elects
            # from the SyncStateSet); an empty replica has nothing in common with the others.
            if len(logs[who].epochs) == 0:
                continue
            epoch += 1
            master = who
            logs[master].append_epoch(epoch, logs[master].max_offset)
            if not write_nothing:
                logs[master].append([bytes([epoch]) * 30])
    for who in range(3):
        if who != master:
            connect(logs[master], master + 1, logs[who], who + 1, None)
    for who in range(3):
        assert logs[who].bytes() == logs[master].bytes(), who
        assert logs[who].epochs == logs[master].epochs, (who, logs[who].epochs, logs[master].epochs)
