"""The ControllerService methods a Batch RPC may carry: every unary method but Batch itself,
with its request and reply classes. Derived from the service descriptor, so the server
(service.py) and the client (client.py) cannot disagree and a new unary RPC is batchable at once;
``decode_call`` turns one call of a Batch into its request message (or the reply refusing it)."""

from __future__ import annotations

from typing import Any

from autoswitch.controller.codes import Code
from google.protobuf.message import Message

from autoswitch.proto import controller_pb2 as pb


def _unary_methods() -> dict[str, tuple[type[Message], type[Message]]]:
    out: dict[str, tuple[type, type]] = {}
    for m in pb.DESCRIPTOR.services_by_name["ControllerService"].methods:
        if m.client_streaming or m.server_streaming or m.name == "Batch":
            continue
        out[m.name] = (getattr(pb, m.input_type.name), getattr(pb, m.output_type.name))
    return out


# method name -> (request class, reply class)
BATCHABLE: dict[str, tuple[type[Message], type[Message]]] = _unary_methods()


def decode_call(call: pb.BatchCall) -> Any:
    """A BatchCall's request message, or the BatchCallReply refusing it."""
    # Here, not at the top: the client imports BATCHABLE, and the server's modules would make
    # every broker import the controller's failover and Raft code at start.
    from autoswitch.controller.server.service_common import log_refused

    classes = BATCHABLE.get(call.method)
    if classes is None:
        log_refused("Batch", f"method {call.method[:64]!r} is not batchable")
        return pb.BatchCallReply(code=Code.CONTROLLER_MALFORMED_REQUEST,
                                 message=f"method {call.method[:64]!r} cannot be batched")
    try:
        return classes[0].FromString(call.request)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError and friends
        log_refused("Batch", "undecodable request", method=call.method[:64])
        return pb.BatchCallReply(code=Code.CONTROLLER_MALFORMED_REQUEST,
                                 message=f"{call.method} request does not decode: {type(e).__name__}")
