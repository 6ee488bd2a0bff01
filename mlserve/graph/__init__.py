"""Serving graphs: steps, routers and their description."""

from __future__ import annotations

from mlserve.graph.routers import BaseModelRouter, ModelRouter
from mlserve.graph.steps import BaseStep, RouterStep, TaskStep, step_from_dict

__all__ = ["BaseModelRouter", "BaseStep", "ModelRouter", "RouterStep", "TaskStep", "step_from_dict"]
