"""MLServer's echo model: a custom runtime, loaded by ``mlserver start`` from a
folder the harness writes (settings.json, model-settings.json, this file)."""

from __future__ import annotations

from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class Echo(MLModel):
    """Returns its input: a [1, 4] FP32 tensor comes back as the output tensor."""

    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        array = NumpyCodec.decode_input(payload.inputs[0])
        return InferenceResponse(
            model_name=self.name,
            id=payload.id,
            outputs=[NumpyCodec.encode_output("output-0", array)],
        )
