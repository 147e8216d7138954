"""Consumer-group offsets in the durability audit (docs/pipeline.md): did a committed offset get
lost or move backwards across failovers?

Inputs are small tables read on the driver: the commit records of each group's master log
(``offsets`` exports, in log order) and, optionally, what consumers were told (the commit ack
log of ``autoswitch consume --commit-log``). Two findings:

- **backwards**: in the master's log, a (consumer group, topic) commit lower than the one before
  it (our consumers only move forward; a lower one means a commit was taken back and replayed).
- **lost**: an acknowledged commit higher than the master's last commit for that key: the
  consumer was told its progress was safe and the group would now re-read from an older offset.
  After an unclean election that is the expected damage, and the audit names it.
- **reset by an operator**: a move recorded as an operator's ``reset-offsets`` (the commit
  record's ``operator_reset``): a recorded admin decision, never a backwards move or a loss. A key
  an operator reset is not checked for lost commits (the audit cannot tell a commit the reset took
  back from one lost later; the reset is reported instead).
"""

from __future__ import annotations

from collections.abc import Iterable

MAX_FINDINGS = 10_000     # rows kept per finding kind (counts are exact)

Key = tuple[str, str, str]   # (broker group, consumer group, topic)


def audit_offsets(master_of: dict[str, int], offset_rows: Iterable[dict],
                  commit_rows: Iterable[dict] | None) -> dict:
    """``master_of``: broker group -> the master's brokerId (the audit's choice)."""
    last: dict[Key, int] = {}
    backwards: list[dict] = []
    n_back = 0
    resets: list[dict] = []
    reset_keys: set[Key] = set()
    rows = sorted((r for r in offset_rows if master_of.get(r["group"]) == r["broker_id"]),
                  key=lambda r: (r["group"], r["phy_offset"]))
    for r in rows:
        k = (r["group"], r["consumer_group"], r["topic"])
        prev = last.get(k)
        if r.get("operator_reset"):
            reset_keys.add(k)
            if len(resets) < MAX_FINDINGS:
                resets.append({"group": k[0], "consumer_group": k[1], "topic": k[2], "from": prev,
                               "to": r["committed"], "phy_offset": r["phy_offset"], "epoch": r["epoch"]})
        elif prev is not None and r["committed"] < prev:
            n_back += 1
            if len(backwards) < MAX_FINDINGS:
                backwards.append({"group": k[0], "consumer_group": k[1], "topic": k[2], "from": prev,
                                  "to": r["committed"], "phy_offset": r["phy_offset"], "epoch": r["epoch"]})
        last[k] = r["committed"]
    lost: list[dict] = []
    n_lost = 0
    if commit_rows is not None:
        acked: dict[Key, dict] = {}
        for c in commit_rows:
            k = (c["group"], c["consumer_group"], c["topic"])
            if k not in acked or c["committed"] > acked[k]["committed"]:
                acked[k] = c
        for k, c in sorted(acked.items()):
            final = last.get(k)
            if k in reset_keys:
                continue            # the operator's reset decides this key (reported as such)
            if final is None or c["committed"] > final:
                n_lost += 1
                if len(lost) < MAX_FINDINGS:
                    lost.append({"group": k[0], "consumer_group": k[1], "topic": k[2],
                                 "acked_committed": c["committed"], "acked_epoch": c.get("epoch"),
                                 "master_committed": final})
    return {"offsets_lost": n_lost, "offsets_backwards": n_back, "lost": lost, "backwards": backwards,
            "offsets_reset_by_operator": len(reset_keys), "reset_by_operator": resets, "keys": len(last)}
