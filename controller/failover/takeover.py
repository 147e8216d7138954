"""Who may register a brokerId, pure: the one rule for a RegisterBroker, called by the liveness
desk (controller/server/liveness_desk.py) and by the data simulator (tests/sim), so the rule the
simulator attacks with cloned and restored data directories is the one production runs.

A brokerId is one process at a time (issue 30, cloned data directories):

1. **a second live process is refused**: another incarnation of the id is alive on this node
   (``incarnation_conflict``); if the refused process states an unclean restart of that very
   process (its abort marker names it), the live entry is the crashed process's last heartbeat,
   describing a tail the crash may have taken: it stops counting as a clean candidate
   (``mark_unclean``, found by the simulator's power cuts);
2. **a process that does not follow the registered one takes the id over only** two heartbeat
   timeouts after the id's last sign of life here (the registered process, restarting, registers
   first: ``takeover_waits``) and when a controller majority holds the registered process dead
   (this node alone may not hear a live one: ``takeover_not_agreed``; found by the data
   simulator, seed 1580). The majority is asked only when it matters (``ask_majority``).
"""

from __future__ import annotations

from dataclasses import dataclass

# the state machine's own test of the same fact (a registration it applies follows the registered
# process or not): one definition for both
from autoswitch.controller.state.statemachine import follows_registered


@dataclass(frozen=True, slots=True)
class RegistrationFacts:
    """What the node knows when a registration arrives."""

    incarnation: str             # the registering process ("" = not stated)
    previous: str                # the process it continues (its abort marker; "" = none)
    clean_shutdown: bool         # the registering process states an intact log
    live: str                    # the live incarnation this node hears for the id ("" = none)
    registered: str              # the incarnation the applied registration names ("" = none)
    takeover_wait_ms: int        # HeartbeatTable.takeover_wait_ms, now
    dead_by_majority: bool | None = None   # a controller majority holds the registered process dead (None: not asked)


@dataclass(frozen=True, slots=True)
class RegistrationVerdict:
    refusal: str | None = None   # "incarnation_conflict" | "takeover_waits" | "takeover_not_agreed"
    mark_unclean: bool = False   # the live entry is a crashed predecessor's last heartbeat
    ask_majority: bool = False   # decide again with ``dead_by_majority`` set
    takes_over: bool = False     # the process does not follow the registered one

    @property
    def accepted(self) -> bool:
        return self.refusal is None and not self.ask_majority


def registration_verdict(f: RegistrationFacts) -> RegistrationVerdict:
    """The rule of the module's docstring, in its order."""
    if f.live and f.incarnation and f.live != f.incarnation:
        # only a successor of that very process (its abort marker names it) speaks for its log: a
        # copy that crashed elsewhere says nothing about the live one (found by the data simulator)
        return RegistrationVerdict("incarnation_conflict", mark_unclean=not f.clean_shutdown and f.previous == f.live)
    if follows_registered(f.registered, f.incarnation, f.previous):
        return RegistrationVerdict()
    if f.takeover_wait_ms:
        return RegistrationVerdict("takeover_waits", takes_over=True)
    if f.dead_by_majority is None:
        return RegistrationVerdict(ask_majority=True, takes_over=True)
    return RegistrationVerdict(None if f.dead_by_majority else "takeover_not_agreed", takes_over=True)
