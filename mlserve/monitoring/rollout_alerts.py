"""Rollout decisions POSTed to their policy's webhook
(docs/graphs.md#rolling-back-or-promoting-a-canary).

The drift alerts' sender does the sending (one background thread per URL, a
bounded queue, retries), so a webhook that is down or slow never delays or fails
the call whose window decided.
"""

from __future__ import annotations

import threading
from typing import Any

from mlserve.graph.rollout import RolloutDecision
from mlserve.monitoring.alerts import DriftAlerts

__all__ = ["close_rollout_alerts", "post_decision", "rollout_alert"]

_SENDERS: dict[str, DriftAlerts] = {}  # by webhook URL
_LOCK = threading.Lock()


def rollout_alert(decision: RolloutDecision) -> dict[str, Any]:
    """The alert's JSON body: the decision, why, and the window's numbers."""
    return {"kind": "rollout", "event": f"rollout-{decision.decision}", **decision.to_dict()}


def post_decision(decision: RolloutDecision) -> None:
    """Queue ``decision`` for its policy's webhook (none: nothing is sent)."""
    url = decision.webhook
    if not url:
        return
    with _LOCK:
        sender = _SENDERS.get(url)
        if sender is None:
            sender = _SENDERS[url] = DriftAlerts(url, kind="rollout")
    sender.post(rollout_alert(decision))


def close_rollout_alerts(timeout: float = 5.0) -> None:
    """Send what is queued (up to ``timeout`` seconds a webhook) and stop the senders."""
    with _LOCK:
        senders = list(_SENDERS.values())
        _SENDERS.clear()
    for sender in senders:
        sender.close(timeout)
