"""The adapter's protocols match the real classes (so wiring cannot drift silently)."""

from __future__ import annotations

import inspect

import pytest
from autoswitch.broker.replicas_adapter import BrokerRoleTarget, ControllerApi


def _methods(proto) -> dict[str, inspect.Signature]:
    return {n: inspect.signature(f) for n, f in vars(proto).items()
            if callable(f) and not n.startswith("_")}


@pytest.mark.parametrize(
    "proto,module,cls",
    [
        (ControllerApi, "autoswitch.controller.client", "ControllerClient"),
        (BrokerRoleTarget, "autoswitch.broker.server", "Broker"),
    ],
)
def test_real_class_satisfies_protocol(proto, module, cls):
    import importlib

    real = getattr(importlib.import_module(module), cls)
    for name, want in _methods(proto).items():
        have = getattr(real, name, None)
        assert have is not None, f"{cls}.{name} missing"
        assert inspect.iscoroutinefunction(have) == inspect.iscoroutinefunction(getattr(proto, name)), name
        got = inspect.signature(have)
        # the adapter passes arguments by position: same names in the same order
        want_params = [p for p in want.parameters if p != "self"]
        got_params = [p for p in got.parameters if p != "self"]
        assert got_params[: len(want_params)] == want_params, f"{cls}.{name}{got} vs protocol {want}"
