"""The one registration rule (controller/failover/takeover.py): a second live process is refused,
a crashed predecessor's live entry is marked unclean, a process that does not follow the registered
one waits and needs a majority, and the majority is asked only when it decides."""

from __future__ import annotations

from dataclasses import replace

from autoswitch.controller.failover.takeover import RegistrationFacts, registration_verdict

SAME = RegistrationFacts(incarnation="p2", previous="p1", clean_shutdown=True, live="", registered="p1",
                         takeover_wait_ms=0)


def test_the_registered_process_or_its_successor_registers():
    assert registration_verdict(SAME).accepted
    assert registration_verdict(replace(SAME, incarnation="p1", previous="")).accepted
    assert registration_verdict(replace(SAME, registered="")).accepted, "nothing registered yet"
    assert registration_verdict(replace(SAME, incarnation="", previous="")).accepted, "unstated: unverifiable"


def test_a_second_live_process_is_refused_and_a_crashed_predecessors_entry_marked():
    v = registration_verdict(replace(SAME, live="p1"))
    assert v.refusal == "incarnation_conflict" and not v.mark_unclean, "a clean successor of a live process"
    v = registration_verdict(replace(SAME, live="p1", clean_shutdown=False))
    assert v.refusal == "incarnation_conflict" and v.mark_unclean, "its own successor says p1 crashed"
    v = registration_verdict(replace(SAME, live="p9", clean_shutdown=False))
    assert v.refusal == "incarnation_conflict" and not v.mark_unclean, "a copy's crash says nothing of p9"
    assert registration_verdict(replace(SAME, live="p2")).accepted, "the live process registering again"


def test_a_process_that_does_not_follow_waits_then_needs_a_majority():
    stranger = replace(SAME, incarnation="c1", previous="")
    v = registration_verdict(replace(stranger, takeover_wait_ms=1_500))
    assert v.refusal == "takeover_waits" and v.takes_over and not v.ask_majority
    v = registration_verdict(stranger)
    assert v.ask_majority and not v.accepted, "the majority is asked only now"
    assert registration_verdict(replace(stranger, dead_by_majority=True)).accepted
    assert registration_verdict(replace(stranger, dead_by_majority=False)).refusal == "takeover_not_agreed"
