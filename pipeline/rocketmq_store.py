"""A stopped RocketMQ 5 broker's store, read for the durability audit (docs/pipeline.md
"RocketMQ groups"): its CommitLog records, its epoch file and its confirm offset, exported in the
pipeline's own row formats so `pipeline audit` gives a RocketMQ group the same verdicts as ours.

The layouts are RocketMQ's (5.x, `CommitLog.checkMessageAndReturnSize`, `MessageDecoder`,
`EpochFileCache`, `StoreCheckpoint`):

- ``commitlog/<20-digit start offset>`` files, each a run of records: TOTALSIZE i32, MAGICCODE i32
  (V1 -626843481: 1-byte topic length; V2 -626843477: 2-byte), BODYCRC i32, QUEUEID i32, FLAG i32,
  QUEUEOFFSET i64, PHYSICALOFFSET i64, SYSFLAG i32, BORNTIMESTAMP i64, BORNHOST (8 or 20 bytes by
  SYSFLAG bit 4), STORETIMESTAMP i64, STOREHOST (8 or 20 by bit 5), RECONSUMETIMES i32,
  PREPAREDTRANSACTIONOFFSET i64, BODY (i32 length + bytes), TOPIC, PROPERTIES (i16 length + text,
  ``name\\x01value\\x02...``). A BLANK magic (-875286124) pads a file's end; a zero size ends the log.
- ``epochFileCheckpoint``: ``count``, ``crc32``, then ``epoch-startOffset`` lines.
- ``checkpoint``: confirmPhyOffset is the i64 at byte 32.
- ``brokerIdentity``: ``cluster#brokerName#brokerId``.

A record's msg_id is its client message id (the ``UNIQ_KEY`` property, what a producer's
SendResult.getMsgId() returns); its crc is the body CRC RocketMQ stores.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from autoswitch.pipeline.errors import InputNotFound, MalformedInput

MAGIC_V1, MAGIC_V2, BLANK_MAGIC = -626843481, -626843477, -875286124
BORNHOST_V6, STOREHOST_V6 = 1 << 4, 1 << 5
MAX_RECORD = 64 * 1024 * 1024          # RocketMQ's own message limit is 4 MiB by default
MAX_FILES = 100_000
_HEAD = struct.Struct(">iiiiiqqiq")    # size, magic, body crc, queue id, flag, queue offset, phy offset, sysflag, born ts
_FILE_RE = re.compile(r"\d{20}")


@dataclass(frozen=True)
class Record:
    phy_offset: int
    size: int
    body_crc: int
    topic: str
    queue_id: int
    queue_offset: int
    born_ts_ms: int
    msg_id: str
    keys: str


def identity(store: Path) -> tuple[str, str, int]:
    """(cluster, brokerName, brokerId) from the store's brokerIdentity file."""
    p = store / "brokerIdentity"
    try:
        cluster, name, bid = p.read_text().strip().split("#")
        return cluster, name, int(bid)
    except FileNotFoundError:
        raise InputNotFound(f"{p} does not exist (not a RocketMQ 5.1.1+ controller-mode store?)", path=str(p)) from None
    except ValueError:
        raise MalformedInput(f"{p} is not cluster#brokerName#brokerId", path=str(p)) from None


def epochs(store: Path) -> list[tuple[int, int]]:
    """[(MasterEpoch, start offset)] from epochFileCheckpoint (empty when the broker never had one)."""
    p = store / "epochFileCheckpoint"
    if not p.exists():
        return []
    lines = p.read_text().split()
    try:
        count = int(lines[0])
        out = [(int(e), int(s)) for e, s in (ln.split("-") for ln in lines[2:2 + count])]
    except (IndexError, ValueError):
        raise MalformedInput(f"{p} is not a RocketMQ epoch file (count, crc, epoch-startOffset lines)",
                             path=str(p)) from None
    if len(out) != count:
        raise MalformedInput(f"{p} says {count} entries and holds {len(out)}", path=str(p))
    return out


def confirm_offset(store: Path) -> int:
    p = store / "checkpoint"
    try:
        data = p.read_bytes()[:40]
    except FileNotFoundError:
        return 0
    return struct.unpack_from(">q", data, 32)[0] if len(data) >= 40 else 0


def _properties(text: str) -> dict[str, str]:
    """The first value of each name: a record of a batch carries its own properties and then the
    batch's (the broker appends them), so a second UNIQ_KEY is the batch's, not the message's."""
    out: dict[str, str] = {}
    for item in text.split("\x02"):
        k, sep, v = item.partition("\x01")
        if sep:
            out.setdefault(k, v)
    return out


def records(store: Path) -> Iterator[Record]:
    """Every record of the CommitLog, in offset order; MalformedInput at a record that breaks the
    layout (a torn tail is where the log ends: a zero size)."""
    folder = store / "commitlog"
    if not folder.is_dir():
        raise InputNotFound(f"{folder} does not exist", path=str(folder))
    files = sorted(p for p in folder.iterdir() if _FILE_RE.fullmatch(p.name))
    if len(files) > MAX_FILES:
        raise MalformedInput(f"more than {MAX_FILES} CommitLog files in {folder}", path=str(folder))
    for f in files:
        base = int(f.name)
        if f.stat().st_size == 0:
            return
        # mapped, not read: a CommitLog file is 1 GiB whatever it holds, and only the records
        # before the end marker are touched
        with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
            pos = 0
            while pos + 8 <= len(data):
                size, magic = struct.unpack_from(">ii", data, pos)
                if size == 0 and magic == 0:
                    return                              # the end of the log
                if magic == BLANK_MAGIC:
                    break                               # the rest of this file is padding
                if magic not in (MAGIC_V1, MAGIC_V2) or not _HEAD.size < size <= MAX_RECORD or pos + size > len(data):
                    raise MalformedInput(f"{f}: no RocketMQ record at offset {base + pos} (size {size}, "
                                         f"magic {magic})", path=str(f))
                yield _record(data, pos, size, magic, base, f)
                pos += size


def _record(data: bytes | mmap.mmap, pos: int, size: int, magic: int, base: int, f: Path) -> Record:
    try:
        _s, _m, body_crc, queue_id, _flag, queue_offset, phy, sysflag, born = _HEAD.unpack_from(data, pos)
        q = pos + _HEAD.size
        q += 20 if sysflag & BORNHOST_V6 else 8
        q += 8                                          # store timestamp
        q += 20 if sysflag & STOREHOST_V6 else 8
        q += 4 + 8                                      # reconsume times, prepared transaction offset
        (body_len,) = struct.unpack_from(">i", data, q)
        q += 4 + max(body_len, 0)
        if magic == MAGIC_V2:
            (topic_len,) = struct.unpack_from(">h", data, q)
            q += 2
        else:
            topic_len = data[q]
            q += 1
        topic = data[q:q + topic_len].decode("utf-8")
        q += topic_len
        (props_len,) = struct.unpack_from(">h", data, q)
        q += 2
        props = _properties(data[q:q + max(props_len, 0)].decode("utf-8")) if props_len > 0 else {}
        q += max(props_len, 0)
    except (struct.error, UnicodeDecodeError, IndexError):
        raise MalformedInput(f"{f}: a record at offset {base + pos} does not parse", path=str(f)) from None
    if q - pos > size or phy != base + pos:
        raise MalformedInput(f"{f}: the record at offset {base + pos} says offset {phy}, size {size}, "
                             f"and holds {q - pos} bytes", path=str(f))
    return Record(phy, size, body_crc & 0xFFFFFFFF, topic, queue_id, queue_offset, born,
                  props.get("UNIQ_KEY", ""), props.get("KEYS", ""))


def export(store: Path, out: Path, group: str = "", broker_id: int | None = None) -> dict:
    """The store as pipeline rows: OUT (FILE.index.jsonl) with FILE.epochs.jsonl and
    FILE.replica.jsonl beside it (exports.sibling_paths). Group and brokerId default to the
    store's brokerIdentity."""
    from autoswitch.pipeline.exports import atomic_lines, sibling_paths

    if not store.is_dir():
        raise InputNotFound(f"store {store} does not exist", path=str(store))
    _cluster, name, bid = identity(store)
    group = group or name
    broker_id = bid if broker_id is None else broker_id
    ep = epochs(store)
    starts = [s for _e, s in ep]
    end = 0

    def epoch_at(offset: int) -> int:
        i = 0
        while i + 1 < len(ep) and starts[i + 1] <= offset:
            i += 1
        return ep[i][0] if ep else 0

    def rows() -> Iterator[dict]:
        nonlocal end
        for r in records(store):
            end = r.phy_offset + r.size
            yield {"group": group, "broker_id": broker_id, "phy_offset": r.phy_offset, "size": r.size,
                   "crc": r.body_crc, "topic": r.topic, "queue_offset": r.queue_offset, "msg_id": r.msg_id,
                   "born_ts_ms": r.born_ts_ms, "epoch": epoch_at(r.phy_offset)}

    paths = sibling_paths(out)
    n = atomic_lines(paths["index"], rows())
    atomic_lines(paths["epochs"], [{"group": group, "broker_id": broker_id, "epoch": e, "start_offset": s}
                                    for e, s in ep])
    replica = {"group": group, "broker_id": broker_id, "max_offset": end,
               "confirm_offset": min(confirm_offset(store) or end, end), "min_offset": 0}
    atomic_lines(paths["replica"], [replica])
    return {**{k: str(v) for k, v in paths.items() if k != "offsets"}, "records": n, "epoch_entries": len(ep),
            "max_offset": end, "confirm_offset": replica["confirm_offset"]}
