"""gRPC health checking (grpc.health.v1) on a process's gRPC server. Apart from the Prometheus
endpoints (observe.py): a broker serves health checks with metrics off, and then loads no
Prometheus client at start (docs/operations.md "Process start")."""

from __future__ import annotations

from typing import Any


def add_grpc_health(server: Any) -> Any:
    """gRPC health checking (grpc.health.v1) on ``server``; returns the servicer (set_status on it)."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    svc = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(svc, server)
    return svc, health_pb2
