"""`autoswitch recover-member`: rejoin a controller node whose Raft files were lost.

A node that lost its log and vote must not simply start empty: it could vote a second time in a
term it already voted in (two leaders), and as an empty voter it could help elect a candidate
lacking entries its lost log held (committed entries gone). Start-up therefore refuses such a
data dir, and this command is the one explicit way back:

1. every other member is asked for its Raft term (GetMetaData on its client address); at least a
   majority of the whole cluster must answer, so the rest of the cluster still has a quorum;
2. the lost files are moved aside (``raft`` and ``events.jsonl`` get a ``.lost-<time>`` suffix);
3. a fresh Raft directory is written: the hard state ``(term = highest term seen, vote = self)``
   -- it cannot vote again in that term -- and the ``catch_up`` marker: the node neither votes nor
   campaigns until a leader has brought its log up to that leader's commit index
   (``RaftCore(catch_up=True)``).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from autoswitch.controller.config import ControllerConfig

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.fsutil import fsync_dir, write_atomic
from autoswitch.base.log import get_logger

_log = get_logger("controller.recover")


class RecoverRefused(AutoswitchError):
    code = "RECOVER_REFUSED"


@dataclass
class RecoverResult:
    node_id: str
    term: int
    answered: dict[str, int]          # member -> its Raft term
    moved_aside: list[str]


async def _terms(cfg: ControllerConfig, timeout_s: float) -> tuple[dict[str, int], dict[str, str]]:
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    others = {n: a for n, a in cfg.peers.items() if n != cfg.node_id}
    answered: dict[str, int] = {}
    failed: dict[str, str] = {}
    async with ControllerClient(list(cfg.peers.values()), rpc_timeout_s=timeout_s, deadline_s=timeout_s,
                                tls=cfg.tls) as c:
        async def ask(nid: str, addr: str) -> None:
            try:
                m = await c.call_node(addr, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=timeout_s)
                answered[nid] = int(m.raft_term)
            except ControllerRpcError as e:
                failed[nid] = e.message[:200]

        await asyncio.gather(*(ask(n, a) for n, a in others.items()))
        # This node itself must be down: recovering a running node would pull its files away.
        try:
            await c.call_node(cfg.peers[cfg.node_id], "GetMetaData", pb.GetMetaDataRequest(), timeout_s=timeout_s)
        except ControllerRpcError:
            pass
        else:
            raise RecoverRefused(f"{cfg.node_id} answers at {cfg.peers[cfg.node_id]}: stop it before recovering it")
    return answered, failed


def recover_member(cfg: ControllerConfig, timeout_s: float = 5.0) -> RecoverResult:
    from autoswitch.controller.raft.messages import HardState
    from autoswitch.controller.raft.node import CATCH_UP_MARKER
    from autoswitch.controller.raft.quorum import majority
    from autoswitch.controller.raft.storage import FileStorage

    answered, failed = asyncio.run(_terms(cfg, timeout_s))
    quorum = majority(len(cfg.peers))
    if len(answered) < quorum:
        raise RecoverRefused(
            f"only {len(answered)} of the {len(cfg.peers) - 1} other members answered ({sorted(answered)}); "
            f"the rest of the cluster must hold a quorum ({quorum} of {len(cfg.peers)}) so that what this "
            "node lost still exists elsewhere", failed=failed)
    term = max(answered.values())
    data = Path(cfg.data_dir)
    data.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    moved: list[str] = []
    for name in ("raft", "events.jsonl"):
        p = data / name
        if p.exists():
            dest = data / f"{name}.lost-{stamp}"
            shutil.move(str(p), dest)
            moved.append(str(dest))
    raft = data / "raft"
    storage = FileStorage(raft)
    storage.load()
    # vote = self: this node may have voted in `term` before it lost the record; it never votes
    # again there. The marker keeps it out of every election until a leader caught it up.
    storage.save(HardState(term=term, vote=cfg.node_id, commit=0), [])
    storage.close()
    write_atomic(raft / CATCH_UP_MARKER, f"recovered at term {term} from {sorted(answered)}\n".encode())
    fsync_dir(data)
    _log.warning("member_recovered", node=cfg.node_id, term=term, answered=answered, failed=sorted(failed),
                 moved_aside=moved)
    return RecoverResult(cfg.node_id, term, answered, moved)
