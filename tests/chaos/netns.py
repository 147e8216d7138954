"""Network namespaces for chaos runs: one namespace per node on a bridge, nftables partitions.

Everything created here carries the ``PREFIX`` so cleanup removes exactly what we made.
Needs root, ``ip`` (iproute2) and ``nft`` (nftables).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

PREFIX = "asch"          # autoswitch chaos
SUBNET = "10.77.0"


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=20)


def can_run() -> str | None:
    """None when chaos can run here, else the reason in plain words."""
    if os.geteuid() != 0:
        return "not root: network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool!r} not installed (apt-get install iproute2 nftables)"
    try:
        sh("ip", "netns", "add", f"{PREFIX}probe")
        sh("ip", "netns", "del", f"{PREFIX}probe")
    except (subprocess.CalledProcessError, OSError) as e:
        return f"cannot create a network namespace: {getattr(e, 'stderr', e)}"
    return None


class Netns:
    """``prefix``/``subnet``: a user other than the chaos runs (the ZooKeeper partition test)
    takes its own, so neither one's cleanup removes the other's namespaces."""

    def __init__(self, names: list[str], prefix: str = PREFIX, subnet: str = SUBNET) -> None:
        self.names = list(names)
        self.prefix, self.bridge, self.host_ip = prefix, f"{prefix}br0", f"{subnet}.1"
        self.ip = {n: f"{subnet}.{10 + i}" for i, n in enumerate(self.names)}
        self.ns = {n: f"{prefix}-{n}" for n in self.names}

    def up(self) -> None:
        self.down()         # leftovers of a killed run
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for i, n in enumerate(self.names):
            ns, host_if = self.ns[n], f"{self.prefix}v{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", host_if, "master", self.bridge)
            sh("ip", "link", "set", host_if, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ip[n]}/24", "dev", "eth0")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            sh("ip", "netns", "exec", ns, "nft", "add", "table", "inet", "chaos")
            for chain, hook in (("in", "input"), ("out", "output")):
                sh("ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "chaos", chain,
                   f"{{ type filter hook {hook} priority 0 ; policy accept ; }}")

    def down(self) -> None:
        out = sh("ip", "netns", "list", check=False).stdout
        for line in out.splitlines():
            name = line.split()[0] if line.split() else ""
            if name.startswith(f"{self.prefix}-"):
                sh("ip", "netns", "del", name, check=False)
        links = sh("ip", "-o", "link", "show", check=False).stdout
        for line in links.splitlines():
            parts = line.split(":")
            if len(parts) > 1:
                name = parts[1].strip().split("@")[0]
                if name.startswith(self.prefix):
                    sh("ip", "link", "del", name, check=False)

    def cmd(self, node: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns[node], *argv]

    # ---------------------------------------------------------------- partitions
    def isolate(self, node: str, from_nodes: list[str]) -> None:
        """Drop traffic between ``node`` and each of ``from_nodes`` (both directions, at node)."""
        ns = self.ns[node]
        for other in from_nodes:
            ip = self.ip[other]
            sh("ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "chaos", "in", "ip", "saddr", ip, "drop")
            sh("ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "chaos", "out", "ip", "daddr", ip, "drop")

    def isolate_from_host(self, node: str) -> None:
        """Drop traffic between ``node`` and the root namespace (clients run there)."""
        ns = self.ns[node]
        sh("ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "chaos", "in", "ip", "saddr", self.host_ip, "drop")
        sh("ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "chaos", "out", "ip", "daddr", self.host_ip, "drop")

    def heal(self) -> None:
        for n in self.names:
            for chain in ("in", "out"):
                with contextlib.suppress(subprocess.CalledProcessError):
                    sh("ip", "netns", "exec", self.ns[n], "nft", "flush", "chain", "inet", "chaos", chain)
