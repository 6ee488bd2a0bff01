"""The versioned model repository (docs/repository.md): layout, policies, config, hot
reload, cache."""

from __future__ import annotations

from typing import Any

from mlserve.repository.config import ModelConfig, load_config, parse_config
from mlserve.repository.policy import VersionPolicy
from mlserve.repository.repository import ModelRepository

__all__ = [
    "ModelConfig",
    "ModelRepository",
    "VersionPolicy",
    "function_from_repository",
    "load_config",
    "parse_config",
]


def __getattr__(name: str) -> Any:
    if name == "function_from_repository":
        # Upward on purpose (docs/architecture.md#layers): the repository sits below
        # the function object, which this name builds; it stays here for its users.
        from mlserve.function.repository import function_from_repository

        return function_from_repository
    raise AttributeError(name)
