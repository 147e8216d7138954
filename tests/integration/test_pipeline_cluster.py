"""The audit runs unchanged on a real Spark standalone cluster (master + worker started here from
the installed pyspark, on 127.0.0.1, ended by PID), through the CLI, on JSON-lines exports."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from autoswitch.pipeline.generate import generate

from tests.pipeline_fixtures import TEST_CONF, TEST_JAVA_OPTS
from tests.procs import HOST, free_port, wait_port

pytestmark = [pytest.mark.integration, pytest.mark.spark]

def _spark_class() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


def _start(name: str, args: list[str], log_dir: Path, env: dict) -> subprocess.Popen:
    with open(log_dir / f"{name}.log", "wb") as f:
        # spark-class execs java, so this PID is the JVM's
        return subprocess.Popen([str(_spark_class()), *args], stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (d / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
    return out


def _stop(p: subprocess.Popen) -> None:
    kids = _children(p.pid)  # executor JVMs the worker launched
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
    for k in kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(k, signal.SIGKILL)


def _wait_log(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, path.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
    raise TimeoutError(f"{text!r} not in {path} after {timeout}s")


def test_audit_on_a_standalone_cluster(tmp_path):
    root = tmp_path / "data"
    m = generate(root, groups=2, messages=400, seed=9, plant_losses=2, plant_divergences=1, plant_duplicates=1,
                 fmt="jsonl")
    logs = tmp_path / "spark-logs"
    logs.mkdir()
    env = dict(os.environ, SPARK_LOCAL_IP=HOST, SPARK_NO_DAEMONIZE="1", PYSPARK_PYTHON=sys.executable,
               SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_DAEMON_JAVA_OPTS=TEST_JAVA_OPTS)
    mport, mui, wport, wui = free_port(), free_port(), free_port(), free_port()
    master = _start("master", ["org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(mport),
                               "--webui-port", str(mui)], logs, env)
    worker = None
    try:
        wait_port(mport, timeout=90, proc=master)
        url = f"spark://{HOST}:{mport}"
        worker = _start("worker", ["org.apache.spark.deploy.worker.Worker", "--host", HOST, "--port", str(wport),
                                   "--webui-port", str(wui), "--cores", "2", "--memory", "1g",
                                   "--work-dir", str(tmp_path / "work"), url], logs, env)
        _wait_log(logs / "master.log", "Registering worker", master, 90)
        out = tmp_path / "out"
        r = subprocess.run([sys.executable, "-m", "autoswitch", "pipeline", "audit", "--acks", str(root / "acks.jsonl"),
                            "--logs", str(root / "logs"), "--events", str(root / "events"), "--out", str(out),
                            "--master", url, "--shuffle-partitions", "2", "--conf", "spark.executor.memory=512m",
                            "--conf", "spark.cores.max=2", *[a for k, v in TEST_CONF.items() for a in ("--conf", f"{k}={v}")],
                            "--json"],
                           capture_output=True, text=True, timeout=240, env=env)
        assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-4000:]
        res = json.loads(r.stdout.strip().splitlines()[-1])["result"]
        assert res["verdict"] == "LOST_ACKED_MESSAGES"
        assert res["counts"] == {"lost": 2, "lost_by_operator": 0, "moved": 0, "replica_missing": 6, "divergence": 1,
                                 "duplicates": 1}
        assert res["masters"] == m["final_masters"]
        assert json.loads((out / "verdict.json").read_text())["counts"] == res["counts"]
        assert '"event":"progress"' in r.stderr                      # stage progress on stderr
        master_log = (logs / "master.log").read_text(errors="replace")
        assert "Registering app autoswitch-audit" in master_log
        assert "Launching executor" in master_log or "Launching executor" in (logs / "worker.log").read_text()
    finally:
        if worker is not None:
            _stop(worker)
        _stop(master)
