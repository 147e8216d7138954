"""The linearizability checker on known linearizable and non-linearizable histories."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.sim.lincheck import BrokerIdModel, Op, RegisterModel, check, dump_jsonl, load_jsonl


def op(c, inp, out, call, ret, key="x"):
    return Op(c, key, inp, out, call, ret)


def test_sequential_register_history_is_linearizable():
    h = [op(0, ("w", 1), "ok", 0, 1), op(1, ("r",), 1, 2, 3), op(0, ("w", 2), "ok", 4, 5), op(1, ("r",), 2, 6, 7)]
    assert check(h, RegisterModel(0)).ok


def test_stale_read_after_write_returned_is_not_linearizable():
    h = [op(0, ("w", 1), "ok", 0, 1), op(1, ("r",), 0, 2, 3)]
    r = check(h, RegisterModel(0))
    assert not r.ok and not r.unknown and r.bad_key == "x"


def test_concurrent_reads_may_see_either_order_but_not_flip_back():
    # w(1) overlaps both reads: r=1 then r=0 is fine only if the reads overlap each other too
    ok = [op(0, ("w", 1), "ok", 0, 10), op(1, ("r",), 1, 1, 2), op(2, ("r",), 0, 1, 3)]
    assert check(ok, RegisterModel(0)).ok
    # a read that starts after another read returned 1 must not see 0 (the new-old inversion)
    bad = [op(0, ("w", 1), "ok", 0, 10), op(1, ("r",), 1, 1, 2), op(2, ("r",), 0, 3, 4)]
    assert not check(bad, RegisterModel(0)).ok


def test_unknown_outcome_write_may_or_may_not_take_effect():
    lost = [op(0, ("w", 1), None, 0, None), op(1, ("r",), 0, 5, 6), op(1, ("r",), 0, 7, 8)]
    took = [op(0, ("w", 1), None, 0, None), op(1, ("r",), 0, 5, 6), op(1, ("r",), 1, 7, 8)]
    assert check(lost, RegisterModel(0)).ok and check(took, RegisterModel(0)).ok
    flip = [op(0, ("w", 1), None, 0, None), op(1, ("r",), 1, 5, 6), op(1, ("r",), 0, 7, 8)]
    assert not check(flip, RegisterModel(0)).ok


def test_cas_two_winners_is_not_linearizable():
    h = [op(0, ("cas", 0, 1), True, 0, 5), op(1, ("cas", 0, 2), True, 1, 6)]
    assert not check(h, RegisterModel(0)).ok
    h2 = [op(0, ("cas", 0, 1), True, 0, 5), op(1, ("cas", 0, 2), False, 1, 6)]
    assert check(h2, RegisterModel(0)).ok


def test_broker_id_two_brokers_cannot_both_claim_an_id():
    ok = [op(0, ("next",), 1, 0, 1, "g"), op(1, ("next",), 1, 0, 1, "g"),
          op(0, ("apply", 1, "a"), "ok", 2, 4, "g"), op(1, ("apply", 1, "b"), "invalid", 3, 5, "g"),
          op(1, ("next",), 2, 6, 7, "g"), op(1, ("apply", 2, "b"), "ok", 8, 9, "g"),
          op(0, ("apply", 1, "a"), "ok", 10, 11, "g")]                    # idempotent retry
    assert check(ok, BrokerIdModel()).ok
    both = [op(0, ("apply", 1, "a"), "ok", 2, 4, "g"), op(1, ("apply", 1, "b"), "ok", 3, 5, "g")]
    assert not check(both, BrokerIdModel()).ok
    stale = [op(0, ("apply", 1, "a"), "ok", 0, 1, "g"), op(1, ("next",), 1, 2, 3, "g")]
    assert not check(stale, BrokerIdModel()).ok
    # a certificate-named id may skip ahead; the id it skipped stays free
    gap = [op(0, ("apply", 3, "a"), "ok", 0, 1, "g"), op(1, ("next",), 4, 2, 3, "g"),
           op(1, ("apply", 2, "b"), "ok", 4, 5, "g")]
    assert check(gap, BrokerIdModel()).ok


def test_keys_are_checked_independently_and_the_bad_one_is_named():
    h = [op(0, ("w", 1), "ok", 0, 1, "a"), op(1, ("r",), 1, 2, 3, "a"),
         op(0, ("w", 1), "ok", 0, 1, "b"), op(1, ("r",), 0, 2, 3, "b")]
    r = check(h, lambda key: RegisterModel(0))
    assert not r.ok and r.bad_key == "b" and r.keys == 2


def test_search_bound_gives_no_verdict_instead_of_a_wrong_one():
    rng = random.Random(3)
    h = [op(i, ("w", i), "ok", 0, 100) for i in range(14)] + [op(99, ("r",), 99999, 101, 102)]
    rng.shuffle(h)
    r = check(h, RegisterModel(0), max_steps=50)
    assert not r.ok and r.unknown


def test_jsonl_round_trip(tmp_path):
    h = [op(0, ("apply", 1, "a"), "ok", 0.5, 1.5, "g"), op(1, ("next",), None, 1.0, None, "g")]
    p = tmp_path / "h.jsonl"
    dump_jsonl(h, p)
    assert load_jsonl(p) == h


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_histories_from_a_real_atomic_register_are_linearizable(data):
    """Generate a history by executing ops atomically at random instants inside their
    [call, ret] windows: it must always pass; corrupting one read's answer usually must not."""
    n = data.draw(st.integers(1, 12))
    rng = random.Random(data.draw(st.integers(0, 10**6)))
    spans = []
    for i in range(n):
        a = rng.uniform(0, 20)
        b = a + rng.uniform(0, 5)
        spans.append((rng.uniform(a, b), a, b, i))
    value = 0
    h = []
    for _at, a, b, i in sorted(spans):
        if rng.random() < 0.5:
            value = i + 1
            h.append(op(i, ("w", i + 1), "ok", a, b))
        else:
            h.append(op(i, ("r",), value, a, b))
    assert check(h, RegisterModel(0)).ok
