"""Automatic rollback and promotion of a canary route
(docs/graphs.md#rolling-back-or-promoting-a-canary).

A weighted route may carry a ``RolloutPolicy``. Its ``Rollout`` judges the canary
against the other weighted variants of its model name (the primaries) on the
counts the router's ``TrafficSplit`` keeps: each window of ``min_requests`` canary
calls under one weight set, it compares the canary's error rate and p99 latency
with the primaries' of the same window. A canary worse by more than the policy's
margins goes to weight 0 (rollback); a healthy one under a promote policy gains
``promote_step`` points of the traffic at a time until it has all of it. A weight
change from anywhere else (an admin call, another worker's decision) starts a new
window, so a window always spans one weight set.

The router applies a decision and hands it to its hooks (the server's relay to
the other workers, the alert webhook); this module logs it with its numbers and
counts it for ``/metrics``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from itertools import islice
from typing import Any
from urllib.parse import urlsplit

from mlserve.graph.traffic import RouteStats, TrafficSplit, Variants

__all__ = ["Rollout", "RolloutDecision", "RolloutPolicy", "decision_counts"]

logger = logging.getLogger("mlserve.graph")

_COUNTS: Counter[tuple[str, str, str]] = Counter()  # (model, variant, decision) -> decisions
_COUNTS_LOCK = threading.Lock()


def decision_counts() -> dict[tuple[str, str, str], int]:
    """Every decision of this process so far, by (model, variant, decision)."""
    with _COUNTS_LOCK:
        return dict(_COUNTS)


@dataclass(frozen=True)
class RolloutPolicy:
    """When a canary is rolled back or promoted.

    ``min_requests``: canary calls in a window before it is judged. A canary is
    rolled back when its error rate exceeds the primaries' by more than
    ``max_error_rate_increase`` (a fraction: 0.05 is 5 points), or when its p99
    latency is more than ``max_p99_ratio`` times theirs and more than
    ``max_p99_increase_ms`` above it (each None: not checked; with both set, both
    must be exceeded, so sub-millisecond noise never rolls back). ``promote_step``:
    percent points of the traffic a healthy canary gains at a time (0: never
    promoted), once it served ``promote_every`` calls (0: ``min_requests``) and
    ``promote_every_seconds`` passed since the last weight change. ``alert_webhook``:
    a URL each decision is POSTed to.
    """

    min_requests: int = 100
    max_error_rate_increase: float = 0.05
    max_p99_ratio: float | None = 2.0
    max_p99_increase_ms: float | None = 10.0
    promote_step: float = 0.0
    promote_every: int = 0
    promote_every_seconds: float = 0.0
    alert_webhook: str | None = None

    def __post_init__(self) -> None:
        _number(self.min_requests, "min_requests", 1, whole=True)
        _number(self.max_error_rate_increase, "max_error_rate_increase", 0.0)
        if self.max_p99_ratio is not None:
            _number(self.max_p99_ratio, "max_p99_ratio", 1.0)
        if self.max_p99_increase_ms is not None:
            _number(self.max_p99_increase_ms, "max_p99_increase_ms", 0.0)
        _number(self.promote_step, "promote_step", 0.0)
        if self.promote_step > 100:
            raise ValueError(
                f"rollout policy: promote_step is at most 100, got {self.promote_step}"
            )
        _number(self.promote_every, "promote_every", 0, whole=True)
        _number(self.promote_every_seconds, "promote_every_seconds", 0.0)
        webhook = self.alert_webhook
        if webhook is not None and not (
            isinstance(webhook, str) and webhook.startswith(("http://", "https://"))
        ):
            raise ValueError(f"rollout policy: alert_webhook is an http(s) URL, got {webhook!r}")

    @classmethod
    def of(cls, value: RolloutPolicy | Mapping[str, Any]) -> RolloutPolicy:
        """A policy from itself or its dict (a graph's description, a config)."""
        if isinstance(value, RolloutPolicy):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(
                f"a rollout policy is a RolloutPolicy or a dict, got {type(value).__name__}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"rollout policy: unknown options {unknown}, known: {sorted(known)}")
        return cls(**value)

    def to_dict(self) -> dict[str, Any]:
        """Every option (what a graph's description writes)."""
        return asdict(self)


def _number(value: object, name: str, low: float, whole: bool = False) -> None:
    kinds = int if whole else int | float
    if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
        kind = "a whole number" if whole else "a number"
        raise ValueError(f"rollout policy: {name} is {kind}, got {value!r}")
    if value < low:
        raise ValueError(f"rollout policy: {name} is {low} or more, got {value!r}")


@dataclass
class RolloutDecision:
    """A rollback or a promotion, and the numbers that caused it."""

    model: str
    variant: str  # the canary's route key
    decision: str  # "rollback" or "promote"
    reason: str
    weights: dict[str, float]  # set by the decision
    previous: dict[str, float]  # in force before it
    canary: dict[str, Any]  # the window's numbers
    primary: dict[str, Any]
    webhook: str | None = None
    time: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def to_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found.pop("webhook")
        return found


def _window(stats: list[tuple[RouteStats, int, int]]) -> dict[str, Any]:
    """Requests, errors, error rate and p99 (ms) of calls since each mark."""
    requests = errors = 0
    samples: list[float] = []
    for route, marked, marked_errors in stats:
        n = route.requests - marked
        requests += n
        errors += route.errors - marked_errors
        latencies = route.latencies
        take = min(max(n, 0), len(latencies))
        samples.extend(islice(latencies, len(latencies) - take, None))
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000 if samples else None
    rate = errors / requests if requests > 0 else 0.0
    return {
        "requests": requests,
        "errors": errors,
        "error_rate": round(rate, 6),
        "p99_ms": None if p99 is None else round(p99, 3),
    }


class Rollout:
    """Judges one canary route of a router by its policy (one per canary)."""

    def __init__(self, key: str, policy: RolloutPolicy) -> None:
        self.key = key
        self.name = key.partition(":")[0]
        self.policy = policy
        self.last: RolloutDecision | None = None
        self._variants: Variants | None = None  # the weight set of the window
        self._marks: dict[str, tuple[int, int]] = {}  # route key -> (requests, errors) at start
        self._changed_at = 0.0  # when the weight set came (monotonic)
        self._changed_requests = 0  # the canary's requests then
        self._lock = threading.Lock()

    def judge(self, split: TrafficSplit) -> RolloutDecision | None:
        """A decision when the canary's window is complete and calls for one."""
        if not self._lock.acquire(blocking=False):  # another call is judging
            return None
        try:
            return self._judge(split)
        finally:
            self._lock.release()

    def _judge(self, split: TrafficSplit) -> RolloutDecision | None:
        variants = split.table.get(self.name)
        canary = split.stats.get(self.key)
        if variants is None or canary is None or self.key not in variants.keys:
            return None
        if variants is not self._variants:
            if variants != self._variants:  # a new weight set: a new window
                self._variants = variants
                self._changed_at = time.monotonic()
                self._changed_requests = canary.requests
                self._mark(split, variants)
                return None
            self._variants = variants  # the same weights republished (a load elsewhere)
        marked, _ = self._marks[self.key]
        policy = self.policy
        if canary.requests - marked < policy.min_requests:
            return None
        weights = dict(zip(variants.keys, variants.weights, strict=True))
        primaries = [k for k, w in weights.items() if k != self.key and w > 0]
        if weights[self.key] <= 0 or not primaries:  # out of the split, or all of it
            self._mark(split, variants)
            return None
        numbers = self._numbers(split, primaries)
        reason = self._unhealthy(*numbers)
        if reason:
            return self._decide("rollback", reason, {self.key: 0.0}, weights, numbers)
        promote_every = policy.promote_every or policy.min_requests
        due = (
            policy.promote_step > 0
            and canary.requests - self._changed_requests >= promote_every
            and time.monotonic() - self._changed_at >= policy.promote_every_seconds
        )
        if not due:
            self._mark(split, variants)
            return None
        raised = self._raised(weights, primaries)
        share = raised[self.key]
        reason = (
            f"healthy for {canary.requests - self._changed_requests} calls: "
            f"{share:g}% of the traffic" + (" (fully promoted)" if share >= 100 else "")
        )
        return self._decide("promote", reason, raised, weights, numbers)

    def _mark(self, split: TrafficSplit, variants: Variants) -> None:
        stats = split.stats
        self._marks = {
            key: (stats[key].requests, stats[key].errors) for key in variants.keys if key in stats
        }

    def _numbers(
        self, split: TrafficSplit, primaries: list[str]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        def marked(keys: list[str]) -> list[tuple[RouteStats, int, int]]:
            return [(split.stats[k], *self._marks.get(k, (0, 0))) for k in keys if k in split.stats]

        return _window(marked([self.key])), _window(marked(primaries))

    def _unhealthy(self, canary: dict[str, Any], primary: dict[str, Any]) -> str:
        """Why the canary is worse than the primaries by more than the margins ("" if not)."""
        policy = self.policy
        increase = canary["error_rate"] - primary["error_rate"]
        if increase > policy.max_error_rate_increase:
            margin = policy.max_error_rate_increase
            return (
                f"error rate {canary['error_rate']:.2%} vs the primary's "
                f"{primary['error_rate']:.2%} (more than {margin:.2%} above)"
            )
        ours, theirs = canary["p99_ms"], primary["p99_ms"]
        ratio, extra = policy.max_p99_ratio, policy.max_p99_increase_ms
        if ours is None or theirs is None or (ratio is None and extra is None):
            return ""
        if (ratio is None or ours > theirs * ratio) and (extra is None or ours - theirs > extra):
            limits = [] if ratio is None else [f"{ratio:g}x"]
            limits += [] if extra is None else [f"+{extra:g} ms"]
            return f"p99 {ours:g} ms vs the primary's {theirs:g} ms (over {' and '.join(limits)})"
        return ""

    def _raised(self, weights: dict[str, float], primaries: list[str]) -> dict[str, float]:
        """The weights with the canary ``promote_step`` points of the traffic higher
        (in percent: the primaries share the rest as they shared it before)."""
        total = sum(weights.values())
        share = min(100.0, round(weights[self.key] * 100 / total + self.policy.promote_step, 6))
        rest = sum(weights[k] for k in primaries)
        raised = {self.key: share}
        for key in primaries:
            raised[key] = round((100.0 - share) * weights[key] / rest, 6)
        return raised

    def _decide(
        self,
        decision: str,
        reason: str,
        weights: dict[str, float],
        previous: dict[str, float],
        numbers: tuple[dict[str, Any], dict[str, Any]],
    ) -> RolloutDecision:
        canary, primary = numbers
        found = RolloutDecision(
            self.name,
            self.key,
            decision,
            reason,
            weights,
            previous,
            canary,
            primary,
            self.policy.alert_webhook,
        )
        self.last = found
        self._variants = None  # the next call starts a window on the new weights
        with _COUNTS_LOCK:
            _COUNTS[(self.name, self.key, decision)] += 1
        level = logging.WARNING if decision == "rollback" else logging.INFO
        logger.log(
            level,
            "rollout %s of %s: %s; weights %s -> %s; canary %s, primary %s",
            decision,
            self.key,
            reason,
            previous,
            weights,
            canary,
            primary,
        )
        return found

    def to_dict(self) -> dict[str, Any]:
        """The policy and the last decision (GET /v2/models/<m>/traffic); the webhook
        shown by its host only (its path or query may hold a token)."""
        policy, last = self.policy.to_dict(), self.last
        if policy["alert_webhook"]:
            url = urlsplit(policy["alert_webhook"])
            policy["alert_webhook"] = f"{url.scheme}://{url.hostname}{_port(url.port)}/..."
        return {"policy": policy, "last_decision": last and last.to_dict()}


def _port(port: int | None) -> str:
    return "" if port is None else f":{port}"
