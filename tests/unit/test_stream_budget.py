"""The stream budget's decisions (autoswitch/base/stream_limits.py), pure."""

from __future__ import annotations

from autoswitch.base.stream_limits import StreamBudget


def test_unary_calls_keep_a_quarter_and_the_control_plane_keeps_half():
    b = StreamBudget(max_rpcs=64, per_caller=1000, per_method=1000)
    got = sum(b.acquire(f"reader{i}", False, "Watch") is None for i in range(100))
    assert got == 32 and b.refused == {"unprivileged_streams": 68}
    more = sum(b.acquire(f"broker{i}", True, "BrokerSession") is None for i in range(100))
    assert more == 16, "privileged callers get the rest up to three quarters"
    assert b.open_total == 48


def test_per_caller_and_per_method_caps_and_release():
    b = StreamBudget(max_rpcs=10_000, per_caller=5, per_method=3)
    assert [b.acquire("a", True, "W") for _ in range(4)] == [None, None, None, "caller_method_streams"]
    assert b.acquire("a", True, "X") is None and b.acquire("a", True, "X") is None
    assert b.acquire("a", True, "Y") == "caller_streams"
    assert b.acquire("b", True, "W") is None, "another caller is not affected"
    for _ in range(3):
        b.release("a", True, "W")
    assert b.by_caller == {"a": 2, "b": 1} and ("a", "W") not in b.by_method
    assert b.acquire("a", True, "W") is None
