"""The disk-stall rule (broker/stall_watch.py): only a master gives up, only for a disk operation
stuck past the timeout, only when an in-sync slave was keeping up, and never within the
cool-down of becoming master. And the thread acts on it: logs, then exits."""

from __future__ import annotations

import threading

from autoswitch.broker.stall_watch import (
    COOLDOWN,
    EXIT_DISK_STALL,
    FENCE,
    NO_HEALTHY_REPLICA,
    NOT_MASTER,
    IoWatch,
    StallFacts,
    StallWatchdog,
    decide,
)


def facts(**kw) -> StallFacts:
    base = dict(now=1000.0, op="append", op_since=997.0, is_master=True, master_since=100.0,
                replica_progress_at=996.5)
    base.update(kw)
    return StallFacts(**base)


def test_the_rule():
    assert decide(facts(), 2.0, 60.0) == FENCE
    assert decide(facts(op_since=0.0), 2.0, 60.0) is None               # nothing in progress
    assert decide(facts(op_since=998.5), 2.0, 60.0) is None             # stuck 1.5 s < 2 s
    assert decide(facts(), 0.0, 60.0) is None                           # switched off
    assert decide(facts(is_master=False), 2.0, 60.0) == NOT_MASTER
    assert decide(facts(master_since=950.0), 2.0, 60.0) == COOLDOWN     # became master 50 s ago
    assert decide(facts(replica_progress_at=None), 2.0, 60.0) == NO_HEALTHY_REPLICA
    # the slaves had stopped moving before the operation began: a cluster-wide slowness
    assert decide(facts(replica_progress_at=994.0), 2.0, 60.0) == NO_HEALTHY_REPLICA


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def critical(self, event: str, **kw) -> None:
        self.lines.append((event, kw))

    def error(self, event: str, **kw) -> None:
        self.lines.append((event, kw))

    def info(self, event: str, **kw) -> None:
        self.lines.append((event, kw))


def test_the_watchdog_exits_once_a_master_is_stuck():
    log, exited = _Log(), threading.Event()
    codes: list[int] = []
    watch = IoWatch()
    clock = {"now": 10.0}

    def current(now: float) -> StallFacts:
        return StallFacts(clock["now"], watch.op, watch.since, True, 0.0, clock["now"] - 0.5)

    def fake_exit(code: int) -> None:
        codes.append(code)
        exited.set()

    shut: list[int] = []
    dog = StallWatchdog(current, 2.0, 0.0, lambda: log, exit_process=fake_exit,
                        shutdown_sockets=lambda: shut.append(1) or 1)
    watch.begin("fsync")
    watch.since = 10.0
    dog.start()
    try:
        assert not exited.wait(0.3), "exited before the timeout"
        clock["now"] = 12.5
        assert exited.wait(5)
    finally:
        dog.stop()
    assert codes == [EXIT_DISK_STALL] and shut == [1], "sockets shut down before the exit"
    assert log.lines[-1][0] == "disk_stall_self_fence" and log.lines[-1][1]["op"] == "fsync"


def test_a_stuck_slave_is_reported_once_and_stays():
    log = _Log()
    codes: list[int] = []
    f = facts(is_master=False)
    looked = threading.Semaphore(0)

    def current(now: float) -> StallFacts:
        looked.release()
        return f

    dog = StallWatchdog(current, 2.0, 0.0, lambda: log, exit_process=codes.append,
                        shutdown_sockets=lambda: 0)
    dog.start()
    try:
        for _ in range(10):                  # ten looks at the same stuck operation
            assert looked.acquire(timeout=30)
    finally:
        dog.stop()
    assert codes == [] and [e for e, _ in log.lines] == ["disk_stall"]
    assert log.lines[0][1]["action"] == NOT_MASTER


def test_shutdown_all_sockets_ends_connections_of_this_process():
    """In a child process: it shuts down every socket of the process it runs in."""
    import subprocess
    import sys

    code = (
        "import socket\n"
        "from autoswitch.broker.stall_watch import shutdown_all_sockets\n"
        "a, b = socket.socketpair()\n"
        "n = shutdown_all_sockets()\n"
        "b.settimeout(2)\n"
        "print(n, b.recv(1) == b'')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    n, ended = r.stdout.split()
    assert int(n) >= 2 and ended == "True", r.stdout + r.stderr


def test_the_loop_rule():
    """A master whose event loop has not run its probe for the loop timeout gives up by the same
    rule; a stuck disk operation is named first (it stops the loop too)."""
    from autoswitch.broker.stall_watch import LOOP, stuck

    idle = dict(op_since=0.0, loop_at=996.5)        # no disk operation; the loop last ran 3.5 s ago
    assert stuck(facts(**idle), 1.0, 3.0) == (LOOP, 996.5)
    assert decide(facts(**idle, replica_progress_at=996.0), 1.0, 60.0, 3.0) == FENCE
    assert decide(facts(**idle), 1.0, 60.0, 0.0) is None                        # loop watch off
    assert decide(facts(op_since=0.0, loop_at=998.0), 1.0, 60.0, 3.0) is None   # ran 2 s ago
    assert decide(facts(op_since=0.0, loop_at=0.0), 1.0, 60.0, 3.0) is None     # no probe yet
    assert decide(facts(**idle, is_master=False), 1.0, 60.0, 3.0) == NOT_MASTER
    assert decide(facts(**idle, master_since=990.0), 1.0, 60.0, 3.0) == COOLDOWN
    # the slaves had stopped moving more than a loop timeout before the loop stopped
    assert decide(facts(**idle, replica_progress_at=993.0), 1.0, 60.0, 3.0) == NO_HEALTHY_REPLICA
    # a disk operation stuck past its own timeout is what the watchdog names
    assert stuck(facts(op_since=998.0, loop_at=996.0), 1.0, 3.0) == ("append", 998.0)


def test_iowatch_reports_each_finished_operation():
    got: list[tuple[str, float]] = []
    w = IoWatch(sink=lambda op, ms, now: got.append((op, ms)))
    w.begin("fsync")
    w.end()
    w.end()                     # nothing in progress: nothing reported
    assert [op for op, _ in got] == ["fsync"] and got[0][1] >= 0.0


def test_a_pause_of_the_whole_process_is_not_a_stuck_loop():
    """SIGSTOP (or a paused VM) stops the watchdog thread too: on resuming, the loop's mark is as
    old as the pause although the loop is fine. Stuck times count from the first look after a gap
    (the chaos run's stop_master found it)."""
    log, codes = _Log(), []
    loop = {"at": 95.0}
    dog = StallWatchdog(lambda now: facts(op_since=0.0, loop_at=loop["at"], now=now, replica_progress_at=now - 0.5),
                        1.0, 0.0, lambda: log, exit_process=codes.append, shutdown_sockets=lambda: 0,
                        loop_timeout_s=3.0)
    assert not dog.check(95.0)
    # the process stood still for 5 s: the first look after it finds the loop's mark 5 s old
    assert not dog.check(100.0) and codes == []
    assert any(e == "stall_watch_resumed" for e, _ in log.lines)
    # the loop ran again meanwhile: nothing stuck
    loop["at"] = 100.1
    assert not dog.check(100.2)
    # ... and a loop that really stops after the pause is found, counted from its last mark
    for t in (100.25, 100.3, 101.0, 102.0, 102.5, 103.0):
        assert not dog.check(t)
    assert dog.check(103.15) and codes == [EXIT_DISK_STALL]
