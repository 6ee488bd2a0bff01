"""The admin side of weighted routes (docs/graphs.md#changing-weights-while-serving):
set a model name's weights in every router that splits it, and read its split.

    POST /v2/repository/models/<m>/weights   {"weights": {"v1": 90, "v2": 10}}
    POST /v2/repository/models/<m>/load      {"parameters": {"weights": "<JSON>"}}  (gRPC)
    GET  /v2/models/<m>/traffic              weights, shadows, per-variant counts and
                                             each canary's rollout policy and last decision

A change goes through ``server.repository`` when it relays one (``--workers N``:
every worker applies it, and a worker started later replays it).
"""

from __future__ import annotations

import json
from typing import Any

from mlserve.graph.shadow import ShadowCounts
from mlserve.protocol.errors import InvalidInput, ModelNotFound
from mlserve.server.repository import find_routers
from mlserve.server.serving import Serving

__all__ = ["apply_weights", "change_weights", "traffic_of", "weights_of_body"]


def _splitting(server: Serving, name: str) -> list[Any]:
    """The live routers that serve versions of ``name`` and can weigh them."""
    found = []
    for step in find_routers(server.graph):
        router = getattr(step, "object", None)
        if router is None or getattr(router, "set_weights", None) is None:
            continue
        if any(key.partition(":")[0] == name and ":" in key for key in router.routes):
            found.append(router)
    return found


def apply_weights(server: Serving, name: str, weights: dict[str, Any]) -> dict[str, float]:
    """Set ``name``'s weights in this process's routers; the weights in force."""
    routers = _splitting(server, name)
    if not routers:
        raise ModelNotFound(f"failed to set weights of '{name}': no versions of it are served")
    in_force: dict[str, float] = {}
    for router in routers:
        in_force = router.set_weights(name, weights)
    return in_force


async def change_weights(server: Serving, name: str, weights: dict[str, Any]) -> dict[str, Any]:
    """Set ``name``'s weights here, or in every worker through the relay."""
    if not weights:
        raise InvalidInput(f"weights of '{name}' are an object of variant to weight")
    relay = getattr(server.repository, "set_weights", None)
    if relay is not None:
        await relay(name, weights)
    else:
        apply_weights(server, name, weights)
    return traffic_of(server, name)


def traffic_of(server: Serving, name: str) -> dict[str, Any]:
    """``name``'s weights in force, its shadows and its variants' counts."""
    routers = _splitting(server, name)
    if not routers:
        raise ModelNotFound(f"no versions of '{name}' are served")
    router = routers[0]
    split = router.traffic.to_dict()
    own = {key for key in router.routes if key.partition(":")[0] == name}
    runners = router.shadow_runners()
    return {
        "name": name,
        "weights": split["weights"].get(name, {}),
        "stats": {k: v for k, v in split["stats"].items() if k in own},
        "shadows": {
            key: runners[key].counts.to_dict() if key in runners else ShadowCounts().to_dict()
            for key in split["shadows"].get(name, [])
        },
        # each canary's policy and last decision (docs/graphs.md#rolling-back-or-promoting-a-canary)
        "rollouts": {k: r.to_dict() for k, r in router.rollouts.items() if k in own},
    }


def weights_of_body(name: str, body: object) -> dict[str, Any]:
    """The weights of a weights call's body: ``{"weights": {...}}`` (an object, or its
    JSON text as a load parameter carries it)."""
    weights = body.get("weights") if isinstance(body, dict) else None
    if isinstance(weights, str):
        try:
            weights = json.loads(weights)
        except ValueError:
            raise InvalidInput(f"weights of '{name}': not JSON: {weights[:80]!r}") from None
    if not isinstance(weights, dict) or not weights:
        raise InvalidInput(
            f'weights of \'{name}\': send {{"weights": {{"<version>": <weight>, ...}}}}'
        )
    return weights
