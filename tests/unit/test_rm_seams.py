"""The broker's seams match the real classes and the test fakes (so wiring cannot drift silently):
every method of the protocol exists, is async exactly when the protocol's is, and takes the same
parameters in the same order."""

from __future__ import annotations

import importlib
import inspect

import pytest
from autoswitch.broker.replicas.role_target import BrokerRoleTarget
from autoswitch.controller.api import BrokerControllerApi


def _methods(proto) -> dict[str, inspect.Signature]:
    return {n: inspect.signature(f) for n, f in vars(proto).items()
            if callable(f) and not n.startswith("_")}


def _is_async(f) -> bool:
    return inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f)


@pytest.mark.parametrize(
    "proto,module,cls",
    [
        (BrokerControllerApi, "autoswitch.controller.broker_client", "GrpcBrokerControllerApi"),
        (BrokerControllerApi, "tests.unit.test_rm_adapter", "FakeApi"),
        (BrokerRoleTarget, "autoswitch.broker.server", "Broker"),
        (BrokerRoleTarget, "tests.unit.test_rm_adapter", "FakeBroker"),
    ],
)
def test_implementation_satisfies_protocol(proto, module, cls):
    real = getattr(importlib.import_module(module), cls)
    methods = _methods(proto)
    assert methods, "the protocol lists no methods?"
    for name, want in methods.items():
        have = getattr(real, name, None)
        assert have is not None, f"{cls}.{name} missing"
        # an async generator protocol method is declared as a plain def returning AsyncIterator
        proto_async = _is_async(getattr(proto, name)) or "AsyncIterator" in str(want.return_annotation)
        assert _is_async(have) == proto_async, f"{cls}.{name}: async mismatch"
        want_params = [p for p in want.parameters if p != "self"]
        got_params = [p for p in inspect.signature(have).parameters if p != "self"]
        assert got_params == want_params, f"{cls}.{name}{inspect.signature(have)} vs protocol {want}"


def test_broker_has_the_attributes_the_protocol_declares():
    from autoswitch.broker.server import Broker

    for attr in BrokerRoleTarget.__annotations__:
        assert hasattr(Broker, attr) or attr in Broker.__init__.__code__.co_names, attr
