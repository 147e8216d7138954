"""A master whose disk hangs gives its role up (issue 32; docs/broker.md "A disk that hangs").

The store is single-threaded and runs on the event loop, so a write or fsync that does not
return freezes the whole process: no acknowledgement, no heartbeat, no handover. The controllers
would see the master dead only after ``heartbeat_timeout_ms`` (10 s by default), and producers
wait that long. A watchdog thread sees it sooner: the loop marks every disk operation it starts
(``IoWatch``), and when one has not returned after ``disk_stall_timeout_ms`` while this broker is
master, the thread ends the process as a crash would (exit 75): its controller sessions close
and the controllers fail over at once (the crash-fast path), to a replica that was keeping up. An exit alone is not
enough: a thread blocked in the hung disk's write cannot be killed (the kernel waits for the
device), so the process would keep its sockets open until the disk returns. The watchdog first
shuts every socket of the process down (``shutdown``, which the kernel acts on at once): the
controllers see the sessions end, clients and slaves see the connections end, and nothing the
stuck process does afterwards reaches anyone; then it exits.

``decide`` is the rule, pure and driven by explicit facts; the thread only gathers them:

* only a master gives up (a slave that stalls is taken out of the SyncStateSet by its master's
  stall rule, docs/replication.md);
* only when an in-sync slave was making progress, or was caught up, within one stall timeout
  before the operation began: a whole cluster on one slow storage would gain nothing from a move;
* never within ``disk_stall_cooldown_s`` of becoming master: at most one such move per group per
  cool-down, even if the new master's disk is slow too.

The same thread watches the event loop itself: the loop's probe (broker/server.py) marks every
100 ms that it ran; a master whose loop has not run for ``loop_stall_timeout_ms`` (a CPU-bound
bug, a call that blocks the loop's thread in the kernel) gives its role up by the same rule and
the same exit. What it cannot see: a paused VM or a SIGSTOPped process stops this thread too; that
is the heartbeat timeout's. A loop that is slow but runs is the health monitor's
(broker/health.py): it is reported, and the controllers move the role gracefully.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

EXIT_DISK_STALL = 75          # EX_TEMPFAIL: a supervisor restarts it; the restart is unclean
CHECK_INTERVAL_S = 0.05
PAUSE_GAP_S = 1.0             # a longer gap between two looks: the thread itself stood still

FENCE, NOT_MASTER, COOLDOWN, NO_HEALTHY_REPLICA = "fence", "not_master", "cooldown", "no_healthy_replica"


class IoWatch:
    """What the event loop's thread is doing on disk now (written by the loop, read by the watchdog),
    and when the loop last ran its probe (``loop_at``). ``sink`` gets each finished operation's
    duration (the health monitor, broker/health.py)."""

    __slots__ = ("op", "since", "sink", "loop_at")

    def __init__(self, sink: Callable[[str, float, float], None] | None = None) -> None:
        self.op = ""
        self.since = 0.0         # 0: no operation in progress
        self.sink = sink         # (op, duration ms, now)
        self.loop_at = 0.0       # 0: no probe yet (the loop watch is off until the first)

    def begin(self, op: str) -> None:
        self.op = op
        self.since = time.monotonic()

    def end(self) -> None:
        since, self.since = self.since, 0.0
        if self.sink is not None and since > 0:
            now = time.monotonic()
            self.sink(self.op, (now - since) * 1000.0, now)


@dataclass(frozen=True)
class StallFacts:
    now: float
    op: str
    op_since: float                   # 0: none in progress
    is_master: bool
    master_since: float               # when it became master (monotonic)
    replica_progress_at: float | None  # the latest progress (or caught-up) time of an in-sync slave
    loop_at: float = 0.0              # when the event loop last ran its probe (0: never yet)


LOOP = "event_loop"


def stuck(f: StallFacts, timeout_s: float, loop_timeout_s: float = 0.0) -> tuple[str, float] | None:
    """(what, since when) is stuck: a disk operation past ``timeout_s``, else the event loop not
    having run for ``loop_timeout_s`` (a hung disk stops the loop too: the disk is named first)."""
    if timeout_s > 0 and f.op_since > 0 and f.now - f.op_since >= timeout_s:
        return f.op, f.op_since
    if loop_timeout_s > 0 and f.loop_at > 0 and f.now - f.loop_at >= loop_timeout_s:
        return LOOP, f.loop_at
    return None


def judge(f: StallFacts, timeout_s: float, cooldown_s: float,
          loop_timeout_s: float = 0.0) -> tuple[str, str, float] | None:
    """None while nothing is stuck; else (what to do, what is stuck, since when)."""
    s = stuck(f, timeout_s, loop_timeout_s)
    if s is None:
        return None
    what, since = s
    if not f.is_master:
        return NOT_MASTER, what, since
    if f.now - f.master_since < cooldown_s:
        return COOLDOWN, what, since
    limit = loop_timeout_s if what == LOOP else timeout_s
    if f.replica_progress_at is None or since - f.replica_progress_at > limit:
        return NO_HEALTHY_REPLICA, what, since
    return FENCE, what, since


def decide(f: StallFacts, timeout_s: float, cooldown_s: float, loop_timeout_s: float = 0.0) -> str | None:
    """None while nothing is stuck; else what to do about the stuck operation or loop."""
    j = judge(f, timeout_s, cooldown_s, loop_timeout_s)
    return j[0] if j is not None else None


class StallWatchdog:
    """The thread: every 50 ms, the facts, then ``decide``; on FENCE it logs and exits the process."""

    def __init__(self, facts: Callable[[float], StallFacts], timeout_s: float, cooldown_s: float,
                 log: Callable[[], Any], exit_process: Callable[[int], None] = os._exit,
                 shutdown_sockets: Callable[[], int] | None = None, loop_timeout_s: float = 0.0) -> None:
        """``log``: returns the logger to use now (the broker's carries its brokerId once known)."""
        self._shutdown = shutdown_sockets or shutdown_all_sockets
        self._facts = facts
        self.timeout_s = timeout_s
        self.cooldown_s = cooldown_s
        self.loop_timeout_s = loop_timeout_s
        self._log = log
        self._exit = exit_process
        self._stop = threading.Event()
        self._said: tuple[str, float] | None = None      # one line per stuck operation and verdict
        self._last_look: float | None = None
        self._resumed_at: float | None = None            # facts' clock: the first look after a pause
        self._thread = threading.Thread(target=self._run, name="disk-stall-watchdog", daemon=True)

    def start(self) -> None:
        if self.timeout_s > 0 or self.loop_timeout_s > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            if self.check(time.monotonic()):
                return

    def check(self, now: float) -> bool:
        """One look at ``now`` (this thread's clock); True once it ended the process.

        The thread itself can stand still: a SIGSTOPped process, a paused VM, a machine that gave
        it no CPU. Then everything looks stuck for as long as the pause, the loop too, though
        nothing is: after a gap of PAUSE_GAP_S between two looks, stuck times count from the
        first look after it (found by the chaos run: a master resumed after SIGSTOP was
        judged a frozen loop at once)."""
        gap = now - self._last_look if self._last_look is not None else 0.0
        self._last_look = now
        try:
            f = self._facts(now)
        except Exception:  # noqa: BLE001 - a fact read mid-change: look again at the next tick
            return False
        if gap > PAUSE_GAP_S:
            self._resumed_at = f.now
            self._log().info("stall_watch_resumed", gapMs=int(gap * 1000),
                             note="this process stood still: stuck times count from now")
        r = self._resumed_at
        if r is not None:
            f = replace(f, op_since=max(f.op_since, r) if f.op_since > 0 else 0.0,
                        loop_at=max(f.loop_at, r) if f.loop_at > 0 else 0.0)
        j = judge(f, self.timeout_s, self.cooldown_s, self.loop_timeout_s)
        if j is None:
            return False
        verdict, op, since = j
        stuck_ms = int((f.now - since) * 1000)
        event = "loop_stall" if op == LOOP else "disk_stall"
        if verdict == FENCE:
            self._log().critical(f"{event}_self_fence", op=op, stuckMs=stuck_ms,
                                 note="the disk or the event loop did not return: every connection is shut down "
                                      "and the process exits like a crash, so the controllers fail over now; "
                                      "restart it once it is back (its restart is unclean)")
            sys.stdout.flush()
            sys.stderr.flush()
            self._shutdown()
            self._exit(EXIT_DISK_STALL)
            return True
        if self._said != (verdict, since):
            self._said = (verdict, since)
            self._log().error(event, op=op, stuckMs=stuck_ms, action=verdict)
        return False


def shutdown_all_sockets() -> int:
    """shutdown(SHUT_RDWR) every socket of this process (through a duplicate of each descriptor,
    so nothing the blocked threads hold is closed under them); returns how many."""
    n = 0
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        return 0
    for fd in fds:
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            s.shutdown(socket.SHUT_RDWR)
            n += 1
        except OSError:
            pass            # not connected (a listener, a UDP socket): nothing to end
        finally:
            s.close()
    return n
