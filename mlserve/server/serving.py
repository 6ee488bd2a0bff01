"""What the server-level handlers use of a ``GraphServer``, as a Protocol.

The handlers and helpers of this package (extensions, statistics, the repository,
TF Serving's REST API) are installed by ``mlserve.server.graph_server``; they
annotate the server with ``Serving`` rather than import ``GraphServer`` back (an
import circle, docs/architecture.md#layers). ``GraphServer`` satisfies it; the
faces, above this package, use ``GraphServer`` itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from mlserve.core.events import Event, Response

if TYPE_CHECKING:
    from mlserve.core.context import GraphContext
    from mlserve.core.limits import ServerLimits
    from mlserve.graph.steps import BaseStep
    from mlserve.protocol.shm import SharedMemoryRegions

__all__ = ["ModelRepository", "ServerHandler", "Serving"]


class ModelRepository(Protocol):
    """What the REST repository extension calls (``server.repository``)."""

    def index(self) -> list[dict[str, Any]]: ...

    async def load(self, name: str, overrides: dict[str, Any] | None = None) -> None: ...

    async def unload(self, name: str) -> None: ...


class Serving(Protocol):
    """A graph server, as its handlers see it."""

    graph: BaseStep | None
    context: GraphContext
    parameters: dict[str, Any]
    limits: ServerLimits
    model_control: bool
    hide_errors: bool
    verbose: bool
    draining: bool
    track_models: bool
    tracking: dict[str, Any]
    function_uri: str
    function_name: str
    project: str
    repository: ModelRepository | None
    shared_memory: SharedMemoryRegions
    handlers: list[ServerHandler]

    def add_handler(self, handler: ServerHandler) -> None: ...

    def on_shutdown(self, callback: Callable[[], None]) -> None: ...

    def iter_models(self) -> Iterator[Any]: ...

    def graph_changed(self) -> None: ...

    def error_response(self, exc: BaseException, path: str = "") -> Response: ...

    async def run_async(self, event: Event) -> Response: ...


# A server-level route answered before the graph (metrics, stats, repository,
# endpoint records, ...): returns None, quickly, for paths that are not its own.
ServerHandler = Callable[[Serving, Event], Awaitable["Response | None"]]
