"""``mlserve build``: the build folder deploys as written. It installs mlserve from
a wheel built into it, every path it names is its own, its YAML has no anchors,
and it lints and validates offline (hadolint, Kubernetes' schemas, the KServe and
Knative CRDs, Knative's own container rules); its entry point, run with the
wheel it installs, serves the function."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml

from mlserve.cli import load_function
from mlserve.function.build import (
    TLS_DIR,
    BuildOptions,
    entrypoint,
    kserve_objects,
    kubernetes_objects,
)
from mlserve.function.wheel import WheelError, source_wheel
from tests.function.crd_schemas import validate
from tests.function.knative_rules import knative_errors
from tests.netserver import start_server
from tests.services import free_port, wait_for_port
from tests.tls_certs import make_certificates

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "serving.py"
KUBERNETES_VERSION = "1.37.0"  # pinned: the schemas kubernetes-validate ships for it
ROW = {"inputs": [[5.1, 3.5, 1.4, 0.2]]}
WHEEL = "mlserve-0.1.0-py3-none-any.whl"
SCRAPE = {
    "prometheus.io/scrape": "true",
    "prometheus.io/port": "8080",
    "prometheus.io/path": "/metrics",
}
# KServe's ComponentExtensionSpec: the predictor's fields that are not its pod's
# (pkg/apis/serving/v1beta1/component.go of github.com/kserve/kserve).
COMPONENT_FIELDS = {
    "minReplicas",
    "maxReplicas",
    "scaleTarget",
    "scaleMetric",
    "scaleMetricType",
    "containerConcurrency",
    "timeout",
    "canaryTrafficPercent",
    "logger",
    "batcher",
    "labels",
    "annotations",
    "deploymentStrategy",
    "autoScaling",
}


@dataclass
class Build:
    out: Path
    source: Path
    """The folder the function and its models were built from."""
    result: subprocess.CompletedProcess[str]


def objects(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def mlserve_build(
    target: Path, out: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mlserve", "build", str(target), "--out", str(out), *args]
    return subprocess.run(
        command, capture_output=True, text=True, cwd=out.parent, env={**os.environ, **env}
    )


def machine_paths(out: Path, *paths: Path) -> list[str]:
    """Files of ``out`` (the wheel's members included) that name any of ``paths``."""
    needles = [str(p).encode() for p in paths]
    found = []
    for file in sorted(p for p in out.rglob("*") if p.is_file()):
        members = {file.name: file.read_bytes()}
        if file.suffix == ".whl":
            with zipfile.ZipFile(file) as wheel:
                members = {name: wheel.read(name) for name in wheel.namelist()}
        found += [
            f"{file}:{name}" for name, data in members.items() if any(n in data for n in needles)
        ]
    return found


@pytest.fixture(scope="module")
def build_run(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """``mlserve build`` of a copy of the example (function and models) in a tmp folder."""
    source = tmp_path_factory.mktemp("source")
    shutil.copy(EXAMPLE, source / "serving.py")
    shutil.copytree(EXAMPLE.parent / "models", source / "models")
    out = tmp_path_factory.mktemp("build") / "out"
    args = ("--image", "registry.local/flowers:1", "--grpc-port", "8081", "--auth-secret", "tokens")
    result = mlserve_build(source / "serving.py", out, *args)
    assert result.returncode == 0, result.stderr
    return Build(out, source, result)


@pytest.fixture(scope="module")
def built(build_run: Build) -> Path:
    return build_run.out


@pytest.fixture(scope="module")
def installed(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """requirements.txt installed as the Dockerfile does (in the build folder), into
    a folder of its own; mlserve's dependencies come from this environment."""
    target = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet"]
    result = subprocess.run(
        [*command, "--target", str(target), "-r", "requirements.txt"],
        capture_output=True,
        text=True,
        cwd=built,
    )
    assert result.returncode == 0, result.stderr
    return target


def test_the_folder_is_a_build_context(built: Path) -> None:
    names = {p.name for p in built.iterdir()}
    assert names == {
        "Dockerfile",
        "requirements.txt",
        "wheels",
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
    assert (built / "requirements.txt").read_text() == f"./wheels/{WHEEL}\n"
    assert [p.name for p in (built / "wheels").iterdir()] == [WHEEL]


def test_the_build_says_one_mlserve_line_per_file_and_nothing_else(build_run: Build) -> None:
    assert build_run.result.stderr == ""
    lines = build_run.result.stdout.splitlines()
    assert lines and all(line.startswith("mlserve: wrote ") for line in lines)
    assert f"mlserve: wrote {build_run.out / 'wheels' / WHEEL}" in lines


def test_no_file_names_a_path_of_the_build_machine(build_run: Build) -> None:
    assert machine_paths(build_run.out, build_run.source, build_run.out, ROOT) == []
    # the check finds such a path where there is one
    (build_run.out / "models" / "stray.txt").write_text(str(build_run.source / "models"))
    try:
        assert machine_paths(build_run.out, build_run.source) != []
    finally:
        (build_run.out / "models" / "stray.txt").unlink()


def test_no_yaml_file_has_anchors_or_aliases(built: Path) -> None:
    def anchored(text: str) -> list[Any]:
        return [
            event
            for event in yaml.parse(text)
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None)
        ]

    for path in built.glob("*.yaml"):
        assert anchored(path.read_text()) == [], path
    # PyYAML's own dumper anchors the labels the Deployment shares: the check sees it
    docs = kubernetes_objects("fn", BuildOptions())
    assert anchored(yaml.safe_dump_all(docs)) != []


def test_dockerfile_lints_clean_and_installs_the_wheel(built: Path) -> None:
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
    lines = text.splitlines()
    copy_wheels = lines.index("COPY wheels/ wheels/")
    assert lines.index("COPY requirements.txt ./") < copy_wheels
    assert lines[copy_wheels + 1] == "RUN pip install --no-cache-dir -r requirements.txt"


def test_the_wheel_holds_the_whole_package(installed: Path) -> None:
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "mlserve").rglob("*.py")}
    wheel = {p.relative_to(installed).as_posix() for p in (installed / "mlserve").rglob("*.py")}
    assert wheel == package
    assert (installed / "bin" / "mlserve").is_file()  # the console script of its entry points
    page = {p.name for p in (ROOT / "mlserve" / "console").iterdir() if p.is_file()}
    shipped = {p.name for p in (installed / "mlserve" / "console").iterdir()}
    assert page and shipped == page  # the web console's files: package data, no Python


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


def test_deployment_probes_resources_drain_auth_and_scraping(built: Path) -> None:
    deployment, service, autoscaler = objects(built / "kubernetes.yaml")
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"] == SCRAPE
    pod = template["spec"]
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
    (service,) = objects(built / "kserve.yaml")
    validate(service, "kserve-inferenceservice-v1beta1")
    predictor = service["spec"]["predictor"]
    assert predictor["annotations"] == SCRAPE
    container = predictor["containers"][0]
    assert container["name"] == "kserve-container"
    assert container["ports"] == [{"name": "http1", "containerPort": 8080, "protocol": "TCP"}]
    predictor["minReplicas"] = "one"
    with pytest.raises(jsonschema.ValidationError):
        validate(service, "kserve-inferenceservice-v1beta1")
    predictor["minReplicas"] = 1
    container["readinesProbe"] = container.pop("readinessProbe")  # read strictly
    with pytest.raises(jsonschema.ValidationError, match="readinesProbe"):
        validate(service, "kserve-inferenceservice-v1beta1")


def knative_service(inference_service: dict[str, Any]) -> dict[str, Any]:
    """The Knative Service KServe makes of an InferenceService's predictor
    (``createKnativeService`` in KServe's ksvc_reconciler.go): its pod fields
    become the revision's spec, its annotations the revision's."""
    predictor = inference_service["spec"]["predictor"]
    pod = {key: value for key, value in predictor.items() if key not in COMPONENT_FIELDS}
    annotations = {
        **predictor.get("annotations", {}),
        "autoscaling.knative.dev/min-scale": str(predictor.get("minReplicas", 1)),
        "autoscaling.knative.dev/max-scale": str(predictor.get("maxReplicas", 0)),
    }
    return {
        "apiVersion": "serving.knative.dev/v1",
        "kind": "Service",
        "metadata": {"name": f"{inference_service['metadata']['name']}-predictor"},
        "spec": {"template": {"metadata": {"annotations": annotations}, "spec": pod}},
    }


def test_kserve_predictor_passes_knatives_schema_and_rules(built: Path) -> None:
    (inference_service,) = objects(built / "kserve.yaml")
    service = knative_service(inference_service)
    validate(service, "knative-service-v1")
    pod = service["spec"]["template"]["spec"]
    assert knative_errors(pod) == []
    assert pod["containers"][0]["ports"][0]["name"] in ("http1", "h2c")


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda c: c["ports"][0].update(name="http"), "Port name http is not allowed"),
        (lambda c: c["ports"][0].update(containerPort=8012), "8012 is a reserved port"),
        (lambda c: c["ports"].append({"containerPort": 8081}), "more than one container port"),
        (lambda c: c.update(env=[{"name": "K_SERVICE", "value": "x"}]), "reserved environment"),
        (lambda c: c.update(lifecycle={"preStop": {}}), "field lifecycle is not allowed"),
        (lambda c: c["livenessProbe"]["httpGet"].update(port="http"), "Probe port must match"),
    ],
)
def test_knatives_rules_refuse_what_knative_refuses(built: Path, change: Any, error: str) -> None:
    """The rules can fail: each change is one Knative's webhook refuses."""
    (inference_service,) = objects(built / "kserve.yaml")
    pod = knative_service(inference_service)["spec"]["template"]["spec"]
    change(pod["containers"][0])
    assert any(error in message for message in knative_errors(pod)), knative_errors(pod)


def test_a_lifecycle_hook_fails_knatives_schema(built: Path) -> None:
    """Knative's CRD schema carries its field masks: KServe's pod may not stop with a hook."""
    (inference_service,) = objects(built / "kserve.yaml")
    service = knative_service(inference_service)
    service["spec"]["template"]["spec"]["containers"][0]["lifecycle"] = {"preStop": {}}
    with pytest.raises(jsonschema.ValidationError, match="lifecycle"):
        validate(service, "knative-service-v1")


def test_nuclio_config_builds_on_the_image(built: Path) -> None:
    config = yaml.safe_load((built / "nuclio.yaml").read_text())
    assert config["kind"] == "NuclioFunction"
    spec = config["spec"]
    assert spec["build"]["baseImage"] == "registry.local/flowers:1"
    assert "commands" not in spec["build"]  # mlserve and the requirements are in the image
    assert spec["build"]["functionSourceCode"]
    (env,) = spec["env"]
    routes = json.loads(env["value"])["spec"]["graph"]["routes"]
    paths = {route["class_args"]["model_path"] for route in routes.values()}
    assert paths == {"models/flowers"} and (built / "models" / "flowers").is_dir()


def test_the_entry_point_serves_the_function_with_the_wheel(built: Path, installed: Path) -> None:
    """The image's command line, run in the build folder (on 127.0.0.1 here) by
    the mlserve that requirements.txt installs."""
    env = {**os.environ, "PYTHONPATH": str(installed)}
    which = subprocess.run(
        [sys.executable, "-c", "import mlserve; print(mlserve.__file__)"],
        capture_output=True,
        text=True,
        cwd=built,
        env=env,
        check=True,
    )
    assert Path(which.stdout.strip()).is_relative_to(installed)
    port = free_port()
    command = entrypoint(BuildOptions())
    command[command.index("--host") + 1] = "127.0.0.1"
    command[command.index("--port") + 1] = str(port)
    proc = subprocess.Popen(
        [sys.executable, "-m", *command],
        cwd=built,
        env=env,
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


def test_an_installed_mlserve_is_packed_into_the_same_wheel(
    built: Path, installed: Path, build_run: Build, tmp_path: Path
) -> None:
    """mlserve installed from a wheel (no source tree): the build packs the installed
    files again, with the extras asked for; pip reads that requirement."""
    probe = "from mlserve.function import wheel; print(wheel.PACKAGE, wheel.source_tree())"
    env = {**os.environ, "PYTHONPATH": str(installed)}
    where = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert where.stdout.split() == [str(installed / "mlserve"), "None"]
    out = tmp_path / "out"
    result = mlserve_build(
        build_run.source / "serving.py",
        out,
        "--mlserve-extra",
        "sklearn",
        PYTHONPATH=str(installed),
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    with (
        zipfile.ZipFile(built / "wheels" / WHEEL) as first,
        zipfile.ZipFile(out / "wheels" / WHEEL) as again,
    ):
        names = set(first.namelist()) - {"mlserve-0.1.0.dist-info/RECORD"}
        assert set(again.namelist()) - {"mlserve-0.1.0.dist-info/RECORD"} == names
        assert all(first.read(name) == again.read(name) for name in names)
    assert (out / "requirements.txt").read_text() == f"./wheels/{WHEEL}[sklearn]\n"
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index"]
    report = subprocess.run(
        [*command, "--quiet", "--report", "-", "-r", "requirements.txt"],
        capture_output=True,
        text=True,
        cwd=out,
        check=True,
    )
    (item,) = json.loads(report.stdout)["install"]
    assert item["metadata"]["name"] == "mlserve" and item["requested_extras"] == ["sklearn"]
    assert machine_paths(out, build_run.source, out, ROOT, installed) == []


def test_a_requirement_given_replaces_the_wheel(tmp_path: Path) -> None:
    out = tmp_path / "out"
    requirement = "mlserve @ https://packages.example/mlserve-0.1.0-py3-none-any.whl"
    result = mlserve_build(EXAMPLE, out, "--mlserve-requirement", requirement)
    assert result.returncode == 0, result.stderr
    assert (out / "requirements.txt").read_text() == requirement + "\n"
    assert not (out / "wheels").exists()
    assert "wheels" not in (out / "Dockerfile").read_text()


def test_a_tree_pip_cannot_build_fails_with_pips_reason(tmp_path: Path) -> None:
    """No half-written wheel: the one line says what the build backend refused."""
    root = tmp_path / "tree"
    (root / "mlserve").mkdir(parents=True)
    (root / "mlserve" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text('[project]\nname = "mlserve"\nversion = "one"\n')
    with pytest.raises(WheelError, match=r"from .*tree: ValueError: .*project\.version") as caught:
        source_wheel(root, tmp_path / "wheels")
    assert "\n" not in str(caught.value)
    assert not list((tmp_path / "wheels").glob("*.whl"))


def test_a_repository_is_copied_into_the_build(tmp_path: Path) -> None:
    repository = ROOT / "examples" / "tf_repository"
    out = tmp_path / "out"
    result = mlserve_build(repository, out, "--mlserve-extra", "tensorflow")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "wrote" in result.stdout
    graph = yaml.safe_load((out / "function.yaml").read_text())["spec"]["graph"]
    assert graph["class_args"]["repository"] == "models/tf_repository"
    copied = sorted(
        p.relative_to(out / "models").as_posix() for p in (out / "models").rglob("*.pb")
    )
    original = sorted(p.relative_to(repository.parent).as_posix() for p in repository.rglob("*.pb"))
    assert copied == original
    assert objects(out / "kubernetes.yaml")[0]["metadata"]["name"] == "tf-repository"
    assert (out / "requirements.txt").read_text().startswith(f"./wheels/{WHEEL}[tensorflow]\n")
    assert machine_paths(out, ROOT, out) == []


def test_the_image_hides_exception_text_from_clients() -> None:
    """Container images run with --hide-errors (MLSERVE_HIDE_ERRORS=1)."""
    from mlserve.function.build import BuildOptions, dockerfile

    assert "ENV MLSERVE_HIDE_ERRORS=1\n" in dockerfile("fn", BuildOptions(), has_models=False)


PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@pytest.mark.parametrize("client_auth", [False, True], ids=["tls", "mtls"])
def test_a_tls_secret_is_mounted_given_to_the_server_and_probed_over_https(
    client_auth: bool,
) -> None:
    options = BuildOptions(grpc_port=8081, tls_secret="flowers-tls", tls_client_auth=client_auth)
    docs = kubernetes_objects("flowers", options)
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    deployment, service, _ = docs
    template = deployment["spec"]["template"]
    pod = template["spec"]
    (container,) = pod["containers"]
    secret = {"secretName": "flowers-tls", "defaultMode": 0o440}
    assert pod["volumes"] == [{"name": "tls", "secret": secret}]
    assert pod["securityContext"]["fsGroup"] == 10001  # the mlserve user reads the files
    assert container["volumeMounts"] == [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]
    args = ["--ssl-certfile", f"{TLS_DIR}/tls.crt", "--ssl-keyfile", f"{TLS_DIR}/tls.key"]
    args += ["--ssl-ca-certs", f"{TLS_DIR}/ca.crt"] if client_auth else []
    assert container["args"] == args  # after the image's entry point
    assert [p["name"] for p in container["ports"]] == ["https", "grpcs"]
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 8080, "targetPort": "https"},
        {"name": "grpcs", "port": 8081, "targetPort": "grpcs"},  # not h2c: HTTP/2 over TLS
    ]
    for kind in PROBES:
        if client_auth:  # the kubelet has no client certificate: the pod probes itself
            assert "httpGet" not in container[kind]
            assert container[kind]["exec"]["command"][:2] == ["python", "-c"]
        else:
            assert container[kind]["httpGet"]["scheme"] == "HTTPS"
            assert container[kind]["httpGet"]["port"] == "https"
    assert template["metadata"]["annotations"] == {**SCRAPE, "prometheus.io/scheme": "https"}
    # KServe stays plain: Knative's queue-proxy speaks HTTP to the container.
    (inference_service,) = kserve_objects("flowers", options)
    validate(inference_service, "kserve-inferenceservice-v1beta1")
    kserve_container = inference_service["spec"]["predictor"]["containers"][0]
    assert "args" not in kserve_container and "volumeMounts" not in kserve_container


def test_the_kafka_consumer_serves_tls_too() -> None:
    options = BuildOptions(kafka="requests@kafka:9092", group="g", tls_secret="fn-tls")
    (container,) = kubernetes_objects("fn", options)[0]["spec"]["template"]["spec"]["containers"]
    assert "--kafka" in container["command"] and container["args"][0] == "--ssl-certfile"


def test_the_mtls_probe_asks_the_server_with_the_pods_own_certificate(tmp_path: Path) -> None:
    """The probes the kubelet runs in the container under mutual TLS, against a server
    started with the Deployment's arguments; the Secret's files are in a folder here."""
    certs = make_certificates(tmp_path)
    secret = tmp_path / "secret"
    secret.mkdir()
    files = {"tls.crt": certs.server_cert, "tls.key": certs.server_key, "ca.crt": certs.ca}
    for key, source in files.items():
        shutil.copy(source, secret / key)
    options = BuildOptions(tls_secret="fn-tls", tls_client_auth=True)
    (container,) = kubernetes_objects("fn", options)[0]["spec"]["template"]["spec"]["containers"]
    server = start_server(*(arg.replace(TLS_DIR, str(secret)) for arg in container["args"]))

    def probe(kind: str) -> subprocess.CompletedProcess[str]:
        command = [arg.replace(TLS_DIR, str(secret)) for arg in container[kind]["exec"]["command"]]
        command[0] = sys.executable
        command[-1] = command[-1].replace(":8080/", f":{server.port}/")
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    try:
        for kind in PROBES:
            assert probe(kind).returncode == 0, probe(kind).stderr
    finally:
        server.stop()
    assert probe("livenessProbe").returncode != 0  # no server: the probe fails


def test_client_auth_without_a_tls_secret_is_a_usage_error(tmp_path: Path) -> None:
    result = mlserve_build(EXAMPLE, tmp_path / "out", "--tls-client-auth")
    assert result.returncode == 2
    assert (
        result.stderr
        == "mlserve: --tls-client-auth needs --tls-secret (the Secret holding ca.crt)\n"
    )
    assert not (tmp_path / "out").exists()
