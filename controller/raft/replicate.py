"""The leader side of the Raft core: replicating the log to followers under flow control,
snapshots to followers that fell behind the compacted log, the commit index, and heartbeats and
the read-index rounds they carry. Functions over the core's state (core.py), split from it by
concern; like the core, no clock or I/O."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .messages import Message, MsgType, ReadState, Role
from .progress import Progress, ProgressState
from .quorum import quorum_index
from .raftlog import LogCompacted

if TYPE_CHECKING:
    from .core import RaftCore


def handle_append_resp(core: RaftCore, m: Message) -> None:
    pr = core.prs.get(m.frm)
    if core.role != Role.LEADER or pr is None:      # pr None: not (or no longer) a member
        return
    pr.last_ack_ms = core.now
    if m.reject:
        rejected = m.index
        if rejected > pr.match and m.reject_hint < pr.match:
            follower_lost_entries(core, m.frm, pr, m.reject_hint)
        if pr.state == ProgressState.REPLICATE:
            if rejected <= pr.match:
                return                      # stale reject of something since acknowledged
            pr.become_probe()
        elif pr.state == ProgressState.PROBE and rejected != pr.next - 1:
            return                          # reply to an older probe
        # fast back-off (etcd findConflictByTerm): the largest index <= hint whose term <= hint term
        hint = min(rejected, m.reject_hint)
        if m.reject_term:
            while hint > core.log.offset and (core.log.term(hint) or 0) > m.reject_term:
                hint -= 1
            if hint == core.log.offset and core.log.offset_term > m.reject_term:
                hint -= 1     # conflict at our snapshot index: only the snapshot repairs it (sim seed 240)
        if hint + 1 >= pr.next:
            hint = pr.next - 2          # every reject moves the probe back at least one entry
        pr.next = max(pr.match + 1, hint + 1)
        pr.paused = False
        send_append(core, m.frm)
        return
    pr.acked(m.index)
    if pr.state == ProgressState.SNAPSHOT and pr.match >= pr.snap_index:
        pr.state = ProgressState.PROBE
    if pr.state == ProgressState.PROBE:
        pr.become_replicate()
    pr.paused = False
    commit_and_spread(core)
    if core.transferee == m.frm and pr.match == core.log.last_index():
        core._send(Message(MsgType.TIMEOUT_NOW, core.id, m.frm, core.term))
    if core.role == Role.LEADER:
        while send_append(core, m.frm):
            pass


def handle_heartbeat_resp(core: RaftCore, m: Message) -> None:
    pr = core.prs.get(m.frm)
    if core.role != Role.LEADER or pr is None:
        return
    pr.last_ack_ms = core.now
    pr.hb_acked = max(pr.hb_acked, m.seq)
    pr.paused = False
    if m.reject and m.index < pr.match:
        follower_lost_entries(core, m.frm, pr, m.index)
        pr.next = m.index + 1       # probe from where its log really ends
    if pr.state == ProgressState.SNAPSHOT:
        if core.now - pr.snap_sent_ms >= core.cfg.election_timeout_min_ms:
            send_snapshot_chunk(core, m.frm)       # a chunk or its ack was lost
    elif pr.match < core.log.last_index():
        if pr.state == ProgressState.REPLICATE and len(pr.inflight) >= core.cfg.max_inflight:
            # appends (or their acks) were lost: free a slot so the follower hears from us again;
            # a gap makes it reject, which sends us back to probing (etcd does the same)
            pr.inflight.popleft()
        # even with nothing new to send: an empty append at next-1 makes a follower that lost
        # appends reject, which drops us back to probing from its real end (etcd sendIfEmpty)
        send_append(core, m.frm, send_empty=True)
    release_reads(core)


def follower_lost_entries(core: RaftCore, peer: str, pr: Progress, now_has: int) -> None:
    """It no longer holds what it acknowledged: its log was lost and it rejoined (recover-member,
    a replaced disk, a wiped directory). Our match for it is void; without this reset every probe
    went back to match + 1 for ever and it never caught up (issue 29)."""
    core.log_.warning("raft_follower_lost_entries", peer=peer, match=pr.match, now_has=now_has)
    pr.match = now_has
    pr.become_probe()


def handle_snapshot_resp(core: RaftCore, m: Message) -> None:
    pr = core.prs.get(m.frm)
    if core.role != Role.LEADER or pr is None:
        return
    pr.last_ack_ms = core.now
    if pr.state != ProgressState.SNAPSHOT or m.snap_index != pr.snap_index:
        return
    pr.snap_offset = m.index
    send_snapshot_chunk(core, m.frm)


def maybe_commit(core: RaftCore) -> None:
    mine = [core.log.stable] if core.id in core.voters else []
    n = quorum_index([*mine, *(core.prs[p].match for p in core.voter_peers)], core.quorum)
    # Figure 8: only an entry of the current term is committed by counting replicas
    if n > core.commit and core.log.term(n) == core.term:
        core._uncommitted = max(0, core._uncommitted - sum(len(e.data) for e in core.log.slice(core.commit + 1, n)))
        core.commit = n
        for ctx in core.reads.take_waiting():
            start_read(core, ctx)
        if core.id not in core.voters and core.confs.index <= core.commit:
            # our own removal committed: hand over to the voters (they elect after their
            # election timeout; the controller moves leadership first to make that instant)
            core.log_.info("raft_removed_step_down", term=core.term, index=core.confs.index)
            core._become_follower(core.term, None)


def commit_and_spread(core: RaftCore) -> None:
    """Advance the commit index; when it moved, tell every follower now (etcd's bcastAppend
    after maybeCommit): a follower applies an entry, and pushes it to the brokers watching it,
    only once it learns the entry is committed, which would otherwise wait for the next
    heartbeat (a handover's new master heard of its election ~50-90 ms late)."""
    before = core.commit
    maybe_commit(core)
    if core.commit > before and core.role == Role.LEADER:
        for p in core.peers:
            send_append(core, p, send_empty=True)


def send_append(core: RaftCore, to: str, send_empty: bool = False) -> bool:
    """Send one AppendEntries if flow control allows; True if something was sent."""
    pr = core.prs[to]
    if pr.state == ProgressState.SNAPSHOT:
        return False
    if pr.paused or len(pr.inflight) >= core.cfg.max_inflight:
        return False
    prev = pr.next - 1
    prev_term = core.log.term(prev)
    if prev_term is None or prev < core.log.offset:
        return start_snapshot(core, to)
    last = core.log.last_index()
    if pr.next > last and pr.state == ProgressState.REPLICATE and not send_empty:
        return False
    try:
        ents = core.log.slice(pr.next, last, core.cfg.max_append_bytes, core.cfg.max_append_entries)
    except LogCompacted:
        return start_snapshot(core, to)
    core._send(Message(MsgType.APPEND, core.id, to, core.term, index=prev, log_term=prev_term,
                       entries=tuple(ents), commit=core.commit))
    if pr.state == ProgressState.REPLICATE:
        if ents:
            pr.next = ents[-1].index + 1
            pr.inflight.append(ents[-1].index)
        return bool(ents)
    pr.paused = True
    return True


def start_snapshot(core: RaftCore, to: str) -> bool:
    if core.snapshot is None:
        core.log_.error("raft_no_snapshot_for_lagging_follower", to=to, offset=core.log.offset)
        return False
    pr = core.prs[to]
    pr.become_snapshot(core.snapshot.index)
    core.log_.info("raft_snapshot_send", to=to, index=core.snapshot.index, size=len(core.snapshot.data))
    send_snapshot_chunk(core, to)
    return False


def send_snapshot_chunk(core: RaftCore, to: str) -> None:
    pr = core.prs[to]
    snap = core.snapshot
    assert snap is not None
    if snap.index != pr.snap_index:                # a newer snapshot replaced it: start over
        pr.snap_index, pr.snap_offset = snap.index, 0
    off, chunk, done, crc = core._snap_tx.chunk(snap, pr.snap_offset)
    pr.snap_sent_ms = core.now
    core._send(Message(MsgType.SNAPSHOT, core.id, to, core.term, snap_index=snap.index, snap_term=snap.term,
                       snap_offset=off, snap_total=len(snap.data), snap_crc=crc,
                       snap_done=done, snap_data=chunk))


def broadcast_append(core: RaftCore) -> None:
    for p in core.peers:
        while send_append(core, p):
            if core.prs[p].state != ProgressState.REPLICATE:
                break


def broadcast_heartbeat(core: RaftCore) -> None:
    core.hb_seq += 1
    for p in core.peers:
        pr = core.prs[p]
        core._send(Message(MsgType.HEARTBEAT, core.id, p, core.term, commit=min(pr.match, core.commit),
                           seq=core.hb_seq))
    release_reads(core)


def start_read(core: RaftCore, ctx: object) -> None:
    if not core.voter_peers:
        core._read_states.append(ReadState(ctx, core.commit))
        return
    core.hb_seq += 1
    core.reads.add(ctx, core.commit, core.hb_seq)
    for p in core.peers:
        pr = core.prs[p]
        core._send(Message(MsgType.HEARTBEAT, core.id, p, core.term, commit=min(pr.match, core.commit),
                           seq=core.hb_seq))


def release_reads(core: RaftCore) -> None:
    if core.reads.pending:
        core._read_states.extend(core.reads.release(functools.partial(heartbeat_quorum_acked, core)))


def heartbeat_quorum_acked(core: RaftCore, seq: int) -> bool:
    return core._self_votes() + sum(1 for p in core.voter_peers if core.prs[p].hb_acked >= seq) >= core.quorum
