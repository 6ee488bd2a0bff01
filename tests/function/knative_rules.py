"""Knative Serving's own admission rules for a revision's pod spec and its serving
container, the rules its webhook applies after the CRD schema (which it cannot
express), so that ``kserve.yaml`` is checked against what Knative refuses.

Vendored from github.com/knative/serving at commit
98e5ef90aa7033797aa0a61ef97f3ff7e49a3944 (Apache-2.0), with the default feature
flags of ``pkg/apis/config/features.go``:

- ``pkg/apis/serving/k8s_validation.go``: ``validPortNames``, ``reservedPorts``,
  ``reservedEnvVars``, ``reservedContainerNames``, ``validateContainersPorts``,
  ``validateContainerPorts``, ``validateContainerPortBasic``, ``validateProbe``,
  ``validateReadinessProbe``, ``validateEnvVar``;
- ``pkg/apis/serving/fieldmask.go``: the fields ``PodSpecMask``, ``ContainerMask``,
  ``ContainerPortMask`` and ``ProbeMask`` let through;
- ``pkg/networking/constants.go`` (8012, 8013, 8022, 9090, 9091) and
  ``knative.dev/pkg/observability/runtime/pprof.go`` (8008): the reserved ports.

Knative's runtime contract (``docs/runtime-contract.md``) gives the port name its
meaning: ``http1`` is HTTP/1.1, ``h2c`` cleartext HTTP/2, which gRPC needs.
"""

from __future__ import annotations

from typing import Any

VALID_PORT_NAMES = frozenset({"", "h2c", "http1"})
RESERVED_PORTS = frozenset({8012, 8013, 8022, 9090, 9091, 8008})
RESERVED_ENV = frozenset({"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"})
RESERVED_CONTAINER_NAMES = frozenset({"queue-proxy"})
POD_FIELDS = frozenset(
    {"serviceAccountName", "containers", "volumes", "imagePullSecrets", "enableServiceLinks"}
)
CONTAINER_FIELDS = frozenset(
    {
        "name",
        "args",
        "command",
        "env",
        "workingDir",
        "envFrom",
        "image",
        "imagePullPolicy",
        "livenessProbe",
        "ports",
        "readinessProbe",
        "resources",
        "securityContext",
        "startupProbe",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "volumeMounts",
    }
)
PORT_FIELDS = frozenset({"containerPort", "name", "protocol"})
PROBE_HANDLERS = ("httpGet", "tcpSocket", "exec", "grpc")
PROBE_FIELDS = frozenset(
    {
        *PROBE_HANDLERS,
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
        "terminationGracePeriodSeconds",
    }
)


def knative_errors(pod: dict[str, Any]) -> list[str]:
    """What Knative's webhook says about a revision's pod spec (its ``containers``
    and pod fields); [] when it admits it."""
    errors = [f"pod field {key} is not allowed" for key in sorted(set(pod) - POD_FIELDS)]
    containers = pod.get("containers") or []
    if not containers:
        return [*errors, "missing field containers"]
    ports = [port for container in containers for port in container.get("ports") or []]
    if len(ports) > 1:
        errors.append("more than one container port is set (one across all containers)")
    serving = [c for c in containers if c.get("ports")] or containers[:1]
    # validateContainersPorts: the probes' named port must be the serving port's name.
    port_name = (ports[0].get("name") if ports else "") or "http"
    for container in containers:
        errors += _container_errors(container, port_name, container is serving[0])
    return errors


def _container_errors(container: dict[str, Any], port_name: str, serving: bool) -> list[str]:
    name = container.get("name", "")
    errors = [f"{name}: field {key} is not allowed" for key in set(container) - CONTAINER_FIELDS]
    if name in RESERVED_CONTAINER_NAMES:
        errors.append(f"{name!r} is a reserved container name")
    if not container.get("image"):
        errors.append(f"{name}: missing field image")
    for env in container.get("env") or []:
        if env.get("name") in RESERVED_ENV:
            errors.append(f"{name}: {env['name']!r} is a reserved environment variable")
    ports = container.get("ports") or []
    if ports:
        errors += _port_errors(name, ports[0])
    for key in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(key)
        if probe is None or not serving:
            continue
        errors += [f"{name}: {key}: {e}" for e in _probe_errors(probe, port_name)]
        if key == "readinessProbe":
            errors += [f"{name}: {key}: {e}" for e in _readiness_errors(probe)]
    return errors


def _port_errors(name: str, port: dict[str, Any]) -> list[str]:
    errors = [f"{name}: port field {key} is not allowed" for key in set(port) - PORT_FIELDS]
    number = port.get("containerPort", 0)
    if number in RESERVED_PORTS:
        errors.append(f"{name}: {number} is a reserved port")
    if not 0 <= number <= 65535:
        errors.append(f"{name}: containerPort {number} is out of bounds")
    if port.get("protocol", "TCP") not in ("", "TCP"):
        errors.append(f"{name}: invalid protocol {port['protocol']}")
    if port.get("name", "") not in VALID_PORT_NAMES:
        errors.append(
            f"{name}: Port name {port['name']} is not allowed "
            "(Name must be empty, or one of: 'h2c', 'http1')"
        )
    return errors


def _probe_errors(probe: dict[str, Any], port_name: str) -> list[str]:
    errors = [f"field {key} is not allowed" for key in set(probe) - PROBE_FIELDS]
    handlers = [key for key in PROBE_HANDLERS if key in probe]
    if len(handlers) != 1:
        errors.append(f"expected exactly one of {PROBE_HANDLERS}, got {handlers}")
    for key in ("httpGet", "tcpSocket"):
        port = (probe.get(key) or {}).get("port")
        if isinstance(port, str) and port and port != port_name:
            errors.append(f"{key}.port {port}: Probe port must match container port {port_name}")
    return errors


def _readiness_errors(probe: dict[str, Any]) -> list[str]:
    """validateReadinessProbe, after Knative's defaulting (successThreshold 1;
    failureThreshold 3 and timeoutSeconds 1 when periodSeconds is set)."""
    period = probe.get("periodSeconds", 0)
    errors = []
    if period < 0 or probe.get("initialDelaySeconds", 0) < 0:
        errors.append("periodSeconds and initialDelaySeconds must not be negative")
    if probe.get("successThreshold", 1) < 1:
        errors.append("successThreshold must be at least 1")
    if period == 0 and ("failureThreshold" in probe or "timeoutSeconds" in probe):
        errors.append("failureThreshold and timeoutSeconds are disallowed when periodSeconds is 0")
    if period > 0 and (probe.get("timeoutSeconds", 1) < 1 or probe.get("failureThreshold", 3) < 1):
        errors.append("timeoutSeconds and failureThreshold must be at least 1")
    return errors
