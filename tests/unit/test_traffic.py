"""A broker's produce and consume rates (broker/traffic.py), their check on the controllers and
their sum per topic (controller/api.topic_totals)."""

from __future__ import annotations

import pytest
from autoswitch.broker import traffic
from autoswitch.broker.traffic import WINDOW_S, TrafficMeter
from autoswitch.controller.api import TopicRate, topic_totals
from autoswitch.controller.server.service_common import BadRequest, checked_traffic

from autoswitch.proto import controller_pb2 as pb


def test_rates_over_the_last_window_per_topic():
    m = TrafficMeter(now_ms=0)
    for sec in range(WINDOW_S):
        m.count(0, "A", 30, sec * 1000 + 5)
        m.count(1, "B", 10, sec * 1000 + 500)
    r = m.rates(WINDOW_S * 1000 - 1)
    assert (r.produce_per_s, r.consume_per_s) == (30.0, 10.0)
    assert r.topics == (("A", 30.0, 0.0), ("B", 0.0, 10.0))
    # younger than the window: divided by its age, not the window
    young = TrafficMeter(now_ms=100_000)
    young.count(0, "A", 10, 100_500)
    assert young.rates(101_999).produce_per_s == 5.0
    # quiet for a whole window: nothing
    assert m.rates(10 * WINDOW_S * 1000).produce_per_s == 0.0 and m.rates(10 * WINDOW_S * 1000).topics == ()


def test_the_meter_is_bounded(monkeypatch):
    monkeypatch.setattr(traffic, "MAX_TOPICS_PER_BUCKET", 2)
    monkeypatch.setattr(traffic, "TOP_TOPICS", 1)
    m = TrafficMeter(now_ms=0)
    for t in ("a", "b", "c"):
        m.count(0, t, 5 if t == "b" else 1, 10)
    r = m.rates(999)
    assert r.produce_per_s == 7.0 and r.topics == (("b", 5.0, 0.0),)   # c counted in the total only


def test_the_controllers_check_a_heartbeats_traffic():
    ok = pb.BrokerHeartbeatRequest(produce_per_s=5, consume_per_s=-1,
                                   topic_rates=[pb.TopicRate(topic="T", produce_per_s=5, consume_per_s=0)])
    t = checked_traffic(ok)
    assert (t.produce_per_s, t.consume_per_s, t.topics) == (5.0, -1.0, (TopicRate("T", 5.0, 0.0),))
    for bad in (pb.BrokerHeartbeatRequest(produce_per_s=float("nan")),
                pb.BrokerHeartbeatRequest(consume_per_s=-2),
                pb.BrokerHeartbeatRequest(topic_rates=[pb.TopicRate(topic="")]),
                pb.BrokerHeartbeatRequest(topic_rates=[pb.TopicRate(topic="T")] * 2),
                pb.BrokerHeartbeatRequest(topic_rates=[pb.TopicRate(topic=f"T{i}") for i in range(17)]),
                pb.BrokerHeartbeatRequest(topic_rates=[pb.TopicRate(topic="T", produce_per_s=2e9)])):
        with pytest.raises(BadRequest):
            checked_traffic(bad)


def test_per_topic_masters_produce_and_every_replica_serves():
    rows = topic_totals([(True, [TopicRate("T", 100.0, 5.0)]), (False, [TopicRate("T", 100.0, 7.0)]),
                         (True, [TopicRate("U", 1.0, 0.0)])])
    assert rows == [{"topic": "T", "produce_per_s": 100.0, "consume_per_s": 12.0},
                    {"topic": "U", "produce_per_s": 1.0, "consume_per_s": 0.0}]
