"""Where a slave's log stops agreeing with its master's (AutoSwitchHA handshake).

The slave walks its epochs newest to oldest; the first one the master also has
with the same start offset is the last common epoch, and the logs agree up to
``min(localEnd, masterEnd)`` of that epoch. No such epoch: ``NoConsistentPoint``,
never a guess (a guess would silently keep divergent bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autoswitch.epochfile.cache import EpochCache, EpochEntry
from autoswitch.epochfile.errors import NoConsistentPoint


@dataclass(frozen=True)
class ConsistentPoint:
    offset: int  # truncate the slave's log to here
    epoch: int  # last common epoch: drop slave entries with epoch > this one


def find_consistent_point(
    local: EpochCache, local_max: int, master: Sequence[EpochEntry], master_max: int
) -> ConsistentPoint:
    local_entries = local.entries()
    if not local_entries:
        # An empty slave has nothing that could disagree; where it starts (master's
        # first retained offset or its last segment) is the HA layer's decision.
        raise NoConsistentPoint("slave has no epoch entries", reason="local_empty", local_max=local_max)
    if not master:
        raise NoConsistentPoint("master has no epoch entries", reason="master_empty")
    m_index = {e.epoch: i for i, e in enumerate(master)}
    for li in range(len(local_entries) - 1, -1, -1):
        le = local_entries[li]
        mi = m_index.get(le.epoch)
        if mi is None or master[mi].start_offset != le.start_offset:
            continue
        local_end = local_entries[li + 1].start_offset if li + 1 < len(local_entries) else local_max
        master_end = master[mi + 1].start_offset if mi + 1 < len(master) else master_max
        point = min(local_end, master_end)
        assert point >= le.start_offset, (le, local_end, master_end)
        return ConsistentPoint(offset=point, epoch=le.epoch)
    raise NoConsistentPoint(
        "no common epoch with the same start offset",
        reason="diverged",
        local_first=local_entries[0].epoch,
        local_last=local_entries[-1].epoch,
    )


def entries_to_record(local: EpochCache, master: Sequence[EpochEntry], upto_epoch: int) -> list[EpochEntry]:
    """Master entries a slave must record before bytes of ``upto_epoch``.

    A transfer header names only the batch's epoch; epochs in which a master wrote
    nothing (same start as the next) would be skipped and the slave's EpochFile
    would differ from the master's. The slave therefore records every entry it
    learned in the handshake between its last epoch and ``upto_epoch``.
    """
    last = local.last()
    floor = last.epoch if last is not None else 0
    return [e for e in master if floor < e.epoch <= upto_epoch]
