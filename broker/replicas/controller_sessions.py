"""One session stream per controller node, held for the broker's whole life.

The stream carries nothing after it opens; its end is the message. When this process dies the
kernel closes its sockets, every controller node sees its session end at once, and if this
broker's writes wait for every SyncStateSet member (ack mode ``all``) the controllers fail it
over without waiting for the heartbeat timeout (docs/controller.md "Crash-fast failover").
Heartbeats and the master lease are unchanged and independent of these streams.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from autoswitch.controller.api import BrokerControllerApi, ControllerCallFailed

from autoswitch.base import supervise
from autoswitch.base.backoff import Backoff
from autoswitch.base.log import get_logger
from autoswitch.base.waits import cancel_and_wait, wait_event


class ControllerSessions:
    def __init__(self, api: BrokerControllerApi, controllers: tuple[str, ...], cluster: str, group: str,
                 ack_mode: str, backoff_min_s: float, backoff_max_s: float, incarnation: str = "",
                 exit_process: Callable[[int], None] | None = None) -> None:
        """``exit_process``: how a session task that ended under us ends the process (supervise)."""
        self.api = api
        self.exit_process = exit_process
        self.incarnation = incarnation      # this process, as in its heartbeats
        self.controllers = controllers
        self.cluster, self.group, self.ack_mode = cluster, group, ack_mode
        self.backoff_min_s, self.backoff_max_s = backoff_min_s, backoff_max_s
        self.broker_id: int | None = None
        self._id_known = asyncio.Event()
        self._tasks: dict[str, asyncio.Task] = {}       # controller address -> its session task
        self._stopping = False
        self.open: set[str] = set()         # controller addresses holding our session now
        self.opened = 0                     # sessions opened so far (a reconnect counts again)
        self._log = get_logger("broker.controller_sessions", group=group, cluster=cluster)

    def start(self) -> None:
        for addr in self.controllers:
            self._open(addr)

    def _open(self, addr: str) -> None:
        """A task holding ``addr``'s session until stop() or that controller leaves the list."""
        task = asyncio.get_running_loop().create_task(self._hold(addr), name=f"controller-session-{addr}")
        self._tasks[addr] = task
        supervise.essential_task(task, task.get_name(),
                                 lambda: not self._stopping and self._tasks.get(addr) is task, self._log,
                                 self.exit_process)

    def set_controllers(self, controllers: tuple[str, ...]) -> None:
        """The controllers' membership changed: hold a session with exactly these nodes."""
        self.controllers = controllers
        if not self._tasks:
            return                       # not started: start() opens the new list
        for addr in [a for a in self._tasks if a not in controllers]:
            self._tasks.pop(addr).cancel()
        for addr in controllers:
            if addr not in self._tasks:
                self._open(addr)

    def set_broker_id(self, broker_id: int) -> None:
        """Sessions open once registration has given the brokerId (the certificate binds it)."""
        self.broker_id = broker_id
        self._id_known.set()

    async def stop(self) -> None:
        self._stopping = True
        await cancel_and_wait(list(self._tasks.values()), timeout_s=5)
        self._tasks = {}

    async def _hold(self, addr: str) -> None:
        backoff = Backoff(self.backoff_min_s, self.backoff_max_s)
        while True:
            if self.broker_id is None:
                await wait_event(self._id_known, 1.0)
                continue
            bid = self.broker_id
            try:
                async for tracked in self.api.broker_session(addr, self.cluster, self.group, bid, self.ack_mode,
                                                             self.incarnation):
                    self.open.add(addr)
                    self.opened += 1
                    backoff.reset()
                    self._log.info("controller_session_opened", controller=addr, brokerId=bid, tracked=tracked,
                                   ackMode=self.ack_mode)
                self._log.info("controller_session_ended", controller=addr, brokerId=bid)
            except asyncio.CancelledError:
                raise
            except ControllerCallFailed as e:
                self._log.info("controller_session_refused", controller=addr, brokerId=bid, code=e.reply_name,
                               message=e.message)
            except Exception as e:  # noqa: BLE001 - the network; heartbeats keep us correct meanwhile
                self._log.info("controller_session_failed", controller=addr, brokerId=bid, error=repr(e)[:300])
            finally:
                self.open.discard(addr)
            await asyncio.sleep(backoff.next())
