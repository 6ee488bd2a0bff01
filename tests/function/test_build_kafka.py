"""``mlserve build --kafka TOPIC@BROKERS --group G``: the Deployment runs the Kafka
consumer mode, KEDA scales it on lag (its CRD schema), nuclio gets a kafka-cluster
trigger; the container's command consumes a real topic (tansu) when run locally."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.function.crd_schemas import validate
from tests.function.test_build import KUBERNETES_VERSION, objects
from tests.kafka import topics
from tests.services import ProcessService, free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
FN = ROOT / "tests" / "kafka" / "fn.py"


def _build(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mlserve", "build", str(FN), "--out", str(out), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("build-kafka")
    result = _build(
        out,
        "--kafka",
        "requests@kafka-0.kafka:9092,kafka-1.kafka:9092",
        "--group",
        "scorers",
        "--output-topic",
        "results",
        "--max-replicas",
        "8",
        "--lag-threshold",
        "50",
    )
    assert result.returncode == 0, result.stderr
    return out


def test_keda_scaled_object_passes_its_crd_schema(built: Path) -> None:
    (scaled,) = objects(built / "keda.yaml")
    validate(scaled, "keda-scaledobject-v1alpha1")
    assert (scaled["apiVersion"], scaled["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    spec = scaled["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "kafka-fn",
    }
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 8)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"] == {
        "bootstrapServers": "kafka-0.kafka:9092,kafka-1.kafka:9092",
        "consumerGroup": "scorers",
        "topic": "requests",
        "lagThreshold": "50",
        "offsetResetPolicy": "earliest",
    }
    trigger["metadata"]["lagThreshold"] = 50  # KEDA's metadata values are strings
    with pytest.raises(jsonschema.ValidationError):
        validate(scaled, "keda-scaledobject-v1alpha1")


def test_the_deployment_runs_the_consumer_mode_without_a_cpu_autoscaler(built: Path) -> None:
    docs = objects(built / "kubernetes.yaml")
    assert [d["kind"] for d in docs] == ["Deployment", "Service"]  # KEDA owns the HPA
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    container = docs[0]["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["mlserve", "serve", "function.yaml"]
    assert command[command.index("--kafka") + 1] == "requests@kafka-0.kafka:9092,kafka-1.kafka:9092"
    assert command[command.index("--group") + 1] == "scorers"
    assert command[command.index("--output-topic") + 1] == "results"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    (service,) = objects(built / "kserve.yaml")  # KServe still serves HTTP: the image's own
    assert "command" not in service["spec"]["predictor"]["containers"][0]


def test_the_nuclio_config_has_a_kafka_cluster_trigger(built: Path) -> None:
    triggers = yaml.safe_load((built / "nuclio.yaml").read_text())["spec"]["triggers"]
    assert triggers == {
        "kafka": {
            "kind": "kafka-cluster",
            "attributes": {
                "brokers": ["kafka-0.kafka:9092", "kafka-1.kafka:9092"],
                "topics": ["requests"],
                "consumerGroup": "scorers",
                "initialOffset": "earliest",
            },
        }
    }


def test_bad_kafka_options_end_with_one_line(tmp_path: Path) -> None:
    result = _build(tmp_path / "a", "--kafka", "requests", "--group", "g")
    assert result.returncode != 0 and "TOPIC@BROKERS" in result.stderr
    result = _build(tmp_path / "b", "--kafka", "requests@host:9092")
    assert result.returncode != 0 and "--group" in result.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_containers_command_consumes_the_topic(tmp_path: Path, kafka: ProcessService) -> None:
    """The Deployment's command, run in the build folder against a real broker."""
    tag = uuid.uuid4().hex[:8]
    out = tmp_path / "build"
    result = _build(
        out,
        "--kafka",
        f"in-{tag}@{kafka.url}",
        "--group",
        f"g-{tag}",
        "--output-topic",
        f"out-{tag}",
    )
    assert result.returncode == 0, result.stderr
    container = objects(out / "kubernetes.yaml")[0]["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    port = free_port()
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)
    body = json.dumps({"model": "double", "inputs": [21]}).encode()
    topics.produce(kafka.url, f"in-{tag}", [(b"k", body, [])])
    proc = subprocess.Popen(
        [sys.executable, "-m", *command],
        cwd=out,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, timeout=60, proc=proc)
        [message] = topics.read(kafka.url, f"out-{tag}", 1)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    assert message.key() == b"k"
    assert json.loads(message.value())["outputs"] == [42]
