"""Controller process configuration: defaults, TOML file, CLI overrides.

Precedence: built-in default < TOML file (``[controller]`` table, or top level) < command line.
Every key is documented in docs/operations-controller.md. Unknown keys are a ConfigError,
not silently ignored, so a typo cannot leave a safety timeout at its default unnoticed.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoswitch.controller.state import sm_config

from autoswitch.base.addr import AddressError, split_hostport
from autoswitch.base.auth import check_exposure
from autoswitch.base.config_check import check_path, check_values, refuse_unknown
from autoswitch.base.errors import ConfigError
from autoswitch.base.ranges import check_ranges
from autoswitch.base.security_keys import SecurityKeys

if TYPE_CHECKING:
    from autoswitch.controller.store.config import StoreBackendConfig

# Keys an operator may change at runtime with `admin update-controller-config` (node-local,
# not persisted, like RocketMQ's updateControllerConfig which is sent to every controller).
# Keys that decide elections (heartbeat timeout, scan interval, unclean election, ...) are NOT here:
# they are replicated state-machine config (controller/state/sm_config.py), set initially from the
# [controller] table (must match on every node) and changed through Raft by UpdateControllerConfig.
RUNTIME_KEYS = frozenset(
    {
        "notify_broker_role_changed",
        "peer_query_timeout_s",
        "propose_timeout_s",
        "read_timeout_s",
    }
)


@dataclass
class ControllerConfig(SecurityKeys):
    node_id: str = ""
    peers: dict[str, str] = field(default_factory=dict)   # node id -> host:port (gRPC)
    data_dir: str = ""
    listen: str = ""                   # default: this node's address in peers
    # Raft peer addresses (node id -> host:port), a listener separate from the client port. Empty:
    # Raft shares the client port (older deployments; logged as a warning at start).
    raft_peers: dict[str, str] = field(default_factory=dict)
    # Mixed into the cluster id (with the member names), like etcd's initial-cluster-token: two
    # clusters with the same node names but different tokens refuse each other's messages.
    # "" = the cluster our TLS certificate is bound to (random per `certs init`), else "autoswitch".
    cluster_token: str = ""
    # The Raft cluster id; "" = derived from cluster_token and the members of `peers` at bootstrap.
    # A node that joins a running cluster (`join`) is given it (`admin add-controller` prints it),
    # and so is a member whose `peers` list no longer names the bootstrap members.
    cluster_id: str = ""
    # Start empty and join a running cluster: this node knows no members, never campaigns, and
    # takes its configuration from the leader that added it (`admin add-controller`). `peers`
    # (and `raft_peers`) name the members it may talk to, itself included.
    join: bool = False
    # Liveness queries to the other controller nodes (the majority rule).
    peer_query_timeout_s: float = 0.5
    notify_broker_role_changed: bool = True
    # RocketMQ's remoting protocol for unmodified RocketMQ 5.1.1+ brokers and mqadmin
    # (docs/rocketmq.md): HOST:PORT to listen on ("" = off); remoting_peers names every member's
    # remoting address (node id -> HOST:PORT), which a broker is sent to find the leader. The port
    # has no authentication: a public address needs remoting_allow_public; remoting_admin = false
    # refuses mqadmin's writes (electMaster, cleanBrokerMetadata, updateControllerConfig) there.
    remoting_listen: str = ""
    remoting_peers: dict[str, str] = field(default_factory=dict)
    remoting_admin: bool = True
    remoting_allow_public: bool = False
    # Request handling limits.
    propose_timeout_s: float = 3.0
    read_timeout_s: float = 2.0
    max_message_bytes: int = 1 << 20
    max_concurrent_rpcs: int = 10_000   # includes open WatchReplicaInfo/heartbeat streams
    max_watchers: int = 4096
    # Crash-fast failover (docs/controller.md): a broker's closed session stream counts as its
    # death at once, for brokers whose writes wait for every SyncStateSet member (ack mode all).
    fast_failover: bool = True
    max_broker_sessions: int = 2048     # session streams per node; they hold RPC slots too
    # Preferred masters: how long the master gets to hand over to the preferred one (its drain).
    rebalance_handover_timeout_ms: int = 5000
    # The online state hash check (docs/controller.md "State hash check"): the leader proposes a
    # CheckStateHash marker this often; every member hashes its state where it applies it and
    # compares with the other members. 0 = off.
    state_check_interval_s: float = 60.0
    # Prometheus /metrics, /healthz, /readyz on this HOST:PORT (autoswitch/base/observe.py); "" = off.
    metrics_listen: str = ""
    # The HTTP surface (/metrics, and a controller's status page) has its own exposure setting: it
    # may listen off loopback with metrics_allow_remote, without allow_insecure (which would drop
    # every other listener's check too). metrics_token_file: a file whose first line is a bearer
    # token every path but /healthz and /readyz then needs; identities (admin actors and their
    # requests) are shown only to callers with it (docs/security.md "The HTTP surface").
    metrics_allow_remote: bool = False
    metrics_token_file: str = ""
    # Sentinel-style alerts (controller/server/alerts.py): the leader runs this executable for each alert.
    notification_script: str = ""
    notification_timeout_s: float = 10.0
    max_alerts_in_flight: int = 8
    watch_queue_size: int = 64
    max_groups_per_query: int = 100_000
    events_max_lines_per_call: int = 10_000
    # What replicates the controller's log (controller/consensus.py): "raft" (our Raft among the
    # peers; the default and the embedded choice), "sql" (a lock row and a log table in a SQL
    # database), "etcd" (a leased leader key and log keys in etcd) or "zookeeper" (an ephemeral
    # /controller znode and a fenced log, Kafka style); the [store] table says where.
    backend: str = "raft"
    # The [raft] table, passed through to RaftConfig by field name.
    raft: dict[str, Any] = field(default_factory=dict)
    # The [store] table (controller/store/config.py StoreBackendConfig), for a store backend.
    store: dict[str, Any] = field(default_factory=dict)
    # Initial replicated state-machine config (sm_config.KEYS -> string value); same on every node.
    sm: dict[str, str] = field(default_factory=dict)

    def validate(self) -> None:
        if not self.node_id:
            raise ConfigError("node_id is required")
        for key in ("metrics_token_file", "auth_tokens_file", "data_dir", "notification_script"):
            if getattr(self, key, ""):
                check_path(getattr(self, key), key)
        if self.raft:
            # the [controller.raft] table becomes RaftConfig(**raft): its keys and types are checked
            # here, named, not met as a TypeError at start (issue 59, item 5)
            from autoswitch.controller.raft.config import RaftConfig

            check_values(RaftConfig, self.raft, "[controller.raft]")
        check_ranges("ControllerConfig", {f.name: getattr(self, f.name) for f in dataclasses.fields(self)},
                     "controller config")
        self._validate_backend()
        if self.node_id not in self.peers:
            raise ConfigError(f"node_id {self.node_id!r} is not in peers", peers=sorted(self.peers))
        self._validate_remoting()
        if not self.data_dir:
            raise ConfigError("data_dir is required")
        for nid, addr in self.peers.items():
            _split_addr(addr, f"peers[{nid}]")
        if self.raft_peers:
            if set(self.raft_peers) != set(self.peers):
                raise ConfigError("raft_peers must name the same nodes as peers",
                                  peers=sorted(self.peers), raft_peers=sorted(self.raft_peers))
            for nid, addr in self.raft_peers.items():
                _split_addr(addr, f"raft_peers[{nid}]")
            clash = set(self.raft_peers.values()) & (set(self.peers.values()) | {self.listen})
            if clash:
                raise ConfigError(f"raft_peers must differ from the client addresses: {sorted(clash)}")
        if len(self.cluster_token) > 255:
            raise ConfigError("cluster_token must be at most 255 characters", key="cluster_token")
        if self.cluster_id and not (len(self.cluster_id) == 16 and all(c in "0123456789abcdef" for c in self.cluster_id)):
            raise ConfigError("cluster_id must be 16 lowercase hex digits (as get-controller-metadata shows it)",
                              key="cluster_id")
        if self.join and not self.cluster_id:
            raise ConfigError("join = true needs the running cluster's cluster_id (admin add-controller prints it)",
                              key="join")
        if self.peer_query_timeout_s <= 0:
            raise ConfigError("peer_query_timeout_s must be > 0")
        if not 1024 <= self.max_message_bytes <= 64 << 20:
            raise ConfigError("max_message_bytes must be in [1 KiB, 64 MiB]")
        if not 0 < self.max_watchers <= self.max_concurrent_rpcs // 2:
            raise ConfigError("max_watchers must be in (0, max_concurrent_rpcs / 2]: streams hold RPC slots")
        if not 0 < self.max_broker_sessions <= self.max_concurrent_rpcs // 4:
            raise ConfigError("max_broker_sessions must be in (0, max_concurrent_rpcs / 4]: sessions hold RPC slots",
                              key="max_broker_sessions")
        if not 0 < self.notification_timeout_s <= 300 or not 1 <= self.max_alerts_in_flight <= 64:
            raise ConfigError("notification_timeout_s must be in (0, 300] and max_alerts_in_flight in [1, 64]",
                              key="notification_timeout_s")
        if self.notification_script and not (os.path.isfile(self.notification_script)
                                             and os.access(self.notification_script, os.X_OK)):
            raise ConfigError(f"notification_script {self.notification_script!r} is not an executable file",
                              key="notification_script")
        if not (self.state_check_interval_s == 0 or 0.1 <= self.state_check_interval_s <= 86_400):
            raise ConfigError("state_check_interval_s must be 0 (off) or in [0.1, 86400]", key="state_check_interval_s")
        if not 100 <= self.rebalance_handover_timeout_ms <= 300_000:
            raise ConfigError("rebalance_handover_timeout_ms must be in [100, 300000]", key="rebalance_handover_timeout_ms")
        if self.propose_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ConfigError("timeouts must be > 0")
        self.validate_security()
        if self.tls_cert:
            from autoswitch.base.tls import check_own_identity

            check_own_identity("controller", self.tls_cert, self.node_id)
        if self.tls.enabled and self.backend == "raft":
            if self.cert_cluster is None:
                raise ConfigError(f"the certificate {self.tls_cert!r} is bound to no controller cluster: Raft peers "
                                  "must prove which cluster they belong to (a URI SAN urn:autoswitch:cluster:<name>; "
                                  "`autoswitch certs init --cluster NAME` issues it)", key="tls_cert")
        if self.tls.enabled and not self.tls_require_client_cert and not self.raft_peers:
            raise ConfigError("tls_require_client_cert = false needs raft_peers: Raft peers must prove their names "
                              "with certificates, on a listener of their own", key="tls_require_client_cert")
        check_exposure(self.callers_authenticated, self.auth, self.allow_insecure,
                       [self.listen_addr, *self.raft_peers.values()])
        # /metrics and the status page are plain HTTP without authentication, whatever the gRPC side has
        if self.metrics_listen:
            _split_addr(self.metrics_listen, "metrics_listen")
        check_exposure(False, False, self.allow_insecure or self.metrics_allow_remote, [self.metrics_listen])
        if self.metrics_token_file:
            from autoswitch.base.observe import read_http_token

            read_http_token(self.metrics_token_file)

    def _validate_remoting(self) -> None:
        if not self.remoting_listen:
            if self.remoting_peers:
                raise ConfigError("remoting_peers is set but remoting_listen is not")
            return
        _split_addr(self.remoting_listen, "remoting_listen")
        check_remoting_listen(self.remoting_listen, self.remoting_allow_public)
        if len(self.peers) > 1 or self.remoting_peers:
            missing = sorted(set(self.peers) - set(self.remoting_peers))
            if missing:
                raise ConfigError("remoting_peers must name every member's remoting address (a RocketMQ broker "
                                  "is sent the leader's)", missing=missing)
            for n, a in self.remoting_peers.items():
                _split_addr(a, f"remoting_peers.{n}")

    def _validate_backend(self) -> None:
        from autoswitch.controller.consensus import BACKENDS

        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}", key="backend")
        if self.backend == "raft":
            if self.store:
                raise ConfigError("a [store] table needs backend = \"sql\" (the raft backend keeps its own log)",
                                  key="store")
            return
        if self.join or self.raft_peers:
            raise ConfigError(f"join and raft_peers are Raft settings; backend = {self.backend!r} has static "
                              "membership (the peers) and no Raft listener", key="backend")
        from autoswitch.controller.store.base import require_backend

        require_backend(self.backend)
        store = self.store_config
        store.validate()
        scheme = {"etcd": "etcd://", "zookeeper": "zookeeper://"}
        url = store.resolved_url()
        wanted = scheme.get(self.backend)
        if (wanted and not url.startswith(wanted)) or (not wanted and url.startswith(tuple(scheme.values()))):
            raise ConfigError(f"backend = {self.backend!r} needs a [store] url starting with "
                              f"{wanted or 'a SQLAlchemy dialect (not etcd:// or zookeeper://)'}", key="url")
        # The lease argument assumes an election commits within a controller's hold (3 x the
        # heartbeat timeout) of the opinions it used; a store adds up to its fence bound (a leader
        # paused mid-write whose write the store still takes) and its commit delay (the COMMIT
        # after the fence; for SQL also the idle gap before it, which the server bounds) to that
        # delay (docs/controller.md "Store backends"). Keep what the store adds within one
        # heartbeat timeout.
        timeout = sm_config.parse_value("heartbeat_timeout_ms", self.sm.get("heartbeat_timeout_ms", "10000"))
        added = store.fence_bound_ms(self.backend) + store.commit_delay_ms(self.backend)
        if added > timeout:
            raise ConfigError(f"[store] the {self.backend} fence bound ({store.fence_bound_ms(self.backend)} ms for "
                              f"lease_ms {store.lease_ms}) + its commit delay ({store.commit_delay_ms(self.backend)} "
                              f"ms from statement_timeout_ms {store.statement_timeout_ms}) = {added} must not exceed "
                              f"heartbeat_timeout_ms ({timeout}): a paused leader's election could commit after the "
                              "controllers' lease holds ran out", key="lease_ms")

    @property
    def store_config(self) -> StoreBackendConfig:
        from autoswitch.controller.store.config import StoreBackendConfig

        try:
            return StoreBackendConfig(**self.store)
        except TypeError as e:
            raise ConfigError(f"bad [store] config: {e}") from None

    @property
    def listen_addr(self) -> str:
        return self.listen or self.peers[self.node_id]

    @property
    def cert_cluster(self) -> str | None:
        """The cluster our certificate is bound to (None without TLS or without a binding)."""
        from autoswitch.base.tls import certificate_cluster

        return certificate_cluster(self.tls_cert) if self.tls_cert else None

    @property
    def effective_cluster_token(self) -> str:
        return self.cluster_token or self.cert_cluster or "autoswitch"

    @property
    def raft_cluster_id(self) -> str:
        return self.cluster_id or cluster_id(self.effective_cluster_token, self.peers)

    def bootstrap_membership(self):
        """Every node of ``peers`` a voter, with its addresses; empty for a node that joins."""
        from autoswitch.controller.consensus.membership import Member, Membership

        if self.join:
            return Membership()
        return Membership({n: Member(a, self.raft_peers.get(n, "")) for n, a in self.peers.items()}, {})

    def runtime_view(self) -> dict[str, str]:
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "sm":
                continue
            if f.name == "store":      # a store URL may carry a password: never show it
                v = {k: _hide_password(x) if k == "url" else x for k, x in v.items()}
            out[f.name] = (",".join(f"{k}={a}" for k, a in sorted(v.items())) if f.name in ("peers", "raft_peers")
                           else _toml_text(v))
        return out

    def update_runtime(self, changes: dict[str, str]) -> dict[str, str]:
        """Apply string-valued changes to RUNTIME_KEYS; all-or-nothing."""
        parsed: dict[str, Any] = {}
        for k, raw in changes.items():
            if k not in RUNTIME_KEYS:
                raise ConfigError(f"{k!r} cannot be changed at runtime", allowed=sorted(RUNTIME_KEYS))
            cur = getattr(self, k)
            parsed[k] = _coerce(k, raw, type(cur))
        trial = dataclasses.replace(self, **parsed)
        trial.validate()
        for k, v in parsed.items():
            setattr(self, k, v)
        return {k: str(v) for k, v in parsed.items()}


def _coerce(key: str, raw: str, typ: type) -> Any:
    try:
        if typ is bool:
            low = raw.strip().lower()
            if low not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return low in ("true", "1")
        return typ(raw)
    except ValueError:
        raise ConfigError(f"bad value for {key}: {raw!r}", expected=typ.__name__) from None


def _hide_password(url: object) -> object:
    """``scheme://user:secret@host/...`` -> ``scheme://user:***@host/...``."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", url) if isinstance(url, str) else url


def check_remoting_listen(addr: str, allow_public: bool) -> None:
    """The remoting port has no authentication (RocketMQ's ACL is not implemented): it listens on
    loopback or a private network only, unless the operator says otherwise (docs/security.md)."""
    host = addr.rsplit(":", 1)[0].strip("[]")
    if allow_public:
        return
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        if host == "localhost":
            return
        raise ConfigError(f"remoting_listen {addr!r}: give an IP address (the port is unauthenticated; a private "
                          "or loopback address, or set remoting_allow_public = true)") from None
    if not (ip.is_loopback or ip.is_private):
        raise ConfigError(f"remoting_listen {addr!r} is a public address and the RocketMQ remoting port has no "
                          "authentication: listen on a private network, or set remoting_allow_public = true")


def _split_addr(addr: str, what: str) -> tuple[str, int]:
    try:
        return split_hostport(addr)
    except AddressError as e:
        raise ConfigError(f"{what}: {e}, got {addr[:80]!r}") from None


def parse_peers(spec: str) -> dict[str, str]:
    """``n1=127.0.0.1:9001,n2=...`` -> {"n1": "127.0.0.1:9001", ...}."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        nid, sep, addr = part.partition("=")
        if not sep or not nid:
            raise ConfigError(f"peers: expected ID=HOST:PORT, got {part!r}")
        _split_addr(addr, f"peers[{nid}]")
        if nid in out:
            raise ConfigError(f"peers: duplicate node id {nid!r}")
        out[nid] = addr
    return out


def _checked_raft(values: dict[str, Any]) -> dict[str, Any]:
    """[raft] keys are checked at load, like every other section: an unknown key or a bad value
    is a CONFIG_ERROR naming it, not a traceback when the Raft node is built."""
    from autoswitch.controller.raft.config import RaftConfig

    values = check_values(RaftConfig, values, "[raft]")
    try:
        RaftConfig(**values)
    except TypeError as e:
        raise ConfigError(f"bad [raft] config: {e}") from None
    return values


def load(path: str | Path | None = None, **overrides: Any) -> ControllerConfig:
    """Build a validated config from an optional TOML file and non-None overrides."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"config file {path} is not UTF-8 text (a binary file?)") from None
        except OSError as e:
            raise ConfigError(f"config file {path} cannot be read: {e.strerror}") from None
        if isinstance(doc.get("controller"), dict):
            # keys above the [controller] header belong to no table we read: refused, not ignored
            stray = sorted(k for k, v in doc.items() if not isinstance(v, dict))
            if stray:
                raise ConfigError(f"keys {stray} in {path} sit outside the [controller] table (move them below "
                                  "its header)", keys=stray, path=str(path))
            values.update(doc["controller"])
        else:
            values.update({k: v for k, v in doc.items() if not isinstance(v, dict)})
        refuse_unknown(f"controller config ({path}) table", [k for k, v in doc.items() if isinstance(v, dict)],
                       {"controller", "raft", "store"})
        if "raft" in doc and isinstance(doc["raft"], dict):
            values["raft"] = _checked_raft(dict(doc["raft"]))
        if "store" in doc and isinstance(doc["store"], dict):
            from autoswitch.controller.store.config import StoreBackendConfig

            values["store"] = check_values(StoreBackendConfig, dict(doc["store"]), "[store]")
    values.update({k: v for k, v in overrides.items() if v is not None})
    sm_raw = values.pop("sm", {}) or {}
    if not isinstance(sm_raw, dict):
        raise ConfigError("[controller.sm] must be a table", key="sm")
    refuse_unknown("[controller.sm]", sm_raw, sm_config.KEYS)
    sm = {}
    for k, raw in sm_raw.items():
        raw = ("true" if raw else "false") if isinstance(raw, bool) else str(raw)
        try:
            sm_config.parse_value(k, raw)
        except sm_config.ConfigValueError as e:
            raise ConfigError(f"[controller.sm] {e}", key=k) from None
        sm[k] = raw
    for k in [k for k in values if k in sm_config.KEYS]:
        raw = values.pop(k)
        raw = ("true" if raw else "false") if isinstance(raw, bool) else str(raw)
        try:
            sm_config.parse_value(k, raw)
        except sm_config.ConfigValueError as e:
            raise ConfigError(str(e)) from None
        sm[k] = raw
    values["sm"] = sm
    if isinstance(values.get("peers"), str):
        values["peers"] = parse_peers(values["peers"])
    if isinstance(values.get("raft_peers"), str):
        values["raft_peers"] = parse_peers(values["raft_peers"])
    if isinstance(values.get("remoting_peers"), str):
        values["remoting_peers"] = parse_peers(values["remoting_peers"])
    refuse_unknown("controller config", values, {f.name for f in dataclasses.fields(ControllerConfig)} | sm_config.KEYS)
    cfg = ControllerConfig()
    for k, v in values.items():
        cur = getattr(cfg, k)
        if isinstance(cur, bool) and not isinstance(v, bool):
            raise ConfigError(f"{k} must be a boolean")
        if isinstance(cur, float) and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if type(cur) is not type(v) and not (isinstance(cur, dict) and isinstance(v, dict)):
            raise ConfigError(f"{k} must be {type(cur).__name__}, got {type(v).__name__}")
        setattr(cfg, k, v)
    cfg.validate()
    return cfg


def cluster_id(token: str, node_ids: Iterable[str]) -> str:
    """The Raft cluster id: a hash of the token and the sorted member names (etcd derives its
    cluster ID from the initial members and token the same way)."""
    import hashlib

    names = "\0".join(sorted(node_ids))
    return hashlib.sha256(f"autoswitch-cluster\0{token}\0{names}".encode()).hexdigest()[:16]


def _toml_text(v: object) -> str:
    """A value as a config file spells it: true / false as TOML (the replicated keys' own view
    says `false`; this one said `False` beside it: issue 64, item 9), nothing for an unset one."""
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v)
