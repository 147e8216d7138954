"""bench-produce's CPU accounting: the ratio the 3-replica setup could reach with its cores never idle."""

from __future__ import annotations

from bench.produce import cpu_bound


def _round(acked: int, elapsed_s: float, brokers: list[float], load: float) -> dict:
    return {"acked": acked, "elapsed_s": elapsed_s, "acked_msgs_s": acked / elapsed_s,
            "cpu_s": {"brokers": brokers, "load": load}}


def test_the_cap_is_the_cores_over_the_3_replica_cpu_per_message_against_the_1_replica_rate():
    one = _round(300_000, 2.0, [2.0], 1.5)                 # 150k msg/s, 11.7 us/msg, 1.75 cores
    three = _round(300_000, 3.0, [3.0, 0.7, 0.7], 1.5)     # 100k msg/s, 19.7 us/msg, 1.97 cores
    out = cpu_bound(one, three, cores=2)
    assert out["cpu_us_per_msg"] == {"1rep": 11.7, "3rep": 19.7}
    assert out["cores_busy"] == {"1rep": 1.75, "3rep": 1.97}
    # 2 cores / 19.67 us = 101.7k msg/s at most, against 150k msg/s at one replica
    assert out["ratio_cap_cores_never_idle"] == 0.678
    assert cpu_bound(one, three, cores=4)["ratio_cap_cores_never_idle"] == 1.356


def test_a_round_with_nothing_acked_gives_zeros_not_a_division_error():
    one = _round(300_000, 2.0, [2.0], 1.5)
    none = {"acked": 0, "elapsed_s": 0.0, "acked_msgs_s": 0.0, "cpu_s": {"brokers": [0.1], "load": 0.1}}
    assert cpu_bound(one, none, cores=2)["ratio_cap_cores_never_idle"] == 0.0
    assert cpu_bound(none, one, cores=2)["ratio_cap_cores_never_idle"] == 0.0
