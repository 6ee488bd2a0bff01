"""Triton's system shared-memory extension (docs/protocol.md#system-shared-memory):
its REST routes, and the tensors of an inference read from and written to regions.

    GET  /v2/systemsharedmemory[/region/<name>]/status
    POST /v2/systemsharedmemory/region/<name>/register     {"key", "offset", "byte_size"}
    POST /v2/systemsharedmemory[/region/<name>]/unregister

and their ``/v2/cudasharedmemory`` twins, where no region is ever registered
(mlserve maps no GPU memory): status lists none, unregister does nothing, and
register is a 501.

The routes answer only under explicit model control (and, with authentication on,
an admin token: mlserve.server.auth), as the repository's load and unload do.
"""

from __future__ import annotations

import re
from typing import Any

from mlserve.core.events import Event, Response
from mlserve.core.handlers import answers_only, suspends_for
from mlserve.protocol.errors import Forbidden, InvalidInput, ModelNotFound, NotSupported
from mlserve.protocol.shm import SharedMemoryRegions, shm_place
from mlserve.protocol.tensors import RAW, decode_tensor, encode_raw, loads
from mlserve.server.serving import Serving

__all__ = ["SHM_PREFIXES", "handle", "place_outputs", "take_inputs"]

SHM_PREFIXES = ("/v2/systemsharedmemory", "/v2/cudasharedmemory")
_ROUTE = re.compile(
    r"^/v2/(?P<kind>system|cuda)sharedmemory(?:/region/(?P<name>[^/]+))?/(?P<action>\w+)$"
)
_METHODS = {"status": "GET", "register": "POST", "unregister": "POST"}


@answers_only(lambda method, path: path.startswith(SHM_PREFIXES))
@suspends_for(lambda event: False)
async def handle(server: Serving, event: Event) -> Response | None:
    match = _ROUTE.match(event.path.rstrip("/"))
    if match is None or _METHODS.get(match["action"]) != event.method:
        raise ModelNotFound(f"illegal shared memory path {event.path}")
    if not server.model_control:
        raise Forbidden("shared memory is off: serve with --model-control-mode explicit")
    name, action = match["name"], match["action"]
    if match["kind"] == "cuda":
        return _cuda(name, action)
    regions = server.shared_memory
    if action == "status":
        return Response(regions.status(name))
    if action == "unregister":
        regions.unregister(name)
        return Response({})
    if name is None:
        raise InvalidInput(
            "register names its region: /v2/systemsharedmemory/region/<name>/register"
        )
    body = event.body
    if isinstance(body, bytes | bytearray | str) and body:
        body = loads(body)
    if not isinstance(body, dict):
        raise InvalidInput('register takes {"key": ..., "offset": ..., "byte_size": ...}')
    regions.register(name, body.get("key"), body.get("offset", 0), body.get("byte_size"))
    return Response({})


def _cuda(name: str | None, action: str) -> Response:
    """CUDA shared memory, of which mlserve registers none."""
    if action == "register":
        raise NotSupported("CUDA shared memory is not supported: use system shared memory")
    if action == "status" and name is not None:
        raise InvalidInput(f"unable to find cuda shared memory region: '{name}'")
    return Response([] if action == "status" else {})


def take_inputs(regions: SharedMemoryRegions, body: object) -> list[dict[str, Any]]:
    """Read the inputs of ``body`` that name a region into their raw form, ask for
    the requested outputs that name one in raw form, and return those outputs."""
    if not isinstance(body, dict):
        return []
    for obj in body.get("inputs") or ():
        if isinstance(obj, dict):
            place = shm_place(obj.get("parameters"), f"input '{obj.get('name')}'")
            if place is not None:
                what = f"input '{obj.get('name')}'"
                obj.pop("data", None)
                obj[RAW] = regions.read(place[0], place[1], place[2], what)
    placed = []
    outputs = body.get("outputs")
    for obj in outputs if isinstance(outputs, list) else ():
        if isinstance(obj, dict) and shm_place(
            obj.get("parameters"), f"output '{obj.get('name')}'"
        ):
            obj["parameters"] = {**obj["parameters"], "binary_data": True}
            placed.append(obj)
    return placed


def place_outputs(
    regions: SharedMemoryRegions, body: object, requested: list[dict[str, Any]]
) -> object:
    """Write each output ``requested`` in a region there; the answer names the region
    in place of the tensor's data."""
    if not isinstance(body, dict) or not isinstance(body.get("outputs"), list):
        return body
    wanted = {obj.get("name"): obj["parameters"] for obj in requested}
    outputs = []
    for obj in body["outputs"]:
        params = wanted.get(obj.get("name")) if isinstance(obj, dict) else None
        if params is None:
            outputs.append(obj)
            continue
        what = f"output '{obj['name']}'"
        region, offset, byte_size = shm_place(params, what) or ("", 0, 0)
        raw = obj.get(RAW)
        data = bytes(raw) if raw is not None else encode_raw(decode_tensor(obj), obj["datatype"])
        regions.write(region, offset, byte_size, data, what)
        kept = {"shared_memory_region": region, "shared_memory_byte_size": len(data)}
        if offset:
            kept["shared_memory_offset"] = offset
        outputs.append(
            {
                "name": obj["name"],
                "datatype": obj["datatype"],
                "shape": obj["shape"],
                "parameters": kept,
            }
        )
    return {**body, "outputs": outputs}
