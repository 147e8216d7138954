"""docs/grafana/autoswitch-dashboard.json only queries metrics the processes export."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["controller/server/metrics.py", "broker/metrics.py"]


def exported_names() -> set[str]:
    names = set()
    for src in SOURCES:
        names |= set(re.findall(r'"(autoswitch_[a-z_]+)"', (ROOT / src).read_text()))
    # prometheus_client adds these suffixes to counters and histograms
    return names | {n + s for n in names for s in ("_total", "_bucket", "_count", "_sum")}


def test_every_query_uses_an_exported_metric():
    dash = json.loads((ROOT / "docs/grafana/autoswitch-dashboard.json").read_text())
    known = exported_names()
    used = set()
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            used |= set(re.findall(r"autoswitch_[a-z_]+", t["expr"]))
    assert used and used <= known, sorted(used - known)
