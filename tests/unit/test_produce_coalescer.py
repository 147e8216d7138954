"""ProduceCoalescer (broker/client/coalesce.py): concurrent sends share requests and each send still
gets exactly its own results. The broker here is a small in-process answerer that behaves as the
real Produce does (one result per message, in order; per-message refusals; a batch-size limit that
refuses the whole request); the real broker is driven by tests/integration/test_produce_coalescing.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from autoswitch.broker.client.client import BrokerUnavailable, ProduceOutcome
from autoswitch.broker.client.coalesce import ProduceCoalescer

from autoswitch.proto import broker_pb2 as pb


class Answerer:
    """Answers like BrokerServicer.Produce: a request over ``max_batch`` messages is refused as a
    whole (BAD_REQUEST), a body of b"big" is MESSAGE_TOO_LARGE alone; ``status`` answers every
    message with a request-wide status (NOT_MASTER and the like)."""

    def __init__(self, max_batch: int = 1000) -> None:
        self.max_batch = max_batch
        self.requests: list[list[str]] = []
        self.status = pb.OK
        self.inflight = self.most_inflight = 0
        self.fail_next: BaseException | None = None
        self.short_reply = False
        self.gate: asyncio.Event | None = None

    async def produce(self, topic: str, bodies: Sequence[bytes], msg_ids: Sequence[str] | None = None,
                      expect_master_epoch: int = 0) -> ProduceOutcome:
        assert msg_ids is not None
        self.inflight += 1
        self.most_inflight = max(self.most_inflight, self.inflight)
        try:
            self.requests.append(list(msg_ids))
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0)
            if self.fail_next is not None:
                e, self.fail_next = self.fail_next, None
                raise e
            status, results = pb.OK, []
            if len(msg_ids) > self.max_batch:
                return ProduceOutcome(pb.BAD_REQUEST, "batch too big", "", "g", 1,
                                      [pb.ProduceResult(msg_id=i, status=pb.BAD_REQUEST) for i in msg_ids])
            for i, b in zip(msg_ids, bodies, strict=True):
                st = pb.MESSAGE_TOO_LARGE if b == b"big" else self.status
                results.append(pb.ProduceResult(msg_id=i, status=st, queue_offset=len(self.requests), epoch=3))
                if st != pb.OK and status == pb.OK:
                    status = st
            if self.short_reply:
                results = results[:-1]
            return ProduceOutcome(status, "", "", "g", 1, results, master_epoch=expect_master_epoch)
        finally:
            self.inflight -= 1

    async def close(self) -> None:
        pass


def run(coro):
    return asyncio.run(coro)


def co(a: Answerer, inflight: int = 1, max_messages: int = 256, max_bytes: int = 1 << 20) -> ProduceCoalescer:
    return ProduceCoalescer(a, max_inflight=inflight, max_messages=max_messages, max_bytes=max_bytes)


def test_a_lone_send_is_its_own_request():
    a = Answerer()
    c = co(a)
    out = run(c.produce("t", [b"x", b"y"], ["a", "b"]))
    assert a.requests == [["a", "b"]] and [r.msg_id for r in out.results] == ["a", "b"] and out.ok


def test_concurrent_sends_share_requests_and_each_gets_its_own_results_in_order():
    a = Answerer()
    c = co(a)

    async def go():
        return await asyncio.gather(*(c.produce("t", [b"x"] * 2, [f"{k}-0", f"{k}-1"]) for k in range(40)))

    outs = run(go())
    for k, out in enumerate(outs):
        assert out.ok and [r.msg_id for r in out.results] == [f"{k}-0", f"{k}-1"]
    # all 40 joined in the same loop pass: one request (80 messages) carries them
    assert len(a.requests) == 1 and len(a.requests[0]) == 80 and a.most_inflight == 1
    assert c.requests == 1


def test_sends_arriving_while_a_request_is_out_go_together_next_and_inflight_is_bounded():
    a = Answerer()
    c = co(a, inflight=1)

    async def go():
        a.gate = asyncio.Event()
        first = asyncio.ensure_future(c.produce("t", [b"x"], ["first"]))
        await asyncio.sleep(0.01)                  # the first request is out, held by the gate
        rest = [asyncio.ensure_future(c.produce("t", [b"x"], [f"m{k}"])) for k in range(10)]
        await asyncio.sleep(0.01)
        assert len(a.requests) == 1                # nobody else went out while one was in flight
        a.gate.set()
        return await first, await asyncio.gather(*rest)

    first, rest = run(go())
    assert first.ok and all(o.ok for o in rest)
    assert a.requests == [["first"], [f"m{k}" for k in range(10)]] and a.most_inflight == 1


def test_share_limits_split_requests_and_a_big_send_goes_alone():
    a = Answerer()
    c = co(a, max_messages=5)

    async def go():
        small = [c.produce("t", [b"x"] * 2, [f"s{k}a", f"s{k}b"]) for k in range(4)]
        big = c.produce("t", [b"x"] * 7, [f"B{i}" for i in range(7)])
        return await asyncio.gather(*small, big)

    outs = run(go())
    assert all(o.ok for o in outs) and [r.msg_id for r in outs[-1].results] == [f"B{i}" for i in range(7)]
    assert [len(r) for r in a.requests] == [4, 4, 7]      # 2+2 (a third would pass 5), 2+2, the big one


def test_topics_and_expected_epochs_never_share_a_request():
    a = Answerer()
    c = co(a)

    async def go():
        return await asyncio.gather(c.produce("t1", [b"x"], ["a"]), c.produce("t2", [b"x"], ["b"]),
                                    c.produce("t1", [b"x"], ["c"], expect_master_epoch=4))

    outs = run(go())
    assert sorted(map(sorted, a.requests)) == [["a"], ["b"], ["c"]]
    assert outs[2].master_epoch == 4


def test_one_senders_refused_message_does_not_refuse_the_others():
    a = Answerer()
    c = co(a)

    async def go():
        return await asyncio.gather(c.produce("t", [b"x"], ["ok1"]), c.produce("t", [b"big"], ["bad"]),
                                    c.produce("t", [b"x"], ["ok2"]))

    ok1, bad, ok2 = run(go())
    assert ok1.ok and ok2.ok and [r.msg_id for r in ok1.results] == ["ok1"]
    assert not bad.ok and bad.status == pb.MESSAGE_TOO_LARGE and [r.msg_id for r in bad.results] == ["bad"]
    # the merged request was refused in part: each member was sent again alone
    assert a.requests[0] == ["ok1", "bad", "ok2"] and sorted(map(tuple, a.requests[1:])) == [("bad",), ("ok1",), ("ok2",)]


def test_a_merged_request_the_broker_refuses_for_its_size_is_resent_member_by_member():
    a = Answerer(max_batch=3)
    c = co(a)

    async def go():
        return await asyncio.gather(*(c.produce("t", [b"x"] * 2, [f"{k}a", f"{k}b"]) for k in range(3)))

    outs = run(go())
    assert all(o.ok for o in outs) and len(a.requests) == 4 and len(a.requests[0]) == 6


def test_a_request_wide_retryable_status_reaches_every_member_with_its_hint():
    a = Answerer()
    a.status = pb.NOT_MASTER
    c = co(a)

    async def go():
        return await asyncio.gather(c.produce("t", [b"x"], ["a"]), c.produce("t", [b"x"], ["b"]))

    outs = run(go())
    assert len(a.requests) == 1 and all(o.status == pb.NOT_MASTER and len(o.results) == 1 for o in outs)


def test_a_transport_error_fails_every_member_and_a_short_reply_is_a_transport_error():
    a = Answerer()
    c = co(a)

    async def go(n: int):
        return await asyncio.gather(*(c.produce("t", [b"x"], [f"m{k}"]) for k in range(n)),
                                    return_exceptions=True)

    a.fail_next = BrokerUnavailable("gone")
    outs = run(go(3))
    assert all(isinstance(o, BrokerUnavailable) for o in outs)
    a.short_reply = True
    outs = run(go(3))
    assert all(isinstance(o, BrokerUnavailable) and "2 results for 3" in str(o) for o in outs)


def test_a_sender_cancelled_before_its_request_left_is_not_sent():
    a = Answerer()
    c = co(a)

    async def go():
        a.gate = asyncio.Event()
        first = asyncio.ensure_future(c.produce("t", [b"x"], ["first"]))
        await asyncio.sleep(0.01)
        gone = asyncio.ensure_future(c.produce("t", [b"x"], ["gone"]))
        kept = asyncio.ensure_future(c.produce("t", [b"x"], ["kept"]))
        await asyncio.sleep(0.01)
        gone.cancel()
        a.gate.set()
        await first
        return await kept

    assert run(go()).ok
    assert a.requests == [["first"], ["kept"]]


@pytest.mark.parametrize("inflight", [1, 3])
def test_many_rounds_every_message_answered_once_and_inflight_never_over_the_bound(inflight):
    a = Answerer()
    c = co(a, inflight=inflight, max_messages=16)

    async def sender(k: int):
        got = []
        for i in range(30):
            out = await c.produce("t", [b"x"], [f"{k}-{i}"])
            got.extend(r.msg_id for r in out.results)
        return got

    async def go():
        return await asyncio.gather(*(sender(k) for k in range(12)))

    outs = run(go())
    assert all(o == [f"{k}-{i}" for i in range(30)] for k, o in enumerate(outs))
    sent = [m for r in a.requests for m in r]
    assert sorted(sent) == sorted(f"{k}-{i}" for k in range(12) for i in range(30))
    assert a.most_inflight <= inflight and len(a.requests) < 12 * 30
