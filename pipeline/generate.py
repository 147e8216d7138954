"""Seeded generator of realistic exports: a fleet of 3-replica groups with failovers,
SyncStateSet churn and acked traffic, plus planted faults and a manifest of them.

Records are numbered group-major (all of group 0, then group 1, ...) and produced in
chunks of at most `chunk_rows` with numpy, so memory stays bounded whatever the size;
Parquet files are rotated every `file_rows` rows so Spark reads them in parallel.

Planted faults (disjoint records, all acked, all wholly below confirmOffset):
- loss: the record at the acked offset carries a fresh msg_id on every replica (the acked
  message was overwritten, as after an unclean election); the ack keeps the old msg_id;
- divergence: one slave's copy of a record has a different crc;
- duplicate: a retried send: record j carries record i's msg_id (i < j, same group) on every
  replica; the producer's first attempt (i) was not acked, the retry (j) was.

Why one long module: the planted faults must stay consistent across every table the generator
writes (events, logs, acks, manifest), so they are produced in one place.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autoswitch.base.log import get_logger

log = get_logger("pipeline")

REPLICAS = (1, 2, 3)
TOPICS_PER_GROUP = 4
BASE_TS_MS = 1_795_651_200_000          # late November 2026, UTC
MEAN_INTERARRIVAL_MS = 20.0
DEFAULT_CHUNK_ROWS = 1_000_000
DEFAULT_FILE_ROWS = 8_000_000
MAX_GROUPS = 100_000
MAX_MESSAGES = 1_000_000_000
MAX_TAIL = 5                             # unacked records at a group's end
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass
class GroupPlan:
    name: str
    gid: int
    start: int                 # first global record index
    acked: int                 # records [0, acked) are acked
    n: int                     # records incl. the unacked tail
    bounds: list[int]          # in-group record index where each new epoch starts (failovers)
    epochs: list[int]          # epoch of each segment (len(bounds) + 1)
    masters: list[int]         # master brokerId of each segment
    via_no_master: list[bool]  # per failover
    unclean: list[bool]        # per failover
    detect_ms: list[int]
    elect_ms: list[int]
    resume_ms: list[int]
    held: dict[int, int] = field(default_factory=dict)   # brokerId -> records held
    flappy: int | None = None  # brokerId that flaps, if any
    t0: int = 0


def _mix64(x: np.ndarray, salt: int) -> np.ndarray:
    """A bijection on uint64 (splitmix64 finaliser), so ids are unique by construction."""
    with np.errstate(over="ignore"):
        z = (x.astype(np.uint64) + np.uint64(salt & 0xFFFFFFFFFFFFFFFF)) & _M64
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def msg_ids(idx: np.ndarray, seed: int):
    """32-hex-char ids (uuid4-hex look) for global record indexes, as an Arrow string array."""
    import pyarrow as pa

    hi = _mix64(idx, seed * 2 + 1)
    lo = _mix64(idx, seed * 2 + 0x5151)
    raw = np.empty((len(idx), 16), dtype=np.uint8)
    raw[:, :8] = hi.astype(">u8").view(np.uint8).reshape(-1, 8)
    raw[:, 8:] = lo.astype(">u8").view(np.uint8).reshape(-1, 8)
    chars = np.empty((len(idx), 32), dtype=np.uint8)
    chars[:, 0::2] = _HEX[raw >> 4]
    chars[:, 1::2] = _HEX[raw & 0x0F]
    offsets = (np.arange(len(idx) + 1, dtype=np.int32) * 32)
    return pa.Array.from_buffers(pa.string(), len(idx),
                                 [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(chars.tobytes())])


def msg_id_str(i: int, seed: int) -> str:
    return msg_ids(np.array([i], dtype=np.uint64), seed)[0].as_py()


FRESH_BASE = 1 << 48   # ids for overwriting records: outside every real record index


def plan_groups(groups: int, messages: int, rng: np.random.Generator) -> list[GroupPlan]:
    if not (1 <= groups <= MAX_GROUPS) or not (groups <= messages <= MAX_MESSAGES):
        raise ValueError(f"need 1 <= groups <= {MAX_GROUPS} and groups <= messages <= {MAX_MESSAGES}")
    per = np.full(groups, messages // groups, dtype=np.int64)
    per[: messages % groups] += 1
    plans = []
    start = 0
    t0 = BASE_TS_MS
    for g in range(groups):
        acked = int(per[g])
        tail = int(rng.integers(0, MAX_TAIL + 1))
        n = acked + tail
        nf = min(int(1 + rng.poisson(1.5)), max(0, acked - 1), 20)
        bounds = sorted(int(b) for b in rng.choice(np.arange(1, acked), size=nf, replace=False)) if nf else []
        masters = [int(rng.integers(1, 4))]
        epochs = [1]
        via, unclean, det, ele, res = [], [], [], [], []
        for _ in bounds:
            nm = bool(rng.random() < 0.3)
            via.append(nm)
            unclean.append(bool(rng.random() < 0.1))
            epochs.append(epochs[-1] + (2 if nm else 1))
            masters.append(int(rng.choice([b for b in REPLICAS if b != masters[-1]])))
            det.append(int(rng.integers(3_000, 12_000)))
            ele.append(int(rng.integers(200, 8_000)) if nm else 0)
            res.append(int(rng.integers(5, 500)))
        final = masters[-1]
        held = {b: (n if b == final else n - int(rng.integers(0, tail + 1))) for b in REPLICAS}
        flappy = int(rng.choice([b for b in REPLICAS if b != final])) if rng.random() < 0.1 else None
        plans.append(GroupPlan(f"broker-{g:05d}", g, start, acked, n, bounds, epochs, masters, via, unclean,
                               det, ele, res, held, flappy, t0))
        start += n
        t0 += int(rng.integers(0, 2_000))
    return plans


@dataclass
class Faults:
    loss: dict[int, int] = field(default_factory=dict)          # global idx -> fresh id index
    divergence: dict[int, int] = field(default_factory=dict)    # global idx -> slave brokerId
    dup_j: dict[int, int] = field(default_factory=dict)         # global idx j -> global idx i
    dup_i: set[int] = field(default_factory=set)


def plant(plans: list[GroupPlan], rng: np.random.Generator, losses: int, divergences: int,
          duplicates: int) -> Faults:
    acked = np.array([p.acked for p in plans], dtype=np.float64)
    used: set[int] = set()
    f = Faults()
    total_slots = int(acked.sum())
    if losses + divergences + 2 * duplicates > total_slots // 4:
        raise ValueError("too many planted faults for this many messages")
    p = acked / acked.sum()

    def pick(min_local: int = 0) -> tuple[GroupPlan, int]:
        for _ in range(10_000):
            pl = plans[int(rng.choice(len(plans), p=p))]
            if pl.acked <= min_local:
                continue
            k = int(rng.integers(min_local, pl.acked))
            if pl.start + k not in used:
                return pl, k
        raise RuntimeError("could not place a planted fault")

    for n in range(losses):
        pl, k = pick()
        used.add(pl.start + k)
        f.loss[pl.start + k] = FRESH_BASE + n
    for _ in range(divergences):
        pl, k = pick()
        used.add(pl.start + k)
        f.divergence[pl.start + k] = int(rng.choice([b for b in REPLICAS if b != pl.masters[-1]]))
    for _ in range(duplicates):
        for _try in range(10_000):
            pl, k = pick(1)
            i = k - int(rng.integers(1, min(50, k) + 1))
            if pl.start + i not in used:
                break
        else:
            raise RuntimeError("could not place a planted duplicate")
        used.update((pl.start + k, pl.start + i))
        f.dup_j[pl.start + k] = pl.start + i
        f.dup_i.add(pl.start + i)
    return f


class _Rotating:
    """A ParquetWriter that starts a new part file every `file_rows` rows."""

    def __init__(self, folder: Path, schema, file_rows: int) -> None:
        self.folder, self.schema, self.file_rows = folder, schema, file_rows
        folder.mkdir(parents=True, exist_ok=True)
        self.part, self.rows = 0, 0
        self.w: Any = None      # the open pyarrow ParquetWriter

    def write(self, table) -> None:
        import pyarrow.parquet as pq

        if self.w is None or self.rows >= self.file_rows:
            self.close()
            self.w = pq.ParquetWriter(self.folder / f"part-{self.part:05d}.parquet", self.schema,
                                      compression="snappy")
            self.part += 1
            self.rows = 0
        self.w.write_table(table.cast(self.schema), row_group_size=1 << 20)
        self.rows += table.num_rows

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
            self.w = None


def generate(out: Path, groups: int, messages: int, seed: int, plant_losses: int = 0,
             plant_divergences: int = 0, plant_duplicates: int = 0, chunk_rows: int = DEFAULT_CHUNK_ROWS,
             file_rows: int = DEFAULT_FILE_ROWS, fmt: str = "parquet") -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc
    from autoswitch.pipeline import schemas

    t_start = time.monotonic()
    assert chunk_rows > 0 and file_rows > 0
    rng = np.random.default_rng(seed)
    plans = plan_groups(groups, messages, rng)
    faults = plant(plans, rng, plant_losses, plant_divergences, plant_duplicates)
    total = plans[-1].start + plans[-1].n
    out.mkdir(parents=True, exist_ok=True)

    g_start = np.array([p.start for p in plans], dtype=np.int64)
    g_acked = np.array([p.acked for p in plans], dtype=np.int64)
    g_held = np.array([[p.held[b] for b in REPLICAS] for p in plans], dtype=np.int64)
    g_t0 = np.array([p.t0 for p in plans], dtype=np.int64)
    # flat failover tables, globally sorted by record index because records are group-major
    b_global: list[int] = []
    b_gap: list[int] = []
    seg_first = np.zeros(len(plans), dtype=np.int64)
    seg_epoch: list[int] = []
    seg_master: list[int] = []
    for p in plans:
        seg_first[p.gid] = len(seg_epoch)
        seg_epoch.extend(p.epochs)
        seg_master.extend(p.masters)
        for j, bound in enumerate(p.bounds):
            b_global.append(p.start + bound)
            b_gap.append(p.detect_ms[j] + p.elect_ms[j] + p.resume_ms[j])
    b_global_a = np.array(b_global, dtype=np.int64)
    b_cum = np.concatenate([[0], np.cumsum(np.array(b_gap, dtype=np.int64))])
    seg_epoch_a = np.array(seg_epoch, dtype=np.int64)
    seg_master_a = np.array(seg_master, dtype=np.int64)
    g_bfirst = np.searchsorted(b_global_a, g_start, side="left")

    qo_counts = np.zeros(len(plans) * TOPICS_PER_GROUP, dtype=np.int64)
    group_names = pa.array([p.name for p in plans], pa.string())
    topic_names = pa.array([f"{p.name}-topic-{k}" for p in plans for k in range(TOPICS_PER_GROUP)], pa.string())
    g_off_base = np.zeros(len(plans), dtype=np.int64)   # running byte offset at the group's start
    g_ts_base = np.zeros(len(plans), dtype=np.int64)
    run_off = 0
    run_ts = 0
    want: set[int] = set()   # records whose ts / offsets the events and replica rows need
    for p in plans:
        want.update((p.start, p.start + p.n - 1, p.start + p.acked - 1))
        want.update(p.start + h - 1 for h in p.held.values() if h > 0)
        for b in p.bounds:
            want.update((p.start + b - 1, p.start + b))
    want_a = np.array(sorted(want), dtype=np.int64)
    seen: dict[int, tuple[int, int, int]] = {}   # global idx -> (ts, phy_offset, end_offset)
    fault_offsets: dict[int, int] = {}
    all_fault_idx = np.array(sorted(set(faults.loss) | set(faults.divergence) | set(faults.dup_j)
                                    | faults.dup_i), dtype=np.int64)

    ack_schema = schemas.arrow_schema(schemas.ACKS)
    idx_schema = schemas.arrow_schema(schemas.LOG_INDEX)
    jsonl = fmt == "jsonl"
    if not jsonl:
        ack_w = _Rotating(out / "acks", ack_schema, file_rows)
        idx_w = _Rotating(out / "logs" / "index", idx_schema, file_rows * len(REPLICAS))
    else:
        (out / "logs").mkdir(parents=True, exist_ok=True)
        ack_f = open(out / "acks.jsonl", "w")
        idx_f = open(out / "logs" / "all.index.jsonl", "w")
    acked_rows = 0
    index_rows = 0
    for a in range(0, total, chunk_rows):
        b = min(total, a + chunk_rows)
        idx = np.arange(a, b, dtype=np.int64)
        n = b - a
        gi = np.searchsorted(g_start, idx, side="right") - 1
        local = idx - g_start[gi]
        new_groups = np.unique(gi[local == 0])
        size = rng.integers(120, 1200, size=n, dtype=np.int64)
        inter = np.maximum(rng.exponential(MEAN_INTERARRIVAL_MS, size=n).astype(np.int64), 0) + 1
        csum_off = run_off + np.cumsum(size) - size
        csum_ts = run_ts + np.cumsum(inter)
        first_pos: Any = idx[np.searchsorted(gi, new_groups, side="left")] - a if len(new_groups) else []
        for g, fp in zip(new_groups, first_pos, strict=True):
            g_off_base[g] = csum_off[fp]
            g_ts_base[g] = csum_ts[fp]
        run_off = int(csum_off[-1] + size[-1])
        run_ts = int(csum_ts[-1])
        phy = csum_off - g_off_base[gi]
        nb = np.searchsorted(b_global_a, idx, side="right")      # failovers at or before idx (global)
        k = nb - g_bfirst[gi]                                   # failovers of this group so far
        gap = b_cum[nb] - b_cum[g_bfirst[gi]]
        ts = g_t0[gi] + (csum_ts - g_ts_base[gi]) + gap
        born = ts - rng.integers(1, 20, size=n)
        seg = seg_first[gi] + k
        epoch = seg_epoch_a[seg]
        master = seg_master_a[seg]
        topic_k = rng.integers(0, TOPICS_PER_GROUP, size=n)
        key = gi * TOPICS_PER_GROUP + topic_k
        order = np.argsort(key, kind="stable")
        sk = key[order]
        run_start = np.r_[0, np.flatnonzero(np.diff(sk)) + 1]
        rank_sorted = np.arange(n) - np.repeat(run_start, np.diff(np.r_[run_start, n]))
        qo = np.empty(n, dtype=np.int64)
        qo[order] = qo_counts[sk] + rank_sorted
        qo_counts += np.bincount(key, minlength=len(qo_counts))
        crc = rng.integers(0, 1 << 32, size=n, dtype=np.int64)
        ids = msg_ids(idx.astype(np.uint64), seed)
        log_ids = ids
        topics = topic_names.take(pa.array(key))
        names = group_names.take(pa.array(gi))

        for t in want_a[(want_a >= a) & (want_a < b)]:
            t = int(t)
            seen[t] = (int(ts[t - a]), int(phy[t - a]), int(phy[t - a] + size[t - a]))
        hit = all_fault_idx[(all_fault_idx >= a) & (all_fault_idx < b)]
        for h in hit:
            fault_offsets[int(h)] = int(phy[h - a])
        # faults touching the log content on every replica
        if len(hit):
            mask = np.zeros(n, dtype=bool)
            repl = []
            for h in hit:
                h = int(h)
                if h in faults.loss:
                    mask[h - a] = True
                    repl.append(msg_id_str(faults.loss[h], seed))
                    crc[h - a] ^= 0x1F2E3D4C
                elif h in faults.dup_j:
                    mask[h - a] = True
                    repl.append(msg_id_str(faults.dup_j[h], seed))
            if repl:
                log_ids = pc.replace_with_mask(ids, pa.array(mask), pa.array(repl, pa.string()))

        # acks: records below the group's acked count, minus the unacked first attempts
        is_acked = local < g_acked[gi]
        ack_msg = ids
        if len(hit):
            mask = np.zeros(n, dtype=bool)
            repl = []
            for h in hit:
                h = int(h)
                if h in faults.dup_j:
                    mask[h - a] = True
                    repl.append(msg_id_str(faults.dup_j[h], seed))
                if h in faults.dup_i:
                    is_acked[h - a] = False
            if repl:
                ack_msg = pc.replace_with_mask(ids, pa.array(mask), pa.array(repl, pa.string()))
        sel = np.flatnonzero(is_acked)
        ack_tab = pa.table({
            "msg_id": ack_msg.take(sel), "group": names.take(sel), "broker_id": master[sel],
            "topic": topics.take(sel), "queue_offset": qo[sel], "phy_offset": phy[sel], "epoch": epoch[sel],
            "ack_ts_ms": ts[sel],
        })
        acked_rows += ack_tab.num_rows
        base = {"group": names, "phy_offset": phy, "size": size, "topic": topics, "queue_offset": qo,
                "msg_id": log_ids, "born_ts_ms": born, "epoch": epoch}
        rep_tabs = []
        for bi, broker in enumerate(REPLICAS):
            keep = np.flatnonzero(local < g_held[gi, bi])
            c = crc.copy()
            for h in hit:
                h = int(h)
                if faults.divergence.get(h) == broker:
                    c[h - a] ^= 0x00C0FFEE
            cols = {k2: (v.take(keep) if isinstance(v, pa.Array | pa.ChunkedArray) else v[keep])
                    for k2, v in base.items()}
            cols["broker_id"] = np.full(len(keep), broker, dtype=np.int64)
            cols["crc"] = c[keep]
            rep_tabs.append(pa.table({f.name: cols[f.name] for f in schemas.LOG_INDEX}))
        idx_tab = pa.concat_tables(rep_tabs)
        index_rows += idx_tab.num_rows
        if jsonl:
            _write_jsonl(ack_f, ack_tab)
            _write_jsonl(idx_f, idx_tab)
        else:
            ack_w.write(ack_tab)
            idx_w.write(idx_tab)
        log.info("generate_progress", records=b, total=total, acked_rows=acked_rows)
    if jsonl:
        ack_f.close()
        idx_f.close()
    else:
        ack_w.close()
        idx_w.close()

    epochs_rows, replica_rows = [], []
    for p in plans:
        confirm = seen[p.start + p.acked - 1][2]
        starts = [0] + [seen[p.start + b][1] for b in p.bounds]
        for b in REPLICAS:
            h = p.held[b]
            max_off = seen[p.start + h - 1][2] if h > 0 else 0
            replica_rows.append({"group": p.name, "broker_id": b, "max_offset": max_off,
                                 "confirm_offset": confirm, "min_offset": 0})
            for e, st in zip(p.epochs, starts, strict=True):
                if st <= max_off:
                    epochs_rows.append({"group": p.name, "broker_id": b, "epoch": e, "start_offset": st})
    events = controller_events(plans, {k: v[0] for k, v in seen.items()}, rng)
    _dump(out / "logs" / "epochs" / "epochs.jsonl", epochs_rows)
    _dump(out / "logs" / "replica" / "replica.jsonl", replica_rows)
    _dump(out / "events" / "events.jsonl", events)

    manifest = {
        "seed": seed, "groups": groups, "messages": messages, "records": total, "acked_rows": acked_rows,
        "index_rows": index_rows, "replicas": list(REPLICAS), "format": fmt,
        "failovers": sum(len(p.bounds) for p in plans),
        "unclean_elections": sum(sum(p.unclean) for p in plans),
        "flappy_brokers": [{"group": p.name, "broker_id": p.flappy} for p in plans if p.flappy],
        "final_masters": {p.name: p.masters[-1] for p in plans} if groups <= 1000 else None,
        "planted": {
            "losses": [{"group": plans[_gof(g_start, h)].name, "msg_id": msg_id_str(h, seed),
                        "phy_offset": fault_offsets[h]} for h in sorted(faults.loss)],
            "divergences": [{"group": plans[_gof(g_start, h)].name, "broker_id": b,
                             "phy_offset": fault_offsets[h]} for h, b in sorted(faults.divergence.items())],
            "duplicates": [{"group": plans[_gof(g_start, j)].name, "msg_id": msg_id_str(i, seed),
                            "offsets": [fault_offsets[i], fault_offsets[j]], "acked_offset": fault_offsets[j]}
                           for j, i in sorted(faults.dup_j.items())],
        },
        "seconds": round(time.monotonic() - t_start, 2),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    log.info("generate_done", records=total, acked_rows=acked_rows, index_rows=index_rows,
             seconds=manifest["seconds"])
    return manifest


def _gof(g_start: np.ndarray, h: int) -> int:
    return int(np.searchsorted(g_start, h, side="right") - 1)


def _write_jsonl(f, table) -> None:
    for row in table.to_pylist():
        f.write(json.dumps(row, separators=(",", ":")) + "\n")


def _dump(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def controller_events(plans: list[GroupPlan], ts_of: dict[int, int], rng: np.random.Generator) -> list[dict]:
    """The controller's applied-event history matching the planned epochs and masters."""
    evs: list[tuple[int, int, dict]] = []
    seq = 0

    def add(ts: int, group: str, event: str, master, epoch: int, sss, sss_epoch: int,
            reason: str = "", unclean: bool = False) -> None:
        nonlocal seq
        seq += 1
        evs.append((ts, seq, {"ts_ms": int(ts), "index": 0, "group": group, "event": event,
                              "master_broker_id": master, "master_epoch": epoch,
                              "sync_state_set": sorted(sss), "sync_state_set_epoch": sss_epoch,
                              "reason": reason, "unclean": unclean}))

    for p in plans:
        t = ts_of[p.start] - 5_000
        for b in REPLICAS:
            add(t + b, p.name, "ApplyBrokerId", None, 0, [], 0, f"brokerId {b}")
            add(t + 10 + b, p.name, "RegisterBroker", None, 0, [], 0, f"brokerId {b}")
        m, epoch, sss_e = p.masters[0], 1, 1
        sss = {m}
        add(t + 100, p.name, "ElectMaster", m, epoch, sss, sss_e, "no master: first election")
        sss, sss_e = set(REPLICAS), sss_e + 1
        add(t + 200, p.name, "AlterSyncStateSet", m, epoch, sss, sss_e, "expand")
        for s_i in range(len(p.bounds) + 1):
            lo = ts_of[p.start + (p.bounds[s_i - 1] if s_i else 0)]
            hi = ts_of[p.start + (p.bounds[s_i] - 1 if s_i < len(p.bounds) else p.n - 1)]
            slaves = [b for b in REPLICAS if b != m]
            cycles = int(rng.poisson(0.3))
            who = [int(rng.choice(slaves)) for _ in range(cycles)]
            if p.flappy is not None and s_i == len(p.bounds):
                who = [p.flappy] * int(rng.integers(4, 7))
            if who and hi - lo > 4 * len(who) + 2:
                span = min(hi - lo - 2, 300_000)
                times = np.sort(rng.choice(np.arange(lo + 1, lo + 1 + span), size=2 * len(who), replace=False))
                for c, x in enumerate(who):
                    sss, sss_e = sss - {x}, sss_e + 1
                    add(int(times[2 * c]), p.name, "AlterSyncStateSet", m, epoch, sss, sss_e, "shrink: not caught up")
                    sss, sss_e = sss | {x}, sss_e + 1
                    add(int(times[2 * c + 1]), p.name, "AlterSyncStateSet", m, epoch, sss, sss_e, "expand")
            if s_i == len(p.bounds):
                break
            # failover s_i: the master stops after its last acked write at `hi`
            old = m
            t_lost = hi + p.detect_ms[s_i]
            if p.via_no_master[s_i]:
                epoch += 1
                sss, sss_e = sss - {old}, sss_e + 1
                add(t_lost, p.name, "NoMaster", None, epoch, sss, sss_e, "master inactive; no candidate")
            m = p.masters[s_i + 1]
            epoch = p.epochs[s_i + 1]
            t_elect = t_lost + p.elect_ms[s_i]
            sss, sss_e = {m}, sss_e + 1
            unc = p.unclean[s_i]
            add(t_elect, p.name, "ElectMaster", m, epoch, sss, sss_e,
                "unclean election: no alive SyncStateSet member" if unc else "master inactive", unc)
            others = [b for b in REPLICAS if b not in (m, old)]
            sss, sss_e = sss | set(others), sss_e + 1
            add(t_elect + 1, p.name, "AlterSyncStateSet", m, epoch, sss, sss_e, "expand")
            sss, sss_e = sss | {old}, sss_e + 1
            add(t_elect + 2, p.name, "AlterSyncStateSet", m, epoch, sss, sss_e, "expand: old master rejoined")
    evs.sort(key=lambda e: (e[0], e[1]))
    out = []
    for n, (_, _, e) in enumerate(evs, start=1):
        e["index"] = n
        out.append(e)
    return out
