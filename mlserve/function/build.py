"""``mlserve build``: a serving function as a container and the objects that run
it on Kubernetes, KServe and nuclio
(docs/deployment.md#mlserve-build-a-container-and-the-objects-that-run-it).

The build folder is a complete Docker build context::

    Dockerfile          python slim base, non-root user, HEALTHCHECK, ``mlserve serve`` entry point
    requirements.txt    mlserve and the function's requirements
    function.yaml       the exported function (its code included), model paths made relative
    models/             copies of the model files and folders that only exist on this machine
    kubernetes.yaml     Deployment, Service and HorizontalPodAutoscaler
    kserve.yaml         a KServe InferenceService with the image as its custom predictor (V2)
    nuclio.yaml         the nuclio function config (``fn.export(format="nuclio")``)
    keda.yaml           with ``--kafka``: a KEDA ScaledObject scaling the Deployment on consumer lag

The container runs ``mlserve serve function.yaml`` in ``/app``; running the
same command line in the build folder serves the same function locally.

With ``kafka`` (``TOPIC@BROKERS``) and ``group`` the Deployment's container
runs the Kafka consumer mode (``mlserve serve function.yaml --kafka ...``,
the HTTP face beside it for the probes and ``/metrics``); KEDA's ``kafka``
scaler replaces the CPU autoscaler (a Deployment scaled by both would be
fought over), and the nuclio config gets a ``kafka-cluster`` trigger.
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlserve.core.version import __version__

__all__ = [
    "BuildOptions",
    "build",
    "dockerfile",
    "entrypoint",
    "keda_objects",
    "kserve_objects",
    "kubernetes_objects",
    "nuclio_kafka_trigger",
]

WORKDIR = "/app"
USER_ID = 10001
# class_args that name a local file or folder the server reads at start.
PATH_ARGS = ("model_path", "repository", "model_config")
# What Kubernetes waits after the pod leaves the Service's endpoints before SIGTERM.
PRE_STOP_SECONDS = 5


@dataclass
class BuildOptions:
    """What ``mlserve build`` writes; every field is a CLI option."""

    image: str = ""
    """Image name (default: the function's name, tag ``latest``)."""
    port: int = 8080
    grpc_port: int | None = None
    """Also serve the V2 gRPC service on this port."""
    replicas: int = 1
    max_replicas: int = 4
    """The HPA scales between ``replicas`` and this."""
    cpu: str = "500m"
    memory: str = "512Mi"
    target_cpu_utilization: int = 70
    auth_secret: str = ""
    """A Kubernetes Secret whose key ``token`` becomes ``MLSERVE_AUTH_TOKEN``."""
    drain_seconds: int = 30
    """Time SIGTERM leaves requests in flight to finish; the pod's grace period covers it."""
    mlserve_requirement: str = ""
    """How the image installs mlserve (default ``mlserve==<this version>``)."""
    requirements: list[str] = field(default_factory=list)
    kafka: str = ""
    """``TOPIC@BROKERS``: the pods consume this topic (Kafka consumer mode, KEDA)."""
    group: str = ""
    """The consumer group of the pods (with ``kafka``)."""
    output_topic: str = ""
    dead_letter_topic: str = ""
    lag_threshold: int = 100
    """KEDA adds a pod per this many messages of lag (at most one per partition)."""

    def image_name(self, function_name: str) -> str:
        return self.image or f"{function_name}:latest"

    def kafka_source(self) -> tuple[str, str]:
        """(topic, brokers) of ``kafka``; a ValueError when it or the group is missing."""
        from mlserve.core.kafka_config import parse_source

        topic, brokers = parse_source(self.kafka)
        if not self.group:
            raise ValueError("--kafka needs --group (the consumer group the pods share)")
        return topic, brokers


def consumer_command(options: BuildOptions) -> list[str]:
    """The Kafka consumer mode's command line: the entry point with ``--kafka``."""
    command = [*entrypoint(options), "--kafka", options.kafka, "--group", options.group]
    if options.output_topic:
        command += ["--output-topic", options.output_topic]
    if options.dead_letter_topic:
        command += ["--dead-letter-topic", options.dead_letter_topic]
    return command


def entrypoint(options: BuildOptions) -> list[str]:
    """The container's command line (run in ``WORKDIR``)."""
    command = [
        "mlserve",
        "serve",
        "function.yaml",
        "--host",
        "0.0.0.0",
        "--port",
        str(options.port),
    ]
    if options.grpc_port:
        command += ["--grpc-port", str(options.grpc_port)]
    return command


def dockerfile(name: str, options: BuildOptions, has_models: bool) -> str:
    """A Dockerfile that lints clean under hadolint."""
    ports = " ".join(str(p) for p in (options.port, options.grpc_port) if p)
    probe = (
        "import urllib.request; "
        f"urllib.request.urlopen('http://127.0.0.1:{options.port}/v2/health/live', timeout=3)"
    )
    lines = [
        f"# mlserve build: the serving function {name} (V2 protocol on port {options.port})",
        "FROM python:3.11-slim",
        "ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1",
        "ENV MLSERVE_HIDE_ERRORS=1",  # no exception text to clients (docs/security.md#limits)
        f"RUN useradd --create-home --uid {USER_ID} mlserve",
        f"WORKDIR {WORKDIR}",
        "COPY requirements.txt ./",
        "RUN pip install --no-cache-dir -r requirements.txt",
        "COPY --chown=mlserve function.yaml ./",
    ]
    if has_models:
        lines.append("COPY --chown=mlserve models/ models/")
    lines += [
        f"USER {USER_ID}",
        f"EXPOSE {ports}",
        "HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \\",
        f"    CMD {json.dumps(['python', '-c', probe])}",
        f"ENTRYPOINT {json.dumps(entrypoint(options))}",
    ]
    return "\n".join(lines) + "\n"


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "mlserve"}


def _container(name: str, options: BuildOptions) -> dict[str, Any]:
    ports = [{"name": "http", "containerPort": options.port, "protocol": "TCP"}]
    if options.grpc_port:
        ports.append({"name": "grpc", "containerPort": options.grpc_port, "protocol": "TCP"})

    def probe(path: str, period: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": "http"},
            "periodSeconds": period,
            "timeoutSeconds": 3,
            "failureThreshold": failures,
        }

    container: dict[str, Any] = {
        "name": "mlserve",
        "image": options.image_name(name),
        "ports": ports,
        "resources": {
            "requests": {"cpu": options.cpu, "memory": options.memory},
            "limits": {"memory": options.memory},
        },
        # Models load before the server listens: the startup probe gives them 5 minutes.
        "startupProbe": probe("/v2/health/live", 5, 60),
        "livenessProbe": probe("/v2/health/live", 10, 3),
        "readinessProbe": probe("/v2/health/ready", 5, 2),
        # Let the Service drop the pod before SIGTERM starts the drain.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SECONDS}}},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
    }
    if options.kafka:
        container["command"] = consumer_command(options)
    if options.auth_secret:
        container["env"] = [
            {
                "name": "MLSERVE_AUTH_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": options.auth_secret, "key": "token"}},
            }
        ]
    return container


def kubernetes_objects(name: str, options: BuildOptions) -> list[dict[str, Any]]:
    """Deployment, Service and HorizontalPodAutoscaler for the image."""
    labels = _labels(name)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": options.drain_seconds + PRE_STOP_SECONDS + 5,
                    "securityContext": {"runAsUser": USER_ID, "runAsNonRoot": True},
                    "containers": [_container(name, options)],
                },
            },
        },
    }
    service_ports = [{"name": "http", "port": options.port, "targetPort": "http"}]
    if options.grpc_port:
        service_ports.append(
            {
                "name": "grpc",
                "port": options.grpc_port,
                "targetPort": "grpc",
                "appProtocol": "kubernetes.io/h2c",
            }
        )
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {"selector": {"app.kubernetes.io/name": name}, "ports": service_ports},
    }
    autoscaler = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": options.replicas,
            "maxReplicas": max(options.max_replicas, options.replicas),
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": options.target_cpu_utilization,
                        },
                    },
                }
            ],
        },
    }
    if options.kafka:
        return [deployment, service]  # KEDA's ScaledObject makes (and owns) the autoscaler
    return [deployment, service, autoscaler]


def keda_objects(name: str, options: BuildOptions) -> list[dict[str, Any]]:
    """A KEDA ScaledObject: the Deployment scales on the group's lag on the topic."""
    topic, brokers = options.kafka_source()
    return [
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": name, "labels": _labels(name)},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicaCount": options.replicas,
                "maxReplicaCount": max(options.max_replicas, options.replicas),
                "triggers": [
                    {
                        "type": "kafka",
                        "metadata": {
                            "bootstrapServers": brokers,
                            "consumerGroup": options.group,
                            "topic": topic,
                            "lagThreshold": str(options.lag_threshold),
                            "offsetResetPolicy": "earliest",  # as the consumers start
                        },
                    }
                ],
            },
        }
    ]


def nuclio_kafka_trigger(options: BuildOptions) -> dict[str, Any]:
    """nuclio's ``kafka-cluster`` trigger for the topic and group (``spec.triggers``)."""
    topic, brokers = options.kafka_source()
    return {
        "kafka": {
            "kind": "kafka-cluster",
            "attributes": {
                "brokers": brokers.split(","),
                "topics": [topic],
                "consumerGroup": options.group,
                "initialOffset": "earliest",
            },
        }
    }


def kserve_objects(name: str, options: BuildOptions) -> list[dict[str, Any]]:
    """A KServe InferenceService whose predictor is the image (a custom container
    speaking V2 on KServe's default port)."""
    container = _container(name, options)
    container["name"] = "kserve-container"  # the name KServe looks for
    # Knative routes one port per container: HTTP (REST V2) only.
    container["ports"] = container["ports"][:1]
    del container["lifecycle"]  # KServe (Knative) drains the pod itself
    container.pop("command", None)  # KServe serves requests: never the Kafka consumer mode
    return [
        {
            "apiVersion": "serving.kserve.io/v1beta1",
            "kind": "InferenceService",
            "metadata": {"name": name, "labels": _labels(name)},
            "spec": {
                "predictor": {
                    "minReplicas": options.replicas,
                    "maxReplicas": max(options.max_replicas, options.replicas),
                    "containers": [container],
                }
            },
        }
    ]


def _local_paths(graph: dict[str, Any]) -> dict[Path, Path]:
    """Make the graph's local model paths relative to the build folder
    (``models/<name>``, in place); returns source → copy, one copy per source."""
    copies: dict[Path, Path] = {}

    def relocate(value: str) -> str:
        source = Path(value).resolve()
        if source not in copies:
            target = Path("models") / source.name
            while target in copies.values():
                target = target.with_name(target.name + "-1")
            copies[source] = target
        return copies[source].as_posix()

    def visit(step: dict[str, Any]) -> None:
        args = step.get("class_args") or {}
        for key in PATH_ARGS:
            value = args.get(key)
            local = isinstance(value, str) and "://" not in value and value.strip("./")
            if local and isinstance(value, str) and Path(value).exists():
                args[key] = relocate(value)
        for child in [*step.get("routes", {}).values(), *step.get("steps", {}).values()]:
            visit(child)

    visit(graph)
    return copies


def _nuclio_config(fn: Any, options: BuildOptions) -> dict[str, Any]:
    config = fn.to_nuclio_config()
    if options.kafka:
        config["spec"]["triggers"] = nuclio_kafka_trigger(options)
    return config


def build(fn: Any, out_dir: str | Path, options: BuildOptions | None = None) -> list[Path]:
    """Write the build folder of ``fn`` (a ServingFunction); returns the files written."""
    options = options or BuildOptions()
    if options.kafka:
        options.kafka_source()  # a bad --kafka fails before anything is written
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = fn.metadata.name.replace("_", "-").lower()
    struct = copy.deepcopy(fn.to_dict())  # its class_args are the graph's own
    graph = struct["spec"].get("graph")
    copies = _local_paths(graph) if graph else {}
    shutil.rmtree(out / "models", ignore_errors=True)
    for source, relative in copies.items():
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)
    import yaml  # not at module level: every ``mlserve`` command reads BuildOptions

    requirements = [options.mlserve_requirement or f"mlserve=={__version__}"]
    requirements += [*fn.spec.requirements, *options.requirements]
    written = {
        "function.yaml": yaml.safe_dump(struct, sort_keys=False),
        "requirements.txt": "\n".join(dict.fromkeys(requirements)) + "\n",
        "Dockerfile": dockerfile(name, options, has_models=bool(copies)),
        "kubernetes.yaml": yaml.safe_dump_all(kubernetes_objects(name, options), sort_keys=False),
        "kserve.yaml": yaml.safe_dump_all(kserve_objects(name, options), sort_keys=False),
        "nuclio.yaml": yaml.safe_dump(_nuclio_config(fn, options), sort_keys=False),
    }
    if options.kafka:
        written["keda.yaml"] = yaml.safe_dump_all(keda_objects(name, options), sort_keys=False)
    paths = []
    for filename, text in written.items():
        path = out / filename
        path.write_text(text)
        paths.append(path)
    return paths
