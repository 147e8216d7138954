"""Master side of one slave connection (sans-IO).

Inputs: decoded frames from the slave, the clock, and the master's ReplicaLog (read only).
Outputs: frames to send. The asyncio adapter owns the socket; the SyncStateTracker owns the
SyncStateSet decisions and learns about acks from what `on_ack` returns.

Phases: HANDSHAKE (wait for the slave's handshake) -> WAIT_START (handshake answered; the
slave's first ack says where its log ends after truncation) -> TRANSFER -> SHUTDOWN.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoswitch.ha.codec import MIN_OFFSET_VERSION, Ack, MasterHandshake, SlaveHandshake, Transfer
from autoswitch.ha.codec_v4 import DIGEST_VERSION, DigestReport
from autoswitch.ha.config import SMALL_FRAME_BYTES, HAConfig
from autoswitch.ha.errors import HAProtocolError
from autoswitch.ha.log_api import ReplicaLog

from autoswitch.base.errors import AutoswitchError

HANDSHAKE = "HANDSHAKE"
WAIT_START = "WAIT_START"
TRANSFER = "TRANSFER"
SHUTDOWN = "SHUTDOWN"

# The slave's first ack after the handshake is 0 when its log is empty: "start me wherever you
# start" (RocketMQ's convention); a non-empty log always ends above 0.
EMPTY_SLAVE_OFFSET = 0


@dataclass(frozen=True, slots=True)
class AckResult:
    broker_id: int
    offset: int
    caught_up_at: float | None   # lastCaughtUpTime to record, or None when this ack is behind
    first: bool                  # the post-handshake ack that fixed the transfer start


class MasterSession:
    def __init__(self, log: ReplicaLog, config: HAConfig, master_broker_id: int, now: float) -> None:
        self.log = log
        self.config = config
        self.master_broker_id = master_broker_id
        self.phase = HANDSHAKE
        self.created_at = now
        self.slave_id: int | None = None
        self.async_learner = False
        self.sync_from_last_file = False
        self.next_offset: int | None = None      # next byte to send (nextTransferFromWhere)
        self.ack_offset = -1
        self.last_send_time = now
        self.master_max_at_last_send: int | None = None
        self.last_caught_up_time: float | None = None
        self.bytes_sent = 0
        self.held_until: float | None = None    # a small tail waits for an ack until then (_holds)
        self._sent_end: int | None = None       # end of the last data frame sent (_holds)
        self.version = 0
        self.digest_seq = 0          # the last RangeBook sequence number sent on this connection
        self._start_checked = False

    # ------------------------------------------------------------------ inputs

    def on_handshake(self, f: SlaveHandshake, now: float) -> MasterHandshake:
        if self.phase != HANDSHAKE:
            raise HAProtocolError("unexpected_handshake", f"handshake in phase {self.phase}")
        if f.broker_id == self.master_broker_id:
            raise HAProtocolError("self_connection", f"slave claims the master's brokerId {f.broker_id}")
        self.slave_id = f.broker_id
        self.version = f.version
        self.async_learner = f.async_learner
        self.sync_from_last_file = f.sync_from_last_file
        entries = tuple((e.epoch, e.start_offset) for e in self.log.epochs.entries())
        if len(entries) > self.config.max_epoch_entries:
            raise HAProtocolError("too_many_epoch_entries", f"{len(entries)} epoch entries")
        self.phase = WAIT_START
        last_epoch = entries[-1][0] if entries else 0
        # version 2 slaves also learn where our retained log starts (codec.MIN_OFFSET_VERSION)
        min_off = self.log.min_offset if f.version >= MIN_OFFSET_VERSION else None
        return MasterHandshake(self.log.max_offset, last_epoch, entries, min_off)

    def on_ack(self, f: Ack, now: float) -> AckResult:
        off = f.slave_max_offset
        if self.phase == HANDSHAKE:
            raise HAProtocolError("ack_before_handshake", "ack before the slave's handshake")
        if self.phase == SHUTDOWN:
            raise HAProtocolError("session_closed", "ack on a closed session")
        log_max = self.log.max_offset
        if self.phase == WAIT_START:
            start = self._choose_start(off, log_max)
            self.next_offset = start
            self.ack_offset = off
            self.phase = TRANSFER
            assert self.slave_id is not None
            return AckResult(self.slave_id, off, None, True)
        assert self.next_offset is not None and self.slave_id is not None
        if off < self.ack_offset:
            raise HAProtocolError("ack_backwards", f"ack {off} < previous ack {self.ack_offset}")
        if off > log_max:
            raise HAProtocolError("ack_beyond_master_max", f"ack {off} > master max {log_max}")
        if off > self.next_offset:
            raise HAProtocolError("ack_beyond_sent", f"ack {off} > sent up to {self.next_offset}")
        self.ack_offset = off
        caught = None
        if self.master_max_at_last_send is not None and off >= self.master_max_at_last_send:
            # RocketMQ records the send time, not the ack time: the slave had everything the
            # master had *then*.
            caught = self.last_send_time
            self.last_caught_up_time = caught
        return AckResult(self.slave_id, off, caught, False)

    @property
    def speaks_digests(self) -> bool:
        return self.version >= DIGEST_VERSION and self.config.digests

    def on_report(self, f: DigestReport) -> DigestReport:
        """A slave's verification verdict; checked against what this connection can know."""
        if self.phase != TRANSFER:
            raise HAProtocolError("report_before_transfer", f"digest report in phase {self.phase}")
        if self.version < DIGEST_VERSION:
            raise HAProtocolError("unexpected_frame", f"digest report from a version {self.version} slave")
        if f.end > self.log.max_offset:
            raise HAProtocolError("report_beyond_master_max", f"report up to {f.end} > master max {self.log.max_offset}")
        return f

    def _choose_start(self, off: int, log_max: int) -> int:
        log = self.log
        if off == EMPTY_SLAVE_OFFSET:
            base = getattr(log, "segment_base", None)   # a store without it falls back to min_offset
            if self.sync_from_last_file and base is not None:
                start = int(base(log_max))
            else:
                start = log.min_offset
            assert log.min_offset <= start <= log_max, (start, log.min_offset, log_max)
            return start
        if off > log_max:
            raise HAProtocolError("ack_beyond_master_max", f"slave starts at {off} > master max {log_max}")
        if off < log.min_offset:
            # The bytes the slave needs next are gone from the master (retention). Resetting the
            # slave is an operator decision: it drops data the slave may be the last to hold.
            raise HAProtocolError("slave_behind_retention",
                                  f"slave ends at {off}, master keeps from {log.min_offset}")
        return off

    def close(self) -> None:
        self.phase = SHUTDOWN

    # ------------------------------------------------------------------ outputs

    def poll_transfer(self, now: float, confirm_offset: int) -> Transfer | None:
        """The next frame to send: a data batch, a heartbeat when idle, or None."""
        self.held_until = None          # set again below only if this poll holds the tail
        if self.phase != TRANSFER:
            return None
        assert self.next_offset is not None
        log = self.log
        log_max = log.max_offset
        nxt = self.next_offset
        confirm = min(confirm_offset, log_max)
        if nxt < log_max and self._holds(now, log_max - nxt):
            return None
        if nxt < log_max:
            epochs = log.epochs
            entry = epochs.find_by_offset(nxt, log_max)
            if entry is None:
                raise HAProtocolError("no_epoch_for_offset", f"master log has no epoch for offset {nxt}")
            # Never cross an epoch boundary: the slave records a new epoch from the header alone.
            limit = epochs.end_offset(entry.epoch, log_max)
            assert limit > nxt, (limit, nxt, entry)
            try:
                data = log.read_raw(nxt, self.config.transfer_batch_size, limit)
            except AutoswitchError as e:
                if self._start_checked:
                    raise           # our own position: real corruption, reported as such
                # The slave chose this start; a start inside a record is its error, not the log's.
                raise HAProtocolError("bad_start_offset",
                                      f"slave start {nxt} is not a readable record boundary: {e.message}") from e
            self._start_checked = True
            if not data:
                # A record larger than the batch size: one record per frame, up to the body limit.
                data = log.read_raw(nxt, self.config.max_body_size, limit)
                if not data:
                    raise HAProtocolError("record_too_large", f"no whole record at {nxt} within the body limit")
            assert nxt + len(data) <= limit and len(data) <= self.config.max_body_size
            frame = Transfer(nxt, entry.epoch, entry.start_offset, confirm, data)
            self.next_offset = self._sent_end = nxt + len(data)
            self.bytes_sent += len(data)
        elif now - self.last_send_time >= self.config.heartbeat_interval_s:
            last = log.epochs.last()
            epoch, start = (last.epoch, last.start_offset) if last is not None else (0, 0)
            frame = Transfer(nxt, epoch, start, confirm, b"")
        else:
            return None
        self.master_max_at_last_send = log_max
        self.last_send_time = now
        return frame

    def _holds(self, now: float, pending: int) -> bool:
        """Ack clocking: a small tail waits while the last frame is unacknowledged, until its ack or
        ``transfer_hold_s`` after that send. One producer never waits (its next write follows the
        ack); many concurrent one-message writes then share a frame instead of a frame, a send and
        an ack each per slave (bench/results/produce.md). ``held_until`` says until when."""
        hold, sent = self.config.transfer_hold_s, self._sent_end
        until = self.last_send_time + hold
        if hold <= 0 or pending >= SMALL_FRAME_BYTES or sent is None or self.ack_offset >= sent or now >= until:
            return False
        self.held_until = until
        return True

    def wants_wake(self) -> bool:
        """Whether an append must wake the transfer loop. Not while a small tail is held for an
        ack: the ack or the hold's end wakes it, and until then every poll would hold again (one
        wake, poll and timer per appended write and slave, for nothing)."""
        nxt = self.next_offset
        return self.held_until is None or nxt is None or self.log.max_offset - nxt >= SMALL_FRAME_BYTES

    def has_pending(self) -> bool:
        return self.phase == TRANSFER and self.next_offset is not None and self.next_offset < self.log.max_offset

    def info(self) -> dict[str, object]:
        return {
            "brokerId": self.slave_id,
            "phase": self.phase,
            "asyncLearner": self.async_learner,
            "ackOffset": self.ack_offset,
            "nextOffset": self.next_offset,
            "lastCaughtUpTime": self.last_caught_up_time,
            "bytesSent": self.bytes_sent,
        }
