"""Graph steps that call HTTP services: ``RemoteStep`` (``"$remote"``) sends
each event to a URL and puts the answer in the event; ``BatchHttpRequests``
sends a list of requests at once. They mirror mlrun's steps of the same names
(same arguments, same ``to_dict()``), so mlrun graphs move by changing imports.

    graph.to(name="prep", handler="prep").to(
        "$remote", "score", url="http://scorer:8080/v2/models/m/infer", method="POST"
    ).to(name="post", handler="post").respond()

Each request carries the event's id (``MLRUN-EVENT-ID``) and, when the event
has one, its path (``MLRUN-EVENT-PATH``), the header names mlrun uses, so a
remote mlrun or mlserve function sees the same event. Answers of 500 and more
(and failed connections) are retried ``retries`` times with exponential
backoff; any answer of 400 or more finally fails the step. The sync engine
calls the same async code on a loop of its own (it runs in a worker thread).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import aiohttp

from mlserve.core import tracing
from mlserve.core.events import Event
from mlserve.graph.classes import class_reference
from mlserve.protocol.errors import InvalidInput
from mlserve.protocol.paths import get_path, set_path

__all__ = [
    "DEFAULT_RETRIES",
    "BatchHttpRequests",
    "RemoteCallError",
    "RemoteStep",
    "RemoteTimeout",
    "RemoteUnreachable",
    "event_id_key",
    "event_path_key",
]

event_id_key = "MLRUN-EVENT-ID"
event_path_key = "MLRUN-EVENT-PATH"

DEFAULT_RETRIES = 6
DEFAULT_BACKOFF_FACTOR = 1.0
MAX_BACKOFF_SECONDS = 120.0


class RemoteCallError(RuntimeError):
    """The remote service answered an error (or not JSON): 502, a bad gateway."""

    status_code = HTTPStatus.BAD_GATEWAY


class RemoteUnreachable(OSError):
    """No connection to the remote service: 502."""

    status_code = HTTPStatus.BAD_GATEWAY


class RemoteTimeout(TimeoutError):
    """The remote service did not answer within ``timeout``: 504."""

    status_code = HTTPStatus.GATEWAY_TIMEOUT


class _HttpStep:
    """What both steps share: their arguments, the request they build from a
    body, and one request sent with retries."""

    _arg_names = (
        "url",
        "subpath",
        "method",
        "headers",
        "url_expression",
        "body_expression",
        "return_json",
        "max_in_flight",
        "retries",
        "backoff_factor",
        "timeout",
    )

    def __init__(
        self,
        url: str | None = None,
        subpath: str | None = None,
        method: str | None = None,
        headers: dict[str, str] | None = None,
        url_expression: str | None = None,
        body_expression: str | None = None,
        return_json: bool = True,
        input_path: str | None = None,
        result_path: str | None = None,
        max_in_flight: int | None = None,
        retries: int | None = None,
        backoff_factor: float | None = None,
        timeout: float | None = None,
        name: str | None = None,
        context: object = None,
        full_event: bool | None = None,  # given by graphs; the step always sends the body
    ) -> None:
        if retries is not None and retries < 0:
            raise ValueError(f"retries must be 0 or more, got {retries}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be 1 or more, got {max_in_flight}")
        self.url = url
        self.subpath = subpath
        self.method = method
        self.headers = headers
        self.url_expression = url_expression
        self.body_expression = body_expression
        self.return_json = return_json
        self.input_path = input_path
        self.result_path = result_path
        self.max_in_flight = max_in_flight
        self.retries = retries
        self.backoff_factor = backoff_factor
        self.timeout = timeout
        self.name = name
        self.context = context
        self._endpoint = ""
        self._append_event_path = False
        self._url_of: Callable[[Any], str] | None = None
        self._body_of: Callable[[Any], Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """mlrun's step description: class name, the arguments given, name and paths."""
        args = {key: getattr(self, key) for key in self._arg_names}
        struct: dict[str, Any] = {
            "class_name": class_reference(type(self)),
            "class_args": {key: value for key, value in args.items() if value is not None},
        }
        for key in ("name", "input_path", "result_path"):
            if getattr(self, key) is not None:
                struct[key] = getattr(self, key)
        return struct

    def post_init(self, mode: str = "sync") -> None:
        """Build the endpoint and compile the url/body expressions once."""
        self._endpoint = (self.url or "").strip("/")
        resolve = getattr(self.context, "get_remote_endpoint", None)
        if self.url and resolve is not None:
            self._endpoint = resolve(self.url).strip("/")
        if self.body_expression:
            scope = {"context": self.context}
            self._body_of = _compile(self.body_expression, scope, self.name)
        if self.url_expression:
            scope = {"endpoint": self._endpoint, "context": self.context}
            self._url_of = _compile(self.url_expression, scope, self.name)
        elif self.subpath == "$path":
            self._append_event_path = True
        elif self.subpath:
            self._endpoint = f"{self._endpoint}/{self.subpath.lstrip('/')}"
        if not (self._endpoint or self._url_of):
            raise ValueError(f"step '{self.name}' needs a url or a url_expression")

    def _request(self, event: Event, body: object) -> tuple[str, str, dict[str, str], Any]:
        """``(method, url, headers, data)`` for one body of ``event``."""
        method = (self.method or event.method or "POST").upper()
        headers = dict(self.headers or {})
        if self._url_of is not None:
            url = self._url_of(body)
        else:
            url = self._endpoint
            path = (event.path or "").lstrip("/")
            if self._append_event_path:
                url = f"{url}/{path}"
            if path:
                headers[event_path_key] = event.path
        if event.id:
            headers[event_id_key] = str(event.id)
        if method == "GET":
            body = None
        elif body is not None and not isinstance(body, (str, bytes)):
            if self._body_of is not None:
                body = self._body_of(body)
            body = json.dumps(body)
            headers["Content-Type"] = "application/json"
        return method, url, headers, body

    async def _send(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        headers: dict[str, str],
        data: object,
    ) -> Any:
        """One request with retries: the decoded answer, or an error saying why not;
        traced, a ``remote {url}`` client span whose context the service continues
        (docs/observability.md#tracing)."""
        if not tracing.on:
            return await self._attempts(session, method, url, headers, data)
        attributes = {"http.request.method": method, "url.full": url, "mlserve.step": self.name}
        with tracing.span(f"remote {url}", attributes, kind="client"):
            headers = dict(headers)
            tracing.inject(headers)
            return await self._attempts(session, method, url, headers, data)

    async def _attempts(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        headers: dict[str, str],
        data: object,
    ) -> Any:
        retries = DEFAULT_RETRIES if self.retries is None else self.retries
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        for attempt in range(retries + 1):
            if attempt > 1:  # the first retry is at once, as urllib3's backoff does
                factor = (
                    DEFAULT_BACKOFF_FACTOR if self.backoff_factor is None else self.backoff_factor
                )
                await asyncio.sleep(min(factor * 2 ** (attempt - 1), MAX_BACKOFF_SECONDS))
            last = attempt == retries
            try:
                async with session.request(
                    method, url, headers=headers, data=data, timeout=timeout
                ) as response:
                    content = await response.read()
                    if response.status >= 500 and not last:
                        continue
                    if response.status >= 400:
                        text = content.decode("utf-8", "replace")
                        raise RemoteCallError(
                            f"bad http response {response.status} from {url} in step "
                            f"'{self.name}': {text}"
                        )
                    return self._decode(content, response.headers.get("Content-Type", ""))
            except TimeoutError as exc:
                raise RemoteTimeout(
                    f"http request to {url} timed out after {self.timeout}s in step '{self.name}'"
                ) from exc
            except aiohttp.ClientError as exc:
                if last:
                    reason = f"{type(exc).__name__}: {exc}"
                    raise RemoteUnreachable(f"cannot invoke url: {url}, {reason}") from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _decode(self, content: bytes, content_type: str) -> Any:
        is_json = content_type.lower().startswith("application/json")
        if (self.return_json or is_json) and content:
            try:
                return json.loads(content)
            except ValueError as exc:
                raise RemoteCallError(
                    f"step '{self.name}' expected a JSON answer (return_json=True), got "
                    f"{content[:200]!r}"
                ) from exc
        return content

    def do_event(self, event: Event) -> Event:
        """The sync engine's call: a worker thread without a loop runs one of its own."""
        return asyncio.run(self.do_event_async(event))

    async def do_event_async(self, event: Event) -> Event:
        raise NotImplementedError


class RemoteStep(_HttpStep):
    """Sends the event's body (``input_path`` of it) to ``url`` and writes the
    answer to the body (``result_path`` of it)."""

    def __init__(self, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        if self.retries is None:  # as mlrun: the default shows in to_dict()
            self.retries = DEFAULT_RETRIES

    async def do_event_async(self, event: Event) -> Event:
        method, url, headers, data = self._request(event, get_path(event.body, self.input_path))
        async with _session() as session:
            result = await self._send(session, method, url, headers, data)
        event.body = set_path(event.body, self.result_path, result)
        return event


class BatchHttpRequests(_HttpStep):
    """Sends one request per item of the body's list (``input_path`` of it), all
    at once, and writes the list of answers (``result_path`` of it)."""

    def __init__(
        self, url: str | None = None, url_expression: str | None = None, **kwargs: Any
    ) -> None:
        if url and url_expression:
            raise ValueError("cannot set both url and url_expression")
        super().__init__(url, url_expression=url_expression, **kwargs)

    async def do_event_async(self, event: Event) -> Event:
        items = get_path(event.body, self.input_path)
        if not isinstance(items, list):
            raise InvalidInput(
                f"step '{self.name}' needs a list of requests, got {type(items).__name__}"
            )
        requests = [self._request(event, item) for item in items]
        limit = asyncio.Semaphore(self.max_in_flight or len(requests) or 1)

        async def send(session: aiohttp.ClientSession, request: tuple[Any, ...]) -> Any:
            async with limit:
                return await self._send(session, *request)

        async with _session() as session:
            results = await asyncio.gather(*(send(session, request) for request in requests))
        event.body = set_path(event.body, self.result_path, list(results))
        return event


def _session() -> aiohttp.ClientSession:
    """A session for one event's requests. Its connections are not kept for
    reuse: a pooled connection the server closed meanwhile would fail a retry."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))


def _compile(expression: str, scope: dict[str, Any], step: str | None) -> Callable[[Any], Any]:
    """``lambda event: <expression>`` (the user's own graph code, as mlrun
    evaluates it); a body it cannot read is the request's fault: 400."""
    try:
        fn = eval(f"lambda event: {expression}", scope, {})  # noqa: S307
    except SyntaxError as exc:
        raise ValueError(f"bad expression {expression!r}: {exc}") from exc

    def evaluate(body: object) -> Any:
        try:
            return fn(body)
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise InvalidInput(
                f"step '{step}': {expression!r} cannot be read from the body: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    return evaluate
