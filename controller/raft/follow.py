"""The follower side of the Raft core: accepting (or rejecting, with a hint) a leader's entries,
heartbeats, snapshot chunks and TimeoutNow. Functions over the core's state (core.py), split
from it by concern; like the core, no clock or I/O."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoswitch.controller.consensus.membership import BadMembership

from . import vote
from .membership import base_conf_index, snapshot_membership
from .messages import Message, MsgType
from .snapshot_transfer import Received

if TYPE_CHECKING:
    from .core import RaftCore


def handle_append(core: RaftCore, m: Message) -> None:
    if m.index < core.commit:
        core._send(Message(MsgType.APPEND_RESP, core.id, m.frm, core.term, index=core.commit))
        return
    last = core.log.maybe_append(m.index, m.log_term, m.entries, core.commit)
    if last is None:
        hint = min(m.index, core.log.last_index())
        # etcd findConflictByTerm, follower side: none of our entries with a term above the
        # leader's prev term can match, so hint below them. Without it, a follower holding a
        # newer term's entries at the leader's prev index (e.g. term 3 over the leader's 2)
        # answered the same hint for ever and never caught up (simulator seed 1511).
        while hint > max(core.commit, core.log.offset) and (core.log.term(hint) or 0) > m.log_term:
            hint -= 1
        core._send(Message(MsgType.APPEND_RESP, core.id, m.frm, core.term, index=m.index, reject=True,
                           reject_hint=hint, reject_term=core.log.term(hint) or 0))
        return
    if m.entries or last < core.confs.index:
        core._sync_confs(m.entries)
    commit_to(core, min(m.commit, last))
    if core.catching_up and last >= m.commit:
        # m.commit is the leader's commit index: everything committed anywhere is now ours
        core.catching_up = False
        core._caught_up_pending = True
        core.log_.info("raft_caught_up", term=core.term, index=last, leader=m.frm)
    core._send(Message(MsgType.APPEND_RESP, core.id, m.frm, core.term, index=last))


def commit_to(core: RaftCore, index: int) -> None:
    if index > core.commit:
        assert index <= core.log.last_index()
        core.commit = index


def handle_heartbeat(core: RaftCore, m: Message) -> None:
    commit_to(core, min(m.commit, core.log.last_index()))
    # A catching-up node (wiped, recovered) tells the leader where its log really ends: the
    # leader's match for it may be from before the loss, and with nothing new to append the
    # leader would never send it anything (the cluster idles, the node never catches up).
    behind = core.catching_up and core.log.last_index() < m.commit
    core._send(Message(MsgType.HEARTBEAT_RESP, core.id, m.frm, core.term, seq=m.seq, reject=behind,
                       index=core.log.last_index() if behind else 0))


def handle_timeout_now(core: RaftCore, m: Message) -> None:
    core.log_.info("raft_timeout_now", term=core.term, frm=m.frm)
    core._become_candidate(core.term, 0, increase=True)
    vote.maybe_campaign(core, transfer=True)


def handle_snapshot(core: RaftCore, m: Message) -> None:
    if m.snap_index <= core.commit:
        core._snap_rx.reset()
        core._send(Message(MsgType.APPEND_RESP, core.id, m.frm, core.term, index=core.commit))
        return
    got = core._snap_rx.on_chunk(m)
    match got.kind:
        case Received.TOO_BIG:
            core.log_.error("raft_snapshot_too_big", total=m.snap_total, limit=core.cfg.max_snapshot_bytes)
        case Received.OVERRUN:
            core.log_.error("raft_snapshot_overrun", index=m.snap_index, got=got.offset, total=m.snap_total)
        case Received.OUT_OF_ORDER:
            core._send(Message(MsgType.SNAPSHOT_RESP, core.id, m.frm, core.term, index=got.offset, reject=True,
                               snap_index=m.snap_index))
        case Received.MORE:
            core._send(Message(MsgType.SNAPSHOT_RESP, core.id, m.frm, core.term, index=got.offset,
                               snap_index=m.snap_index))
        case Received.CORRUPT:
            core.log_.error("raft_snapshot_crc_mismatch", index=m.snap_index, size=got.offset,
                            total=m.snap_total)
            core._send(Message(MsgType.SNAPSHOT_RESP, core.id, m.frm, core.term, index=0, reject=True,
                               snap_index=m.snap_index))
        case Received.DONE:
            snap = got.snapshot
            assert snap is not None
            core.log_.info("raft_snapshot_received", index=snap.index, term=snap.term, size=len(snap.data))
            core.log.restore(snap.index, snap.term)
            try:
                snap_conf, conf_index, _ = snapshot_membership(snap.data)
            except BadMembership as e:
                core.log_.error("raft_snapshot_bad_membership", index=snap.index, error=str(e))
                snap_conf, conf_index = None, None
            core.confs.reset(base_conf_index(conf_index, snap.index), snap.term, snap_conf or core.membership)
            core._voter_change_index = max(core._voter_change_index, core.confs.index)
            core._voters_settled_ms = None      # seen committed anew (the pause only gets longer)
            core._set_conf(core.confs.current)
            core.snapshot = snap
            core._pending_snapshot = snap
            core.commit = max(core.commit, snap.index)
            core.applied = max(core.applied, snap.index)
            core._send(Message(MsgType.APPEND_RESP, core.id, m.frm, core.term, index=core.log.last_index()))
