"""The serving function: what a user builds in a notebook, tests in-process,
exports, and deploys (docs/notebooks.md).

    fn = mlserve.new_function("f")
    fn.add_model("m1", model_path=".", class_name=MyModel, multiplier=100)
    server = fn.to_mock_server()
    server.test("/v2/models/m1/infer", body={"inputs": [5]})
"""

from __future__ import annotations

import base64
import copy
import inspect
import json
import linecache
import sys
import types
from pathlib import Path
from typing import Any

from mlserve.function.walk import classes_in_main, iter_steps
from mlserve.graph.rollout import RolloutPolicy
from mlserve.graph.steps import BaseStep, RouterStep, TaskStep, step_from_dict
from mlserve.server.graph_server import GraphServer

__all__ = ["ServingFunction", "code_to_function", "import_function", "new_function"]

TOPOLOGIES = ("router", "flow")
TRIGGERS = "spec.triggers."  # a trigger's key in the nuclio config (fn.spec.config)


class FunctionMetadata:
    def __init__(self, name: str, project: str = "default", tag: str = "") -> None:
        self.name = name
        self.project = project
        self.tag = tag

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "project": self.project, "tag": self.tag}


class FunctionSpec:
    """What a function serves and how; ``fn.spec``."""

    # The fields ``to_dict`` writes (mlrun's ServingSpec has the same list); the
    # function's code travels apart, in ``build``.
    _dict_fields = (
        "graph",
        "parameters",
        "load_mode",
        "default_content_type",
        "track_models",
        "tracking",
        "function_refs",
        "filename",
        "streaming",
        "config",
    )

    def __init__(self) -> None:
        self.graph: BaseStep | None = None
        self.parameters: dict[str, Any] = {}
        self.load_mode: str | None = None
        self.default_content_type: str | None = None
        self.track_models: bool = False
        self.tracking: dict[str, Any] = {}
        self.function_refs: dict[str, dict[str, Any]] = {}
        self.source: str = ""
        self.filename: str = ""
        self.requirements: list[str] = []
        self.base_image: str = ""
        # streamed answers over HTTP only (fn.set_streaming; docs/migrating-from-mlrun.md#streaming)
        self.streaming: bool | None = None
        # nuclio config entries by dotted key, as mlrun's ("spec.triggers.<name>": {...})
        self.config: dict[str, Any] = {}

    def to_dict(self, source: str = "") -> dict[str, Any]:
        """The spec as a dict; ``source`` (default: ``self.source``) travels in
        ``build.functionSourceCode``, as in nuclio's and mlrun's function specs."""
        struct: dict[str, Any] = {field: getattr(self, field) for field in self._dict_fields}
        if self.graph is not None:
            struct["graph"] = self.graph.to_dict()
        source = source or self.source
        build = {
            "functionSourceCode": base64.b64encode(source.encode()).decode() if source else None,
            "requirements": self.requirements,
            "base_image": self.base_image,
        }
        struct["build"] = {key: value for key, value in build.items() if value}
        kept = {key: value for key, value in struct.items() if value not in (None, "", {}, False)}
        if self.streaming is not None:  # off (False) is a choice, kept as made
            kept["streaming"] = self.streaming
        return kept

    @classmethod
    def from_dict(cls, struct: dict[str, Any]) -> FunctionSpec:
        spec = cls()
        graph = struct.get("graph")
        spec.graph = step_from_dict(graph) if graph else None
        spec.parameters = dict(struct.get("parameters") or {})
        spec.load_mode = struct.get("load_mode")
        spec.default_content_type = struct.get("default_content_type")
        spec.track_models = bool(struct.get("track_models", False))
        spec.tracking = dict(struct.get("tracking") or {})
        spec.function_refs = dict(struct.get("function_refs") or {})
        spec.filename = struct.get("filename") or ""
        spec.streaming = struct.get("streaming")
        spec.config = dict(struct.get("config") or {})
        build = struct.get("build") or {}
        code = build.get("functionSourceCode")
        spec.source = base64.b64decode(code).decode() if code else ""
        spec.requirements = list(build.get("requirements") or [])
        spec.base_image = build.get("base_image") or ""
        return spec


class ServingFunction:
    """A serving function: a graph of models and steps, with its settings."""

    kind = "serving"

    def __init__(self, name: str, project: str = "default", tag: str = "") -> None:
        self.metadata = FunctionMetadata(name, project, tag)
        self.spec = FunctionSpec()
        self._namespace: dict[str, Any] | None = None
        self._deployment: Any = None

    @property
    def uri(self) -> str:
        """``project/function[:tag]``."""
        tag = f":{self.metadata.tag}" if self.metadata.tag else ""
        return f"{self.metadata.project}/{self.metadata.name}{tag}"

    # ---- building the graph ------------------------------------------------

    def set_topology(
        self,
        topology: str | None = None,
        class_name: str | type | Any = None,
        engine: str | None = None,
        exist_ok: bool = False,
        **class_args: object,
    ) -> BaseStep:
        """Set the graph's root: a router (``class_name`` picks the router class,
        or an instance such as ``VotingEnsemble(...)``) or a flow of steps.

        A function that has a graph keeps it: this raises, unless ``exist_ok=True``,
        which returns the existing graph (as mlrun does)."""
        topology = topology or "router"
        if topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology '{topology}', use one of {TOPOLOGIES}")
        if self.spec.graph is not None:
            if exist_ok:
                return self.spec.graph
            raise ValueError(
                f"function {self.metadata.name} already has a graph (set_topology or add_model "
                "made it); set_topology(..., exist_ok=True) returns it, and a new function "
                "starts a new graph"
            )
        if topology == "router":
            if hasattr(class_name, "to_class_args"):  # a router instance: its description, as mlrun
                class_args = {**class_name.to_class_args(), **class_args}
                class_name = type(class_name)
            self.spec.graph = RouterStep(class_name=class_name, class_args=class_args)
        else:
            from mlserve.graph.flow import RootFlowStep

            self.spec.graph = RootFlowStep(engine=engine or "async")
        return self.spec.graph

    def add_model(
        self,
        key: str,
        model_path: str | None = None,
        class_name: str | type | Any = None,
        model_url: str | None = None,
        handler: str | None = None,
        router_step: str | None = None,
        child_function: str | None = None,
        weight: float | None = None,
        shadow: str | bool | None = None,
        policy: RolloutPolicy | dict[str, Any] | None = None,
        **class_args: object,
    ) -> TaskStep:
        """Add a model (a route) to the function's router.

        ``key`` may be ``name:version``; ``class_name`` a class name
        (``"Cls"``, ``"pkg.mod.Cls"``), a class or an instance; the other
        keyword arguments are the model's parameters. Without a graph a router
        is created; on a flow the model joins its router (``router_step=``
        names it when there are several). ``weight`` and ``shadow``: a variant's
        share of its name's traffic, or the name it shadows
        (docs/graphs.md#rolling-out-a-new-model); ``policy``: a weighted variant's
        rollback / promotion policy (docs/graphs.md#rolling-back-or-promoting-a-canary).
        """
        if model_url and model_path:
            raise ValueError("give model_path or model_url, not both")
        router = self._router(router_step)
        if model_path is not None:
            class_args["model_path"] = str(model_path)
        if model_url:
            class_args["url"] = model_url
            class_name = class_name or "mlserve.graph.remote.RemoteModel"
        if class_name is None:
            raise ValueError(f"model '{key}' needs a class_name")
        if isinstance(class_name, (str, type)):
            class_args.setdefault("protocol", "v2")
        elif model_path is not None and getattr(class_name, "model_path", "") is None:
            class_name.model_path = str(model_path)  # an instance keeps the path it is added with
        route = TaskStep(class_name, class_args, handler=handler, function=child_function)
        return router.add_route(key, route, weight=weight, shadow=shadow, policy=policy)

    def _router(self, router_step: str | None) -> RouterStep:
        graph = self.spec.graph
        if graph is None:
            graph = self.set_topology("router")
        if isinstance(graph, RouterStep):
            return graph
        find = getattr(graph, "find_router", None)
        if find is None:
            raise ValueError("the graph has no router to add a model to")
        return find(router_step)

    def set_tracking(
        self,
        stream_path: str | None = None,
        batch: int | None = None,
        sample: int | None = None,
        stream_args: dict[str, Any] | None = None,
        enable_tracking: bool = True,
    ) -> None:
        """Log every prediction to a stream and register the models as endpoints
        (docs/monitoring.md)."""
        self.spec.track_models = enable_tracking
        tracking = {
            "enable_tracking": enable_tracking,
            "stream_path": stream_path,
            "batch": batch,
            "sample": sample,
            "stream_args": stream_args,
        }
        self.spec.tracking = {key: value for key, value in tracking.items() if value is not None}

    def add_child_function(
        self,
        name: str,
        url: str | None = None,
        image: str | None = None,
        requirements: list[str] | None = None,
        kind: str | None = None,
    ) -> None:
        """Declare a child function that runs the graph's steps marked ``function=name``."""
        ref = {"url": url, "image": image, "requirements": requirements, "kind": kind}
        self.spec.function_refs[name] = {
            key: value for key, value in ref.items() if value is not None
        }

    def _check_child_functions(self) -> None:
        """Every ``function=`` of a step must be declared (``add_child_function``), as in mlrun."""
        for name in sorted(_step_functions(self.spec.graph)):
            if name not in self.spec.function_refs:
                raise ValueError(
                    f"function {name} is used in steps and is not defined, "
                    "use .add_child_function() to specify it"
                )

    def set_streaming(self, enabled: bool = True) -> None:
        """Answer streaming steps and models chunk by chunk (mlrun's name): a
        streamed answer goes over HTTP only, so a function with another trigger
        refuses it (docs/migrating-from-mlrun.md#streaming)."""
        if enabled:
            others = [
                f"{key.rpartition('.')[2]} ({trigger.get('kind')})"
                for key, trigger in self.spec.config.items()
                if key.startswith(TRIGGERS) and _trigger_kind(trigger) != "http"
            ]
            if others:
                raise ValueError(
                    "Streaming is only supported with HTTP triggers, the function has "
                    f"non-HTTP triggers: {', '.join(others)}"
                )
        self.spec.streaming = bool(enabled)

    def add_trigger(self, name: str, spec: Any) -> ServingFunction:
        """Add a nuclio trigger (a dict, or an object with ``to_dict()``) to the
        function's nuclio config, as mlrun's ``add_trigger``."""
        trigger = spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)
        if self.spec.streaming and _trigger_kind(trigger) != "http":
            raise ValueError(
                f"Cannot add non-HTTP trigger '{name}' (kind '{_trigger_kind(trigger)}'): "
                "streaming is enabled, and streaming is only supported with HTTP triggers"
            )
        self.spec.config[f"{TRIGGERS}{name}"] = trigger
        return self

    def plot(self, filename: str | None = None, format: str | None = None, **kw: Any) -> Any:
        """Draw the function's graph with graphviz (see ``mlserve.graph.plot``)."""
        from mlserve.graph.plot import plot_graph

        return plot_graph(self.spec.graph, filename, format, **kw)

    # ---- running ---------------------------------------------------------------

    def to_mock_server(
        self,
        namespace: dict[str, Any] | None = None,
        current_function: str = "*",
        track_models: bool = False,
        **kwargs: object,
    ) -> GraphServer:
        """An in-process server of this function, ready for ``test()``."""
        server = self.to_graph_server(
            current_function=current_function, track_models=track_models, **kwargs
        )
        namespace = {**(self._namespace or {}), **(namespace or _caller_globals())}
        server.init_states(namespace=namespace, is_mock=True)
        server.init_object(namespace)
        return server

    def to_graph_server(self, **kwargs: Any) -> GraphServer:
        """A GraphServer of this function's graph and settings (not yet initialised)."""
        options = {
            "parameters": self.spec.parameters,
            "load_mode": self.spec.load_mode,
            "default_content_type": self.spec.default_content_type,
            "track_models": self.spec.track_models,
            "tracking": self.spec.tracking,
            "project": self.metadata.project,
            "function_name": self.metadata.name,
            "function_tag": self.metadata.tag,
            **kwargs,
        }
        graph = self.spec.graph
        if graph is not None and not _has_instances(graph):
            graph = copy.deepcopy(graph)  # each server builds live objects of its own
        return GraphServer(graph, **options)

    def deploy(self, port: int | None = None, timeout: float = 120.0) -> str:
        """Serve the function from a background process on 127.0.0.1; returns its URL
        once the server is ready and every model has loaded (else raises with the
        end of the server's log).

        ``port``: a free one unless given; a port another process holds is refused.
        Deploying again replaces this function's earlier deployment (same project
        and name). The server ends with the process that deployed it."""
        from mlserve.function.deploy import LocalDeployment

        if _sourcing:  # the function's own code, run by its server: no deploy from there
            return ""
        self.stop()
        self._check_child_functions()
        self._deployment = LocalDeployment(self, port=port, timeout=timeout)
        return str(self._deployment.url)

    def logs(self, tail: int | None = None) -> str:
        """The local deployment's server log (its last ``tail`` lines)."""
        if self._deployment is None:
            raise RuntimeError(
                f"function {self.metadata.name} is not deployed, call fn.deploy() first"
            )
        return str(self._deployment.logs(tail))

    def invoke(
        self,
        path: str,
        body: object = None,
        method: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Call the deployed function (JSON in, parsed body out); a status of 300 or more
        raises ``ServingRequestError`` (a RuntimeError) with it. The only ``invoke``: the
        deployment (a local server process, or the mock server) just sends."""
        if self._deployment is None:
            raise RuntimeError(
                f"function {self.metadata.name} is not deployed, call fn.deploy() first"
            )
        return self._deployment.send(path, body, method, headers)

    def stop(self) -> None:
        """Stop the local deployment, if any (it also stops at interpreter exit)."""
        if self._deployment is not None:
            self._deployment.stop()
            self._deployment = None

    @property
    def namespace(self) -> dict[str, Any]:
        """Where class names resolve: the function's source file, if any."""
        if self._namespace is None and self.spec.source:
            self._namespace = _exec_source(self.spec.source, self.metadata.name)
        return self._namespace or {}

    # ---- description -------------------------------------------------------------

    def source_code(self) -> str:
        """The code that travels with the function: its source file or notebook
        (``code_to_function``), else the code of the classes it uses from ``__main__``
        (the running notebook, the script, or the cells that defined them)."""
        if self.spec.source:
            return self.spec.source
        classes = classes_in_main(self.spec.graph)
        if not classes:
            return ""
        from mlserve.function.source import code_of_classes

        return code_of_classes(classes)

    def with_requirements(self, requirements: list[str]) -> ServingFunction:
        """Packages the function needs besides mlserve (installed by the nuclio build)."""
        self.spec.requirements = list(requirements)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "metadata": self.metadata.to_dict(),
            "spec": self.spec.to_dict(source=self.source_code()),
        }

    @classmethod
    def from_dict(cls, struct: dict[str, Any]) -> ServingFunction:
        metadata = struct.get("metadata") or {}
        fn = cls(
            metadata.get("name", ""), metadata.get("project", "default"), metadata.get("tag", "")
        )
        fn.spec = FunctionSpec.from_dict(struct.get("spec") or {})
        if fn.spec.source:
            fn._namespace = _exec_source(fn.spec.source, fn.metadata.name)
        return fn

    def to_yaml(self) -> str:
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def to_nuclio_config(self) -> dict[str, Any]:
        """A nuclio function config running this function in nuclio's Python runtime."""
        from mlserve.function.nuclio_config import function_config

        return function_config(self)

    def export(self, target: str = "", format: str = "") -> str:
        """Write the whole function (graph included) as YAML, or JSON for a ``.json``
        path; ``format="nuclio"`` writes a nuclio function config. Returns the path.
        Inside the function's own code, run by its import (``mlserve serve fn.yaml``),
        it writes nothing: an export never rewrites itself."""
        if format not in ("", "nuclio"):
            raise ValueError(f"unknown export format '{format}', use '' or 'nuclio'")
        path = Path(target or f"function-{self.metadata.name}.yaml")
        if _sourcing:
            return str(path)
        struct = self.to_nuclio_config() if format == "nuclio" else self.to_dict()
        if path.suffix == ".json":
            path.write_text(json.dumps(struct, indent=2))
        else:
            import yaml

            path.write_text(yaml.safe_dump(struct, sort_keys=False))
        return str(path)


def _trigger_kind(trigger: Any) -> str:
    return str(trigger.get("kind", "")) if isinstance(trigger, dict) else ""


def _has_instances(graph: BaseStep) -> bool:
    return any(getattr(step, "_instance", None) is not None for step in iter_steps(graph))


def _step_functions(step: BaseStep | None) -> set[str]:
    """The child functions that steps in and below ``step`` name."""
    if step is None:
        return set()
    names = {step.function} if step.function else set()
    for child in [*getattr(step, "routes", {}).values(), *getattr(step, "steps", {}).values()]:
        names |= _step_functions(child)
    return names


def _caller_globals() -> dict[str, Any]:
    """The globals of the code that called into mlserve (a notebook, a script)."""
    frame = inspect.currentframe()
    while frame is not None and frame.f_globals.get("__name__", "").startswith("mlserve"):
        frame = frame.f_back
    return dict(frame.f_globals) if frame is not None else {}


# True while a function's source runs: a notebook's code that deploys or exports its
# own function must not deploy again from inside the server that runs it, nor rewrite
# the export being imported.
_sourcing = False


def _exec_source(source: str, name: str) -> dict[str, Any]:
    """Run a function's source file as a module of its own; its names are the namespace."""
    global _sourcing
    module_name = f"mlserve_fn_{name.replace('-', '_')}"
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    filename = f"<mlserve function {name}>"
    module.__file__ = filename  # code that reads Path(__file__) at import runs here too
    # Tracebacks of the function's code show its lines (mtime None: the cache keeps them).
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    sourcing, _sourcing = _sourcing, True
    try:
        exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - the user's code
    finally:
        _sourcing = sourcing
    return module.__dict__


def new_function(
    name: str = "",
    project: str = "default",
    kind: str = "serving",
    tag: str = "",
    command: str = "",
    runtime: dict[str, Any] | None = None,
) -> ServingFunction:
    """A new, empty serving function; with ``command`` (a Python file, as mlrun's),
    that file's classes and handlers are where names resolve (``code_to_function``);
    with ``runtime`` (a ``fn.to_dict()``), that function again."""
    if runtime is not None:
        _check_kind(runtime.get("kind", "serving"))
        fn = ServingFunction.from_dict(runtime)
        fn.metadata.name = name or fn.metadata.name
        return fn
    _check_kind(kind)
    if not name:
        raise ValueError("new_function() needs a name (or a runtime= to restore)")
    if command:
        return code_to_function(name, filename=command, kind=kind, project=project, tag=tag)
    return ServingFunction(name, project, tag)


def code_to_function(
    name: str = "",
    filename: str = "",
    kind: str = "serving",
    project: str = "default",
    tag: str = "",
    requirements: list[str] | None = None,
    **kwargs: object,
) -> ServingFunction:
    """A serving function whose code is a ``.py`` file or a notebook (``.ipynb``,
    its code cells as the ``# mlrun:``/``# mlserve:`` markers select them).

    Without ``filename``, in a notebook, the code is that notebook's (its file, or
    the cells its kernel ran when it runs headless): its classes resolve in the
    notebook's namespace in the mock server, and the code travels with the export.
    A file's code runs as a module of its own, where ``class_name`` strings resolve."""
    from mlserve.function.source import read_code, running_code

    _check_kind(kind)
    running = not filename
    if running:
        source, filename = running_code()
    else:
        source = read_code(filename)
    fn = ServingFunction(name or Path(filename).stem or "notebook", project, tag)
    fn.spec.source = source
    fn.spec.filename = filename
    fn.spec.requirements = list(requirements or [])
    if not running:  # the running notebook's own names serve its mock server
        fn._namespace = _exec_source(fn.spec.source, fn.metadata.name)
    return fn


def import_function(path: str) -> ServingFunction:
    """Load a function exported with ``fn.export()`` (YAML or JSON); a file that is
    not one raises ``ValueError`` saying so. Its code runs as a module of its own."""
    import yaml

    text = Path(path).read_text()
    try:
        struct = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        said = f"{getattr(exc, 'problem', '')} at line {mark.line + 1}" if mark else str(exc)
        raise ValueError(f"{path} is not an exported function: {said}") from None
    if not isinstance(struct, dict) or not ({"kind", "spec"} & set(struct)):
        raise ValueError(f"{path} is not an exported function: fn.export() writes one")
    _check_kind(struct.get("kind", "serving"))
    return ServingFunction.from_dict(struct)


def _check_kind(kind: str) -> None:
    if kind != "serving":
        raise ValueError(f"only kind='serving' functions are supported, got '{kind}'")
