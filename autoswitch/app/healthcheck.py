"""`autoswitch healthcheck`: the container image's HEALTHCHECK (and any probe without curl).

Asks one process's observability port (``metrics_listen``) and exits 0 when it answers 200,
1 otherwise, with one line saying what it got. ``/healthz`` (the default) is liveness: the
process serves; ``--ready`` asks ``/readyz`` instead (a slave still catching up is alive but not
ready: restarting it for that would only make it start over).
"""

from __future__ import annotations

import argparse
import http.client
import os

from autoswitch.app.cliargs import hostport
from autoswitch.base.addr import split_hostport

DEFAULT = os.environ.get("AUTOSWITCH_HEALTHCHECK", "127.0.0.1:9890")


def register(sub: argparse._SubParsersAction, admin_sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("healthcheck", help="exit 0 when a process's /healthz (or /readyz) answers 200")
    p.add_argument("--metrics", type=hostport, default=DEFAULT,
                   help="HOST:PORT of its metrics_listen (env AUTOSWITCH_HEALTHCHECK; default 127.0.0.1:9890)")
    p.add_argument("--ready", action="store_true", help="ask /readyz instead of /healthz")
    p.add_argument("--timeout-s", type=float, default=3.0)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    host, port = split_hostport(args.metrics)
    path = "/readyz" if args.ready else "/healthz"
    conn = http.client.HTTPConnection(host.strip("[]"), port, timeout=max(0.1, min(args.timeout_s, 60.0)))
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read(512).decode("utf-8", "replace").strip()
    except (OSError, http.client.HTTPException) as e:
        print(f"unhealthy: {args.metrics}{path}: {type(e).__name__}: {e}")
        return 1
    finally:
        conn.close()
    print(f"{'healthy' if r.status == 200 else 'unhealthy'}: {args.metrics}{path}: {r.status} {body[:200]}")
    return 0 if r.status == 200 else 1
