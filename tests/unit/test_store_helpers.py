"""Shared helpers for the store tests (imported by test_store_*.py; holds no tests)."""

from __future__ import annotations

from pathlib import Path

from autoswitch.broker.storage.store import Message, MessageStore, StoreConfig

# small segments so rolls, padding and retention happen with a few records
SMALL = StoreConfig(segment_bytes=4096, max_message_bytes=1000, index_entries_per_file=5)


def msg(topic: str, i: int, size: int = 100) -> Message:
    return Message(topic, bytes([i % 251]) * size, f"id-{topic}-{i}", 1_700_000_000_000 + i)


def fill(store: MessageStore, n: int, topics=("a", "b"), size_of=lambda i: 50 + (i * 37) % 400, batch: int = 3):
    out = []
    i = 0
    while i < n:
        msgs = [msg(topics[j % len(topics)], j, size_of(j)) for j in range(i, min(n, i + batch))]
        out.append(store.append_messages(msgs))
        i += batch
    return out


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of a store's directory but quarantine/ (cut tails kept for the operator: not the log)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.relative_to(root).parts[0] != "quarantine"}


def open_store(path: Path, cfg: StoreConfig = SMALL, epoch: int | None = 1) -> MessageStore:
    s = MessageStore(path, cfg)
    if epoch is not None and s.epochs.last() is None:
        s.append_epoch(epoch, s.max_offset)
    return s


def replicate(src: MessageStore, dst: MessageStore, max_bytes: int = 1500) -> None:
    """What the HA slave does: raw whole-record batches that never cross an epoch."""
    pos = dst.max_offset
    while pos < src.max_offset:
        e = src.epochs.find_by_offset(pos, src.max_offset)
        limit = src.epochs.end_offset(e.epoch, src.max_offset)
        data = src.read_raw(pos, max_bytes, limit)
        assert data
        pos = dst.append_raw(pos, data, e.epoch, e.start_offset)


def index_view(store: MessageStore) -> dict[str, list[tuple[int, int, str]]]:
    """Every topic's messages via the consume index: (queue offset, phy, msg id)."""
    return {
        t: [(m.queue_offset, m.phy_offset, m.msg_id) for m in store.read_messages(t, 0, 1_000_000)]
        for t in store.topics()
    }


def scan_view(store: MessageStore) -> dict[str, list[tuple[int, int, str]]]:
    """The same, derived from a full log scan: the index must agree with it."""
    out: dict[str, list[tuple[int, int, str]]] = {}
    for r in store.scan():
        out.setdefault(r.topic, []).append((r.queue_offset, r.phy_offset, r.msg_id))
    return out
