"""HOST:PORT has one parser (autoswitch/base/addr.py); flags, config files and requests use it."""

from __future__ import annotations

import argparse

import pytest
from autoswitch.broker.config import parse_hostport
from autoswitch.controller.server.service_common import BadRequest, check_addr

from autoswitch.app.cliargs import hostport
from autoswitch.base.addr import AddressError, split_hostport
from autoswitch.base.errors import ConfigError
from autoswitch.base.limits import MAX_ADDRESS_LEN


@pytest.mark.parametrize("value,parsed", [
    ("127.0.0.1:9876", ("127.0.0.1", 9876)),
    ("broker-1.example:1", ("broker-1.example", 1)),
    ("[::1]:65535", ("[::1]", 65535)),
    ("h" * (MAX_ADDRESS_LEN - 2) + ":1", ("h" * (MAX_ADDRESS_LEN - 2), 1)),
])
def test_good_addresses(value, parsed):
    assert split_hostport(value) == parsed


def test_a_listen_address_may_let_the_system_pick_the_port():
    assert split_hostport("127.0.0.1:0", listen=True) == ("127.0.0.1", 0)
    with pytest.raises(AddressError):
        split_hostport("127.0.0.1:0")


@pytest.mark.parametrize("value", [
    "", "host", ":1", "host:", "host:0", "host:65536", "host:x1", "host:-1", " host:1", "ho st:1", "host:1\n",
    "h\x00:1", "::1:9000", "[::1:9000", "h" * (MAX_ADDRESS_LEN - 1) + ":1",
])
def test_bad_addresses_are_one_typed_error_everywhere(value):
    with pytest.raises(AddressError):
        split_hostport(value)
    if value:                                   # "" is "not given" to the CLI
        with pytest.raises(argparse.ArgumentTypeError):
            hostport(value)
    with pytest.raises(ConfigError):
        parse_hostport(value, "listen")
    with pytest.raises(BadRequest):
        check_addr(value, "broker_address")
