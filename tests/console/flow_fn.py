"""A flow for the console's graph view (tests/console/test_console_browser.py): a step,
a router of a model, a queue to a child function's step, and an error handler."""

from __future__ import annotations

import mlserve
from tests.graph.models import Const


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("console-flow")
    fn.add_child_function("audit-fn")
    graph = fn.set_topology("flow", engine="async")
    prep = graph.to(name="prep", handler="tests.graph.models.inc")
    prep.to("*", name="router").to(name="post", handler="(event)").respond()
    prep.to(">>", name="audit-q")
    graph.add_step(
        name="audit", handler="tests.graph.models.record", after="audit-q", function="audit-fn"
    )
    graph.error_handler(name="catch", handler="tests.graph.models.catch", full_event=True)
    fn.add_model("m1", class_name=Const, value=7)
    return fn
