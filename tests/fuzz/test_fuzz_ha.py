"""Fuzz the HA decoders and sessions: arbitrary bytes give frames or a typed error, never
another exception; the committed seed corpus (tests/fuzz/corpus/ha/) is replayed."""

from __future__ import annotations

from pathlib import Path

import pytest
from autoswitch.ha.codec import MasterSideDecoder, SlaveSideDecoder, encode
from autoswitch.ha.config import HAConfig
from autoswitch.ha.errors import FrameError
from autoswitch.ha.master_session import MasterSession
from autoswitch.ha.slave_session import SlaveSession
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoswitch.base.errors import AutoswitchError
from tests.unit.test_ha_memlog import MemLog

CORPUS = Path(__file__).parent / "corpus" / "ha"


def drive_master_side(data: bytes, cut: int = 0) -> None:
    """Decoder + master session on arbitrary bytes from a 'slave'."""
    log = MemLog()
    log.append_epoch(1, 0)
    log.append([b"x" * 40] * 5)
    sess = MasterSession(log, HAConfig(transfer_batch_size=64), master_broker_id=1, now=0.0)
    dec = MasterSideDecoder()
    try:
        for part in (data[:cut], data[cut:]):
            dec.feed(part)
            for f in dec.frames():
                if hasattr(f, "broker_id"):
                    encode(sess.on_handshake(f, 0.0))
                else:
                    sess.on_ack(f, 0.0)
                while (t := sess.poll_transfer(1.0, 0)) is not None and not t.is_heartbeat:
                    encode(t)
    except AutoswitchError:
        pass
    assert log.max_offset == 5 * 44, "the master's log is never touched by slave input"


def drive_slave_side(data: bytes, cut: int = 0) -> None:
    """Decoder + slave session (which truncates/appends its log) on arbitrary 'master' bytes."""
    log = MemLog()
    log.append_epoch(1, 0)
    log.append([b"y" * 20] * 3)
    sess = SlaveSession(log, broker_id=2)
    sess.start()
    dec = SlaveSideDecoder(max_body_size=4096, max_epoch_entries=64)
    try:
        for part in (data[:cut], data[cut:]):
            dec.feed(part)
            for f in dec.frames():
                ack = sess.on_frame(f)
                if ack is not None:
                    encode(ack)
    except AutoswitchError:
        pass
    # Whatever happened, the log is a sequence of whole records with a valid EpochFile.
    assert log.max_offset >= log.min_offset
    entries = log.epochs.entries()
    assert all(a.epoch < b.epoch and a.start_offset <= b.start_offset for a, b in zip(entries, entries[1:], strict=False))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(0, 300))
def test_master_side_arbitrary_bytes(data, cut):
    drive_master_side(data, min(cut, len(data)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), st.integers(0, 300))
def test_slave_side_arbitrary_bytes(data, cut):
    drive_slave_side(data, min(cut, len(data)))


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=64))
def test_decoders_raise_only_frame_errors(data):
    for dec in (MasterSideDecoder(), SlaveSideDecoder(max_body_size=1024, max_epoch_entries=8)):
        try:
            dec.feed(data)
            dec.frames()
        except FrameError as e:
            assert e.reason and e.code == "HA_FRAME_ERROR"


def _corpus() -> list[Path]:
    return sorted(CORPUS.glob("*.bin"))


def test_corpus_is_present():
    names = {p.name.split("-")[0] for p in _corpus()}
    assert {"master", "slave"} <= names


@pytest.mark.parametrize("path", _corpus(), ids=lambda p: p.name)
def test_corpus_replay(path):
    data = path.read_bytes()
    if path.name.startswith("master-"):
        drive_master_side(data, len(data) // 2)
    else:
        drive_slave_side(data, len(data) // 2)
