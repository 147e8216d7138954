"""A controller, name server or broker that would listen on a non-loopback address without TLS
and authorization refuses to start unless the operator asked for it (allow_insecure); loopback
stays plaintext-friendly for development; ``auth`` without TLS is refused everywhere."""

from __future__ import annotations

import pytest
from autoswitch.broker.config import load_config as load_broker
from autoswitch.controller import config as cfgmod

from autoswitch.app.certs import init_dev_ca
from autoswitch.base.errors import ConfigError


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return init_dev_ca(tmp_path_factory.mktemp("certs"), ["controller/n1", "broker/g1/2"])


def _load(**kw):
    base = dict(node_id="n1", peers="n1=127.0.0.1:9001,n2=127.0.0.1:9002", data_dir="/tmp/x")
    return cfgmod.load(None, **{**base, **kw})


def _tls(certs, name):
    return dict(tls_ca=certs[name]["ca"], tls_cert=certs[name]["cert"], tls_key=certs[name]["key"])


def test_loopback_plaintext_is_fine():
    assert not _load().tls.enabled
    assert not _load(peers="n1=localhost:9001,n2=[::1]:9002").tls.enabled


@pytest.mark.parametrize("kw", [
    dict(peers="n1=10.0.0.1:9001,n2=10.0.0.2:9002"),
    dict(listen="0.0.0.0:9001"),
    dict(raft_peers="n1=10.0.0.1:9101,n2=127.0.0.1:9102"),
    dict(peers="n1=ctl-1.example:9001,n2=127.0.0.1:9002"),
])
def test_non_loopback_plaintext_is_refused_unless_asked_for(kw):
    with pytest.raises(ConfigError, match="no TLS and auth on non-loopback"):
        _load(**kw)
    assert _load(allow_insecure=True, **kw).allow_insecure


def test_non_loopback_tls_without_auth_is_refused(certs):
    with pytest.raises(ConfigError, match="no auth on non-loopback"):
        _load(listen="0.0.0.0:9001", **_tls(certs, "controller/n1"))
    assert _load(listen="0.0.0.0:9001", auth=True, **_tls(certs, "controller/n1")).auth


def test_auth_needs_tls(certs, tmp_path):
    with pytest.raises(ConfigError, match="needs TLS"):
        _load(auth=True)
    with pytest.raises(ConfigError, match="needs TLS"):
        load_broker(None, dict(data_dir=str(tmp_path), auth=True))


def test_broker_secure_defaults(certs, tmp_path):
    with pytest.raises(ConfigError, match="no TLS and auth on non-loopback"):
        load_broker(None, dict(data_dir=str(tmp_path), listen="0.0.0.0:10911"))
    assert load_broker(None, dict(data_dir=str(tmp_path), listen="0.0.0.0:10911", allow_insecure=True))
    ok = load_broker(None, dict(data_dir=str(tmp_path), group="g1", broker_id=2, listen="0.0.0.0:10911",
                                ha_listen="0.0.0.0:10912", auth=True, **_tls(certs, "broker/g1/2")))
    assert ok.certificate_scope == ("g1", 2)


def test_broker_certificate_must_name_its_group_and_id(certs, tmp_path):
    with pytest.raises(ConfigError, match="certificate names group 'g1'"):
        load_broker(None, dict(data_dir=str(tmp_path), group="g2", **_tls(certs, "broker/g1/2")))
    with pytest.raises(ConfigError, match="certificate names brokerId 2"):
        load_broker(None, dict(data_dir=str(tmp_path), group="g1", broker_id=3, **_tls(certs, "broker/g1/2")))
    # controller mode: the certificate's id is the one the broker applies for
    cfg = load_broker(None, dict(data_dir=str(tmp_path), group="g1", controllers=["127.0.0.1:9001"],
                                 **_tls(certs, "broker/g1/2")))
    assert cfg.replicas_config().fixed_broker_id == 2


def test_migration_steps_are_checked(certs, tmp_path):
    tls = _tls(certs, "controller/n1")
    assert _load(tls_accept_plaintext=True, tls_dial_plaintext=True, **tls).tls.dial_plaintext
    with pytest.raises(ConfigError, match="plaintext callers have no identity"):
        _load(tls_accept_plaintext=True, auth=True, **tls)
    with pytest.raises(ConfigError, match="would refuse the plaintext it still speaks"):
        _load(tls_dial_plaintext=True, **tls)
    with pytest.raises(ConfigError, match="steps of a migration"):
        _load(tls_accept_plaintext=True)
    # accepting plaintext counts as plaintext for the secure-default rule
    with pytest.raises(ConfigError, match="non-loopback"):
        _load(listen="0.0.0.0:9001", tls_accept_plaintext=True, **tls)


def test_the_http_surface_has_its_own_exposure_setting(certs, tmp_path):
    """metrics_allow_remote lets /metrics off loopback without allow_insecure, which would drop the
    check of every other listener too (issue 29)."""
    with pytest.raises(ConfigError, match="allow_insecure"):
        _load(metrics_listen="0.0.0.0:9100")
    cfg = _load(metrics_listen="0.0.0.0:9100", metrics_allow_remote=True)
    assert cfg.metrics_allow_remote and not cfg.allow_insecure
    with pytest.raises(ConfigError, match="allow_insecure"):     # the gRPC listener is still checked
        _load(metrics_listen="0.0.0.0:9100", metrics_allow_remote=True,
              peers="n1=10.0.0.1:9001,n2=10.0.0.2:9001")
    with pytest.raises(ConfigError, match="metrics_token_file"):
        _load(metrics_listen="0.0.0.0:9100", metrics_allow_remote=True, metrics_token_file=str(tmp_path / "none"))
    b = load_broker(None, {"data_dir": str(tmp_path / "b"), "metrics_listen": "0.0.0.0:9101",
                           "metrics_allow_remote": True})
    assert b.metrics_allow_remote


def test_a_ca_key_that_cannot_sign_is_a_typed_error(tmp_path):
    """Hostile or mistaken input: ca.key holding an X25519 key (it cannot sign certificates) beside
    a ca.pem. `certs init` says so with a ConfigError naming the file, not a traceback."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import x25519

    good = tmp_path / "good"
    init_dev_ca(good, ["controller/n1"])
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "ca.pem").write_bytes((good / "ca.pem").read_bytes())
    (bad / "ca.key").write_bytes(x25519.X25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(ConfigError, match="cannot sign certificates") as e:
        init_dev_ca(bad, ["controller/n1"])
    assert str(bad / "ca.key") in str(e.value)
