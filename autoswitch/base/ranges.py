"""The allowed range of every numeric config key, in one place (issue 29, item 10).

Each key of each config table is checked against its range where a value comes in: a TOML file, a
command-line flag, or a runtime update (``admin update-controller-config``). A value outside is a
CONFIG_ERROR naming the key and the range, never a traceback later and never a silently disabled
safety mechanism (``peer_query_timeout_s = inf`` stopped failover when one controller hung;
``[raft] tick_interval_ms = 0`` pegged a core and ignored SIGTERM; ``max_entry_bytes = 0`` never
committed). Floats must be finite. tests/unit/test_config_ranges.py keeps every numeric field of
these classes in this table and its default inside its range; docs/configuration.md lists the
table (``python scripts/gen_config_ranges.py`` writes that section).

The replicated controller keys (``[controller.sm]``) keep their ranges beside their parser
(controller/state/sm_config.py ``_SPEC``); the docs list those too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autoswitch.base.errors import ConfigError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DAY_S = 86_400
HOUR_MS = 3_600_000
INT32_MAX = (1 << 31) - 1

Range = tuple[float, float]

RANGES: dict[str, dict[str, Range]] = {
    "ControllerConfig": {
        "peer_query_timeout_s": (0.01, 60),
        "propose_timeout_s": (0.01, 600),
        "read_timeout_s": (0.01, 600),
        "max_message_bytes": (KiB, 64 * MiB),
        "max_concurrent_rpcs": (16, 100_000),
        "max_watchers": (1, 1_000_000),
        "max_broker_sessions": (1, 1_000_000),
        "rebalance_handover_timeout_ms": (100, 300_000),
        "state_check_interval_s": (0, 86_400),
        "notification_timeout_s": (0.01, 300),
        "max_alerts_in_flight": (1, 64),
        "watch_queue_size": (1, 1_000_000),
        "max_groups_per_query": (1, 10_000_000),
        "events_max_lines_per_call": (1, 1_000_000),
    },
    "RaftConfig": {
        "heartbeat_interval_ms": (1, 60_000),
        "max_heartbeat_leak": (2, 100),
        "election_jitter_ms": (0, 600_000),
        "min_vote_interval_ms": (0, 600_000),
        "max_vote_interval_ms": (0, 600_000),
        "vote_round_timeout_ms": (1, 600_000),
        "tick_interval_ms": (1, 10_000),
        "max_append_bytes": (KiB, GiB),
        "max_append_entries": (1, 1_000_000),
        "max_inflight": (1, 1024),
        "max_uncommitted_bytes": (KiB, 16 * GiB),
        "max_entry_bytes": (KiB, GiB),
        "max_apply_bytes": (KiB, 16 * GiB),
        "max_apply_entries": (1, 1_000_000),
        "max_pending_reads": (1, 1_000_000),
        "snapshot_every": (1, 1_000_000_000),
        "compaction_keep": (0, 1_000_000_000),
        "snapshot_chunk_bytes": (KiB, GiB),
        "max_snapshot_bytes": (KiB, 1 << 40),
        "segment_bytes": (64 * KiB, 1 << 40),
        "max_message_bytes": (64 * KiB, INT32_MAX),
        "max_batch_messages": (1, 100_000),
        "send_queue_limit": (1, 10_000_000),
        "reconnect_min_ms": (1, 600_000),
        "reconnect_max_ms": (1, 600_000),
    },
    "StoreBackendConfig": {
        "lease_ms": (100, 600_000),
        "heartbeat_ms": (1, 600_000),
        "poll_ms": (1, 60_000),
        "snapshot_every": (1, 1_000_000_000),
        "max_batch_entries": (1, 1_000_000),
        "max_batch_bytes": (KiB, GiB),
        "max_read_entries": (1, 1_000_000),
        "statement_timeout_ms": (1, 600_000),
        "zk_tick_ms": (1, 60_000),
    },
    "BrokerConfig": {
        "broker_id": (1, (1 << 53)),
        "disk_stall_timeout_ms": (0, 600_000),
        "disk_stall_cooldown_s": (0, 86_400),
        "loop_stall_timeout_ms": (0, 600_000),
        "health_window_s": (0.05, 60),
        "slow_append_ms": (0.01, 600_000),
        "slow_fsync_ms": (0.01, 600_000),
        "slow_loop_lag_ms": (0.01, 600_000),
        "health_degrade_windows": (1, 3600),
        "health_recover_windows": (1, 3600),
        "min_in_sync_replicas": (1, 64),
        "min_in_sync_zones": (0, 16),
        "in_sync_replicas": (1, 64),
        "ack_timeout_s": (0.001, 3600),
        "flush_interval_ms": (1, 60_000),
        "max_message_bytes": (1, 64 * MiB),
        "max_batch_messages": (1, 10_000),
        "max_request_bytes": (KiB, 64 * MiB),
        "max_consume_count": (1, 10_000),
        "max_consume_bytes": (KiB, GiB),
        "max_consume_wait_ms": (0, 300_000),
        "max_waiting_consumes": (0, 100_000),
        "handover_timeout_ms": (100, 300_000),
        "master_switch_hold_ms": (0, 10_000),
        "max_fetch_connections": (1, 10_000),
        "max_fetch_connections_per_identity": (0, 10_000),
        "fetch_max_inflight_bytes": (KiB, 16 * GiB),
        "fetch_slow_reader_timeout_s": (0.1, 3600),
        "max_inflight_produce": (1, 100_000),
        "max_concurrent_rpcs": (16, 100_000),
        "route_interval_ms": (10, 600_000),
        "route_ttl_ms": (100, HOUR_MS),
        "sync_interval_ms": (10, HOUR_MS),
        "backoff_min_ms": (1, 600_000),
        "backoff_max_ms": (1, 600_000),
        "election_priority": (-INT32_MAX - 1, INT32_MAX),
        "heartbeat_timeout_ms": (100, 600_000),
        "max_clock_rate_drift": (0, 0.5),
        "hook_timeout_s": (0.001, 3600),
        "hook_concurrency": (1, 64),
    },
    "StoreConfig": {
        "segment_bytes": (64, 1 << 40),
        "flush_interval_ms": (1, 60_000),
        "max_message_bytes": (1, GiB),
        "max_batch_bytes": (KiB, INT32_MAX),
        "index_entries_per_file": (1, 100_000_000),
        "retention_hours": (0, 1_000_000),
        "max_topics": (1, 10_000_000),
        "max_read_messages": (1, 10_000_000),
        "quarantine_max_bytes": (0, 1 << 40),
    },
    "HAConfig": {
        "max_body_size": (KiB, INT32_MAX),
        "max_epoch_entries": (1, 10_000_000),
        "transfer_batch_size": (64, GiB),
        "read_chunk_size": (64, GiB),
        "transfer_hold_s": (0, 0.1),
        "heartbeat_interval_s": (0.001, 3600),
        "housekeeping_interval_s": (0.001, 3600),
        "handshake_timeout_s": (0.01, 3600),
        "connect_timeout_s": (0.01, 3600),
        "reconnect_backoff_min_s": (0.001, 3600),
        "reconnect_backoff_max_s": (0.001, 3600),
        "ha_max_time_slave_not_catchup_s": (0.01, DAY_S),
        "slave_stall_timeout_s": (0, 3600),
        "slave_slow_ack_ms": (0, 3_600_000),
        "slave_slow_windows": (1, 3600),
        "slave_recover_windows": (1, 3600),
        "sync_state_check_interval_s": (0.001, 3600),
        "proposal_timeout_s": (0.01, 3600),
        "proposal_backoff_min_s": (0.001, 3600),
        "proposal_backoff_max_s": (0.001, 3600),
        "in_sync_replicas": (1, 64),
        "min_in_sync_replicas": (1, 64),
        "min_in_sync_zones": (0, 16),
        "max_slaves": (1, 1024),
        "max_pending_handshakes": (1, 10_000),
        "rejection_log_interval_s": (0, DAY_S),
        "max_pending_waits": (1, 100_000_000),
        "write_buffer_high": (64 * KiB, INT32_MAX),
        "protocol_version": (0, 4),
        "digest_range_bytes": (64, GiB),
        "digest_history": (1, 1024),
        "digest_interval_s": (0.01, 3600),
        "digest_round_bytes": (64, 64 * GiB),
        "digest_catch_up_bytes": (64 * KiB, 64 * GiB),
    },
}


# Byte quantities whose name does not end in ``_bytes``; only these and ``*_bytes`` keys are shown in
# KiB/MiB/GiB (a count such as broker_id's bound 2**53 is not "8388608 GiB").
_BYTE_KEYS = frozenset({"transfer_batch_size", "read_chunk_size", "max_body_size", "write_buffer_high"})


def is_byte_key(key: str) -> bool:
    return key.endswith("_bytes") or key in _BYTE_KEYS


def _fmt(x: float, units: bool) -> str:
    if isinstance(x, float) and not x.is_integer():
        return repr(x)
    x = int(x)
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)) if units else ():
        if x >= size and x % size == 0:
            return f"{x // size} {unit}"
    return str(x)


def describe(r: Range, key: str = "") -> str:
    units = is_byte_key(key)
    return f"[{_fmt(r[0], units)}, {_fmt(r[1], units)}]"


def range_problem(table: str, key: str, value: Any) -> str | None:
    """Why ``value`` is not allowed for ``key`` of config table ``table`` (None: it is, or the key is
    not numeric)."""
    r = RANGES.get(table, {}).get(key)
    if r is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number in {describe(r, key)}, got {value!r}"
    if not r[0] <= value <= r[1]:
        return f"must be in {describe(r, key)}, got {value!r}"
    return None


def check_ranges(table: str, values: Mapping[str, Any], what: str) -> None:
    """Every value of ``values`` in its key's range; one ConfigError names every key that is not."""
    problems = [(k, p) for k, v in values.items() if (p := range_problem(table, k, v)) is not None]
    if problems:
        raise ConfigError("; ".join(f"{what} key {k!r} {p}" for k, p in problems),
                          keys=sorted(k for k, _ in problems), key=problems[0][0])
