"""The checks of test_convert.py, run in a process of their own: mlserve's generated
messages and tritonclient's (which the other gRPC tests import) declare the same
protobuf package, and one process's descriptor pool holds only one of them.

    python -m tests.grpc.convert_checks   # prints one line per check, then "ok"
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlserve.grpc import convert
from mlserve.grpc.convert import infer_from_core, infer_response_bytes
from mlserve.grpc.generated import grpc_predict_v2_pb2 as pb
from mlserve.protocol.tensors import RAW, plain_output


def _answer(array: np.ndarray, **fields: Any) -> dict[str, Any]:
    body = {"id": "req-1", "model_name": "m", "outputs": [plain_output("out", array, True)]}
    body.update(fields)
    return {key: value for key, value in body.items() if value is not None}


ANSWERS = {
    "fp32": _answer(np.arange(4, dtype=np.float32).reshape(1, 4)),
    "fp64, versioned": _answer(np.array([0.1, -2.5]), model_version="3"),
    "no id": _answer(np.ones((2, 2), np.float32), id=None),
    "an empty id": _answer(np.ones(3, np.float32), id=""),
    "long (multi-byte lengths)": _answer(np.arange(300, dtype=np.float64), id="x" * 200),
    "a non-ascii name": _answer(np.ones(1, np.float32), model_name="modèle"),
    "int32 (typed through protobuf)": _answer(np.array([1, -2, 3], np.int32)),
    "fp16 (raw only)": _answer(np.ones(2, np.float16)),
    "an empty tensor": _answer(np.zeros((0, 4), np.float32)),
    "parameters": _answer(np.ones(1, np.float32), parameters={"sequence_id": 7}),
    "two outputs": {
        "model_name": "m",
        "outputs": [
            plain_output("a", np.ones(2, np.float32), True),
            plain_output("b", np.zeros(1, np.float64), True),
        ],
    },
}
# The usual answers: joined from cached heads, with no message built.
USUAL = ["fp32", "fp64, versioned", "no id", "long (multi-byte lengths)", "a non-ascii name"]


def the_bytes_are_protobufs_own() -> None:
    for name, answer in ANSWERS.items():
        for raw in (False, True):
            expected = infer_from_core(answer, raw).SerializeToString()
            assert infer_response_bytes(answer, raw) == expected, (name, raw)
            assert infer_response_bytes(answer, raw) == expected, (name, raw, "cached")


def the_usual_answers_build_no_message() -> None:
    expected = {
        (name, raw): infer_from_core(ANSWERS[name], raw).SerializeToString()
        for name in USUAL
        for raw in (False, True)
    }
    built = convert.infer_from_core
    convert.infer_from_core = None  # type: ignore[assignment]  # a call would fail
    try:
        joined = {(name, raw): infer_response_bytes(ANSWERS[name], raw) for name, raw in expected}
    finally:
        convert.infer_from_core = built
    assert joined == expected


def the_shape_must_hold_the_values_typed() -> None:
    answer = _answer(np.arange(4, dtype=np.float32))
    answer["outputs"][0]["shape"] = [2, 4]  # 8 values said, 4 sent
    errors = []
    for encode in (infer_from_core, infer_response_bytes):
        try:
            encode(answer, False)
        except Exception as exc:  # the same refusal both ways
            errors.append(type(exc))
    assert len(errors) == 2 and errors[0] is errors[1], errors


def the_usual_answer_reads_back() -> None:
    answer = ANSWERS["fp32"]
    message = pb.ModelInferResponse.FromString(infer_response_bytes(answer, False))
    assert (message.model_name, message.id) == ("m", "req-1")
    assert list(message.outputs[0].shape) == [1, 4]
    assert list(message.outputs[0].contents.fp32_contents) == [0.0, 1.0, 2.0, 3.0]
    raw = pb.ModelInferResponse.FromString(infer_response_bytes(answer, True))
    assert raw.raw_output_contents == [answer["outputs"][0][RAW]]


CHECKS = [
    the_bytes_are_protobufs_own,
    the_usual_answers_build_no_message,
    the_shape_must_hold_the_values_typed,
    the_usual_answer_reads_back,
]

if __name__ == "__main__":
    for check in CHECKS:
        check()
        print(check.__name__)
    print("ok")
