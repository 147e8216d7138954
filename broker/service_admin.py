"""The BrokerService RPCs that keep the broker's own records (consumer groups in
``__consumer_offsets``, topic settings in ``__topics``) and its runtime configuration, and the
record of who calls (``seen``, broker/clients.py): a mixin of BrokerServicer (broker/service.py),
which owns the broker, the consumer groups, the topic registry, the client table and the logger
these handlers use."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import grpc
from autoswitch.broker.clients import ClientTable, grpc_peer
from autoswitch.broker.consumer_groups import GroupOwned
from autoswitch.broker.replies import committed_pb, status_of

from autoswitch.base.auth import current_caller
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.write_errors import WriteError
from autoswitch.proto import broker_pb2 as pb

if TYPE_CHECKING:
    from autoswitch.broker.consumer_groups import ConsumerGroups
    from autoswitch.broker.server import Broker
    from autoswitch.broker.topic_registry import TopicRegistry

    from autoswitch.base.log import EventLogger, RateLimitedLog

MAX_LISTED_TOPICS = 100_000


class GroupTopicConfigRpcs:
    b: Broker
    clients: ClientTable
    groups: ConsumerGroups
    topics: TopicRegistry
    log: EventLogger
    _refused: RateLimitedLog

    def seen(self, context: Any, kind: str, topic: str = "", consumer_group: str = "") -> None:
        """A data call from a gRPC client (broker/clients.py); the fetch port records its own
        (it calls these handlers with no context)."""
        if context is None:
            return
        agent = next((v for k, v in context.invocation_metadata() or () if k == "user-agent"), "")
        self.clients.seen(address=grpc_peer(context.peer() or ""), agent=agent or "unknown", kind=kind, via="grpc",
                          now_ms=int(time.time() * 1000), topic=topic, consumer_group=consumer_group)

    def master_addr_hint(self) -> str:
        """Where a refused call should go instead: the master this broker knows, or nothing."""
        return self.b.master_addr or ""

    # ---- consumer groups (broker/consumer_groups.py) ----

    async def CommitOffset(self, request: pb.CommitOffsetRequest, context: Any) -> pb.CommitOffsetReply:
        self.seen(context, "commit", request.topic, request.consumer_group)
        try:
            await self.groups.commit(request.consumer_group, request.topic, request.queue_offset, current_caller(),
                                     operator_reset=request.operator_reset)
        except GroupOwned as e:
            who = current_caller()
            self._refused.warning((who.name if who else "", "group_owned"), "commit_offset_refused", error=str(e))
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))
        except WriteError as e:
            return pb.CommitOffsetReply(status=status_of(e), error_message=str(e), master_addr=self.master_addr_hint())
        except AutoswitchError as e:
            self.log.error("commit_offset_failed", code=e.code, error=str(e))
            return pb.CommitOffsetReply(status=pb.INTERNAL, error_message=f"{e.code}: {e}")
        return pb.CommitOffsetReply(status=pb.OK, group=self.b.group, broker_id=self.b.broker_id,
                                    epoch=self.b.master_epoch)

    async def DeleteConsumerGroup(self, request: pb.DeleteConsumerGroupRequest,
                                  context: Any) -> pb.DeleteConsumerGroupReply:
        try:
            removed = await self.groups.delete(request.consumer_group, current_caller())
        except WriteError as e:
            return pb.DeleteConsumerGroupReply(status=status_of(e), error_message=str(e),
                                               master_addr=self.master_addr_hint())
        except AutoswitchError as e:
            if e.code != "NOT_FOUND":
                self.log.error("delete_consumer_group_failed", code=e.code, error=str(e))
            return pb.DeleteConsumerGroupReply(status=status_of(e), error_message=str(e))
        return pb.DeleteConsumerGroupReply(status=pb.OK, removed=removed, group=self.b.group,
                                           broker_id=self.b.broker_id, epoch=self.b.master_epoch)

    async def FetchOffset(self, request: pb.FetchOffsetRequest, context: Any) -> pb.FetchOffsetReply:
        self.seen(context, "consume", request.topic, request.consumer_group)
        try:
            c = self.groups.fetch(request.consumer_group, request.topic)
        except WriteError as e:
            return pb.FetchOffsetReply(status=status_of(e), error_message=str(e), master_addr=self.master_addr_hint())
        except AutoswitchError as e:
            self.log.error("fetch_offset_failed", code=e.code, error=str(e))
            return pb.FetchOffsetReply(status=pb.INTERNAL, error_message=f"{e.code}: {e}")
        return pb.FetchOffsetReply(status=pb.OK, offset=committed_pb(c))

    async def ConsumerProgress(self, request: pb.ConsumerProgressRequest, context: Any) -> pb.ConsumerProgressReply:
        try:
            rows = self.groups.progress(request.consumer_group)
        except WriteError as e:
            return pb.ConsumerProgressReply(status=status_of(e), error_message=str(e),
                                            master_addr=self.master_addr_hint())
        except AutoswitchError as e:
            self.log.error("consumer_progress_failed", code=e.code, error=str(e))
            return pb.ConsumerProgressReply(status=pb.INTERNAL, error_message=f"{e.code}: {e}")
        return pb.ConsumerProgressReply(status=pb.OK, offsets=[committed_pb(c) for c in rows])


    async def ListTopics(self, request: pb.ListTopicsRequest, context: Any) -> pb.ListTopicsReply:
        st = self.b.store
        table = self.topics.table()
        names = sorted(set(st.topics()) | set(table.settings) | table.deleted)[:MAX_LISTED_TOPICS]
        out = []
        for t in names:
            s = table.settings.get(t)
            low = self.topics.retention_floor(t) if s is not None and s.retention_hours else st.min_queue_offset(t)
            out.append(pb.TopicInfo(topic=t, min_queue_offset=low,
                                    max_queue_offset=st.max_queue_offset(t), internal=t.startswith("__"),
                                    configured=s is not None, max_message_bytes=(s.max_message_bytes or 0) if s else 0,
                                    deleted=t in table.deleted, created_by=s.created_by if s else "",
                                    retention_hours=(s.retention_hours or 0.0) if s else 0.0))
        return pb.ListTopicsReply(status=pb.OK, role=self.b.role, master_epoch=self.b.master_epoch, topics=out)

    # ---- runtime configuration (broker/runtime_config.py) ----

    def _config_reply(self, error: AutoswitchError | None = None) -> pb.BrokerConfigReply:
        from autoswitch.broker.runtime_config import RUNTIME_KEYS, config_view

        if error is not None:
            return pb.BrokerConfigReply(status=pb.BAD_REQUEST, error_message=str(error))
        b = self.b
        view = config_view(b.cfg)
        sources = dict.fromkeys(sorted(b.runtime_changed_keys), "runtime")
        if b.cfg.controller_mode:
            # what this broker is, not what its start-up file said (issue 64, item 5: a master the
            # controllers know as brokerId 3 showed `broker_id 1`, `role fenced`); 0 = not yet named
            view["broker_id"] = b.broker_id if b.broker_id_known.is_set() else 0
            view["role"] = b.role
            sources.update(broker_id="controllers", role="controllers")
        return pb.BrokerConfigReply(status=pb.OK, config_json=json.dumps(view, default=str, sort_keys=True),
                                    runtime_keys=sorted(RUNTIME_KEYS), sources=sources)

    async def GetBrokerConfig(self, request: pb.GetBrokerConfigRequest, context: Any) -> pb.BrokerConfigReply:
        return self._config_reply()

    async def UpdateBrokerConfig(self, request: pb.UpdateBrokerConfigRequest, context: Any) -> pb.BrokerConfigReply:
        from autoswitch.broker.runtime_config import apply_changes

        who = current_caller()
        try:
            done = apply_changes(self.b.cfg, dict(request.changes))
        except AutoswitchError as e:
            self.log.warning("broker_config_refused", error=str(e)[:300], by=who.name if who else None)
            return self._config_reply(e)
        self.b.runtime_changed_keys.update(done)
        for key, (old, new) in done.items():
            # the one record of who changed what (the file keeps the old value: until the next start)
            self.log.info("broker_config_updated", key=key, old=old, new=new, by=who.name if who else None,
                          epoch=self.b.master_epoch)
        return self._config_reply()

    # ---- topic settings (broker/topic_registry.py) ----

    def _topic_reply(self, e: AutoswitchError | None, created: bool = False) -> pb.TopicChangeReply:
        if e is None:
            return pb.TopicChangeReply(status=pb.OK, group=self.b.group, broker_id=self.b.broker_id,
                                       epoch=self.b.master_epoch, created=created)
        if not isinstance(e, WriteError):
            self.log.error("topic_change_failed", code=e.code, error=str(e))
        return pb.TopicChangeReply(status=status_of(e), error_message=str(e), master_addr=self.master_addr_hint())

    async def UpdateTopic(self, request: pb.UpdateTopicRequest, context: Any) -> pb.TopicChangeReply:
        try:
            _settings, created = await self.topics.update(request.topic, request.max_message_bytes or None,
                                                          current_caller(), request.retention_hours or None)
        except AutoswitchError as e:
            return self._topic_reply(e)
        return self._topic_reply(None, created)

    async def DeleteTopic(self, request: pb.DeleteTopicRequest, context: Any) -> pb.TopicChangeReply:
        try:
            await self.topics.delete(request.topic, current_caller())
        except AutoswitchError as e:
            return self._topic_reply(e)
        return self._topic_reply(None)
