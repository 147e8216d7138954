"""Election policy: who may become master, who wins, and who stays electable afterwards.

Pure functions over plain sets and ``BrokerLiveInfo``; the state machine feeds them the group's
state and the liveness evidence that the leader carried inside the request.

Ranking (RocketMQ's DefaultElectPolicy order, docs/controller.md "Election policy"): epoch desc, maxOffset desc,
electionPriority asc, then brokerId asc so ties are deterministic. Offsets are compared as
Python ints; RocketMQ's comparator casts an offset difference to 32-bit ``int`` and can pick the
replica with *less* data when two offsets differ by 2**31 or more (docs/design.md §3).

Eligible replicas (docs/design.md §4, after Kafka KIP-966 ELR): see ``eligible_after_election``
and docs/controller.md for the safety argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from autoswitch.controller.messages import BrokerLiveInfo


def rank_key(info: BrokerLiveInfo) -> tuple[int, int, int, int]:
    return (-info.epoch, -info.max_offset, info.election_priority, info.broker_id)


def best_candidate(infos: Iterable[BrokerLiveInfo],
                   zone_rank: Mapping[int, int] | None = None) -> BrokerLiveInfo | None:
    """``zone_rank``: brokerId -> its zone's place in the group's preference (lower first); given
    only for candidates that all hold every acknowledged message, where the zone may decide."""
    if zone_rank:
        return min(infos, key=lambda i: (zone_rank.get(i.broker_id, len(zone_rank)), *rank_key(i)), default=None)
    return min(infos, key=rank_key, default=None)


def zone_ranks(zones: Mapping[int, str], preference: tuple[str, ...]) -> dict[int, int]:
    """brokerId -> its zone's place in ``preference`` (len(preference) for a zone not in it or
    none stated); empty without a preference."""
    if not preference:
        return {}
    place = {z: i for i, z in enumerate(preference)}
    return {b: place.get(z, len(preference)) for b, z in zones.items()}


def rank(infos: Iterable[BrokerLiveInfo]) -> list[BrokerLiveInfo]:
    return sorted(infos, key=rank_key)


class Outcome(Enum):
    KEEP = "keep"                  # the old master is alive and in the SSS: change nothing
    ELECT = "elect"                # new_master wins
    NONE = "none"                  # nobody electable
    DESIGNATED_INVALID = "designated_invalid"   # the designated broker is dead or not electable


@dataclass(frozen=True)
class ElectionDecision:
    outcome: Outcome
    new_master: int | None = None
    unclean: bool = False
    reason: str = ""


def clean_candidates(sync_state_set: frozenset[int], eligible: frozenset[int],
                     alive: Mapping[int, BrokerLiveInfo]) -> dict[int, BrokerLiveInfo]:
    """Alive replicas that hold every acknowledged message: SSS members and eligible replicas,
    minus any whose current incarnation reports an unclean shutdown (its tail may be gone) and any
    whose range digests found bytes that differ from its master's (quarantined until repaired:
    its log is not the acknowledged one, whatever the SyncStateSet still says)."""
    pool = sync_state_set | eligible
    return {bid: info for bid, info in alive.items()
            if bid in pool and info.clean_shutdown and not info.diverged}


def intact_first(infos: Iterable[BrokerLiveInfo]) -> BrokerLiveInfo | None:
    """The best candidate of an unclean election: a replica whose digests found no difference
    before any that did (a diverged log wins only when nothing else is alive)."""
    infos = list(infos)
    return best_candidate(i for i in infos if not i.diverged) or best_candidate(infos)


def decide(*, master: int | None, sync_state_set: frozenset[int], eligible: frozenset[int],
           registered: frozenset[int], alive: Mapping[int, BrokerLiveInfo], first_election: bool,
           designated: int | None, unclean_enabled: bool, pool_complete: bool = True,
           maintenance: frozenset[int] = frozenset(), zone_rank: Mapping[int, int] | None = None,
           not_holders: frozenset[int] = frozenset(), unclean_spares_live_master: bool = False) -> ElectionDecision:
    """Pick the master of one group. ``alive`` = brokers a controller majority sees alive.

    ``first_election``: the group never had a master, so there is no SSS history; every alive
    registered replica is a clean candidate and the one with the most data wins (RocketMQ
    elects whoever asked first).

    ``maintenance``: replicas an operator cordoned. A clean one is elected only when every clean
    candidate is in maintenance (cordoning never costs an acknowledged message or the group's
    availability); an operator cannot designate one. The unclean paths rank by data alone: there
    the longest log is what loses least.

    ``zone_rank`` (the group's zone preference): among clean candidates, which all hold every
    acknowledged message, an earlier zone wins before the data ranking (Redpanda's leader pinning).

    ``not_holders``: replicas recorded as holding no acknowledged copy (diverged, quarantined,
    repairing: GroupState.diverged). Their reports say ``diverged`` (never a clean candidate), and
    they are no last known holder either: the unclean recovery of the whole set leaves them out,
    so only an operator's unclean election picks one.

    ``unclean_spares_live_master``: an unclean designation never deposes a master a majority sees
    alive (it goes on acknowledging on its lease until it learns, writes the designated replica
    lacks; feature level 3).
    """
    alive = {bid: info for bid, info in alive.items() if bid in registered}
    if first_election:
        clean = dict(alive)
    else:
        clean = clean_candidates(sync_state_set, eligible, alive)
    if designated is not None:
        if designated == master and master in clean:
            return ElectionDecision(Outcome.KEEP, master, reason="designated broker is already master")
        if designated in maintenance:
            return ElectionDecision(Outcome.DESIGNATED_INVALID,
                                    reason=f"designated broker {designated} is in maintenance (take it out first: "
                                           f"`autoswitch admin maintenance off`)")
        if designated in clean:
            return ElectionDecision(Outcome.ELECT, designated, reason="designated")
        if unclean_enabled and designated in alive:
            if unclean_spares_live_master and master is not None and master in alive:
                return ElectionDecision(Outcome.DESIGNATED_INVALID,
                                        reason=f"designated broker {designated} would be an unclean election while "
                                               f"master {master} is alive: an unclean designation never deposes a "
                                               f"live master")
            return ElectionDecision(Outcome.ELECT, designated, unclean=True, reason="designated_unclean")
        why = "not alive" if designated not in alive else "not in SyncStateSet or eligible replicas"
        return ElectionDecision(Outcome.DESIGNATED_INVALID, reason=f"designated broker {designated} is {why}")
    if master is not None and master in alive:
        # A live master (always in its SyncStateSet) is kept by a failover election whatever its
        # report says: a report of it as unclean is older than its election (heartbeats overtake
        # each other; an unclean restart of the master deposes it at its registration instead).
        # Replacing it would give two masters while its lease runs (found by the data simulator).
        return ElectionDecision(Outcome.KEEP, master, reason="old master alive and in SyncStateSet")
    best = best_candidate((i for b, i in clean.items() if b not in maintenance), zone_rank)
    if best is not None:
        return ElectionDecision(Outcome.ELECT, best.broker_id,
                                reason="first_election_by_data" if first_election else "ranked")
    best = best_candidate(clean.values(), zone_rank)
    if best is not None:
        return ElectionDecision(Outcome.ELECT, best.broker_id, reason="only_clean_replicas_in_maintenance")
    pool = (sync_state_set | eligible) - not_holders
    if pool and not first_election and pool <= alive.keys() and pool_complete:
        # Unclean recovery (KIP-966's "balanced" strategy): no clean candidate, but every replica
        # that may hold acknowledged messages is back and has reported its log (all of them
        # restarted uncleanly: a power cut of the whole set). The longest log loses the least,
        # and nothing better can come; waiting would keep the group down for ever. A member that
        # never comes back still needs the operator (unclean election).
        best = intact_first(alive[b] for b in pool)
        assert best is not None
        return ElectionDecision(Outcome.ELECT, best.broker_id, reason="unclean_recovery_whole_set")
    if unclean_enabled:
        best = intact_first(alive.values())
        if best is not None:
            return ElectionDecision(Outcome.ELECT, best.broker_id, unclean=True, reason="unclean")
    if not pool_complete:
        return ElectionDecision(Outcome.NONE, reason="no clean replica, and a last known holder was replaced by a "
                                                     "process that does not follow it (a copied directory): the "
                                                     "longest log of the rest may lack what it held; needs the operator")
    return ElectionDecision(Outcome.NONE, reason="no alive replica in SyncStateSet or eligible replicas")


def effective_min_in_sync(configured: int, stated: int) -> int:
    """The minInSyncReplicas the eligible rules may count on: the smaller of the controllers'
    setting and what the acknowledging master stated in its heartbeats (0 = not stated: the
    setting). The rules are sound only if the master acknowledges nothing while its set is below
    the number they use; a master stating fewer acknowledges with fewer, so the smaller one is
    the only safe choice, and settings that disagree cost availability, never acked messages."""
    return min(configured, stated) if stated > 0 else configured


def eligible_after_election(*, new_master: int, old_sync_state_set: frozenset[int],
                            old_eligible: frozenset[int], unclean: bool, min_in_sync_replicas: int,
                            enabled: bool, lost_data: frozenset[int] = frozenset()) -> frozenset[int]:
    """Eligible replicas once ``new_master`` leads with SSS = {new_master}.

    Kept only while the new SSS is smaller than minInSyncReplicas: then the new master cannot
    acknowledge anything (IN_SYNC_REPLICAS_NOT_ENOUGH), so every old SSS member / eligible
    replica still holds every acknowledged message. An unclean election forfeits that guarantee.
    """
    if not enabled or unclean or 1 >= min_in_sync_replicas:
        return frozenset()
    return (old_sync_state_set | old_eligible) - {new_master} - lost_data


def eligible_after_alter(*, old_sync_state_set: frozenset[int], new_sync_state_set: frozenset[int],
                         old_eligible: frozenset[int], min_in_sync_replicas: int,
                         enabled: bool) -> frozenset[int]:
    """Eligible replicas after an accepted SyncStateSet change.

    Once the SSS reaches minInSyncReplicas the master acknowledges writes that replicas outside
    it do not have, so the eligible set empties. Below it, members dropped from the SSS held
    every acknowledged message (acks needed them) and nothing new can be acknowledged: they
    become eligible, like KIP-966 moves replicas leaving a below-min ISR into the ELR.
    """
    if not enabled or len(new_sync_state_set) >= min_in_sync_replicas:
        return frozenset()
    return (old_eligible | (old_sync_state_set - new_sync_state_set)) - new_sync_state_set
