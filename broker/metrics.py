"""Prometheus metrics, health and readiness of a broker process (autoswitch/base/observe.py serves them).

Produce and consume are counted and timed by wrapping the servicer's two methods before they are
registered with gRPC; the fetch port reports each fetch and refusal to ``fetched`` / ``refused``
(fetch_server.FetchObserver); role, MasterEpoch, offsets, fencing, per-slave lag and open fetch
connections are read at scrape time.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from autoswitch.broker import fetch_codec as fc
from prometheus_client import CollectorRegistry, Counter, Histogram

from autoswitch.base.observe import FnCollector
from autoswitch.proto import broker_pb2 as pb

if TYPE_CHECKING:
    from autoswitch.broker.fetch_server import FetchServer
    from autoswitch.broker.server import Broker

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
ROLES = ("master", "slave", "fenced")
FETCH_REFUSALS = {fc.ERR_PROTOCOL: "protocol", fc.ERR_DENIED: "denied", fc.ERR_BUSY: "busy"}
HA_SLAVE_STATES = ("READY", "HANDSHAKE", "TRANSFER", "SHUTDOWN")


class BrokerMetrics:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter("autoswitch_broker_requests", "Produce/Consume requests by reply status",
                                ["rpc", "status"], registry=r)
        self.amounts = {
            "Produce": Counter("autoswitch_broker_produced_messages", "Messages acknowledged to producers", registry=r),
            "Consume": Counter("autoswitch_broker_consumed_bytes", "Message bytes served to consumers (bodies, or "
                               "whole records for record runs)", registry=r),
        }
        self.latency = Histogram("autoswitch_broker_request_seconds", "Produce/Consume/Fetch handling time "
                                 "(produce: until acknowledged)", ["rpc"], buckets=LATENCY_BUCKETS, registry=r)
        self.fetched_bytes = Counter("autoswitch_broker_fetched_bytes", "Record bytes served over the fetch port",
                                     registry=r)
        self.fetch_refused = Counter("autoswitch_broker_fetch_refused", "Fetch-port connections ended with an "
                                     "ERROR frame", ["reason"], registry=r)
        self.fetch_server: FetchServer | None = None     # set once the fetch port is up
        r.register(FnCollector(self._gauges))

    def fetched(self, status: int, nbytes: int, seconds: float) -> None:
        """One FETCH answered (fetch_server.FetchObserver)."""
        self.latency.labels("Fetch").observe(seconds)
        self.requests.labels("Fetch", pb.Status.Name(status)).inc()
        self.fetched_bytes.inc(nbytes)

    def refused(self, code: int) -> None:
        self.fetch_refused.labels(FETCH_REFUSALS.get(code, "other")).inc()

    def instrument(self, servicer: Any) -> None:
        """Wrap ``servicer.Produce`` and ``servicer.Consume`` (call before registering it)."""
        for rpc, count in (("Produce", lambda rep: len(rep.results)),
                           ("Consume", lambda rep: sum(len(m.body) for m in rep.messages)
                            + sum(len(r.records) for r in rep.runs))):
            setattr(servicer, rpc, self._timed(rpc, getattr(servicer, rpc), count))

    def _timed(self, rpc: str, fn: Any, count: Any) -> Any:
        requests, amount, latency = self.requests, self.amounts[rpc], self.latency.labels(rpc)

        @functools.wraps(fn)
        async def wrapper(request: Any, context: Any) -> Any:
            t0 = time.monotonic()
            reply = await fn(request, context)
            latency.observe(time.monotonic() - t0)
            requests.labels(rpc, pb.Status.Name(reply.status)).inc()
            if reply.status == pb.OK:
                amount.inc(count(reply))
            return reply
        return wrapper

    def readiness(self) -> tuple[bool, str]:
        """/readyz: the broker knows its role (controller mode: the controllers named it)."""
        b = self.broker
        if b.role == "fenced":
            return False, f"no role yet (fenced: {b.fence_reason() or 'waiting for the controller'})"
        return True, f"{b.role} at MasterEpoch {b.master_epoch}"

    def _gauges(self) -> Iterator[tuple[str, str, dict[str, str], float]]:
        b = self.broker
        for role in ROLES:
            yield "autoswitch_broker_role", "1 for the broker's current role", {"role": role}, 1 if b.role == role else 0
        yield "autoswitch_broker_master_epoch", "MasterEpoch of the broker's role", {}, b.master_epoch
        yield "autoswitch_broker_max_offset_bytes", "Commit-log end (bytes)", {}, b.store.max_offset
        yield "autoswitch_broker_confirm_offset_bytes", "confirmOffset: consumers read below it", {}, b.confirm_offset
        fenced = b.fence_reason() if b.role == "master" else None
        yield "autoswitch_broker_fenced", "1 while a master refuses writes (lease, handover, deposed)", {}, \
            1 if fenced else 0
        yield ("autoswitch_broker_produce_held", "Produce requests waiting for this broker's role switch "
               "(master_switch_hold_ms)", {}, b.switch_signal.waiting)
        h = b.health_report()
        yield ("autoswitch_broker_degraded", "1 while a health signal stays slow (broker/health.py), by signal",
               {"signal": "any"}, 1 if h.degraded else 0)
        for signal, v in (("append", h.append_ms), ("fsync", h.fsync_ms), ("loop_lag", h.loop_lag_ms)):
            yield ("autoswitch_broker_degraded", "1 while a health signal stays slow (broker/health.py), by signal",
                   {"signal": signal}, 1 if signal in h.reasons else 0)
            if v >= 0:
                yield ("autoswitch_broker_health_ms", "Last health window: median append or fsync time, event-loop "
                       "lag (ms)", {"signal": signal}, v)
        ha = b.ha_master
        if ha is not None:
            top = b.store.max_offset
            for bid, r in sorted(ha.tracker.replicas.items()):
                if r.connected:
                    yield ("autoswitch_broker_slave_lag_bytes", "Master's log end minus what the slave acknowledged",
                           {"slave": str(bid)}, max(0, top - max(r.ack_offset, 0)))
            yield ("autoswitch_broker_sync_state_set_size", "Members of the SyncStateSet (master included)", {},
                   len(ha.tracker.sync_state_set))
            for bid, q in sorted(ha.tracker.quarantined.items()):
                # The alert's metric: a replica whose bytes differ from the master's (range digests).
                yield ("autoswitch_ha_replica_quarantined", "1 while a replica is quarantined for holding other "
                       "bytes than the master in a range", {"group": b.group, "slave": str(bid), "epoch": str(q.epoch),
                                                           "range": f"{q.start}-{q.end}"}, 1)
            yield ("autoswitch_ha_quarantines_total", "Replicas quarantined by this master in its current term", {},
                   ha.digests.quarantines)
        if ha is not None:
            for info in ha.slave_infos():
                if info.get("connected") and "bytesSent" in info:
                    yield ("autoswitch_ha_connection_bytes_sent", "Bytes the master sent on a slave's current HA "
                           "connection", {"slave": str(info["brokerId"])}, info["bytesSent"])
        hs = b.ha_slave
        if hs is not None:
            yield ("autoswitch_ha_slave_connects_total", "HA connections this slave opened to its master (handshakes)", {},
                   hs.connects)
            for key, what in (("rounds", "verification rounds run"), ("verified", "ranges that matched"),
                              ("verified_bytes", "bytes of the ranges that matched"),
                              ("mismatches", "ranges that did not match (each one an alert)"),
                              ("repairs", "ranges cut and fetched again at the master's repair")):
                yield (f"autoswitch_ha_digest_{key}_total", f"Range digests on this slave: {what}", {},
                       hs.digest_stats[key])
            for state in HA_SLAVE_STATES:
                yield ("autoswitch_ha_slave_state", "1 for the slave's HA state", {"state": state},
                       1 if hs.state == state else 0)
        if self.fetch_server is not None:
            yield ("autoswitch_broker_fetch_connections", "Fetch-port connections open", {},
                   self.fetch_server.connections)
        if b.replicas is not None and b.replicas.sessions is not None:
            yield ("autoswitch_broker_controller_sessions", "BrokerSession streams open (crash-fast failover)", {},
                   len(b.replicas.sessions.open))
