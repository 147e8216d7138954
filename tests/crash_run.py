"""Run the `autoswitch` CLI with one crash point armed: ``python tests/crash_run.py POINT ARGS...``.

The process exits at once with code 86 (``os._exit``: no cleanup, no flush, like a SIGKILL) when
the production code passes ``crash_point(POINT)``, after logging ``test_crash_injected``.

``freeze:POINT:FILE`` arms POINT to freeze instead: while FILE exists, the thread that passes the
point sleeps (the kernel holds it, as a call blocked in the kernel would; the other threads run),
at most FREEZE_MAX_S. Tests freeze a broker's event loop this way (point ``broker.loop_probe``)."""

from __future__ import annotations

import os
import sys
import time

CRASH_EXIT_CODE = 86
FREEZE_MAX_S = 120.0


def _die(name: str) -> None:
    from autoswitch.base.log import get_logger

    get_logger("crash_run").error("test_crash_injected", step=name)
    sys.stderr.flush()
    os._exit(CRASH_EXIT_CODE)


def _freezer(path: str):
    def freeze(name: str) -> None:
        if not os.path.exists(path):
            return

        from autoswitch.base.log import get_logger

        get_logger("crash_run").warning("test_freeze_injected", step=name)
        deadline = time.monotonic() + FREEZE_MAX_S
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        get_logger("crash_run").warning("test_freeze_ended", step=name)

    return freeze


def main() -> int:
    from autoswitch.app.cli import main as cli_main
    from autoswitch.base.crashpoints import arm

    point, args = sys.argv[1], sys.argv[2:]
    if point.startswith("freeze:"):
        _, name, path = point.split(":", 2)
        arm(name, _freezer(path))
    else:
        arm(point, _die)
    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
