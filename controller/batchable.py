"""The ControllerService methods a Batch RPC may carry: every unary method but Batch itself,
with its request and reply classes. Derived from the service descriptor, so the server
(service.py) and the client (client.py) cannot disagree and a new unary RPC is batchable at once."""

from __future__ import annotations

from autoswitch.proto import controller_pb2 as pb


def _unary_methods() -> dict[str, tuple[type, type]]:
    out: dict[str, tuple[type, type]] = {}
    for m in pb.DESCRIPTOR.services_by_name["ControllerService"].methods:
        if m.client_streaming or m.server_streaming or m.name == "Batch":
            continue
        out[m.name] = (getattr(pb, m.input_type.name), getattr(pb, m.output_type.name))
    return out


# method name -> (request class, reply class)
BATCHABLE: dict[str, tuple[type, type]] = _unary_methods()
