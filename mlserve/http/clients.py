"""Fairness between client addresses on the lean HTTP face: how many connections
one address holds, and, when a rate is set, how fast it may send requests (a
token bucket per address). One address cannot fill the connection cap nor take
every turn of the event loop (docs/security.md#fairness-between-clients).
"""

from __future__ import annotations

import math

from mlserve.core.events import Response

__all__ = ["Clients", "RateBucket", "TOO_MANY_CONNECTIONS", "rate_limited"]

TOO_MANY_CONNECTIONS = Response(
    {"error": "too many connections from this address"}, 429, headers={"Retry-After": "1"}
)


def rate_limited(wait: float) -> Response:
    """The 429 of a request over its address's rate, with when the next may come."""
    retry = str(max(1, math.ceil(wait)))
    message = {"error": "too many requests from this address"}
    return Response(message, 429, headers={"Retry-After": retry})


class RateBucket:
    """Requests one address may still send now: ``rate`` a second come back, up to
    ``burst`` (one second's worth, at least one request)."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.burst = max(1.0, rate)
        self.tokens = self.burst
        self.stamp = now

    def take(self, now: float) -> float:
        """0 when a request may go now (and it is counted), else seconds until one may."""
        tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if tokens >= 1.0:
            self.tokens = tokens - 1.0
            return 0.0
        self.tokens = tokens
        return (1.0 - tokens) / self.rate

    def full(self, now: float) -> bool:
        return self.tokens + (now - self.stamp) * self.rate >= self.burst


class Clients:
    """Connections and rate buckets by client address (touched per connection; a
    bucket per request only when a rate is set)."""

    def __init__(self, per_client: int, rate: float) -> None:
        self.per_client = per_client
        self.rate = rate
        self.connections: dict[str, int] = {}
        self.buckets: dict[str, RateBucket] = {}

    def admit(self, address: str) -> bool:
        """Count a new connection from ``address``; False (not counted) past the limit."""
        held = self.connections.get(address, 0)
        if held >= self.per_client:
            return False
        self.connections[address] = held + 1
        return True

    def release(self, address: str) -> None:
        held = self.connections[address] - 1
        if held:
            self.connections[address] = held
        else:
            del self.connections[address]

    def bucket(self, address: str, now: float) -> RateBucket | None:
        """The address's bucket (shared by its connections), None when no rate is set."""
        if not self.rate:
            return None
        bucket = self.buckets.get(address)
        if bucket is None:
            bucket = self.buckets[address] = RateBucket(self.rate, now)
        return bucket

    def prune(self, now: float) -> None:
        """Forget the buckets of addresses gone long enough for theirs to be full again
        (reconnecting gives no fresh burst before that)."""
        if self.buckets:
            gone = [
                address
                for address, bucket in self.buckets.items()
                if address not in self.connections and bucket.full(now)
            ]
            for address in gone:
                del self.buckets[address]
