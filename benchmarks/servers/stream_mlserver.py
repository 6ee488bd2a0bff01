"""MLServer's streaming model for benchmarks/streaming.py: ``predict_stream`` is an async
generator (MLServer streams only that way, and only with ``parallel_workers: 0``: its
worker pool forwards ``predict`` alone). Loaded by ``mlserver start`` from a folder the
harness writes."""

from __future__ import annotations

from collections.abc import AsyncIterator

from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Tokens(MLModel):
    """Yields as many one-word chunks as the INT32 input says (a BYTES [1] tensor each)."""

    async def load(self) -> bool:
        return True

    async def predict_stream(
        self, payloads: AsyncIterator[InferenceRequest]
    ) -> AsyncIterator[InferenceResponse]:
        payload = await payloads.__anext__()
        count = int(NumpyCodec.decode_input(payload.inputs[0]).ravel()[0])
        for _ in range(count):
            yield InferenceResponse(
                model_name=self.name,
                outputs=[StringCodec.encode_output("output-0", ["token"])],
            )
