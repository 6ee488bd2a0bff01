"""TLS and mutual TLS on the gRPC ports (docs/security.md#tls): the V2 port asked by
tritonclient.grpc, TF Serving's port by its own stubs over ``grpc.secure_channel``,
with certificates the tests make. A plaintext channel and a client without a
certificate fail, and the server goes on serving."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.netserver import ServerProcess, start_server
from tests.services import free_port, wait_for_port
from tests.tls_certs import Certificates, make_certificates

TFS = importlib.util.find_spec("tensorflow_serving") is not None
TIMEOUT = 30.0  # the first Predict imports TensorFlow in the server


@dataclass
class Served:
    server: ServerProcess
    tfs_port: int | None

    @property
    def tfs_address(self) -> str:
        return f"localhost:{self.tfs_port}"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


def _serve(certs: Certificates, mutual: bool) -> Served:
    """tests/http/fn.py with TLS on its HTTP and V2 gRPC ports and, when
    tensorflow-serving-api is installed, on a TF Serving gRPC port."""
    flags = ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]
    flags += ["--ssl-ca-certs", str(certs.ca)] if mutual else []
    tfs_port = free_port() if TFS else None
    if tfs_port:
        flags += ["--tfs-grpc-port", str(tfs_port)]
    server = start_server(*flags)
    if tfs_port:
        wait_for_port(tfs_port, timeout=60, proc=server.proc)
    return Served(server, tfs_port)


@pytest.fixture(scope="module")
def tls_server(certs: Certificates) -> Iterator[Served]:
    served = _serve(certs, mutual=False)
    yield served
    served.server.stop()


@pytest.fixture(scope="module")
def mtls_server(certs: Certificates) -> Iterator[Served]:
    served = _serve(certs, mutual=True)
    yield served
    served.server.stop()


def triton(address: str, certs: Certificates, with_certificate: bool) -> Any:
    key = {"private_key": str(certs.client_key), "certificate_chain": str(certs.client_cert)}
    return grpcclient.InferenceServerClient(
        address, ssl=True, root_certificates=str(certs.ca), **(key if with_certificate else {})
    )


def scaled(client: grpcclient.InferenceServerClient) -> np.ndarray:
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    tensor = grpcclient.InferInput("x", [2, 2], "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer("scale", [tensor], client_timeout=TIMEOUT).as_numpy("scaled") / x


def test_tritonclient_grpc_over_tls(tls_server: Served, certs: Certificates) -> None:
    port = tls_server.server.grpc_port
    for host in ("127.0.0.1", "localhost"):  # both names of the certificate
        client = triton(f"{host}:{port}", certs, with_certificate=False)
        try:
            assert client.is_server_live() and client.is_server_ready()
            assert (scaled(client) == 3).all()
        finally:
            client.close()


def test_a_plaintext_channel_fails_and_the_server_keeps_serving(
    tls_server: Served, certs: Certificates
) -> None:
    plain = grpcclient.InferenceServerClient(tls_server.server.grpc_address)
    try:
        with pytest.raises(InferenceServerException, match="UNAVAILABLE"):
            plain.is_server_live(client_timeout=TIMEOUT)
    finally:
        plain.close()
    client = triton(tls_server.server.grpc_address, certs, with_certificate=False)
    try:
        assert client.is_server_live()
    finally:
        client.close()
    assert tls_server.server.proc.poll() is None


def test_mtls_refuses_a_client_without_a_certificate(
    mtls_server: Served, certs: Certificates
) -> None:
    client = triton(mtls_server.server.grpc_address, certs, with_certificate=False)
    try:
        with pytest.raises(InferenceServerException, match="UNAVAILABLE"):
            client.is_server_live(client_timeout=TIMEOUT)
    finally:
        client.close()
    client = triton(mtls_server.server.grpc_address, certs, with_certificate=True)
    try:
        assert client.is_server_ready()
        assert (scaled(client) == 3).all()
    finally:
        client.close()
    assert mtls_server.server.proc.poll() is None


def _credentials(certs: Certificates, with_certificate: bool) -> grpc.ChannelCredentials:
    if not with_certificate:
        return grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
    return grpc.ssl_channel_credentials(
        root_certificates=certs.ca.read_bytes(),
        private_key=certs.client_key.read_bytes(),
        certificate_chain=certs.client_cert.read_bytes(),
    )


def _predict(address: str, credentials: grpc.ChannelCredentials) -> np.ndarray:
    """TF Serving's client code: a secure channel, its stub, ``Predict`` on ``scale``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf = pytest.importorskip("tensorflow")
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "scale"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[1.0, 2.0]], dtype=np.float32)))
    with grpc.secure_channel(address, credentials) as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        result = stub.Predict(request, TIMEOUT)
    return np.asarray(tf.make_ndarray(result.outputs["scaled"]))


@pytest.mark.skipif(not TFS, reason="needs tensorflow-serving-api")
def test_tf_serving_predict_over_tls(tls_server: Served, certs: Certificates) -> None:
    got = _predict(tls_server.tfs_address, _credentials(certs, with_certificate=False))
    np.testing.assert_allclose(got, [[3.0, 6.0]])
    with grpc.insecure_channel(tls_server.tfs_address) as channel:  # plaintext
        predict = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
        with pytest.raises(grpc.RpcError) as caught:
            predict(b"", timeout=TIMEOUT)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert tls_server.server.proc.poll() is None


@pytest.mark.skipif(not TFS, reason="needs tensorflow-serving-api")
def test_tf_serving_with_mtls_needs_a_client_certificate(
    mtls_server: Served, certs: Certificates
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _predict(mtls_server.tfs_address, _credentials(certs, with_certificate=False))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    got = _predict(mtls_server.tfs_address, _credentials(certs, with_certificate=True))
    np.testing.assert_allclose(got, [[3.0, 6.0]])
