"""mlserve: serve machine-learning models as serverless functions.

The public API, and nothing else (see docs/ for guides). Each name loads its
module on first use (PEP 562), so ``import mlserve`` alone costs almost
nothing: a process pays for the graph, the protocol and numpy when it uses
them, and a ``mlserve`` command pays only for what it runs.
"""

from __future__ import annotations

import typing as _typing
from importlib import import_module as _import_module

if _typing.TYPE_CHECKING:
    from mlserve.core.context import GraphContext
    from mlserve.core.events import Event, MockEvent, Response
    from mlserve.core.version import __version__
    from mlserve.function import ServingFunction, code_to_function, import_function, new_function
    from mlserve.function.mock import deploy_function
    from mlserve.graph.ensembles import ParallelRun, VotingEnsemble
    from mlserve.graph.flow import ErrorStep, FlowStep, RootFlowStep
    from mlserve.graph.model_step import Model
    from mlserve.graph.queues import QueueConsumer, QueueStep
    from mlserve.graph.rollout import RolloutPolicy
    from mlserve.graph.routers import BaseModelRouter, ModelRouter
    from mlserve.graph.steps import RouterStep, TaskStep
    from mlserve.graph.streaming import Collector
    from mlserve.model import V2ModelServer
    from mlserve.server.graph_server import GraphServer, ServingRequestError, create_graph_server


# The subpackages and modules that ``import mlserve`` used to load with the names:
# reaching one as an attribute (``mlserve.graph.ensembles``, ``mlserve.server.
# graph_server``) loads all the names' modules, as ``import mlserve`` once did.
_SUBMODULES = (
    "batching",
    "core",
    "function",
    "graph",
    "model",
    "monitoring",
    "protocol",
    "server",
)

__all__ = [
    "BaseModelRouter",
    "Collector",
    "ErrorStep",
    "Event",
    "FlowStep",
    "GraphContext",
    "GraphServer",
    "MockEvent",
    "Model",
    "ModelRouter",
    "ParallelRun",
    "QueueConsumer",
    "QueueStep",
    "Response",
    "RolloutPolicy",
    "RootFlowStep",
    "RouterStep",
    "ServingFunction",
    "ServingRequestError",
    "TaskStep",
    "V2ModelServer",
    "VotingEnsemble",
    "__version__",
    "code_to_function",
    "create_graph_server",
    "deploy_function",
    "import_function",
    "new_function",
]


def _public_names() -> dict[str, str]:
    """Each public name's module (mlserve.core.public; read when a name is first asked)."""
    names: dict[str, str] = _import_module("mlserve.core.public").PUBLIC_NAMES
    return names


def __getattr__(name: str) -> _typing.Any:
    names = _public_names()
    if name in names:
        value = getattr(_import_module(names[name]), name)
    elif name == "__version__":
        value = _import_module("mlserve.core.version").__version__
    elif name in _SUBMODULES:
        for module in dict.fromkeys(names.values()):
            _import_module(module)
        value = _import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'mlserve' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_public_names(), *_SUBMODULES})
