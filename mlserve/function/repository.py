"""A serving function from a model repository folder: ``mlserve serve <folder>``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlserve.function import ServingFunction, new_function

__all__ = ["ROUTER_CLASS", "function_from_repository"]

ROUTER_CLASS = "mlserve.repository.router.RepositoryRouter"


def function_from_repository(
    path: str | Path | None = None,
    model_config: str | Path | None = None,
    poll_interval: float = 1.0,
    cache_size: int | None = None,
    load_timeout: float = 300.0,
    name: str | None = None,
    version_quiet_period: float | None = None,
    version_done_file: str | None = None,
) -> ServingFunction:
    """A function serving every model of a repository folder (and/or a model config).

    ``poll_interval`` 0 turns hot reload off; ``cache_size`` N keeps at most N
    versions loaded, loading the others on first use. A new version loads once its
    files have been unchanged for ``version_quiet_period`` seconds (default
    ``MLSERVE_VERSION_QUIET_PERIOD``, else 2) and, with ``version_done_file``, once
    it holds that file (docs/repository.md#a-version-loads-when-complete)::

        fn = function_from_repository("models/", poll_interval=1)
        server = fn.to_mock_server()
        server.test("/v2/models/m/versions/2/infer", body={"inputs": [[1, 2]]})
    """
    if path is None and model_config is None:
        raise ValueError("give a repository folder, a model config, or both")
    args: dict[str, Any] = {
        "repository": str(Path(path).resolve()) if path is not None else None,
        "model_config": str(Path(model_config).resolve()) if model_config is not None else None,
        "poll_interval": poll_interval,
        "cache_size": cache_size,
        "load_timeout": load_timeout,
        "version_quiet_period": version_quiet_period,
        "version_done_file": version_done_file,
    }
    fn = new_function(name or Path(path or model_config or "repository").stem or "repository")
    fn.set_topology(
        "router",
        class_name=ROUTER_CLASS,
        **{key: value for key, value in args.items() if value is not None},
    )
    return fn
