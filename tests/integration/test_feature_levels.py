"""Issue 34 item 3 with real processes: every member states the release and feature level it
runs (`admin features`, `get-controller-metadata`), `finalize-features` refuses a level that not
every member runs and says whom, and a controller whose stored state was finalized above what it
runs stops voting and leading instead of misreading it; restore-member refuses such a snapshot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from autoswitch.controller.raft.messages import HardState, Snapshot
from autoswitch.controller.raft.storage import FileStorage
from autoswitch.controller.state.sm_snapshot import encode_snapshot
from autoswitch.controller.state.sm_state import ControllerState

from autoswitch import __version__
from autoswitch.base import features
from tests.integration.controller_harness import Cluster, admin
from tests.integration.failover_harness import FailoverCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", *args], capture_output=True, text=True, timeout=60)


def test_members_state_their_level_and_finalize_refuses_what_one_does_not_run(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    c.wait_master(timeout=30)
    ctl = ",".join(c.ctl_addrs.values())

    def described() -> dict | None:
        r = admin("features", "--controller", ctl, "--json")
        brokers = [m for m in r.get("result", {}).get("members", []) if m["kind"] == "broker"]
        return r if r["ok"] and len(brokers) == 3 and all(m["supported"] != "not heard" for m in brokers) else None

    r = wait_until(described, 30, "every broker's level heard by the leader")["result"]
    # a new cluster starts at the newest level every controller runs (issue 64, item 3)
    assert r["finalized"] == features.SUPPORTED_LEVEL == r["supported_by_leader"], r
    assert sorted(m["member"] for m in r["members"]) == [
        "broker g1/1", "broker g1/2", "broker g1/3", "controller n1", "controller n2", "controller n3"]
    assert {(m["supported"], m["version"]) for m in r["members"]} == {(features.SUPPORTED_LEVEL, __version__)}

    md = admin("get-controller-metadata", "--controller", ctl, "--json")["result"]["nodes"]
    assert {(n["version"], n["feature_level"], n["feature_level_supported"]) for n in md} == {
        (__version__, features.SUPPORTED_LEVEL, features.SUPPORTED_LEVEL)}

    top = str(features.SUPPORTED_LEVEL)
    r = admin("finalize-features", "--controller", ctl, "--level", top, "--dry-run", "--json")
    assert r["ok"] and r["result"]["finalized"] == features.SUPPORTED_LEVEL, r
    assert "finalized already" in r["result"]["message"], r
    r = admin("finalize-features", "--controller", ctl, "--level", str(features.SUPPORTED_LEVEL + 1), "--json")
    assert not r["ok"] and r["error"]["code"] == "CONTROLLER_FEATURE_REFUSED", r
    assert "unknown here" in r["error"]["message"] and len(r["error"]["members"]) == 6, r

    # a controller that does not answer is named (a level cannot be raised past a silent member)
    c.ctl_proc["n3"].stop()
    r = admin("features", "--controller", ctl, "--json")["result"]
    assert {m["member"]: m["supported"] for m in r["members"]}["controller n3"] == "not heard", r


def test_a_controller_whose_state_is_finalized_above_its_level_stops_leading(procs, tmp_path):
    newer = ControllerState()
    newer.feature_level = features.SUPPORTED_LEVEL + 1     # as a newer release would have written it
    data = encode_snapshot(newer, 5)
    snap = tmp_path / "newer.snap"
    snap.write_bytes(data)

    cl = Cluster(procs, tmp_path, n=1)
    out = _cli("restore-member", *cl.node_args("n1"), "--snapshot", str(snap))
    assert out.returncode == 2 and "RESTORE_REFUSED" in out.stderr and "feature level" in out.stderr, out.stderr

    # the same state found on disk at start (a binary downgraded under a finalized cluster)
    raft = cl.data_dir("n1") / "raft"
    st = FileStorage(raft)
    st.load()
    st.install_snapshot(Snapshot(5, 1, data))
    st.save(HardState(term=1, vote=None, commit=5), [])
    st.close()
    cl.start("n1")
    wait_until(lambda: "feature_level_unsupported" in cl.proc["n1"].log_text(), 30, "the refusal in the log")
    (node,) = admin("get-controller-metadata", "--controller", cl.spec, "--json")["result"]["nodes"]
    assert node["feature_level"] == features.SUPPORTED_LEVEL + 1 and node["raft_role"] != "leader", node
    line = next(json.loads(x) for x in cl.proc["n1"].log_text().splitlines() if "feature_level_unsupported" in x)
    assert line["level"] == "critical" and line["featureLevel"] == features.SUPPORTED_LEVEL + 1
    assert "run a version that supports it" in line["action"]
