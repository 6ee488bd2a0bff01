"""The server's side of rollout decisions (docs/graphs.md#rolling-back-or-promoting-a-canary):
a router's decision reaches every worker and the policy's webhook.

The router applies a decision in its own process at once; under ``--workers N``
the same weights then go through the supervisor's relay as an admin's weight
change does, so every worker (and one started later) serves them. Each worker
judges on its own counts: the first to decide changes the weights everywhere,
which starts a new window in every worker.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from mlserve.graph.rollout import RolloutDecision
from mlserve.server.repository import find_routers
from mlserve.server.serving import Serving

__all__ = ["watch_rollouts"]

logger = logging.getLogger("mlserve.server")

_RELAYS: set[asyncio.Task[None]] = set()  # relays under way (a task needs a reference)
_POSTED: list[bool] = []  # a webhook was given an alert: its sender stops at shutdown


def watch_rollouts(server: Serving) -> None:
    """Hand every router's rollout decisions to the relay and the webhook."""
    watched = False
    for step in find_routers(server.graph):
        hooks = getattr(getattr(step, "object", None), "rollout_hooks", None)
        if hooks is None or any(getattr(h, "func", None) is _decided for h in hooks):
            continue
        hooks.append(partial(_decided, server))
        watched = True
    if watched:
        server.on_shutdown(_close_alerts)


def _decided(server: Serving, decision: RolloutDecision) -> None:
    if decision.webhook:  # the sender (and its pydantic records) loads with the first alert
        from mlserve.monitoring.rollout_alerts import post_decision

        post_decision(decision)
        _POSTED.append(True)
    relay = getattr(server.repository, "set_weights", None)
    if relay is None:  # one process: the router has applied it
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        logger.warning(
            "rollout %s of %s: not relayed (no loop)", decision.decision, decision.variant
        )
        return
    task = loop.create_task(relay(decision.model, dict(decision.weights)))
    _RELAYS.add(task)
    task.add_done_callback(partial(_relayed, decision))


def _close_alerts() -> None:
    if _POSTED:
        from mlserve.monitoring.rollout_alerts import close_rollout_alerts

        _POSTED.clear()
        close_rollout_alerts()


def _relayed(decision: RolloutDecision, task: asyncio.Task[None]) -> None:
    _RELAYS.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.warning(
            "rollout %s of %s: the other workers did not all take it: %s",
            decision.decision,
            decision.variant,
            task.exception(),
        )
