"""mlrun's ``Model`` step (``mlrun.serving.Model``): a flow step that is a model,
for code written for mlrun's graphs (docs/migrating-from-mlrun.md#streaming).

    class Tokens(Model):
        def predict(self, body, **kwargs):
            for word in body.split():
                yield word

    graph.to(Tokens(name="tokens")).respond()

The flow calls ``predict`` with the event's body, or ``predict_async`` when a
subclass defines it; a generator (or an async generator) streams
(docs/graphs.md#streaming-steps). A model whose ``predict`` returns a generator
without being a generator function says so by overriding ``is_streaming``.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["Model"]


class Model:
    """A model in a flow: ``load`` once, then ``predict`` per event."""

    def __init__(
        self,
        name: str | None = None,
        raise_exception: bool = True,
        artifact_uri: str | None = None,
        context: object = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self.raise_exception = raise_exception
        self.artifact_uri = artifact_uri
        self.context = context
        for key, value in kwargs.items():  # the step's arguments, as mlrun sets them
            setattr(self, key, value)
        if type(self).predict_async is not Model.predict_async:
            self.do = self.predict_async  # type: ignore[method-assign]

    def load(self) -> None:
        """Load what ``predict`` needs; called once, before the first event."""

    def post_init(self, mode: str = "sync") -> None:
        self.load()

    def predict(self, body: Any, **kwargs: Any) -> Any:
        """The answer to ``body`` (a generator streams); the body itself by default."""
        return body

    async def predict_async(self, body: Any, **kwargs: Any) -> Any:
        """``predict`` for the async engine; a subclass's own is what the flow calls."""
        return self.predict(body, **kwargs)

    def is_streaming(self) -> bool:
        """Whether the answers stream: ``predict`` is a generator function or
        ``predict_async`` an async generator function. Override it when ``predict``
        returns a generator without being one."""
        return inspect.isgeneratorfunction(self.predict) or inspect.isasyncgenfunction(
            self.predict_async
        )

    def do(self, body: Any) -> Any:
        """The flow's call: ``predict`` with the event's body."""
        return self.predict(body)
