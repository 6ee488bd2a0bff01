"""Prometheus metrics of S14, in mlserve's own registry (served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

__all__ = ["REGISTRY"]

REGISTRY = CollectorRegistry(auto_describe=True)
