"""Property: after any history of master changes and crashes, a slave that runs
consistent point + truncation + transfer ends byte-identical to its master
(log bytes and EpochFile image). Logs are modelled as byte strings."""

from __future__ import annotations

from dataclasses import dataclass, field

from autoswitch.epochfile import EpochCache, NoConsistentPoint, entries_to_record, find_consistent_point
from autoswitch.epochfile.file import decode, encode
from hypothesis import given, settings
from hypothesis import strategies as st

N = 3


@dataclass
class Replica:
    log: bytearray = field(default_factory=bytearray)
    cache: EpochCache = field(default_factory=EpochCache)
    synced: int = 0

    def restart(self) -> None:
        # unsynced tail lost; the EpochFile is persisted before bytes, so it survives
        # and startup reconciliation drops entries starting past the log end
        del self.log[self.synced :]
        self.cache = decode(encode(self.cache))
        self.cache.truncate_suffix_from_offset(len(self.log))


def sync_step(slave: Replica, master: Replica, budget: int, batch: int) -> None:
    """One handshake then at most `budget` bytes in batches of at most `batch`."""
    m_entries = master.cache.entries()
    try:
        point = find_consistent_point(slave.cache, len(slave.log), m_entries, len(master.log))
        del slave.log[point.offset :]
        slave.synced = min(slave.synced, point.offset)
        slave.cache.truncate_suffix_after_epoch(point.epoch)
        slave.cache.truncate_suffix_from_offset(point.offset)
    except NoConsistentPoint:
        # divergent or empty slave: full resync from the master's first offset (no retention here)
        slave.log.clear()
        slave.synced = 0
        slave.cache = EpochCache()
    while True:
        pos = len(slave.log)
        m_max = len(master.log)
        if pos < m_max:
            e = master.cache.find_by_offset(pos, m_max)
            end = master.cache.end_offset(e.epoch, m_max)
        else:
            e = master.cache.last()  # heartbeat: carries the current epoch with no bytes
            end = pos
        for rec in entries_to_record(slave.cache, m_entries, e.epoch):
            slave.cache.append(rec.epoch, rec.start_offset)
        n = min(end - pos, batch, budget)
        assert n >= 0
        if n == 0:
            return
        assert master.cache.find_by_offset(pos + n - 1, m_max) == e  # never crosses an epoch
        slave.log += master.log[pos : pos + n]
        budget -= n


actions = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.integers(0, 9)),
        st.tuples(st.just("elect"), st.integers(0, N - 1)),
        st.tuples(st.just("replicate"), st.integers(0, N - 1), st.integers(0, 30), st.integers(1, 7)),
        st.tuples(st.just("fsync"), st.integers(0, N - 1)),
        st.tuples(st.just("crash"), st.integers(0, N - 1)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(actions, st.integers(1, 7))
def test_slave_converges_to_master(history, final_batch):
    reps = [Replica() for _ in range(N)]
    master: int | None = None
    epoch = 0
    stamp = 0
    for act in history:
        kind = act[0]
        if kind == "write" and master is not None:
            m = reps[master]
            for _ in range(act[1]):
                # unique bytes, so any divergent tail would show up in the comparison
                stamp += 1
                m.log.append(stamp % 251)
        elif kind == "elect":
            epoch += 1  # same replica may be re-elected with a new epoch
            master = act[1]
            m = reps[master]
            m.cache.truncate_suffix_from_offset(len(m.log))
            m.cache.append(epoch, len(m.log))
        elif kind == "replicate" and master is not None and act[1] != master:
            sync_step(reps[act[1]], reps[master], act[2], act[3])
        elif kind == "fsync":
            reps[act[1]].synced = len(reps[act[1]].log)
        elif kind == "crash":
            reps[act[1]].restart()
            if act[1] == master:
                master = None  # a crashed master returns only through a new election
    if master is None:
        epoch += 1
        master = 0
        reps[0].cache.truncate_suffix_from_offset(len(reps[0].log))
        reps[0].cache.append(epoch, len(reps[0].log))
    m = reps[master]
    for i, r in enumerate(reps):
        if i == master:
            continue
        sync_step(r, m, 1 << 30, final_batch)
        assert bytes(r.log) == bytes(m.log)
        assert encode(r.cache) == encode(m.cache)
