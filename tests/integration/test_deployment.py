"""The three-machine deployment of docs/operations.md, run as written, on three network
namespaces (a fourth for the clients).

What comes from the repository unchanged: the `sh step=...` blocks of docs/operations.md (run by
bash: certificates and token, then each machine's install), the example configs of
packaging/examples and the units of packaging/systemd, which the machine step installs and from
whose `EnvironmentFile`, `ExecStart`, `User`-less run and `StateDirectory` the processes are
started here. What differs, because a namespace is not a machine (the page says the same):
addresses 10.0.0.1-3 become the namespaces' 10.79.0.10-12, `/etc`, `/var/lib` and `/opt` lie under
a temporary directory, the runtime is this repository's venv, the `autoswitch` user and group
are `nobody`/`nogroup`, and `systemctl` is this file.

Then: a producer in the client namespace routes through all three name servers; the master's
machine is cut off (nftables), a new master takes over; the cut is healed; the next master's
machine is killed (kill -9 of its three processes) and restarted as `Restart=on-failure` would;
every acknowledged message is then read back through the name servers. Between the faults the
operator's views (ckquorum, endpoint-health) and a planned `move-masters` off a machine run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.chaos.netns import Netns, can_run

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"
MACHINES = ("m1", "m2", "m3")
UNITS = ("autoswitch-controller.service", "autoswitch-namesrv.service", "autoswitch-broker@g0.service")
CONTROLLERS = "10.0.0.1:9878,10.0.0.2:9878,10.0.0.3:9878"
NAMESRVS = "10.0.0.1:9876,10.0.0.2:9876,10.0.0.3:9876"
WAIT_S = 180            # the bound of every wait below; each ends as soon as its condition holds


def doc_blocks() -> dict[str, str]:
    blocks = dict(re.findall(r"^```sh step=(\w+)\n(.*?)^```", DOC.read_text(), flags=re.S | re.M))
    assert set(blocks) == {"certs", "machine", "check"}, sorted(blocks)
    return blocks


class Deployment:
    def __init__(self, net: Netns, top: Path) -> None:
        self.net, self.top = net, top
        self.ip = {f"10.0.0.{i + 1}": net.ip[m] for i, m in enumerate(MACHINES)}
        self.venv = Path(sys.prefix)
        self.work = top / "work"          # the operator's directory: as-certs/ and packaging/
        self.procs: dict[tuple[str, str], subprocess.Popen] = {}
        self.logs = top / "logs"
        self.logs.mkdir()
        self.last_answer: dict = {}
        self.run_as = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]

    # ------------------------------------------------------------ the namespace's differences
    def localize(self, text: str, machine: str | None = None) -> str:
        for doc_ip, ip in self.ip.items():
            text = text.replace(doc_ip, ip)
        if machine is not None:
            root = self.top / machine
            for path in ("/etc/autoswitch", "/etc/systemd/system", "/var/lib/autoswitch"):
                text = text.replace(path, f"{root}{path}")
        text = text.replace("/opt/autoswitch/venv", str(self.venv))
        return text.replace("-g autoswitch", "-g nogroup")

    def env(self) -> dict[str, str]:
        return {"PATH": f"{self.venv / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(self.work),
                "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}

    def bash(self, script: str, where: str | None = None) -> str:
        argv = ["bash", "-euo", "pipefail", "-c", script]
        if where is not None:
            argv = self.net.cmd(where, argv)
        r = subprocess.run(argv, cwd=self.work, env=self.env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{script}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
        return r.stdout

    # ------------------------------------------------------------ the documented steps
    def install(self, blocks: dict[str, str]) -> None:
        self.work.mkdir()
        (self.work / "packaging").symlink_to(ROOT / "packaging")
        self.bash(self.localize(blocks["certs"]))
        for i, m in enumerate(MACHINES):
            script = re.sub(r"^M=\d+ IP=\S+", f"M={i + 1} IP={self.net.ip[m]}", blocks["machine"], count=1,
                            flags=re.M)
            assert script != blocks["machine"], "the machine step no longer starts with M=... IP=..."
            self.bash(self.localize(script, m))
            # The installed files name 10.0.0.x and /etc/...: a machine's own would be right as is.
            for f in [*(self.top / m / "etc/autoswitch").glob("*.*"), *(self.top / m / "etc/systemd/system").glob("*")]:
                f.write_text(self.localize(f.read_text(), m))

    def unit_argv(self, machine: str, unit: str) -> list[str]:
        """The process systemd would start for ``unit`` (an installed file) on ``machine``."""
        template = unit.split("@")[0] + ("@.service" if "@" in unit else "")
        instance = unit.split("@")[1].removesuffix(".service") if "@" in unit else ""
        text = (self.top / machine / "etc/systemd/system" / template).read_text()
        keys = dict(re.findall(r"^(\w+)=(.*)$", text, flags=re.M))
        env: dict[str, str] = {}
        if "EnvironmentFile" in keys:
            for line in Path(keys["EnvironmentFile"]).read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    k, _, v = line.partition("=")
                    env[k.strip()] = v.strip()
        if keys.get("StateDirectory"):
            state = self.top / machine / "var/lib" / keys["StateDirectory"]
            state.mkdir(parents=True, exist_ok=True)
            shutil.chown(state, "nobody", "nogroup")
        argv: list[str] = []
        for word in shlex.split(keys["ExecStart"].replace("%i", instance)):
            if re.fullmatch(r"\$\w+", word):                  # $VAR: split into words
                argv += env.get(word[1:], "").split()
            else:                                          # ${VAR}: one word
                argv.append(re.sub(r"\$\{(\w+)\}", lambda mm: env.get(mm.group(1), ""), word))
        return argv

    def start(self, machine: str) -> None:
        for unit in UNITS:
            argv = self.unit_argv(machine, unit)
            log = open(self.logs / f"{machine}-{unit}.log", "ab")  # noqa: SIM115 - closed with the process
            self.procs[(machine, unit)] = subprocess.Popen(self.net.cmd(machine, [*self.run_as, *argv]),
                                                           stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                                           cwd="/")
            log.close()

    def kill(self, machine: str) -> None:
        for (m, _unit), p in self.procs.items():
            if m == machine and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(30)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait(30)

    # ------------------------------------------------------------ operator's view
    def cli(self, args: str, what: str = "admin") -> dict:
        tls = f"--tls-ca as-certs/ca.pem --tls-cert as-certs/{what}.pem --tls-key as-certs/{what}.key"
        argv = ["bash", "-c", f"autoswitch {self.localize(args)} {tls} --json"]
        r = subprocess.run(self.net.cmd("client", argv), cwd=self.work, env=self.env(), capture_output=True,
                           text=True, timeout=120)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else {"ok": False, "error": {"message": r.stderr[-500:]}}

    def group(self) -> dict | None:
        out = self.cli(f"admin cluster-list --controller {CONTROLLERS} --timeout-s 5")
        self.last_answer = out
        groups = out.get("result", {}).get("groups", []) if out.get("ok") else []
        return groups[0] if groups else None

    def wait_group(self, what: str, ok) -> dict:
        deadline = time.monotonic() + WAIT_S
        g = None
        while time.monotonic() < deadline:
            g = self.group()
            if g is not None and ok(g):
                return g
            time.sleep(0.5)
        raise AssertionError(f"{what}: not within {WAIT_S} s; last seen {g} ({self.last_answer}); logs in {self.logs}")

    def machine_of(self, broker_address: str) -> str:
        ip = broker_address.rsplit(":", 1)[0]
        return next(m for m in MACHINES if self.net.ip[m] == ip)


def _acked(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.endswith("}")]


def _wait_acks(path: Path, what: str, ok) -> list[dict]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        acks = _acked(path)
        if ok(acks):
            return acks
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {WAIT_S} s ({len(_acked(path))} acks)")


def test_three_machine_deployment_from_the_shipped_files():
    why = can_run()
    if why is not None:
        pytest.skip(f"needs network namespaces: {why}")    # the CI machines run as root
    blocks = doc_blocks()
    top = Path(tempfile.mkdtemp(prefix="asdeploy-"))
    top.chmod(0o755)               # the processes run as nobody: it must reach its files
    net = Netns([*MACHINES, "client"], prefix="asdp", subnet="10.79.0")
    net.up()
    d = Deployment(net, top)
    producer: subprocess.Popen | None = None
    try:
        d.install(blocks)
        probe = subprocess.run([*d.run_as, "test", "-x", str(d.venv / "bin" / "autoswitch")], timeout=30)
        if probe.returncode != 0:
            d.run_as = []          # a checkout nobody cannot read: run as root (the units' User= untested)
        for m in MACHINES:
            d.start(m)
        g = d.wait_group("three replicas in sync with a master",
                         lambda g: g["master"] and len(g["sync_state_set"]) == 3)
        # Step 5 as written: metadata, SyncStateSet, three acks through the name servers.
        d.bash(d.localize(blocks["check"]), where="client")

        ack_log = top / "acks.jsonl"
        prod_log = open(d.logs / "producer.log", "ab")  # noqa: SIM115
        tls = "--tls-ca as-certs/ca.pem --tls-cert as-certs/producer_app.pem --tls-key as-certs/producer_app.key"
        producer = subprocess.Popen(
            net.cmd("client", ["bash", "-c", d.localize(
                f"exec autoswitch produce --namesrv {NAMESRVS} --group g0 --topic orders --count 200000 "
                f"--duration-s 900 --interval-ms 20 --retry-deadline-s 120 --ack-log {ack_log} {tls}")]),
            cwd=d.work, env=d.env(), stdout=prod_log, stderr=subprocess.STDOUT)
        prod_log.close()
        _wait_acks(ack_log, "first acks", lambda a: len(a) >= 20)

        # 1. The master's machine is cut off from everything: a new master, acks go on.
        first = d.machine_of(g["master_address"])
        net.isolate(first, [n for n in net.names if n != first])
        epoch = g["master_epoch"]
        _wait_acks(ack_log, f"acks from a new master after cutting {first} off",
                   lambda a: any(x["epoch"] > epoch for x in a[-50:]))
        g = d.wait_group("a new master", lambda g: g["master_epoch"] > epoch and g["master"])
        net.heal()
        g = d.wait_group("the cut machine back in sync", lambda g: len(g["sync_state_set"]) == 3)
        # The operator's views of it, and a planned move: every master off the current master's
        # machine (as before maintenance), while the producer goes on.
        assert d.cli(f"admin ckquorum --controller {CONTROLLERS}")["ok"]
        health = d.cli(f"admin endpoint-health --controller {CONTROLLERS}")["result"]["endpoints"]
        assert [e["healthy"] for e in health] == [True] * 3, health
        host = g["master_address"].rsplit(":", 1)[0]
        dry = d.cli(f"admin move-masters --controller {CONTROLLERS} --from-host {host} --dry-run")
        assert dry["ok"] and dry["result"]["groups"][0]["result"].startswith("would move to broker"), dry
        none = d.cli(f"admin move-masters --controller {CONTROLLERS} --from-host 10.255.255.1 --dry-run")
        assert none["ok"] and none["result"]["summary"] == "no master on 10.255.255.1", none
        moved = d.cli(f"admin move-masters --controller {CONTROLLERS} --from-host {host}")
        assert moved["ok"] and [r["result"] for r in moved["result"]["groups"]] == ["moved"], moved
        g = d.wait_group("the master off that machine, all in sync",
                         lambda g: not g["master_address"].startswith(host + ":") and len(g["sync_state_set"]) == 3)

        # 2. The next master's machine dies (kill -9 of all three processes); then it restarts.
        second = d.machine_of(g["master_address"])
        epoch = g["master_epoch"]
        d.kill(second)
        _wait_acks(ack_log, f"acks from a new master after killing {second}",
                   lambda a: any(x["epoch"] > epoch for x in a[-50:]))
        d.start(second)
        g = d.wait_group("the killed machine back in sync", lambda g: len(g["sync_state_set"]) == 3)
        n_before = len(_acked(ack_log))
        _wait_acks(ack_log, "acks after the restart", lambda a: len(a) >= n_before + 20)
        producer.send_signal(signal.SIGTERM)
        producer.wait(60)

        # Nothing acknowledged is lost: every acked msg_id is read back through the name servers
        # (by the operator: a producer certificate may not read).
        reader = tls.replace("producer_app", "admin")
        acked = _acked(ack_log)
        r = subprocess.run(net.cmd("client", ["bash", "-c", d.localize(
            f"autoswitch consume --namesrv {NAMESRVS} --group g0 --topic orders --count 1000000 --json {reader}")]),
            cwd=d.work, env=d.env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        read = {m["msg_id"] for m in map(json.loads, (ln for ln in r.stdout.splitlines() if ln.startswith("{")))
                if "msg_id" in m}
        lost = [a["msg_id"] for a in acked if a["msg_id"] not in read]
        epochs = {a["epoch"] for a in acked}
        assert len(epochs) >= 3, f"expected acks from three masters, got epochs {sorted(epochs)}"
        assert not lost, f"{len(lost)} of {len(acked)} acked messages lost, e.g. {lost[:5]}"
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait(30)
        d.stop_all()
        net.down()
        if os.environ.get("AUTOSWITCH_KEEP_DEPLOY") is None:
            with contextlib.suppress(OSError):
                shutil.rmtree(top)
