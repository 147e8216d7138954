"""The controller's one call to a broker: the leader asks a master to hand its role to the group's
preferred master, or off a degraded master (broker ``TransferMaster``, the same graceful handover
an operator starts).
Authorized on the broker as role ``peer`` (the controller's certificate)."""

from __future__ import annotations

import grpc

from autoswitch.base.tls import TLSConfig, grpc_channel
from autoswitch.proto import broker_pb2 as bpb
from autoswitch.proto import broker_pb2_grpc as bpbg

# The RPC deadline is the handover's own timeout plus this much for the round trip and the election.
CALL_SLACK_S = 5.0


async def transfer_master(addr: str, tls: TLSConfig, to_broker_id: int, timeout_ms: int,
                          reason: str = "") -> tuple[bool, str]:
    """(handed over, why not). The broker keeps its role on any failure; nothing to undo here.
    ``reason``: why the controllers ask (the broker logs it; the election's audit records it)."""
    ch = grpc_channel(addr, tls)
    try:
        r = await bpbg.BrokerServiceStub(ch).TransferMaster(
            bpb.TransferMasterRequest(to_broker_id=to_broker_id, timeout_ms=timeout_ms, reason=reason[:128]),
            timeout=timeout_ms / 1000.0 + CALL_SLACK_S)
    except grpc.aio.AioRpcError as e:
        return False, f"{e.code().name}: {(e.details() or '')[:200]}"
    finally:
        await ch.close()
    if r.status != bpb.OK:
        return False, f"{bpb.Status.Name(r.status)}: {r.error_message[:200]}"
    return True, ""
