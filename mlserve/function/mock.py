"""``deploy_function(fn, mock=True)``: mlrun's mock deployment, an in-process server.

mlrun code deploys with ``mlrun.deploy_function(fn, mock=True)`` in tests and
notebooks, then calls ``fn.invoke(path, body)``. Here the mock deployment is
``fn.to_mock_server()`` behind ``fn.invoke``; without ``mock`` the function is
deployed as ``fn.deploy()`` does (a local server process).
"""

from __future__ import annotations

from typing import Any

from mlserve.function.function import ServingFunction
from mlserve.server.graph_server import GraphServer

__all__ = ["MockDeployment", "deploy_function"]


class MockDeployment:
    """A deployment whose server runs in this process (``fn.invoke`` calls ``test()``)."""

    def __init__(self, server: GraphServer) -> None:
        self.server = server
        self.url = ""

    def send(
        self, path: str, body: object, method: str | None, headers: dict[str, str] | None
    ) -> Any:
        """``fn.invoke`` through ``test()``: the parsed answer."""
        return self.server.test(path, body, method=method or "", headers=headers)

    def stop(self) -> None:
        self.server.wait_for_completion()


def deploy_function(fn: ServingFunction, mock: bool = False, **kwargs: Any) -> str:
    """Deploy ``fn``: in this process (``mock=True``) or as ``fn.deploy(**kwargs)``.
    Returns the URL ("" for a mock deployment)."""
    if not mock:
        return fn.deploy(**kwargs)
    fn.stop()
    fn._deployment = MockDeployment(fn.to_mock_server())
    return ""
