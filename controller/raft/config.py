"""Raft timings and limits. Every key is documented in docs/raft.md."""

from __future__ import annotations

from dataclasses import dataclass, fields

from .errors import RaftConfigError


@dataclass(frozen=True)
class RaftConfig:
    # --- timing (DLedger defaults are heartbeat 2000 ms x maxHeartBeatLeak 3, vote interval 300-1000 ms;
    # ours are ~5x tighter so that leader-kill-to-commit stays under 1 s on a LAN) ---
    heartbeat_interval_ms: int = 100
    max_heartbeat_leak: int = 4          # follower timeout base and leader check-quorum window (x heartbeat)
    election_jitter_ms: int = 400        # follower timeout = heartbeat*leak + U[0, jitter) -> 400..800 ms
    min_vote_interval_ms: int = 50       # candidate back-off between vote rounds, U[min, max)
    max_vote_interval_ms: int = 200
    vote_round_timeout_ms: int = 100     # tally with the replies we have after this long
    tick_interval_ms: int = 10           # driver only: how often tick() is called
    pre_vote: bool = True
    check_quorum: bool = True
    # --- replication flow control ---
    max_append_bytes: int = 1 << 20      # payload bytes per AppendEntries
    max_append_entries: int = 4096
    max_inflight: int = 8                # AppendEntries in flight per follower
    max_uncommitted_bytes: int = 64 << 20
    max_entry_bytes: int = 4 << 20
    max_apply_bytes: int = 16 << 20      # committed bytes handed out per Ready
    # committed entries per Ready: the driver yields to its event loop and ticks between Readies, so a
    # long replay after a restart (~0.1 ms per controller entry) cannot starve heartbeats
    max_apply_entries: int = 256
    max_pending_reads: int = 4096
    # --- snapshots ---
    snapshot_every: int = 10_000         # driver: snapshot after this many applied entries
    compaction_keep: int = 1_000         # entries kept in memory behind a snapshot for slow followers
    snapshot_chunk_bytes: int = 256 << 10
    max_snapshot_bytes: int = 256 << 20
    # --- storage ---
    segment_bytes: int = 64 << 20
    fsync: bool = True
    # --- transport (driver) ---
    max_message_bytes: int = 16 << 20
    max_batch_messages: int = 256
    send_queue_limit: int = 4096
    reconnect_min_ms: int = 50
    reconnect_max_ms: int = 500         # an idle sender re-connects to a restarted peer within this
    listen_addr: str | None = None       # host:port when this node is not in `peers`

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, int) and not isinstance(v, bool) and v < 0:
                raise RaftConfigError(f"raft config {f.name} must be >= 0, got {v}")
        if self.heartbeat_interval_ms <= 0 or self.max_heartbeat_leak < 2:
            raise RaftConfigError("heartbeat_interval_ms must be > 0 and max_heartbeat_leak >= 2")
        if self.min_vote_interval_ms > self.max_vote_interval_ms:
            raise RaftConfigError("min_vote_interval_ms > max_vote_interval_ms")
        if (self.max_inflight < 1 or self.max_append_entries < 1 or self.snapshot_chunk_bytes < 1
                or self.max_apply_entries < 1):
            raise RaftConfigError("max_inflight, max_append_entries, max_apply_entries, snapshot_chunk_bytes"
                                  " must be >= 1")
        # one AppendEntries always carries at least one entry, so the biggest entry must fit a message
        biggest = max(self.max_append_bytes, self.max_entry_bytes, self.snapshot_chunk_bytes)
        if self.max_message_bytes < biggest + (1 << 16):
            raise RaftConfigError("max_message_bytes must exceed max_append/entry/chunk bytes plus headers")

    @property
    def election_timeout_min_ms(self) -> int:
        return self.heartbeat_interval_ms * self.max_heartbeat_leak
