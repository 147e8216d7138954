"""The simulators call the rules production runs, never a copy (issue 60 item 1, issue 61): read
on the source, so a simulator that composes its own lease grant again fails here before a
review finds it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEASE_SIMULATORS = ("tests/sim/data_sim.py", "tests/sim/lease_sim.py")


def _tree(rel: str) -> ast.Module:
    return ast.parse((ROOT / rel).read_text())


def _imports(tree: ast.Module) -> set[tuple[str, str]]:
    return {(n.module or "", a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def _called(tree: ast.Module) -> set[str]:
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            out.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "")
    return out


@pytest.mark.parametrize("rel", ["controller/server/liveness_desk.py", *LEASE_SIMULATORS])
def test_every_lease_grant_is_the_one_rule(rel):
    tree = _tree(rel)
    assert ("autoswitch.controller.failover.lease", "lease_verdict") in _imports(tree)
    called = _called(tree)
    assert "lease_verdict" in called
    # the pieces of the rule are not composed by hand next to it
    pieces = {"grants_lease", "membership_refusal", "lease_quorum_ok"}
    assert not called & pieces, called & pieces


def test_no_lease_rule_is_defined_outside_its_module():
    """lease_quorum_ok, membership_refusal and lease_verdict have one definition."""
    names = {"lease_quorum_ok", "membership_refusal", "lease_verdict"}
    found: dict[str, list[str]] = {}
    for folder in ("controller", "broker", "tests/sim"):
        for path in (ROOT / folder).rglob("*.py"):
            for n in ast.walk(ast.parse(path.read_text())):
                if isinstance(n, ast.FunctionDef) and n.name in names:
                    found.setdefault(n.name, []).append(str(path.relative_to(ROOT)))
    assert found == {k: ["controller/failover/lease.py"] for k in names}, found


@pytest.mark.parametrize("rel", ["controller/server/liveness_desk.py", "tests/sim/data_sim.py"])
def test_every_registration_is_the_one_rule(rel):
    """Who may register a brokerId (cloned and restored directories): controller/failover/takeover.py."""
    tree = _tree(rel)
    assert ("autoswitch.controller.failover.takeover", "registration_verdict") in _imports(tree)
    called = _called(tree)
    assert "registration_verdict" in called
    assert "follows_registered" not in called, "the rule's pieces are not composed again beside it"


def test_the_registration_rule_has_one_definition():
    found = [str(p.relative_to(ROOT)) for folder in ("controller", "broker", "tests/sim")
             for p in (ROOT / folder).rglob("*.py")
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.FunctionDef) and n.name == "registration_verdict"]
    assert found == ["controller/failover/takeover.py"]


def test_a_brokers_start_reads_the_real_run_marker():
    """The resume/clean decision's input is the real RunMarker on the simulated disk: the driver
    arms it at every start and marks registration and clean stops, where the adapter does."""
    driver, sim = _tree("tests/sim/rm_driver.py"), _tree("tests/sim/data_sim.py")
    assert ("autoswitch.broker.replicas.run_marker", "RunMarker") in _imports(driver)
    assert {"arm", "registered"} <= _called(driver)
    assert "clean_stop" in _called(sim)
    assert not [n for n in ast.walk(sim) if isinstance(n, ast.Attribute) and n.attr == "intact"], \
        "no hand-kept intact flag beside the marker and the core"


@pytest.mark.parametrize("rel", ["ha/io/master.py", "tests/sim/data_sim.py"])
def test_every_sync_state_set_expansion_is_the_one_rule(rel):
    """Which replicas a SyncStateSet expansion may add (the registered process of each id):
    ha/sync_state.py, called by the HA master and the data simulator alike."""
    tree = _tree(rel)
    assert ("autoswitch.ha.sync_state", "expansion_refusals") in _imports(tree)
    assert "expansion_refusals" in _called(tree)


def test_the_admission_rule_has_one_definition():
    found = [str(p.relative_to(ROOT)) for folder in ("controller", "broker", "ha", "tests/sim")
             for p in (ROOT / folder).rglob("*.py")
             for n in ast.walk(ast.parse(p.read_text()))
             if isinstance(n, ast.FunctionDef) and n.name in ("admission_refusal", "expansion_refusals", "_verdict")]
    assert sorted(found) == ["broker/replicas/replica_registry.py", "ha/sync_state.py", "ha/sync_state.py"], found
    assert "admission_refusal" in _called(_tree("broker/replicas/replica_registry.py"))
