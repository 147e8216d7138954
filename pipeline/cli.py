"""`autoswitch pipeline ...`: audit, analyze, generate, export-log, export-rocketmq.

Registration is cheap; pyspark, pandas and pyarrow are imported inside the handlers.
"""

from __future__ import annotations

import time
from pathlib import Path

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.log import get_logger
from autoswitch.base.output import emit, fail
from autoswitch.base.tls import add_tls_args

log = get_logger("pipeline")

EXIT_INPUT_ERROR = 1


def register(sub, admin_sub) -> None:
    p = sub.add_parser("pipeline", help="durability audit and failover analytics (PySpark)")
    ps = p.add_subparsers(dest="pipeline_command", required=True, metavar="PIPELINE_COMMAND")

    a = ps.add_parser("audit", help="acked messages vs the final logs of every replica")
    a.add_argument("--acks", required=True, help="producer ack log: file or directory (.jsonl/.parquet)")
    logs = a.add_mutually_exclusive_group(required=True)
    logs.add_argument("--logs", help="directory of log-index, epochs and replica exports")
    logs.add_argument("--broker-data", action="append", metavar="DIR",
                      help="a broker's data directory (repeat for every replica): exported here, from a copy")
    _events_args(a, required=False)
    a.add_argument("--commits", default=None,
                   help="consumer commit ack log(s) (`consume --commit-log`): acked commits must not be lost")
    a.add_argument("--out", required=True, help="result directory (Parquet per category + verdict.json)")
    _spark_args(a)
    a.add_argument("--json", action="store_true", help="print the verdict as JSON")
    a.set_defaults(func=cmd_audit)

    z = ps.add_parser("analyze", help="failover timelines, time-to-elect, SyncStateSet churn, HTML report")
    _events_args(z, required=True)
    z.add_argument("--acks", default=None)
    z.add_argument("--out", required=True)
    z.add_argument("--flap-window-s", type=float, default=600.0,
                   help="window for counting SyncStateSet removals of one broker (default 600)")
    z.add_argument("--flap-min-removals", type=int, default=3,
                   help="removals within the window that make a broker flapping (default 3)")
    _spark_args(z)
    z.add_argument("--json", action="store_true")
    z.set_defaults(func=cmd_analyze)

    g = ps.add_parser("generate", help="seeded synthetic exports with planted faults and a manifest")
    g.add_argument("--groups", type=int, required=True)
    g.add_argument("--messages", type=int, required=True, help="acked messages in total (before retries)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", required=True)
    g.add_argument("--plant-losses", type=int, default=0)
    g.add_argument("--plant-divergences", type=int, default=0)
    g.add_argument("--plant-duplicates", type=int, default=0)
    g.add_argument("--chunk-rows", type=int, default=1_000_000, help="records per numpy chunk (memory bound)")
    g.add_argument("--format", choices=("parquet", "jsonl"), default="parquet")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_generate)

    e = ps.add_parser("export-log", help="export one stopped replica's log index, EpochFile and offsets")
    e.add_argument("--data-dir", required=True)
    e.add_argument("--group", required=True)
    e.add_argument("--broker-id", type=int, required=True)
    e.add_argument("--out", required=True, help="FILE.index.jsonl; FILE.epochs.jsonl and FILE.replica.jsonl go beside it")
    e.add_argument("--copy-first", action="store_true",
                   help="export from a temporary copy (opening a store runs crash recovery)")
    e.add_argument("--segment-bytes", type=int, default=None,
                   help="the broker's store segment size, when not the StoreConfig default")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=cmd_export_log)

    r = ps.add_parser("export-rocketmq",
                      help="export a stopped RocketMQ 5 broker's store (CommitLog, epoch file, confirm offset)")
    r.add_argument("--store", required=True, help="the broker's storePathRootDir")
    r.add_argument("--out", required=True, help="FILE.index.jsonl; FILE.epochs.jsonl and FILE.replica.jsonl go beside it")
    r.add_argument("--group", default="", help="default: the brokerName in its brokerIdentity file")
    r.add_argument("--broker-id", type=int, default=None, help="default: the brokerId in its brokerIdentity file")
    r.add_argument("--json", action="store_true")
    r.set_defaults(func=cmd_export_rocketmq)


def _events_args(p, required: bool) -> None:
    ev = p.add_mutually_exclusive_group(required=required)
    ev.add_argument("--events", help="controller applied-event history (events.jsonl; names the master)")
    ev.add_argument("--controller", help="HOST:PORT[,...]: fetch that history from the controllers (reader role)")
    add_tls_args(p)


def _inputs_from_cluster(args) -> None:
    """--broker-data and --controller: collect into <out>/inputs, then use them as --logs/--events."""
    from autoswitch.pipeline.collect import export_data_dirs, fetch_events

    from autoswitch.base.tls import tls_from_args

    where = Path(args.out) / "inputs"
    if getattr(args, "broker_data", None):
        export_data_dirs(args.broker_data, where / "logs")
        args.logs = str(where / "logs")
    if args.controller:
        where.mkdir(parents=True, exist_ok=True)
        fetch_events(args.controller, tls_from_args(args), where / "events.jsonl")
        args.events = str(where / "events.jsonl")


def _spark_args(p) -> None:
    p.add_argument("--master", default="local[*]", help="local[*] (default) or spark://HOST:PORT")
    p.add_argument("--shuffle-partitions", type=int, default=64)
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")


def _conf(args) -> dict[str, str]:
    out = {}
    for kv in args.conf:
        k, sep, v = kv.partition("=")
        if not sep:
            raise AutoswitchError(f"--conf wants KEY=VALUE, got {kv!r}")
        out[k] = v
    return out


def _fail(args, err: AutoswitchError) -> int:
    log.error("pipeline_failed", code=err.code, message=err.message)
    return fail(args, err, rc=EXIT_INPUT_ERROR)


def _session(args, app: str):
    from autoswitch.pipeline.session import build_session

    return build_session(args.master, app, args.shuffle_partitions, args.driver_memory, _conf(args))


def _java_error(e: Exception) -> AutoswitchError:
    from autoswitch.pipeline.errors import SparkJobFailed

    text = str(e).splitlines()
    return SparkJobFailed("Spark job failed: " + (text[0] if text else type(e).__name__)[:2000])


def cmd_audit(args) -> int:
    t0 = time.monotonic()
    try:
        from autoswitch.pipeline import inputs
        from autoswitch.pipeline.audit import run_audit
        from autoswitch.pipeline.session import StageProgress

        _inputs_from_cluster(args)
        acks_src = inputs.find_sources(args.acks, "acks")
        log_src = inputs.find_log_sources(args.logs)
        ev_src = inputs.find_sources(args.events, "events") if args.events else None
        commits_src = inputs.find_sources(args.commits, "commits") if args.commits else None
        spark = _session(args, "autoswitch-audit")
        try:
            with StageProgress(spark) as prog:
                result = audit_with(spark, acks_src, log_src, ev_src, Path(args.out), prog, run_audit, commits_src)
        finally:
            spark.stop()
    except AutoswitchError as e:
        return _fail(args, e)
    result["seconds"] = round(time.monotonic() - t0, 2)
    if args.json:
        emit(args, result)
    else:
        c = result["counts"]
        print(f"verdict {result['verdict']}: {result['acked_rows']} acked rows in {result['groups']} groups; "
              f"lost {c['lost']}, moved {c['moved']}, missing on replicas {c['replica_missing']}, "
              f"divergent records {c['divergence']}, duplicated msg_ids {c['duplicates']}; "
              f"consumer offsets lost {result['consumer_offsets']['lost']}, "
              f"moved backwards {result['consumer_offsets']['backwards']}; "
              f"results in {result['out']}, report {result['report']}")
    return result["exit_code"]


def audit_with(spark, acks_src, log_src, ev_src, out: Path, prog, run_audit, commits_src=None) -> dict:
    """Read the inputs and run the audit; Spark/Java failures become typed errors."""
    from autoswitch.pipeline import inputs

    try:
        acks = inputs.read(spark, acks_src)
        index = inputs.read(spark, log_src["index"])
        replica = inputs.read_rows(log_src["replica"])
        epochs = inputs.read_rows(log_src["epochs"])
        events = inputs.read_rows(ev_src) if ev_src else None
        offsets = inputs.read_rows(log_src["offsets"])
        commits = inputs.read_rows(commits_src) if commits_src else None
        return run_audit(spark, acks, index, replica, epochs, events, out, prog, offsets, commits)
    except AutoswitchError:
        raise
    except Exception as e:  # Py4JJavaError, AnalysisException: bad data or a broken cluster
        if _is_spark_failure(e):
            raise _java_error(e) from e
        raise


def _is_spark_failure(e: Exception) -> bool:
    """Errors raised by the JVM side (bad data, lost executors), not by our own Python."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException
    from pyspark.errors.exceptions.captured import CapturedException

    return isinstance(e, Py4JJavaError | AnalysisException | CapturedException)


def cmd_analyze(args) -> int:
    t0 = time.monotonic()
    try:
        from autoswitch.pipeline import inputs
        from autoswitch.pipeline.analyze import AnalyzeConfig, run_analyze
        from autoswitch.pipeline.session import StageProgress

        _inputs_from_cluster(args)
        ev_src = inputs.find_sources(args.events, "events")
        acks_src = inputs.find_sources(args.acks, "acks") if args.acks else None
        cfg = AnalyzeConfig(flap_window_ms=int(args.flap_window_s * 1000), flap_min_removals=args.flap_min_removals)
        spark = _session(args, "autoswitch-analyze")
        try:
            with StageProgress(spark) as prog:
                try:
                    events = inputs.read(spark, ev_src)
                    acks = inputs.read(spark, acks_src) if acks_src else None
                    summary = run_analyze(spark, events, acks, Path(args.out), cfg, prog)
                except AutoswitchError:
                    raise
                except Exception as e:
                    if _is_spark_failure(e):
                        raise _java_error(e) from e
                    raise
        finally:
            spark.stop()
    except AutoswitchError as e:
        return _fail(args, e)
    summary["seconds"] = round(time.monotonic() - t0, 2)
    if args.json:
        emit(args, summary)
    else:
        from autoswitch.pipeline.report import console_summary

        print(console_summary(summary))
    return 0


def cmd_generate(args) -> int:
    from autoswitch.pipeline.generate import generate

    try:
        m = generate(Path(args.out), args.groups, args.messages, args.seed, args.plant_losses,
                     args.plant_divergences, args.plant_duplicates, chunk_rows=args.chunk_rows, fmt=args.format)
    except (ValueError, RuntimeError) as e:
        return _fail(args, AutoswitchError(str(e)))
    brief = {k: m[k] for k in ("seed", "groups", "records", "acked_rows", "index_rows", "failovers", "seconds")}
    brief["planted"] = {k: len(v) for k, v in m["planted"].items()}
    brief["manifest"] = str(Path(args.out) / "manifest.json")
    emit(args, brief) if args.json else print(
          f"generated {brief['acked_rows']} acked rows, {brief['index_rows']} index rows, "
          f"{brief['failovers']} failovers in {brief['seconds']} s; manifest {brief['manifest']}")
    return 0


def cmd_export_rocketmq(args) -> int:
    try:
        from autoswitch.pipeline.rocketmq_store import export

        res = export(Path(args.store), Path(args.out), args.group, args.broker_id)
    except AutoswitchError as e:
        return _fail(args, e)
    emit(args, res) if args.json else print(
          f"exported {res['records']} records ({res['epoch_entries']} epochs) of {args.store} to {res['index']}")
    return 0


def cmd_export_log(args) -> int:
    try:
        from autoswitch.pipeline.exports import export_replica

        res = export_replica(Path(args.data_dir), args.group, args.broker_id, Path(args.out),
                             copy_first=args.copy_first, segment_bytes=args.segment_bytes)
    except AutoswitchError as e:
        return _fail(args, e)
    emit(args, res) if args.json else print(
          f"exported {res['records']} records of {args.group}/{args.broker_id} to {res['index']}")
    return 0
