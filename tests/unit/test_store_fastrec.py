"""The optional C record walker (native/fastrec.c -> autoswitch._fastrec) and its pure-Python
fallback give the same answers as the reference walk on valid, truncated and mutated batches.

If the package was installed without the extension, the test compiles native/fastrec.c itself
(gcc + Python headers) so the C code is always checked where a compiler exists."""

from __future__ import annotations

import importlib.util
import random
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
from autoswitch.broker.storage import record as rec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def native_mod(tmp_path_factory):
    if rec.native is not None:
        return rec.native
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler: only the pure-Python walker can be checked here")
    out = tmp_path_factory.mktemp("fastrec") / ("_fastrec" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"],
                    str(ROOT / "native" / "fastrec.c"), "-lz", "-o", str(out)], check=True)
    spec = importlib.util.spec_from_file_location("_fastrec", out)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _batch(rng: random.Random, n: int) -> bytes:
    qs: dict[bytes, int] = {}
    parts = []
    for i in range(n):
        t = rng.choice([b"a", b"bb", b"topic-c"])
        q = qs.get(t, 0)
        qs[t] = q + 1
        parts.append(rec.encode_message(t, f"m{i}".encode(), rng.randbytes(rng.randrange(0, 300)), q, i, 3))
    return b"".join(parts)


def _cases(seed: int):
    rng = random.Random(seed)
    data = _batch(rng, rng.randrange(1, 60))
    yield data
    yield data[: rng.randrange(0, len(data))]                 # torn tail
    bad = bytearray(data)
    for _ in range(rng.randrange(1, 4)):                      # bit flips anywhere
        bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
    yield bytes(bad)
    z = bytearray(data)
    k = rng.randrange(len(z))
    z[k : k + 50] = bytes(len(z[k : k + 50]))                 # zeroed range
    yield bytes(z)


@pytest.mark.parametrize("impl", ["python", "native"])
def test_walkers_agree_with_reference(impl, native_mod, monkeypatch):
    monkeypatch.setattr(rec, "native", native_mod if impl == "native" else None)
    for seed in range(150):
        for data in _cases(seed):
            n = len(data)
            for collect in (True, False):
                a = rec.walk(data, 0, n, n, 1000, collect=collect)
                b = rec.walk_fast(data, 0, n, n, 1000, collect=collect)
                assert a[0] == b[0] and a[1] == b[1], (seed, collect)
                if a[1] is None:
                    assert rec.topics_equal(a[2], b[2])
            # the length-only chain stops where lengths stop being whole
            p = 0
            while n - p >= rec.HEADER_SIZE and rec.HEADER_SIZE <= rec.peek_total(data, p) <= n - p:
                p += rec.peek_total(data, p)
            assert rec.whole_prefix_end(data, 0, n) == p


def test_crc32_matches_zlib_on_random_lengths_alignments_and_seeds(native_mod):
    """The carry-less-multiply CRC (used when the CPU has PCLMULQDQ) and its zlib fallback both
    equal zlib.crc32: every length 0..300 (the 64-byte and 16-byte fold edges), random longer
    ones, unaligned starts and non-zero running values."""
    import zlib

    r = random.Random(7)
    data = r.randbytes(1 << 18)
    for n in range(301):
        for a in (0, 1, 7, 15):
            assert native_mod.crc32(data[a : a + n]) == zlib.crc32(data[a : a + n]), (a, n)
    for _ in range(3000):
        a, n, v = r.randrange(64), r.randrange(1 << 17), r.randrange(1 << 32)
        assert native_mod.crc32(data[a : a + n], v) == zlib.crc32(data[a : a + n], v), (a, n, v)
    flipped = bytearray(data[:4096])
    flipped[1000] ^= 0x10
    assert native_mod.crc32(bytes(flipped)) != native_mod.crc32(data[:4096])


def test_decode_run_matches_the_python_loop(native_mod, monkeypatch):
    """A consumer's decode of record runs (record_runs.iter_run): the C one and the Python loop
    give the same StoredMessages, topics switching inside a run, non-ASCII ids, empty bodies; a
    msg_id that is not UTF-8 is LogCorrupt either way, and the C one refuses what it cannot read."""
    from autoswitch.broker.storage.record_runs import iter_run

    rng = random.Random(7)
    for seed in range(40):
        run = _batch(random.Random(seed), rng.randrange(1, 40))
        run += rec.encode_message(b"a", "\u00e9t\u00e9-\u2603".encode(), b"", 99, 1, 2)
        phy = rng.randrange(0, 1 << 40)
        monkeypatch.setattr(rec, "native", native_mod)
        fast = list(iter_run(run, phy))
        monkeypatch.setattr(rec, "native", None)
        slow = list(iter_run(run, phy))
        assert fast == slow and all(type(m) is rec.StoredMessage for m in fast)
        assert fast == native_mod.decode_run(run, phy, rec.StoredMessage)
    bad_id = rec.encode_message(b"a", b"\xff\xfe", b"x", 0, 1, 1)
    for impl in (native_mod, None):
        monkeypatch.setattr(rec, "native", impl)
        with pytest.raises(rec.LogCorrupt, match="UTF-8"):
            list(iter_run(bad_id, 0))
    with pytest.raises(ValueError, match="malformed"):
        native_mod.decode_run(run[:-1], 0, rec.StoredMessage)
    with pytest.raises(TypeError):
        native_mod.decode_run(run, 0, dict)
