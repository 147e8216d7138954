"""docs/configuration.md must not drift from the config dataclasses.

Each config dataclass has one section in the page (a ``##`` heading naming the class in
backticks) whose table has one row per field. The tests check: every field has a row, every row
is a real field, literal defaults equal the code's, the runtime column matches what the
controller accepts at run time, and the safety-profile table matches what the broker derives.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from autoswitch.broker.client.route import RetryPolicy
from autoswitch.broker.config import BrokerConfig
from autoswitch.broker.replicas.hooks import HookConfig
from autoswitch.broker.replicas.lease import LeaseConfig
from autoswitch.broker.replicas.replicas_manager import ReplicasConfig
from autoswitch.broker.storage.store_config import StoreConfig
from autoswitch.controller.config import RUNTIME_KEYS, ControllerConfig
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.state import sm_config
from autoswitch.controller.state.sm_config import SMConfig
from autoswitch.controller.store.config import StoreBackendConfig
from autoswitch.ha.config import HAConfig
from autoswitch.pipeline.analyze import AnalyzeConfig

from autoswitch.app.playground_cluster import PROFILES, Layout
from autoswitch.base.auth import AuthConfig
from autoswitch.base.tls import TLSConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

CLASSES: list[type] = [
    BrokerConfig, StoreConfig, HAConfig, ReplicasConfig, LeaseConfig, HookConfig,
    ControllerConfig, SMConfig, RaftConfig, StoreBackendConfig, RetryPolicy, AnalyzeConfig, Layout, TLSConfig, AuthConfig,
]

_NO_DEFAULT = object()


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _sections(text: str) -> dict[str, str]:
    """``## heading`` -> body up to the next ``##`` heading."""
    out: dict[str, str] = {}
    parts = re.split(r"^## ", text, flags=re.M)
    for part in parts[1:]:
        head, _, body = part.partition("\n")
        out[head] = body
    return out


def _section_for(text: str, cls: type) -> str:
    hits = [body for head, body in _sections(text).items() if f"`{cls.__name__}`" in head]
    assert len(hits) == 1, f"need exactly one '## ... `{cls.__name__}`' section, found {len(hits)}"
    return hits[0]


def _rows(body: str) -> dict[str, list[str]]:
    """Table rows whose first cell is a single `key` -> all cells (stripped)."""
    rows: dict[str, list[str]] = {}
    for line in body.splitlines():
        m = re.match(r"^\|\s*`([a-z_][a-z0-9_]*)`\s*\|(.*)\|\s*$", line)
        if not m:
            continue
        key = m.group(1)
        assert key not in rows, f"duplicate row for {key!r}"
        rows[key] = [c.strip() for c in m.group(2).split("|")]
    return rows


def _literal(cell: str) -> Any:
    """The first `code` token of a default cell, parsed."""
    m = re.search(r"`([^`]*)`", cell)
    assert m, f"default cell without a `literal`: {cell!r}"
    tok = m.group(1)
    fixed = {"true": True, "false": False, "unset": None, "[]": [], "{}": {}, "required": _NO_DEFAULT}
    if tok in fixed:
        return fixed[tok]
    if tok.startswith('"') and tok.endswith('"'):
        return tok[1:-1]
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        return float(tok)
    except ValueError:
        return tok  # e.g. LeaseConfig(): compared by name below


def _code_default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return _NO_DEFAULT


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_field_has_a_row_and_every_row_is_a_field(doc: str, cls: type) -> None:
    rows = _rows(_section_for(doc, cls))
    fields = {f.name for f in dataclasses.fields(cls)}
    assert sorted(fields - set(rows)) == [], f"{cls.__name__}: fields missing from docs/configuration.md"
    assert sorted(set(rows) - fields) == [], f"{cls.__name__}: rows for keys the code does not have"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_documented_defaults_equal_code_defaults(doc: str, cls: type) -> None:
    rows = _rows(_section_for(doc, cls))
    wrong = []
    for f in dataclasses.fields(cls):
        cells = rows[f.name]
        written = _literal(cells[1])  # columns: where, default, unit, runtime, meaning
        code = _code_default(f)
        if dataclasses.is_dataclass(code):
            ok = written == f"{type(code).__name__}()" and code == type(code)()
        elif isinstance(code, bool) or isinstance(written, bool):
            ok = type(code) is type(written) and code == written
        else:
            ok = code == written
        if not ok:
            wrong.append((f.name, written, code))
    assert wrong == [], f"{cls.__name__}: (key, doc default, code default)"


def test_safety_critical_defaults(doc: str) -> None:
    """Spelled out on top of the generic check, so a parser regression cannot hide these."""
    lease = _rows(_section_for(doc, LeaseConfig))
    assert _literal(lease["master_lease_ms"][1]) == LeaseConfig().master_lease_ms == 6000
    assert _literal(lease["heartbeat_timeout_ms"][1]) == LeaseConfig().heartbeat_timeout_ms
    assert _literal(lease["safety_ms"][1]) == LeaseConfig().safety_ms
    assert _literal(lease["max_clock_rate_drift"][1]) == LeaseConfig().max_clock_rate_drift
    sm = _rows(_section_for(doc, SMConfig))
    assert _literal(sm["heartbeat_timeout_ms"][1]) == SMConfig().heartbeat_timeout_ms
    assert _literal(sm["enable_elect_unclean_master"][1]) is SMConfig().enable_elect_unclean_master is False
    broker = _rows(_section_for(doc, BrokerConfig))
    assert _literal(broker["heartbeat_timeout_ms"][1]) == BrokerConfig().heartbeat_timeout_ms
    assert _literal(broker["ack_mode"][1]) == BrokerConfig().ack_mode
    assert _literal(broker["lease_enabled"][1]) is BrokerConfig().lease_enabled is True
    store = _rows(_section_for(doc, StoreConfig))
    assert _literal(store["verify_reads"][1]) is StoreConfig().verify_reads is True
    raft = _rows(_section_for(doc, RaftConfig))
    assert _literal(raft["fsync"][1]) is RaftConfig().fsync is True


@pytest.mark.parametrize("cls", [ControllerConfig, SMConfig], ids=lambda c: c.__name__)
def test_runtime_column_matches_the_controller(doc: str, cls: type) -> None:
    rows = _rows(_section_for(doc, cls))
    for key, cells in rows.items():
        runtime = cells[3]
        if cls is SMConfig:
            want = key in sm_config.KEYS and key not in sm_config.BLACKLIST
            assert runtime.startswith("yes (replicated)") == want, key
        else:
            assert runtime.startswith("yes (node-local)") == (key in RUNTIME_KEYS), key
    if cls is ControllerConfig:
        assert set(RUNTIME_KEYS) <= set(rows)


def test_broker_runtime_column_matches_broker_config_set(doc: str) -> None:
    from autoswitch.broker.runtime_config import RUNTIME_KEYS as BROKER_RUNTIME_KEYS

    rows = _rows(_section_for(doc, BrokerConfig))
    for key, cells in rows.items():
        want = "yes (broker-config-set)" if key in BROKER_RUNTIME_KEYS else "no"
        assert cells[3] == want, f"BrokerConfig.{key}"
    assert set(BROKER_RUNTIME_KEYS) <= set(rows)


def test_other_components_are_not_runtime_changeable(doc: str) -> None:
    for cls in CLASSES:
        if cls in (ControllerConfig, SMConfig, BrokerConfig):
            continue
        for key, cells in _rows(_section_for(doc, cls)).items():
            assert cells[3] == "no", f"{cls.__name__}.{key}: only controller and broker-config-set keys change at run time"


def _profile_rows(doc: str) -> dict[str, dict[str, float]]:
    body = next(b for h, b in _sections(doc).items() if "safety inequality" in h)
    lines = [ln for ln in body.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if cells[0] in PROFILES:
            out[cells[0]] = {h: float(_literal(c)) for h, c in zip(header[1:], cells[1:], strict=True)}
    return out


def _broker_flags(args: list[str]) -> dict[str, int]:
    out = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        out[flag.removeprefix("--").replace("-", "_")] = int(value)
    return out


def test_safety_profile_table_matches_derived_values(doc: str) -> None:
    table = _profile_rows(doc)
    assert set(table) == set(PROFILES)
    for name, profile in PROFILES.items():
        cfg = BrokerConfig(data_dir="/nonexistent", controllers=["127.0.0.1:1"],
                           **_broker_flags(profile["broker_args"])).validate()
        rc = cfg.replicas_config()
        want = {
            "heartbeat_timeout_ms": rc.lease.heartbeat_timeout_ms,
            "master_lease_ms": rc.lease.master_lease_ms,
            "lease_safety_ms": rc.lease.safety_ms,
            "heartbeat_interval_ms": rc.heartbeat_interval_ms,
            "max_clock_rate_drift": rc.lease.max_clock_rate_drift,
            "margin_ms": rc.lease.margin_ms(),
        }
        assert table[name] == pytest.approx(want), name
        # The inequality the page states holds for the profile (validate() enforces it too).
        assert rc.lease.margin_ms() > 0 and rc.heartbeat_interval_ms < rc.lease.master_lease_ms


def test_fast_profile_controller_keys_are_documented(doc: str) -> None:
    safety = next(b for h, b in _sections(doc).items() if "safety inequality" in h)
    for key, value in PROFILES["fast"]["controller"].items():
        assert key in sm_config.KEYS
        assert f"`{key} = {value}`" in safety, f"fast profile {key}={value} not in the safety section"
    flags = " ".join(PROFILES["fast"]["broker_args"])
    assert f"`{flags}`" in safety


def test_no_config_class_is_left_out() -> None:
    """A new ``class XxxConfig`` in any area must be added to CLASSES (and so to the page)."""
    root = DOC.parents[1]
    found = set()
    for area in ("autoswitch", "broker", "controller", "ha", "epochfile", "pipeline"):
        for path in (root / area).rglob("*.py"):
            if "proto" in path.parts:
                continue
            found |= set(re.findall(r"^class (\w+Config)\b", path.read_text(encoding="utf-8"), flags=re.M))
    assert sorted(found - {c.__name__ for c in CLASSES}) == []


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_ranges_show_units_for_exactly_the_keys_documented_in_bytes(doc: str, cls: type) -> None:
    """``ranges.is_byte_key`` (KiB/MiB/GiB in range errors and the ranges table) names a hand list
    beside ``*_bytes``; the unit column here is the other statement of it, and they must agree."""
    from autoswitch.base.ranges import RANGES, is_byte_key

    rows = _rows(_section_for(doc, cls))
    wrong = [(k, rows[k][2]) for k in RANGES.get(cls.__name__, {})
             if k in rows and (rows[k][2].strip() == "bytes") != is_byte_key(k)]
    assert wrong == [], f"{cls.__name__}: (key, documented unit) disagreeing with ranges.is_byte_key"
