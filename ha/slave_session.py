"""Slave side of the connection to a master (sans-IO).

Inputs: decoded frames from the master and the slave's ReplicaLog (which it truncates and
appends to). Outputs: frames to send (handshake, acks). One session per TCP connection: any
error ends it, and the adapter reconnects with a fresh session (a fresh handshake).
"""

from __future__ import annotations

from autoswitch.epochfile import (
    EpochCache,
    EpochEntry,
    EpochRuleError,
    NoConsistentPoint,
    entries_to_record,
    find_consistent_point,
)
from autoswitch.ha.codec import (
    INCARNATION_VERSION,
    PROTOCOL_VERSION,
    Ack,
    MasterFrame,
    MasterHandshake,
    SlaveHandshake,
    Transfer,
)
from autoswitch.ha.codec_v4 import DIGEST_VERSION, DigestReport, Digests, Repair
from autoswitch.ha.digest import MISMATCH, VERIFIED, RangeChecker, RangeDigest
from autoswitch.ha.errors import HAProtocolError, OffsetMismatch
from autoswitch.ha.log_api import ReplicaLog

from autoswitch.base.errors import AutoswitchError

READY = "READY"
HANDSHAKE = "HANDSHAKE"
TRANSFER = "TRANSFER"
SHUTDOWN = "SHUTDOWN"


def _from_offset(entries: list[EpochEntry], min_offset: int) -> list[EpochEntry]:
    """The master's entries as a log starting at `min_offset` sees them (retention semantics:
    entries ending at or before it go, the one holding it starts there). A slave that started
    from the master's last file, or trimmed its own head, records its epochs this way."""
    if not entries or entries[0].start_offset >= min_offset:
        return entries
    cache = EpochCache(entries)
    cache.truncate_prefix(min_offset)
    return cache.entries()


class SlaveSession:
    def __init__(self, log: ReplicaLog, broker_id: int, async_learner: bool = False,
                 sync_from_last_file: bool = False, expect_epoch: int = 0, incarnation: str = "",
                 version: int = PROTOCOL_VERSION, digest_keep: int = 64) -> None:
        """``incarnation``: this broker process as the controllers registered it (handshake
        version 3); ``version``: the protocol version stated (lower while masters of an older
        release remain). ``expect_epoch``: the MasterEpoch the controller named for the master we dial (0: no
        controller, static mode). A master whose handshake states another epoch is refused
        before its epoch entries can truncate anything: a stale process at that address, or a
        master not yet switched, is never followed."""
        if broker_id <= 0:
            raise ValueError("brokerId starts at 1")
        self.log = log
        self.broker_id = broker_id
        self.expect_epoch = expect_epoch
        self.version = version
        self.incarnation = incarnation if version >= INCARNATION_VERSION else ""
        self.async_learner = async_learner
        self.sync_from_last_file = sync_from_last_file
        self.phase = READY
        self.master_epoch = 0
        self.master_entries: list[EpochEntry] = []
        self.confirm_offset = 0
        self.truncated_to: int | None = None
        self.resynced_from: int | None = None   # the log was reset to the master's first retained offset
        self.master_min_offset: int | None = None   # version 2 handshakes: where the master's retention starts
        self.bytes_received = 0
        # The log reached a confirmOffset this master sent (it holds every message acknowledged
        # when the header left): what makes a replica that restarted uncleanly whole again.
        self.caught_up = False
        # Version 4: the master's range digests, verified against our own disk (ha/digest.py).
        self.digests = RangeChecker(digest_keep) if version >= DIGEST_VERSION else None
        self.repaired_to: int | None = None     # the master's repair cut the log here; reconnect

    def start(self) -> SlaveHandshake:
        if self.phase != READY:
            raise HAProtocolError("already_started", f"phase {self.phase}")
        self.phase = HANDSHAKE
        return SlaveHandshake(self.broker_id, self.sync_from_last_file, self.async_learner, self.version,
                              self.incarnation)

    def on_frame(self, f: MasterFrame) -> Ack | None:
        """Handle one frame; returns an ack to send now, or None (the adapter may coalesce acks)."""
        if isinstance(f, MasterHandshake):
            return self._on_handshake(f)
        if isinstance(f, Transfer):
            return self._on_transfer(f)
        if isinstance(f, Digests):
            self._on_digests(f)
            return None
        if isinstance(f, Repair):
            self._on_repair(f)
            return None
        raise HAProtocolError("unexpected_frame", type(f).__name__)

    def close(self) -> None:
        self.phase = SHUTDOWN

    # ------------------------------------------------------------------ handshake

    def _on_handshake(self, f: MasterHandshake) -> Ack:
        if self.phase != HANDSHAKE:
            raise HAProtocolError("unexpected_handshake", f"master handshake in phase {self.phase}")
        if self.expect_epoch and f.last_epoch != self.expect_epoch:
            raise HAProtocolError("master_epoch_mismatch",
                                  f"the master states MasterEpoch {f.last_epoch}; the controller named {self.expect_epoch}",
                                  stated=f.last_epoch, expected=self.expect_epoch)
        log = self.log
        self.master_entries = [EpochEntry(e, s) for e, s in f.entries]
        self.master_epoch = f.last_epoch
        local = log.epochs
        if len(local) == 0:
            if log.max_offset != log.min_offset:
                raise HAProtocolError("log_without_epochs", "slave log holds bytes but no epoch entries")
        else:
            last = local.last()
            assert last is not None
            if log.min_offset > f.master_max_offset:
                raise HAProtocolError("slave_retention_beyond_master",
                                      f"slave keeps from {log.min_offset}, master ends at {f.master_max_offset}")
            m = self.master_min_offset = f.master_min_offset     # protocol version 2
            if m is not None and m > log.min_offset and log.max_offset <= m:
                # Everything here is older than what the master kept: no byte of ours can be
                # compared or continued (the bytes up to m are gone on the master). A new
                # replica's start, as Kafka's follower below the leader's log start offset does.
                # Before version 2 this was `no_consistent_point` or `slave_behind_retention` for
                # ever (a trimmed epoch's start moved to the master's first offset).
                self.resynced_from = m
                log.reset(m)
                cp = None
            else:
                # Compare only what both still hold: our entries as a log starting at the
                # master's first offset sees them (an epoch the master trimmed starts there).
                mine = local if m is None or m <= log.min_offset else EpochCache(_from_offset(local.entries(), m))
                try:
                    cp = find_consistent_point(mine, log.max_offset,
                                               _from_offset(self.master_entries, log.min_offset), f.master_max_offset)
                except NoConsistentPoint as e:
                    if log.max_offset == log.min_offset:
                        # No bytes that could disagree: only the EpochFile goes, nothing is guessed.
                        log.reset(log.min_offset)
                        cp = None
                    else:
                        # Never guess: keeping divergent bytes would be silent data corruption.
                        details = {k: v for k, v in e.details.items() if k != "reason"}
                        raise HAProtocolError("no_consistent_point", e.message,
                                              divergence=e.details.get("reason"), **details) from e
            if cp is None:
                pass
            elif cp.offset < log.min_offset:
                # Everything retained here diverges: an empty log that restarts where the master says.
                log.reset(cp.offset)
            elif cp.offset < log.max_offset or last.epoch > cp.epoch:
                log.truncate(cp.offset, cp.epoch)
            self.truncated_to = cp.offset if cp is not None else log.max_offset
        self.phase = TRANSFER
        empty = log.max_offset == log.min_offset
        return Ack(0 if empty else log.max_offset)

    # ------------------------------------------------------------------ digests

    def _on_digests(self, f: Digests) -> None:
        if self.digests is None:
            raise HAProtocolError("unexpected_frame", f"digests on a version {self.version} connection")
        if self.phase != TRANSFER:
            raise HAProtocolError("digests_before_transfer", f"digests in phase {self.phase}")
        self.digests.expect(list(f.entries))

    def digests_due(self, budget: int) -> list[RangeDigest]:
        """The master's ranges to verify in this round (none while a mismatch awaits repair)."""
        if self.digests is None or self.phase != TRANSFER:
            return []
        return self.digests.due(self.log, budget)

    def verify_range(self, r: RangeDigest) -> tuple[str, str] | None:
        return RangeChecker.verify(self.log, r)

    def round_report(self, verified: list[RangeDigest], bad: RangeDigest | None) -> DigestReport | None:
        """The frame that tells the master how a round went. A mismatch is reported once; the
        session then waits for the master's repair (it keeps replicating meanwhile: the master
        still counts our acks until no SyncStateSet it may hold names us)."""
        assert self.digests is not None
        if bad is not None:
            self.digests.mismatch = bad
            return DigestReport(MISMATCH, bad.epoch, bad.start, bad.end)
        if not verified:
            return None
        return DigestReport(VERIFIED, verified[-1].epoch, min(r.start for r in verified),
                            max(r.end for r in verified))

    def _on_repair(self, f: Repair) -> None:
        bad = self.digests.mismatch if self.digests is not None else None
        if bad is None or f.offset != bad.start:
            # Only the cut we asked for: a repair is no way for a master to truncate us at will.
            raise HAProtocolError("unrequested_repair", f"repair to {f.offset}; reported "
                                  f"{'nothing' if bad is None else f'[{bad.start},{bad.end})'}")
        self.repaired_to = cut_at_or_below(self.log, f.offset)
        self.phase = SHUTDOWN

    # ------------------------------------------------------------------ transfer

    def _on_transfer(self, f: Transfer) -> Ack:
        self._check_transfer(f, self.log.max_offset)
        log = self.log
        if f.body:
            new_max = log.append_raw(f.batch_start_offset, f.body, f.epoch, f.epoch_start_offset)
            assert new_max == f.batch_start_offset + len(f.body), (new_max, f.batch_start_offset, len(f.body))
            self.bytes_received += len(f.body)
        return self._confirm_and_ack(f.confirm_offset)

    def _check_transfer(self, f: Transfer, local_max: int) -> None:
        """Phase, start offset and epoch rules of a transfer; records a new epoch. ``local_max``
        is where the next byte goes (the end of the prepared batches when pipelining)."""
        if self.phase != TRANSFER:
            raise HAProtocolError("transfer_before_handshake", f"transfer in phase {self.phase}")
        log = self.log
        if f.batch_start_offset != local_max:
            if local_max == log.min_offset and f.batch_start_offset >= self._first_master_offset():
                # An empty log may start anywhere the master has data (isSyncFromLastFile, retention).
                log.reset(f.batch_start_offset)
            else:
                raise OffsetMismatch("offset_mismatch",
                                     f"batchStartOffset {f.batch_start_offset} != local max {local_max}",
                                     batch_start=f.batch_start_offset, local_max=local_max)
        if f.epoch == 0:
            if f.body:
                raise HAProtocolError("data_without_epoch", "transfer body with epoch 0")
        else:
            self._record_epoch(f)

    def _confirm_and_ack(self, confirm_offset: int) -> Ack:
        log = self.log
        if log.max_offset >= confirm_offset:
            self.caught_up = True
        confirm = min(confirm_offset, log.max_offset)
        if confirm > self.confirm_offset:
            self.confirm_offset = confirm
            log.confirm_offset = confirm
        return Ack(log.max_offset)

    def _first_master_offset(self) -> int:
        return self.master_entries[0].start_offset if self.master_entries else 0

    def _record_epoch(self, f: Transfer) -> None:
        """Record the header's epoch in the EpochFile BEFORE its bytes are appended."""
        log = self.log
        last = log.epochs.last()
        if last is not None and f.epoch < last.epoch:
            raise HAProtocolError("epoch_backwards", f"epoch {f.epoch} < local last epoch {last.epoch}",
                                  epoch=f.epoch, local_epoch=last.epoch)
        if last is not None and f.epoch == last.epoch:
            ours = last.start_offset
            if self.master_min_offset is not None and ours < self.master_min_offset:
                ours = self.master_min_offset    # the master trimmed this epoch's head: it starts there
            if max(f.epoch_start_offset, log.min_offset) != ours:
                raise HAProtocolError("epoch_start_mismatch",
                                      f"epoch {f.epoch} starts at {f.epoch_start_offset}, locally {last.start_offset}")
            return
        # Epochs in which a master wrote nothing never appear in a data header; the handshake
        # told us about them, so they are recorded too and the EpochFiles stay equal. An epoch
        # above the handshake's lastEpoch is the same master re-elected while connected.
        todo = entries_to_record(log.epochs, _from_offset(self.master_entries, log.min_offset), f.epoch)
        start = max(f.epoch_start_offset, log.min_offset)
        if not todo or todo[-1].epoch != f.epoch:
            todo.append(EpochEntry(f.epoch, start))
        elif todo[-1].start_offset != start:
            raise HAProtocolError("epoch_start_mismatch",
                                  f"epoch {f.epoch} starts at {f.epoch_start_offset}, handshake said {todo[-1].start_offset}")
        try:
            for e in todo:
                log.append_epoch(e.epoch, e.start_offset)
        except EpochRuleError as e:
            raise HAProtocolError("bad_epoch", e.message) from e
        self.master_epoch = max(self.master_epoch, f.epoch)


def cut_at_or_below(log: ReplicaLog, offset: int) -> int:
    """Cut the log at ``offset``, or at the nearest lower point the log can prove is a record
    boundary when the record at ``offset`` is itself damaged (the store refuses a cut it cannot
    check): the start of its segment, and failing that an empty log there. Returns the new end."""
    if offset >= log.max_offset:
        return log.max_offset
    for cut in dict.fromkeys((offset, log.segment_base(offset))):
        if cut <= log.min_offset:
            break
        try:
            log.truncate(cut)
            return cut
        except AutoswitchError:
            continue
    start = log.min_offset
    log.reset(start)
    return start
