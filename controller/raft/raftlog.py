"""The in-memory Raft log of the core: entries after a compaction point, plus what is durable.

``offset``/``offset_term`` identify the last compacted entry (a snapshot point or a
compaction point); ``stable`` is the last index known to be persisted by the driver.
"""

from __future__ import annotations

from autoswitch.controller.consensus.errors import RaftError

from .messages import Entry


class CommittedConflict(RaftError):
    """An AppendEntries would overwrite a committed entry (a Raft safety violation by the sender)."""

    code = "RAFT_COMMITTED_CONFLICT"


class LogCompacted(Exception):
    """The asked-for entries are behind the compaction point (send a snapshot instead)."""


class RaftLog:
    __slots__ = ("offset", "offset_term", "entries", "stable")

    def __init__(self, offset: int = 0, offset_term: int = 0, entries: list[Entry] | None = None) -> None:
        self.offset = offset
        self.offset_term = offset_term
        self.entries: list[Entry] = []
        for e in entries or ():
            self._append_one(e)
        self.stable = self.last_index()

    # --- queries ---
    def first_index(self) -> int:
        return self.offset + 1

    def last_index(self) -> int:
        return self.offset + len(self.entries)

    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.offset_term

    def term(self, index: int) -> int | None:
        """Term at index, None when unknown (compacted away or past the end)."""
        if index == self.offset:
            return self.offset_term
        if index < self.offset or index > self.last_index():
            return None
        return self.entries[index - self.offset - 1].term

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def entry(self, index: int) -> Entry:
        if index <= self.offset or index > self.last_index():
            raise LogCompacted(index)
        return self.entries[index - self.offset - 1]

    def slice(self, lo: int, hi: int, max_bytes: int | None = None, max_count: int | None = None) -> list[Entry]:
        """Entries [lo, hi]; at least one entry when lo <= hi, then bounded by bytes and count."""
        if lo <= self.offset:
            raise LogCompacted(lo)
        hi = min(hi, self.last_index())
        out: list[Entry] = []
        size = 0
        for i in range(lo - self.offset - 1, hi - self.offset):
            e = self.entries[i]
            size += len(e.data)
            if out and ((max_bytes is not None and size > max_bytes) or (max_count is not None and len(out) >= max_count)):
                break
            out.append(e)
        return out

    def bytes_after(self, index: int) -> int:
        """Payload bytes of entries after index (uncommitted-bytes accounting)."""
        if index >= self.last_index():
            return 0
        start = max(index, self.offset)
        return sum(len(e.data) for e in self.entries[start - self.offset:])

    def unstable(self) -> list[Entry]:
        return self.entries[self.stable - self.offset:] if self.stable >= self.offset else list(self.entries)

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft 5.4.1: is a log ending at (last_index, last_term) at least as up to date as ours?"""
        return last_term > self.last_term() or (last_term == self.last_term() and last_index >= self.last_index())

    # --- mutations ---
    def _append_one(self, e: Entry) -> None:
        assert e.index == self.last_index() + 1, (e.index, self.last_index())
        assert e.term >= self.last_term(), (e.term, self.last_term())
        self.entries.append(e)

    def append(self, entries: list[Entry] | tuple[Entry, ...]) -> None:
        for e in entries:
            self._append_one(e)

    def truncate_after(self, index: int) -> None:
        """Drop entries with index > index (a follower's conflicting tail)."""
        assert index >= self.offset
        del self.entries[index - self.offset:]
        self.stable = min(self.stable, index)

    def maybe_append(self, prev_index: int, prev_term: int, entries: tuple[Entry, ...], committed: int) -> int | None:
        """Follower side of AppendEntries; returns the last index known to match, None on mismatch."""
        if prev_index < self.offset:
            # Behind our compaction point: everything up to offset is committed and matches, so
            # re-anchor on the entry at offset if the message carries it.
            at = [e for e in entries if e.index == self.offset]
            if not at:
                return self.offset if prev_index + len(entries) <= self.offset else None
            if at[0].term != self.offset_term:
                return None
            entries = tuple(e for e in entries if e.index > self.offset)
            prev_index, prev_term = self.offset, self.offset_term
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        for e in entries:
            t = self.term(e.index)
            if t is None:
                self.append([x for x in entries if x.index >= e.index])
                break
            if t != e.term:
                if e.index <= committed:
                    # only a broken or byzantine leader sends this: refuse, never drop committed data
                    raise CommittedConflict(f"conflict at committed index {e.index} <= {committed}")
                self.truncate_after(e.index - 1)
                self.append([x for x in entries if x.index >= e.index])
                break
        return last_new

    def stable_to(self, index: int, term: int) -> None:
        if self.term(index) == term and index > self.stable:
            self.stable = index

    def compact(self, index: int) -> None:
        """Forget entries up to index (they are in a snapshot)."""
        if index <= self.offset:
            return
        assert index <= self.last_index()
        t = self.term(index)
        assert t is not None
        del self.entries[: index - self.offset]
        self.offset, self.offset_term = index, t

    def restore(self, index: int, term: int) -> None:
        """Reset to a snapshot point; keep a matching tail (etcd keeps it too)."""
        if self.match_term(index, term) and index <= self.last_index():
            self.compact(index)
            self.stable = max(self.stable, index)
            return
        self.entries = []
        self.offset, self.offset_term = index, term
        self.stable = index
