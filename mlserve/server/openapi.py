"""The OpenAPI 3 document of the REST face (``GET /openapi.json``) and its
browsable page (``GET /docs``, self-contained: no CDN).

Kept as data; ``document()`` builds it once. Imports nothing else of mlserve,
so the server-level handler can serve it to the mock server too.
"""

from __future__ import annotations

import html
import re
from functools import cache
from typing import Any

__all__ = ["document", "docs_page"]

_MODEL = "/v2/models/{model}"
_VERSIONED = "/v2/models/{model}/versions/{version}"

_SCHEMAS: dict[str, Any] = {
    "Tensor": {
        "type": "object",
        "required": ["name", "shape", "datatype"],
        "properties": {
            "name": {"type": "string"},
            "shape": {"type": "array", "items": {"type": "integer"}},
            "datatype": {
                "type": "string",
                "enum": [
                    "BOOL",
                    "UINT8",
                    "UINT16",
                    "UINT32",
                    "UINT64",
                    "INT8",
                    "INT16",
                    "INT32",
                    "INT64",
                    "FP16",
                    "FP32",
                    "FP64",
                    "BF16",
                    "BYTES",
                ],
            },
            "parameters": {"type": "object"},
            "data": {"type": "array", "items": {}},
        },
    },
    "TensorMetadata": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "datatype": {"type": "string"},
            "shape": {"type": "array", "items": {"type": "integer"}},
        },
    },
    "InferenceRequest": {
        "type": "object",
        "description": "Tensor form (tensor objects) or mlrun's row form (a list of rows).",
        "required": ["inputs"],
        "properties": {
            "id": {"type": "string"},
            "inputs": {
                "oneOf": [
                    {"type": "array", "items": {"$ref": "#/components/schemas/Tensor"}},
                    {"type": "array", "items": {}},
                ]
            },
            "outputs": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "properties": {"name": {"type": "string"}, "parameters": {"type": "object"}},
                },
            },
            "parameters": {"type": "object"},
        },
    },
    "InferenceResponse": {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "model_name": {"type": "string"},
            "model_version": {"type": "string"},
            "outputs": {
                "oneOf": [{"type": "array", "items": {"$ref": "#/components/schemas/Tensor"}}, {}]
            },
            "timestamp": {"type": "string", "description": "row form only"},
        },
    },
    "ModelMetadata": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "versions": {"type": "array", "items": {"type": "string"}},
            "platform": {"type": "string"},
            "inputs": {"type": "array", "items": {"$ref": "#/components/schemas/TensorMetadata"}},
            "outputs": {"type": "array", "items": {"$ref": "#/components/schemas/TensorMetadata"}},
        },
    },
    "Error": {"type": "object", "properties": {"error": {"type": "string"}}},
    "RepositoryEntry": {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "version": {"type": "string"},
            "state": {"type": "string", "enum": ["READY", "UNAVAILABLE", "LOADING"]},
            "reason": {"type": "string"},
        },
    },
    "ModelStats": {
        "type": "object",
        "properties": {"model_stats": {"type": "array", "items": {"type": "object"}}},
    },
}

_ERRORS = {
    "400": "invalid request (bad JSON, malformed inputs, shape or datatype mismatch)",
    "404": "unknown model, version or path",
    "500": "the model's own code raised",
    "429": "the model's calls and queue are all taken (Retry-After)",
    "503": "model not ready",
}


def _json(description: str, schema: str | None = None) -> dict[str, Any]:
    content = {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"} if schema else {}}
    }
    return {"description": description, "content": content}


def _op(
    summary: str, schema: str | None = None, body: str | None = None, errors: str = ""
) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "responses": {"200": _json("OK", schema)}}
    for code in errors.split():
        operation["responses"][code] = _json(_ERRORS[code], "Error")
    if body:
        operation["requestBody"] = {
            "required": body == "InferenceRequest",
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}},
                "application/octet-stream": {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": "binary tensor data extension: JSON header of "
                        "Inference-Header-Content-Length bytes, then raw tensors",
                    }
                },
            },
        }
    return operation


def _streamed(operation: dict[str, Any], chunk: str) -> dict[str, Any]:
    """``operation`` answered as server-sent events (docs/streaming.md): one ``data:`` event
    per chunk, each a ``chunk`` object, and an ``error`` event when the stream fails."""
    operation["responses"]["200"] = {
        "description": f"server-sent events: 'data: <{chunk} JSON>' per chunk as the model "
        "yields it, then the end; a failure after the first chunk is an 'event: error'",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    return operation


def _model_paths(prefix: str) -> dict[str, Any]:
    infer = _op("Inference", "InferenceResponse", "InferenceRequest", "400 404 500 503")
    return {
        prefix: {
            "get": _op("Model metadata", "ModelMetadata", errors="404"),
            "post": _op(
                "Inference (same as /infer)",
                "InferenceResponse",
                "InferenceRequest",
                "400 404 500 503",
            ),
        },
        f"{prefix}/ready": {
            "get": _op("Model readiness: 200 ready, 503 not ready", errors="404 503")
        },
        f"{prefix}/infer": {"post": infer},
        f"{prefix}/predict": {
            "post": _op(
                "Inference (alias of /infer)",
                "InferenceResponse",
                "InferenceRequest",
                "400 404 500 503",
            )
        },
        f"{prefix}/infer_stream": {
            "post": _streamed(
                _op(
                    "Streamed inference: each chunk a streaming model yields (one for other "
                    "models)",
                    body="InferenceRequest",
                    errors="400 404 429 500 503",
                ),
                "InferenceResponse",
            )
        },
        f"{prefix}/generate": {
            "post": _op(
                "Triton's generate extension: inputs by name, one answer in generate form",
                errors="400 404 429 500 503",
            )
        },
        f"{prefix}/generate_stream": {
            "post": _streamed(
                _op(
                    "Triton's generate extension, streamed: one generate-form answer per chunk",
                    errors="400 404 429 500 503",
                ),
                "generate-form",
            )
        },
        f"{prefix}/explain": {
            "post": _op("Explanation", "InferenceResponse", "InferenceRequest", "400 404 500 503")
        },
        f"{prefix}/stats": {
            "get": _op("Inference statistics (Triton form)", "ModelStats", errors="404")
        },
        f"{prefix}/config": {"get": _op("Model configuration (Triton form)", errors="404")},
        f"{prefix}/{{operation}}": {
            "post": _op(
                "Custom operation: the model's op_<operation>()",
                body="InferenceRequest",
                errors="400 404",
            )
        },
    }


def _tfserving_paths() -> dict[str, Any]:
    """TensorFlow Serving's REST API (``/v1``), for a model, a version or a label."""
    paths: dict[str, Any] = {}
    for prefix in (
        "/v1/models/{model}",
        "/v1/models/{model}/versions/{version}",
        "/v1/models/{model}/labels/{label}",
    ):
        paths[prefix] = {"get": _op("TF Serving model version status", errors="404")}
        paths[f"{prefix}/metadata"] = {
            "get": _op("TF Serving metadata (signature_def)", errors="404 503")
        }
        paths[f"{prefix}:predict"] = {
            "post": _op(
                "TF Serving predict: 'instances' (row form) or 'inputs' (columnar form)",
                errors="400 404 500 503",
            )
        }
    return paths


_ENDPOINTS = "/api/v1/projects/{project}/model-endpoints"


def _paths() -> dict[str, Any]:
    paths: dict[str, Any] = {
        "/": {
            "get": _op("Router metadata"),
            "post": _op(
                "Stream form: route by the body's 'model' (first model if absent)",
                "InferenceResponse",
                "InferenceRequest",
                "400 404 500 503",
            ),
        },
        "/v2/health": {"get": _op("Router metadata")},
        "/v2/health/live": {"get": _op("Liveness: {'live': true}")},
        "/v2/health/ready": {
            "get": _op("Readiness: 200 when every model is ready, else 503", errors="503")
        },
        "/v2": {"get": _op("Server metadata: name, version, extensions")},
        "/v2/models": {"get": _op("Listing of the served model keys")},
        "/v2/models/stats": {"get": _op("Inference statistics of every model", "ModelStats")},
        "/v2/repository/index": {"post": _op("Repository index", body="RepositoryIndexRequest")},
        "/v2/repository/models/{model}/load": {
            "post": _op("(Re)load every version of a model", errors="404")
        },
        "/v2/repository/models/{model}/unload": {
            "post": _op("Unload a model: its requests answer 404", errors="404")
        },
        "/v2/repository/models/{model}/weights": {
            "post": _op(
                "Set the weights of a model's versions: {'weights': {'v1': 90, 'v2': 10}}",
                errors="400 404",
            )
        },
        "/v2/models/{model}/traffic": {
            "get": _op("A model's weights, per-version counts, shadows and rollouts", errors="404")
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": {"text/plain; version=0.0.4": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/openapi.json": {"get": _op("This document")},
        "/docs": {
            "get": {
                "summary": "This document as a browsable page",
                "responses": {"200": {"description": "OK", "content": {"text/html": {}}}},
            }
        },
    }
    paths["/v2/repository/index"]["post"]["responses"]["200"] = {
        "description": "OK",
        "content": {
            "application/json": {
                "schema": {
                    "type": "array",
                    "items": {"$ref": "#/components/schemas/RepositoryEntry"},
                }
            }
        },
    }
    paths.update(_model_paths(_MODEL))
    paths.update(_model_paths(_VERSIONED))
    paths.update(_tfserving_paths())
    paths[_ENDPOINTS] = {"get": _op("Model endpoint records of a project (when tracked)")}
    paths[f"{_ENDPOINTS}/{{uid}}"] = {"get": _op("One model endpoint record", errors="404")}
    for path, item in paths.items():
        names = re.findall(r"{(\w+)}", path)
        if names:  # OpenAPI 3 requires every templated name declared as a path parameter
            item["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                for name in names
            ]
    return paths


@cache
def document(version: str = "") -> dict[str, Any]:
    """The OpenAPI 3 document of the whole REST face."""
    schemas = {
        **_SCHEMAS,
        "RepositoryIndexRequest": {
            "type": "object",
            "properties": {"ready": {"type": "boolean", "description": "list only ready models"}},
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "mlserve REST API",
            "version": version or "0",
            "description": "V2 (Open Inference Protocol) REST face of an mlserve function, "
            "with mlrun's row form and the repository, statistics and metrics extensions.",
        },
        "paths": _paths(),
        "components": {"schemas": schemas},
    }


def docs_page(doc: dict[str, Any]) -> str:
    """A self-contained HTML page listing every path and operation of ``doc``."""
    rows = []
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            if method == "parameters":
                continue
            codes = ", ".join(operation.get("responses", {}))
            rows.append(
                f"<tr><td class=m>{method.upper()}</td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(operation.get('summary', ''))}</td><td>{codes}</td></tr>"
            )
    info = doc["info"]
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f"<title>{html.escape(info['title'])}</title><style>"
        "body{font-family:sans-serif;margin:2em}td{padding:.3em .8em;border-bottom:1px solid #ddd}"
        ".m{font-weight:bold}</style></head><body>"
        f"<h1>{html.escape(info['title'])} {html.escape(info['version'])}</h1>"
        f"<p>{html.escape(info['description'])}</p>"
        "<p>The machine-readable document: <a href=/openapi.json>/openapi.json</a></p>"
        "<table><tr><th>method</th><th>path</th><th>summary</th><th>responses</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    )
