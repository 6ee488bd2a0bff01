"""The context handed to every step and model: logger, parameters, the server."""

from __future__ import annotations

import logging
from typing import Any

from mlserve.server.events import Response

__all__ = ["GraphContext"]


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

    def get_param(self, key: str, default: Any = None) -> Any:
        return self.parameters.get(key, default)
