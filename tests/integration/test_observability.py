"""Issue 15 items 1-2 (metrics and health), with real processes: every controller and broker
serves Prometheus /metrics, /healthz and /readyz, and gRPC health checking; the counters move
across a kill -9 failover."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.failover_harness import FailoverCluster, read_ack_log, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _admin(*args: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def status(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def total(m: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in m.items() if n == name and all(dict(ls).get(k) == x for k, x in labels.items()))


async def grpc_health(addr: str) -> int:
    async with grpc.aio.insecure_channel(addr) as ch:
        r = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return r.status


def test_metrics_health_and_readiness_across_a_failover(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, metrics=True)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    master = c.master_name()
    for name in ("b1", "b2", "b3", "n1", "n2", "n3"):
        port = c.metrics_port[name]
        assert status(port, "/healthz") == (200, "ok\n")
        code, why = status(port, "/readyz")
        assert code == 200, (name, why)
        assert status(port, "/nope")[0] == 404
        # which version each process runs (issue 34: a rolling upgrade's dashboards)
        from autoswitch import __version__
        from autoswitch.base.features import SUPPORTED_LEVEL
        assert total(scrape(port), "autoswitch_build_info", version=__version__,
                     feature_level=str(SUPPORTED_LEVEL)) == 1, name
        # the container image's HEALTHCHECK command, against every kind of process
        for probe in ([], ["--ready"]):
            hc = subprocess.run([sys.executable, "-m", "autoswitch", "healthcheck", "--metrics", f"127.0.0.1:{port}",
                                 *probe], capture_output=True, text=True, timeout=60)
            assert hc.returncode == 0 and hc.stdout.startswith("healthy"), (name, probe, hc.stdout, hc.stderr)
    assert total(scrape(c.metrics_port["namesrv"]), "autoswitch_namesrv_routes") >= 3
    assert total(scrape(c.metrics_port["namesrv"]), "autoswitch_build_info", component="namesrv") == 1
    from autoswitch import __version__
    for proc, event in ((c.broker_proc["b1"], "broker_started"), (c.ctl_proc["n1"], "controller_started")):
        started = [json.loads(ln) for ln in proc.log_text().splitlines() if f'"event":"{event}"' in ln]
        assert started and started[0]["version"] == __version__, (event, started)
    for addr in [*c.ctl_addrs.values(), *(c.broker_addr(n) for n in ("b1", "b2", "b3")), c.namesrv]:
        assert asyncio.run(grpc_health(addr)) == health_pb2.HealthCheckResponse.SERVING

    ack_log = tmp_path / "acks.jsonl"
    prod = c.producer("producer", ack_log, duration_s=4)
    wait_until(lambda: len(read_ack_log(ack_log)) >= 30, 30, "30 acks")
    bm = scrape(c.metrics_port[master])
    assert total(bm, "autoswitch_broker_role", role="master") == 1
    assert total(bm, "autoswitch_broker_master_epoch") == e1
    assert total(bm, "autoswitch_broker_produced_messages_total") >= 30
    assert total(bm, "autoswitch_broker_requests_total", rpc="Produce", status="OK") >= 30
    assert total(bm, "autoswitch_broker_request_seconds_count", rpc="Produce") >= 30
    assert total(bm, "autoswitch_broker_sync_state_set_size") == 3
    assert len([k for k in bm if k[0] == "autoswitch_broker_slave_lag_bytes"]) == 2
    assert total(bm, "autoswitch_broker_controller_sessions") == 3
    assert len([k for k in bm if k[0] == "autoswitch_ha_connection_bytes_sent"]) == 2
    slave = next(n for n in ("b1", "b2", "b3") if n != master)
    sm = scrape(c.metrics_port[slave])
    assert total(sm, "autoswitch_ha_slave_state", state="TRANSFER") == 1
    assert total(sm, "autoswitch_ha_slave_connects_total") >= 1
    # mqadmin-style views (issue 15 item 5): topic list, topic route, cluster list
    tl = _admin("topic-list", "--namesrv", c.namesrv, "--group", "g1", "--json")["result"]
    assert [t["topic"] for t in tl["topics"]] == ["t"] and tl["topics"][0]["max_queue_offset"] >= 30
    tr = _admin("topic-route", "--namesrv", c.namesrv, "--topic", "t", "--json")["result"]
    assert [g["group"] for g in tr["groups"]] == ["g1"] and tr["groups"][0]["master_epoch"] == e1
    nope = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "topic-route", "--namesrv", c.namesrv,
                           "--topic", "nope", "--json"], capture_output=True, text=True, timeout=60)
    assert nope.returncode == 1 and json.loads(nope.stdout)["error"]["code"] == "NOT_FOUND", nope.stdout
    cl = _admin("cluster-list", "--controller", ",".join(c.ctl_addrs.values()), "--json")["result"]["groups"]
    assert [(g["group"], g["master"], g["master_epoch"]) for g in cl] == [("g1", m1, e1)]
    assert sorted(r["broker_id"] for r in cl[0]["replicas"]) == [1, 2, 3]
    before = {n: scrape(c.metrics_port[n]) for n in ("n1", "n2", "n3")}
    assert sum(total(m, "autoswitch_controller_is_leader") for m in before.values()) == 1
    for m in before.values():
        assert total(m, "autoswitch_controller_groups") == 1
        assert total(m, "autoswitch_controller_members", role="voter") == 3
        assert total(m, "autoswitch_controller_members", role="learner") == 0
        assert total(m, "autoswitch_controller_is_voter") == 1
        assert total(m, "autoswitch_controller_heartbeats_total") > 0
        assert total(m, "autoswitch_controller_raft_applied_index") > 0

    c.broker_proc[master].kill9()
    m2, e2 = c.wait_master(timeout=30, not_id=m1, min_epoch=e1 + 1)
    prod.popen.wait(60)
    new_master = c.name_of_id(m2)
    wait_until(lambda: total(scrape(c.metrics_port[new_master]), "autoswitch_broker_role", role="master") == 1, 30,
               "the new master's role gauge")
    assert total(scrape(c.metrics_port[new_master]), "autoswitch_broker_master_epoch") == e2
    for n in ("n1", "n2", "n3"):
        # every node applied the election; on every node the killed master's sessions ended as a crash
        wait_until(lambda n=n: total(scrape(c.metrics_port[n]), "autoswitch_controller_elections_total",
                                     trigger="controller", kind="crash") >= 1, 30, f"{n} counts the election")
        after = scrape(c.metrics_port[n])
        assert total(after, "autoswitch_controller_broker_sessions_closed_total", crashed="true") >= 1
        assert total(after, "autoswitch_controller_raft_applied_index") > total(
            before[n], "autoswitch_controller_raft_applied_index")


def test_status_page_follows_a_failover_in_headless_chromium(procs, tmp_path):
    """Issue 15 item 3: the controller's status page, loaded once, shows the new master after a
    kill -9 without a reload (its script long-polls /status.json)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "chromium is needed (Debian package `chromium`; .ci/run installs it)"
    c = FailoverCluster(procs, tmp_path, metrics=True)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    port = c.metrics_port["n1"]
    code, body = status(port, "/status.json")
    assert code == 200 and f'"master":{m1},"epoch":{e1}' in body
    assert status(port, "/status.json?after=x")[0] == 400
    victim = c.broker_proc[c.master_name()]
    shown = scrape(port)
    # at most 8 polls of at most 3 s each: the election lands within them
    page = f"http://127.0.0.1:{port}/status?polls=8&wait=3"
    chrome = subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                               "--disable-background-networking", "--disable-component-update", "--disable-sync",
                               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=60000",
                               "--dump-dom", page], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the page's first poll was answered: the old master is on it; now fail it over
        wait_until(lambda: total(scrape(port), "autoswitch_controller_status_requests_total")
                   > total(shown, "autoswitch_controller_status_requests_total"), 60, "the page's first poll")
        victim.kill9()
        m2, e2 = c.wait_master(timeout=30, not_id=m1, min_epoch=e1 + 1)
        dom, err = chrome.communicate(timeout=90)
    finally:
        if chrome.poll() is None:
            chrome.kill()
            chrome.wait(10)
    assert chrome.returncode == 0, err[-2000:]
    seen = re.search(r'data-masters-seen="([^"]*)"', dom)
    assert seen, dom[:2000]
    assert {f"g1:{m1}@{e1}", f"g1:{m2}@{e2}"} <= set(seen.group(1).split()), seen.group(1)
    assert 'data-done="yes"' in dom and "<td>g1</td>" in dom


def test_metrics_port_survives_junk(procs, tmp_path):
    """The plain-HTTP port answers junk with an error or a closed connection and keeps serving."""
    import socket

    c = FailoverCluster(procs, tmp_path, metrics=True, n_brokers=1)
    c.start_controllers()
    port = c.metrics_port["n1"]

    def up() -> bool:
        try:
            return status(port, "/healthz")[0] == 200
        except OSError:
            return False
    wait_until(up, 30, "the metrics port")
    for junk in (b"BLAH\r\n\r\n", b"POST /metrics HTTP/1.1\r\n\r\n", b"GET /" + b"x" * 20000 + b" HTTP/1.1\r\n\r\n",
                 b"\x00\xff\xfe garbage"):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            reply = s.recv(200)
        assert reply == b"" or reply.startswith((b"HTTP/1.1 405", b"HTTP/1.1 404")), reply
    assert status(port, "/healthz") == (200, "ok\n")
    assert status(port, "/status.json?wait=-5")[0] == 200        # clamped to no wait


def test_probes_answer_while_the_data_plane_is_busy_or_frozen(procs, tmp_path):
    """Issue 59: the HTTP probes failed during floods (they queued behind the data plane on the
    process's loop) and idle connections could fill the server. Now the probes are answered on the
    HTTP server's own thread: 64 idle connections do not keep a probe out (the oldest idle one
    makes room), /readyz answers at once while the process's loop is frozen (what it last said),
    and /healthz says 503 once the loop has not run for STALE_S."""
    import socket
    import time as _time

    from autoswitch.base.observe import MAX_CONNECTIONS, STALE_S
    from tests.procs import HOST, free_port, wait_port

    port, ha, metrics = free_port(), free_port(), free_port()
    freeze = tmp_path / "freeze"
    cfg = tmp_path / "broker.toml"
    cfg.write_text("loop_stall_timeout_ms = 0\n")         # the watchdog would end a frozen master
    b = procs.start("b1", ["broker", "--config", str(cfg), "--role", "master", "--epoch", "1", "--group", "g1",
                           "--listen", f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--ack-mode", "master",
                           "--data-dir", str(tmp_path / "b1"), "--metrics-listen", f"{HOST}:{metrics}"],
                    crash_at=f"freeze:broker.loop_probe:{freeze}")
    wait_port(metrics, timeout=60)
    idle = [socket.create_connection((HOST, metrics), timeout=30) for _ in range(MAX_CONNECTIONS + 5)]
    try:
        assert status(metrics, "/healthz") == (200, "ok\n")
        assert status(metrics, "/readyz")[0] == 200
    finally:
        for s in idle:
            s.close()
    freeze.write_text("frozen")             # the broker's event loop thread stops in its probe
    try:
        wait_until(lambda: "test_freeze_injected" in b.log_text(), 30, "the loop frozen")
        t0 = _time.monotonic()
        code, why = status(metrics, "/readyz")
        assert code == 200 and _time.monotonic() - t0 < 5, (code, why)     # what it last said, at once
        code, why = wait_until(lambda: (r := status(metrics, "/healthz"))[0] == 503 and r, STALE_S + 30,
                               "/healthz says the loop is not running")
        assert "has not run" in why, why
    finally:
        freeze.unlink()
    wait_until(lambda: status(metrics, "/healthz") == (200, "ok\n"), 30, "healthy again once the loop runs")


def test_produce_and_consume_rates_reach_cluster_list_and_the_status_page(procs, tmp_path):
    """Issue 64 (mqadmin brokerStatus / clusterList TPS): the brokers' heartbeats carry their
    produce and consume rates over the last 10 s, per broker and per topic; `admin cluster-list`
    shows them, and so does the status page in a real browser."""
    from autoswitch.broker.client.client import ConsumerClient
    from autoswitch.broker.client.route import RoutedProducer

    from autoswitch.proto import broker_pb2 as bpb

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "chromium is needed (Debian package `chromium`; .ci/run installs it)"
    c = FailoverCluster(procs, tmp_path, metrics=True)
    c.start_all()
    m1, _ = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)

    master_addr = c.broker_addr(c.master_name())

    async def traffic() -> None:
        p = RoutedProducer(c.namesrv, "g1", tls=c.tls("admin"))
        try:
            for i in range(60):
                res = await p.produce("RatesT", [f"m{i}-{k}".encode() for k in range(5)])
                assert res and all(r.status == bpb.OK for r in res)
        finally:
            await p.close()
        reader = ConsumerClient(master_addr, tls=c.tls("admin"))
        try:
            got = await reader.consume("RatesT", 0, max_count=300)
            assert len(got.messages) == 300
        finally:
            await reader.close()

    asyncio.run(traffic())

    def rates() -> dict | None:
        out = _admin("cluster-list", "--controller", c.controllers, "--json", *c.tls_args("admin"))
        g = out["result"]["groups"][0]
        topic = {t["topic"]: t for t in out["result"]["topics"]}.get("RatesT")
        return out["result"] if (g["produce_per_s"] or 0) > 0 and topic and topic["consume_per_s"] > 0 else None
    res = wait_until(rates, 30, "the rates in cluster-list")
    g = res["groups"][0]
    assert g["master"] == m1 and g["consume_per_s"] > 0, g
    master_row = next(r for r in g["replicas"] if r["broker_id"] == m1)
    assert master_row["produce_per_s"] == g["produce_per_s"], g
    brokers = _admin("cluster-list", "--brokers", "--controller", c.controllers, "--json", *c.tls_args("admin"))
    assert any(b["produce_per_s"] for b in brokers["result"]["brokers"]), brokers
    # the status page, rendered by a browser, shows the topic with its rates
    port = c.metrics_port["n1"]
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=20000",
                          "--dump-dom", f"http://127.0.0.1:{port}/status?polls=1&wait=1"],
                         capture_output=True, text=True, timeout=90).stdout
    assert 'data-rendered="yes"' in dom, dom[:2000]
    row = re.search(r"<tr><td>RatesT</td><td>([0-9.]+)</td><td>([0-9.]+)</td></tr>", dom)
    assert row and float(row.group(1)) > 0 and float(row.group(2)) > 0, dom[dom.find('id="topics"'):][:1500]
