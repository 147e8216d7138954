"""Replicated controller configuration: the keys that change what apply() decides.

They live in the state machine (changed only by committed UpdateControllerConfig entries) so
every node decides elections identically. Node-local process settings (timeouts of the gRPC
layer, ports) belong to ``autoswitch.controller.config``; the identity keys below can never be
changed at run time (RocketMQ's ``configBlackList`` answers NO_PERMISSION for them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoswitch.base.limits import MAX_REPLICAS_PER_GROUP

# key -> (type, default, min, max)
_SPEC: dict[str, tuple[type, Any, int | None, int | None]] = {
    # RocketMQ enableElectUncleanMaster: elect a replica outside SSS/eligible when nobody else is left.
    "enable_elect_unclean_master": (bool, False, None, None),
    # docs/design.md §4: keep replicas that hold every acked message electable after a failover.
    "enable_eligible_replicas": (bool, True, None, None),
    # The brokers' minInSyncReplicas: eligible replicas exist only while |SSS| < this. A broker
    # states its own in heartbeats; the smaller of the two decides (election.effective_min_in_sync).
    "min_in_sync_replicas": (int, 1, 1, MAX_REPLICAS_PER_GROUP),
    # docs/design.md §3: a group's first election waits for all registered replicas to be alive,
    # at most this long after the group's first ApplyBrokerId.
    "first_election_grace_ms": (int, 5000, 0, 600_000),
    # ... and never happens with fewer alive replicas than this before the grace period ends.
    "first_election_min_replicas": (int, 1, 1, 64),
    # Liveness, used by the leader's scan (replicated so every leader scans alike).
    "heartbeat_timeout_ms": (int, 10_000, 100, 600_000),
    "scan_interval_ms": (int, 5_000, 50, 600_000),
    "elect_master_max_retry_count": (int, 3, 0, 100),
    # Preferred masters (Kafka's auto.leader.rebalance.enable): the leader hands mastership back
    # to a group's preferred master once it has been alive and in the SyncStateSet this long.
    "auto_rebalance_masters": (bool, False, None, None),
    "rebalance_delay_ms": (int, 30_000, 0, 3_600_000),
    # ... at most this many groups at a time in the whole cluster (the rest wait, and say so).
    "rebalance_max_in_flight": (int, 1, 1, 64),
    # Gray failover (controller/failover/gray.py): the leader moves the master role off a master
    # that has reported itself degraded (slow disk or event loop) this long, to a healthy in-sync
    # slave; at most once per group per cool-down.
    "gray_failover": (bool, True, None, None),
    "gray_failover_delay_ms": (int, 5_000, 0, 3_600_000),
    "gray_failover_cooldown_ms": (int, 60_000, 0, 86_400_000),
}

# Keys added after the baseline feature level, with the level that introduced them. Below it they
# are refused (an older member would refuse them as unknown: the members must agree), and a
# snapshot or state hash leaves them out while they hold their default, so members of two
# releases hash the same state alike during a rolling upgrade.
KEY_LEVEL: dict[str, int] = {"rebalance_max_in_flight": 2}

# Process identity and storage: refused at run time with NO_PERMISSION.
BLACKLIST = frozenset({"config_black_list", "node_id", "peers", "data_dir", "listen", "raft"})

KEYS = frozenset(_SPEC)


class ConfigValueError(ValueError):
    pass


@dataclass
class SMConfig:
    enable_elect_unclean_master: bool = False
    enable_eligible_replicas: bool = True
    min_in_sync_replicas: int = 1
    first_election_grace_ms: int = 5000
    first_election_min_replicas: int = 1
    heartbeat_timeout_ms: int = 10_000
    scan_interval_ms: int = 5_000
    elect_master_max_retry_count: int = 3
    auto_rebalance_masters: bool = False
    rebalance_delay_ms: int = 30_000
    rebalance_max_in_flight: int = 1
    gray_failover: bool = True
    gray_failover_delay_ms: int = 5_000
    gray_failover_cooldown_ms: int = 60_000

    def to_strings(self) -> dict[str, str]:
        return {k: _fmt(getattr(self, k)) for k in sorted(_SPEC)}

    def snapshot_strings(self) -> dict[str, str]:
        """``to_strings`` without the keys of KEY_LEVEL that hold their default."""
        return {k: v for k, v in self.to_strings().items()
                if k not in KEY_LEVEL or getattr(self, k) != _SPEC[k][1]}

    def copy(self) -> SMConfig:
        return SMConfig(**{k: getattr(self, k) for k in _SPEC})

    def set(self, key: str, raw: str) -> None:
        setattr(self, key, parse_value(key, raw))

    @classmethod
    def from_strings(cls, values: dict[str, str]) -> SMConfig:
        cfg = cls()
        for k, v in values.items():
            if k in _SPEC:
                cfg.set(k, v)
        return cfg


def parse_value(key: str, raw: str) -> Any:
    """Parse one string value; ConfigValueError names the problem."""
    if key not in _SPEC:
        raise ConfigValueError(f"unknown config key {key!r}")
    typ, _default, lo, hi = _SPEC[key]
    s = raw.strip().lower()
    if typ is bool:
        if s not in ("true", "false", "1", "0"):
            raise ConfigValueError(f"{key} must be true or false, got {raw!r}")
        return s in ("true", "1")
    try:
        v = int(s)
    except ValueError:
        raise ConfigValueError(f"{key} must be an integer, got {raw!r}") from None
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ConfigValueError(f"{key} must be in [{lo}, {hi}], got {v}")
    return v


def _fmt(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)
