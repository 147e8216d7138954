"""`autoswitch controller`, `autoswitch namesrv` and the controller admin commands.

Admin command names follow RocketMQ's mqadmin (getControllerMetaData -> get-controller-metadata).
Every admin command takes ``--controller HOST:PORT[,HOST:PORT...]`` (the client follows the
leader) and ``--json``; on failure it prints the typed error (JSON with --json) and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from autoswitch.base.output import emit, fail, fail_code
from autoswitch.base.tls import add_server_security_args, add_tls_args, tls_from_args


def register(sub, admin_sub) -> None:
    p = sub.add_parser("controller", help="run a controller node (standalone)")
    _node_args(p, required=True)
    p.set_defaults(func=_run_controller)

    p = sub.add_parser("recover-member", help="rejoin a controller whose Raft files were lost (replaced disk)")
    _node_args(p, required=True)
    p.add_argument("--timeout-s", type=float, default=5.0, help="per member, asking for its Raft term")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_recover_member)

    p = sub.add_parser("restore-member", help="make an empty data dir a member of a new controller cluster "
                                              "restored from `admin snapshot-save` output")
    _node_args(p, required=True)
    p.add_argument("--snapshot", required=True, help="the snapshot file")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_restore_member)

    p = sub.add_parser("namesrv", help="run a name server, optionally with an embedded controller node")
    p.add_argument("--listen", required=True, help="HOST:PORT of the name server (and embedded controller)")
    p.add_argument("--route-ttl-s", type=float, default=30.0, help="route expiry without re-registration")
    p.add_argument("--embed-controller", action="store_true", help="host a controller node in this process")
    p.add_argument("--controllers", default=None,
                   help="HOST:PORT,...: a standalone name server checks master routes against these controllers")
    _node_args(p, required=False)
    p.set_defaults(func=_run_namesrv)

    def admin(name: str, help_: str, func) -> argparse.ArgumentParser:
        a = admin_sub.add_parser(name, help=help_)
        a.add_argument("--controller", default=None,
                       help="HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_CONTROLLERS, or the profile's controllers)")
        a.add_argument("--json", action="store_true", help="machine-readable output")
        a.add_argument("--timeout-s", type=float, default=10.0)
        add_tls_args(a)
        a.set_defaults(func=lambda args: _admin(args, func))
        return a

    admin("get-controller-metadata", "leader, term and peers as seen by each controller", _get_metadata)
    a = admin("get-sync-state-set", "SyncStateSet and replica liveness of broker groups", _get_sss)
    a.add_argument("--group", "--broker-name", "-b", dest="broker_name", metavar="GROUP", action="append", default=[], help="group (repeatable; default all)")
    a = admin("cluster-list", "every broker group: master, MasterEpoch, SyncStateSet, replicas and their liveness",
              _cluster_list)
    a.add_argument("--brokers", action="store_true", help="one row per broker (mqadmin clusterList)")
    a.add_argument("--under-replicated", action="store_true",
                   help="only groups with no master or a replica out of the SyncStateSet")
    a.add_argument("--group", "--broker-name", "-b", dest="broker_name", metavar="GROUP", action="append", default=[],
                   help="only this group (repeatable; default all)")
    from autoswitch.controller import cli_operator, cli_rocketmq, cli_views

    admin("endpoint-health", "is each listed controller up, and does it know a leader (etcdctl endpoint health)",
          cli_views.endpoint_health)
    admin("member-list", "the controller members: id, address, voter or learner, leader (etcdctl member list)",
          cli_views.member_list)
    admin("ckquorum", "do a majority of the controller voters answer and agree on a leader (Sentinel CKQUORUM)",
          cli_views.ckquorum)
    a = admin("alarm-list", "the alerts that still stand: kind, group, since when, how often and why "
                            "(etcdctl alarm list)", cli_views.alarm_list)
    a.add_argument("--all", action="store_true", help="also the last cleared ones, with what ended each")
    a = admin("elect-master", "elect a master (designate one with --broker-id)", _elect_master)
    a.add_argument("--cluster-name", "-c", default="")
    a.add_argument("--group", "--broker-name", "-b", dest="broker_name", metavar="GROUP", required=True)
    a.add_argument("--broker-id", "-i", type=int, default=0, help="designated broker (0 = controller chooses)")
    a.add_argument("--dry-run", action="store_true",
                   help="say who would win now and why (every replica and the rule that ruled it out); change nothing")
    cli_operator.add_commands(admin)
    cli_rocketmq.add_commands(admin, admin_sub)
    admin("features", "the cluster's finalized feature level and the level and release each controller and "
                      "broker runs (kafka-features describe)", _features)
    a = admin("finalize-features", "raise (or lower, where records stay readable) the cluster's feature level "
                                   "once every member supports it (docs/compatibility.md)", _finalize_features)
    a.add_argument("--level", type=int, required=True, help="the feature level to finalize")
    a.add_argument("--dry-run", action="store_true", help="say whether it would be finalized; change nothing")
    a = admin("move-controller-leader", "hand Raft leadership to another controller (etcd move-leader)",
              _move_leader)
    a.add_argument("--to", required=True, help="the controller's node id")
    a.add_argument("--timeout-ms", type=int, default=0, help="0 = four election timeouts")
    a = admin("add-controller", "add a controller: a learner until its log caught up, then a voter", _add_controller)
    a.add_argument("--id", required=True, dest="node_id", help="the new member's node id")
    a.add_argument("--address", required=True, help="its client HOST:PORT (the --peers address it listens on)")
    a.add_argument("--raft-address", default="", help="its Raft HOST:PORT (its --raft-peers entry), if separate")
    a.add_argument("--no-wait", action="store_true", help="return once it is a learner (default: wait until voter)")
    a = admin("remove-controller", "remove a controller (voter or learner) from the Raft membership",
              _remove_controller)
    a.add_argument("--id", required=True, dest="node_id", help="the member's node id")
    a.set_defaults(address="", raft_address="")
    a = admin("snapshot-save", "write the leader's state-machine snapshot to a file (disaster recovery)",
              _snapshot_save)
    a.add_argument("--out", required=True, help="a new file to write (atomically, fsynced, mode 0600)")
    a.add_argument("--force", action="store_true", help="replace --out if it exists (a regular file only)")
    a = admin_sub.add_parser("snapshot-status", help="what a snapshot-save file holds, read offline "
                                                     "(etcdctl snapshot status)")
    a.add_argument("--file", required=True)
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.set_defaults(func=_snapshot_status)
    a = admin("clean-broker-metadata", "remove broker ids (or a whole group) from the controller", _clean)
    a.add_argument("--cluster-name", "-c", default="")
    a.add_argument("--group", "--broker-name", "-b", dest="broker_name", metavar="GROUP", required=True)
    a.add_argument("--broker-ids", default="", help="comma-separated ids; empty = the whole group")
    a.add_argument("--clean-living-broker", action="store_true")
    admin("get-controller-config", "runtime configuration of each listed controller", _get_config)
    a = admin("update-controller-config", "change runtime keys on each listed controller", _update_config)
    a.add_argument("--key", "-k", action="append", required=True, help="KEY=VALUE (repeatable)")
    a = admin("export-controller-events", "fetch the applied-event history (JSON lines)", _export_events)
    a.add_argument("--out", required=True, help="file to write ('-' = stdout)")
    a.add_argument("--from-line", type=int, default=0)


def _node_args(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--node-id", required=required)
    p.add_argument("--peers", required=required, help="ID=HOST:PORT,... (all controller nodes, incl. this one)")
    p.add_argument("--data-dir", required=required)
    p.add_argument("--raft-peers", default=None,
                   help="ID=HOST:PORT,... Raft listener of every node, apart from the client port (recommended)")
    p.add_argument("--config", default=None, help="TOML file ([controller] and [raft] tables)")
    p.add_argument("--remoting-listen", default=None,
                   help="HOST:PORT for RocketMQ's remoting protocol (RocketMQ brokers and mqadmin; docs/rocketmq.md)")
    p.add_argument("--remoting-peers", default=None,
                   help="ID=HOST:PORT,... every node's remoting address (with --remoting-listen, several nodes)")
    p.add_argument("--metrics-listen", default=None, help="HOST:PORT for /metrics, /healthz, /readyz (default off)")
    p.add_argument("--metrics-allow-remote", action="store_true", default=None,
                   help="let --metrics-listen be a non-loopback address (a container's published port)")
    p.add_argument("--join", action="store_true", default=None,
                   help="start empty and join a running cluster (after `admin add-controller`; needs --cluster-id)")
    p.add_argument("--cluster-id", default=None, help="the running cluster's id (get-controller-metadata shows it)")
    add_tls_args(p)
    add_server_security_args(p, "check roles on every call (needs TLS; docs/security.md)")


# ---------------- processes ----------------

def _load_config(args, listen: str | None = None):
    from autoswitch.controller import config as cfgmod

    tls = tls_from_args(args, server=True)
    return cfgmod.load(args.config, node_id=args.node_id, peers=args.peers, data_dir=args.data_dir,
                       listen=listen, raft_peers=args.raft_peers, tls_ca=tls.ca or None,
                       tls_cert=tls.cert or None, tls_key=tls.key or None, auth=args.auth,
                       auth_tokens_file=args.auth_tokens_file, allow_insecure=args.allow_insecure,
                       tls_accept_plaintext=args.tls_accept_plaintext, tls_dial_plaintext=args.tls_dial_plaintext,
                       metrics_listen=args.metrics_listen, metrics_allow_remote=args.metrics_allow_remote,
                       join=args.join, cluster_id=args.cluster_id, remoting_listen=args.remoting_listen,
                       remoting_peers=args.remoting_peers)


def _run_controller(args) -> int:
    from autoswitch.base.errors import AutoswitchError

    try:
        cfg = _load_config(args)
    except AutoswitchError as e:
        return fail(args, e, rc=2)
    from autoswitch.controller.server.process import run_forever

    return run_forever(cfg, namesrv=None)


def _recover_member(args) -> int:
    from autoswitch.controller.recover import recover_member

    from autoswitch.base.errors import AutoswitchError

    try:
        r = recover_member(_load_config(args), args.timeout_s)
    except AutoswitchError as e:
        return fail(args, e, rc=2)
    emit(args, {"recovered": r.node_id, "term": r.term, "answered": r.answered, "moved_aside": r.moved_aside})
    return 0


def _restore_member(args) -> int:
    from pathlib import Path

    from autoswitch.controller.snapshot_restore import restore_member

    from autoswitch.base.errors import AutoswitchError

    try:
        r = restore_member(_load_config(args), Path(args.snapshot))
    except AutoswitchError as e:
        return fail(args, e, rc=2)
    emit(args, {"restored": r.node_id, "index": r.index, "groups": r.groups})
    return 0


def _run_namesrv(args) -> int:
    from autoswitch.base.errors import AutoswitchError, ConfigError

    cfg = None
    if args.embed_controller:
        if not (args.node_id and args.peers and args.data_dir):
            return fail_code(args, "CONFIG_ERROR", "--embed-controller needs --node-id, --peers and --data-dir", rc=2)
        try:
            cfg = _load_config(args, listen=args.listen)
        except AutoswitchError as e:
            return fail(args, e, rc=2)
        if cfg.peers[cfg.node_id] != args.listen:
            # Peers reach this node at its --peers address: it must be the port we listen on.
            return fail_code(args, "CONFIG_ERROR", f"--peers gives {cfg.node_id} address {cfg.peers[cfg.node_id]} "
                             f"but --listen is {args.listen}", rc=2)
    if (args.remoting_listen or args.remoting_peers) and not args.embed_controller:
        return fail_code(args, "CONFIG_ERROR", "--remoting-listen needs --embed-controller: RocketMQ's name-server "
                         "requests are served beside an embedded controller (docs/rocketmq.md)", rc=2)
    controllers = [a.strip() for a in (args.controllers or "").split(",") if a.strip()]
    if controllers and args.embed_controller:
        return fail_code(args, "CONFIG_ERROR", "--controllers is for a standalone name server; an embedded one "
                         "checks routes against its own controller node", rc=2)
    if not 0 < args.route_ttl_s <= 300:
        return fail_code(args, "CONFIG_ERROR", "--route-ttl-s must be in (0, 300]", rc=2)
    import dataclasses

    from autoswitch.controller.server.process import NameServerSettings, run_forever

    from autoswitch.base.auth import AuthConfig, check_exposure
    from autoswitch.base.tls import check_own_identity

    try:
        if cfg is not None:
            ns_tls, ns_auth = cfg.tls, cfg.auth_config
        else:
            ns_tls = dataclasses.replace(tls_from_args(args, server=True),
                                         accept_plaintext=bool(args.tls_accept_plaintext),
                                         dial_plaintext=bool(args.tls_dial_plaintext)).validate(server=True)
            check_own_identity("namesrv", ns_tls.cert)
            ns_auth = AuthConfig(enabled=bool(args.auth), tokens_file=args.auth_tokens_file or "").validate()
            if ns_auth.enabled and not ns_tls.enabled:
                raise ConfigError("--auth needs TLS (--tls-ca, --tls-cert, --tls-key)", key="auth")
            if ns_auth.enabled and ns_tls.accept_plaintext:
                raise ConfigError("--auth with --tls-accept-plaintext: plaintext callers have no identity", key="auth")
            check_exposure(ns_tls.enabled and not ns_tls.accept_plaintext, ns_auth.enabled,
                           bool(args.allow_insecure), [args.listen])
            check_exposure(False, False, bool(args.allow_insecure or args.metrics_allow_remote),
                           [args.metrics_listen or ""])
    except AutoswitchError as e:
        return fail(args, e, rc=2)
    return run_forever(cfg, NameServerSettings(listen=args.listen, route_ttl_s=args.route_ttl_s, tls=ns_tls,
                                               auth=ns_auth, controllers=tuple(controllers),
                                               metrics_listen="" if cfg is not None else (args.metrics_listen or "")))


# ---------------- admin ----------------

def _admin(args, func) -> int:
    import asyncio

    from autoswitch.controller.client import ControllerClient

    from autoswitch.base.errors import AutoswitchError

    async def go() -> Any:
        from autoswitch.base.progress import with_progress

        # a command that waits (maintenance --wait-s) gets its wait on top of the call timeout
        budget = args.timeout_s + max(0.0, getattr(args, "wait_s", 0.0))
        async with ControllerClient(args.controller, deadline_s=args.timeout_s, tls=tls_from_args(args)) as client:
            return await with_progress(func(client, args), f"waiting for the controllers ({args.admin_command})",
                                       budget)

    try:
        out = asyncio.run(go())
    except AutoswitchError as e:
        # a bad profile, certificate file or flag value is a usage error like any other (exit 2)
        return fail(args, e, rc=2 if e.code == "CONFIG_ERROR" else 1)
    except ValueError as e:
        return fail_code(args, "BAD_ARGUMENT", str(e))
    emit(args, out)
    return 0


def replica_view(info) -> dict:
    """A group's ReplicaInfo as people read it: named columns, no protobuf paths (`--json` keeps
    every raw field: ``message_dict``; issue 64, item 4)."""
    return {"group": info.broker_name, "master": info.master_broker_id or None,
            "master_address": info.master_address or None, "master_epoch": info.master_epoch,
            "sync_state_set": list(info.sync_state_set), "sync_state_set_epoch": info.sync_state_set_epoch,
            "eligible": list(info.eligible_replicas), "preferred_master": info.preferred_master_broker_id or None,
            "maintenance": list(info.maintenance), "zone_preference": list(info.zone_preference)}


def info_out(args, info) -> dict:
    """``info`` for this command's output: every raw field with --json, the people's view without."""
    return message_dict(info) if getattr(args, "json", False) else replica_view(info)


def message_dict(m) -> dict:
    """Protobuf message -> JSON-able dict with every field, int64 kept as int (MessageToDict makes strings)."""
    out: dict[str, Any] = {}
    for f in m.DESCRIPTOR.fields:
        if f.name == "header":
            continue
        v = getattr(m, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            out[f.name] = dict(v)
        elif getattr(f, "is_repeated", None) if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED:
            out[f.name] = [message_dict(x) if f.message_type is not None else x for x in v]
        elif f.message_type is not None:
            out[f.name] = message_dict(v)
        else:
            out[f.name] = v
    return out


async def _get_metadata(client, args) -> Any:
    import asyncio

    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    async def one(addr: str) -> dict:
        try:
            return dict(address=addr, **message_dict(await client.call_node(addr, "GetMetaData", pb.GetMetaDataRequest())))
        except ControllerRpcError as e:
            return {"address": addr, "error": e.to_dict()}

    # every node at once: a dead machine costs its timeout once, not once per machine
    nodes = list(await asyncio.gather(*(one(a) for a in client.addresses)))
    if all("error" in n for n in nodes):
        raise ControllerRpcError(nodes[0]["error"]["reply_code"], "no controller answered", nodes=nodes)
    # Like kafka-metadata-quorum describe --replication: how far each member's state machine is
    # behind the highest commit index any member reports (the leader's, when it answered).
    top = max((int(n.get("commit_index", 0)) for n in nodes if "error" not in n), default=0)
    for n in nodes:
        if "error" not in n:
            n["lag"] = max(0, top - int(n.get("applied_index", 0)))
    # the membership as the node with the newest configuration sees it (the leader, once it applied)
    best = max((n for n in nodes if "error" not in n), key=lambda n: int(n.get("config_index", 0)))
    members = best.get("peers", [])
    return {"nodes": nodes, "cluster_id": best.get("cluster_id", ""),
            "voters": sorted(p["node_id"] for p in members if p.get("role", "voter") == "voter"),
            "learners": sorted(p["node_id"] for p in members if p.get("role") == "learner"), "commit_index": top}


async def _change(client, args, action: str) -> dict:
    from autoswitch.proto import controller_pb2 as pb

    r = await client.call("ChangeMembership", pb.ChangeMembershipRequest(
        action=action, node_id=args.node_id, address=args.address, raft_address=args.raft_address))
    return {"cluster_id": r.cluster_id, "config_index": r.config_index,
            "voters": sorted(m.node_id for m in r.members if m.role == "voter"),
            "learners": sorted(m.node_id for m in r.members if m.role == "learner"),
            "members": [{"node_id": m.node_id, "address": m.address, "role": m.role} for m in r.members]}


async def _add_controller(client, args) -> Any:
    import asyncio

    from autoswitch.base.errors import AutoswitchError

    out = await _change(client, args, "add")
    out["join_with"] = f"--join --cluster-id {out['cluster_id']}"
    if args.no_wait:
        return out
    deadline = asyncio.get_running_loop().time() + args.timeout_s
    while args.node_id not in out["voters"]:
        if asyncio.get_running_loop().time() > deadline:
            raise AutoswitchError(f"{args.node_id} is still a learner after {args.timeout_s} s (is it running with "
                                  f"{out['join_with']} and reachable at {args.address}?)", **out)
        await asyncio.sleep(0.2)       # the leader promotes it once its log caught up
        md = await _get_metadata(client, args)
        if args.node_id not in md["voters"] + md["learners"]:
            raise AutoswitchError(f"{args.node_id} is no longer a member (removed meanwhile?)")
        out.update(voters=md["voters"], learners=md["learners"])
        # one view: the member table says the same as the voter and learner lists
        for m in out["members"]:
            m["role"] = "voter" if m["node_id"] in md["voters"] else "learner"
        out["config_index"] = max([out["config_index"], *(int(n.get("config_index", 0)) for n in md["nodes"]
                                                         if "error" not in n)])
    return out


async def _remove_controller(client, args) -> Any:
    return await _change(client, args, "remove")


async def _get_sss(client, args) -> Any:
    from autoswitch.base.errors import NotFound

    groups = await client.get_sync_state_data(args.broker_name)
    missing = sorted(set(args.broker_name) - {g.replica_info.broker_name for g in groups})
    if missing:
        raise NotFound(f"unknown broker groups: {', '.join(missing)}", groups=missing)
    if args.json:
        return {"groups": [message_dict(g) for g in groups]}
    return {"groups": [{**replica_view(g.replica_info), "members": [
        {"broker_id": m.broker_id, "address": m.address, "alive": m.alive, "in_sync": m.in_sync,
         "max_offset": m.max_offset} for m in g.members]} for g in groups]}


async def _elect_master(client, args) -> Any:
    if args.dry_run:
        from autoswitch.controller import cli_operator

        return await cli_operator.elect_dry_run(client, args)
    info = await client.elect_master(args.cluster_name, args.broker_name, args.broker_id,
                                     designate=args.broker_id > 0)
    if args.json:
        return {"replica_info": message_dict(info)}
    return {"summary": f"{info.broker_name}: master broker {info.master_broker_id} at MasterEpoch {info.master_epoch}",
            **replica_view(info)}


async def _cluster_list(client, args) -> Any:
    from autoswitch.controller.api import group_traffic, rate_or_none, topic_totals
    from autoswitch.controller.failover.liveness import health_word

    rows: list[dict[str, Any]] = []
    heard: list[tuple[bool, Any]] = []
    groups = [g for g in await client.get_sync_state_data(tuple(args.broker_name))
              if not args.broker_name or g.replica_info.broker_name in args.broker_name]
    missing = sorted(set(args.broker_name) - {g.replica_info.broker_name for g in groups})
    if missing:
        from autoswitch.base.errors import NotFound

        raise NotFound(f"the controllers know no group {', '.join(repr(x) for x in missing)}")
    for g in groups:
        info = g.replica_info
        if args.under_replicated and info.master_broker_id and {m.broker_id for m in g.members} <= set(
                info.sync_state_set):
            continue
        rows.append({"cluster": info.cluster_name, "group": info.broker_name, "master": info.master_broker_id or None,
                     "master_address": info.master_address or None, "master_epoch": info.master_epoch,
                     "sync_state_set": list(info.sync_state_set), "maintenance": list(info.maintenance),
                     "replicas": [{"broker_id": m.broker_id, "address": m.address, "zone": m.zone, "alive": m.alive,
                                   "in_sync": m.in_sync, "max_offset": m.max_offset,
                                   "health": health_word(m.alive, m.diverged, m.degraded_reasons),
                                   "append_ms": round(m.append_ms, 1), "fsync_ms": round(m.fsync_ms, 1),
                                   "loop_lag_ms": round(m.loop_lag_ms, 1),
                                   "produce_per_s": rate_or_none(m.produce_per_s) if m.alive else None,
                                   "consume_per_s": rate_or_none(m.consume_per_s) if m.alive else None}
                                  for m in g.members]})
        # the group's traffic: what its master acknowledged, what all its replicas served
        rows[-1]["produce_per_s"], rows[-1]["consume_per_s"] = group_traffic(g.members, info.master_broker_id)
        heard.extend((m.broker_id == info.master_broker_id, m.topic_rates) for m in g.members if m.alive)
    if args.brokers:
        # mqadmin clusterList: one row per broker
        return {"brokers": [{"cluster": r["cluster"], "group": r["group"], "broker_id": m["broker_id"],
                             "address": m["address"],
                             "role": "master" if m["broker_id"] == r["master"] else "slave",
                             "maintenance": m["broker_id"] in r["maintenance"],
                             "master_epoch": r["master_epoch"], "alive": m["alive"], "in_sync": m["in_sync"],
                             "max_offset": m["max_offset"], "health": m["health"],
                             "produce_per_s": m["produce_per_s"], "consume_per_s": m["consume_per_s"]}
                            for r in rows for m in r["replicas"]]}
    # per topic over every group (the busiest 16 of each replica, as its heartbeat names them)
    return {"groups": rows, "topics": topic_totals(heard)}


def _features_view(r: Any) -> dict:
    return {"finalized": r.finalized, "previous": r.previous, "supported_by_leader": r.supported_here,
            "members": [{"member": x.name, "kind": x.kind, "supported": x.supported or "not heard",
                         "version": x.version} for x in r.members], "behind": list(r.behind)}


async def _features(client, args) -> Any:
    from autoswitch.proto import controller_pb2 as pb

    return _features_view(await client.call("FinalizeFeatures", pb.FinalizeFeaturesRequest(level=0)))


async def _finalize_features(client, args) -> Any:
    from autoswitch.controller.codes import Code, ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    try:
        r = await client.call("FinalizeFeatures", pb.FinalizeFeaturesRequest(level=args.level, dry_run=args.dry_run))
    except ControllerRpcError as e:
        if e.reply_code != Code.CONTROLLER_FEATURE_REFUSED:
            raise
        # the refusal names who is behind; the table shows every member's level beside it
        view = _features_view(await client.call("FinalizeFeatures", pb.FinalizeFeaturesRequest(level=0)))
        raise ControllerRpcError(e.reply_code, e.message, members=view["members"]) from None
    return {**_features_view(r), "message": r.header.message, "dry_run": args.dry_run}


async def _move_leader(client, args) -> Any:
    from autoswitch.proto import controller_pb2 as pb

    r = await client.call("MoveLeader", pb.MoveLeaderRequest(to_node_id=args.to, timeout_ms=args.timeout_ms))
    return {"leader_id": r.leader_id, "raft_term": r.raft_term}


async def _snapshot_save(client, args) -> Any:
    from pathlib import Path

    from autoswitch.controller.snapshot_restore import save_snapshot_file

    from autoswitch.proto import controller_pb2 as pb

    r = await client.call("SaveSnapshot", pb.SaveSnapshotRequest())
    index, groups = save_snapshot_file(Path(args.out), r.snapshot, force=args.force)
    return {"file": args.out, "bytes": len(r.snapshot), "applied_index": index, "groups": groups}


def _snapshot_status(args) -> int:
    from pathlib import Path

    from autoswitch.controller.snapshot_restore import snapshot_status

    from autoswitch.base.errors import AutoswitchError

    try:
        out = snapshot_status(Path(args.file))
    except AutoswitchError as e:
        return fail(args, e)
    emit(args, out)
    return 0


async def _clean(client, args) -> Any:
    ids = [int(x) for x in args.broker_ids.split(",") if x.strip()]
    await client.clean_broker_data(args.cluster_name, args.broker_name, ids, args.clean_living_broker)
    return {"cleaned": {"broker_name": args.broker_name, "broker_ids": ids}}


async def _get_config(client, args) -> Any:
    from autoswitch.proto import controller_pb2 as pb

    out = {}
    for addr in client.addresses:
        out[addr] = dict(sorted((await client.call_node(addr, "GetControllerConfig",
                                                         pb.GetControllerConfigRequest())).config.items()))
    return {"config": out}


async def _update_config(client, args) -> Any:
    """Replicated keys: once, through the leader (Raft). Node-local keys: on every listed node."""
    from autoswitch.controller.config import RUNTIME_KEYS

    from autoswitch.proto import controller_pb2 as pb

    changes = {}
    for kv in args.key:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise ValueError(f"--key expects KEY=VALUE, got {kv!r}")
        changes[k] = v
    replicated = {k: v for k, v in changes.items() if k not in RUNTIME_KEYS}
    local = {k: v for k, v in changes.items() if k in RUNTIME_KEYS}
    out: dict[str, Any] = {}
    if replicated:
        r = await client.call("UpdateControllerConfig", pb.UpdateControllerConfigRequest(config=replicated))
        out["replicated"] = dict(r.config)
    if local:
        out["local"] = {}
        for addr in client.addresses:
            r = await client.call_node(addr, "UpdateControllerConfig", pb.UpdateControllerConfigRequest(config=local))
            out["local"][addr] = dict(r.config)
    return {"updated": out}


async def _export_events(client, args) -> Any:
    from autoswitch.proto import controller_pb2 as pb

    lines: list[str] = []
    nxt = args.from_line
    for _ in range(100_000):  # bounded: at most 100k pages
        # Every node keeps its own full history: read the first address, no leader needed.
        r = await client.call_node(client.addresses[0], "ExportEvents",
                                   pb.ExportEventsRequest(from_line=nxt, max_lines=5000))
        lines.extend(r.lines)
        nxt = r.next_line
        if r.eof:
            break
    data = "".join(line + "\n" for line in lines)
    if args.out == "-":
        sys.stdout.write(data) if not args.json else None
    else:
        with open(args.out, "w") as f:
            f.write(data)
    return {"lines": len(lines), "out": args.out, "next_line": nxt}
