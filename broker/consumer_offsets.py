"""Consumer-group offsets as records of the replicated commit log (docs/broker.md, "Consumer
groups"): a commit is one record in the internal topic ``__consumer_offsets``, appended and
acknowledged like any produced message, so a slave holds every offset the master acknowledged
and the EpochFile truncation applies to offsets exactly as to messages.

This module is the pure part: the record encoding and the table a master answers FetchOffset
from. The table follows the log order (the last commit of a key wins) but answers only with
what is at or below confirmOffset, so a reader never sees a commit that a failover could undo.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from autoswitch.broker.record_body import load_doc

from autoswitch.base.limits import MAX_NAME_LEN, MAX_TOPIC_BYTES
from autoswitch.base.write_errors import BadRequest

OFFSETS_TOPIC = "__consumer_offsets"
RESERVED_PREFIX = "__"           # topics of the broker itself; producers may not write them
MAX_PENDING_PER_KEY = 1024       # unconfirmed commits kept per key (older ones fold or drop)
MAX_KEYS = 100_000               # (consumer group, topic) keys a master accepts new commits for
MAX_COMMITTER = 256
MAX_PROGRESS_ROWS = 10_000       # (group, topic) rows in one ConsumerProgress reply (about 1 MiB)

Key = tuple[str, str]            # (consumer group, topic)


def check_group(group: str) -> None:
    if not group or len(group.encode("utf-8", "surrogatepass")) > MAX_NAME_LEN:
        raise BadRequest(f"consumer group must be 1..{MAX_NAME_LEN} bytes")


def check_names(group: str, topic: str) -> None:
    check_group(group)
    if not topic or len(topic.encode("utf-8", "surrogatepass")) > MAX_TOPIC_BYTES or topic.startswith(RESERVED_PREFIX):
        raise BadRequest(f"topic must be 1..{MAX_TOPIC_BYTES} bytes and not start with {RESERVED_PREFIX!r}")


def encode_commit(group: str, topic: str, queue_offset: int, committer: str = "", operator_reset: bool = False) -> bytes:
    """``committer``: the identity that commits (authorization on), recorded so that every replica
    knows which identity a consumer group belongs to. ``operator_reset``: an operator's
    reset-offsets, not a consumer's progress (``"r"``; readers that predate it ignore it)."""
    check_names(group, topic)
    if queue_offset < 0:
        raise BadRequest("queue_offset must be >= 0")
    doc: dict = {"g": group, "t": topic, "o": queue_offset}
    if committer:
        doc["u"] = committer[:MAX_COMMITTER]
    if operator_reset:
        doc["r"] = 1
    return orjson.dumps(doc)


def operator_reset_of(d: dict[str, Any]) -> bool:
    """Is this loaded commit record an operator's reset-offsets (``encode_commit(operator_reset=True)``)?"""
    return d.get("r") == 1


def encode_delete(group: str, deleter: str = "") -> bytes:
    """A tombstone: every offset of ``group`` (all its topics) and its owner are gone from this
    record on (kafka-consumer-groups --delete). Readers from before it log it as a bad record and
    keep the group (docs/compatibility: a downgrade brings deleted groups back)."""
    check_group(group)
    doc: dict = {"g": group, "d": 1}
    if deleter:
        doc["u"] = deleter[:MAX_COMMITTER]
    return orjson.dumps(doc)


def delete_of(d: dict[str, Any]) -> str | None:
    """The consumer group a tombstone (a loaded record body) deletes, or None when it is not one."""
    g = d.get("g")
    if d.get("d") == 1 and "t" not in d and isinstance(g, str) and g:
        return g
    return None


def commit_of(d: dict[str, Any]) -> tuple[Key, int, str] | None:
    """(key, offset, committer: '' = none recorded) of a loaded record body, or None when it is
    not a well-formed commit."""
    g, t, o, u = d.get("g"), d.get("t"), d.get("o"), d.get("u", "")
    if not (isinstance(g, str) and isinstance(t, str) and type(o) is int and o >= 0):
        return None
    return (g, t), o, u if isinstance(u, str) else ""


def decode_delete(body: bytes) -> str | None:
    """The consumer group a tombstone deletes, or None when ``body`` is not one."""
    d = load_doc(body)
    return None if d is None else delete_of(d)


def decode_record(body: bytes) -> tuple[Key, int, str] | None:
    """(key, offset, committer: '' = none recorded), or None for a record that is not a
    well-formed commit (logged by the caller)."""
    d = load_doc(body)
    return None if d is None else commit_of(d)


def decode_commit(body: bytes) -> tuple[Key, int] | None:
    """(key, offset), or None for a record that is not a well-formed commit."""
    got = decode_record(body)
    return None if got is None else (got[0], got[1])


@dataclass
class OffsetTable:
    """Committed offsets by key. ``on_append(key, offset, end)`` in log order (``end``: the
    commit record's end in the log); ``value(key, confirm)`` = the last commit of the key whose
    record ends at or below ``confirm``."""

    confirmed: dict[Key, int] = field(default_factory=dict)
    pending: dict[Key, list[tuple[int, int | None]]] = field(default_factory=dict)   # None: deleted
    # consumer group -> the identity of its first commit in log order: only that identity (or an
    # admin) commits for the group afterwards (issue 29: any reader could rewrite any group)
    owners: dict[str, str] = field(default_factory=dict)

    def key_count(self) -> int:
        return len(self.confirmed) + sum(1 for k in self.pending if k not in self.confirmed)

    def known(self, key: Key) -> bool:
        return key in self.confirmed or key in self.pending

    def on_append(self, key: Key, offset: int, end: int, committer: str = "") -> None:
        if committer and key[0] not in self.owners:
            self.owners[key[0]] = committer
        q = self.pending.setdefault(key, [])
        q.append((end, offset))
        if len(q) > MAX_PENDING_PER_KEY:
            del q[0]            # the oldest unconfirmed commit is superseded by later ones anyway

    def on_delete(self, group: str, end: int) -> None:
        """A tombstone of ``group`` whose record ends at ``end``: each of its keys reads as never
        committed once confirmOffset passes ``end`` (until then the old value stands, as for a
        commit); a commit after the tombstone starts the group afresh, with a new owner."""
        self.owners.pop(group, None)
        for key in self.keys_of(group):
            q = self.pending.setdefault(key, [])
            q.append((end, None))
            if len(q) > MAX_PENDING_PER_KEY:
                del q[0]

    def value(self, key: Key, confirm: int) -> int | None:
        q = self.pending.get(key)
        if q:
            done = 0
            for end, offset in q:
                if end > confirm:
                    break
                if offset is None:
                    self.confirmed.pop(key, None)
                else:
                    self.confirmed[key] = offset
                done += 1
            del q[:done]
            if not q:
                del self.pending[key]
        return self.confirmed.get(key)

    def keys_of(self, group: str) -> list[Key]:
        return sorted(k for k in set(self.confirmed) | set(self.pending) if k[0] == group)

    def all_keys(self) -> list[Key]:
        return sorted(set(self.confirmed) | set(self.pending))
