"""Run the `autoswitch` CLI with one crash point armed: ``python tests/crash_run.py POINT ARGS...``.

The process exits at once with code 86 (``os._exit``: no cleanup, no flush, like a SIGKILL) when
the production code passes ``crash_point(POINT)``, after logging ``test_crash_injected``."""

from __future__ import annotations

import os
import sys

CRASH_EXIT_CODE = 86


def _die(name: str) -> None:
    from autoswitch.base.log import get_logger

    get_logger("crash_run").error("test_crash_injected", step=name)
    sys.stderr.flush()
    os._exit(CRASH_EXIT_CODE)


def main() -> int:
    from autoswitch.app.cli import main as cli_main
    from autoswitch.base.crashpoints import arm

    point, args = sys.argv[1], sys.argv[2:]
    arm(point, _die)
    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
