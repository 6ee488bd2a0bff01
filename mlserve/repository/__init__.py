"""The versioned model repository (S11): layout, policies, config, hot reload, cache."""

from __future__ import annotations

from mlserve.repository.config import ModelConfig, load_config, parse_config
from mlserve.repository.policy import VersionPolicy
from mlserve.repository.repository import ModelRepository
from mlserve.repository.serve import function_from_repository

__all__ = [
    "ModelConfig",
    "ModelRepository",
    "VersionPolicy",
    "function_from_repository",
    "load_config",
    "parse_config",
]
