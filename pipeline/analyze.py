"""Failover analytics over the controller's applied-event history (and optionally acks).

Definitions (long form in docs/pipeline.md):
- failover: an ElectMaster event naming a master, in a group that had a master before, that
  either names a different broker than the previous master or follows a NoMaster event;
- master lost at: the first NoMaster event since the previous election, else (with acks) the
  last acked write of the old master's epoch, else unknown;
- time to elect: elect ts - master lost ts;
- write unavailability (with acks): first ack in an epoch >= the new one - last ack of the old epoch;
- SyncStateSet churn: AlterSyncStateSet events that remove (shrink) or add (expand) members,
  compared with the set carried by the group's previous ElectMaster/NoMaster/AlterSyncStateSet;
- flapping broker: removed from its group's SyncStateSet by AlterSyncStateSet at least
  `flap_min_removals` times within some window of `flap_window_ms`;
- unclean election: an ElectMaster event with unclean = true.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from autoswitch.base.log import get_logger

log = get_logger("pipeline")

# the events that set a group's master or SyncStateSet (ImportGroup: taken over from RocketMQ's controller)
STATE_EVENTS = ("ElectMaster", "NoMaster", "AlterSyncStateSet", "ImportGroup")
MAX_REPORT_ROWS = 200_000   # rows brought to the driver for the report; the Parquet has everything


@dataclass(frozen=True)
class AnalyzeConfig:
    flap_window_ms: int = 600_000
    flap_min_removals: int = 3
    timeline_groups: int = 30     # groups drawn in the HTML timeline (most failovers first)

    def __post_init__(self) -> None:
        assert self.flap_window_ms > 0 and self.flap_min_removals >= 1 and self.timeline_groups >= 1


def percentile(sorted_vals: list[float], p: float) -> float | None:
    """Nearest-rank percentile: the smallest value with at least p% of values <= it."""
    if not sorted_vals:
        return None
    k = max(1, math.ceil(p / 100.0 * len(sorted_vals)))
    return sorted_vals[k - 1]


def distribution(vals: list[float]) -> dict:
    v = sorted(vals)
    return {"n": len(v), "min": v[0] if v else None, "p50": percentile(v, 50), "p90": percentile(v, 90),
            "p99": percentile(v, 99), "max": v[-1] if v else None,
            "mean": round(sum(v) / len(v), 3) if v else None}


def run_analyze(spark, events, acks, out_dir: Path, cfg: AnalyzeConfig, progress) -> dict:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    out_dir.mkdir(parents=True, exist_ok=True)
    progress.set_phase("analyze: state changes")
    w = Window.partitionBy("group").orderBy("index")
    ev = (events.filter(F.col("event").isin(*STATE_EVENTS))
          .withColumn("prev_sss", F.lag("sync_state_set").over(w))
          .withColumn("removed", F.array_except(F.coalesce("prev_sss", F.array().cast("array<long>")),
                                                F.col("sync_state_set")))
          .withColumn("added", F.array_except(F.col("sync_state_set"),
                                              F.coalesce("prev_sss", F.array().cast("array<long>"))))
          .withColumn("prev_master", F.last("master_broker_id", ignorenulls=True)
                      .over(w.rowsBetween(Window.unboundedPreceding, -1)))
          .withColumn("is_elect", (F.col("event") == "ElectMaster") & F.col("master_broker_id").isNotNull())
          .withColumn("prev_elect_epoch", F.last(F.when(F.col("is_elect"), F.col("master_epoch")), ignorenulls=True)
                      .over(w.rowsBetween(Window.unboundedPreceding, -1)))
          .withColumn("seg", F.sum(F.col("is_elect").cast("int")).over(
              w.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
          .cache())

    alters = ev.filter(F.col("event") == "AlterSyncStateSet")
    churn = (ev.groupBy("group").agg(
        F.sum((F.col("event") == "AlterSyncStateSet").cast("int")).alias("alter_events"),
        F.sum(((F.col("event") == "AlterSyncStateSet") & (F.size("removed") > 0)).cast("int")).alias("shrinks"),
        F.sum(((F.col("event") == "AlterSyncStateSet") & (F.size("added") > 0)).cast("int")).alias("expands"),
        F.sum(F.when(F.col("event") == "AlterSyncStateSet", F.size("removed")).otherwise(0)).alias("members_removed"),
        F.sum(F.when(F.col("event") == "AlterSyncStateSet", F.size("added")).otherwise(0)).alias("members_added"),
        F.min("ts_ms").alias("first_ts_ms"), F.max("ts_ms").alias("last_ts_ms")))

    progress.set_phase("analyze: flapping")
    rem = alters.select("group", "ts_ms", F.explode("removed").alias("broker_id"))
    wf = Window.partitionBy("group", "broker_id").orderBy("ts_ms").rangeBetween(-(cfg.flap_window_ms - 1), 0)
    flap = (rem.withColumn("in_window", F.count("*").over(wf))
            .groupBy("group", "broker_id")
            .agg(F.count("*").alias("removals"), F.max("in_window").alias("max_removals_in_window"),
                 F.max_by("ts_ms", "in_window").alias("worst_window_end_ts_ms"))
            .withColumn("flapping", F.col("max_removals_in_window") >= cfg.flap_min_removals))

    progress.set_phase("analyze: failovers")
    nomaster = (ev.filter(F.col("event") == "NoMaster").groupBy("group", "seg")
                .agg(F.min("ts_ms").alias("no_master_ts_ms"), F.count("*").alias("no_master_events")))
    el = (ev.filter(F.col("is_elect"))
          .withColumn("pseg", F.col("seg") - 1)
          .join(nomaster.withColumnRenamed("seg", "pseg"), ["group", "pseg"], "left"))
    failovers = (el.filter(F.col("prev_master").isNotNull()
                           & ((F.col("master_broker_id") != F.col("prev_master"))
                              | F.col("no_master_ts_ms").isNotNull()))
                 .select("group", F.col("prev_master").alias("old_master"),
                         F.col("master_broker_id").alias("new_master"),
                         F.col("prev_elect_epoch").alias("old_epoch"), F.col("master_epoch").alias("new_epoch"),
                         F.col("ts_ms").alias("elect_ts_ms"), F.col("index").alias("elect_index"),
                         "no_master_ts_ms", F.coalesce("unclean", F.lit(False)).alias("unclean"), "reason",
                         # the election's own one-line explanation (controller/state/explain.py)
                         F.get_json_object(F.col("decision"), "$.summary").alias("decision")))
    reelections = el.filter(F.col("prev_master").isNotNull() & (F.col("master_broker_id") == F.col("prev_master"))
                            & F.col("no_master_ts_ms").isNull()).count()
    if acks is not None:
        progress.set_phase("analyze: acks per epoch")
        per_epoch = acks.groupBy("group", "epoch").agg(F.min("ack_ts_ms").alias("first_ack"),
                                                       F.max("ack_ts_ms").alias("last_ack"),
                                                       F.count("*").alias("acks")).cache()
        old = per_epoch.select("group", F.col("epoch").alias("old_epoch"),
                               F.col("last_ack").alias("last_ack_old_ts_ms"))
        new = per_epoch.select("group", F.col("epoch").alias("e"), "first_ack")
        failovers = failovers.join(old, ["group", "old_epoch"], "left")
        firsts = (failovers.select("group", "new_epoch", "elect_index").join(new, "group")
                  .filter((F.col("e") >= F.col("new_epoch")) & (F.col("first_ack") >= 0))
                  .groupBy("group", "elect_index").agg(F.min("first_ack").alias("first_ack_new_ts_ms")))
        failovers = failovers.join(firsts, ["group", "elect_index"], "left")
    else:
        failovers = (failovers.withColumn("last_ack_old_ts_ms", F.lit(None).cast("long"))
                     .withColumn("first_ack_new_ts_ms", F.lit(None).cast("long")))
    failovers = (failovers
                 .withColumn("master_lost_ts_ms", F.coalesce("no_master_ts_ms", "last_ack_old_ts_ms"))
                 .withColumn("lost_evidence", F.when(F.col("no_master_ts_ms").isNotNull(), "NoMaster")
                             .when(F.col("last_ack_old_ts_ms").isNotNull(), "last_ack"))
                 .withColumn("time_to_elect_ms", F.col("elect_ts_ms") - F.col("master_lost_ts_ms"))
                 .withColumn("write_unavailable_ms", F.col("first_ack_new_ts_ms") - F.col("last_ack_old_ts_ms"))
                 .orderBy("group", "elect_index"))
    unclean = (ev.filter(F.col("is_elect") & F.coalesce("unclean", F.lit(False)))
               .select("group", "ts_ms", "index", "master_broker_id", "master_epoch", "sync_state_set", "reason"))

    admin = (events.filter(F.col("event") == "AdminAudit")
             .select("ts_ms", "index", "group", "actor", "reason"))

    progress.set_phase("analyze: writing results")
    frames = {"failovers": failovers, "sss_churn": churn, "flapping": flap, "unclean": unclean,
              "admin_actions": admin}
    for name, df in frames.items():
        df.coalesce(1).write.mode("overwrite").parquet(str(out_dir / name))
    got = {name: spark.read.parquet(str(out_dir / name)) for name in frames}
    fo = [r.asDict() for r in got["failovers"].orderBy("group", "elect_index").limit(MAX_REPORT_ROWS).collect()]
    ch = [r.asDict() for r in got["sss_churn"].orderBy("group").limit(MAX_REPORT_ROWS).collect()]
    fl = [r.asDict() for r in got["flapping"].orderBy("group", "broker_id").limit(MAX_REPORT_ROWS).collect()]
    un = [r.asDict() for r in got["unclean"].orderBy("index").limit(MAX_REPORT_ROWS).collect()]
    adm = [r.asDict() for r in got["admin_actions"].orderBy("index").limit(MAX_REPORT_ROWS).collect()]
    n_fo = got["failovers"].count()
    tops = sorted({}.fromkeys(r["group"] for r in fo), key=lambda g: -sum(1 for r in fo if r["group"] == g))
    tl_groups = tops[: cfg.timeline_groups] or [r["group"] for r in ch[: cfg.timeline_groups]]
    timeline = [r.asDict() for r in ev.filter(F.col("group").isin(tl_groups) & F.col("event").isin("ElectMaster", "NoMaster"))
                .select("group", "ts_ms", "event", "master_broker_id", "master_epoch", "unclean")
                .orderBy("group", "index").collect()]
    ends = {r["group"]: r["last_ts_ms"] for r in ch}
    ev.unpersist()

    summary = {
        "groups": len(ch),
        "failovers": n_fo,
        "reelections_same_master": reelections,
        "failovers_via_no_master": sum(1 for r in fo if r["no_master_ts_ms"] is not None),
        "unclean_elections": len(un),
        "admin_actions": got["admin_actions"].count(),
        "time_to_elect_ms": distribution([r["time_to_elect_ms"] for r in fo if r["time_to_elect_ms"] is not None]),
        "write_unavailable_ms": distribution([r["write_unavailable_ms"] for r in fo
                                              if r["write_unavailable_ms"] is not None]),
        "sss": {"alter_events": sum(r["alter_events"] for r in ch), "shrinks": sum(r["shrinks"] for r in ch),
                "expands": sum(r["expands"] for r in ch), "members_removed": sum(r["members_removed"] for r in ch),
                "members_added": sum(r["members_added"] for r in ch)},
        "flapping_brokers": [{"group": r["group"], "broker_id": r["broker_id"],
                              "max_removals_in_window": r["max_removals_in_window"]} for r in fl if r["flapping"]],
        "flap_rule": {"window_ms": cfg.flap_window_ms, "min_removals": cfg.flap_min_removals},
        "with_acks": acks is not None,
        "out": str(out_dir),
        "report": str(out_dir / "report.html"),
    }
    from autoswitch.pipeline.report import render_html

    (out_dir / "report.html").write_text(render_html(summary, fo, ch, fl, un, timeline, ends, adm))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    log.info("analyze_done", failovers=n_fo, unclean=len(un), flapping=len(summary["flapping_brokers"]))
    return summary
