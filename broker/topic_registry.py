"""The master's topic settings (broker/topic_settings.py) kept in step with its log: UpdateTopic
and DeleteTopic append a record to ``__topics`` through the write path (acknowledged like a
produced message); Produce asks ``check`` for each batch. The table is rebuilt from the log
whenever the role or MasterEpoch changes, so a new master enforces exactly what it holds."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING

from autoswitch.broker.storage.record import Message
from autoswitch.broker.topic_settings import (
    MAX_TOPICS,
    TOPICS_TOPIC,
    TopicSettings,
    TopicTable,
    check_topic,
    decode,
    encode_delete,
    encode_settings,
    new_topic_problem,
    retention_cutoff_ms,
)

from autoswitch.base.auth import Principal
from autoswitch.base.log import get_logger
from autoswitch.base.write_errors import BadRequest, NotAllowed, NotMaster

if TYPE_CHECKING:
    from autoswitch.broker.server import Broker

READ_CHUNK = 1000
FLOOR_CACHE_S = 1.0          # a topic's retention floor is searched again at most this often
MAX_FLOOR_STEPS = 64         # a binary search over 2^63 queue offsets ends well within this


class TopicRegistry:
    def __init__(self, broker: Broker) -> None:
        self.b = broker
        self.log = get_logger("broker.topics", group=broker.group)
        self.bad_records = 0
        self._reset(None)

    def _reset(self, view: tuple[str, int] | None) -> None:
        self._view = view
        self._table = TopicTable()
        self._next_q = 0
        self._floors: dict[str, tuple[float, int]] = {}     # topic -> (when searched, floor)

    def retention_floor(self, topic: str) -> int:
        """The first queue offset of ``topic`` inside its own retention (its messages born before
        now - retention_hours are no longer served); the log's first offset when it has none.
        A binary search by born time (the producers' clocks, as Kafka's CreateTime), one message
        read per step, at most once per FLOOR_CACHE_S per topic."""
        store = self.b.store
        low = store.min_queue_offset(topic)
        cutoff = retention_cutoff_ms(self.table().settings.get(topic), int(time.time() * 1000))
        if cutoff is None:
            return low
        now = time.monotonic()
        cached = self._floors.get(topic)
        if cached is not None and now - cached[0] < FLOOR_CACHE_S:
            return max(cached[1], low)
        lo, hi = max(low, cached[1] if cached else low), store.max_queue_offset(topic)
        for _ in range(MAX_FLOOR_STEPS):
            if lo >= hi:
                break
            mid = (lo + hi) // 2
            got = store.read_messages(topic, mid, 1)
            if not got or got[0].born_ts_ms >= cutoff:
                hi = mid
            else:
                lo = mid + 1
        if len(self._floors) >= MAX_TOPICS:
            self._floors.clear()
        self._floors[topic] = (now, lo)
        return lo

    def table(self) -> TopicTable:
        """The settings of every record in this replica's log (caught up on each call)."""
        view = (self.b.role, self.b.master_epoch)
        if view != self._view:
            self._reset(view)
        store = self.b.store
        while self._next_q < store.max_queue_offset(TOPICS_TOPIC):
            batch = store.read_messages(TOPICS_TOPIC, self._next_q, READ_CHUNK)
            if not batch:
                break
            for m in batch:
                got = decode(bytes(m.body))
                if got is None:
                    self.bad_records += 1
                    self.log.warning("bad_topic_record", queueOffset=m.queue_offset, phyOffset=m.phy_offset)
                else:
                    self._table.apply(*got)
                self._next_q = m.queue_offset + 1
        return self._table

    def check(self, topic: str) -> tuple[str | None, int]:
        """(why a write to ``topic`` is refused or None, the largest body it takes)."""
        t = self.table()
        in_log = self.b.store.max_queue_offset(topic) > 0
        return t.refusal(topic, self.b.cfg.auto_create_topics, in_log), t.size_limit(topic, self.b.cfg.max_message_bytes)

    def _require_master(self) -> None:
        if self.b.role != "master":
            raise NotMaster("topic settings are changed on the master", master_addr=self.b.master_addr)

    async def _append(self, body: bytes) -> None:
        await self.b.writer().put([Message(topic=TOPICS_TOPIC, body=body, msg_id=uuid.uuid4().hex,
                                           born_ts_ms=int(time.time() * 1000))])
        self.b.check_write_fence()      # as Produce: a deposed master must not acknowledge it

    async def update(self, topic: str, max_message_bytes: int | None, caller: Principal | None,
                     retention_hours: float | None = None) -> tuple[TopicSettings, bool]:
        """Create the topic or change its settings (mqadmin updateTopic): (its settings, whether it
        was created: it had neither settings nor messages here, or was deleted)."""
        check_topic(topic)
        self._require_master()
        limit = self.b.cfg.max_message_bytes
        if max_message_bytes is not None and not 1 <= max_message_bytes <= limit:
            raise BadRequest(f"max_message_bytes must be in [1, {limit}] (this broker's max_message_bytes)")
        t = self.table()
        created = topic in t.deleted or (topic not in t.settings and self.b.store.max_queue_offset(topic) == 0)
        if created and topic not in t.deleted and (problem := new_topic_problem(topic)) is not None:
            raise BadRequest(f"topic {topic!r} cannot be created: {problem}")
        if topic not in t.settings and len(t.settings) >= MAX_TOPICS:
            raise NotAllowed(f"this master keeps settings for at most {MAX_TOPICS} topics")
        who = caller.name if caller is not None and caller.via != "none" else ""
        now = int(time.time() * 1000)
        await self._append(encode_settings(topic, max_message_bytes, who, now, retention_hours))
        self._floors.pop(topic, None)
        self.log.info("topic_created" if created else "topic_updated", topic=topic, maxMessageBytes=max_message_bytes,
                      retentionHours=retention_hours, by=who or None, epoch=self.b.master_epoch)
        return TopicSettings(max_message_bytes, who, now, retention_hours), created

    async def delete(self, topic: str, caller: Principal | None) -> None:
        """Stop writes to the topic and drop its settings; its messages stay readable until the
        log's retention removes their segments (one commit log holds every topic)."""
        check_topic(topic)
        self._require_master()
        t = self.table()
        if topic not in t.settings and self.b.store.max_queue_offset(topic) == 0:
            raise TopicNotFound(f"topic {topic!r} has neither settings nor messages on this master", topic=topic)
        if topic in t.deleted:
            raise TopicNotFound(f"topic {topic!r} is already deleted", topic=topic)
        who = caller.name if caller is not None and caller.via != "none" else ""
        await self._append(encode_delete(topic, who, int(time.time() * 1000)))
        self.log.info("topic_deleted", topic=topic, by=who or None, epoch=self.b.master_epoch)


class TopicNotFound(BadRequest):
    code = "NOT_FOUND"
