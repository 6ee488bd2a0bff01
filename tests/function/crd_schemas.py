"""The vendored CRD schemas (``schemas/README.md``), read strictly: a field the
schema does not name fails, as ``kubectl apply`` (field validation ``Strict``)
refuses it where the API server would otherwise drop it silently."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).parent / "schemas"


@cache
def crd_schema(name: str) -> dict[str, Any]:
    """The openAPIV3Schema in ``schemas/<name>.json.gz``, made strict."""
    with gzip.open(SCHEMAS / f"{name}.json.gz") as f:
        return strict(json.load(f))


def strict(node: Any) -> Any:
    """``additionalProperties: false`` on every object schema that lists its
    properties and keeps no unknown fields on purpose."""
    if isinstance(node, list):
        return [strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: {name: strict(schema) for name, schema in value.items()}
        if key == "properties" and isinstance(value, dict)
        else strict(value)
        for key, value in node.items()
    }
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def validate(document: dict[str, Any], name: str) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``document`` passes ``name``'s schema."""
    _validator(name).validate(document)


@cache
def _validator(name: str) -> Any:
    """One validator per schema, without ``jsonschema.validate``'s check of the schema
    against its meta-schema (12 s for KServe's, on every call)."""
    schema = crd_schema(name)
    return jsonschema.validators.validator_for(schema)(schema)
