"""The pure parts of authorization: identities from certificate names, the tokens file (digests
only, re-read on change so revocation needs no restart), and the rule check every interceptor
runs (roles, broker scope, batches split call by call, fail closed on an unknown method)."""

from __future__ import annotations

import pytest
from autoswitch.controller.server.authz import CONTROLLER_RULES, NAMESRV_RULES

from autoswitch.app.certs import issue_token, revoke_token
from autoswitch.base.auth import (
    ANONYMOUS,
    AuthConfig,
    Denied,
    Guard,
    IdentityMap,
    Role,
    TokenStore,
    bearer_token,
    parse_broker_identity,
)
from autoswitch.base.errors import ConfigError
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import namesrv_pb2 as npb


def test_certificate_names():
    ids = IdentityMap({"ops-robot": ["admin"], "bench": "broker,reader"})
    assert ids.principal("controller/n1").roles == {Role.PEER, Role.READER}
    b = ids.principal("broker/g1/2")
    assert (b.roles, b.group, b.broker_id) == ({Role.BROKER}, "g1", 2)
    assert ids.principal("admin").roles == {Role.ADMIN, Role.READER, Role.PRODUCER}
    assert ids.principal("reader/dash").roles == {Role.READER}
    assert ids.principal("producer/app").roles == {Role.PRODUCER}
    assert ids.principal("ops-robot").roles == {Role.ADMIN}
    assert not ids.principal("bench").scoped
    for nobody in ("broker/g1", "broker/g1/0", "broker/g1/x", "broker//2", "controller", "mallory", "reader"):
        assert ids.principal(nobody).roles == frozenset(), nobody
    assert parse_broker_identity("broker/g1/" + "9" * 30) is None
    with pytest.raises(ConfigError, match="roles must be"):
        IdentityMap({"x": ["root"]})


def test_bearer_token_metadata():
    assert bearer_token([("authorization", "Bearer abc")]) == "abc"
    assert bearer_token([("authorization", "Basic abc")]) == ""
    assert bearer_token([("x", "y")]) is None
    assert bearer_token(None) is None


def test_tokens_file_issue_lookup_revoke(tmp_path):
    f = tmp_path / "tokens.toml"
    alice = issue_token(f, "alice", ["reader"])
    broker = issue_token(f, "g1-2", ["broker"], group="g1", broker_id=2)
    assert alice not in f.read_text() and broker not in f.read_text()   # digests only
    store = TokenStore(str(f))
    p = store.lookup(alice)
    assert p is not None and p.roles == {Role.READER} and p.name == "token:alice" and p.via == "token"
    q = store.lookup(broker)
    assert q is not None and (q.group, q.broker_id) == ("g1", 2)
    assert store.lookup("ast_wrong") is None
    assert store.lookup("x" * 5000) is None
    assert revoke_token(f, "alice")
    assert store.lookup(alice) is None                   # no restart: the file was re-read
    assert store.lookup(broker) is not None
    f.write_text("not toml [")                           # a broken edit keeps the last good set
    assert store.lookup(broker) is not None


@pytest.mark.parametrize("text, why", [
    ('[tokens.a]\nroles = ["reader"]\nsha256 = "zz"\n', "sha256"),
    ('[tokens.a]\nroles = ["god"]\nsha256 = "' + "a" * 64 + '"\n', "roles"),
    ('[tokens.a]\nroles = ["broker"]\ngroup = "g1"\nsha256 = "' + "a" * 64 + '"\n', "both group"),
    ('[other]\nx = 1\n', "only a"),
])
def test_bad_tokens_files_are_refused(tmp_path, text, why):
    f = tmp_path / "t.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=why):
        TokenStore(str(f))


def _guard():
    return Guard("test.auth", AuthConfig(enabled=True), {**CONTROLLER_RULES, **NAMESRV_RULES})


def test_roles_and_broker_scope():
    g, ids = _guard(), IdentityMap()
    broker, admin, reader = ids.principal("broker/g1/2"), ids.principal("admin"), ids.principal("reader/x")
    g.check(broker, "RegisterBroker", pb.RegisterBrokerRequest(broker_name="g1", broker_id=2))
    for req in (pb.RegisterBrokerRequest(broker_name="g1", broker_id=3),
                pb.RegisterBrokerRequest(broker_name="g2", broker_id=2)):
        with pytest.raises(Denied) as e:
            g.check(broker, "RegisterBroker", req)
        assert e.value.role is Role.BROKER
    g.check(broker, "ElectMaster", pb.ElectMasterRequest(broker_name="g1", broker_id=2))
    with pytest.raises(Denied, match="needs role admin"):
        g.check(broker, "ElectMaster", pb.ElectMasterRequest(broker_name="g1", broker_id=2, designate_elect=True))
    with pytest.raises(Denied, match="needs role admin"):
        g.check(reader, "CleanBrokerData", pb.CleanBrokerDataRequest(broker_name="g1"))
    with pytest.raises(Denied, match="needs role admin"):
        g.check(reader, "ElectMaster", pb.ElectMasterRequest(broker_name="g1"))
    g.check(admin, "ElectMaster", pb.ElectMasterRequest(broker_name="g1", broker_id=3, designate_elect=True))
    g.check(reader, "GetSyncStateData", pb.GetSyncStateDataRequest())
    with pytest.raises(Denied):
        g.check(broker, "GetSyncStateData", pb.GetSyncStateDataRequest())       # every group: not its own
    with pytest.raises(Denied, match="needs role peer"):
        g.check(admin, "Stream", None)
    with pytest.raises(Denied):
        g.check(broker, "RegisterRoute", npb.RegisterRouteRequest(route=npb.BrokerRoute(broker_name="g1", broker_id=3)))
    with pytest.raises(Denied, match="no rule"):
        g.check(admin, "SomethingNew", None)
    with pytest.raises(Denied, match="unknown or revoked token"):
        g.check(None, "GetMetaData", pb.GetMetaDataRequest())
    with pytest.raises(Denied):
        g.check(ANONYMOUS, "GetMetaData", pb.GetMetaDataRequest())
    assert g.denied[("RegisterBroker", "broker")] == 2


def test_batch_is_checked_call_by_call():
    g, broker = _guard(), IdentityMap().principal("broker/g1/2")

    def batch(*calls):
        return pb.BatchRequest(calls=[pb.BatchCall(method=m, request=r.SerializeToString()) for m, r in calls])

    ok = pb.BrokerHeartbeatRequest(broker_name="g1", broker_id=2)
    g.check(broker, "Batch", batch(("BrokerHeartbeat", ok), ("GetReplicaInfo", pb.GetReplicaInfoRequest(broker_name="g1"))))
    with pytest.raises(Denied, match="CleanBrokerData needs role admin"):
        g.check(broker, "Batch", batch(("BrokerHeartbeat", ok),
                                       ("CleanBrokerData", pb.CleanBrokerDataRequest(broker_name="g1"))))
    with pytest.raises(Denied):
        g.check(broker, "Batch", batch(("AlterSyncStateSet", pb.AlterSyncStateSetRequest(broker_name="g2",
                                                                                          master_broker_id=2))))


def test_an_empty_batch_still_needs_a_role():
    with pytest.raises(Denied):
        _guard().check(IdentityMap().principal("mallory"), "Batch", pb.BatchRequest())
