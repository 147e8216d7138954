"""The controller's status page (served on its metrics port, docs/operations.md "Status page").

``/status`` is one static HTML page; its script long-polls ``/status.json?after=V&wait=S``, which
answers at once when this node's applied index is past ``V`` and otherwise waits up to ``S``
seconds (at most 30) for it, so the page follows elections within a poll without reloading.
The JSON is this node's own view: members, Raft indexes, every group (master, MasterEpoch,
SyncStateSet, preferred master, each replica's liveness, last reported offset and lag behind the
master's report) and the last elections and admin actions it applied.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from autoswitch.controller.api import group_traffic, topic_totals
from autoswitch.controller.failover.liveness import health_word

if TYPE_CHECKING:
    from autoswitch.controller.server.node_api import ObservedNode
    from autoswitch.controller.state.history import HistoryRecord

MAX_WAIT_S = 30.0
POLL_STEP_S = 0.05
MAX_GROUPS_SHOWN = 1000
MAX_TOPICS_SHOWN = 200
RECENT_EVENTS = 50
SHOWN_EVENTS = ("ElectMaster", "NoMaster", "AdminAudit", "PreferredMaster", "Maintenance", "ControllerMaintenance")


def _redacted(e: dict) -> dict:
    if e.get("event") != "AdminAudit" and not e.get("actor"):
        return e
    out = dict(e, actor="(hidden)")
    if e.get("event") == "AdminAudit":
        out["reason"] = str(e.get("reason", "")).split(" ", 1)[0] + " (details need the HTTP token)"
    return out


class StatusPage:
    def __init__(self, node: ObservedNode) -> None:
        self.node = node
        self.recent: deque[dict] = deque(maxlen=RECENT_EVENTS)

    def on_record(self, rec: HistoryRecord) -> None:
        if rec.event in SHOWN_EVENTS:
            self.recent.append({"ts_ms": rec.ts_ms, "group": rec.group, "event": rec.event,
                                "master_broker_id": rec.master_broker_id, "master_epoch": rec.master_epoch,
                                "reason": rec.reason, "unclean": rec.unclean, "actor": rec.actor or None})

    def pages(self) -> dict:
        return {"/status": self.html, "/status.json": self.status_json, "/": self.html}

    async def html(self, query: dict[str, str], authed: bool = False) -> tuple[int, bytes, str]:
        return 200, PAGE.encode(), "text/html; charset=utf-8"

    async def status_json(self, query: dict[str, str], authed: bool = False) -> tuple[int, bytes, str]:
        try:
            after = int(query.get("after", "-1"))
            wait = min(MAX_WAIT_S, max(0.0, float(query.get("wait", "0"))))
        except ValueError:
            return 400, b'{"error": "after must be an integer, wait a number"}\n', "application/json"
        deadline = time.monotonic() + wait
        while self.node.metadata()["applied"] <= after and time.monotonic() < deadline:
            await asyncio.sleep(POLL_STEP_S)
        self.node.metrics.status_requests.inc()
        snap = self.snapshot()
        if not authed:
            # who did what is for holders of the HTTP token (metrics_token_file) only
            snap["events"] = [_redacted(e) for e in snap["events"]]
        return 200, json.dumps(snap, separators=(",", ":")).encode(), "application/json"

    def snapshot(self) -> dict:
        node = self.node
        md = node.metadata()
        cordoned = node.sm.controller_maintenance if node.wired else frozenset()
        out = {"node": node.node_id, "version": md["applied"], "leader": md["leader_id"], "term": md["term"],
               "commit": md["commit"], "applied": md["applied"], "ts_ms": int(time.time() * 1000),
               "members": [{"id": n, "address": a, "reachable": ok, "leader": n == md["leader_id"], "role": role,
                            "maintenance": n in cordoned}
                           for n, a, ok, role in md["peers"]],
               "groups": [], "events": list(self.recent)[::-1]}
        check = node.state_check
        if check is not None:
            out["state_check"] = {"corrupt": check.corrupt, "checks": check.checked, "mismatches": check.mismatches,
                                  "last": check.last}
        if not node.wired:
            return out
        _, groups = node.sm.sync_state_data((), node.liveness.member_view)
        heard: list[tuple[bool, Any]] = []
        for g in groups[:MAX_GROUPS_SHOWN]:
            info = g.replica_info
            top = max((m.max_offset for m in g.members if m.broker_id == info.master_broker_id), default=0)
            heard.extend((m.broker_id == info.master_broker_id, m.topic_rates) for m in g.members if m.alive)
            # messages per second its master acknowledged and its replicas served (last 10 s)
            produce, consume = group_traffic(g.members, info.master_broker_id)
            out["groups"].append({
                "produce_per_s": produce, "consume_per_s": consume,
                "group": info.broker_name, "master": info.master_broker_id, "epoch": info.master_epoch,
                "sync_state_set": list(info.sync_state_set), "sync_state_set_epoch": info.sync_state_set_epoch,
                "preferred": info.preferred_master, "maintenance": list(info.maintenance),
                "last_decision": _last_decision(node, info.broker_name),
                # grouped by zone: a zone that went silent shows as one block of dead replicas
                "replicas": [{"id": m.broker_id, "address": m.address, "zone": m.zone, "alive": m.alive,
                              "in_sync": m.in_sync,
                              "max_offset": m.max_offset, "lag": max(0, top - m.max_offset),
                              "heard_ms_ago": m.last_heard_ms_ago,
                              "health": health_word(m.alive, m.diverged, m.degraded_reasons),
                              "append_ms": m.append_ms, "fsync_ms": m.fsync_ms, "loop_lag_ms": m.loop_lag_ms}
                             for m in sorted(g.members, key=lambda x: (x.zone, x.broker_id))]})
        out["topics"] = topic_totals(heard)[:MAX_TOPICS_SHOWN]
        return out


def _last_decision(node: ObservedNode, group: str) -> str:
    """The last election's (or refusal's) one-line explanation (controller/state/explain.py)."""
    d = node.sm.latest_election(group)
    return f"{d.summary} (MasterEpoch {d.master_epoch})" if d is not None else ""


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>autoswitch controller</title>
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.05em;margin-top:1.5em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
th{background:#f3f3f3}.dead{color:#b00}.ok{color:#070}.muted{color:#777}
</style></head>
<body data-rendered="no">
<h1>autoswitch controller <span id="node"></span></h1>
<p id="raft" class="muted"></p>
<h2>Controllers</h2><table id="members"><thead><tr><th>id</th><th>address</th><th>role</th><th>reachable</th><th>leader</th><th>maintenance</th></tr></thead><tbody></tbody></table>
<h2>Broker groups</h2><table id="groups"><thead><tr><th>group</th><th>master</th><th>MasterEpoch</th><th>SyncStateSet</th><th>preferred</th><th>maintenance</th><th>replicas (offset, lag)</th><th>msg/s in, out</th><th>last decision</th></tr></thead><tbody></tbody></table>
<h2>Topics (messages per second, last 10 s)</h2><table id="topics"><thead><tr><th>topic</th><th>produced</th><th>consumed</th></tr></thead><tbody></tbody></table>
<h2>Recent elections and admin actions</h2><table id="events"><thead><tr><th>time</th><th>group</th><th>event</th><th>master</th><th>MasterEpoch</th><th>reason</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const params = new URLSearchParams(location.search);
const maxPolls = Number(params.get("polls") || 0), wait = Number(params.get("wait") || 10);
const seen = [];
function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); }
function rows(id, items, fill) { const tb = document.querySelector("#" + id + " tbody"); tb.replaceChildren();
  for (const it of items) { const tr = document.createElement("tr"); fill(tr, it); tb.appendChild(tr); } }
function render(s) {
  document.getElementById("node").textContent = "(node " + s.node + ")";
  document.getElementById("raft").textContent = "leader " + (s.leader || "none") + ", term " + s.term + ", commit " + s.commit + ", applied " + s.applied + ", at " + new Date(s.ts_ms).toISOString();
  rows("members", s.members, (tr, m) => { cell(tr, m.id); cell(tr, m.address); cell(tr, m.role); cell(tr, m.reachable ? "yes" : "no", m.reachable ? "ok" : "dead"); cell(tr, m.leader ? "leader" : ""); cell(tr, m.maintenance ? "yes" : ""); });
  rows("groups", s.groups, (tr, g) => { cell(tr, g.group); cell(tr, g.master ?? "none", g.master ? "" : "dead"); cell(tr, g.epoch);
    cell(tr, g.sync_state_set.join(", ")); cell(tr, g.preferred || ""); cell(tr, g.maintenance.join(", "));
    cell(tr, g.replicas.map(r => (r.zone ? "[" + r.zone + "] " : "") + r.id + (r.alive ? "" : " (dead)") + (r.in_sync ? " in-sync" : "") + " " + r.max_offset + ", lag " + r.lag + (r.health === "ok" || r.health === "unknown" ? "" : " " + r.health)).join("; "),
         g.replicas.some(r => r.health !== "ok" && r.health !== "unknown") ? "dead" : "");
    cell(tr, (g.produce_per_s ?? "-") + ", " + g.consume_per_s);
    cell(tr, g.last_decision || "", "muted");
    const key = g.group + ":" + g.master + "@" + g.epoch; if (!seen.includes(key)) seen.push(key); });
  rows("topics", s.topics || [], (tr, t) => { cell(tr, t.topic); cell(tr, t.produce_per_s); cell(tr, t.consume_per_s); });
  rows("events", s.events, (tr, e) => { cell(tr, new Date(e.ts_ms).toISOString()); cell(tr, e.group); cell(tr, e.event);
    cell(tr, e.master_broker_id ?? ""); cell(tr, e.master_epoch); cell(tr, e.reason || ""); });
  document.body.dataset.mastersSeen = seen.join(" ");
  document.body.dataset.rendered = "yes";
}
async function loop() {
  let version = -1, polls = 0;
  while (!maxPolls || polls < maxPolls) {
    polls += 1;
    try {
      const r = await fetch("/status.json?after=" + version + "&wait=" + (version < 0 ? 0 : wait));
      const s = await r.json(); version = s.version; render(s);
    } catch (e) { document.body.dataset.error = String(e); await new Promise(ok => setTimeout(ok, 1000)); }
  }
  document.body.dataset.done = "yes";
}
loop();
</script></body></html>
"""
