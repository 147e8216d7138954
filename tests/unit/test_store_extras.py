"""Issue 31, item 4 (packaging): the etcd and ZooKeeper store backends start without the `sql` extra.
They used to import store/sql.py (for two record types), which loads SQLAlchemy. Each is imported
and built in a fresh interpreter in which importing SQLAlchemy fails, as in a venv that has
only that backend's extra installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

BLOCK_SQL = """
import importlib.abc, sys
class NoSql(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "sqlalchemy" or name.startswith("sqlalchemy."):
            raise ImportError("sqlalchemy is not installed here")
        return None
sys.meta_path.insert(0, NoSql())
"""


@pytest.mark.parametrize("backend,url", [("etcd", "etcd://127.0.0.1:1"), ("zookeeper", "zookeeper://127.0.0.1:1/x")])
def test_a_backend_starts_without_the_sql_extra(backend, url):
    code = BLOCK_SQL + (
        "from autoswitch.controller.store.base import open_store\n"
        "from autoswitch.controller.store.config import StoreBackendConfig\n"
        f"s = open_store({backend!r}, StoreBackendConfig(url={url!r}))\n"
        "print('sqlalchemy' in sys.modules, s.kind)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", backend], out.stdout


def test_the_block_is_real():
    """The same interpreter set-up cannot load the SQL backend: the test above would see it."""
    code = BLOCK_SQL + "import autoswitch.controller.store.sql\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "sqlalchemy is not installed here" in out.stderr
