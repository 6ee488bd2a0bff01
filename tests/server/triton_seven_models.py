"""Triton's example models but one (``custom_identity_int32``): Triton's own model-control
programs disagree on the repository they run against, ``simple_http_model_control.py``
counting 7 models and ``simple_grpc_model_control.py`` 8 (tests/test_triton_examples.py
serves each its own)."""

from __future__ import annotations

import runpy
from pathlib import Path

import mlserve

EXAMPLE = Path(__file__).parents[2] / "examples" / "triton_models.py"


def serving_function() -> mlserve.ServingFunction:
    fn: mlserve.ServingFunction = runpy.run_path(str(EXAMPLE))["serving_function"]()
    del fn.spec.graph.routes["custom_identity_int32"]
    return fn
