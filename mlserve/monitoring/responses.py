"""The network faces' response counts, read by ``/metrics`` as
``mlserve_http_responses_total`` and ``mlserve_grpc_responses_total``
(docs/monitoring.md#prometheus-metrics).

A face counts each answer in a plain dict of its own (``counts[key] =
counts.get(key, 0) + 1``, on its event loop's thread): a ``prometheus_client``
child would take a lock and several calls per request. The metrics' collector
sums the dicts when scraped. Nothing here imports ``prometheus_client``, so a
face that counts loads no more than before.
"""

from __future__ import annotations

import threading
from typing import TypeVar

__all__ = [
    "HTTP_METHODS",
    "GrpcKey",
    "HttpKey",
    "grpc_counts",
    "grpc_totals",
    "http_counts",
    "http_totals",
    "method_label",
]

HttpKey = tuple[int, str]  # (status code, request method)
GrpcKey = tuple[str, str, str]  # (service, method, gRPC code name)

# Every face's dict, for the process's life: a counter never goes back when a face stops.
_http: list[dict[HttpKey, int]] = []
_grpc: list[dict[GrpcKey, int]] = []
_lock = threading.Lock()
# The methods a label names; any other counts as "other" (a client picks the method:
# the label's values stay few whatever it sends).
HTTP_METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"))
_K = TypeVar("_K", HttpKey, GrpcKey)


def http_counts() -> dict[HttpKey, int]:
    """A new dict for one HTTP face to count its answers in."""
    counts: dict[HttpKey, int] = {}
    with _lock:
        _http.append(counts)
    return counts


def grpc_counts() -> dict[GrpcKey, int]:
    """A new dict for one gRPC server (or its auth interceptor) to count its calls in."""
    counts: dict[GrpcKey, int] = {}
    with _lock:
        _grpc.append(counts)
    return counts


def method_label(method: str) -> str:
    """The ``method`` label of a request's method."""
    return method if method in HTTP_METHODS else "other"


def http_totals() -> dict[HttpKey, int]:
    """Every HTTP face's counts, summed."""
    with _lock:
        found = list(_http)
    return _summed(found)


def grpc_totals() -> dict[GrpcKey, int]:
    """Every gRPC server's counts, summed."""
    with _lock:
        found = list(_grpc)
    return _summed(found)


def _summed(dicts: list[dict[_K, int]]) -> dict[_K, int]:
    totals: dict[_K, int] = {}
    for counts in dicts:
        for key, count in counts.copy().items():  # a copy: a face may add a key meanwhile
            totals[key] = totals.get(key, 0) + count
    return totals
