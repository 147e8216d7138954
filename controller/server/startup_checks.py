"""What a controller node checks of its data directory and settings before it serves: a Raft log
that is still there, the cluster the directory belongs to, and loud warnings for a setup that is
only fit for loopback development."""

from __future__ import annotations

from pathlib import Path

from autoswitch.controller.config import ControllerConfig, cluster_id
from autoswitch.controller.raft.errors import RaftStorageCorrupt

from autoswitch.base.errors import ConfigError
from autoswitch.base.fsutil import write_atomic
from autoswitch.base.log import EventLogger


def check_raft_dir_present(data_dir: Path) -> None:
    """A node that applied entries (events.jsonl) must still have a Raft log or snapshot: with
    the raft directory gone it would start as a new node (term 0, no vote) and could vote a
    second time in a term it already voted in. The raft storage checks the rest."""
    raft = data_dir / "raft"
    events = data_dir / "events.jsonl"
    if not events.exists() or events.stat().st_size == 0:
        return
    if raft.is_dir() and any(raft.iterdir()):
        return                  # files remain: the raft storage checks names what is missing
    raise RaftStorageCorrupt(
        f"{events} records applied entries but {raft} is missing or empty; refusing to start "
        "(a node that forgot its log and vote could elect a second leader). If this disk was lost or "
        "replaced, rejoin with `autoswitch recover-member` (docs/operations-controller.md)",
        path=str(raft))


def check_cluster_id(config: ControllerConfig, data_dir: Path, log: EventLogger) -> None:
    """The data dir remembers the cluster it was created for; a node started with other
    members or another cluster_token would talk to nobody (its messages are refused), so it
    refuses to start instead, naming both ids."""
    want = config.raft_cluster_id
    path = data_dir / "cluster_id"
    try:
        have = path.read_text().strip()
    except FileNotFoundError:
        write_atomic(path, (want + "\n").encode())
        return
    if (have != want and not config.cluster_token and not config.cluster_id
            and have == cluster_id("autoswitch", config.peers)):
        # made before its certificates were bound to a cluster (a plaintext cluster moving to
        # TLS): it keeps the id its peers know it by
        config.cluster_id = have
        log.info("cluster_id_kept", cluster_id=have, note="created with the plaintext default token")
        return
    if have != want:
        raise ConfigError(f"data dir {data_dir} belongs to raft cluster {have}, but peers and "
                          f"cluster_token give {want}: start it with the members it was created with, "
                          f"or with cluster_id = \"{have}\" after membership changes", path=str(path))


def warn_insecure(config: ControllerConfig, log: EventLogger) -> None:
    if not config.tls.enabled:
        log.warning("plaintext", listen=config.listen_addr,
                    note="no [tls]: clients and peers are not authenticated; loopback development only")
    elif not config.auth:
        log.warning("no_authorization", listen=config.listen_addr,
                    note="auth = false: any holder of a certificate of the CA may make any call")
    if not config.raft_peers:
        log.warning("raft_shares_client_port", listen=config.listen_addr,
                    note="set raft_peers so Raft listens apart from clients")
