"""The same audit in one process with pandas: the peer the benchmark compares Spark against,
and a second implementation of the definitions. Parquet exports only; memory grows with input."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
from autoswitch.pipeline import inputs
from autoswitch.pipeline.audit import load_masters


def audit_pandas(acks_dir: Path, logs_dir: Path, events_path: Path | None) -> dict:
    logs = inputs.find_log_sources(logs_dir)
    masters, replicas = load_masters(inputs.read_rows(logs["replica"]), inputs.read_rows(logs["epochs"]),
                                     inputs.read_rows(inputs.find_sources(events_path, "events"))
                                     if events_path else None)
    acks = pq.read_table(acks_dir, columns=["group", "msg_id", "phy_offset"]).to_pandas()
    idx = pq.read_table(logs_dir / "index", columns=["group", "broker_id", "phy_offset", "size", "crc",
                                                     "msg_id"]).to_pandas()
    mt = pd.DataFrame([(m.group, m.broker_id, m.confirm_offset) for m in masters.values()],
                      columns=["group", "master_id", "master_confirm"])
    rt = pd.DataFrame([(r.group, r.broker_id, r.confirm_offset, r.min_offset) for r in replicas],
                      columns=["group", "broker_id", "confirm_offset", "min_offset"])
    idx = idx.merge(mt, on="group", how="left")
    mrows = idx.loc[idx.broker_id == idx.master_id, ["group", "msg_id", "phy_offset"]]

    a = acks.merge(mrows[["group", "msg_id"]].drop_duplicates().assign(in_master=True), on=["group", "msg_id"],
                   how="left")
    lost = int(a.in_master.isna().sum())
    a = a.merge(mrows.drop_duplicates().assign(at_off=True), on=["group", "msg_id", "phy_offset"], how="left")
    moved = int((a.in_master.notna() & a.at_off.isna()).sum())

    ar = acks.merge(rt, on="group")
    ar = ar[(ar.phy_offset < ar.confirm_offset) & (ar.phy_offset >= ar.min_offset)]
    held = idx[["group", "broker_id", "msg_id"]].drop_duplicates().assign(held=True)
    ar = ar.merge(held, on=["group", "broker_id", "msg_id"], how="left")
    replica_missing = int(ar.held.isna().sum())

    dup = mrows.groupby(["group", "msg_id"], sort=False).size()
    duplicates = int((dup > 1).sum())

    rt2 = rt.merge(mt, on="group")
    rt2["bound"] = rt2[["confirm_offset", "master_confirm"]].min(axis=1)
    r = idx.merge(rt2[["group", "broker_id", "bound"]], on=["group", "broker_id"])
    r = r[r.phy_offset + r["size"] <= r.bound]
    m = r.loc[r.broker_id == r.master_id, ["group", "phy_offset", "crc", "msg_id", "size"]]
    sl = r.loc[r.broker_id != r.master_id, ["group", "broker_id", "phy_offset", "crc", "msg_id", "size"]]
    j = sl.merge(m, on=["group", "phy_offset"], how="left", suffixes=("", "_m"))
    div = j.crc_m.isna() | (j.crc != j.crc_m) | (j.msg_id != j.msg_id_m) | (j["size"] != j.size_m)
    return {"acked_rows": len(acks), "counts": {"lost": lost, "moved": moved, "replica_missing": replica_missing,
                                                "divergence": int(div.sum()), "duplicates": duplicates}}
