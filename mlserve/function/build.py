"""``mlserve build``: a serving function as a container and the objects that run
it on Kubernetes, KServe and nuclio
(docs/deployment.md#mlserve-build-a-container-and-the-objects-that-run-it).

The build folder is a complete Docker build context::

    Dockerfile          python slim base, non-root user, HEALTHCHECK, ``mlserve serve`` entry point
    requirements.txt    mlserve (the wheel in wheels/) and the function's requirements
    wheels/             mlserve's wheel, built from this mlserve (``mlserve.function.wheel``)
    function.yaml       the exported function (its code included), model paths made relative
    models/             copies of the model files and folders that only exist on this machine
    kubernetes.yaml     Deployment, Service and HorizontalPodAutoscaler
    kserve.yaml         a KServe InferenceService with the image as its custom predictor (V2)
    nuclio.yaml         the nuclio function config, built on the image
    keda.yaml           with ``--kafka``: a KEDA ScaledObject scaling the Deployment on consumer lag

The container runs ``mlserve serve function.yaml`` in ``/app``; running the
same command line in the build folder serves the same function locally. Every
path a file names is relative to that folder, and the YAML has no anchors.

With ``kafka`` (``TOPIC@BROKERS``) and ``group`` the Deployment's container
runs the Kafka consumer mode (``mlserve serve function.yaml --kafka ...``,
the HTTP face beside it for the probes and ``/metrics``); KEDA's ``kafka``
scaler replaces the CPU autoscaler (a Deployment scaled by both would be
fought over), and the nuclio config gets a ``kafka-cluster`` trigger.

With ``tls_secret`` the Deployment mounts that ``kubernetes.io/tls`` Secret and
serves TLS on every port with it (mutual TLS with ``tls_client_auth``), and its
probes ask over HTTPS (docs/deployment.md#tls-in-kubernetes).
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
WHEELS = "wheels"
# Knative routes to one container port named "http1" (HTTP/1.1) or "h2c" (HTTP/2,
# which gRPC needs); it refuses any other name (docs/deployment.md#kserve).
KNATIVE_HTTP_PORT = "http1"
# class_args that name a local file or folder the server reads at start.
PATH_ARGS = ("model_path", "repository", "model_config")
# What Kubernetes waits after the pod leaves the Service's endpoints before SIGTERM.
PRE_STOP_SECONDS = 5
# Where the TLS Secret is mounted; its keys, and the flag of ``mlserve serve`` each goes to.
TLS_DIR = "/etc/mlserve/tls"
TLS_FILES = {"tls.crt": "--ssl-certfile", "tls.key": "--ssl-keyfile", "ca.crt": "--ssl-ca-certs"}
# A port's name tells a service mesh its protocol: TLS ones are not plaintext HTTP.
TLS_PORT_NAMES = {"http": "https", "grpc": "grpcs"}
# Under mutual TLS the kubelet has no client certificate: the probe runs in the
# container and presents the pod's own (its server certificate, which ca.crt signed).
MTLS_PROBE = (
    "import ssl, sys, urllib.request; "
    "c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT); "
    "c.check_hostname = False; c.verify_mode = ssl.CERT_NONE; "
    f"c.load_cert_chain('{TLS_DIR}/tls.crt', '{TLS_DIR}/tls.key'); "
    "urllib.request.urlopen(sys.argv[1], timeout=3, context=c)"
)


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
    tls_secret: str = ""
    """A ``kubernetes.io/tls`` Secret (``tls.crt``, ``tls.key``): the pods serve TLS with it."""
    tls_client_auth: bool = False
    """With ``tls_secret``: clients need a certificate its ``ca.crt`` signed (mutual TLS)."""
    drain_seconds: int = 30
    """Time SIGTERM leaves requests in flight to finish; the pod's grace period covers it."""
    mlserve_requirement: str = ""
    """How the image installs mlserve (default: the wheel of this mlserve, in ``wheels/``)."""
    mlserve_extras: list[str] = field(default_factory=list)
    """Extras of the wheel to install (``tensorflow``, ``sklearn``, ...)."""
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

    def tls_args(self) -> list[str]:
        """The flags of ``mlserve serve`` that serve TLS with the mounted Secret's files;
        a ValueError for client authentication without a Secret."""
        if self.tls_client_auth and not self.tls_secret:
            raise ValueError("--tls-client-auth needs --tls-secret (the Secret holding ca.crt)")
        if not self.tls_secret:
            return []
        keys = ["tls.crt", "tls.key", *(["ca.crt"] if self.tls_client_auth else [])]
        return [arg for key in keys for arg in (TLS_FILES[key], f"{TLS_DIR}/{key}")]

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


def dockerfile(name: str, options: BuildOptions, has_models: bool, has_wheels: bool = False) -> str:
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
        *([f"COPY {WHEELS}/ {WHEELS}/"] if has_wheels else []),
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


def _scrape_annotations(options: BuildOptions) -> dict[str, str]:
    """Where Prometheus' pod discovery finds ``/metrics``
    (docs/monitoring.md#prometheus-metrics)."""
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(options.port),
        "prometheus.io/path": "/metrics",
    }


def _container(name: str, options: BuildOptions, http_port: str = "http") -> dict[str, Any]:
    """The serving container; ``http_port`` names its HTTP port (and the probes' port)."""
    ports = [{"name": http_port, "containerPort": options.port, "protocol": "TCP"}]
    if options.grpc_port:
        ports.append({"name": "grpc", "containerPort": options.grpc_port, "protocol": "TCP"})

    def probe(path: str, period: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": path, "port": http_port},
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
    template: dict[str, Any] = {
        "metadata": {"labels": labels, "annotations": _scrape_annotations(options)},
        "spec": {
            "terminationGracePeriodSeconds": options.drain_seconds + PRE_STOP_SECONDS + 5,
            "securityContext": {"runAsUser": USER_ID, "runAsNonRoot": True},
            "containers": [_container(name, options)],
        },
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "template": template,
        },
    }
    if options.tls_secret:
        _serve_tls(template, options)
    names = TLS_PORT_NAMES if options.tls_secret else {"http": "http", "grpc": "grpc"}
    service_ports: list[dict[str, Any]] = [
        {"name": names["http"], "port": options.port, "targetPort": names["http"]}
    ]
    if options.grpc_port:
        grpc = {"name": names["grpc"], "port": options.grpc_port, "targetPort": names["grpc"]}
        if not options.tls_secret:
            grpc["appProtocol"] = "kubernetes.io/h2c"  # HTTP/2 in the clear
        service_ports.append(grpc)
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


def _serve_tls(template: dict[str, Any], options: BuildOptions) -> None:
    """Mount the TLS Secret into the pod, give its files to ``mlserve serve``, name the
    ports for TLS, and probe over HTTPS (in place; docs/deployment.md#tls-in-kubernetes)."""
    pod = template["spec"]
    (container,) = pod["containers"]
    secret = {"secretName": options.tls_secret, "defaultMode": 0o440}
    pod["volumes"] = [{"name": "tls", "secret": secret}]
    pod["securityContext"]["fsGroup"] = USER_ID  # the files' group: the mlserve user reads them
    container["volumeMounts"] = [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}]
    container["args"] = options.tls_args()  # after the entry point (or the consumer's command)
    for port in container["ports"]:
        port["name"] = TLS_PORT_NAMES[port["name"]]
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe = container[kind]
        if options.tls_client_auth:
            url = f"https://127.0.0.1:{options.port}{probe.pop('httpGet')['path']}"
            container[kind] = {"exec": {"command": ["python", "-c", MTLS_PROBE, url]}, **probe}
        else:
            probe["httpGet"].update(port=TLS_PORT_NAMES["http"], scheme="HTTPS")
    template["metadata"]["annotations"]["prometheus.io/scheme"] = "https"


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
    speaking V2 on KServe's default port), within Knative's rules for a container."""
    container = _container(name, options, http_port=KNATIVE_HTTP_PORT)
    container["name"] = "kserve-container"  # the name KServe looks for
    # Knative routes one port per pod: HTTP/1.1 (REST V2) only.
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
                    "annotations": _scrape_annotations(options),  # on the predictor's pods
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


def _nuclio_config(fn: Any, struct: dict[str, Any], options: BuildOptions) -> dict[str, Any]:
    from mlserve.function.nuclio_config import image_config

    config = image_config(fn, struct, options.image_name(_name(fn)))
    if options.kafka:
        config["spec"]["triggers"] = nuclio_kafka_trigger(options)
    return config


def _name(fn: Any) -> str:
    """The function's name as Kubernetes objects take it."""
    return str(fn.metadata.name).replace("_", "-").lower()


def _yaml(*documents: Any) -> str:
    """YAML without anchors and aliases: an object used twice is written out twice."""
    import yaml  # not at module level: every ``mlserve`` command reads BuildOptions

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return str(yaml.dump_all(documents, Dumper=Dumper, sort_keys=False))


def _requirements(fn: Any, options: BuildOptions, wheel: Path | None) -> str:
    """requirements.txt: mlserve (the wheel, by its path in the image's WORKDIR)
    first, then the function's requirements and ``--requirement``."""
    mlserve = options.mlserve_requirement
    if wheel is not None:
        extras = ",".join(options.mlserve_extras)
        mlserve = f"./{WHEELS}/{wheel.name}" + (f"[{extras}]" if extras else "")
    lines = [mlserve, *fn.spec.requirements, *options.requirements]
    return "\n".join(dict.fromkeys(lines)) + "\n"


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy2(source, target)


def build(fn: Any, out_dir: str | Path, options: BuildOptions | None = None) -> list[Path]:
    """Write the build folder of ``fn`` (a ServingFunction); returns the files written.

    Raises ``mlserve.function.wheel.WheelError`` when mlserve's wheel cannot be made."""
    from mlserve.function.wheel import mlserve_wheel

    options = options or BuildOptions()
    if options.kafka:
        options.kafka_source()  # a bad --kafka fails before anything is written
    options.tls_args()  # and so does --tls-client-auth without --tls-secret
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = _name(fn)
    struct = copy.deepcopy(fn.to_dict())  # its class_args are the graph's own
    graph = struct["spec"].get("graph")
    copies = _local_paths(graph) if graph else {}
    for folder in ("models", WHEELS):
        shutil.rmtree(out / folder, ignore_errors=True)
    for source, relative in copies.items():
        _copy(source, out / relative)
    wheel = None if options.mlserve_requirement else mlserve_wheel(out / WHEELS)
    written = {
        "function.yaml": _yaml(struct),
        "requirements.txt": _requirements(fn, options, wheel),
        "Dockerfile": dockerfile(name, options, bool(copies), has_wheels=wheel is not None),
        "kubernetes.yaml": _yaml(*kubernetes_objects(name, options)),
        "kserve.yaml": _yaml(*kserve_objects(name, options)),
        "nuclio.yaml": _yaml(_nuclio_config(fn, struct, options)),
    }
    if options.kafka:
        written["keda.yaml"] = _yaml(*keda_objects(name, options))
    paths = [wheel] if wheel else []
    for filename, text in written.items():
        path = out / filename
        path.write_text(text)
        paths.append(path)
    return paths
