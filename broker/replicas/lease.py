"""Master self-fencing lease (docs/design.md §1), pure.

The broker sends a heartbeat round to every controller. For every controller we
remember the SEND time of the newest round that controller answered. The lease is
valid until ``T + masterLeaseMs`` where ``T`` is the k-th newest of those send times
and ``k`` is a controller majority. Any majority of controllers that later agrees
"this master is dead" intersects the k controllers behind ``T``; each of those
received a heartbeat sent at or after ``T``, and measures ``heartbeatTimeout`` from
its own (later) receipt time. With

    masterLeaseMs * (1 + maxClockRateDrift) + safetyMs < heartbeatTimeoutMs

the old master has stopped acknowledging before any controller majority can call
it dead, so before a new master can be elected. The order statistic generalises
"one round answered by a majority": replies to different rounds combine, and a
late reply can only set a send time in the past, never stretch the lease past
``send + lease``.

Times are seconds from the broker's monotonic clock; the caller passes ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from autoswitch.base.errors import ConfigError
from autoswitch.base.quorum import majority

# Rounds we remember send times for: a reply to a round older than this is
# useless anyway (its lease has run out long ago) and the table stays bounded.
MAX_ROUNDS_REMEMBERED = 64


@dataclass(frozen=True)
class LeaseConfig:
    enabled: bool = True
    master_lease_ms: int = 6000
    heartbeat_timeout_ms: int = 10000
    max_clock_rate_drift: float = 0.01
    safety_ms: int = 2000

    def margin_ms(self) -> float:
        """heartbeatTimeout - (lease * (1 + drift) + safety); must be > 0."""
        return self.heartbeat_timeout_ms - (self.master_lease_ms * (1 + self.max_clock_rate_drift) + self.safety_ms)

    def validate(self, heartbeat_interval_ms: int | None = None) -> LeaseConfig:
        if self.master_lease_ms <= 0 or self.heartbeat_timeout_ms <= 0 or self.safety_ms < 0:
            raise ConfigError("master_lease_ms and heartbeat_timeout_ms must be > 0, safety_ms >= 0")
        if not (0 <= self.max_clock_rate_drift < 0.5):
            raise ConfigError("max_clock_rate_drift must be in [0, 0.5)", key="max_clock_rate_drift")
        if self.enabled and self.margin_ms() <= 0:
            raise ConfigError(
                "master lease too long: need master_lease_ms*(1+max_clock_rate_drift)+safety_ms "
                f"< heartbeat_timeout_ms, got {self.master_lease_ms}*(1+{self.max_clock_rate_drift})"
                f"+{self.safety_ms} >= {self.heartbeat_timeout_ms}",
                key="master_lease_ms",
            )
        if self.enabled and heartbeat_interval_ms is not None and heartbeat_interval_ms >= self.master_lease_ms:
            # A lease shorter than one heartbeat interval can never stay renewed.
            raise ConfigError(
                f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be < master_lease_ms ({self.master_lease_ms})",
                key="heartbeat_interval_ms",
            )
        return self


class MasterLease:
    """Tracks heartbeat rounds and replies; answers "may the master acknowledge now?"."""

    def __init__(self, controllers: Iterable[str], config: LeaseConfig) -> None:
        self.controllers: tuple[str, ...] = tuple(dict.fromkeys(controllers))
        assert self.controllers, "a lease needs at least one controller"
        self.config = config
        self.quorum = majority(len(self.controllers))
        self._next_round = 1
        self._first_round = 1     # replies to earlier rounds are for a configuration no longer counted
        self._sent: dict[int, float] = {}  # round -> send time
        self._acked_send: dict[str, float] = {}  # controller -> newest answered send time
        self._expires_at: float | None = None

    @property
    def lease_s(self) -> float:
        return self.config.master_lease_ms / 1000.0

    def on_round_sent(self, now: float) -> int:
        rnd = self._next_round
        self._next_round += 1
        if self._sent:
            assert now >= max(self._sent.values()), "monotonic clock went backwards"
        self._sent[rnd] = now
        while len(self._sent) > MAX_ROUNDS_REMEMBERED:
            del self._sent[min(self._sent)]
        return rnd

    def on_reply(self, controller: str, rnd: int, now: float, node_id: str = "") -> bool:
        """A controller accepted the heartbeat of round ``rnd``. True if the lease got longer.
        ``node_id``: who answered; grants are counted per node, so a controller listed under two
        spellings of its address cannot count twice (issue 30)."""
        if controller not in self.controllers:
            return False
        key = node_id or controller
        sent = self._sent.get(rnd) if rnd >= self._first_round else None
        if sent is None:
            return False  # older than anything we remember or than the configuration: no use
        assert sent <= now, "reply before its request was sent"
        if sent > self._acked_send.get(key, float("-inf")):
            self._acked_send[key] = sent
        if len(self._acked_send) < self.quorum:
            return False
        base = sorted(self._acked_send.values(), reverse=True)[self.quorum - 1]
        new_expiry = base + self.lease_s
        if self._expires_at is None or new_expiry > self._expires_at:
            self._expires_at = new_expiry
            return True
        return False

    def replace_controllers(self, controllers: Iterable[str]) -> bool:
        """The broker adopted another controller configuration. Grants counted so far keep the
        expiry they gave (never extended: their answers are forgotten); from now on only answers
        of the new list to rounds sent from now on count, ``quorum`` of them, so every grant behind
        a later expiry was given for the same configuration. True if the list changed."""
        new = tuple(dict.fromkeys(controllers))
        if not new:
            return False
        self._acked_send = {}
        self._first_round = self._next_round
        if new == self.controllers:
            return False
        self.controllers = new
        self.quorum = majority(len(new))
        return True

    def expires_at(self) -> float | None:
        return self._expires_at

    def void(self) -> None:
        """Real time moved on while our clock stood still (ClockGapDetector): nothing granted so
        far can be trusted, nor any reply to a round sent before now."""
        self._expires_at = None
        self._acked_send = {}
        self._first_round = self._next_round

    def valid(self, now: float) -> bool:
        """False once the lease ran out (or was never granted). Always True when disabled."""
        if not self.config.enabled:
            return True
        return self._expires_at is not None and now < self._expires_at

    def remaining(self, now: float) -> float:
        if self._expires_at is None:
            return 0.0
        return max(0.0, self._expires_at - now)

    def status(self, now: float) -> dict[str, object]:
        return {
            "enabled": self.config.enabled,
            "valid": self.valid(now),
            "remainingMs": int(self.remaining(now) * 1000),
            "leaseMs": self.config.master_lease_ms,
            "quorum": self.quorum,
            "controllers": len(self.controllers),
            "answered": sorted(self._acked_send),
        }


class ClockGapDetector:
    """The lease is measured on CLOCK_MONOTONIC, which stands still while the host is suspended
    (and on hypervisors whose paused guests see no time pass); CLOCK_BOOTTIME goes on. Their
    difference changes only across such a stop (NTP slews both alike), so a growth beyond
    ``bound_s`` means real time passed that the lease did not count: a lease "valid" after the
    resume may have run out long ago, and a successor may be acknowledging (issue 30)."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        self._offset: float | None = None

    def observe(self, monotonic: float, boottime: float) -> float | None:
        """The gap (seconds) when one opened since the previous reading, else None."""
        offset = boottime - monotonic
        prev, self._offset = self._offset, offset
        if prev is None or offset - prev <= self.bound_s:
            return None
        return offset - prev


# A new master's first grants: see LeaseReasks.
LEASE_REASK_S = 0.01
MAX_LEASE_REASKS = 8


class LeaseReasks:
    """When a new master asks again for a refused grant, sooner than the next heartbeat period.

    Right after an election two refusals are expected and short-lived: the answer to a round sent
    while still a slave (it carried the old MasterEpoch; one such round may be in flight when the
    new master's own first round goes out, which then skips that controller), and the answer of a
    controller that has not applied the election yet. Either would otherwise cost a heartbeat
    period (a third of the lease) of refused writes after every handover. Any other refusal (a
    DEAD report, a newer MasterEpoch) waits for the period as before, and so does a controller
    still behind after MAX_LEASE_REASKS asks in one MasterEpoch."""

    def __init__(self) -> None:
        self._epoch = 0
        self._left = 0

    def after_refusal(self, sent_epoch: int, controller_epoch: int, our_epoch: int, now: float) -> float | None:
        """When to send the next round (None: at the usual period)."""
        if our_epoch != self._epoch:
            self._epoch, self._left = our_epoch, MAX_LEASE_REASKS
        if self._left <= 0:
            return None
        if sent_epoch < our_epoch:
            self._left -= 1
            return now                      # sent as a slave: ask as the master now
        if controller_epoch < our_epoch:
            self._left -= 1
            return now + LEASE_REASK_S      # the controller has not applied the election yet
        return None
