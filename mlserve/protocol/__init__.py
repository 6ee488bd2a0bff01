"""The V2 (Open Inference) protocol: request forms, tensors, errors.

Pure: it imports nothing else of mlserve.
"""

from __future__ import annotations

from mlserve.protocol.errors import (
    IllegalOperation,
    InvalidInput,
    MLServeError,
    ModelError,
    ModelNotFound,
    ModelNotReady,
    NotSupported,
    PayloadTooLarge,
    Timeout,
    TooManyRequests,
    Unauthorized,
)
from mlserve.protocol.forms import InferenceRequest, decode_request, is_tensor_inputs

__all__ = [
    "IllegalOperation",
    "InferenceRequest",
    "InvalidInput",
    "MLServeError",
    "ModelError",
    "ModelNotFound",
    "ModelNotReady",
    "NotSupported",
    "PayloadTooLarge",
    "Timeout",
    "TooManyRequests",
    "Unauthorized",
    "decode_request",
    "is_tensor_inputs",
]
