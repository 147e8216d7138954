"""RocketMQ's remoting frame (controller/remoting/codec.py): both header types read, JSON written,
fastjson bodies, bounds, and fuzzed input that only ever yields commands or a RemotingError."""

from __future__ import annotations

import json
import random
import struct

import pytest
from autoswitch.controller.remoting import codec
from autoswitch.controller.remoting.codec import Command, Decoder, RemotingError


def _java_json_frame(head: dict, body: bytes = b"") -> bytes:
    h = json.dumps(head).encode()
    return struct.pack(">ii", 4 + len(h) + len(body), len(h)) + h + body


def test_reads_a_java_json_request():
    # what a 5.2.0 broker sends for CONTROLLER_GET_REPLICA_INFO (fields as fastjson writes them)
    frame = _java_json_frame({"code": 1004, "extFields": {"brokerName": "broker-a"}, "flag": 0, "language": "JAVA",
                              "opaque": 17, "serializeTypeCurrentRPC": "JSON", "version": 453})
    (cmd,) = Decoder().feed(frame)
    assert (cmd.code, cmd.opaque, cmd.is_response, cmd.is_oneway, cmd.body) == (1004, 17, False, False, None)
    assert codec.field(cmd, "brokerName", str) == "broker-a"


def test_reads_the_binary_header_and_answers_in_json():
    req = codec.request(904, 5, {"brokerName": "b", "brokerId": 2, "epoch": -1, "isLeader": True}, b"xyz", oneway=True)
    (cmd,) = Decoder().feed(codec.encode_binary(req))
    assert cmd.is_oneway and cmd.body == b"xyz" and cmd.language == "PYTHON"
    assert codec.field(cmd, "brokerId", int) == 2 and codec.int32_field(cmd, "epoch") == -1
    assert codec.field(cmd, "isLeader", bool) is True
    resp = codec.response_to(cmd, 0, None, {"masterEpoch": 3, "absent": None})
    raw = codec.encode(resp)
    (word,) = struct.unpack_from(">i", raw, 4)
    assert word >> 24 == codec.JSON_TYPE
    (back,) = Decoder().feed(raw)
    assert back.is_response and back.opaque == 5 and back.ext == {"masterEpoch": "3"}


def test_frames_split_anywhere_and_several_in_one_read():
    cmds = [codec.request(1005, i, {"k": "v" * i}) for i in range(5)]
    data = b"".join(codec.encode(c) for c in cmds)
    d, out = Decoder(), []
    for i in range(0, len(data), 7):
        out += d.feed(data[i:i + 7])
    assert [c.opaque for c in out] == list(range(5)) and d.buffered == 0


def test_fastjson_bodies_with_unquoted_integer_keys():
    body = b'{"brokerAddrs":{0:"127.0.0.1:10911",12:"h:1"},"name":"a,1:b","n":{"x":{3:[1,2]}}}'
    assert codec.loads_fastjson(body) == {"brokerAddrs": {"0": "127.0.0.1:10911", "12": "h:1"}, "name": "a,1:b",
                                          "n": {"x": {"3": [1, 2]}}}
    assert codec.loads_fastjson(b'{"syncStateSet":[1,2],"syncStateSetEpoch":2}') == {
        "syncStateSet": [1, 2], "syncStateSetEpoch": 2}
    for bad in (b"{", b"\xff", None):
        with pytest.raises(RemotingError):
            codec.loads_fastjson(bad)


@pytest.mark.parametrize("raw,why", [
    (struct.pack(">i", 3), "a frame of 3 bytes"),
    (struct.pack(">i", codec.MAX_FRAME_BYTES + 1), "at most"),
    (struct.pack(">ii", 8, 100) + b"abcd", "a header of 100 bytes"),
    (struct.pack(">ii", 6, (7 << 24) | 2) + b"{}", "unknown serialize type 7"),
    (_java_json_frame({"code": "x"}), "code is not"),
    (_java_json_frame({"code": 1, "extFields": [1]}), "extFields"),
    (struct.pack(">ii", 7, 3) + b"[1]", "not an object"),
])
def test_bad_frames_are_typed_and_fatal(raw, why):
    with pytest.raises(RemotingError) as e:
        Decoder().feed(raw)
    assert why in e.value.message and e.value.fatal


def test_a_huge_length_is_refused_before_anything_is_buffered():
    d = Decoder()
    with pytest.raises(RemotingError):
        d.feed(struct.pack(">i", 2**31 - 1))
    assert d.buffered == 4


def test_fields_by_declared_type():
    cmd = Command(code=1, ext={"n": "12x", "big": str(2**40), "b": "TRUE"})
    with pytest.raises(RemotingError, match="not a number"):
        codec.field(cmd, "n", int)
    with pytest.raises(RemotingError, match="32-bit"):
        codec.int32_field(cmd, "big")
    with pytest.raises(RemotingError, match="lacks x"):
        codec.field(cmd, "x", str)
    assert codec.field(cmd, "x", int, required=False, default=7) == 7
    assert codec.field(cmd, "b", bool) is True


def test_fuzzed_input_yields_commands_or_a_typed_error():
    rnd = random.Random(62)
    seeds = [codec.encode(codec.request(1003, 9, {"brokerName": "a", "brokerId": 1}, b'{"x":1}')),
             codec.encode_binary(codec.request(904, 1, {"brokerId": "2"}, oneway=True))]
    for _ in range(3000):
        data = bytearray(rnd.choice(seeds))
        for _m in range(rnd.randint(1, 6)):
            op = rnd.random()
            if op < 0.5 and data:
                data[rnd.randrange(len(data))] = rnd.randrange(256)
            elif op < 0.75:
                data = data[:rnd.randrange(len(data) + 1)]
            else:
                data += bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
        try:
            for cmd in Decoder(max_frame_bytes=1 << 16).feed(bytes(data)):
                assert isinstance(cmd, Command)
        except RemotingError:
            pass


@pytest.mark.parametrize("kw,needle", [
    (dict(remoting_listen="8.8.8.8:9878"), "public address"),
    (dict(remoting_listen="example.com:9878"), "give an IP address"),
    (dict(remoting_listen="127.0.0.1:9878", peers={"n1": "127.0.0.1:1", "n2": "127.0.0.1:2"}), "remoting_peers"),
    (dict(remoting_peers={"n1": "127.0.0.1:3"}), "remoting_listen is not"),
    (dict(remoting_listen="127.0.0.1:99999"), "remoting_listen"),
])
def test_remoting_config_is_checked(tmp_path, kw, needle):
    from autoswitch.controller.config import load

    from autoswitch.base.errors import ConfigError

    base = dict(node_id="n1", peers={"n1": "127.0.0.1:1"}, data_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=needle):
        load(None, **{**base, **kw})
    # a public address is the operator's explicit choice
    ok = load(None, **base, remoting_listen="8.8.8.8:9878", remoting_allow_public=True)
    assert ok.remoting_listen == "8.8.8.8:9878"


def test_a_standalone_name_server_refuses_the_remoting_port_with_a_reason():
    import json
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "autoswitch", "namesrv", "--listen", "127.0.0.1:1",
                        "--remoting-listen", "127.0.0.1:2"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    out = json.loads(r.stderr.strip().splitlines()[-1])      # errors go to stderr, one JSON line
    assert out["error"]["code"] == "CONFIG_ERROR" and "--embed-controller" in out["error"]["message"]
