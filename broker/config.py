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

from autoswitch.errors import ConfigError

ROLES = ("master", "slave", "fenced")
ACK_MODES = ("master", "all", "quorum")
FLUSH_MODES = ("sync", "async")

# Hard ceilings: a config may lower the limits, never raise them past these.
MAX_REQUEST_BYTES_CEILING = 64 * 1024 * 1024
MAX_BATCH_CEILING = 10_000
MAX_TOPIC_BYTES = 255
MAX_MSG_ID_BYTES = 128
# Room for the protobuf framing, topic and msg_id around one body in a request.
FRAME_OVERHEAD_BYTES = 16 * 1024


def parse_hostport(value: str, what: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not (0 < int(port) < 65536):
        raise ConfigError(f"{what} must be HOST:PORT, got {value!r}", key=what)
    return host, int(port)


@dataclass
class BrokerConfig:
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
    in_sync_replicas: int = 2
    ack_timeout_s: float = 3.0
    flush: str = "async"
    flush_interval_ms: int = 500
    max_message_bytes: int = 4 * 1024 * 1024
    max_batch_messages: int = 1000
    max_request_bytes: int = 32 * 1024 * 1024
    max_consume_count: int = 1000
    max_consume_bytes: int = 8 * 1024 * 1024
    max_inflight_produce: int = 256
    store: dict[str, Any] = field(default_factory=dict)
    ha: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> BrokerConfig:
        if not self.group or "#" in self.group:
            raise ConfigError("group must be a non-empty name without '#'", key="group")
        if self.broker_id < 1:
            raise ConfigError("broker_id must be >= 1", key="broker_id")
        if self.role not in ROLES:
            raise ConfigError(f"role must be one of {ROLES}", key="role", value=self.role)
        if self.ack_mode not in ACK_MODES:
            raise ConfigError(f"ack_mode must be one of {ACK_MODES}", key="ack_mode", value=self.ack_mode)
        if self.flush not in FLUSH_MODES:
            raise ConfigError(f"flush must be one of {FLUSH_MODES}", key="flush", value=self.flush)
        if not self.data_dir:
            raise ConfigError("data_dir is required", key="data_dir")
        parse_hostport(self.listen, "listen")
        parse_hostport(self.ha_listen, "ha_listen")
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
        # A Consume reply must fit in one gRPC message with its per-message overhead.
        self.max_consume_bytes = min(self.max_consume_bytes, self.max_request_bytes // 2)
        if not (1 <= self.max_inflight_produce <= 100_000):
            raise ConfigError("max_inflight_produce must be in [1, 100000]", key="max_inflight_produce")
        if not isinstance(self.store, dict) or not isinstance(self.ha, dict):
            raise ConfigError("[store] and [ha] must be tables")
        return self

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)


_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig)}


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
        # A [broker] table is accepted so one file can hold several components.
        raw = raw.get("broker", raw) if isinstance(raw.get("broker"), dict) else raw
        for key, value in raw.items():
            k = key.replace("-", "_")
            if k not in _FIELDS:
                raise ConfigError(f"unknown config key {key!r} in {path}", key=key, path=str(path))
            values[k] = value
    for k, v in overrides.items():
        if v is None:
            continue
        if k not in _FIELDS:
            raise ConfigError(f"unknown config key {k!r}", key=k)
        values[k] = v
    try:
        cfg = BrokerConfig(**values)
    except TypeError as e:
        raise ConfigError(f"bad config: {e}") from e
    _check_types(cfg)
    return cfg.validate()


def _check_types(cfg: BrokerConfig) -> None:
    for name, f in _FIELDS.items():
        v = getattr(cfg, name)
        t = f.type
        if v is None and "None" in str(t):
            continue
        want = {"int": int, "float": (int, float), "str": str}.get(str(t).split(" ")[0].split("|")[0].strip())
        if want is not None and (not isinstance(v, want) or isinstance(v, bool)):
            raise ConfigError(f"config key {name!r} must be {str(t)}, got {type(v).__name__}", key=name)
