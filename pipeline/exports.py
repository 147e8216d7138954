"""Export one replica's log index, EpochFile and offsets in the pipeline's JSON-lines formats.

Opening a MessageStore runs crash recovery, which may cut a torn tail: export from a
stopped broker's directory, or pass copy_first=True to work on a temporary copy.
Output files are written to a temp name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from autoswitch.pipeline.errors import InputNotFound, PipelineError

from autoswitch.base.log import get_logger

log = get_logger("pipeline")

FLUSH_EVERY = 10_000   # records per buffered write


def sibling_paths(out: Path) -> dict[str, Path]:
    """FILE.index.jsonl -> FILE.epochs.jsonl and FILE.replica.jsonl beside it."""
    name = out.name
    stem = name[: -len(".index.jsonl")] if name.endswith(".index.jsonl") else name.rsplit(".", 1)[0]
    return {"index": out, "epochs": out.with_name(stem + ".epochs.jsonl"),
            "replica": out.with_name(stem + ".replica.jsonl"), "offsets": out.with_name(stem + ".offsets.jsonl")}


def atomic_lines(path: Path, rows) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)   # mkstemp makes 0600; an export is for others to read
    n = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            buf: list[str] = []
            for r in rows:
                buf.append(json.dumps(r, separators=(",", ":")))
                n += 1
                if len(buf) >= FLUSH_EVERY:
                    f.write("\n".join(buf) + "\n")
                    buf.clear()
            if buf:
                f.write("\n".join(buf) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n


def _offset_rows(store, group: str, broker_id: int):
    """The consumer-group commits in this replica's log (broker/consumer_offsets.py), in log order."""
    from autoswitch.broker.consumer_offsets import OFFSETS_TOPIC, commit_of, operator_reset_of
    from autoswitch.broker.record_body import load_doc

    q = store.min_queue_offset(OFFSETS_TOPIC)
    while q < store.max_queue_offset(OFFSETS_TOPIC):
        batch = store.read_messages(OFFSETS_TOPIC, q, 1000)
        if not batch:
            return
        for m in batch:
            d = load_doc(bytes(m.body))          # parsed once: the commit and its reset mark
            got = commit_of(d) if d is not None else None
            if d is not None and got is not None:
                (cg, topic), committed, _committer = got
                yield {"group": group, "broker_id": broker_id, "consumer_group": cg, "topic": topic,
                       "committed": committed, "phy_offset": m.phy_offset, "epoch": m.epoch,
                       "operator_reset": operator_reset_of(d)}
            q = m.queue_offset + 1


def export_replica(data_dir: Path, group: str, broker_id: int, out: Path, copy_first: bool = False,
                   segment_bytes: int | None = None) -> dict:
    from autoswitch.broker.storage.store import MessageStore
    from autoswitch.broker.storage.store_config import StoreConfig

    from autoswitch.base.errors import AutoswitchError

    if not data_dir.is_dir():
        raise InputNotFound(f"data dir {data_dir} does not exist", path=str(data_dir))
    assert broker_id >= 0 and group
    work = data_dir
    tmpdir = None
    if copy_first:
        tmpdir = Path(tempfile.mkdtemp(prefix="autoswitch-export-"))
        work = tmpdir / "store"
        shutil.copytree(data_dir, work)
    cfg = StoreConfig() if segment_bytes is None else StoreConfig(segment_bytes=segment_bytes)
    paths = sibling_paths(out)
    try:
        try:
            store = MessageStore(work, cfg)
        except AutoswitchError:
            raise
        except OSError as e:
            raise PipelineError(f"cannot open the store at {data_dir}: {e}", path=str(data_dir)) from e
        try:
            def index_rows():
                for r in store.scan():
                    yield {"group": group, "broker_id": broker_id, "phy_offset": r.phy_offset, "size": r.size,
                           "crc": r.crc, "topic": r.topic, "queue_offset": r.queue_offset, "msg_id": r.msg_id,
                           "born_ts_ms": r.born_ts_ms, "epoch": r.epoch}

            n = atomic_lines(paths["index"], index_rows())
            atomic_lines(paths["offsets"], _offset_rows(store, group, broker_id))
            epochs = [{"group": group, "broker_id": broker_id, "epoch": e.epoch, "start_offset": e.start_offset}
                      for e in store.epochs.entries()]
            atomic_lines(paths["epochs"], epochs)
            replica = {"group": group, "broker_id": broker_id, "max_offset": store.max_offset,
                       "confirm_offset": store.confirm_offset, "min_offset": store.min_offset}
            atomic_lines(paths["replica"], [replica])
        finally:
            store.close()
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
    log.info("exported", group=group, brokerId=broker_id, records=n, epochs=len(epochs),
             max_offset=replica["max_offset"], confirm_offset=replica["confirm_offset"])
    return {"records": n, "epochs": len(epochs), **{k: str(v) for k, v in paths.items()},
            "max_offset": replica["max_offset"], "confirm_offset": replica["confirm_offset"],
            "min_offset": replica["min_offset"]}
