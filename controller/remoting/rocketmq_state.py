"""A running RocketMQ controller's state, read through its own remoting protocol, for moving its
cluster onto autoswitch (docs/rocketmq.md "Moving a running RocketMQ cluster").

What is read: for each broker group, RocketMQ's 1006 reply (``BrokerReplicasInfo``: master,
MasterEpoch, syncStateSetEpoch, the in-sync and the other registered replicas with their brokerIds
and addresses), from the controller leader that 1005 names. The group names come from the
operator or from a name server's cluster table (106). What the brokers' own epoch files hold
(1007, each broker's ``EpochEntryCache``) is read to check an export against the brokers before
it is imported: an election after the export would leave it behind them.

Everything a peer sends is checked here into typed records (``RocketMQStateError`` otherwise):
brokerIds in range, addresses HOST:PORT, epochs Java ints, the master among the in-sync replicas.
The file an export writes is the same records as JSON (``FORMAT``, ``VERSION``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import msgspec
from autoswitch.controller.remoting import client
from autoswitch.controller.remoting.codec import RemotingError, loads_fastjson

from autoswitch.base.addr import is_hostport
from autoswitch.base.errors import AutoswitchError, too_new
from autoswitch.base.fsutil import write_atomic
from autoswitch.base.limits import MAX_ADDRESS_LEN, MAX_BROKER_ID, MAX_NAME_LEN, MAX_REPLICAS_PER_GROUP

GET_BROKER_CLUSTER_INFO = 106
GET_SYNC_STATE_DATA = 1006
GET_BROKER_EPOCH_CACHE = 1007
FORMAT = "autoswitch-rocketmq-export"
VERSION = 1
MAX_GROUPS = 10_000            # per export
GROUPS_PER_CALL = 100          # names per 1006 request (RocketMQ answers them in one reply)
MAX_FILE_BYTES = 64 << 20
JAVA_INT_MAX = 2**31 - 1

BrokerId = Annotated[int, msgspec.Meta(ge=1, le=MAX_BROKER_ID)]
Epoch = Annotated[int, msgspec.Meta(ge=0, le=JAVA_INT_MAX)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LEN)]
Address = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ADDRESS_LEN)]


class RocketMQStateError(AutoswitchError):
    """A RocketMQ controller's answer, a broker's epoch cache or an export file that cannot be
    taken as a group's state (unreachable, refused, malformed, or behind the brokers)."""

    code = "ROCKETMQ_STATE"


class Replica(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    broker_id: BrokerId
    address: Address
    in_sync: bool
    alive: bool = False


class GroupExport(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    cluster_name: Name
    broker_name: Name
    master_epoch: Epoch
    sync_state_set_epoch: Epoch
    replicas: Annotated[tuple[Replica, ...], msgspec.Meta(min_length=1, max_length=MAX_REPLICAS_PER_GROUP)]
    master_broker_id: Annotated[int, msgspec.Meta(ge=0, le=MAX_BROKER_ID)] = 0      # 0 = no master

    @property
    def sync_state_set(self) -> tuple[int, ...]:
        return tuple(sorted(r.broker_id for r in self.replicas if r.in_sync))

    def check(self) -> GroupExport:
        ids = [r.broker_id for r in self.replicas]
        if len(set(ids)) != len(ids):
            raise RocketMQStateError(f"{self.broker_name}: a brokerId is listed twice", group=self.broker_name)
        bad = [r.address for r in self.replicas if not is_hostport(r.address)]
        if bad:
            raise RocketMQStateError(f"{self.broker_name}: not HOST:PORT: {bad[0][:64]!r}", group=self.broker_name)
        if self.master_broker_id and self.master_broker_id not in self.sync_state_set:
            raise RocketMQStateError(f"{self.broker_name}: master {self.master_broker_id} is not among the in-sync "
                                     f"replicas {list(self.sync_state_set)}", group=self.broker_name)
        if self.master_broker_id and self.master_epoch == 0:
            raise RocketMQStateError(f"{self.broker_name}: a master at MasterEpoch 0", group=self.broker_name)
        return self


class Export(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    format: str
    version: int
    source: Annotated[str, msgspec.Meta(max_length=1024)]
    read_at_ms: int
    groups: Annotated[tuple[GroupExport, ...], msgspec.Meta(max_length=MAX_GROUPS)]


def parse_replicas_info(cluster: str, name: str, info: Any) -> GroupExport:
    """One group of a 1006 reply (``replicasInfoTable[name]``) as a checked record."""
    if not isinstance(info, dict):
        raise RocketMQStateError(f"{name}: the controller's answer holds no replicas for it", group=name)

    def replicas(key: str, in_sync: bool) -> list[dict[str, Any]]:
        rows = info.get(key) or []
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise RocketMQStateError(f"{name}: {key} is not a list of replicas", group=name)
        return [{"broker_id": r.get("brokerId"), "address": r.get("brokerAddress"), "in_sync": in_sync,
                 "alive": bool(r.get("alive"))} for r in rows]

    raw = {"cluster_name": cluster, "broker_name": name, "master_epoch": info.get("masterEpoch"),
           "sync_state_set_epoch": info.get("syncStateSetEpoch"),
           "replicas": replicas("inSyncReplicas", True) + replicas("notInSyncReplicas", False),
           "master_broker_id": info.get("masterBrokerId") or 0}
    try:
        return msgspec.convert(raw, GroupExport).check()
    except msgspec.ValidationError as e:
        raise RocketMQStateError(f"{name}: {e}", group=name) from None


def group_names(namesrv: str, cluster: str, timeout: float = 3.0) -> list[str]:
    """The broker groups of ``cluster`` as a name server lists them (106)."""
    table = _ask(f"name server {namesrv}", namesrv, GET_BROKER_CLUSTER_INFO, timeout).get("clusterAddrTable") or {}
    names = table.get(cluster) if isinstance(table, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise RocketMQStateError(f"name server {namesrv} lists no broker groups of cluster {cluster!r}")
    if len(names) > MAX_GROUPS:
        raise RocketMQStateError(f"cluster {cluster!r} has {len(names)} groups; at most {MAX_GROUPS} per export")
    return sorted(set(names))


def read_controller(controllers: list[str], cluster: str, names: list[str], timeout: float = 3.0) -> Export:
    """Every group of ``names`` as the controller leader among ``controllers`` holds it (1005,
    then 1006). A group the controller does not know is an error: an export names what it read."""
    if not names:
        raise RocketMQStateError("no broker groups to read")
    if len(names) > MAX_GROUPS:
        raise RocketMQStateError(f"{len(names)} groups; at most {MAX_GROUPS} per export")
    leader = client.leader(controllers, timeout=timeout)
    if leader is None:
        raise RocketMQStateError(f"no controller leader named by {', '.join(controllers)} (1005)")
    groups: list[GroupExport] = []
    conn = client.Connection(leader, timeout)
    try:
        for i in range(0, len(names), GROUPS_PER_CALL):
            chunk = names[i:i + GROUPS_PER_CALL]
            try:
                r = conn.call(GET_SYNC_STATE_DATA, body=msgspec.json.encode(chunk))
            except (OSError, RemotingError) as e:
                raise RocketMQStateError(f"controller {leader}: {e}") from None
            if r.code != 0 or not r.body:
                raise RocketMQStateError(f"controller {leader} answered 1006 with code {r.code} ({r.remark or 'no body'})")
            table = _loads(r.body, f"controller {leader}").get("replicasInfoTable") or {}
            if not isinstance(table, dict):
                raise RocketMQStateError(f"controller {leader}: replicasInfoTable is not a table")
            for name in chunk:
                if name not in table:
                    raise RocketMQStateError(f"controller {leader} does not know broker group {name!r}", group=name)
                groups.append(parse_replicas_info(cluster, name, table[name]))
    finally:
        conn.close()
    return Export(FORMAT, VERSION, leader, int(time.time() * 1000), tuple(groups))


def broker_epoch(address: str, timeout: float = 3.0) -> int:
    """The last MasterEpoch in the broker's epoch file (1007; -1 for an empty file)."""
    entries = _ask(f"broker {address}", address, GET_BROKER_EPOCH_CACHE, timeout).get("epochList") or []
    if not isinstance(entries, list):
        raise RocketMQStateError(f"broker {address}: epochList is not a list")
    epochs: list[int] = []
    for entry in entries:
        x = entry.get("epoch") if isinstance(entry, dict) else None
        if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x <= JAVA_INT_MAX:
            raise RocketMQStateError(f"broker {address}: an epoch entry without a Java int epoch")
        epochs.append(x)
    return max(epochs, default=-1)


def check_against_brokers(group: GroupExport, timeout: float = 3.0) -> tuple[dict[int, int], dict[int, str]]:
    """({brokerId: the last epoch in its file}, {brokerId: why it was not read}). Raises when a
    broker's file holds an epoch above the export's MasterEpoch: the controller elected again
    after the export was read, and importing it would take the group's epoch backwards."""
    seen: dict[int, int] = {}
    unread: dict[int, str] = {}
    for r in group.replicas:
        try:
            seen[r.broker_id] = broker_epoch(r.address, timeout)
        except RocketMQStateError as e:
            unread[r.broker_id] = e.message
    ahead = {b: e for b, e in seen.items() if e > group.master_epoch}
    if ahead:
        raise RocketMQStateError(
            f"{group.broker_name}: broker(s) {sorted(ahead)} hold MasterEpoch {max(ahead.values())} in their epoch "
            f"files, above the export's {group.master_epoch}: the group changed after it was read; export it again "
            f"(with RocketMQ's controllers stopped nothing changes between export and import)",
            group=group.broker_name, ahead=ahead)
    return seen, unread


def dump(export: Export, path: Path) -> None:
    """Write an export file (atomically, fsynced)."""
    write_atomic(path, msgspec.json.format(msgspec.json.encode(export), indent=1) + b"\n")


def load(path: Path) -> Export:
    """An export file, checked (RocketMQStateError, FormatTooNew)."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise RocketMQStateError(f"{path}: larger than {MAX_FILE_BYTES} bytes: not an export")
        data = path.read_bytes()
    except OSError as e:
        raise RocketMQStateError(f"{path}: {e.strerror or e}") from None
    try:
        head = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise RocketMQStateError(f"{path}: not JSON: {e}") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise RocketMQStateError(f"{path}: not an export of `autoswitch admin rocketmq-export`")
    if isinstance(head.get("version"), int) and head["version"] > VERSION:
        raise too_new(str(path), head["version"], VERSION)
    try:
        out = msgspec.json.decode(data, type=Export)
    except msgspec.ValidationError as e:
        raise RocketMQStateError(f"{path}: {e}") from None
    for g in out.groups:
        g.check()
    if len({g.broker_name for g in out.groups}) != len(out.groups):
        raise RocketMQStateError(f"{path}: a broker group is listed twice")
    return out


def _ask(who: str, address: str, code: int, timeout: float) -> dict[str, Any]:
    """One request without a body, its answer's body as a JSON object."""
    try:
        r = client.call(address, code, timeout=timeout)
    except (OSError, RemotingError) as e:
        raise RocketMQStateError(f"{who}: {e}") from None
    if r.code != 0 or not r.body:
        raise RocketMQStateError(f"{who} answered {code} with code {r.code} ({r.remark or 'no body'})")
    return _loads(r.body, who)


def _loads(body: bytes, who: str) -> dict[str, Any]:
    try:
        out = loads_fastjson(body)
    except (ValueError, RemotingError, RecursionError) as e:
        raise RocketMQStateError(f"{who}: an answer that is not JSON: {e}") from None
    if not isinstance(out, dict):
        raise RocketMQStateError(f"{who}: an answer that is not a JSON object")
    return out

