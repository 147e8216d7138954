"""WritePath and GroupFlusher against an in-memory log and a controllable replicator.

The collaborators are stand-ins; the thing under test (ack-mode rules, error mapping,
group commit, limits) is the real code.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from autoswitch.broker.config import BrokerConfig
from autoswitch.broker.storage.store_errors import BadMessage
from autoswitch.broker.write_path import (
    GroupFlusher,
    Piece,
    WritePath,
    plan_groups,
    split_append,
    validate_fields,
    validate_topic,
)

from autoswitch.base.log import get_logger
from autoswitch.base.write_errors import (
    BadRequest,
    Fenced,
    FlushSlaveTimeout,
    InSyncReplicasNotEnough,
    MessageTooLarge,
    NotMaster,
)


@dataclass
class Msg:
    topic: str
    body: bytes
    msg_id: str
    born_ts_ms: int = 0


@dataclass
class AppendResult:
    start_offset: int
    end_offset: int
    records: list


@dataclass
class MemLog:
    max_offset: int = 0
    flushed: int = 0
    flush_calls: int = 0
    queue: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)   # messages per append_messages call
    fail_with: Exception | None = None          # the next call raises it (after validation: nothing written)

    def append_messages(self, msgs):
        self.calls.append(len(msgs))
        if any(m.topic == "refused" for m in msgs):     # the store's validation: before any write
            raise BadMessage("topic refused by the store")
        if self.fail_with is not None:
            e, self.fail_with = self.fail_with, None
            raise e
        start = self.max_offset
        recs = []
        for m in msgs:
            q = self.queue.get(m.topic, 0)
            self.queue[m.topic] = q + 1
            recs.append((self.max_offset, q, m.msg_id))
            self.max_offset += 50 + len(m.body)
        return AppendResult(start, self.max_offset, recs)

    def flush(self):
        self.flush_calls += 1
        self.flushed = self.max_offset

    def sync_log(self):
        self.flush()

    @property
    def synced_offset(self):
        return self.flushed

    def begin_log_sync(self):
        """The group commit's sync (the real store's runs its fdatasync on the flusher's thread)."""
        return SimpleNamespace(target=self.max_offset, fds=[], run=lambda: None)

    def finish_log_sync(self, s, error):
        if error is not None:
            raise error
        self.flush_calls += 1
        self.flushed = max(self.flushed, s.target)


class Replicator:
    """Acks up to `acked` offset; wait_for_replicas blocks until it is reached or times out."""

    def __init__(self, sss=frozenset({1, 2, 3})):
        self.sync_state_set = sss
        self.acked = 0
        self.notified = 0
        self._cond = asyncio.Condition()

    def notify_appended(self):
        self.notified += 1

    def zone_shortfall(self):
        return None

    async def ack(self, offset):
        async with self._cond:
            self.acked = offset
            self._cond.notify_all()

    async def wait_for_replicas(self, offset, timeout_s):
        async def w():
            async with self._cond:
                await self._cond.wait_for(lambda: self.acked >= offset)

        try:
            await asyncio.wait_for(w(), timeout_s)
        except TimeoutError as e:
            from autoswitch.base.write_errors import FlushSlaveTimeout as HATimeout

            raise HATimeout("no ack") from e


def cfg(**kw):
    base = dict(data_dir="/nonexistent", ack_mode="all", min_in_sync_replicas=1, ack_timeout_s=0.2, flush="async")
    base.update(kw)
    return BrokerConfig(**base).validate()


def msgs(n, size=10, topic="t"):
    return [Msg(topic, b"x" * size, f"id{i}") for i in range(n)]


def make(c, sss=frozenset({1, 2, 3})):
    log = MemLog()
    rep = Replicator(sss)
    fl = GroupFlusher(log, c.flush, c.flush_interval_ms / 1000)
    return log, rep, fl, WritePath(log, rep, fl, c, 7, 1, get_logger("test"))


def test_all_ack_returns_only_after_replicas_ack():
    async def main():
        c = cfg()
        log, rep, fl, wp = make(c)
        task = asyncio.create_task(wp.put(msgs(3)))
        await asyncio.sleep(0.01)
        assert not task.done(), "must wait for the replicas"
        await rep.ack(log.max_offset)
        res = await task
        assert [r[1] for r in res.records] == [0, 1, 2]
        assert res.epoch == 7 and res.end_offset == log.max_offset
        assert rep.notified == 1

    asyncio.run(main())


def test_replica_timeout_is_flush_slave_timeout_and_data_stays():
    async def main():
        c = cfg(ack_timeout_s=0.05)
        log, rep, fl, wp = make(c)
        with pytest.raises(FlushSlaveTimeout):
            await wp.put(msgs(2))
        assert log.max_offset > 0, "the batch stays in the log; the producer may retry"

    asyncio.run(main())


def test_small_sync_state_set_refused_before_append():
    async def main():
        c = cfg(min_in_sync_replicas=2)
        log, rep, fl, wp = make(c, sss=frozenset({1}))
        with pytest.raises(InSyncReplicasNotEnough):
            await wp.put(msgs(2))
        assert log.max_offset == 0, "nothing written"

    asyncio.run(main())


def test_master_ack_mode_does_not_wait_for_replicas():
    async def main():
        c = cfg(ack_mode="master", min_in_sync_replicas=3)
        log, rep, fl, wp = make(c, sss=frozenset({1}))
        res = await wp.put(msgs(4))
        assert len(res.records) == 4 and rep.acked == 0

    asyncio.run(main())


def test_closed_write_path_refuses():
    async def main():
        c = cfg(ack_mode="master")
        log, rep, fl, wp = make(c)
        wp.close()
        with pytest.raises(NotMaster):
            await wp.put(msgs(1))
        assert log.max_offset == 0

    asyncio.run(main())


def test_batch_limits():
    async def main():
        c = cfg(ack_mode="master", max_batch_messages=5)
        log, rep, fl, wp = make(c)
        with pytest.raises(BadRequest):
            await wp.put(msgs(6))
        with pytest.raises(BadRequest):
            await wp.put([])
        assert log.max_offset == 0

    asyncio.run(main())


def test_sync_flush_group_commit_shares_fsyncs():
    async def main():
        c = cfg(ack_mode="master", flush="sync")
        log, rep, fl, wp = make(c)
        fl.start()
        results = await asyncio.gather(*(wp.put(msgs(2)) for _ in range(20)))
        await fl.stop()
        assert all(r.end_offset <= log.flushed for r in results), "acked only once flushed"
        assert log.flush_calls < 20, f"concurrent writers must share fsyncs, got {log.flush_calls}"

    asyncio.run(main())


def test_validate_topic_and_validate_fields_limits():
    c = cfg(max_message_bytes=100)
    assert validate_topic("t") is None and validate_fields(b"x" * 100, "a", c) is None
    assert isinstance(validate_fields(b"x" * 101, "a", c), MessageTooLarge)
    assert isinstance(validate_topic(""), BadRequest)
    assert isinstance(validate_topic("__consumer_offsets"), BadRequest)     # the broker's own topics
    assert isinstance(validate_fields(b"x", "", c), BadRequest)
    assert isinstance(validate_fields(b"x", "é" * 65, c), MessageTooLarge)
    assert isinstance(validate_topic("t" * 256), MessageTooLarge)
    assert isinstance(validate_fields(b"x", "a", c, born_ts_ms=-1), BadRequest)


def test_interval_flush_in_both_modes_covers_appends_nobody_waits_for():
    """A slave's HA appends never call wait_flushed; the interval must still flush them."""

    async def main(mode):
        c = cfg(ack_mode="master", flush=mode, flush_interval_ms=10)
        log, rep, fl, wp = make(c)
        fl.start()
        log.append_messages(msgs(3))  # as HA would on a slave: no waiter
        for _ in range(200):
            if log.flushed == log.max_offset:
                break
            await asyncio.sleep(0.01)
        await fl.stop()
        assert log.flushed == log.max_offset > 0

    asyncio.run(main("sync"))
    asyncio.run(main("async"))


def test_a_write_released_by_a_failed_handover_waits_for_the_next_one():
    """Issue 30: resume() then pause() before the held writer runs (a failed handover, then the
    next one): the writer used to slip past the new drain; it waits again now."""
    async def main():
        c = cfg(ack_mode="master")
        log, rep, fl, wp = make(c)
        wp.pause()
        task = asyncio.create_task(wp.put(msgs(1)))
        await asyncio.sleep(0)
        wp.resume()          # the first handover failed: writes go on ...
        wp.pause()           # ... and the next handover pauses them before the writer ran
        for _ in range(5):
            await asyncio.sleep(0)
        assert not task.done() and log.max_offset == 0, "slipped past the second handover's drain"
        wp.resume()
        await task
        assert log.max_offset > 0

    asyncio.run(main())


# ------------------------------------------------------------------ group append

def test_writes_of_one_loop_turn_share_one_append_and_each_gets_its_own_records():
    async def main():
        c = cfg()
        log, rep, fl, wp = make(c)
        tasks = [asyncio.create_task(wp.put(msgs(n, topic="t"))) for n in (1, 3, 2)]
        for _ in range(3):
            await asyncio.sleep(0)
        assert log.calls == [6] and rep.notified == 1, "one store call, one wake of the replicas"
        assert not any(t.done() for t in tasks), "each still waits for the replicas"
        await rep.ack(log.max_offset)
        res = [await t for t in tasks]
        assert [[r[1] for r in x.records] for x in res] == [[0], [1, 2, 3], [4, 5]]
        # each request ends where the next begins: its own end offset is what it waited for
        assert res[0].start_offset == 0 and res[0].end_offset == res[1].start_offset == res[1].records[0][0]
        assert res[1].end_offset == res[2].start_offset and res[2].end_offset == log.max_offset

    asyncio.run(main())


def test_an_early_request_is_acknowledged_when_its_own_end_is_not_the_groups():
    async def main():
        log, rep, fl, wp = make(cfg())
        first = asyncio.create_task(wp.put(msgs(1)))
        second = asyncio.create_task(wp.put(msgs(1)))
        for _ in range(3):
            await asyncio.sleep(0)
        assert log.calls == [2]
        await rep.ack(60)                       # the first record only (50 + 10 bytes)
        assert (await first).end_offset == 60
        await asyncio.sleep(0.01)
        assert not second.done()
        await rep.ack(log.max_offset)
        await second

    asyncio.run(main())


def test_a_request_the_store_refuses_fails_alone():
    async def main():
        log, rep, fl, wp = make(cfg(ack_mode="master"))
        good1, bad, good2 = (asyncio.create_task(wp.put(msgs(2, topic=t))) for t in ("a", "refused", "b"))
        r1 = await good1
        with pytest.raises(BadMessage):
            await bad
        r2 = await good2
        assert log.calls == [6, 2, 2, 2], "the group, then each request alone"
        assert [m for _, _, m in r1.records] == ["id0", "id1"] and len(r2.records) == 2

    asyncio.run(main())


def test_a_store_failure_fails_every_request_of_the_group():
    async def main():
        log, rep, fl, wp = make(cfg(ack_mode="master"))
        log.fail_with = OSError(28, "No space left on device")
        tasks = [asyncio.create_task(wp.put(msgs(1))) for _ in range(3)]
        for t in tasks:
            with pytest.raises(OSError):
                await t
        assert log.calls == [3] and log.max_offset == 0, "not retried: the store may have written part"

    asyncio.run(main())


def test_a_handover_pausing_between_queue_and_append_holds_the_queued_writes():
    async def main():
        log, rep, fl, wp = make(cfg(ack_mode="master"))
        tasks = [asyncio.create_task(wp.put(msgs(1))) for _ in range(2)]
        await asyncio.sleep(0)          # both queued; the append is the next callback
        wp.pause()
        for _ in range(5):
            await asyncio.sleep(0)
        assert log.calls == [] and not any(t.done() for t in tasks), "appended past the handover's hold"
        wp.resume()
        await asyncio.gather(*tasks)
        assert log.calls == [2]

    asyncio.run(main())


def test_a_role_change_between_queue_and_append_appends_nothing():
    async def main():
        log, rep, fl, wp = make(cfg(ack_mode="master"))
        tasks = [asyncio.create_task(wp.put(msgs(1))) for _ in range(2)]
        await asyncio.sleep(0)
        wp.close()
        for t in tasks:
            with pytest.raises(NotMaster):
                await t
        assert log.calls == [] and log.max_offset == 0

    asyncio.run(main())


def test_a_caller_gone_before_the_append_is_not_appended():
    async def main():
        log, rep, fl, wp = make(cfg(ack_mode="master"))
        gone = asyncio.create_task(wp.put(msgs(1, topic="gone")))
        kept = asyncio.create_task(wp.put(msgs(1, topic="kept")))
        await asyncio.sleep(0)
        gone.cancel()
        res = await kept
        assert log.calls == [1] and "gone" not in log.queue and res.records[0][1] == 0

    asyncio.run(main())


def test_groups_keep_to_the_batch_limit_and_never_split_a_request():
    async def main():
        log, rep, fl, wp = make(cfg(ack_mode="master", max_batch_messages=5))
        await asyncio.gather(*(wp.put(msgs(n)) for n in (2, 3, 4, 1, 5)))
        assert log.calls == [5, 5, 5]

    asyncio.run(main())
    assert plan_groups([2, 3, 4, 1, 5], 5) == [(0, 2), (2, 4), (4, 5)]
    assert plan_groups([5, 5], 4) == [(0, 1), (1, 2)]       # a request over the limit alone (refused before)
    assert plan_groups([], 5) == []


def test_split_append_ends_each_request_where_the_next_begins():
    recs = [(0, 0, "a"), (40, 1, "b"), (4096, 2, "c")]       # padding before "c": a segment's end
    assert split_append(0, 4136, recs, [1, 1, 1]) == [
        Piece(0, 40, recs[:1]), Piece(40, 4096, recs[1:2]), Piece(4096, 4136, recs[2:])]
    assert split_append(0, 4136, recs, [3]) == [Piece(0, 4136, recs)]


def test_a_fence_between_queue_and_append_appends_nothing():
    """The lease ran out in the turn between the admission and the group's append: the append
    checks the fence again, as the one synchronous step it used to be checked in."""
    async def main():
        c = cfg(ack_mode="master")
        log, rep, fl = MemLog(), Replicator(), None
        fl = GroupFlusher(log, c.flush, c.flush_interval_ms / 1000)
        reason: list[str | None] = [None]
        wp = WritePath(log, rep, fl, c, 7, 1, get_logger("test"), fence=lambda: reason[0])
        tasks = [asyncio.create_task(wp.put(msgs(1))) for _ in range(2)]
        await asyncio.sleep(0)
        reason[0] = "master lease expired"
        for t in tasks:
            with pytest.raises(Fenced, match="lease"):
                await t
        assert log.calls == [] and log.max_offset == 0
        reason[0] = None
        await wp.put(msgs(1))
        assert log.calls == [1]

    asyncio.run(main())
