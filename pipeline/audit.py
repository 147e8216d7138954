"""The durability audit: acknowledged writes against the final logs of every replica.

Definitions (docs/pipeline.md has the long form):
- lost: an acked (group, msg_id) that is absent from the current master's log;
- moved: an acked msg_id present in the master's log, but not at the acked phy_offset;
- replica_missing: an acked msg_id absent from a replica although the acked offset is below
  that replica's confirmOffset (and at/after its min_offset);
- divergence: a record of a replica, wholly below min(its confirmOffset, the master's), that
  differs from the master's record at the same phy_offset (crc, msg_id or size), or that sits
  at an offset where the master has no record;
- duplicate: a msg_id at several offsets of the master's log (producer retries).

Three shuffles over the data, whatever the size: acks x index on (group, msg_id); the
master's index on (group, msg_id) for duplicates; the index on (group, phy_offset) with
fixed-size fingerprints for divergence (details only for the rare suspect offsets).
"""

from __future__ import annotations

import json
from pathlib import Path

from autoswitch.pipeline.masters import MasterChoice, Replica, choose_masters

from autoswitch.log import get_logger

log = get_logger("pipeline")

CATEGORIES = ("lost", "moved", "replica_missing", "divergence", "duplicates")
MAX_MASK_BROKER_ID = 62          # holders are a bit mask of brokerIds 0..62; above that, a set

EXIT_CLEAN = 0
EXIT_LOST = 2
EXIT_UNSAFE = 3   # nothing lost at the master, but a replica diverges, misses or moved data


def load_masters(replica_rows: list[dict], epoch_rows: list[dict],
                 event_rows: list[dict] | None) -> tuple[dict[str, MasterChoice], list[Replica]]:
    """Small tables on the driver: one row per replica, per EpochFile entry, per controller event."""
    last_epoch: dict[tuple[str, int], int] = {}
    for r in epoch_rows:
        k = (r["group"], r["broker_id"])
        last_epoch[k] = max(last_epoch.get(k, 0), r["epoch"])
    replicas = [Replica(r["group"], r["broker_id"], r["max_offset"], r["confirm_offset"],
                        r.get("min_offset") or 0, last_epoch.get((r["group"], r["broker_id"]), 0))
                for r in replica_rows]
    event_master: dict[str, int | None] | None = None
    if event_rows is not None:
        last: dict[str, tuple[int, int | None]] = {}
        for e in event_rows:
            if e["event"] in ("ElectMaster", "NoMaster"):
                if e["group"] not in last or e["index"] > last[e["group"]][0]:
                    last[e["group"]] = (e["index"], e["master_broker_id"])
        event_master = {g: m for g, (_, m) in last.items()}
    return choose_masters(replicas, event_master), replicas


def run_audit(spark, acks, index, replica_rows: list[dict], epoch_rows: list[dict],
              event_rows: list[dict] | None, out_dir: Path, progress) -> dict:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    out_dir.mkdir(parents=True, exist_ok=True)
    progress.set_phase("audit: masters")
    masters, replicas = load_masters(replica_rows, epoch_rows, event_rows)
    for m in masters.values():
        log.debug("master_chosen", group=m.group, brokerId=m.broker_id, source=m.source)
    max_id = max((r.broker_id for r in replicas), default=0)
    use_mask = max_id <= MAX_MASK_BROKER_ID

    masters_df = spark.createDataFrame(
        [(m.group, m.broker_id, m.confirm_offset) for m in masters.values()],
        "group string, master_id long, master_confirm long")
    rep_struct = T.StructType([
        T.StructField("broker_id", T.LongType()), T.StructField("confirm_offset", T.LongType()),
        T.StructField("min_offset", T.LongType())])
    by_group: dict[str, list] = {}
    for r in replicas:
        by_group.setdefault(r.group, []).append((r.broker_id, r.confirm_offset, r.min_offset))
    reps_df = spark.createDataFrame(
        list(by_group.items()),
        T.StructType([T.StructField("group", T.StringType()),
                      T.StructField("replicas", T.ArrayType(rep_struct))]))
    flat_df = spark.createDataFrame(
        [(r.group, r.broker_id, min(r.confirm_offset, masters[r.group].confirm_offset),
          masters[r.group].broker_id) for r in replicas],
        "group string, broker_id long, bound long, master_id long")

    # ---- acks against every replica's index, one shuffle on (group, msg_id) ----
    progress.set_phase("audit: acked messages")
    a = (acks.select("group", "msg_id", F.col("phy_offset").alias("acked_offset"),
                     F.col("broker_id").alias("acked_by"), "epoch", "ack_ts_ms", "topic", "queue_offset")
         .join(F.broadcast(masters_df.select("group", "master_id")), "group", "left"))
    i = index.select("group", "msg_id", F.col("broker_id").alias("holder"),
                     F.col("phy_offset").alias("found_offset"))
    j = a.join(i, ["group", "msg_id"], "left")
    at_master = F.col("holder") == F.col("master_id")
    if use_mask:
        holders = F.expr("bit_or(shiftleft(1L, cast(holder as int)))")
        held = "(coalesce(holders, 0L) & shiftleft(1L, cast(r.broker_id as int))) = 0"
    else:
        holders = F.collect_set("holder")
        held = "not array_contains(coalesce(holders, array()), r.broker_id)"
    agg = j.groupBy("group", "msg_id", "acked_offset").agg(
        F.first("acked_by").alias("acked_by"), F.first("epoch").alias("epoch"),
        F.first("ack_ts_ms").alias("ack_ts_ms"), F.first("topic").alias("topic"),
        F.first("queue_offset").alias("queue_offset"), F.first("master_id").alias("master_id"),
        F.max(F.coalesce(at_master, F.lit(False))).alias("in_master"),
        F.max(F.coalesce(at_master & (F.col("found_offset") == F.col("acked_offset")), F.lit(False)))
        .alias("at_offset"),
        F.min(F.when(at_master, F.col("found_offset"))).alias("found_offset_min"),
        F.max(F.when(at_master, F.col("found_offset"))).alias("found_offset_max"),
        F.sum(F.when(at_master, 1).otherwise(0)).alias("found_copies"),
        holders.alias("holders"))
    missing = F.expr(
        "coalesce(transform(filter(replicas, r -> acked_offset < r.confirm_offset "
        f"and acked_offset >= r.min_offset and {held}), r -> r.broker_id), array())")
    problems = (agg.join(F.broadcast(reps_df), "group", "left").withColumn("missing_on", missing)
                .filter(~F.col("in_master") | ~F.col("at_offset") | (F.size("missing_on") > 0))
                .drop("replicas", "holders")
                .persist(StorageLevel.MEMORY_AND_DISK))
    base_cols = ["group", "msg_id", "acked_offset", "acked_by", "epoch", "ack_ts_ms", "topic",
                 "queue_offset", "master_id"]
    lost = problems.filter(~F.col("in_master")).select(*base_cols)
    moved = problems.filter(F.col("in_master") & ~F.col("at_offset")).select(
        *base_cols, "found_offset_min", "found_offset_max", "found_copies")
    rmiss = problems.select(*base_cols, F.explode("missing_on").alias("broker_id"))

    # ---- duplicates in the master's log ----
    progress.set_phase("audit: duplicates")
    m_idx = (index.join(F.broadcast(masters_df.select("group", "master_id")), "group")
             .filter(F.col("broker_id") == F.col("master_id")))
    # Keys first with a fixed-size count, offsets only for the (rare) duplicated keys; adaptive
    # execution broadcasts the small side of the second join.
    dup_keys = m_idx.groupBy("group", "msg_id").count().filter(F.col("count") > 1)
    dups = (m_idx.join(dup_keys.select("group", "msg_id"), ["group", "msg_id"])
            .groupBy("group", "msg_id")
            .agg(F.count("*").alias("copies"), F.array_sort(F.collect_list("phy_offset")).alias("offsets")))

    # ---- divergence below confirmOffset, fingerprints first ----
    progress.set_phase("audit: divergence")
    r = (index.join(F.broadcast(flat_df), ["group", "broker_id"])
         .filter(F.col("phy_offset") + F.col("size") <= F.col("bound"))
         .withColumn("is_master", F.col("broker_id") == F.col("master_id"))
         .withColumn("idh", F.xxhash64("msg_id")))
    m, s = F.col("is_master"), ~F.col("is_master")
    g = r.groupBy("group", "phy_offset").agg(
        F.max(F.when(m, F.col("crc"))).alias("m_crc"), F.max(F.when(m, F.col("size"))).alias("m_size"),
        F.max(F.when(m, F.col("idh"))).alias("m_idh"),
        F.min(F.when(s, F.col("crc"))).alias("s_crc0"), F.max(F.when(s, F.col("crc"))).alias("s_crc1"),
        F.min(F.when(s, F.col("size"))).alias("s_size0"), F.max(F.when(s, F.col("size"))).alias("s_size1"),
        F.min(F.when(s, F.col("idh"))).alias("s_idh0"), F.max(F.when(s, F.col("idh"))).alias("s_idh1"),
        F.sum(F.when(m, 1).otherwise(0)).alias("m_n"))
    differs = F.lit(False)
    for c in ("crc", "size", "idh"):
        differs = differs | (F.col(f"s_{c}0") != F.col(f"m_{c}")) | (F.col(f"s_{c}1") != F.col(f"m_{c}"))
    suspects = g.filter(F.col("s_crc0").isNotNull() & ((F.col("m_n") == 0) | differs)).select("group", "phy_offset")
    at = r.join(suspects, ["group", "phy_offset"])
    mv = at.filter(m).select("group", "phy_offset", F.col("crc").alias("master_crc"),
                             F.col("msg_id").alias("master_msg_id"), F.col("size").alias("master_size"))
    div = (at.filter(s).join(mv, ["group", "phy_offset"], "left")
           .withColumn("kind", F.when(F.col("master_crc").isNull(), "only_on_replica")
                       .when(F.col("msg_id") != F.col("master_msg_id"), "msg_id_mismatch")
                       .when(F.col("crc") != F.col("master_crc"), "crc_mismatch")
                       .when(F.col("size") != F.col("master_size"), "size_mismatch"))
           .filter(F.col("kind").isNotNull())
           .select("group", "broker_id", "phy_offset", "kind", "size", "crc", "msg_id", "master_id",
                   "master_crc", "master_msg_id", "master_size", "bound"))

    progress.set_phase("audit: writing results")
    frames = {"lost": lost, "moved": moved, "replica_missing": rmiss, "divergence": div, "duplicates": dups}
    # One job computes and caches every (small) result and counts them; the writes read the cache.
    frames = {k: v.persist(StorageLevel.MEMORY_AND_DISK) for k, v in frames.items()}
    tally = None
    for name, df in [*frames.items(), ("_problems", problems), ("_acks", acks)]:
        c = df.groupBy().count().withColumn("category", F.lit(name))
        tally = c if tally is None else tally.unionByName(c)
    counts = {r["category"]: r["count"] for r in tally.collect()}
    n_problems, ack_rows = counts.pop("_problems"), counts.pop("_acks")
    for name, df in frames.items():
        df.coalesce(1).write.mode("overwrite").parquet(str(out_dir / name))
        df.unpersist()
    problems.unpersist()

    sources: dict[str, int] = {}
    for mc in masters.values():
        sources[mc.source] = sources.get(mc.source, 0) + 1
    if counts["lost"]:
        verdict, code = "LOST_ACKED_MESSAGES", EXIT_LOST
    elif counts["divergence"] or counts["replica_missing"] or counts["moved"]:
        verdict, code = "UNSAFE_REPLICAS", EXIT_UNSAFE
    else:
        verdict, code = "CLEAN", EXIT_CLEAN
    result = {
        "verdict": verdict,
        "exit_code": code,
        "acked_rows": ack_rows,
        "groups": len(masters),
        "replicas": len(replicas),
        "master_source": sources,
        "masters": {g: m.broker_id for g, m in sorted(masters.items())} if len(masters) <= 1000 else None,
        "problem_acks": n_problems,
        "counts": counts,
        "out": str(out_dir),
    }
    (out_dir / "verdict.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    log.info("audit_done", verdict=verdict, **counts)
    return result
