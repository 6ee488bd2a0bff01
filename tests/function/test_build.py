"""``mlserve build``: the build folder lints and validates offline (hadolint,
Kubernetes' schemas, KServe's CRD), and its entry point serves the function."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml

from mlserve.cli import load_function
from mlserve.function.build import BuildOptions, build, entrypoint
from tests.services import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "serving.py"
KUBERNETES_VERSION = "1.37.0"  # pinned: the schemas kubernetes-validate ships for it
SCHEMAS = Path(__file__).parent / "schemas"
ROW = {"inputs": [[5.1, 3.5, 1.4, 0.2]]}


def objects(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("build")
    options = BuildOptions(image="registry.local/flowers:1", grpc_port=8081, auth_secret="tokens")
    with pytest.warns(UserWarning, match="only exist on this machine"):  # the nuclio config
        build(load_function(str(EXAMPLE)), out, options)
    return out


def test_the_folder_is_a_build_context(built: Path) -> None:
    names = {p.name for p in built.iterdir()}
    assert names == {
        "Dockerfile",
        "requirements.txt",
        "function.yaml",
        "models",
        "kubernetes.yaml",
        "kserve.yaml",
        "nuclio.yaml",
    }
    assert (built / "models" / "flowers" / "model.npz").is_file()
    routes = yaml.safe_load((built / "function.yaml").read_text())["spec"]["graph"]["routes"]
    # both versions read one folder: one copy, at a path relative to the image's WORKDIR
    assert {r["class_args"]["model_path"] for r in routes.values()} == {"models/flowers"}
    assert (built / "requirements.txt").read_text().startswith("mlserve==")


def test_dockerfile_lints_clean(built: Path) -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    result = subprocess.run(
        [hadolint, "--failure-threshold", "info", str(built / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = (built / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert "USER 10001" in text
    assert "/v2/health/live" in text.split("HEALTHCHECK", 1)[1]
    assert 'ENTRYPOINT ["mlserve", "serve", "function.yaml"' in text


def test_kubernetes_objects_validate_strictly(built: Path) -> None:
    docs = objects(built / "kubernetes.yaml")
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "HorizontalPodAutoscaler"]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_misspelt_field_fails_validation(built: Path) -> None:
    """The validation is strict: the check above can fail."""
    deployment = objects(built / "kubernetes.yaml")[0]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_deployment_probes_resources_drain_and_auth(built: Path) -> None:
    deployment, service, autoscaler = objects(built / "kubernetes.yaml")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.local/flowers:1"
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "512Mi"}
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pre_stop + BuildOptions().drain_seconds
    assert container["env"] == [
        {
            "name": "MLSERVE_AUTH_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "token"}},
        }
    ]
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"http": 8080, "grpc": 8081}
    assert autoscaler["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]


def test_kserve_inference_service_passes_its_crd_schema(built: Path) -> None:
    with gzip.open(SCHEMAS / "kserve-inferenceservice-v1beta1.json.gz") as f:
        schema = json.load(f)
    (service,) = objects(built / "kserve.yaml")
    jsonschema.validate(service, schema)
    container = service["spec"]["predictor"]["containers"][0]
    assert container["name"] == "kserve-container"
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    service["spec"]["predictor"]["minReplicas"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(service, schema)


def test_nuclio_config_is_the_exported_one(built: Path) -> None:
    config = yaml.safe_load((built / "nuclio.yaml").read_text())
    assert config["kind"] == "NuclioFunction"
    assert config["spec"]["build"]["functionSourceCode"]


def test_the_entry_point_serves_the_function(built: Path) -> None:
    """The image's command line, run in the build folder (on 127.0.0.1 here)."""
    port = free_port()
    command = entrypoint(BuildOptions())
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)
    proc = subprocess.Popen(
        [sys.executable, "-m", *command],
        cwd=built,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, timeout=60, proc=proc)
        ready = httpx.get(f"http://127.0.0.1:{port}/v2/health/ready")
        answer = httpx.post(f"http://127.0.0.1:{port}/v2/models/flowers/infer", json=ROW)
    finally:
        proc.terminate()
        proc.wait(30)
    assert ready.status_code == 200
    expected = (
        load_function(str(EXAMPLE)).to_mock_server().test("/v2/models/flowers/infer", body=ROW)
    )
    assert answer.json()["outputs"] == expected["outputs"]


def test_a_repository_is_copied_into_the_build(tmp_path: Path) -> None:
    repository = ROOT / "examples" / "tf_repository"
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "mlserve", "build", str(repository), "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout
    graph = yaml.safe_load((out / "function.yaml").read_text())["spec"]["graph"]
    assert graph["class_args"]["repository"] == "models/tf_repository"
    copied = sorted(
        p.relative_to(out / "models").as_posix() for p in (out / "models").rglob("*.pb")
    )
    original = sorted(p.relative_to(repository.parent).as_posix() for p in repository.rglob("*.pb"))
    assert copied == original
    assert objects(out / "kubernetes.yaml")[0]["metadata"]["name"] == "tf-repository"


def test_the_image_hides_exception_text_from_clients() -> None:
    """Container images run with --hide-errors (MLSERVE_HIDE_ERRORS=1)."""
    from mlserve.function.build import BuildOptions, dockerfile

    assert "ENV MLSERVE_HIDE_ERRORS=1\n" in dockerfile("fn", BuildOptions(), has_models=False)
