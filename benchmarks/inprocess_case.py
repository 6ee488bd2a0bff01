"""One in-process case, timed in whichever interpreter runs it: mlrun's or mlserve's.

``python benchmarks/inprocess_case.py mlrun|mlserve router|flow|async-step CALLS`` prints the
median µs per ``server.test("/v2/models/m/infer", body)`` (wall and CPU) over a few
batches of ``CALLS`` calls, as JSON; ``benchmarks.inprocess`` runs it in turn.
The same model class, flow and body serve both frameworks: mlserve's names are
mlrun's (``new_function``, ``V2ModelServer``, ``to_mock_server``), only the
import differs.
"""

from __future__ import annotations

import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BODY = {"inputs": [[1.0, 2.0, 3.0, 4.0]]}
PATH = "/v2/models/m/infer"
BATCHES = 5
WARMUP = 200


def _framework(name: str) -> Any:
    if name == "mlrun":  # offline: no API server, no remote config, quiet logs
        os.environ.pop("MLRUN_DBPATH", None)
        os.environ.setdefault("MLRUN_LOG_LEVEL", "ERROR")
    else:  # this checkout's mlserve, not another installed copy
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    return importlib.import_module(name)


def _model_class(serving: Any) -> type:
    class Trivial(serving.V2ModelServer):  # type: ignore[misc, name-defined]
        def load(self) -> None:
            self.model = True

        def predict(self, request: dict[str, Any]) -> list[Any]:
            return [sum(row) for row in request["inputs"]]

    return Trivial


def passthrough(body: Any) -> Any:
    """A plain flow step, before and after the model."""
    return body


async def async_passthrough(body: Any) -> Any:
    """An async flow step: the flow needs its event loop."""
    return body


def build(framework: str, case: str) -> Any:
    """The mock server of ``case``: ``router`` (one model), ``flow`` (an async-engine
    flow: a step, a router with the model, a step after it that responds) or
    ``async-step`` (the same flow whose first step is a coroutine)."""
    fw = _framework(framework)
    serving = importlib.import_module("mlrun.serving") if framework == "mlrun" else fw
    model = _model_class(serving)
    namespace = {"Trivial": model, "passthrough": passthrough}
    namespace["async_passthrough"] = async_passthrough
    fn = fw.new_function("bench", kind="serving")
    if case == "router":
        fn.add_model("m", class_name="Trivial", model_path=".")
    else:
        flow = fn.set_topology("flow", engine="async")
        first = "async_passthrough" if case == "async-step" else "passthrough"
        router = flow.to(name="pre", handler=first).to("*", name="router")
        router.add_route("m", class_name="Trivial", model_path=".")
        router.to(name="post", handler="passthrough").respond()
    return fn.to_mock_server(namespace=namespace)


def measure(server: Any, calls: int) -> dict[str, float]:
    """Median µs per call over BATCHES batches of ``calls``: wall time, and the CPU
    time of the whole process (every thread: a loop hop's cost counts too)."""
    test = server.test
    for _ in range(WARMUP):
        answer = test(PATH, BODY)
    assert answer["outputs"], answer
    wall, cpu = [], []
    for _ in range(BATCHES):
        started, cpu_started = time.perf_counter_ns(), time.process_time_ns()
        for _ in range(calls):
            test(PATH, BODY)
        cpu.append((time.process_time_ns() - cpu_started) / calls / 1000)
        wall.append((time.perf_counter_ns() - started) / calls / 1000)
    return {"wall_us": statistics.median(wall), "cpu_us": statistics.median(cpu)}


def main(argv: list[str]) -> None:
    framework, case, calls = argv[0], argv[1], int(argv[2])
    server = build(framework, case)
    try:
        result = measure(server, calls)
    finally:
        if case != "router":  # mlrun's router graph has no wait_for_completion
            server.wait_for_completion()
    print(json.dumps({"framework": framework, "case": case, **result}))


if __name__ == "__main__":
    main(sys.argv[1:])
