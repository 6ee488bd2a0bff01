"""Model names that would leave their place answer 400 on every route that takes one
(docs/security.md#model-control-off-by-default), over both real HTTP faces (raw
targets: an HTTP client would normalize ``..`` away), and INVALID_ARGUMENT over gRPC."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess, start_server

REFUSED = [
    # TF Serving's REST API: the name before the ``:verb``, as a version or a label
    ("POST", "/v1/models/..:predict"),
    ("POST", "/v1/models/%2e%2e:predict"),
    ("POST", "/v1/models/%2E%2E:predict"),
    ("POST", "/v1/models/.:predict"),
    ("POST", "/v1/models/..:classify"),
    ("POST", "/v1/models/echo/versions/..:predict"),
    ("POST", "/v1/models/echo/labels/..:predict"),
    ("POST", "/v1/models/a%00:predict"),
    ("POST", "/v1/models/..%2fx:predict"),
    ("GET", "/v1/models/%2e%2e/metadata"),
    ("GET", "/v1/models/.."),
    ("GET", "/v1/models/..%5c"),
    # V2: a model, a version, a ``name:version`` key
    ("POST", "/v2/models/../infer"),
    ("POST", "/v2/models/%2e%2e/infer"),
    ("POST", "/v2/models/..:1/infer"),
    ("POST", "/v2/models/%2e%2e:1/infer"),
    ("POST", "/v2/models/..%3A1/infer"),
    ("POST", "/v2/models/echo:../infer"),
    ("POST", "/v2/models/echo/versions/%2e%2e/infer"),
    ("GET", "/v2/models/%2e%2e"),
    ("GET", "/v2/models/%2e%2e/ready"),
    ("GET", "/v2/models/..:1/ready"),
    ("GET", "/v2/models/%2e%2e/config"),
    ("GET", "/v2/models/%2e%2e/stats"),
    ("GET", "/v2/models/a%5cb/ready"),
    ("GET", "/v2/models/..%00/ready"),
    # the repository extension
    ("POST", "/v2/repository/models/../load"),
    ("POST", "/v2/repository/models/%2e%2e/load"),
    ("POST", "/v2/repository/models/..:1/load"),
    ("POST", "/v2/repository/models/..%2f..%2fetc/load"),
    ("POST", "/v2/repository/models/%2e%2e/unload"),
]


@pytest.fixture(scope="module", params=["mlserve", "asgi"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    served = start_server("--http", request.param, "--model-control-mode", "explicit")
    yield served
    served.stop()


def _status(port: int, method: str, target: str) -> tuple[int, bytes]:
    """The status and body of one request sent as written (no normalization)."""
    body = (b'{"instances": [1]}' if target.startswith("/v1/") else b'{"inputs": [1]}') * (
        method == "POST"
    )
    head = (
        f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize(("method", "target"), REFUSED)
def test_a_name_leaving_the_repository_is_400(
    server: ServerProcess, method: str, target: str
) -> None:
    status, body = _status(server.port, method, target)
    assert status == 400, (target, body)
    assert b"InvalidInput" in body


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("POST", "/v1/models/echo:predict"),
        ("POST", "/v2/models/echo/infer"),
        ("POST", "/v2/models/version:2/infer"),
        ("GET", "/v2/models/version/versions/1/ready"),
    ],
)
def test_plain_names_still_serve(server: ServerProcess, method: str, target: str) -> None:
    status, body = _status(server.port, method, target)
    assert status == 200, (target, body)


@pytest.mark.parametrize("name", ["..", ".", "..:1", "m:..", "a/b", "a\\b", "a\x00"])
def test_grpc_model_names_leaving_the_repository_are_invalid_argument(
    server: ServerProcess, name: str
) -> None:
    x = grpcclient.InferInput("x", [2], "INT64")
    x.set_data_from_numpy(np.array([1, 2], dtype=np.int64))
    with grpcclient.InferenceServerClient(server.grpc_address) as client:
        calls = [
            lambda: client.infer(name, [x]),
            lambda: client.is_model_ready(name),
            lambda: client.get_model_metadata(name),
            lambda: client.get_model_config(name),
            lambda: client.load_model(name),
        ]
        for call in calls:
            with pytest.raises(InferenceServerException) as raised:
                call()
            assert raised.value.status() == "StatusCode.INVALID_ARGUMENT", raised.value
