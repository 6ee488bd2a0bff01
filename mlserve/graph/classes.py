"""Classes of graph steps by name: how a step's ``class_name`` is resolved,
exported and instantiated (the bottom of the graph package: it imports none of it)."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from mlserve.core.public import PUBLIC_NAMES

__all__ = ["CLASS_SHORTCUTS", "class_reference", "construct", "resolve_class"]

# mlrun's class shortcuts: a step named by one runs the dotted class. storey's
# Collector is mlserve's, which both flow engines know (docs/graphs.md#streaming-steps).
CLASS_SHORTCUTS = {
    "$remote": "mlserve.graph.remote.RemoteStep",
    "storey.Collector": "mlserve.graph.streaming.Collector",
    "storey.steps.Collector": "mlserve.graph.streaming.Collector",
}


def class_reference(cls: type) -> str:
    """The name a class is exported under: dotted when importable, else short."""
    module = cls.__module__
    if module in ("__main__", "builtins") or module.startswith("mlserve_fn_"):
        return cls.__name__
    return f"{module}.{cls.__qualname__}"


def resolve_class(name: str | type, namespace: dict[str, Any] | None = None) -> Any:
    """A class or callable from a name: the namespace first, then mlserve's own public
    names (so exported graphs of built-ins load anywhere), then a dotted import."""
    if not isinstance(name, str):
        return name
    name = CLASS_SHORTCUTS.get(name, name)
    if namespace and name in namespace:
        return namespace[name]
    if name in PUBLIC_NAMES:  # mlserve's own: exported graphs of built-ins load anywhere
        name = f"{PUBLIC_NAMES[name]}.{name}"
    if "." in name:
        module_name, _, attr = name.rpartition(".")
        try:
            return getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot import '{name}': {exc}") from exc
    raise ValueError(f"'{name}' is not in the namespace, and not an importable dotted name")


def construct(cls: type, kwargs: dict[str, Any], **injected: object) -> Any:
    """Instantiate ``cls`` with ``kwargs``, adding each injected argument
    (``context``, ``name``, ...) only when the constructor accepts it."""
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return cls(**kwargs)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    args = dict(kwargs)
    for key, value in injected.items():
        if (key in params or takes_any) and key not in args:
            args[key] = value
    return cls(**args)
