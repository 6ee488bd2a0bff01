"""A V2 client on the standard library, behind ``mlserve infer`` and ``mlserve models``
(docs/serving.md#asking-a-running-server): the answer of a running server, or a
``ClientError`` whose one line says what the server said or why it was not reached.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote

__all__ = ["ClientError", "base_url", "infer", "list_models"]


class ClientError(Exception):
    """The server answered 4xx/5xx (``status``, and what it ``said``), or could not be
    reached (``status`` None)."""

    def __init__(self, message: str, status: int | None = None, said: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.said = said


def base_url(url: str) -> str:
    """``host:port`` or ``http://host:port[/]`` as ``http://host:port``."""
    url = url.rstrip("/")
    return url if "://" in url else f"http://{url}"


def _call(
    url: str, method: str, path: str, body: Any, headers: dict[str, str], timeout: float
) -> Any:
    """The JSON answer of ``method path`` (the text, when it is not JSON)."""
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **headers} if data is not None else headers
    request = urllib.request.Request(url + path, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return _decoded(answer.read())
    except urllib.error.HTTPError as exc:
        answer = _decoded(exc.read())
        said = str(answer.get("error", answer) if isinstance(answer, dict) else answer)
        message = f"{method} {url}{path}: {exc.code} {exc.reason}: {said}"
        raise ClientError(message, exc.code, said) from None
    except urllib.error.URLError as exc:
        reason = getattr(exc.reason, "strerror", None) or exc.reason
        raise ClientError(f"cannot reach {url}: {reason}") from None
    except TimeoutError:
        raise ClientError(f"{method} {url}{path}: no answer in {timeout:g} s") from None


def _decoded(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _model_path(model: str, version: str) -> str:
    path = f"/v2/models/{quote(model, safe='')}"
    return f"{path}/versions/{quote(version, safe='')}" if version else path


def infer(
    url: str,
    model: str,
    body: dict[str, Any],
    version: str = "",
    headers: dict[str, str] | None = None,
    timeout: float = 60.0,
) -> tuple[Any, float]:
    """The answer of ``POST /v2/models/<model>[/versions/<version>]/infer`` and the
    seconds it took."""
    path = _model_path(model, version) + "/infer"
    started = time.perf_counter()
    answer = _call(base_url(url), "POST", path, body, headers or {}, timeout)
    return answer, time.perf_counter() - started


def list_models(
    url: str, headers: dict[str, str] | None = None, timeout: float = 60.0
) -> list[dict[str, str]]:
    """The served models as ``{"name", "version", "state", "reason"}`` rows: the V2
    repository index (mlserve, Triton, MLServer), else the ``GET /v2/models`` listing
    with each model's readiness (a server without the repository extension)."""
    url, headers = base_url(url), headers or {}
    try:
        index = _call(url, "POST", "/v2/repository/index", {}, headers, timeout)
    except ClientError as exc:
        if exc.status not in (404, 405):
            raise
        return _listed_models(url, headers, timeout)
    return [_row(entry) for entry in index or [] if isinstance(entry, dict)]


def _row(entry: dict[str, Any]) -> dict[str, str]:
    fields = ("name", "version", "state", "reason")
    return {field: str(entry.get(field) or "") for field in fields}


def _listed_models(url: str, headers: dict[str, str], timeout: float) -> list[dict[str, str]]:
    listing = _call(url, "GET", "/v2/models", None, headers, timeout)
    keys = listing.get("models", []) if isinstance(listing, dict) else []
    rows = []
    for key in keys:
        name, _, version = str(key).partition(":")  # mlserve lists a version as "<m>:<v>"
        state, reason = _readiness(url, _model_path(name, version), headers, timeout)
        rows.append({"name": name, "version": version, "state": state, "reason": reason})
    return rows


def _readiness(url: str, path: str, headers: dict[str, str], timeout: float) -> tuple[str, str]:
    """A model's state and reason from ``GET <path>/ready``."""
    try:
        ready = _call(url, "GET", path + "/ready", None, headers, timeout)
    except ClientError as exc:
        return "UNAVAILABLE", exc.said
    if isinstance(ready, dict) and not ready.get("ready", True):
        return "UNAVAILABLE", ""
    return "READY", ""
