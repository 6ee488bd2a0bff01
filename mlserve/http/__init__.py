"""The REST face: an ASGI app over a GraphServer."""

from __future__ import annotations

from mlserve.http.app import create_app

__all__ = ["create_app"]
