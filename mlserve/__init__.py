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
    from mlserve.context import GraphContext
    from mlserve.function import ServingFunction, code_to_function, import_function, new_function
    from mlserve.function.mock import deploy_function
    from mlserve.graph.ensembles import ParallelRun, VotingEnsemble
    from mlserve.graph.flow import ErrorStep, FlowStep, RootFlowStep
    from mlserve.graph.queues import QueueConsumer, QueueStep
    from mlserve.graph.routers import BaseModelRouter, ModelRouter
    from mlserve.graph.steps import RouterStep, TaskStep
    from mlserve.model import V2ModelServer
    from mlserve.server.events import Event, MockEvent, Response
    from mlserve.server.graph_server import GraphServer, ServingRequestError, create_graph_server

__version__ = "0.1.0"

# Each public name and the module that defines it.
_NAMES = {
    "BaseModelRouter": "mlserve.graph.routers",
    "ErrorStep": "mlserve.graph.flow",
    "Event": "mlserve.server.events",
    "FlowStep": "mlserve.graph.flow",
    "GraphContext": "mlserve.context",
    "GraphServer": "mlserve.server.graph_server",
    "MockEvent": "mlserve.server.events",
    "ModelRouter": "mlserve.graph.routers",
    "ParallelRun": "mlserve.graph.ensembles",
    "QueueConsumer": "mlserve.graph.queues",
    "QueueStep": "mlserve.graph.queues",
    "Response": "mlserve.server.events",
    "RootFlowStep": "mlserve.graph.flow",
    "RouterStep": "mlserve.graph.steps",
    "ServingFunction": "mlserve.function",
    "ServingRequestError": "mlserve.server.graph_server",
    "TaskStep": "mlserve.graph.steps",
    "V2ModelServer": "mlserve.model",
    "VotingEnsemble": "mlserve.graph.ensembles",
    "code_to_function": "mlserve.function",
    "create_graph_server": "mlserve.server.graph_server",
    "deploy_function": "mlserve.function.mock",
    "import_function": "mlserve.function",
    "new_function": "mlserve.function",
}

# The subpackages and modules that ``import mlserve`` used to load with the names:
# reaching one as an attribute (``mlserve.graph.ensembles``, ``mlserve.server.
# graph_server``) loads all the names' modules, as ``import mlserve`` once did.
_SUBMODULES = (
    "batching",
    "context",
    "function",
    "graph",
    "model",
    "monitoring",
    "protocol",
    "server",
    "stats",
)

__all__ = [
    "BaseModelRouter",
    "ErrorStep",
    "Event",
    "FlowStep",
    "GraphContext",
    "GraphServer",
    "MockEvent",
    "ModelRouter",
    "ParallelRun",
    "QueueConsumer",
    "QueueStep",
    "Response",
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


def __getattr__(name: str) -> _typing.Any:
    if name in _NAMES:
        value = getattr(_import_module(_NAMES[name]), name)
    elif name in _SUBMODULES:
        for module in dict.fromkeys(_NAMES.values()):
            _import_module(module)
        value = _import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'mlserve' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES, *_SUBMODULES})
