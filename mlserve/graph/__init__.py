"""Serving graphs: steps, routers, flows, queues and their description."""

from __future__ import annotations

from mlserve.graph.ensembles import ParallelRun, VotingEnsemble
from mlserve.graph.flow import ErrorStep, FlowStep, RootFlowStep
from mlserve.graph.model_step import Model
from mlserve.graph.queues import QueueConsumer, QueueStep
from mlserve.graph.routers import BaseModelRouter, ModelRouter
from mlserve.graph.steps import BaseStep, RouterStep, TaskStep, step_from_dict
from mlserve.graph.storey_engine import StoreyEngine  # registers the "async" engine
from mlserve.graph.streaming import Collector

__all__ = [
    "BaseModelRouter",
    "BaseStep",
    "Collector",
    "ErrorStep",
    "FlowStep",
    "Model",
    "ModelRouter",
    "ParallelRun",
    "QueueConsumer",
    "QueueStep",
    "RootFlowStep",
    "RouterStep",
    "StoreyEngine",
    "TaskStep",
    "VotingEnsemble",
    "step_from_dict",
]
