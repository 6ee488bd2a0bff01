"""The context handed to every step and model: logger, parameters, the server."""

from __future__ import annotations

import logging
from typing import Any

from mlserve.core.events import Response

__all__ = ["GraphContext", "StreamContext"]


class StreamContext:
    """mlrun's ``context.stream``: whether the model-log stream is on, and its target."""

    def __init__(self, pusher: Any = None, stream_uri: str = "", function_uri: str = "") -> None:
        self.pusher = pusher
        self.stream_uri = stream_uri
        self.function_uri = function_uri

    @property
    def enabled(self) -> bool:
        return self.pusher is not None

    @property
    def output_stream(self) -> Any:
        """The stream target, once the records pushed so far are in it (None when off)."""
        if self.pusher is None:
            return None
        self.pusher.flush()
        return self.pusher.target


class GraphContext:
    """What user code reaches as ``self.context`` (mlrun's graph context)."""

    Response = Response

    def __init__(
        self,
        parameters: dict[str, Any] | None = None,
        logger: logging.Logger | None = None,
        verbose: bool = False,
        server: Any = None,
        is_mock: bool = False,
        project: str = "default",
        current_function: str | None = None,
    ) -> None:
        self.parameters = parameters or {}
        self.logger = logger or logging.getLogger("mlserve")
        self.verbose = verbose
        self.server = server
        self.is_mock = is_mock
        self.project = project
        self.current_function = current_function
        self.root: Any = None
        self.worker_id = 0
        self.stream = StreamContext()

    def get_param(self, key: str, default: object = None) -> Any:
        return self.parameters.get(key, default)
