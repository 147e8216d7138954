"""A controller that would serve plaintext on a non-loopback address refuses to start unless the
operator asked for it (allow_insecure); loopback stays plaintext-friendly for development."""

from __future__ import annotations

import pytest
from autoswitch.controller import config as cfgmod

from autoswitch.base.errors import ConfigError


def _load(**kw):
    base = dict(node_id="n1", peers="n1=127.0.0.1:9001,n2=127.0.0.1:9002", data_dir="/tmp/x")
    return cfgmod.load(None, **{**base, **kw})


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
    with pytest.raises(ConfigError, match="plaintext on non-loopback"):
        _load(**kw)
    assert _load(allow_insecure=True, **kw).allow_insecure
