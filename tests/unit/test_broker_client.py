"""Client behaviour that needs no broker: bounded retries on UNAVAILABLE, ack-log format."""

from __future__ import annotations

import asyncio
import json

import pytest
from autoswitch.broker.client.client import AckLog, BrokerUnavailable, ProduceOutcome, ProducerClient

from autoswitch.proto import broker_pb2 as pb
from tests.procs import free_port


def test_unavailable_is_retried_a_bounded_number_of_times():
    async def main():
        c = ProducerClient(f"127.0.0.1:{free_port()}", max_retries=3, backoff_s=0.001, timeout_s=2)
        try:
            with pytest.raises(BrokerUnavailable) as ei:
                await c.produce("t", [b"x"])
        finally:
            await c.close()
        assert ei.value.details["attempts"] == 4
        assert ei.value.details["grpc_code"] == "UNAVAILABLE"

    asyncio.run(main())


def test_ack_log_has_exactly_the_pipeline_fields_and_only_acked_messages(tmp_path):
    path = tmp_path / "acks.jsonl"
    log = AckLog(path)
    out = ProduceOutcome(
        status=pb.MESSAGE_TOO_LARGE, error_message="", master_addr="", group="g1", broker_id=3,
        results=[
            pb.ProduceResult(msg_id="a", phy_offset=0, queue_offset=7, epoch=2, status=pb.OK),
            pb.ProduceResult(msg_id="b", phy_offset=-1, queue_offset=-1, status=pb.MESSAGE_TOO_LARGE),
        ],
    )
    log.write(out, "orders", 1234)
    log.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines == [{"msg_id": "a", "group": "g1", "broker_id": 3, "topic": "orders", "queue_offset": 7,
                      "phy_offset": 0, "epoch": 2, "ack_ts_ms": 1234}]
