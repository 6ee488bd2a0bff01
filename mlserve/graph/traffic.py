"""Weighted variants of one model name, sticky by a routing key
(docs/graphs.md#rolling-out-a-new-model).

A router's ``TrafficSplit`` is the one place that knows how a model name's traffic
is shared: the weights of its variants (route keys ``m:v``), in an immutable table
swapped whole on a change, so a request in flight keeps the table it read; and
each variant's counts (``RouteStats``: requests, errors, recent latencies), which
whatever decides on weights (a rollback or promotion policy) reads from here.

A request with a routing key always reaches the same variant for a given weight
set: weighted rendezvous hashing, so changing one weight moves only the keys that
must move. Without a key, a variant is drawn at random by weight.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_right
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from hashlib import blake2b
from random import random
from typing import Any

from mlserve.protocol.errors import InvalidInput

__all__ = [
    "FORCE_HEADER",
    "LATENCY_SAMPLES",
    "ROUTE_KEY_HEADER",
    "ROUTING_HEADERS",
    "RouteStats",
    "TrafficSplit",
    "Variants",
    "header_value",
    "parse_weights",
]

ROUTE_KEY_HEADER = "x-mlserve-route-key"  # the routing key of a sticky split
FORCE_HEADER = "x-mlserve-route"  # asks for a variant; names the variant in the answer
ROUTING_HEADERS = frozenset({ROUTE_KEY_HEADER, FORCE_HEADER})  # what a face hands on
LATENCY_SAMPLES = 1024  # each variant's most recent latencies kept
PICKS_CACHED = 4096  # routing keys whose variant a weight set remembers (keys repeat)


def header_value(headers: Mapping[str, Any], name: str) -> str | None:
    """A header's value, whatever the case of its name (``name`` is lower case; the
    network faces hand names in lower case, so the scan is for the others)."""
    value = headers.get(name)
    if value is None and headers:
        size = len(name)
        for key, found in headers.items():
            if len(key) == size and key.lower() == name:
                value = found
                break
    if value is None:
        return None
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _unit(routing_key: str, variant: str) -> float:
    """A stable number in (0, 1) for a (key, variant) pair: the same in every process."""
    digest = blake2b(f"{variant}\0{routing_key}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


@dataclass(frozen=True, slots=True)
class Variants:
    """The weighted variants of one model name (immutable)."""

    name: str
    keys: tuple[str, ...]  # route keys, ``name:variant``
    weights: tuple[float, ...]
    bounds: tuple[float, ...]  # running sums of the weights, for a random draw
    # routing key -> its variant, for this weight set only (a new set starts empty)
    picks: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, name: str, weights: Mapping[str, float]) -> Variants:
        keys = tuple(sorted(weights))
        values = tuple(float(weights[key]) for key in keys)
        if not any(value > 0 for value in values):
            raise InvalidInput(f"model '{name}': at least one variant needs a weight above 0")
        bounds, total = [], 0.0
        for value in values:
            total += value
            bounds.append(total)
        return cls(name, keys, values, tuple(bounds))

    def pick(self, routing_key: str | None) -> str:
        """The variant of a request: by its routing key when it has one, else at random."""
        if routing_key is None:
            index = bisect_right(self.bounds, random() * self.bounds[-1])
            return self.keys[min(index, len(self.keys) - 1)]
        picked = self.picks.get(routing_key)
        if picked is None:
            picked = self._rendezvous(routing_key)
            if len(self.picks) >= PICKS_CACHED:  # a bound, not an LRU: keys repeat in bursts
                self.picks.clear()
            self.picks[routing_key] = picked
        return picked

    def _rendezvous(self, routing_key: str) -> str:
        """The variant with the highest weighted score for the key: changing one weight
        moves only the keys whose highest score changes owner."""
        best, best_score = self.keys[0], -math.inf
        for key, weight in zip(self.keys, self.weights, strict=True):
            if weight > 0:
                score = -weight / math.log(_unit(routing_key, key))
                if score > best_score:
                    best, best_score = key, score
        return best


class RouteStats:
    """One variant's counts since the server started: requests, errors and the
    latencies (seconds) of its most recent calls."""

    __slots__ = ("errors", "latencies", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.errors = 0
        self.latencies: deque[float] = deque(maxlen=LATENCY_SAMPLES)

    def observe(self, seconds: float, error: bool) -> None:
        """One call (from the loop's thread or a caller's: counts may miss a racing call)."""
        self.requests += 1
        if error:
            self.errors += 1
        self.latencies.append(seconds)

    def to_dict(self) -> dict[str, Any]:
        samples = sorted(self.latencies)
        p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))] if samples else None
        return {"requests": self.requests, "errors": self.errors, "p99_seconds": p99}


def parse_weights(name: str, weights: object) -> dict[str, float]:
    """``{variant: weight}`` checked: a variant is ``v`` or ``name:v``, a weight a
    number of 0 or more; keys come back as route keys (``name:v``)."""
    if not isinstance(weights, Mapping) or not weights:
        raise InvalidInput(f"weights of '{name}' are an object of variant to weight")
    parsed: dict[str, float] = {}
    for variant, weight in weights.items():
        key = str(variant) if ":" in str(variant) else f"{name}:{variant}"
        if key.partition(":")[0] != name:
            raise InvalidInput(f"variant '{variant}' is not a variant of model '{name}'")
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise InvalidInput(f"weight of '{key}' is a number, got {weight!r}")
        if not math.isfinite(weight) or weight < 0:
            raise InvalidInput(f"weight of '{key}' is 0 or more, got {weight!r}")
        parsed[key] = float(weight)
    return parsed


class TrafficSplit:
    """A router's weighted variants (by model name), shadows, and per-variant counts."""

    def __init__(self) -> None:
        self.table: dict[str, Variants] = {}  # replaced whole, never changed in place
        self.shadows: dict[str, tuple[str, ...]] = {}  # primary model name -> shadow route keys
        self.stats: dict[str, RouteStats] = {}
        self._declared: dict[str, dict[str, float]] = {}  # by the routes (add_route, config)
        self._changed: dict[str, dict[str, float]] = {}  # at run time (set_weights)
        self._lock = threading.Lock()  # one writer at a time; readers take no lock

    def declare(
        self, weights: Mapping[str, Mapping[str, float]], shadows: Mapping[str, tuple[str, ...]]
    ) -> None:
        """The weights and shadows the routes declare (at start, and after a load);
        weights changed at run time stay on top of them."""
        with self._lock:
            self._declared = {name: dict(w) for name, w in weights.items()}
            self.shadows = dict(shadows)
            self._publish()

    def set_weights(self, name: str, weights: Mapping[str, float]) -> dict[str, float]:
        """Change some of ``name``'s weights (the others stay): the new table replaces
        the old one in one assignment. Returns the weights now in force."""
        parsed = parse_weights(name, weights)
        with self._lock:
            changed = {**self._changed.get(name, {}), **parsed}
            Variants.of(name, {**self._declared.get(name, {}), **changed})  # refuse all-zero
            self._changed = {**self._changed, name: changed}
            self._publish()
            variants = self.table[name]
            return dict(zip(variants.keys, variants.weights, strict=True))

    def weights(self) -> dict[str, dict[str, float]]:
        """Every model name's weights now in force."""
        table = self.table
        return {
            name: dict(zip(v.keys, v.weights, strict=True)) for name, v in sorted(table.items())
        }

    def _publish(self) -> None:
        merged: dict[str, dict[str, float]] = {}
        for source in (self._declared, self._changed):
            for name, weights in source.items():
                merged.setdefault(name, {}).update(weights)
        table = {}
        for name, weights in merged.items():
            if any(weight > 0 for weight in weights.values()):  # else: as if unweighted
                table[name] = Variants.of(name, weights)
        stats = dict(self.stats)
        for variants in table.values():
            for key in variants.keys:
                stats.setdefault(key, RouteStats())
        self.stats = stats
        self.table = table

    def observe(self, key: str, seconds: float, error: bool) -> None:
        stats = self.stats.get(key)
        if stats is not None:
            stats.observe(seconds, error)

    def to_dict(self) -> dict[str, Any]:
        """The split as the admin routes show it: weights, shadows and counts."""
        return {
            "weights": self.weights(),
            "shadows": {name: list(keys) for name, keys in self.shadows.items()},
            "stats": {key: stats.to_dict() for key, stats in sorted(self.stats.items())},
        }
