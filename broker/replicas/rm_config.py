"""What a ReplicasManager is configured with (docs/configuration.md, section 5)."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoswitch.broker.replicas.lease import LeaseConfig

from autoswitch.base.errors import ConfigError
from autoswitch.base.limits import MAX_NAME_LEN, MAX_ZONES


@dataclass(frozen=True)
class ReplicasConfig:
    cluster: str
    group: str  # brokerName
    broker_addr: str  # registered with the controller; clients and slaves find us by it
    controllers: tuple[str, ...]  # every controller node: heartbeats go to all of them
    heartbeat_interval_ms: int = 1000
    sync_interval_ms: int = 5000
    backoff_min_ms: int = 100
    backoff_max_ms: int = 5000
    election_priority: int = 0  # lower wins among equal (epoch, maxOffset), RocketMQ's rule
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    fixed_broker_id: int | None = None  # named by the broker's certificate (broker/<group>/<id>)
    # Stated in heartbeats: the fewest SyncStateSet members this broker acknowledges with as
    # master (its min_in_sync_replicas; 1 in ack mode "master"); 0 = not stated.
    min_in_sync_replicas: int = 0
    zone: str = ""   # the failure domain it runs in, stated in heartbeats ("" = none)
    # Stated in heartbeats: the zones its acks must span as master (0 = off); the controllers say
    # when an election leaves the group unable to keep that promise.
    min_in_sync_zones: int = 0

    def validate(self) -> ReplicasConfig:
        if len(self.zone) > MAX_NAME_LEN or not self.zone.isprintable():
            raise ConfigError(f"zone must be printable text of at most {MAX_NAME_LEN} characters", key="zone")
        if not self.controllers:
            raise ConfigError("at least one controller address is required", key="controllers")
        if not 0 <= self.min_in_sync_zones <= MAX_ZONES:
            raise ConfigError(f"min_in_sync_zones must be in [0, {MAX_ZONES}]", key="min_in_sync_zones")
        if not (10 <= self.heartbeat_interval_ms <= 60_000):
            raise ConfigError("heartbeat_interval_ms must be in [10, 60000]", key="heartbeat_interval_ms")
        if not (self.heartbeat_interval_ms <= self.sync_interval_ms <= 600_000):
            raise ConfigError("sync_interval_ms must be in [heartbeat_interval_ms, 600000]", key="sync_interval_ms")
        if not (1 <= self.backoff_min_ms <= self.backoff_max_ms <= 60_000):
            raise ConfigError("need 1 <= backoff_min_ms <= backoff_max_ms <= 60000", key="backoff_max_ms")
        if self.lease.heartbeat_timeout_ms <= self.heartbeat_interval_ms:
            raise ConfigError("heartbeat_timeout_ms must be > heartbeat_interval_ms", key="heartbeat_timeout_ms")
        self.lease.validate(self.heartbeat_interval_ms)
        return self
