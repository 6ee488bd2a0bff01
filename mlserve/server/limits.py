"""``ServerLimits`` and its flags under their first import path (docs/serving.md showed
``from mlserve.server.limits import ServerLimits``); they live in ``mlserve.core.limits``
(docs/architecture.md#layers)."""

from mlserve.core.limits import (
    DEFAULTS,
    Overloaded,
    RequestTimeout,
    ServerLimits,
    add_limit_flags,
    server_limits,
)

__all__ = [
    "DEFAULTS",
    "Overloaded",
    "RequestTimeout",
    "ServerLimits",
    "add_limit_flags",
    "server_limits",
]
