"""A load's config override (Triton's ``load_model(name, config=...)``) as the model's
parameters (docs/repository.md#loading-with-a-config-override).

Triton sends the override as a JSON model config. mlserve applies the fields it has a
real counterpart for and refuses every other one by name, so that a setting is never
silently ignored:

    max_batch_size                                  -> max_batch_size
    dynamic_batching.max_queue_delay_microseconds   -> max_batch_time (seconds)
    dynamic_batching.default_queue_policy.max_queue_size -> max_queue_size
    parameters {"k": {"string_value": "v"}}         -> parameter k = "v"
    name                                            (must be the model's own)

A parameter may not name a path, a file or an argument of the model class itself:
a request must not point a model at other files.
"""

from __future__ import annotations

import json
from typing import Any

from mlserve.protocol.errors import InvalidInput

__all__ = ["SUPPORTED", "parse_overrides"]

SUPPORTED = ("max_batch_size", "dynamic_batching", "parameters", "name")
_DYNAMIC_BATCHING = ("max_queue_delay_microseconds", "default_queue_policy")
# parameters a request may not set: the model class's own arguments, and anything naming files
_RESERVED = ("model_path", "model", "name", "context", "protocol", "input_path", "result_path")
_FILE_WORDS = ("path", "file", "dir", "url")


def parse_overrides(name: str, config: object) -> dict[str, Any]:
    """The parameters ``config`` (a JSON text of Triton's model config) sets for
    model ``name``; InvalidInput (400) naming the field mlserve cannot apply."""
    if not isinstance(config, str):
        raise _refused(name, "the 'config' parameter is a JSON text of the model config")
    try:
        fields = json.loads(config)
    except ValueError as exc:
        raise _refused(name, f"the config is not valid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise _refused(name, "the config is a JSON object of model config fields")
    parameters: dict[str, Any] = {}
    for key, value in fields.items():
        if key == "name":
            if value != name:
                raise _refused(name, f"the config names another model ({value!r})")
        elif key == "max_batch_size":
            parameters["max_batch_size"] = _whole(name, key, value)
        elif key == "dynamic_batching":
            parameters.update(_dynamic_batching(name, value))
        elif key == "parameters":
            parameters.update(_parameters(name, value))
        else:
            raise _refused(name, f"config field '{key}' {_NO_COUNTERPART}")
    return parameters


def _allowed(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` if a request may set them on model ``name``."""
    for key in parameters:
        if key in _RESERVED or any(word in key.lower() for word in _FILE_WORDS):
            raise _refused(name, f"parameter '{key}' may not be set by a load request")
    return parameters


_NO_COUNTERPART = f"has no counterpart in mlserve (a load's config may set {', '.join(SUPPORTED)})"


def _refused(name: str, why: str) -> InvalidInput:
    return InvalidInput(f"failed to load '{name}': {why}")


def _whole(name: str, key: str, value: object) -> int:
    """A whole number of 0 or more; JSON's protobuf form may write it as a string ("16")."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _refused(name, f"config field '{key}' is a whole number, got {value!r}")
    text = str(value).strip()
    if not text.isdigit():
        raise _refused(name, f"config field '{key}' is a whole number of 0 or more, got {value!r}")
    return int(text)


def _dynamic_batching(name: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refused(name, "config field 'dynamic_batching' is an object")
    parameters: dict[str, Any] = {}
    for key, setting in value.items():
        field = f"dynamic_batching.{key}"
        if key == "max_queue_delay_microseconds":
            parameters["max_batch_time"] = _whole(name, field, setting) / 1e6
        elif key == "default_queue_policy":
            if not isinstance(setting, dict) or set(setting) - {"max_queue_size"}:
                raise _refused(
                    name, f"config field '{field}' may set only max_queue_size in mlserve"
                )
            size = _whole(name, f"{field}.max_queue_size", setting.get("max_queue_size", 0))
            if size:  # Triton's 0 is "no bound": mlserve's default bound stays
                parameters["max_queue_size"] = size
        else:
            raise _refused(
                name,
                f"config field '{field}' has no counterpart in mlserve "
                f"(dynamic_batching may set {', '.join(_DYNAMIC_BATCHING)})",
            )
    return parameters


def _parameters(name: str, value: object) -> dict[str, Any]:
    """Triton's ``{"k": {"string_value": "v"}}``, as ``{"k": "v"}``."""
    if not isinstance(value, dict):
        raise _refused(name, "config field 'parameters' is an object")
    parameters: dict[str, Any] = {}
    for key, setting in value.items():
        if not isinstance(setting, dict) or set(setting) != {"string_value"}:
            raise _refused(name, f'config parameter \'{key}\' is written {{"string_value": "..."}}')
        parameters[str(key)] = str(setting["string_value"])
    return _allowed(name, parameters)
