"""The nuclio function config of a serving function (docs/deployment.md), written without
importing the runtime that will run it (``mlserve.runtimes.nuclio``).

The config is complete for nuclio's build: a base image, the ``pip install``
commands of mlserve and of the function's requirements, and the handler
module as ``build.functionSourceCode``: the function's own code (its model
classes) followed by the runtime's entry points, as mlrun's exported functions
do. The function itself (graph and settings) travels in ``SERVING_SPEC_ENV``.
``mlserve build`` writes ``image_config`` instead: nuclio builds on the image
of the build folder, which already holds mlserve and the models.
"""

from __future__ import annotations

import base64
import json
import shlex
import warnings
from pathlib import Path
from typing import Any

from mlserve.core.version import __version__
from mlserve.function.walk import iter_steps

__all__ = [
    "BASE_IMAGE",
    "HANDLER",
    "RUNTIME",
    "SPEC_ENV",
    "STREAMING_HANDLER",
    "function_config",
    "handler_module",
    "image_config",
    "local_model_paths",
]

SPEC_ENV = "SERVING_SPEC_ENV"
RUNTIME = "python:3.11"
BASE_IMAGE = "python:3.11-slim"
HANDLER_MODULE = "mlserve_function"
HANDLER = f"{HANDLER_MODULE}:handler"
# A function with streaming on answers through an async generator: nuclio sends
# what it yields as it comes (docs/migrating-from-mlrun.md#streaming).
STREAMING_HANDLER = f"{HANDLER_MODULE}:streaming_handler"

_FOOTER = """

# ---- mlserve: nuclio's entry points serve the classes above (mlserve.runtimes.nuclio)
from mlserve.runtimes.nuclio import handler, streaming_handler  # noqa: E402,F401
from mlserve.runtimes.nuclio import init_context as _mlserve_init_context  # noqa: E402


def init_context(context):
    _mlserve_init_context(context, namespace=globals())
"""


def handler_module(source: str) -> str:
    """The handler module nuclio builds: the function's code, then the entry points."""
    return source.rstrip() + "\n" + _FOOTER if source.strip() else _FOOTER.lstrip()


def local_model_paths(graph: object) -> dict[str, str]:
    """Route or step name → model path that exists only on this machine."""
    found = {}
    for step in iter_steps(graph):
        path = (getattr(step, "class_args", None) or {}).get("model_path")
        if not path or "://" in str(path) or str(path) in (".", "./"):
            continue
        if Path(path).is_absolute() or Path(path).exists():
            found[getattr(step, "name", None) or str(path)] = str(path)
    return found


def function_config(fn: Any, mlserve_requirement: str = "") -> dict[str, Any]:
    """A nuclio function config that builds and runs ``fn`` (a ServingFunction).

    Warns about model paths that only exist on this machine: nuclio's
    container will not find them (give a URL or a path mounted there)."""
    local = local_model_paths(fn.spec.graph)
    if local:
        listed = ", ".join(f"{name}: {path}" for name, path in local.items())
        warnings.warn(
            f"function {fn.metadata.name}: model paths that only exist on this machine ({listed}); "
            "in nuclio use a URL (s3://, http://, ...) or a volume mounted at that path",
            stacklevel=3,
        )
    commands = [f"pip install {shlex.quote(mlserve_requirement or f'mlserve=={__version__}')}"]
    if fn.spec.requirements:
        commands.append("pip install " + " ".join(map(shlex.quote, fn.spec.requirements)))
    return _config(fn, fn.to_dict(), fn.spec.base_image or BASE_IMAGE, commands)


def image_config(fn: Any, struct: dict[str, Any], image: str) -> dict[str, Any]:
    """The nuclio config of ``fn`` built on ``image``, the image of an ``mlserve
    build`` folder: mlserve, the requirements and the models are in it, and its
    working directory (inherited by nuclio's image) is where ``struct``'s relative
    model paths resolve, so nothing is installed and no path is this machine's."""
    return _config(fn, struct, image, [])


def _config(
    fn: Any, struct: dict[str, Any], base_image: str, commands: list[str]
) -> dict[str, Any]:
    # The function's source travels as the handler module, not in the spec.
    struct = {**struct, "spec": {k: v for k, v in struct["spec"].items() if k != "build"}}
    source = base64.b64encode(handler_module(fn.source_code()).encode()).decode()
    labels = {"mlserve/project": fn.metadata.project}
    if fn.metadata.tag:
        labels["mlserve/tag"] = fn.metadata.tag
    build: dict[str, Any] = {"baseImage": base_image}
    if commands:
        build["commands"] = commands
    build["functionSourceCode"] = source
    config: dict[str, Any] = {
        "apiVersion": "nuclio.io/v1",
        "kind": "NuclioFunction",
        "metadata": {"name": fn.metadata.name, "labels": labels},
        "spec": {
            "handler": STREAMING_HANDLER if fn.spec.streaming else HANDLER,
            "runtime": RUNTIME,
            "env": [{"name": SPEC_ENV, "value": json.dumps(struct)}],
            "build": build,
        },
    }
    for key, value in fn.spec.config.items():  # mlrun's dotted keys: "spec.triggers.<name>"
        *parents, leaf = key.split(".")
        place = config
        for part in parents:
            place = place.setdefault(part, {})
        place[leaf] = value
    return config
