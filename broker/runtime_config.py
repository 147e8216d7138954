"""The broker keys an operator may change while the broker runs (mqadmin updateBrokerConfig,
kafka-configs --alter): only keys that every use reads afresh from the live config, so a change
takes effect at the next request and no component keeps an old copy. Everything else (listen
addresses, the log, the controllers, the lease, TLS) needs a restart.

A change lasts until the next start: the config file is not rewritten (put the value there too).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autoswitch.broker.config import BrokerConfig

from autoswitch.base.config_check import check_values, suggest
from autoswitch.base.errors import ConfigError

# key -> what it changes (for `admin broker-config`, docs/configuration.md)
RUNTIME_KEYS: dict[str, str] = {
    "ack_timeout_s": "how long a produce waits for the replicas' acks (write_path)",
    "handover_timeout_ms": "how long a handover may hold writes (TransferMaster without a timeout, shutdown)",
    "master_switch_hold_ms": "how long a produce redirected here as the new master waits for the switch (service)",
    "auto_create_topics": "whether a write creates a topic without settings (topic_registry)",
    "max_consume_wait_ms": "the longest long-poll a Consume may ask for (consume_serve)",
    "max_inflight_produce": "produce batches in flight before OVERLOADED (write_path)",
}
MAX_CHANGES = len(RUNTIME_KEYS)


def parse_value(cfg: BrokerConfig, key: str, text: str) -> Any:
    """``text`` as the type of ``key``'s current value."""
    current = getattr(cfg, key)
    if isinstance(current, bool):
        low = text.strip().lower()
        if low not in ("true", "false"):
            raise ConfigError(f"{key} takes true or false, got {text[:40]!r}", key=key)
        return low == "true"
    try:
        return int(text) if isinstance(current, int) else float(text)
    except ValueError:
        raise ConfigError(f"{key} takes a number, got {text[:40]!r}", key=key) from None


def apply_changes(cfg: BrokerConfig, changes: dict[str, str]) -> dict[str, tuple[Any, Any]]:
    """Check every change (a key that may change at runtime, a value of its type within its range,
    the whole config still valid), then apply all of them to ``cfg`` in place: {key: (old, new)}.
    ConfigError naming every refused key, and nothing applied, when one is refused."""
    if not changes or len(changes) > MAX_CHANGES:
        raise ConfigError(f"give 1 to {MAX_CHANGES} changes")
    known = {f.name for f in dataclasses.fields(BrokerConfig) if not f.name.startswith("_")}
    unknown = sorted(k for k in changes if k not in known)
    if unknown:
        # a typo is not a key that needs a restart (issue 64, item 6: `ack_timout_s` was answered so)
        raise ConfigError("; ".join(f"unknown broker config key {k[:64]!r}{suggest(k, known)}" for k in unknown)
                          + f"; changeable while the broker runs: {', '.join(RUNTIME_KEYS)}", keys=unknown)
    fixed = sorted(k for k in changes if k not in RUNTIME_KEYS)
    if fixed:
        raise ConfigError(f"{', '.join(k[:64] for k in fixed)}: not changeable while the broker runs (restart "
                          f"with the new value); changeable: {', '.join(RUNTIME_KEYS)}", keys=fixed)
    values = {k: parse_value(cfg, k, v) for k, v in changes.items()}
    check_values(BrokerConfig, values, "broker config")
    candidate = dataclasses.replace(cfg, **values)
    candidate.validate()             # the cross-key rules, on a copy
    out = {k: (getattr(cfg, k), v) for k, v in values.items()}
    for k, v in values.items():
        setattr(cfg, k, v)
    return out


def config_view(cfg: BrokerConfig) -> dict[str, Any]:
    """Every key and its value (TLS and token paths included, never their contents)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if not f.name.startswith("_")}
