"""HA configuration: every limit and timer of the replication layer in one place."""

from __future__ import annotations

from dataclasses import dataclass

from autoswitch.base.errors import ConfigError
from autoswitch.base.limits import MAX_ZONES

KiB = 1024
MiB = 1024 * KiB
# Hard caps: a config value above these is a mistake, not a tuning choice.
HARD_MAX_BODY_SIZE = 256 * MiB
HARD_MAX_EPOCH_ENTRIES = 1 << 20
# A transfer body up to this size goes out in one write with its header (the copy is cheaper than
# a second send); larger ones, bulk catch-up, are written as they are.
SMALL_FRAME_BYTES = 64 * 1024
# Over TLS a larger transfer body is written in slices of this size, each drained (master_conn.py):
# what the TLS transport hands its socket transport beyond the buffer drain() sees is one slice.
TLS_SLICE = 64 * 1024
# Over TLS the transport's high-water mark bounds the ciphertext waiting in OpenSSL's memory BIO,
# which asyncio copies out in one piece when the socket drains: with 16 MiB waiting the master
# spent ~1.5x the CPU per GiB and replicated ~0.7x as fast (large fresh allocations, copies that
# miss the cache); 0.5-4 MiB measured alike (bench/results/security.md). 512 KiB is asyncio's own
# default for TLS. Plaintext connections use ``write_buffer_high`` instead, whatever its value.
TLS_WRITE_BUFFER_HIGH = 512 * 1024

ACK_MODES = ("master", "all", "in_sync_replicas")


@dataclass
class HAConfig:
    # --- frames ---
    max_body_size: int = 32 * MiB          # largest transfer body a slave accepts
    max_epoch_entries: int = 65536         # largest EpochFile a master may send in a handshake
    transfer_batch_size: int = 1 * MiB     # master reads/sends at most this much per transfer frame (L2-sized: see docs/replication.md)
    read_chunk_size: int = 1 * MiB         # socket read size of both adapters
    # Ack clocking: while a frame to a slave is unacknowledged, a tail smaller than
    # SMALL_FRAME_BYTES waits for that ack, at most this long after the send, so concurrent
    # one-message writes travel in one frame (docs/replication.md "Frames"); 0 = send at once.
    transfer_hold_s: float = 0.002
    # --- timers ---
    heartbeat_interval_s: float = 1.0      # master sends an empty transfer when idle this long
    housekeeping_interval_s: float = 10.0  # slave reconnects when the master is silent this long
    handshake_timeout_s: float = 5.0       # master drops a connection that does not handshake in time
    connect_timeout_s: float = 3.0
    reconnect_backoff_min_s: float = 0.1
    reconnect_backoff_max_s: float = 5.0
    # --- SyncStateSet ---
    ha_max_time_slave_not_catchup_s: float = 15.0
    # A member behind the master whose ack has not moved this long leaves the set at once (a hung
    # disk or frozen process with its connection up); 0 = off, only the catch-up timeout applies.
    slave_stall_timeout_s: float = 3.0
    # A member whose acks trail the writes they cover by more than this (median per second) for
    # slave_slow_windows seconds in a row leaves the set, and may rejoin after slave_recover_windows
    # healthy seconds (a slow, not hung, disk); 0 = off. Not while the master is degraded itself.
    slave_slow_ack_ms: float = 500.0
    slave_slow_windows: int = 5
    slave_recover_windows: int = 10
    sync_state_check_interval_s: float = 1.0
    proposal_timeout_s: float = 5.0
    proposal_backoff_min_s: float = 0.2
    proposal_backoff_max_s: float = 5.0
    # --- write acks ---
    ack_mode: str = "all"                  # master | all (allAckInSyncStateSet) | in_sync_replicas
    in_sync_replicas: int = 1              # replicas incl. master that must hold a write (in_sync_replicas mode)
    min_in_sync_replicas: int = 1          # fewer alive SSS members -> IN_SYNC_REPLICAS_NOT_ENOUGH
    # The zones (as the controllers know each replica's) the SSS members holding an ack must span;
    # 0 = off. Fewer zones among the alive members -> IN_SYNC_REPLICAS_NOT_ENOUGH.
    min_in_sync_zones: int = 0
    # --- resource limits ---
    max_slaves: int = 16
    # Connections that have not handshaken yet: past this many the oldest is closed, so idle
    # sockets cannot keep a real slave (which handshakes at once) out.
    max_pending_handshakes: int = 16
    rejection_log_interval_s: float = 10.0  # one rejection line per peer and reason per interval
    max_pending_waits: int = 100_000
    # Plaintext transport high-water mark; the transfer loop waits below it. Small on purpose: a
    # frame written while the transport still holds bytes is copied whole into its buffer, so a
    # deep buffer (16 MiB until 2026-11-30) made the master copy every catch-up byte once more:
    # -15 to -30 % master CPU per GiB at 64 KiB, +13-15 % catch-up speed beside other work, ~-10 %
    # with master and slave alone on two vCPUs (bench/results/replication.md "Session 33"). The
    # kernel's socket buffer, not this one, keeps the link busy.
    write_buffer_high: int = 64 * KiB
    # --- protocol ---
    # The HA protocol version a slave states (ha/codec.py). A master refuses a higher version than
    # it knows, so while brokers of a release speaking 2 remain, set 2 on the upgraded ones.
    protocol_version: int = 4
    # --- range digests (protocol version 4; docs/replication.md "Digests and quarantine") ---
    digests: bool = True                   # master: cut, keep and send range digests; slave: verify them
    digest_range_bytes: int = 1 * MiB      # a range closes at the first record boundary past this size
    digest_history: int = 64               # ranges the master keeps and a slave verifies every round
    digest_interval_s: float = 5.0         # a slave's verification round; an idle open range closes after half
    digest_round_bytes: int = 128 * MiB    # most a slave reads per round (the newest ranges first)
    digest_catch_up_bytes: int = 64 * MiB  # most a master reads per housekeeping tick to cut ranges itself

    def validate(self) -> HAConfig:
        def need(cond: bool, what: str) -> None:
            if not cond:
                raise ConfigError(f"invalid HA config: {what}", key=what)

        need(0 < self.max_body_size <= HARD_MAX_BODY_SIZE, "max_body_size")
        need(0 < self.max_epoch_entries <= HARD_MAX_EPOCH_ENTRIES, "max_epoch_entries")
        need(0 < self.transfer_batch_size <= self.max_body_size, "transfer_batch_size")
        need(0 < self.read_chunk_size <= 16 * MiB, "read_chunk_size")
        for name in ("heartbeat_interval_s", "housekeeping_interval_s", "handshake_timeout_s",
                     "connect_timeout_s", "reconnect_backoff_min_s", "reconnect_backoff_max_s",
                     "ha_max_time_slave_not_catchup_s", "sync_state_check_interval_s",
                     "proposal_timeout_s", "proposal_backoff_min_s", "proposal_backoff_max_s"):
            need(getattr(self, name) > 0, name)
        need(self.housekeeping_interval_s > self.heartbeat_interval_s, "housekeeping_interval_s")
        need(self.slave_stall_timeout_s >= 0, "slave_stall_timeout_s")
        need(self.slave_slow_ack_ms >= 0, "slave_slow_ack_ms")
        need(self.slave_slow_windows >= 1 and self.slave_recover_windows >= 1, "slave_slow_windows")
        need(self.reconnect_backoff_max_s >= self.reconnect_backoff_min_s, "reconnect_backoff_max_s")
        need(self.proposal_backoff_max_s >= self.proposal_backoff_min_s, "proposal_backoff_max_s")
        need(self.ack_mode in ACK_MODES, "ack_mode")
        need(self.in_sync_replicas >= 1, "in_sync_replicas")
        need(self.min_in_sync_replicas >= 1, "min_in_sync_replicas")
        need(0 <= self.min_in_sync_zones <= MAX_ZONES, "min_in_sync_zones")
        need(self.min_in_sync_zones == 0 or self.ack_mode != "master", "min_in_sync_zones")
        need(0 < self.max_slaves <= 1024, "max_slaves")
        need(0 < self.max_pending_handshakes <= 1024, "max_pending_handshakes")
        need(self.rejection_log_interval_s > 0, "rejection_log_interval_s")
        need(0 < self.max_pending_waits <= 10_000_000, "max_pending_waits")
        need(self.write_buffer_high >= 64 * KiB, "write_buffer_high")
        need(0 <= self.transfer_hold_s <= 0.1, "transfer_hold_s")
        need(0 <= self.protocol_version <= 4, "protocol_version")
        need(64 <= self.digest_range_bytes <= 1024 * MiB, "digest_range_bytes")
        need(1 <= self.digest_history <= 1024, "digest_history")
        need(self.digest_interval_s > 0, "digest_interval_s")
        need(self.digest_round_bytes >= self.digest_range_bytes, "digest_round_bytes")
        need(self.digest_catch_up_bytes >= 64 * 1024, "digest_catch_up_bytes")
        return self
