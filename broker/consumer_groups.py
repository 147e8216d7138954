"""The master's consumer-group service: CommitOffset appends a commit record through the write
path (acknowledged per the ack mode, like a produced message); FetchOffset and ConsumerProgress
answer from the OffsetTable, which follows the ``__consumer_offsets`` records of this broker's
own log. The table is rebuilt from the log whenever the role or MasterEpoch changed (a new
master, or one whose log was truncated), so after a failover the new master serves exactly the
commits its log holds; a committed offset beyond the topic's log end (possible only after an
unclean election) is clamped to the log end and reported.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autoswitch.broker.consumer_offsets import (
    MAX_KEYS,
    MAX_PROGRESS_ROWS,
    OFFSETS_TOPIC,
    OffsetTable,
    check_group,
    check_names,
    commit_of,
    delete_of,
    encode_commit,
    encode_delete,
)
from autoswitch.broker.record_body import load_doc
from autoswitch.broker.storage.record import Message

from autoswitch.base.auth import Principal, Role
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.log import RateLimitedLog, get_logger
from autoswitch.base.write_errors import BadRequest, NotMaster

if TYPE_CHECKING:
    from autoswitch.broker.server import Broker

READ_CHUNK = 1000


class GroupOwned(AutoswitchError):
    """A commit for a consumer group that belongs to another identity (answered PERMISSION_DENIED)."""

    code = "CONSUMER_GROUP_OWNED"


class GroupNotFound(AutoswitchError):
    """DeleteConsumerGroup of a group with no committed offset on this master (NOT_FOUND)."""

    code = "NOT_FOUND"


@dataclass(frozen=True)
class Committed:
    topic: str
    offset: int | None        # None: the group never committed for this topic
    log_end: int              # the topic's next queue offset on this master
    clamped_from: int | None  # the committed offset, when it was beyond the log end
    group: str = ""           # the consumer group
    owner: str = ""           # the identity of its first commit ("" without authorization)


def bound_identities(owners: dict[str, list[str]], group: str) -> frozenset[str] | None:
    """The identities ``consumer_group_owners`` allows to commit for ``group`` (None: the group is
    not bound there): an exact name first, else the longest prefix pattern ("orders-*")."""
    if group in owners:
        return frozenset(owners[group])
    best: tuple[int, list[str]] | None = None
    for pattern, ids in owners.items():
        if pattern.endswith("*") and group.startswith(pattern[:-1]) and (best is None or len(pattern) > best[0]):
            best = (len(pattern), ids)
    return frozenset(best[1]) if best is not None else None


class ConsumerGroups:
    def __init__(self, broker: Broker) -> None:
        self.b = broker
        self.log = get_logger("broker.consumer_groups", group=broker.group)
        self._clamps = RateLimitedLog(self.log, interval_s=60.0)
        self.clamped = 0              # how many fetches answered a clamped offset (status, tests)
        self.bad_records = 0
        self._reset(None)

    def _reset(self, view: tuple[str, int] | None) -> None:
        self._view = view
        self._table = OffsetTable()
        self._next_q = 0

    def _require_master(self) -> None:
        if self.b.role != "master":
            raise NotMaster("consumer offsets are served by the master", master_addr=self.b.master_addr)

    def _sync(self) -> OffsetTable:
        """Catch the table up with the commit records appended since the last call."""
        view = (self.b.role, self.b.master_epoch)
        if view != self._view:
            self._reset(view)
        store = self.b.store
        while self._next_q < store.max_queue_offset(OFFSETS_TOPIC):
            batch = store.read_messages(OFFSETS_TOPIC, self._next_q, READ_CHUNK)
            if not batch:
                break
            for m in batch:
                d = load_doc(bytes(m.body))          # parsed once, whichever kind it is
                got = commit_of(d) if d is not None else None
                if got is not None:
                    self._table.on_append(got[0], got[1], m.phy_offset + m.size, got[2])
                elif d is not None and (gone := delete_of(d)) is not None:
                    self._table.on_delete(gone, m.phy_offset + m.size)
                else:
                    self.bad_records += 1
                    self.log.warning("bad_commit_record", queueOffset=m.queue_offset, phyOffset=m.phy_offset)
                self._next_q = m.queue_offset + 1
        return self._table

    async def commit(self, group: str, topic: str, queue_offset: int, caller: Principal | None = None,
                     operator_reset: bool = False) -> None:
        """At-least-once: commit the next offset to read after processing everything before it.
        With authorization, a group belongs to the identity of its first commit; another reader
        is refused (an admin may reset any group). ``operator_reset``: an operator's reset-offsets
        (recorded in the commit; with authorization only an admin may say so)."""
        check_names(group, topic)
        self._require_master()
        end = self.b.store.max_queue_offset(topic)
        if not 0 <= queue_offset <= end:
            raise BadRequest(f"offset {queue_offset} of {topic!r} outside [0, {end}] (the log end)")
        table = self._sync()
        who = caller.name if caller is not None and caller.via != "none" else ""
        admin = caller is not None and Role.ADMIN in caller.roles
        bound = bound_identities(self.b.cfg.consumer_group_owners, group)
        if operator_reset and who and not admin:
            # a reader marking its own commits as an operator's would hide its moves from the audit
            raise GroupOwned(f"only an admin resets the offsets of {group!r}; {who!r} commits as a consumer",
                             consumer_group=group)
        if who and not admin:
            if bound is not None:
                # configured: only the named identities commit for it (issue 59: any reader could
                # claim a group name first, and the real application was locked out of it)
                if who not in bound:
                    raise GroupOwned(f"consumer group {group!r} is bound to {sorted(bound)} (consumer_group_owners); "
                                     f"{who!r} may not commit for it", consumer_group=group)
            elif self.b.cfg.consumer_group_owners_required:
                raise GroupOwned(f"consumer group {group!r} is bound to no identity and consumer_group_owners_required "
                                 f"is on: name its owners in consumer_group_owners", consumer_group=group)
            else:
                owner = table.owners.get(group)
                if owner and owner != who:
                    raise GroupOwned(f"consumer group {group!r} belongs to {owner!r}; only it or an admin commits "
                                     f"for it", consumer_group=group)
        if not table.known((group, topic)) and table.key_count() >= MAX_KEYS:
            raise BadRequest(f"this master keeps offsets for at most {MAX_KEYS} (consumer group, topic) keys")
        wp = self.b.writer()
        body = encode_commit(group, topic, queue_offset, who, operator_reset)
        await wp.put([Message(topic=OFFSETS_TOPIC, body=body, msg_id=uuid.uuid4().hex,
                              born_ts_ms=int(time.time() * 1000))])
        # As Produce: the lease may have run out (or a handover deposed us) while the commit waited
        # for replicas; a commit a deposed master acknowledged could be lost with its epoch.
        self.b.check_write_fence()

    async def delete(self, group: str, caller: Principal | None = None) -> int:
        """Append a tombstone for ``group`` (admin only: the rule of the DeleteConsumerGroup call);
        acknowledged like a commit. Returns how many (group, topic) offsets it removes; NotFound
        when the group has none on this master."""
        check_group(group)
        self._require_master()
        table = self._sync()
        keys = [k for k in table.keys_of(group) if table.value(k, self.b.confirm_offset) is not None]
        if not keys:
            raise GroupNotFound(f"consumer group {group!r} has no committed offset on this master", consumer_group=group)
        who = caller.name if caller is not None and caller.via != "none" else ""
        self.log.info("consumer_group_deleting", consumerGroup=group, topics=len(keys), by=who or None,
                      epoch=self.b.master_epoch)
        await self.b.writer().put([Message(topic=OFFSETS_TOPIC, body=encode_delete(group, who),
                                           msg_id=uuid.uuid4().hex, born_ts_ms=int(time.time() * 1000))])
        self.b.check_write_fence()
        return len(keys)

    def fetch(self, group: str, topic: str) -> Committed:
        check_names(group, topic)
        self._require_master()
        table = self._sync()
        return self._committed(table, group, topic)

    def progress(self, group: str) -> list[Committed]:
        """Every topic ``group`` committed for; ``group == ""``: every group's (kafka-consumer-groups
        --list / --describe --all-groups)."""
        if group:
            check_group(group)
        self._require_master()
        table = self._sync()
        keys = table.keys_of(group) if group else table.all_keys()
        rows = [self._committed(table, g, t) for g, t in keys[:MAX_PROGRESS_ROWS]]
        return [r for r in rows if r.offset is not None]      # a deleted key may linger until read

    def _committed(self, table: OffsetTable, group: str, topic: str) -> Committed:
        value = table.value((group, topic), self.b.confirm_offset)
        end = self.b.store.max_queue_offset(topic)
        if value is not None and value > end:
            self.clamped += 1
            self._clamps.warning((group, topic), "consumer_offset_clamped", consumerGroup=group, topic=topic,
                                 committed=value, logEnd=end, epoch=self.b.master_epoch,
                                 note="beyond this master's log end: an unclean election lost messages")
            return Committed(topic, end, end, value, group, table.owners.get(group, ""))
        return Committed(topic, value, end, None, group, table.owners.get(group, ""))
