"""The package's public names and the module that defines each: ``import mlserve``
loads a name's module on first use, and a graph's bare class name (``"ModelRouter"``)
resolves through the same table, as a dotted one would."""

__all__ = ["PUBLIC_NAMES"]

PUBLIC_NAMES = {
    "BaseModelRouter": "mlserve.graph.routers",
    "Collector": "mlserve.graph.streaming",
    "ErrorStep": "mlserve.graph.flow",
    "Event": "mlserve.core.events",
    "FlowStep": "mlserve.graph.flow",
    "GraphContext": "mlserve.core.context",
    "GraphServer": "mlserve.server.graph_server",
    "MockEvent": "mlserve.core.events",
    "Model": "mlserve.graph.model_step",
    "ModelRouter": "mlserve.graph.routers",
    "ParallelRun": "mlserve.graph.ensembles",
    "QueueConsumer": "mlserve.graph.queues",
    "QueueStep": "mlserve.graph.queues",
    "Response": "mlserve.core.events",
    "RolloutPolicy": "mlserve.graph.rollout",
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
