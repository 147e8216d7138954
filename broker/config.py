"""Broker process configuration: TOML file + CLI overrides, validated once at start.

Every key is documented in docs/broker.md. Unknown keys are an error (a typo in a
config file must not silently fall back to a default). The ``[store]`` and ``[ha]``
tables are passed through to the storage and HA configs, which validate their own keys.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoswitch.base.addr import AddressError, split_hostport, split_hostport_list
from autoswitch.base.auth import check_exposure, parse_broker_identity
from autoswitch.base.config_check import check_values, refuse_unknown
from autoswitch.base.errors import ConfigError
from autoswitch.base.event_loop import EVENT_LOOPS
from autoswitch.base.limits import MAX_NAMESRVS, MAX_ZONES
from autoswitch.base.security_keys import SecurityKeys
from autoswitch.base.tls import certificate_identity, check_own_identity

ROLES = ("master", "slave", "fenced")
ACK_MODES = ("master", "all", "quorum")
FLUSH_MODES = ("sync", "async")

# Hard ceilings: a config may lower the limits, never raise them past these.
MAX_REQUEST_BYTES_CEILING = 64 * 1024 * 1024
MAX_BATCH_CEILING = 10_000
# Room for the protobuf framing, topic and msg_id around one body in a request.
FRAME_OVERHEAD_BYTES = 16 * 1024


def parse_hostport(value: str, what: str) -> tuple[str, int]:
    try:
        return split_hostport(value)
    except AddressError as e:
        raise ConfigError(f"{what}: {e}, got {value[:80]!r}", key=what) from None


@dataclass
class BrokerConfig(SecurityKeys):
    group: str = "DefaultBroker"
    cluster: str = "DefaultCluster"
    broker_id: int = 1
    role: str = "fenced"
    epoch: int | None = None
    listen: str = "127.0.0.1:10911"
    ha_listen: str = "127.0.0.1:10912"
    data_dir: str = ""
    master_ha: str | None = None
    master_addr: str | None = None
    ack_mode: str = "all"
    min_in_sync_replicas: int = 1
    # Zones the SyncStateSet members holding an ack must span (zone keys of the replicas, as the
    # controllers know them); 0 = off. Controller mode, ack mode all or quorum.
    min_in_sync_zones: int = 0
    in_sync_replicas: int = 2
    ack_timeout_s: float = 3.0
    # Durable by default (issue 58, item 9): an acknowledgement means "on disk" on every replica
    # that counted for it, so a power cut of a whole SyncStateSet loses nothing acknowledged.
    # "async" acknowledges from memory (RocketMQ's ASYNC_FLUSH, Kafka's default): an explicit trade,
    # docs/broker.md "Durable acknowledgements"; figures in bench/RESULTS.md.
    flush: str = "sync"
    flush_interval_ms: int = 500
    max_message_bytes: int = 4 * 1024 * 1024
    # RocketMQ's autoCreateTopicEnable: a write to a topic without settings creates it. Off: only
    # topics made by `admin topic-create` (or already in the log) take writes.
    auto_create_topics: bool = True
    max_batch_messages: int = 1000
    max_request_bytes: int = 32 * 1024 * 1024
    max_consume_count: int = 1000
    max_consume_bytes: int = 8 * 1024 * 1024
    max_consume_wait_ms: int = 30_000   # longest long-poll a Consume may ask for
    max_waiting_consumes: int = 128     # long polls held at once; more are answered at once
    # Controller mode: on SIGTERM a master first hands over to an in-sync slave (broker/replicas/handover.py).
    handover_on_shutdown: bool = True
    handover_timeout_ms: int = 5000
    # A produce redirected here as master of a newer MasterEpoch waits this long for this broker's
    # switch (role, first lease) instead of bouncing back NOT_MASTER; 0 = answer at once.
    master_switch_hold_ms: int = 500
    # A master whose disk operation has not returned after this long exits like a crash so the
    # controllers fail over at once (broker/stall_watch.py); 0 = off. Not within
    # disk_stall_cooldown_s of becoming master (at most one such move per group per cool-down).
    disk_stall_timeout_ms: int = 1000
    disk_stall_cooldown_s: float = 60.0
    # ... and whose event loop has not run for this long (a CPU-bound bug, a call blocking the
    # loop's thread) likewise; 0 = off.
    loop_stall_timeout_ms: int = 3000
    # Health signals (broker/health.py): per window of health_window_s, the median append and
    # fsync time and event-loop lag; a signal is slow after health_degrade_windows slow windows in
    # a row, healthy again after health_recover_windows healthy ones. Reported in heartbeats; the
    # controllers move the master role off a degraded master (docs/broker.md "A slow master").
    health_window_s: float = 1.0
    slow_append_ms: float = 100.0
    slow_fsync_ms: float = 250.0
    slow_loop_lag_ms: float = 250.0
    health_degrade_windows: int = 5
    health_recover_windows: int = 10
    # The fetch port (broker/fetch_server.py): consumers read record runs over plain TCP/TLS; "" = off.
    fetch_listen: str = ""
    max_fetch_connections: int = 256
    # Consumer groups bound to the identities that may commit for them (with authorization): a
    # group name or a prefix pattern ("orders-*") -> identities ("reader/orders-app"). A group
    # bound nowhere belongs to the identity of its first commit, unless
    # consumer_group_owners_required refuses it (docs/security.md "Consumer groups").
    consumer_group_owners: dict[str, list[str]] = field(default_factory=dict)
    consumer_group_owners_required: bool = False
    # Of those, the most one identity (a certificate's name or a token's; without authorization the
    # peer's host) may hold: one reader or producer cannot take every slot (issue 59). 0 = a
    # quarter of max_fetch_connections. Without authorization nobody is named: no quota.
    max_fetch_connections_per_identity: int = 0
    # Bytes of fetch-port replies not yet taken by their readers, over all connections; a reader
    # that leaves a reply unread this long is closed (docs/fetch-protocol.md "Slow readers").
    fetch_max_inflight_bytes: int = 64 << 20
    fetch_slow_reader_timeout_s: float = 10.0
    # Prometheus /metrics, /healthz, /readyz on this HOST:PORT (autoswitch/base/observe.py); "" = off.
    metrics_listen: str = ""
    # The HTTP surface (/metrics, and a controller's status page) has its own exposure setting: it
    # may listen off loopback with metrics_allow_remote, without allow_insecure (which would drop
    # every other listener's check too). metrics_token_file: a file whose first line is a bearer
    # token every path but /healthz and /readyz then needs; identities (admin actors and their
    # requests) are shown only to callers with it (docs/security.md "The HTTP surface").
    metrics_allow_remote: bool = False
    metrics_token_file: str = ""
    # The event loop the broker runs on: uvloop or asyncio (autoswitch/base/event_loop.py).
    event_loop: str = "uvloop"
    max_inflight_produce: int = 256
    max_concurrent_rpcs: int = 1024
    store: dict[str, Any] = field(default_factory=dict)
    ha: dict[str, Any] = field(default_factory=dict)
    # Controller mode (docs/replicas-manager.md): a non-empty ``controllers`` list makes the
    # controller decide brokerId and role; ``role``/``broker_id``/``epoch`` are then refused.
    controllers: list[str] = field(default_factory=list)
    namesrv: str | None = None
    route_interval_ms: int = 1000
    route_ttl_ms: int = 5000
    heartbeat_interval_ms: int | None = None  # None: min(1000, lease / 3)
    sync_interval_ms: int = 5000
    backoff_min_ms: int = 100
    backoff_max_ms: int = 2000
    election_priority: int = 0
    # the failure domain (availability zone, rack, room) this broker runs in; stated in heartbeats
    # ("" = none): zone-preferring elections and zone-loss explanations (docs/operations.md "Zones")
    zone: str = ""
    lease_enabled: bool = True
    master_lease_ms: int | None = None  # None: 60% of heartbeat_timeout_ms (6000 for 10000)
    heartbeat_timeout_ms: int = 10000
    max_clock_rate_drift: float = 0.01
    lease_safety_ms: int | None = None  # None: 20% of heartbeat_timeout_ms
    role_change_script: str | None = None
    hook_timeout_s: float = 5.0
    hook_concurrency: int = 2

    def validate(self) -> BrokerConfig:
        self.validate_security()
        owners = self.consumer_group_owners
        if not isinstance(owners, dict) or len(owners) > 10_000 or not all(
                isinstance(g, str) and 0 < len(g) <= 255 and g.isprintable() and isinstance(ids, list | tuple)
                and 0 < len(ids) <= 64 and all(isinstance(i, str) and 0 < len(i) <= 255 and i.isprintable()
                                               for i in ids)
                for g, ids in owners.items()):
            raise ConfigError("consumer_group_owners must map group names or prefix patterns (\"orders-*\") to "
                              "lists of identities (\"reader/app\"): at most 10000 groups of 64 identities",
                              key="consumer_group_owners")
        check_exposure(self.callers_authenticated, self.auth, self.allow_insecure,
                       [self.listen, self.ha_listen, *([self.fetch_listen] if self.fetch_listen else [])])
        # /metrics is plain HTTP without authentication, whatever the gRPC side has
        if self.metrics_listen:
            parse_hostport(self.metrics_listen, "metrics_listen")
        check_exposure(False, False, self.allow_insecure or self.metrics_allow_remote, [self.metrics_listen])
        if self.metrics_token_file:
            from autoswitch.base.config_check import check_path
            from autoswitch.base.observe import read_http_token

            read_http_token(check_path(self.metrics_token_file, "metrics_token_file"))
        if not self.group or "#" in self.group:
            raise ConfigError("group must be a non-empty name without '#'", key="group")
        if self.broker_id < 1:
            raise ConfigError("broker_id must be >= 1", key="broker_id")
        if self.role not in ROLES:
            raise ConfigError(f"role must be one of {ROLES}", key="role", value=self.role)
        if self.ack_mode not in ACK_MODES:
            raise ConfigError(f"ack_mode must be one of {ACK_MODES}", key="ack_mode", value=self.ack_mode)
        if self.event_loop not in EVENT_LOOPS:
            raise ConfigError(f"event_loop must be one of {EVENT_LOOPS}", key="event_loop", value=self.event_loop)
        if self.flush not in FLUSH_MODES:
            raise ConfigError(f"flush must be one of {FLUSH_MODES}", key="flush", value=self.flush)
        if not self.data_dir:
            raise ConfigError("data_dir is required", key="data_dir")
        parse_hostport(self.listen, "listen")
        parse_hostport(self.ha_listen, "ha_listen")
        if self.fetch_listen:
            parse_hostport(self.fetch_listen, "fetch_listen")
        if not 1 <= self.max_fetch_connections <= 10_000:
            raise ConfigError("max_fetch_connections must be in [1, 10000]", key="max_fetch_connections")
        if not 0 <= self.max_fetch_connections_per_identity <= self.max_fetch_connections:
            raise ConfigError("max_fetch_connections_per_identity must be in [0, max_fetch_connections]",
                              key="max_fetch_connections_per_identity")
        if self.fetch_max_inflight_bytes < self.max_consume_bytes:
            raise ConfigError("fetch_max_inflight_bytes must be >= max_consume_bytes (one largest reply must fit)",
                              key="fetch_max_inflight_bytes")
        if self.role == "slave" and not self.master_ha:
            raise ConfigError("role slave needs master_ha", key="master_ha")
        if self.master_ha:
            parse_hostport(self.master_ha, "master_ha")
        if self.master_addr:
            parse_hostport(self.master_addr, "master_addr")
        if self.epoch is not None and self.epoch < 1:
            raise ConfigError("epoch must be >= 1", key="epoch")
        if self.min_in_sync_replicas < 1:
            raise ConfigError("min_in_sync_replicas must be >= 1", key="min_in_sync_replicas")
        if self.in_sync_replicas < 1:
            raise ConfigError("in_sync_replicas must be >= 1", key="in_sync_replicas")
        if not 0 <= self.min_in_sync_zones <= MAX_ZONES:
            raise ConfigError(f"min_in_sync_zones must be in [0, {MAX_ZONES}]", key="min_in_sync_zones")
        if self.min_in_sync_zones and (self.ack_mode == "master" or not self.controllers or not self.zone):
            raise ConfigError("min_in_sync_zones needs controller mode (the controllers name the replicas' zones), "
                              "ack mode all or quorum, and this broker's own zone", key="min_in_sync_zones")
        if not (0 < self.ack_timeout_s <= 60):
            raise ConfigError("ack_timeout_s must be in (0, 60]", key="ack_timeout_s")
        if not (1 <= self.flush_interval_ms <= 60_000):
            raise ConfigError("flush_interval_ms must be in [1, 60000]", key="flush_interval_ms")
        if not (1024 <= self.max_request_bytes <= MAX_REQUEST_BYTES_CEILING):
            raise ConfigError("max_request_bytes must be in [1 KiB, 64 MiB]", key="max_request_bytes")
        if not (1 <= self.max_message_bytes <= self.max_request_bytes - FRAME_OVERHEAD_BYTES):
            raise ConfigError("max_message_bytes must be in [1, max_request_bytes - 16 KiB]", key="max_message_bytes")
        if not (1 <= self.max_batch_messages <= MAX_BATCH_CEILING):
            raise ConfigError("max_batch_messages must be in [1, 10000]", key="max_batch_messages")
        if not (1 <= self.max_consume_count <= MAX_BATCH_CEILING):
            raise ConfigError("max_consume_count must be in [1, 10000]", key="max_consume_count")
        if self.max_consume_bytes < 1024:
            raise ConfigError("max_consume_bytes must be >= 1 KiB", key="max_consume_bytes")
        if not (self.disk_stall_timeout_ms == 0 or 200 <= self.disk_stall_timeout_ms <= 600_000):
            raise ConfigError("disk_stall_timeout_ms must be 0 (off) or in [200, 600000]", key="disk_stall_timeout_ms")
        if not (0 <= self.disk_stall_cooldown_s <= 86_400):
            raise ConfigError("disk_stall_cooldown_s must be in [0, 86400]", key="disk_stall_cooldown_s")
        if not (self.loop_stall_timeout_ms == 0 or 500 <= self.loop_stall_timeout_ms <= 600_000):
            raise ConfigError("loop_stall_timeout_ms must be 0 (off) or in [500, 600000]", key="loop_stall_timeout_ms")
        if not (100 <= self.handover_timeout_ms <= 300_000):
            raise ConfigError("handover_timeout_ms must be in [100, 300000]", key="handover_timeout_ms")
        if not (0 <= self.max_consume_wait_ms <= 300_000):
            raise ConfigError("max_consume_wait_ms must be in [0, 300000]", key="max_consume_wait_ms")
        if not (0 <= self.max_waiting_consumes <= 100_000):
            raise ConfigError("max_waiting_consumes must be in [0, 100000]", key="max_waiting_consumes")
        # A Consume reply must fit in one gRPC message with its per-message overhead.
        self.max_consume_bytes = min(self.max_consume_bytes, self.max_request_bytes // 2)
        if not (1 <= self.max_inflight_produce <= 100_000):
            raise ConfigError("max_inflight_produce must be in [1, 100000]", key="max_inflight_produce")
        if not (16 <= self.max_concurrent_rpcs <= 100_000):
            raise ConfigError("max_concurrent_rpcs must be in [16, 100000]", key="max_concurrent_rpcs")
        # Long polls hold RPC slots: at most half of them, so producers always find one.
        self.max_waiting_consumes = min(self.max_waiting_consumes, self.max_concurrent_rpcs // 2)
        if not isinstance(self.store, dict) or not isinstance(self.ha, dict):
            raise ConfigError("[store] and [ha] must be tables")
        if isinstance(self.controllers, str):
            self.controllers = [c.strip() for c in self.controllers.split(",") if c.strip()]
        if not isinstance(self.controllers, list) or len(self.controllers) > 64:
            raise ConfigError("controllers must be a list of at most 64 HOST:PORT", key="controllers")
        for c in self.controllers:
            parse_hostport(c, "controllers")
        if self.namesrv:
            # RocketMQ's namesrvAddr list: the route goes to every name server, so losing a
            # machine's name server loses no route.
            try:
                self.namesrv = ",".join(split_hostport_list(self.namesrv, MAX_NAMESRVS))
            except AddressError as e:
                raise ConfigError(f"namesrv: {e}, got {str(self.namesrv)[:80]!r}", key="namesrv") from None
        if not (100 <= self.route_interval_ms <= 60_000) or self.route_ttl_ms <= self.route_interval_ms:
            raise ConfigError("need 100 <= route_interval_ms <= 60000 and route_ttl_ms > route_interval_ms",
                              key="route_interval_ms")
        check_own_identity("broker", self.tls.cert)
        scope = self.certificate_scope
        if scope is not None:
            # Peers hold us to the group and brokerId our certificate names: start as something
            # else and every call would be refused, so refuse to start instead, saying why.
            if scope[0] != self.group:
                raise ConfigError(f"the certificate names group {scope[0]!r}, the config {self.group!r}",
                                  key="group")
            if not self.controller_mode and scope[1] != self.broker_id:
                raise ConfigError(f"the certificate names brokerId {scope[1]}, the config {self.broker_id}",
                                  key="broker_id")
        return self

    @property
    def certificate_scope(self) -> tuple[str, int] | None:
        """(group, brokerId) when our certificate's CN is ``broker/<group>/<brokerId>``."""
        if not self.tls.cert:
            return None
        cn = certificate_identity(self.tls.cert)
        return parse_broker_identity(cn) if cn else None

    @property
    def controller_mode(self) -> bool:
        return bool(self.controllers)

    @property
    def known_broker_id(self) -> int | None:
        """The brokerId a log line carries before registration: the configured one in static
        mode; None in controller mode until the controller names it (``broker_id``'s unused
        default, 1, once tagged every broker's start as broker 1's)."""
        return None if self.controller_mode else self.broker_id

    def replicas_config(self) -> Any:
        """The ReplicasManager's config (controller mode), validated."""
        from autoswitch.broker.replicas.lease import LeaseConfig
        from autoswitch.broker.replicas.replicas_manager import ReplicasConfig

        hto = self.heartbeat_timeout_ms
        lease_ms = self.master_lease_ms if self.master_lease_ms is not None else hto * 6 // 10
        safety = self.lease_safety_ms if self.lease_safety_ms is not None else hto // 5
        interval = self.heartbeat_interval_ms
        if interval is None:
            interval = max(10, min(1000, lease_ms // 3))
        lease = LeaseConfig(
            enabled=self.lease_enabled, master_lease_ms=lease_ms,
            heartbeat_timeout_ms=hto, max_clock_rate_drift=self.max_clock_rate_drift,
            safety_ms=safety,
        )
        return ReplicasConfig(
            cluster=self.cluster, group=self.group, broker_addr=self.listen, controllers=tuple(self.controllers),
            heartbeat_interval_ms=interval, sync_interval_ms=max(self.sync_interval_ms, interval),
            backoff_min_ms=self.backoff_min_ms, backoff_max_ms=self.backoff_max_ms,
            election_priority=self.election_priority, lease=lease, zone=self.zone,
            fixed_broker_id=scope[1] if (scope := self.certificate_scope) is not None else None,
            min_in_sync_replicas=self.min_in_sync_replicas if self.ack_mode != "master" else 1,
            min_in_sync_zones=self.min_in_sync_zones,
        ).validate()

    def store_config(self) -> Any:
        """The ``[store]`` table as the store's config (unknown keys refused). The store must accept
        every body the broker accepts; it is never lowered to the broker's limit, because a slave's
        store must also take what its master (maybe configured with a larger limit) replicates."""
        from autoswitch.broker.storage.store import StoreConfig

        values = dict(self.store)
        if self.max_message_bytes > StoreConfig.max_message_bytes and "max_message_bytes" not in values:
            values["max_message_bytes"] = self.max_message_bytes
        return _table(StoreConfig, values, "store")

    def ha_config(self) -> Any:
        """The ``[ha]`` table as HA's config, validated; the broker-level ack settings are the single
        source of truth for HA's ack rule (setting them in ``[ha]`` is refused)."""
        from autoswitch.ha.config import HAConfig

        values = dict(self.ha)
        clash = {"ack_mode", "in_sync_replicas", "min_in_sync_replicas", "min_in_sync_zones"} & set(values)
        if clash:
            raise ConfigError(f"set {sorted(clash)} at the broker level, not in [ha]", keys=sorted(clash))
        values["ack_mode"] = HA_ACK_MODE[self.ack_mode]
        values["in_sync_replicas"] = self.in_sync_replicas
        values["min_in_sync_replicas"] = self.min_in_sync_replicas
        values["min_in_sync_zones"] = self.min_in_sync_zones
        return _table(HAConfig, values, "ha").validate()

    def hook_config(self) -> Any:
        from autoswitch.broker.replicas.hooks import HookConfig

        return HookConfig(role_change_script=self.role_change_script, hook_timeout_s=self.hook_timeout_s,
                          hook_concurrency=self.hook_concurrency).validate()

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)


_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig)}
# Broker config names -> HAConfig.ack_mode values.
HA_ACK_MODE = {"master": "master", "all": "all", "quorum": "in_sync_replicas"}


def _table(cls: type, values: dict[str, Any], what: str) -> Any:
    """A config dataclass from a TOML table, refusing unknown keys."""
    values = check_values(cls, values, f"[{what}]")
    try:
        return cls(**values)
    except TypeError as e:
        raise ConfigError(f"bad [{what}] config: {e}") from e


def load_config(path: str | Path | None, overrides: dict[str, Any]) -> BrokerConfig:
    """File values first, then every non-None override; then validate."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except FileNotFoundError as e:
            raise ConfigError(f"config file not found: {path}", path=str(path)) from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}", path=str(path)) from e
        # A [broker] table is accepted so one file can hold several components; broker keys left
        # outside it (e.g. a top-level [store] next to [broker]) would be ignored, so they are refused.
        if isinstance(raw.get("broker"), dict):
            stray = sorted(k for k in raw if k != "broker" and k.replace("-", "_") in _FIELDS)
            if stray:
                raise ConfigError(f"broker keys {stray} in {path} sit outside the [broker] table "
                                  "(use [broker.store] / [broker.ha])", keys=stray, path=str(path))
            raw = raw["broker"]
        from_file = {key.replace("-", "_"): value for key, value in raw.items()}
        refuse_unknown(f"broker config ({path})", from_file, _FIELDS)
        values.update(from_file)
    for k, v in overrides.items():
        if v is None:
            continue
        refuse_unknown("broker config", [k], _FIELDS)
        values[k] = v
    if isinstance(values.get("namesrv"), list) and all(isinstance(a, str) for a in values["namesrv"]):
        values["namesrv"] = ",".join(values["namesrv"])     # `namesrv = ["h1:9876", "h2:9876"]`
    values = check_values(BrokerConfig, values, "broker config")
    try:
        cfg = BrokerConfig(**values)
    except TypeError as e:
        raise ConfigError(f"bad config: {e}") from e
    _check_types(cfg)
    if cfg.controllers:
        # The controller decides identity and role; a static one next to it would be ignored
        # silently or fight the controller.
        for k in ("role", "broker_id", "epoch", "master_ha", "master_addr"):
            if k in values and values[k] != _FIELDS[k].default:
                raise ConfigError(f"{k!r} is static-role mode; it cannot be combined with controllers "
                                  "(the controller decides brokerId and role)", key=k)
    cfg = cfg.validate()
    if cfg.controllers:
        cfg.replicas_config()
        cfg.hook_config()
    return cfg


def _check_types(cfg: BrokerConfig) -> None:
    for name, f in _FIELDS.items():
        v = getattr(cfg, name)
        t = f.type
        if v is None and "None" in str(t):
            continue
        if name == "controllers" and isinstance(v, str):
            continue
        if "bool" in str(t):
            if not isinstance(v, bool):
                raise ConfigError(f"config key {name!r} must be a bool", key=name)
            continue
        kinds: dict[str, type | tuple[type, ...]] = {"int": int, "float": (int, float), "str": str}
        want = kinds.get(str(t).split(" ")[0].split("|")[0].strip())
        if want is not None and (not isinstance(v, want) or isinstance(v, bool)):
            raise ConfigError(f"config key {name!r} must be {str(t)}, got {type(v).__name__}", key=name)
