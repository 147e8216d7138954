"""The durability audit: acknowledged writes against the final logs of every replica.

Definitions (docs/pipeline.md has the long form):
- lost: an acked (group, msg_id) that is absent from the current master's log;
- lost_by_operator: the same, acknowledged before an operator's guided unclean recovery of its
  group (`admin unclean-recover --confirm`: an unclean ElectMaster whose reason carries the
  plan's token) at a lower MasterEpoch than that election: the operator chose to lose it;
- moved: an acked msg_id present in the master's log, but not at the acked phy_offset;
- replica_missing: an acked msg_id absent from a replica although the acked offset is below
  that replica's confirmOffset (and at/after its min_offset);
- divergence: a record of a replica, wholly below min(its confirmOffset, the master's), that
  differs from the master's record at the same phy_offset (crc, msg_id or size), or that sits
  at an offset where the master has no record;
- duplicate: a msg_id at several offsets of the master's log (producer retries).

Two shuffles of the data, whatever the size: acks and every index on (group, msg_id) (lost,
moved, missing, duplicates), and the index on (group, phy_offset) with fixed-size fingerprints
(divergence). The rare keys and offsets that need details are broadcast into further scans.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from autoswitch.pipeline.audit_report import SORT_KEYS, render_audit_html
from autoswitch.pipeline.masters import MasterChoice, Replica, choose_masters
from autoswitch.pipeline.report import MAX_TABLE_ROWS

from autoswitch.base.log import get_logger

log = get_logger("pipeline")

BROADCAST_KEYS_LIMIT = 2_000_000   # keys needing details, broadcast below this
CATEGORIES = ("lost", "lost_by_operator", "moved", "replica_missing", "divergence", "duplicates")
MAX_MASK_BROKER_ID = 62          # holders are a bit mask of brokerIds 0..62; above that, a set

EXIT_CLEAN = 0
EXIT_LOST = 2
EXIT_UNSAFE = 3   # nothing lost at the master, but a replica diverges, misses or moved data
EXIT_OPERATOR = 4  # acked messages lost only by an operator's unclean recovery (they chose it)
RECOVERY_MARK = ":recovery="    # in an operator's unclean election's reason (controller/state/statemachine.py)


def operator_recoveries(event_rows: list[dict] | None) -> dict[str, int]:
    """group -> the MasterEpoch of its last operator's unclean recovery (from controller events)."""
    out: dict[str, int] = {}
    for e in event_rows or ():
        if e.get("event") == "ElectMaster" and e.get("unclean") and RECOVERY_MARK in (e.get("reason") or ""):
            out[e["group"]] = max(out.get(e["group"], 0), int(e["master_epoch"]))
    return out


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
            if e["event"] in ("ElectMaster", "NoMaster", "ImportGroup"):    # the events that name a master
                if e["group"] not in last or e["index"] > last[e["group"]][0]:
                    last[e["group"]] = (e["index"], e["master_broker_id"])
        event_master = {g: m for g, (_, m) in last.items()}
    return choose_masters(replicas, event_master), replicas


def run_audit(spark, acks, index, replica_rows: list[dict], epoch_rows: list[dict],
              event_rows: list[dict] | None, out_dir: Path, progress,
              offset_rows: list[dict] | None = None, commit_rows: list[dict] | None = None) -> dict:
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

    # ---- acks and every replica's index, one hash aggregation on (group, msg_id) ----
    # acks and index rows are unioned and aggregated with fixed-size buffers (no sort-merge
    # join, no strings in the buffers); only the rare keys that need a look get details.
    progress.set_phase("audit: acked messages and duplicates")
    mid = F.broadcast(masters_df.select("group", "master_id"))
    u = (acks.select("group", "msg_id", F.col("phy_offset").alias("off"), F.lit(None).cast("long").alias("b"),
                     F.lit(True).alias("is_ack"))
         .unionByName(index.select("group", "msg_id", F.col("phy_offset").alias("off"), F.col("broker_id").alias("b"),
                                   F.lit(False).alias("is_ack")))
         .join(mid, "group", "left")
         .withColumn("is_m", F.coalesce((~F.col("is_ack")) & (F.col("b") == F.col("master_id")), F.lit(False)))
         .drop("master_id")
         # Shuffle the rows, then aggregate: nearly every key is distinct within a scan task, so a
         # map-side partial aggregation hashes every row for nothing, outgrows its memory and spills
         # (bench/results/audit.md, session 30: -11 s of 67 at 5M rows).
         .repartition("group", "msg_id"))
    is_m = F.col("is_m")
    if use_mask:
        holders = F.expr("bit_or(if(is_ack, 0L, shiftleft(1L, cast(b as int))))")
        held = "(coalesce(holders, 0L) & shiftleft(1L, cast(r.broker_id as int))) != 0"
    else:
        holders = F.collect_set(F.when(~F.col("is_ack"), F.col("b")))
        held = "array_contains(coalesce(holders, array()), r.broker_id)"
    k = u.groupBy("group", "msg_id").agg(
        F.sum(F.col("is_ack").cast("long")).alias("n_acks"),
        F.min(F.when(F.col("is_ack"), F.col("off"))).alias("ack_min"),
        F.max(F.when(F.col("is_ack"), F.col("off"))).alias("ack_max"),
        F.sum(is_m.cast("long")).alias("m_copies"),
        F.min(F.when(is_m, F.col("off"))).alias("m_min"),
        F.max(F.when(is_m, F.col("off"))).alias("m_max"),
        holders.alias("holders"))
    # a replica misses an acked message when an acked offset is below its confirmOffset (the
    # earliest ack decides at key level; rows are re-checked one by one below)
    missing_any = F.expr(
        "size(coalesce(filter(replicas, r -> ack_min < r.confirm_offset and ack_min >= r.min_offset "
        f"and not ({held})), array())) > 0")
    clean_ack = (F.col("m_copies") == 1) & (F.col("ack_min") == F.col("ack_max")) & (F.col("m_min") == F.col("ack_min"))
    keys = (k.join(F.broadcast(reps_df), "group", "left")
            .filter(((F.col("n_acks") > 0) & (~F.coalesce(clean_ack, F.lit(False)) | missing_any))
                    | (F.col("m_copies") > 1))
            .select("group", "msg_id", "n_acks", "m_copies", "m_min", "m_max", "holders")
            .persist(StorageLevel.MEMORY_AND_DISK))
    n_keys = keys.count()
    kb = F.broadcast(keys) if n_keys <= BROADCAST_KEYS_LIMIT else keys
    log.info("audit_keys", keys=n_keys)

    # ---- divergence below confirmOffset, fingerprints first ----
    progress.set_phase("audit: divergence")
    bounded = F.col("phy_offset") + F.col("size") <= F.col("bound")
    on_master = F.col("broker_id") == F.col("master_id")
    r = (index.join(F.broadcast(flat_df), ["group", "broker_id"]).filter(bounded)
         .withColumn("is_master", on_master)
         .withColumn("idh", F.xxhash64("msg_id")))
    on_m, on_s = F.col("is_master"), ~F.col("is_master")
    g = r.repartition("group", "phy_offset").groupBy("group", "phy_offset").agg(    # as above
        F.max(F.when(on_m, F.col("crc"))).alias("m_crc"), F.max(F.when(on_m, F.col("size"))).alias("m_size"),
        F.max(F.when(on_m, F.col("idh"))).alias("m_idh"),
        F.min(F.when(on_s, F.col("crc"))).alias("s_crc0"), F.max(F.when(on_s, F.col("crc"))).alias("s_crc1"),
        F.min(F.when(on_s, F.col("size"))).alias("s_size0"), F.max(F.when(on_s, F.col("size"))).alias("s_size1"),
        F.min(F.when(on_s, F.col("idh"))).alias("s_idh0"), F.max(F.when(on_s, F.col("idh"))).alias("s_idh1"),
        F.sum(F.when(on_m, 1).otherwise(0)).alias("m_n"))
    differs = F.lit(False)
    for c in ("crc", "size", "idh"):
        differs = differs | (F.col(f"s_{c}0") != F.col(f"m_{c}")) | (F.col(f"s_{c}1") != F.col(f"m_{c}"))
    suspects = (g.filter(F.col("s_crc0").isNotNull() & ((F.col("m_n") == 0) | differs)).select("group", "phy_offset")
                .persist(StorageLevel.MEMORY_AND_DISK))
    n_suspects = suspects.count()
    log.info("audit_suspect_offsets", offsets=n_suspects)
    sb = F.broadcast(suspects) if n_suspects <= BROADCAST_KEYS_LIMIT else suspects

    # ---- details, for the flagged keys and the suspect offsets only ----
    # Both are rare: one more scan of the index picks their records out (broadcast, no shuffle of
    # the index), cached because several results read them.
    progress.set_phase("audit: details")
    picked = (index.join(mid, "group", "left")
              .join(F.broadcast(flat_df.select("group", "broker_id", "bound")), ["group", "broker_id"], "left")
              .join(kb.select("group", "msg_id", F.lit(True).alias("_key")), ["group", "msg_id"], "left")
              .join(sb.select("group", "phy_offset", F.lit(True).alias("_suspect")), ["group", "phy_offset"], "left")
              .filter(F.col("_key").isNotNull() | F.col("_suspect").isNotNull())
              .persist(StorageLevel.MEMORY_AND_DISK))
    m_rows = picked.filter(F.col("_key").isNotNull() & on_master).select("group", "msg_id", "phy_offset")
    at = picked.filter(F.col("_suspect").isNotNull() & bounded).withColumn("is_master", on_master)
    a = (acks.join(kb, ["group", "msg_id"])
         .select("group", "msg_id", F.col("phy_offset").alias("acked_offset"), F.col("broker_id").alias("acked_by"),
                 "epoch", "ack_ts_ms", "topic", "queue_offset", "m_copies", "m_min", "m_max", "holders")
         .join(mid, "group", "left")
         .join(m_rows.select("group", "msg_id", F.col("phy_offset").alias("acked_offset"),
                             F.lit(True).alias("at_offset")).distinct(),
               ["group", "msg_id", "acked_offset"], "left")
         .join(F.broadcast(reps_df), "group", "left")
         .withColumn("missing_on", F.expr(
             "coalesce(transform(filter(replicas, r -> acked_offset < r.confirm_offset "
             f"and acked_offset >= r.min_offset and not ({held})), r -> r.broker_id), array())"))
         .drop("replicas")
         .persist(StorageLevel.MEMORY_AND_DISK))
    # materialise the two caches now, one scan each; otherwise the branches of the tally job
    # below may each recompute them before the cache is filled
    n_picked, n_a = picked.count(), a.count()
    log.info("audit_details", index_rows=n_picked, ack_rows=n_a)
    base_cols = ["group", "msg_id", "acked_offset", "acked_by", "epoch", "ack_ts_ms", "topic",
                 "queue_offset", "master_id"]
    lost = a.filter(F.col("m_copies") == 0).select(*base_cols)
    recoveries = operator_recoveries(event_rows)
    if recoveries:
        rec_df = F.broadcast(spark.createDataFrame(list(recoveries.items()), "group string, recovery_epoch long"))
        tagged = lost.join(rec_df, "group", "left")
        chosen = F.col("recovery_epoch").isNotNull() & (F.col("epoch") < F.col("recovery_epoch"))
        lost_by_operator = tagged.filter(chosen).select(*base_cols, "recovery_epoch")
        lost = tagged.filter(~chosen).select(*base_cols)
    else:
        lost_by_operator = lost.limit(0).withColumn("recovery_epoch", F.lit(None).cast("long"))
    moved = a.filter((F.col("m_copies") > 0) & F.col("at_offset").isNull()).select(
        *base_cols, F.col("m_min").alias("found_offset_min"), F.col("m_max").alias("found_offset_max"),
        F.col("m_copies").alias("found_copies"))
    rmiss = a.select(*base_cols, F.explode("missing_on").alias("broker_id"))
    dups = (m_rows.join(kb.filter(F.col("m_copies") > 1).select("group", "msg_id"), ["group", "msg_id"])
            .groupBy("group", "msg_id")
            .agg(F.count("*").alias("copies"), F.array_sort(F.collect_list("phy_offset")).alias("offsets")))
    problems = a.filter((F.col("m_copies") == 0) | F.col("at_offset").isNull() | (F.size("missing_on") > 0))

    mv = at.filter(on_m).select("group", "phy_offset", F.col("crc").alias("master_crc"),
                             F.col("msg_id").alias("master_msg_id"), F.col("size").alias("master_size"))
    div = (at.filter(on_s).join(mv, ["group", "phy_offset"], "left")
           .withColumn("kind", F.when(F.col("master_crc").isNull(), "only_on_replica")
                       .when(F.col("msg_id") != F.col("master_msg_id"), "msg_id_mismatch")
                       .when(F.col("crc") != F.col("master_crc"), "crc_mismatch")
                       .when(F.col("size") != F.col("master_size"), "size_mismatch"))
           .filter(F.col("kind").isNotNull())
           .select("group", "broker_id", "phy_offset", "kind", "size", "crc", "msg_id", "master_id",
                   "master_crc", "master_msg_id", "master_size", "bound"))

    progress.set_phase("audit: writing results")
    frames = {"lost": lost, "lost_by_operator": lost_by_operator, "moved": moved, "replica_missing": rmiss, "divergence": div, "duplicates": dups}
    # One job computes and caches every (small) result and counts them; the writes read the cache.
    frames = {k: v.persist(StorageLevel.MEMORY_AND_DISK) for k, v in frames.items()}
    tallies = [df.groupBy().count().withColumn("category", F.lit(name))
               for name, df in [*frames.items(), ("_problems", problems), ("_acks", acks)]]
    tally = functools.reduce(lambda a, b: a.unionByName(b), tallies)
    counts = {r["category"]: r["count"] for r in tally.collect()}
    n_problems, ack_rows = counts.pop("_problems"), counts.pop("_acks")
    # the report's tables: each category's first rows, read from the cache (small results)
    first_rows = {name: [row.asDict() for row in df.orderBy(*SORT_KEYS[name]).limit(MAX_TABLE_ROWS).collect()]
                  for name, df in frames.items() if counts[name]}
    for name, df in frames.items():
        df.coalesce(1).write.mode("overwrite").parquet(str(out_dir / name))
        df.unpersist()
    for df in (a, picked, keys, suspects):
        df.unpersist()

    from autoswitch.pipeline.offsets_audit import audit_offsets

    progress.set_phase("audit: consumer offsets")
    offsets = audit_offsets({g: m.broker_id for g, m in masters.items()}, offset_rows or [], commit_rows)
    (out_dir / "consumer_offsets.json").write_text(json.dumps(offsets, indent=1, sort_keys=True) + "\n")
    off_counts = {"lost": offsets["offsets_lost"], "backwards": offsets["offsets_backwards"],
                  "reset_by_operator": offsets["offsets_reset_by_operator"], "keys": offsets["keys"]}

    sources: dict[str, int] = {}
    for mc in masters.values():
        sources[mc.source] = sources.get(mc.source, 0) + 1
    if counts["lost"]:
        verdict, code = "LOST_ACKED_MESSAGES", EXIT_LOST
    elif off_counts["lost"]:
        verdict, code = "LOST_COMMITTED_OFFSETS", EXIT_LOST
    elif counts["lost_by_operator"]:
        verdict, code = "LOST_BY_OPERATOR_DECISION", EXIT_OPERATOR
    elif counts["divergence"] or counts["replica_missing"] or counts["moved"] or off_counts["backwards"]:
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
        "consumer_offsets": off_counts,
        "out": str(out_dir),
        "report": str(out_dir / "report.html"),
    }
    (out_dir / "report.html").write_text(render_audit_html(result, first_rows))
    (out_dir / "verdict.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    log.info("audit_done", verdict=verdict, **counts)
    return result
