"""RocketMQ's remoting protocol on the controller: unmodified RocketMQ 5.1.1+ brokers and mqadmin
use autoswitch as their controller (docs/rocketmq.md).

Every request is translated into the gRPC servicer's own request and answered by the same
handler, so there is one state machine, one validation and one set of reply codes behind both
ports; this module only maps fields. What differs from our own brokers is written where it is
mapped: a RocketMQ broker states no incarnation, no clean-shutdown flag and no lease, so it is
registered and heartbeats as "clean, not stated" (RocketMQ's own controller knows no more), and
its connection's close counts as its crash, as RocketMQ's controller counts it.

Limits: connections (``MAX_CONNECTIONS``), requests in flight per connection
(``MAX_IN_FLIGHT``; reading pauses beyond it) and unsent reply bytes per connection
(``MAX_UNSENT_BYTES``; reading pauses until the peer reads): a peer that sends and never reads
costs a bounded amount of memory.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from autoswitch.controller.codes import Code, code_name
from autoswitch.controller.failover.liveness import Opinion
from autoswitch.controller.remoting import codec
from autoswitch.controller.remoting.codec import Command, RemotingError, field, int32_field
from autoswitch.controller.remoting.routes import RocketRoutes, RouteRefused
from autoswitch.controller.server.service import ControllerServicer

from autoswitch.base.log import RateLimitedLog, get_logger
from autoswitch.proto import controller_pb2 as pb

if TYPE_CHECKING:
    from autoswitch.controller.server.node_api import ServedNode

_log = get_logger("controller.remoting")
_refusals = RateLimitedLog(_log)

# RocketMQ request codes (remoting/protocol/RequestCode.java) this front serves.
REGISTER_BROKER_NS = 103
UNREGISTER_BROKER_NS = 104
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106
QUERY_DATA_VERSION = 322
GET_KV_CONFIG = 101
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
GET_KVLIST_BY_NAMESPACE = 219
GET_TOPICS_BY_CLUSTER = 224
GET_NAMESRV_CONFIG = 319
BROKER_HEARTBEAT = 904
ALTER_SYNC_STATE_SET = 1001
ELECT_MASTER = 1002
REGISTER_BROKER = 1003
GET_REPLICA_INFO = 1004
GET_METADATA_INFO = 1005
GET_SYNC_STATE_DATA = 1006
NOTIFY_BROKER_ROLE_CHANGED = 1008
UPDATE_CONTROLLER_CONFIG = 1009
GET_CONTROLLER_CONFIG = 1010
CLEAN_BROKER_DATA = 1011
GET_NEXT_BROKER_ID = 1012
APPLY_BROKER_ID = 1013
# RocketMQ response codes that are not the controller's own (codes.py holds those).
SYSTEM_ERROR, SYSTEM_BUSY, REQUEST_CODE_NOT_SUPPORTED, TOPIC_NOT_EXIST, QUERY_NOT_FOUND = 1, 2, 3, 17, 22

MAX_CONNECTIONS = 4096
MAX_IN_FLIGHT = 64
MAX_UNSENT_BYTES = 4 * 1024 * 1024
READ_CHUNK = 64 * 1024
PUSH_TIMEOUT_S = 3.0           # RocketMQ's notifyBrokerRoleChanged waits 3 s
MAX_PUSHES_IN_FLIGHT = 256
JAVA_INT_MAX = 2**31 - 1


def _java_code(code: int) -> int:
    """Our process-level codes (29xx) have no RocketMQ number: a Java caller sees SYSTEM_ERROR (or
    SYSTEM_BUSY for a limit), and the remark names our code."""
    if code < 2900:
        return code
    if code == Code.CONTROLLER_OVERLOADED:
        return SYSTEM_BUSY
    if code in (Code.CONTROLLER_MALFORMED_REQUEST, Code.CONTROLLER_REQUEST_TOO_LARGE):
        return int(Code.CONTROLLER_INVALID_REQUEST)
    return SYSTEM_ERROR


def _properties(values: Mapping[str, str]) -> bytes:
    """Java properties text (``k=v`` lines), as mqadmin's config commands read a body."""
    return "".join(f"{k}={v}\n" for k, v in sorted(values.items())).encode()


def _sss_body(info: pb.ReplicaInfo) -> bytes:
    return codec.dumps({"syncStateSet": sorted(info.sync_state_set), "syncStateSetEpoch": info.sync_state_set_epoch})


def _master_fields(info: pb.ReplicaInfo) -> dict[str, Any]:
    """masterEpoch always (a broker unboxes it); masterBrokerId and masterAddress only when there
    is a master: RocketMQ says "no master" by leaving them out."""
    out: dict[str, Any] = {"masterEpoch": info.master_epoch, "syncStateSetEpoch": info.sync_state_set_epoch}
    if info.master_broker_id:
        out["masterBrokerId"] = info.master_broker_id
        out["masterAddress"] = info.master_address
    return out


class RemotingFront:
    """Requests of RocketMQ's remoting protocol answered through the node's servicer."""

    def __init__(self, node: ServedNode) -> None:
        self.node = node
        self.servicer = ControllerServicer(node)
        cfg = node.config
        self.peers: dict[str, str] = dict(cfg.remoting_peers) or {node.node_id: cfg.remoting_listen}
        self.admin = cfg.remoting_admin
        self._handlers: dict[int, Callable[[Command], Awaitable[Command | None]]] = {
            GET_METADATA_INFO: self._metadata, GET_NEXT_BROKER_ID: self._next_broker_id,
            APPLY_BROKER_ID: self._apply_broker_id, REGISTER_BROKER: self._register,
            BROKER_HEARTBEAT: self._heartbeat, ELECT_MASTER: self._elect, GET_REPLICA_INFO: self._replica_info,
            ALTER_SYNC_STATE_SET: self._alter, GET_SYNC_STATE_DATA: self._sync_state_data,
            CLEAN_BROKER_DATA: self._clean, GET_CONTROLLER_CONFIG: self._get_config,
            UPDATE_CONTROLLER_CONFIG: self._update_config,
        }
        self.on_heartbeat: Callable[[str, int, str], None] = lambda group, bid, addr: None

    def add_handlers(self, handlers: dict[int, Callable[[Command], Awaitable[Command | None]]]) -> None:
        assert not set(handlers) & set(self._handlers), "request codes must not clash"
        self._handlers.update(handlers)

    async def handle(self, req: Command) -> Command | None:
        """The response to one request (None for a one-way request). Never raises."""
        fn = self._handlers.get(req.code)
        if fn is None:
            _refusals.warning(("code", req.code), "remoting_code_not_supported", code=req.code)
            return None if req.is_oneway else codec.response_to(
                req, REQUEST_CODE_NOT_SUPPORTED, f" request type {req.code} not supported")
        try:
            resp = await fn(req)
        except RemotingError as e:
            _refusals.warning(("refused", req.code, e.message[:40]), "remoting_request_refused", code=req.code,
                              reason=e.message)
            resp = codec.response_to(req, int(Code.CONTROLLER_INVALID_REQUEST), e.message)
        except Exception as e:  # noqa: BLE001 - a typed reply, never a traceback to the peer
            _log.error("remoting_internal_error", code=req.code, error=f"{type(e).__name__}: {e}", exc_info=True)
            resp = codec.response_to(req, SYSTEM_ERROR, f"{type(e).__name__}: {e}"[:512])
        return None if req.is_oneway else resp

    @staticmethod
    def _reply(req: Command, header: pb.ReplyHeader, ext: dict[str, Any] | None = None,
               body: bytes | None = None) -> Command:
        code = int(header.code)
        if code == 0:
            return codec.response_to(req, 0, None, ext, body)
        remark = f"{code_name(code)}: {header.message}" if header.message else code_name(code)
        # a refused call still carries what the caller acts on when it was answered with one
        return codec.response_to(req, _java_code(code), remark, ext if code >= 2000 and code < 2900 else None, body)

    def _admin_call(self) -> None:
        if not self.admin:
            raise RemotingError("admin requests are off on this remoting port (remoting_admin = false)")

    # ---- brokers ----

    async def _metadata(self, req: Command) -> Command:
        md = self.node.metadata()
        lid = md["leader_id"] or ""
        ext: dict[str, Any] = {"group": md.get("cluster_id") or "autoswitch", "isLeader": bool(md["is_leader"]),
                               "peers": ";".join(f"{n}:{a}" for n, a in sorted(self.peers.items()))}
        if lid and lid in self.peers:
            ext["controllerLeaderId"] = lid
            ext["controllerLeaderAddress"] = self.peers[lid]
        return codec.response_to(req, 0, None, ext)

    async def _next_broker_id(self, req: Command) -> Command:
        cluster, name = field(req, "clusterName", str), field(req, "brokerName", str)
        r = await self.servicer.GetNextBrokerId(pb.GetNextBrokerIdRequest(cluster_name=cluster, broker_name=name), None)
        return self._reply(req, r.header, {"clusterName": cluster, "brokerName": name, "nextBrokerId": r.next_broker_id})

    async def _apply_broker_id(self, req: Command) -> Command:
        cluster, name = field(req, "clusterName", str), field(req, "brokerName", str)
        r = await self.servicer.ApplyBrokerId(pb.ApplyBrokerIdRequest(
            cluster_name=cluster, broker_name=name, applied_broker_id=field(req, "appliedBrokerId", int),
            register_check_code=field(req, "registerCheckCode", str)), None)
        return self._reply(req, r.header, {"clusterName": cluster, "brokerName": name})

    async def _register(self, req: Command) -> Command:
        cluster, name = field(req, "clusterName", str), field(req, "brokerName", str)
        # No clean-shutdown flag, no incarnation: "clean" and "not stated", as RocketMQ's own
        # controller sees every registration (docs/rocketmq.md "What holds"). But every start is
        # taken as a restart that needs a new MasterEpoch when it is the master's: a RocketMQ
        # broker that takes the master role at the epoch its epoch file ends with cuts that
        # epoch's entry and writes it again at its current end (AutoSwitchHAService.changeToMaster),
        # so no slave finds a consistent point with it any more and replication stops for good
        # (found by `make bench-rocketmq ARGS="--schedule 9689"`). RocketMQ's own controller elects a
        # restarted master at a new epoch.
        r = await self.servicer.RegisterBroker(pb.RegisterBrokerRequest(
            cluster_name=cluster, broker_name=name, broker_id=field(req, "brokerId", int),
            broker_address=field(req, "brokerAddress", str), clean_shutdown=True, crashed=True), None)
        info = r.replica_info
        ext: dict[str, Any] = {"clusterName": cluster, "brokerName": name}
        if info.master_broker_id and self._alive(name, info.master_broker_id):
            ext.update(_master_fields(info))
        return self._reply(req, r.header, ext, _sss_body(info))

    def _alive(self, group: str, broker_id: int) -> bool:
        (op,) = self.node.liveness.local_opinions([(group, broker_id)])
        return op.opinion is Opinion.ALIVE

    async def _heartbeat(self, req: Command) -> None:
        group = field(req, "brokerName", str)
        bid = field(req, "brokerId", int, required=False)
        if bid is None:
            raise RemotingError("a heartbeat without brokerId (a broker not yet registered)")
        addr = field(req, "brokerAddr", str)
        # A broker with an empty epoch file reports epoch -1 (and a fresh store offsets of -1):
        # RocketMQ's "none", our 0.
        epoch = max(0, int32_field(req, "epoch", required=False, default=0) or 0)
        r = await self.servicer.BrokerHeartbeat(pb.BrokerHeartbeatRequest(
            cluster_name=field(req, "clusterName", str), broker_name=group, broker_id=bid, broker_address=addr,
            epoch=epoch, max_offset=max(0, field(req, "maxOffset", int, required=False, default=0)),
            confirm_offset=max(0, field(req, "confirmOffset", int, required=False, default=0)),
            election_priority=int32_field(req, "electionPriority", required=False, default=0) or 0,
            clean_shutdown=True,
            heartbeat_timeout_ms=field(req, "heartbeatTimeoutMills", int, required=False, default=0)), None)
        if r.header.code != 0:
            _refusals.warning(("hb", group, bid), "remoting_heartbeat_refused", group=group, brokerId=bid,
                              code=code_name(r.header.code), reason=r.header.message)
        else:
            self.on_heartbeat(group, bid, addr)
        return None

    async def _elect(self, req: Command) -> Command:
        cluster, name = field(req, "clusterName", str), field(req, "brokerName", str)
        designate = field(req, "designateElect", bool, required=False, default=False)
        if designate:
            self._admin_call()
        r = await self.servicer.ElectMaster(pb.ElectMasterRequest(
            cluster_name=cluster, broker_name=name, broker_id=field(req, "brokerId", int),
            designate_elect=designate), None)
        info = r.replica_info
        body = codec.dumps({"brokerMemberGroup": {"cluster": cluster, "brokerName": name,
                                                  "brokerAddrs": await self._addresses(name)},
                            "syncStateSet": sorted(info.sync_state_set)})
        ext = _master_fields(info) if info.broker_name else None
        return self._reply(req, r.header, ext, body)

    async def _addresses(self, group: str) -> dict[str, str]:
        r = await self.servicer.GetSyncStateData(pb.GetSyncStateDataRequest(broker_names=[group]), None)
        return {str(mb.broker_id): mb.address for g in r.groups for mb in g.members if mb.address}

    async def _replica_info(self, req: Command) -> Command:
        r = await self.servicer.GetReplicaInfo(pb.GetReplicaInfoRequest(broker_name=field(req, "brokerName", str)), None)
        info = r.replica_info
        return self._reply(req, r.header, _master_fields(info), _sss_body(info))

    async def _alter(self, req: Command) -> Command:
        body = codec.loads_fastjson(req.body)
        if not isinstance(body, dict) or not isinstance(body.get("syncStateSet"), list):
            raise RemotingError("the body is not a SyncStateSet")
        members = body["syncStateSet"]
        if len(members) > 1024 or not all(type(x) is int for x in members):
            raise RemotingError("syncStateSet is not a short list of brokerIds")
        epoch = body.get("syncStateSetEpoch", 0)
        if type(epoch) is not int:
            raise RemotingError("syncStateSetEpoch is not a number")
        r = await self.servicer.AlterSyncStateSet(pb.AlterSyncStateSetRequest(
            broker_name=field(req, "brokerName", str), master_broker_id=field(req, "masterBrokerId", int),
            master_epoch=int32_field(req, "masterEpoch"), new_sync_state_set=members,
            sync_state_set_epoch=epoch), None)
        return self._reply(req, r.header, {"newSyncStateSetEpoch": r.sync_state_set_epoch},
                           codec.dumps({"syncStateSet": sorted(r.sync_state_set),
                                        "syncStateSetEpoch": r.sync_state_set_epoch}))

    # ---- mqadmin ----

    async def _sync_state_data(self, req: Command) -> Command:
        names = codec.loads_fastjson(req.body) if req.body else []
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise RemotingError("the body is not a list of broker names")
        if not names:
            return codec.response_to(req, 0)      # RocketMQ answers an empty list with nothing
        r = await self.servicer.GetSyncStateData(pb.GetSyncStateDataRequest(broker_names=names), None)
        table: dict[str, Any] = {}
        for g in r.groups:
            info = g.replica_info

            def who(mb: pb.ReplicaMember, _name: str = info.broker_name) -> dict[str, Any]:
                return {"brokerName": _name, "brokerId": mb.broker_id, "brokerAddress": mb.address, "alive": mb.alive}

            table[info.broker_name] = {
                "masterBrokerId": info.master_broker_id or None, "masterAddress": info.master_address or None,
                "masterEpoch": info.master_epoch, "syncStateSetEpoch": info.sync_state_set_epoch,
                "inSyncReplicas": [who(mb) for mb in g.members if mb.in_sync],
                "notInSyncReplicas": [who(mb) for mb in g.members if not mb.in_sync]}
        return self._reply(req, r.header, None, codec.dumps({"replicasInfoTable": table}))

    async def _clean(self, req: Command) -> Command:
        self._admin_call()
        raw = field(req, "brokerControllerIdsToClean", str, required=False, default="") or ""
        try:
            ids = [int(x) for x in raw.split(";") if x.strip()]
        except ValueError:
            raise RemotingError(f"brokerControllerIdsToClean is not ids separated by ';': {raw[:60]!r}") from None
        r = await self.servicer.CleanBrokerData(pb.CleanBrokerDataRequest(
            cluster_name=field(req, "clusterName", str, required=False, default="") or "",
            broker_name=field(req, "brokerName", str), broker_ids=ids,
            clean_living_broker=field(req, "isCleanLivingBroker", bool, required=False, default=False)), None)
        return self._reply(req, r.header)

    async def _get_config(self, req: Command) -> Command:
        r = await self.servicer.GetControllerConfig(pb.GetControllerConfigRequest(), None)
        return codec.response_to(req, 0, None, None, _properties(r.config))

    async def _update_config(self, req: Command) -> Command:
        self._admin_call()
        if not req.body:
            raise RemotingError("the body holds no key=value lines")
        try:
            lines = req.body.decode("utf-8").splitlines()
        except UnicodeDecodeError:
            raise RemotingError("the body is not UTF-8") from None
        kv: dict[str, str] = {}
        for line in lines:
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            k, sep, v = line.partition("=")
            if not sep:
                raise RemotingError(f"not a key=value line: {line[:60]!r}")
            kv[k.strip()] = v.strip()
        r = await self.servicer.UpdateControllerConfig(pb.UpdateControllerConfigRequest(config=kv), None)
        return self._reply(req, r.header)


class NamesrvFront:
    """RocketMQ's name-server requests over the same port (a name server with an embedded
    controller): brokers register, clients and mqadmin read routes. The table is
    controller/remoting/routes.py; this maps the wire onto it."""

    def __init__(self, routes: RocketRoutes, clock: Callable[[], float] = time.monotonic) -> None:
        self.routes, self.clock = routes, clock
        self.handlers: dict[int, Callable[[Command], Awaitable[Command | None]]] = {
            REGISTER_BROKER_NS: self._register, UNREGISTER_BROKER_NS: self._unregister,
            GET_ROUTEINFO_BY_TOPIC: self._route, GET_BROKER_CLUSTER_INFO: self._cluster_info,
            QUERY_DATA_VERSION: self._data_version,
            GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self._topics, GET_TOPICS_BY_CLUSTER: self._topics,
            GET_NAMESRV_CONFIG: self._config, GET_KV_CONFIG: self._kv, GET_KVLIST_BY_NAMESPACE: self._kv,
        }

    def _now(self) -> int:
        return int(self.clock() * 1000)

    async def _register(self, req: Command) -> Command:
        if field(req, "compressed", bool, required=False, default=False):
            raise RemotingError("compressed registrations are not read: set compressedRegister = false on the broker")
        body = codec.loads_fastjson(req.body) if req.body else {}
        name, addr, bid = field(req, "brokerName", str), field(req, "brokerAddr", str), field(req, "brokerId", int)
        try:
            taken, master, ha = self.routes.register(
                cluster=field(req, "clusterName", str), name=name, addr=addr, broker_id=bid,
                ha_addr=field(req, "haServerAddr", str, required=False, default="") or "", body=body,
                timeout_ms=field(req, "heartbeatTimeoutMillis", int, required=False, default=0) or 0,
                now_ms=self._now())
        except RouteRefused as e:
            raise RemotingError(str(e)) from None
        if not taken:
            _log.warning("namesrv_master_claim_refused", group=name, addr=addr, brokerId=bid,
                         reason="another live broker holds id 0 with a higher stateVersion (MasterEpoch)")
        if field(req, "enableActingMaster", bool, required=False, default=False):
            # RocketMQ's slave-acting-master mode lets a slave serve as master without any
            # controller's election: nothing the controllers promise holds for such a group
            _refusals.warning(("acting", name, addr), "rocketmq_broker_setting_unsafe", group=name, addr=addr,
                              brokerId=bid, setting="enableSlaveActingMaster=true",
                              why="a slave may act as master without an election; turn it off in controller mode "
                                  "(docs/rocketmq.md)")
        return codec.response_to(req, 0, None, {"masterAddr": master or None, "haServerAddr": ha or None})

    async def _unregister(self, req: Command) -> Command:
        gone = self.routes.unregister(field(req, "brokerName", str), field(req, "brokerAddr", str),
                                      field(req, "brokerId", int))
        _log.info("namesrv_broker_unregistered", group=req.ext.get("brokerName", "")[:64],
                  addr=req.ext.get("brokerAddr", "")[:64], found=gone)
        return codec.response_to(req, 0)

    async def _route(self, req: Command) -> Command:
        topic = field(req, "topic", str)
        got = self.routes.route(topic, self._now())
        if got is None:
            return codec.response_to(req, TOPIC_NOT_EXIST,
                                     f"No topic route info in name server for the topic: {topic[:255]}")
        return codec.response_to(req, 0, None, None, codec.dumps(got))

    async def _topics(self, req: Command) -> Command:
        """mqadmin topicList (206) and topicClusterList / topicList -c (224): the topics the groups'
        live masters registered. RocketMQ's own name server also lists the topics of slaves and
        of brokers gone quiet until they expire; a topic no master serves has no route either."""
        cluster = field(req, "cluster", str) if req.code == GET_TOPICS_BY_CLUSTER else None
        return codec.response_to(req, 0, None, None,
                                 codec.dumps({"topicList": self.routes.topics(self._now(), cluster)}))

    async def _config(self, req: Command) -> Command:
        """mqadmin getNamesrvConfig: the RocketMQ name-server settings whose meaning this name
        server has, as properties text: its controller is embedded, it keeps no order-topic (KV)
        settings and no slave acts as master."""
        props = {"enableControllerInNamesrv": "true", "orderMessageEnable": "false", "supportActingMaster": "false",
                 "clusterTest": "false"}
        return codec.response_to(req, 0, None, None, _properties(props))

    async def _kv(self, req: Command) -> Command:
        """KV configs (101, 219): none are stored here (RocketMQ keeps the order-topic settings
        there; autoswitch's name server has no KV store): QUERY_NOT_FOUND, as RocketMQ answers a
        key it does not hold."""
        ns = field(req, "namespace", str)
        key = field(req, "key", str) if req.code == GET_KV_CONFIG else ""
        what = f"Namespace: {ns[:64]} Key: {key[:64]}" if key else f"Namespace: {ns[:64]}"
        return codec.response_to(req, QUERY_NOT_FOUND, f"No config item, {what}")

    async def _cluster_info(self, req: Command) -> Command:
        return codec.response_to(req, 0, None, None, codec.dumps(self.routes.cluster_info(self._now())))

    async def _data_version(self, req: Command) -> Command:
        dv = codec.loads_fastjson(req.body) if req.body else None
        changed = self.routes.refresh(field(req, "brokerAddr", str), dv, self._now())
        return codec.response_to(req, 0, None, {"changed": changed}, req.body)


class _Connection:
    """One peer's connection: reads frames, answers in any order (responses carry the opaque), at
    most MAX_IN_FLIGHT requests at a time and MAX_UNSENT_BYTES not yet taken by the peer."""

    def __init__(self, server: RemotingServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server, self.reader, self.writer = server, reader, writer
        self.peer = str(writer.get_extra_info("peername"))
        self.decoder = codec.Decoder()
        self.slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.tasks: set[asyncio.Task] = set()
        self.brokers: set[tuple[str, int]] = set()    # whose heartbeats came on this connection

    async def run(self) -> None:
        try:
            while True:
                data = await self.reader.read(READ_CHUNK)
                if not data:
                    return
                try:
                    commands = self.decoder.feed(data)
                except RemotingError as e:
                    _refusals.warning(("frame", self.peer), "remoting_bad_frame", peer=self.peer,
                                      reason=e.message)
                    return
                for cmd in commands:
                    if cmd.is_response:
                        continue          # we send only one-way pushes on other connections
                    await self.slots.acquire()
                    t = asyncio.create_task(self._serve(cmd))
                    self.tasks.add(t)
                    t.add_done_callback(self.tasks.discard)
                # the peer does not read its answers: stop reading its requests until it does
                if self.writer.transport.get_write_buffer_size() > MAX_UNSENT_BYTES:
                    await self.writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            for t in list(self.tasks):
                t.cancel()
            self.writer.close()
            for group, bid in self.brokers:
                self.server.broker_connection_closed(group, bid)

    async def _serve(self, cmd: Command) -> None:
        try:
            resp = await self.server.front.handle(cmd)
            if cmd.code == BROKER_HEARTBEAT:
                self._track(cmd)
            if resp is not None and not self.writer.is_closing():
                self.writer.write(codec.encode(resp))
        finally:
            self.slots.release()

    def _track(self, cmd: Command) -> None:
        """The first heartbeat a broker sends on this connection that was accepted makes the
        connection its session: its close is crash evidence (RemotingServer.broker_connection_*)."""
        raw = cmd.ext.get("brokerId", "")
        if not raw.isdigit():
            return
        key = (cmd.ext.get("brokerName", ""), int(raw))
        if key not in self.brokers and key in self.server.heard and len(self.brokers) < MAX_IN_FLIGHT:
            self.brokers.add(key)
            self.server.broker_connection_opened(*key)


class RemotingServer:
    """The asyncio adapter: listens, serves connections, pushes role changes to RocketMQ brokers."""

    def __init__(self, node: ServedNode, routes: RocketRoutes | None = None) -> None:
        self.node = node
        self.front = RemotingFront(node)
        self.front.on_heartbeat = self._heard
        if routes is not None:       # a name server embedding this controller: its codes too
            self.front.add_handlers(NamesrvFront(routes).handlers)
        self.heard: dict[tuple[str, int], str] = {}     # RocketMQ brokers heard here: (group, id) -> address
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task] = set()
        self._pushes: set[asyncio.Task] = set()
        self._opaque = 0

    def _heard(self, group: str, bid: int, addr: str) -> None:
        if (group, bid) not in self.heard and len(self.heard) >= 100_000:
            return
        self.heard[(group, bid)] = addr

    async def start(self) -> None:
        host, port = self.node.config.remoting_listen.rsplit(":", 1)
        self._server = await asyncio.start_server(self._accept, host.strip("[]"), int(port), limit=READ_CHUNK)
        _log.warning("remoting_listening", listen=self.node.config.remoting_listen, admin=self.front.admin,
                     note="RocketMQ remoting port: no authentication; private networks only (docs/rocketmq.md)")

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns) + list(self._pushes):
            t.cancel()
        await asyncio.gather(*self._conns, *self._pushes, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._conns) >= MAX_CONNECTIONS:
            _refusals.warning("conns", "remoting_too_many_connections", limit=MAX_CONNECTIONS)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            await _Connection(self, reader, writer).run()
        finally:
            self._conns.discard(task)

    # ---- a RocketMQ broker's connection is its session (crash-fast failover) ----

    def broker_connection_opened(self, group: str, bid: int) -> None:
        # "all": RocketMQ's own controller counts a closed channel as the broker's death; the
        # group's brokers must acknowledge with every SyncStateSet member for that to be safe
        # (allAckInSyncStateSet = true, docs/rocketmq.md)
        self.node.liveness.session_opened(group, bid, "all")

    def broker_connection_closed(self, group: str, bid: int) -> None:
        self.node.liveness.session_closed(group, bid)

    # ---- NOTIFY_BROKER_ROLE_CHANGED ----

    def role_changed(self, group: str, info: pb.ReplicaInfo) -> None:
        """After a new MasterEpoch is applied on the leader: a one-way 1008 to each RocketMQ broker
        of the group heard here (the brokers' 5 s poll would find it too; this is a speed-up)."""
        if len(self._pushes) >= MAX_PUSHES_IN_FLIGHT:
            return
        if not (0 < info.master_epoch <= JAVA_INT_MAX):
            return
        for (g, bid), addr in list(self.heard.items()):
            if g != group:
                continue
            self._opaque = (self._opaque + 1) & 0x7FFFFFFF
            ext: dict[str, Any] = {"masterEpoch": info.master_epoch, "syncStateSetEpoch": info.sync_state_set_epoch}
            if info.master_broker_id:
                ext.update(masterBrokerId=info.master_broker_id, masterAddress=info.master_address)
            cmd = codec.request(NOTIFY_BROKER_ROLE_CHANGED, self._opaque, ext, _sss_body(info), oneway=True)
            t = asyncio.create_task(self._push(addr, cmd, group, bid, info.master_epoch))
            self._pushes.add(t)
            t.add_done_callback(self._pushes.discard)

    async def _push(self, addr: str, cmd: Command, group: str, bid: int, epoch: int) -> None:
        host, _, port = addr.rpartition(":")
        t0 = time.monotonic()
        try:
            _r, w = await asyncio.wait_for(asyncio.open_connection(host, int(port)), PUSH_TIMEOUT_S)
            w.write(codec.encode(cmd))
            await asyncio.wait_for(w.drain(), PUSH_TIMEOUT_S)
            w.close()
            _log.info("remoting_role_change_pushed", group=group, brokerId=bid, epoch=epoch, to=addr,
                      ms=round((time.monotonic() - t0) * 1000, 1))
        except (TimeoutError, OSError, ValueError) as e:
            _log.info("remoting_role_change_push_failed", group=group, brokerId=bid, epoch=epoch, to=addr,
                      error=f"{type(e).__name__}: {e}"[:200])
