from __future__ import annotations

import importlib.util
import os

import pytest
from hypothesis import settings

from autoswitch.base.log import configure as configure_logging
from tests.procs import ProcGroup, free_port

# The default suite draws the same property-test examples every run: it must not pass or fail by
# luck. HYPOTHESIS_PROFILE=explore draws fresh ones (a failure prints the example to keep).
settings.register_profile("suite", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))

# What a logger's first use would do, done before any test: a first use inside structlog's
# capture_logs() configured logging afresh and dropped the capture, so a test that asserts on a
# log line passed only after another test had logged.
configure_logging(os.environ.get("AUTOSWITCH_LOG_LEVEL") or "WARNING", stdlib=False)


@pytest.fixture
def procs(tmp_path, request):
    """Real processes for one test; ended by PID at teardown, logs shown on failure."""
    group = ProcGroup(tmp_path / "logs")
    yield group
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(group.dump_logs())
    group.stop_all()


@pytest.fixture(scope="session")
def postgres_url():
    """One throw-away PostgreSQL server for the session (autoswitch/app/pgserver.py); tests that
    share it keep apart by their own lock_name (FailoverCluster does)."""
    from autoswitch.app.pgserver import PostgresServer
    from tests.procs import free_port

    server = PostgresServer(free_port()).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def mariadb_url():
    """One throw-away MariaDB server for the session (autoswitch/app/mariadbserver.py)."""
    from autoswitch.app.mariadbserver import MariaDBServer
    from tests.procs import free_port

    server = MariaDBServer(free_port()).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def zookeeper_url():
    """One throw-away ZooKeeper server for the session (autoswitch/app/zkserver.py), under a chroot."""
    from autoswitch.app.zkserver import ZooKeeperServer
    from tests.procs import free_port

    server = ZooKeeperServer([free_port()]).start()
    try:
        yield server.url + "/autoswitch-tests"
    finally:
        server.stop()


@pytest.fixture(scope="session")
def etcd_url():
    """One throw-away single-member etcd for the session (autoswitch/app/etcdserver.py)."""
    from autoswitch.app.etcdserver import EtcdServer
    from tests.procs import free_port

    server = EtcdServer(free_port(), free_port()).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def store_url(request, tmp_path):
    """The SQL store URL for a test parametrized with ``backend``: none for Raft, a SQLite file in
    the test's directory, or the session's PostgreSQL, MariaDB, etcd or ZooKeeper."""
    backend = request.getfixturevalue("backend")
    if backend == "postgresql":
        return request.getfixturevalue("postgres_url")
    if backend == "etcd":
        return request.getfixturevalue("etcd_url")
    if backend == "mariadb":
        return request.getfixturevalue("mariadb_url")
    if backend == "zookeeper":
        return request.getfixturevalue("zookeeper_url")
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'controller-store.db'}"
    return None


@pytest.fixture
def port_factory():
    return free_port


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


# The pipeline is an optional extra: without pyspark/pyarrow/pandas the core suite still collects and
# runs, and every test marked `pipeline` or `spark` is skipped with this reason (never silently).
PIPELINE_DEPS = ("pyspark", "pyarrow", "pandas")
MISSING_PIPELINE_DEPS = [m for m in PIPELINE_DEPS if importlib.util.find_spec(m) is None]


def pytest_collection_modifyitems(config, items):
    # Tests that use the session-wide SparkSession run first: starting its JVM forks this process,
    # and a fork while gRPC threads of earlier in-process tests are busy can leave the child
    # unable to exec (gRPC skips its fork handlers then; seen as JAVA_GATEWAY_EXITED under load).
    items.sort(key=lambda item: 0 if "spark" in getattr(item, "fixturenames", ()) else 1)
    if not MISSING_PIPELINE_DEPS:
        return
    skip = pytest.mark.skip(reason=f"the pipeline extra is not installed (missing {', '.join(MISSING_PIPELINE_DEPS)}): "
                                   "pip install -e '.[pipeline]'")
    for item in items:
        if item.get_closest_marker("pipeline") or item.get_closest_marker("spark"):
            item.add_marker(skip)
