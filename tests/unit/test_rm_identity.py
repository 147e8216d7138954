"""Identity files on real files: round trip, crash leftovers, corruption refused with the file named."""

from __future__ import annotations

import os

import pytest
from autoswitch.broker.replicas.identity import (
    IDENTITY_FILE,
    TEMP_IDENTITY_FILE,
    BrokerIdentity,
    IdentityFileCorrupt,
    IdentityStore,
    TempIdentity,
    parse_identity,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from autoswitch.base.errors import CorruptionError


def test_round_trip_and_format(tmp_path):
    s = IdentityStore(tmp_path)
    s.write_temp(TempIdentity("DefaultCluster", "broker-a", 3, "127.0.0.1:10911;1732240000000"))
    assert (tmp_path / TEMP_IDENTITY_FILE).read_text().splitlines()[:2] == [
        "format=1", "DefaultCluster#broker-a#3#127.0.0.1:10911;1732240000000"]
    s.commit(BrokerIdentity("DefaultCluster", "broker-a", 3))
    text = (tmp_path / IDENTITY_FILE).read_text()
    assert text.splitlines()[0] == "format=1"
    assert text.splitlines()[1] == "DefaultCluster#broker-a#3"  # RocketMQ's cluster#brokerName#brokerId
    assert text.splitlines()[2].startswith("crc32=")
    loaded = s.load("DefaultCluster", "broker-a")
    assert loaded.identity == BrokerIdentity("DefaultCluster", "broker-a", 3) and loaded.temp is None
    assert sorted(os.listdir(tmp_path)) == [IDENTITY_FILE]  # no scratch or temp file left


def test_missing_files_mean_fresh(tmp_path):
    loaded = IdentityStore(tmp_path / "nonexistent").load()
    assert loaded.identity is None and loaded.temp is None


def test_leftover_scratch_file_from_a_crash_is_ignored(tmp_path):
    s = IdentityStore(tmp_path)
    s.commit(BrokerIdentity("C", "g", 2))
    (tmp_path / (IDENTITY_FILE + ".swp")).write_bytes(b"C#g#")  # torn write that never got renamed
    assert s.load().identity == BrokerIdentity("C", "g", 2)
    s.commit(BrokerIdentity("C", "g", 2))  # the next write replaces the scratch file
    assert s.load().identity == BrokerIdentity("C", "g", 2)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"format=1\nC#g#2\n",  # no crc line
        b"C#g#2\ncrc32=%08x\n",  # no format line (written before formats had versions)
        b"format=1\nC#g#2\ncrc32=00000000\n",  # wrong crc
        b"format=1\nC#g#2\ncrc32=zz\n",
        b"format=x\nC#g#2\ncrc32=%08x\n",
        b"format=0\nC#g#2\ncrc32=%08x\n",
        b"format=1\nC#g#x\ncrc32=%08x\n",  # filled below with a matching crc: strict parse still refuses
        b"format=1\nC#g\ncrc32=%08x\n",
        b"format=1\nC#g#02\ncrc32=%08x\n",  # leading zero
        b"format=1\nC#g#0\ncrc32=%08x\n",  # brokerId starts at 1
        b"format=1\n\xff#g#2\ncrc32=%08x\n",
        b"x" * 5000,
    ],
)
def test_corrupt_identity_refused_naming_the_file(tmp_path, content):
    import zlib

    if b"%08x" in content:
        head = content[: content.index(b"crc32=") - 1]
        content = content.replace(b"%08x", b"%08x" % zlib.crc32(head))
    (tmp_path / IDENTITY_FILE).write_bytes(content)
    with pytest.raises(IdentityFileCorrupt) as e:
        IdentityStore(tmp_path).load()
    assert isinstance(e.value, CorruptionError)
    assert str(tmp_path / IDENTITY_FILE) in str(e.value)
    assert e.value.code == "IDENTITY_FILE_CORRUPT"


def test_a_later_format_is_refused_by_name_not_as_damage(tmp_path):
    import zlib

    from autoswitch.base.errors import FormatTooNew

    head = b"format=2\nC#g#2"
    (tmp_path / IDENTITY_FILE).write_bytes(head + b"\ncrc32=%08x\n" % zlib.crc32(head))
    with pytest.raises(FormatTooNew) as e:
        IdentityStore(tmp_path).load()
    assert str(tmp_path / IDENTITY_FILE) in e.value.message and e.value.details["found"] == 2


def test_corrupt_temp_refused_naming_the_file(tmp_path):
    s = IdentityStore(tmp_path)
    s.write_temp(TempIdentity("C", "g", 1, "code"))
    raw = bytearray((tmp_path / TEMP_IDENTITY_FILE).read_bytes())
    raw[2] ^= 0x01  # one flipped bit
    (tmp_path / TEMP_IDENTITY_FILE).write_bytes(bytes(raw))
    with pytest.raises(IdentityFileCorrupt, match=TEMP_IDENTITY_FILE):
        s.load()


def test_names_with_separator_rejected_at_write():
    with pytest.raises(ValueError):
        BrokerIdentity("C", "g#1", 1)
    with pytest.raises(ValueError):
        TempIdentity("C", "g", 1, "a#b")


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_parse_or_raise_typed(data):
    from pathlib import Path

    try:
        parse_identity(Path("/x/brokerIdentity"), data)
    except IdentityFileCorrupt:
        pass


@settings(max_examples=40, deadline=None)
@given(
    st.text(st.characters(blacklist_characters="#\r\n", blacklist_categories=("Cs",)), min_size=1, max_size=40),
    st.integers(1, 2**62),
)
def test_round_trip_property(tmp_path_factory, group, broker_id):
    d = tmp_path_factory.mktemp("id")
    s = IdentityStore(d)
    s.commit(BrokerIdentity("C", group, broker_id))
    assert s.load().identity == BrokerIdentity("C", group, broker_id)
