"""The suite collects without the optional extras (sql, zookeeper, pipeline): a module that needs
one is skipped with the reason, never an import error (issue 60, item 7: the SQL and ZooKeeper
store tests failed to import without SQLAlchemy / kazoo)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("sqlalchemy", "kazoo", "psycopg", "pymysql", "pyspark", "pandas", "pyarrow")


def test_the_suite_collects_with_every_extra_missing():
    code = ("import sys\n"
            f"for m in {EXTRAS!r}: sys.modules[m] = None   # import fails as if not installed\n"
            "import pytest\n"
            "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'tests']))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "error" not in r.stdout.lower().split("short test summary info")[-1], r.stdout[-3000:]
