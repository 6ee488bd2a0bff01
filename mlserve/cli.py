"""The ``mlserve`` command: ``serve``, ``build``, ``infer``, ``models``, ``endpoints``,
``monitor``.

A target kind is one entry of ``TARGETS``: a test on the target string and a
builder of the initialised ``GraphServer`` it serves. A mistake of the user's (a
missing file, a flag that does not apply, a bad port, a missing optional package,
a syntax error in the served code) ends the command with one line on stderr and
exit status 2, as argparse's own usage errors do; an exception the user's code
raises shows the user's frames only (docs/serving.md#when-the-command-refuses).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import importlib.util
import json
import logging
import os
import re
import runpy
import signal
import socket
import subprocess
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mlserve.core.limits import ServerLimits, add_limit_flags, server_limits
from mlserve.core.version import __version__

if TYPE_CHECKING:
    from mlserve.core.tls import TLSSettings
    from mlserve.function import ServingFunction
    from mlserve.kafka import KafkaTrigger
    from mlserve.server.graph_server import GraphServer

    Commands = argparse._SubParsersAction[Any]

__all__ = ["TARGETS", "UsageError", "build_server", "load_function", "main"]

_CANNOT_SERVE = (
    "cannot serve {}: give a .py file, an exported function (.yaml, .json) "
    "or a model repository folder"
)


class UsageError(Exception):
    """A mistake in the command line or its target: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse's usage errors as one line that says where the help is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def load_function(target: str, **repository_options: Any) -> ServingFunction:
    """The serving function in ``target``: an exported YAML/JSON, a Python file
    with ``serving_function()``, ``fn``, or a module-level function object, or a
    model repository folder (``repository_options``: those of ``_REPOSITORY_FLAGS``)."""
    from mlserve.function import import_function

    path = Path(target)
    if path.is_dir():
        from mlserve.function.repository import function_from_repository

        return function_from_repository(path, **repository_options)
    if path.suffix in (".yaml", ".yml", ".json"):
        try:
            return import_function(target)
        except ValueError as exc:
            if any(_is_users(frame.filename) for frame in traceback.extract_tb(exc.__traceback__)):
                raise  # the export's own code raised it
            raise UsageError(str(exc)) from None
    if path.suffix == ".py":
        sys.path.insert(0, str(path.resolve().parent))
        # A module name of the function's own: its classes export by their short
        # names, and the file's code travels with the function (export, build:
        # docs/notebooks.md#try-deploy-export).
        module_name = "mlserve_fn_" + re.sub(r"\W", "_", path.stem)
        names = runpy.run_path(str(path), run_name=module_name)
        fn = _function_in(names)
        if fn is None:
            raise UsageError(
                f"{target} defines no serving function: define serving_function(), "
                "or fn = mlserve.new_function(...)"
            )
        if not fn.spec.source:
            fn.spec.source = path.read_text()
            fn._namespace = names
        return fn
    raise UsageError(_CANNOT_SERVE.format(target))


def _function_in(names: dict[str, Any]) -> ServingFunction | None:
    """A Python file's function: ``serving_function()``, ``fn``, or the first function object."""
    from mlserve.function import ServingFunction

    if callable(names.get("serving_function")):
        return names["serving_function"]()
    if isinstance(names.get("fn"), ServingFunction):
        return names["fn"]
    return next((v for v in names.values() if isinstance(v, ServingFunction)), None)


def _is_function_file(target: str) -> bool:
    return Path(target).suffix in (".py", ".yaml", ".yml", ".json")


def _is_repository(target: str) -> bool:
    return Path(target).is_dir()


def _function_server(args: argparse.Namespace) -> GraphServer:
    fn = load_function(args.target, **_repository_options(args))
    tracked = getattr(args, "monitor", False) or getattr(args, "track", False)
    if tracked and not fn.spec.track_models:
        fn.set_tracking()  # the model-log stream and the endpoint records the monitor reads
    server = fn.to_graph_server()
    server.init_states(namespace=fn.namespace)
    server.init_object(fn.namespace)
    return server


# (does this target string name my kind?, build the initialised GraphServer from the args)
TARGETS: list[tuple[Callable[[str], bool], Callable[[argparse.Namespace], GraphServer]]] = [
    (_is_repository, _function_server),  # load_function reads the folder as a repository
    (_is_function_file, _function_server),
]


def build_server(args: argparse.Namespace) -> GraphServer:
    """The initialised GraphServer of ``args.target``, by the first kind that takes it."""
    for accepts, build in TARGETS:
        if accepts(args.target):
            return build(args)
    raise UsageError(_CANNOT_SERVE.format(args.target))


# The flags of a model repository folder, by their argparse names.
_REPOSITORY_FLAGS = {
    "model_config": "--model-config",
    "poll_interval": "--poll-interval",
    "cache_size": "--cache-size",
    "version_quiet_period": "--version-quiet-period",
    "version_done_file": "--version-done-file",
}


def _repository_options(args: argparse.Namespace) -> dict[str, Any]:
    """The repository flags given; on a file target they would do nothing: a usage error."""
    given = {name: getattr(args, name, None) for name in _REPOSITORY_FLAGS}
    given = {name: value for name, value in given.items() if value is not None}
    if given and not Path(args.target).is_dir():
        flags = ", ".join(_REPOSITORY_FLAGS[name] for name in given)
        what = "flags of a model repository folder" if len(given) > 1 else "a repository flag"
        it = "them" if len(given) > 1 else "it"
        raise UsageError(
            f"{flags}: {what}, and {args.target} is a file: drop {it} or serve a folder"
        )
    if Path(args.target).is_dir():
        from mlserve.repository.router import version_settings

        try:  # the flags, or else the environment
            version_settings(given.get("version_quiet_period"), given.get("version_done_file"))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return given


def _check_target(args: argparse.Namespace) -> None:
    """The target exists, is a kind mlserve serves, and takes the flags given."""
    if not Path(args.target).exists():
        raise UsageError(f"{args.target}: no such file or folder")
    if not any(accepts(args.target) for accepts, _ in TARGETS):
        raise UsageError(_CANNOT_SERVE.format(args.target))
    _repository_options(args)


# The package each framework's server imports, and the mlserve extra that installs it.
_FRAMEWORK_PACKAGES = {
    "mlserve.frameworks.tensorflow": ("tensorflow", "tensorflow"),
    "mlserve.frameworks.sklearn": ("sklearn", "sklearn"),
    "mlserve.frameworks.xgboost": ("xgboost", "xgboost"),
    "mlserve.frameworks.onnx": ("onnxruntime", "onnx"),
}


def _check_packages(target: str) -> None:
    """A repository model whose framework is not installed: one line naming the extra,
    before any port opens or model loads."""
    from mlserve.repository.layout import detect_class, scan_models, scan_versions

    for name, model_dir in scan_models(target).items():
        for version_dir in scan_versions(model_dir).values():
            framework = (detect_class(version_dir) or "").rpartition(".")[0]
            package, extra = _FRAMEWORK_PACKAGES.get(framework, ("", ""))
            if package and importlib.util.find_spec(package) is None:
                raise UsageError(
                    f"model {name} needs {package}, which is not installed: "
                    f"pip install 'mlserve[{extra}]'"
                )


def _limits(args: argparse.Namespace) -> ServerLimits:
    """The server limits the flags and the environment ask for; a bad value is a usage error."""
    try:
        return server_limits(args)
    except SystemExit as exc:  # server_limits ends with its message
        raise UsageError(str(exc.code).removeprefix("mlserve serve: ")) from None


def serve(args: argparse.Namespace) -> None:
    from mlserve import runner
    from mlserve.function.lifeline import watch_parent
    from mlserve.server.shared import share_model_state

    watch_parent()  # a server of fn.deploy() ends with the process that deployed it
    _check_target(args)
    _check_packages(args.target)
    if args.kafka:
        _check_kafka(args)
    limits = _limits(args)  # bad values stop here, before any port opens or model loads
    tls = _tls(args)
    if not args.reuse_port:  # workers share the ports their supervisor checked
        _check_ports(args.host, [args.port, args.grpc_port, args.tfs_grpc_port])
    if not args.reuse_port and not 1 <= args.ready_min_workers <= max(1, args.workers):
        raise UsageError(
            f"--ready-min-workers {args.ready_min_workers} must be from 1 to "
            f"--workers ({args.workers})"
        )
    _configure_logs(args)
    if args.workers > 1:
        command = runner.worker_command(args.argv)
        raise SystemExit(runner.supervise(command, args.workers, args.ready_min_workers))
    if os.environ.get(runner.WORKER_ENV, "0") != "0":  # worker 0 tells, the others warn
        logging.getLogger().setLevel(max(logging.WARNING, logging.getLogger().level))
    server = build_server(args)
    server.limits = limits
    _setup_tracing(args, server)  # each worker of --workers N: its own exporter
    link = share_model_state(server)  # a worker of --workers N: its model state and readiness
    trigger = _start_kafka(args, server) if args.kafka else None
    grpc = f" and grpc://{args.host}:{args.grpc_port}" if args.grpc_port else ""
    if args.tfs_grpc_port:
        grpc += f" and TF Serving grpc://{args.host}:{args.tfs_grpc_port}"
    how = ""
    if tls.enabled:
        how = " (TLS on every port" + (", client certificates required)" if tls.mutual else ")")

    def announce() -> None:
        if link is not None:
            link.serving()
        if os.environ.get(runner.WORKER_ENV, "0") == "0":
            scheme = "https" if tls.enabled else "http"
            print(
                f"mlserve: serving {args.target} on {scheme}://{args.host}:{args.port}{grpc}{how}"
            )
            sys.stdout.flush()

    from mlserve.core.settings import FaceSettings

    settings = FaceSettings.from_env(**face_options(args))
    mode = args.model_control_mode or os.environ.get("MLSERVE_MODEL_CONTROL_MODE") or "none"
    server.model_control = server.model_control or mode == "explicit"
    monitor = _embedded_monitor(args, server)
    from mlserve.server.console import configure_console

    configure_console(  # what the web console shows of this process (docs/console.md)
        server,
        not settings.no_console,
        settings.auth_enabled,
        monitor is not None,
        runner.worker_slot(),
    )
    try:
        runner.run_server(
            server,
            args.host,
            args.port,
            args.grpc_port,
            args.reuse_port,
            announce,
            args.http,
            args.tfs_grpc_port,
            drained=trigger.stop if trigger is not None else lambda: None,
            settings=settings,
            tls=tls,
        )
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise SystemExit(f"mlserve: {args.host}:{args.port} is in use by another process") from None
    finally:
        if monitor is not None:
            monitor.stop()
    if trigger is not None and trigger.error is not None:
        raise SystemExit(f"mlserve: the Kafka trigger failed: {trigger.error}")


def _configure_logs(args: argparse.Namespace) -> None:
    """``--log-format`` and ``--access-log`` (docs/observability.md#logs)."""
    from mlserve.core.request_log import configure

    log_format = args.log_format or os.environ.get("MLSERVE_LOG_FORMAT") or "text"
    if log_format not in ("text", "json"):
        raise UsageError(f"MLSERVE_LOG_FORMAT={log_format}: use text or json")
    configure(log_format, args.access_log)


def _setup_tracing(args: argparse.Namespace, server: GraphServer) -> None:
    """Spans to an OTLP collector when an endpoint is set (docs/observability.md#tracing)."""
    from mlserve.monitoring.otel import setup_tracing, wanted

    if wanted(args.otel_endpoint):
        try:
            setup_tracing(args.otel_endpoint, args.otel_protocol, server.function_name or None)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def _embedded_monitor(args: argparse.Namespace, server: GraphServer) -> MonitorProcess | None:
    """``serve --monitor``: the monitor on the server's own stream and store, in a process
    of its own that the first worker starts and stops (so the monitor never takes the
    server's GIL: docs/monitoring.md#drift); every worker's ``/metrics`` shows its gauges,
    read from the endpoint records."""
    from mlserve import runner

    if not args.monitor:
        return None
    from mlserve.monitoring.gauges import StoreDriftCollector
    from mlserve.monitoring.metrics import REGISTRY
    from mlserve.monitoring.sources import check_source
    from mlserve.monitoring.stores import default_store_url
    from mlserve.monitoring.tracking import stream_path

    stream, store = stream_path(server), default_store_url(server.parameters)
    try:
        check_source(stream)
    except ValueError as exc:  # a stream that cannot be read back
        raise UsageError(f"--monitor: {exc}") from None
    REGISTRY.register(StoreDriftCollector(store))
    if os.environ.get(runner.WORKER_ENV, "0") != "0":
        return None
    command = ["monitor", "--stream", stream, "--store", store, "--group", "mlserve-serve"]
    if args.monitor_window:
        command += ["--window", str(args.monitor_window)]
    return MonitorProcess(runner.start_child(command))


class MonitorProcess:
    """The monitor process of ``serve --monitor``: it ends with the server."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the monitor ends after its batch under way), then SIGKILL."""
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def monitor(args: argparse.Namespace) -> None:
    """``mlserve monitor``: consume the model-log stream until SIGTERM or Ctrl-C."""
    from mlserve.function.lifeline import watch_parent
    from mlserve.monitoring.monitor import MonitorSettings, open_monitor

    watch_parent()  # the monitor of `serve --monitor` ends with its server

    if args.grace is not None and not 0 <= args.grace <= (args.window or 600):
        raise UsageError(f"--grace {args.grace}: from 0 to the window's length")
    registry = None
    metrics_server = None
    if args.metrics_port:
        import prometheus_client

        registry = prometheus_client.CollectorRegistry()
        _check_ports(args.host, [args.metrics_port])
        metrics_server, _ = prometheus_client.start_http_server(
            args.metrics_port, addr=args.host, registry=registry
        )
    try:
        watcher = open_monitor(
            args.stream,
            args.store,
            MonitorSettings(**({"window": args.window} if args.window else {}), grace=args.grace),
            group=args.group,
            results=args.results,
            alert_webhook=args.alert_webhook,
            applications=[_application(name) for name in args.application],
            registry=registry,
        )
    except (ValueError, ImportError) as exc:
        raise UsageError(str(exc)) from None
    stop = asyncio.Event()

    async def watch() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        # Announced once a SIGTERM stops it cleanly (a supervisor may send one at once).
        print(
            f"mlserve: monitoring {args.stream} into {watcher.store_url} "
            f"(windows of {watcher.settings.window:g} s, group {args.group})",
            flush=True,
        )
        await watcher.run(stop)

    try:
        asyncio.run(watch())
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()


def _application(name: str) -> Any:
    """``--application module:Class`` or ``file.py:Class``: a monitoring application."""
    where, _, attr = name.rpartition(":")
    if not where or not attr:
        raise UsageError(f"--application {name}: use module:Class or file.py:Class")
    try:
        if where.endswith(".py"):
            names = runpy.run_path(where, run_name="mlserve_monitoring_app")
            cls = names[attr]
        else:
            cls = getattr(importlib.import_module(where), attr)
    except (ImportError, KeyError, AttributeError, OSError) as exc:
        raise UsageError(f"--application {name}: {exc}") from None
    return cls()


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: a number of seconds above 0")
    return value


def _monitor_parser(commands: Commands) -> None:
    cmd = commands.add_parser(
        "monitor",
        help="drift and health of served models, from their model-log stream",
        description="Consume the model-log stream, window each endpoint's calls, compute "
        "drift against the model's reference statistics, and write the results to the "
        "endpoint records.",
    )
    cmd.add_argument(
        "--stream",
        required=True,
        help="the model-log stream: a file path, redis://host:port/db?stream=S, "
        "or kafka://broker:port?topic=T",
    )
    cmd.add_argument(
        "--store",
        help="endpoint store, an SQLAlchemy URL (default: MLSERVE_ENDPOINT_STORE or "
        "./mlserve-data/endpoints.db)",
    )
    cmd.add_argument(
        "--window",
        type=_seconds,
        metavar="SECONDS",
        help="tumbling window length (default 600)",
    )
    cmd.add_argument(
        "--grace",
        type=float,
        metavar="SECONDS",
        help="how late a record may arrive and still join its window (default: a tenth "
        "of the window, at most 10)",
    )
    cmd.add_argument(
        "--group",
        default="mlserve-monitor",
        help="consumer group: monitors of one group split a Kafka topic's partitions "
        "(default mlserve-monitor)",
    )
    cmd.add_argument("--results", metavar="URL", help="also write one record per window here")
    cmd.add_argument(
        "--alert-webhook", metavar="URL", help="POST an alert when drift rises (once per change)"
    )
    cmd.add_argument(
        "--application",
        action="append",
        default=[],
        metavar="MODULE:CLASS",
        help="a monitoring application to run on every window (repeatable)",
    )
    cmd.add_argument("--metrics-port", type=int, help="serve Prometheus drift gauges on this port")
    cmd.add_argument("--host", default="127.0.0.1", help="with --metrics-port (default 127.0.0.1)")
    cmd.set_defaults(handler=monitor)


def _start_kafka(args: argparse.Namespace, server: GraphServer) -> KafkaTrigger:
    """The Kafka face beside the HTTP one (which keeps /metrics and the health routes)."""
    from mlserve.kafka import KafkaTrigger, TriggerOptions, parse_source

    topic, brokers = parse_source(args.kafka)
    options = TriggerOptions(
        topic,
        brokers,
        args.group,
        args.output_topic,
        args.dead_letter_topic,
        stream_output=args.stream_output,
    )
    # A consumer that failed ends the process (non-zero): its pod restarts, its partitions move.
    trigger = KafkaTrigger(server, options, lambda: os.kill(os.getpid(), signal.SIGTERM))
    trigger.start()  # stopped once the HTTP face drained (run_server's `drained`)
    print(f"mlserve: consuming {topic} from {brokers} as group {args.group}", flush=True)
    return trigger


def _tls(args: argparse.Namespace) -> TLSSettings:
    """The faces' TLS files (docs/security.md#tls); one that does not load is a usage
    error, before any port opens or model loads."""
    from mlserve.core.tls import TLSError, TLSSettings

    tls = TLSSettings.from_env(
        certfile=args.ssl_certfile, keyfile=args.ssl_keyfile, ca_certs=args.ssl_ca_certs
    )
    try:
        tls.check()
    except TLSError as exc:
        raise UsageError(str(exc)) from None
    return tls


def _check_kafka(args: argparse.Namespace) -> None:
    """Bad ``--kafka`` options, or no Kafka client installed, end ``mlserve serve`` with
    one line, before any model loads."""
    from mlserve.core.kafka_config import confluent
    from mlserve.kafka import parse_source

    try:
        parse_source(args.kafka)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not args.group:
        raise UsageError("--kafka needs --group (the consumer group its members share)")
    try:
        confluent()
    except ImportError as exc:
        raise UsageError(str(exc)) from None


def _check_ports(host: str, ports: list[int | None]) -> None:
    """A host or port the server cannot listen on ends ``mlserve serve`` with one line,
    before any model loads: a usage error, or (exit status 1) a port another process holds."""
    from mlserve.core.sockets import bind_socket

    for port in ports:
        if not port:
            continue
        try:
            bind_socket(host, port).close()
        except socket.gaierror:
            raise UsageError(
                f"--host {host} is not an address: give an address of this machine, "
                "127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
            ) from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise SystemExit(
                    f"mlserve: port {port} on {host} is in use by another process"
                ) from None
            raise UsageError(_listen_error(host, port, exc)) from None


def _listen_error(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"--host {host} is not an address of this machine: give one of its addresses, "
            "127.0.0.1 or 0.0.0.0"
        )
    if exc.errno == errno.EACCES:
        return f"port {port} needs privileges this process lacks: give a port of 1024 or more"
    return f"cannot listen on {host}:{port}: {exc.strerror}"


def _port(text: str) -> int:
    """A TCP port for argparse: 1 to 65535."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give a number from 1 to 65535")
    return int(text)


def _count(text: str) -> int:
    """A number of processes for argparse: 1 or more."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of 1 or more")
    return int(text)


def face_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``FaceSettings`` values given as flags (None: not given, env or default)."""
    from mlserve.core.settings import split_secrets

    return {
        "auth_tokens": split_secrets(*(args.auth_token or [])),
        "admin_tokens": split_secrets(*(args.admin_token or [])),
        "basic_users": split_secrets(*(args.basic_auth or [])),
        "auth_readiness": args.auth_readiness or None,
        "max_body_bytes": args.max_body_size,
        "max_header_bytes": args.max_header_size,
        "max_headers": args.max_headers,
        "max_url_bytes": args.max_url_size,
        "header_timeout": args.header_timeout,
        "keep_alive_timeout": args.keep_alive_timeout,
        "max_connections": args.max_connections,
        "max_connections_per_client": args.max_connections_per_client,
        "max_client_rate": args.max_client_rate,
        "body_timeout": args.body_timeout,
        "write_buffer_bytes": args.write_buffer_size,
        "write_timeout": args.write_timeout,
        "hide_errors": args.hide_errors or None,
        "json_nonfinite": args.json_nonfinite,
        "no_console": args.no_console or None,
    }


def _security_arguments(cmd: argparse.ArgumentParser) -> None:
    """Security and limits of the network faces (docs/security.md; env: MLSERVE_*)."""
    group = cmd.add_argument_group("security and limits (also set by MLSERVE_* variables)")
    add = group.add_argument
    add("--auth-token", action="append", help="bearer token(s), comma-separated or repeated")
    add("--admin-token", action="append", help="token(s) that may also load/unload models")
    add("--basic-auth", action="append", help="HTTP basic user:password pair(s)")
    add("--auth-readiness", action="store_true", help="readiness needs credentials too")
    add("--model-control-mode", choices=["none", "explicit"], help="explicit: load/unload on")
    add("--max-body-size", type=int, help="bytes (default 64 MiB): 413")
    add("--max-header-size", type=int, help="bytes of all headers (default 65536): 431")
    add("--max-headers", type=int, help="header fields (default 100): 431")
    add("--max-url-size", type=int, help="bytes (default 8192): 414")
    add("--header-timeout", type=float, help="seconds to send a request head (default 10)")
    add("--keep-alive-timeout", type=float, help="idle keep-alive seconds (default 5)")
    add("--max-connections", type=int, help="open connections (default 2048)")
    add("--max-connections-per-client", type=int, help="from one address (default 1/8 of max)")
    add("--max-client-rate", type=float, help="requests/s from one address (default 0: off): 429")
    add("--body-timeout", type=float, help="seconds to send a request body (default 60): 408")
    add("--write-buffer-size", type=int, help="unread answer bytes per connection (default 262144)")
    add("--write-timeout", type=float, help="seconds answers may stay unread (default 30)")
    add("--hide-errors", action="store_true", help="no exception text in responses")
    add("--json-nonfinite", choices=["literal", "null", "string"], help="NaN/Infinity in answers")
    add("--no-console", action="store_true", help="no web console at /console")
    add("--ssl-certfile", metavar="PEM", help="serve TLS on every port with this certificate")
    add("--ssl-keyfile", metavar="PEM", help="its private key (default: in --ssl-certfile)")
    add("--ssl-ca-certs", metavar="PEM", help="require client certificates this CA signed (mTLS)")


def _serve_parser(commands: Commands) -> None:
    cmd = commands.add_parser("serve", help="serve a function over HTTP and gRPC")
    cmd.add_argument(
        "target", help="a Python file, an exported function YAML, or a model repository"
    )
    cmd.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)"
    )
    cmd.add_argument("--port", type=_port, default=8080, help="HTTP port (default 8080)")
    cmd.add_argument("--grpc-port", type=_port, default=None, help="also serve gRPC on this port")
    cmd.add_argument(
        "--tfs-grpc-port",
        type=_port,
        default=None,
        help="also serve TF Serving's gRPC API alone on this port (its clients expect 8500)",
    )
    cmd.add_argument("--workers", type=_count, default=1, help="processes sharing the ports")
    cmd.add_argument(
        "--ready-min-workers",
        type=int,
        default=1,
        help="with --workers: readiness is 503 while fewer workers serve (default 1)",
    )
    cmd.add_argument(
        "--http",
        choices=["mlserve", "asgi"],
        default="mlserve",
        help="HTTP face: mlserve's own HTTP/1.1 server, or the ASGI app under uvicorn",
    )
    cmd.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    cmd.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="the server's log level (default info)",
    )
    cmd.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=None,
        help="text, or json: one object per line (default text; env MLSERVE_LOG_FORMAT)",
    )
    cmd.add_argument(
        "--access-log", action="store_true", help="log one line per request (default off)"
    )
    cmd.add_argument(
        "--otel-endpoint",
        metavar="URL",
        help="export OpenTelemetry spans to this OTLP collector "
        "(default: env OTEL_EXPORTER_OTLP_ENDPOINT; none: no tracing)",
    )
    cmd.add_argument(
        "--otel-protocol",
        choices=["http/protobuf", "grpc"],
        default=None,
        help="OTLP over HTTP/protobuf (default; 4318) or gRPC (4317)",
    )
    cmd.add_argument("--model-config", help="repository: YAML or TF Serving model_config_list")
    cmd.add_argument(
        "--poll-interval",
        type=float,
        help="repository: seconds between polls (default 1; 0: off)",
    )
    cmd.add_argument(
        "--version-quiet-period",
        type=float,
        metavar="SECONDS",
        help="repository: a new version loads once its files are unchanged this long "
        "(default 2; env MLSERVE_VERSION_QUIET_PERIOD)",
    )
    cmd.add_argument(
        "--version-done-file",
        metavar="NAME",
        help="repository: a new version loads only once it holds this file "
        "(env MLSERVE_VERSION_DONE_FILE)",
    )
    cmd.add_argument("--cache-size", type=int, help="repository: at most N versions loaded (LRU)")
    add_limit_flags(cmd)
    cmd.add_argument(
        "--kafka",
        metavar="TOPIC@BROKERS",
        help="also consume this topic as a member of --group",
    )
    cmd.add_argument("--group", help="the Kafka consumer group (with --kafka)")
    cmd.add_argument("--output-topic", help="where results go, keyed as their input")
    cmd.add_argument(
        "--dead-letter-topic", help="where failed messages go (default: TOPIC-dead-letter)"
    )
    cmd.add_argument(
        "--stream-output",
        choices=("chunks", "joined"),
        default="chunks",
        help="a streamed answer: one message per chunk and a final marker (default), "
        "or one message of the chunks joined (with --kafka)",
    )
    cmd.add_argument(
        "--track",
        action="store_true",
        help="log every call to the model-log stream (./mlserve-data/model-logs.jsonl) and "
        "keep endpoint records, as set_tracking() does; --monitor implies it",
    )
    cmd.add_argument(
        "--monitor",
        action="store_true",
        help="also monitor the models here: drift and health from the model-log stream, "
        "into the endpoint records (see `mlserve monitor --help`)",
    )
    cmd.add_argument(
        "--monitor-window",
        type=_seconds,
        metavar="SECONDS",
        help="with --monitor: the monitoring window (default 600)",
    )
    _security_arguments(cmd)
    cmd.set_defaults(handler=serve)


def build(args: argparse.Namespace) -> None:
    from mlserve.function.build import BuildOptions
    from mlserve.function.build import build as write_build
    from mlserve.function.wheel import WheelError

    _check_target(args)
    fn = load_function(args.target, **_repository_options(args))
    options = BuildOptions(
        image=args.image,
        port=args.port,
        grpc_port=args.grpc_port,
        replicas=args.replicas,
        max_replicas=args.max_replicas,
        cpu=args.cpu,
        memory=args.memory,
        auth_secret=args.auth_secret,
        tls_secret=args.tls_secret,
        tls_client_auth=args.tls_client_auth,
        drain_seconds=args.drain_seconds,
        mlserve_requirement=args.mlserve_requirement,
        mlserve_extras=args.mlserve_extra,
        requirements=args.requirement,
        kafka=args.kafka or "",
        group=args.group or "",
        output_topic=args.output_topic or "",
        dead_letter_topic=args.dead_letter_topic or "",
        lag_threshold=args.lag_threshold,
    )
    try:
        if options.kafka:
            options.kafka_source()
        options.tls_args()
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        written = write_build(fn, args.out, options)
    except WheelError as exc:
        raise SystemExit(f"mlserve: {exc}") from None
    for path in written:
        print(f"mlserve: wrote {path}")


def _build_parser(commands: Commands) -> None:
    defaults = _build_defaults()
    cmd = commands.add_parser(
        "build", help="write a Dockerfile and Kubernetes, KServe and nuclio objects for a function"
    )
    cmd.add_argument(
        "target", help="a Python file, an exported function YAML, or a model repository"
    )
    cmd.add_argument("--out", default="build", help="the build folder (default: ./build)")
    cmd.add_argument("--image", default="", help="image name (default: <function>:latest)")
    cmd.add_argument("--port", type=_port, default=defaults.port)
    cmd.add_argument(
        "--grpc-port", type=_port, default=None, help="also serve V2 gRPC on this port"
    )
    cmd.add_argument("--replicas", type=int, default=defaults.replicas, help="and HPA minimum")
    cmd.add_argument("--max-replicas", type=int, default=defaults.max_replicas, help="HPA maximum")
    cmd.add_argument("--cpu", default=defaults.cpu, help="CPU request per pod")
    cmd.add_argument("--memory", default=defaults.memory, help="memory request and limit per pod")
    cmd.add_argument(
        "--auth-secret", default="", help="Kubernetes Secret whose key 'token' is the auth token"
    )
    cmd.add_argument(
        "--tls-secret",
        default="",
        help="a kubernetes.io/tls Secret: the pods serve TLS with its tls.crt and tls.key",
    )
    cmd.add_argument(
        "--tls-client-auth",
        action="store_true",
        help="with --tls-secret: clients need a certificate its ca.crt signed (mutual TLS)",
    )
    cmd.add_argument(
        "--drain-seconds", type=int, default=defaults.drain_seconds, help="SIGTERM drain time"
    )
    cmd.add_argument(
        "--mlserve-requirement",
        default="",
        help="pip requirement of mlserve (default: a wheel of this mlserve, in the build folder)",
    )
    cmd.add_argument(
        "--mlserve-extra",
        action="append",
        default=[],
        help="an extra of mlserve's wheel to install, e.g. tensorflow (repeatable)",
    )
    cmd.add_argument(
        "--requirement", action="append", default=[], help="a pip requirement (repeatable)"
    )
    cmd.add_argument("--model-config", help="YAML or TF Serving model_config_list (repository)")
    cmd.add_argument(
        "--kafka", metavar="TOPIC@BROKERS", help="Kafka consumer mode, scaled by KEDA on lag"
    )
    cmd.add_argument("--group", help="the pods' Kafka consumer group (with --kafka)")
    cmd.add_argument("--output-topic", help="where results go (with --kafka)")
    cmd.add_argument("--dead-letter-topic", help="where failed messages go (with --kafka)")
    cmd.add_argument(
        "--lag-threshold",
        type=int,
        default=defaults.lag_threshold,
        help="KEDA: messages of lag per pod",
    )
    cmd.set_defaults(handler=build)


def _build_defaults() -> Any:
    from mlserve.function.build import BuildOptions

    return BuildOptions()


def list_endpoints(args: argparse.Namespace) -> None:
    from mlserve.monitoring.api import list_endpoints as table

    print(table(args.store, args.project))


def _endpoint(args: argparse.Namespace) -> Any:
    from mlserve.monitoring.stores import open_store

    store = open_store(args.store)
    try:
        endpoint = store.get(args.uid)
    finally:
        store.close()
    if endpoint is None:
        raise SystemExit(f"mlserve: no endpoint {args.uid} (see `mlserve endpoints list`)")
    return endpoint


def get_endpoint(args: argparse.Namespace) -> None:
    print(_endpoint(args).model_dump_json(indent=2))


def drift_page(args: argparse.Namespace) -> None:
    from mlserve.monitoring.drift_page import drift_html

    Path(args.html).write_text(drift_html(_endpoint(args)), encoding="utf-8")
    print(f"mlserve: wrote {args.html}")


def infer(args: argparse.Namespace) -> None:
    """``mlserve infer``: the answer as indented JSON on stdout, the time taken on stderr."""
    from mlserve.client import ClientError
    from mlserve.client import infer as ask

    body = _request_body(args.data)
    try:
        answer, seconds = ask(
            args.url, args.model, body, args.model_version, _headers(args), args.timeout
        )
    except ClientError as exc:
        raise SystemExit(f"mlserve: {exc}") from None
    print(json.dumps(answer, indent=2))
    print(f"mlserve: answered in {seconds * 1000:.1f} ms", file=sys.stderr)


def _request_body(data: str) -> dict[str, Any]:
    """``--data``: a V2 request body as JSON, or a file holding one; a JSON list is the
    data of one input (mlserve's row form, ``{"inputs": [...]}``)."""
    where = "--data"
    if not data.lstrip().startswith(("{", "[")):
        path = Path(data)
        if not path.is_file():
            raise UsageError(f"--data {data}: neither JSON nor a file; give '{{\"inputs\": ...}}'")
        data, where = path.read_text(), data
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise UsageError(f"{where} is not JSON ({exc}): give a V2 request body") from None
    if isinstance(body, list):
        return {"inputs": body}
    if not isinstance(body, dict):
        raise UsageError(f'{where}: give a V2 request body ({{"inputs": [...]}}) or a list')
    return body


def _headers(args: argparse.Namespace) -> dict[str, str]:
    headers = {}
    for header in args.header or []:
        name, colon, value = header.partition(":")
        if not colon or not name.strip():
            raise UsageError(f"--header {header!r}: give 'Name: value'")
        headers[name.strip()] = value.strip()
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    return headers


def models(args: argparse.Namespace) -> None:
    """``mlserve models``: the models of a running server, their versions and states."""
    from mlserve.client import ClientError, list_models

    try:
        rows = list_models(args.url, _headers(args), args.timeout)
    except ClientError as exc:
        raise SystemExit(f"mlserve: {exc}") from None
    if not rows:
        print("no models")
        return
    columns = ["name", "version", "state", "reason"]
    cells = [[column.upper() for column in columns]]
    cells += [[row[column] for column in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def _client_parsers(commands: Commands) -> None:
    """``mlserve infer`` and ``mlserve models``: ask a running server (V2 over HTTP)."""
    infer_cmd = commands.add_parser("infer", help="send a V2 inference request to a server")
    models_cmd = commands.add_parser("models", help="a server's models, versions and states")
    for cmd in (infer_cmd, models_cmd):
        cmd.add_argument("url", help="the server: http://HOST:PORT or HOST:PORT")
    infer_cmd.add_argument("model", help="the model's name")
    infer_cmd.add_argument(
        "--data",
        required=True,
        metavar="FILE|JSON",
        help="a V2 request body (JSON, or a file holding it); a JSON list is one input's data",
    )
    infer_cmd.add_argument(
        "--version", dest="model_version", default="", metavar="V", help="the model's version V"
    )
    for cmd in (infer_cmd, models_cmd):
        cmd.add_argument(
            "--header", action="append", metavar="'NAME: VALUE'", help="a header (repeatable)"
        )
        cmd.add_argument("--token", help="a bearer token (Authorization: Bearer TOKEN)")
        cmd.add_argument(
            "--timeout", type=float, default=60.0, metavar="SECONDS", help="(default 60)"
        )
    infer_cmd.set_defaults(handler=infer)
    models_cmd.set_defaults(handler=models)


def _explained(exc: Exception) -> tuple[int, str] | None:
    """What a user sees of an exception: a missing extra in one line (status 2), a syntax
    error in their code at its place (2), an exception their code raised with their
    frames only (1); None for mlserve's own failures, shown whole."""
    if isinstance(exc, ImportError) and "pip install" in str(exc):
        return 2, f"mlserve: {exc}\n"
    if isinstance(exc, SyntaxError) and _is_users(exc.filename or "<unknown>"):
        return 2, "".join(traceback.format_exception_only(exc))
    report = traceback.TracebackException.from_exception(exc)
    if not any(_is_users(frame.filename) for frame in report.stack):
        return None
    _keep_users(report)
    return 1, "".join(report.format())


# Where code that is not the user's lives: mlserve, the standard library, installed packages.
_NOT_USERS = [Path(__file__).resolve().parent] + [
    Path(os.path.realpath(sysconfig.get_path(name)))
    for name in ("stdlib", "platstdlib", "purelib", "platlib")
]


def _is_users(filename: str) -> bool:
    """A frame of the user's code: not mlserve's, the standard library's (the import
    machinery's ``<frozen runpy>`` included) or an installed package's."""
    if filename.startswith("<"):
        return not filename.startswith("<frozen ")
    path = Path(os.path.realpath(filename))
    return not any(path.is_relative_to(root) for root in _NOT_USERS)


def _keep_users(report: traceback.TracebackException) -> None:
    report.stack = traceback.StackSummary.from_list(
        [frame for frame in report.stack if _is_users(frame.filename)]
    )
    for chained in (report.__cause__, report.__context__):
        if chained is not None:
            _keep_users(chained)


def _run(args: argparse.Namespace) -> None:
    """Run the command; the user's mistakes end it as ``_explained`` says."""
    try:
        args.handler(args)
    except UsageError as exc:
        sys.stderr.write(f"mlserve: {exc}\n")
        raise SystemExit(2) from None
    except Exception as exc:
        told = _explained(exc)
        if told is None:
            raise
        sys.stderr.write(told[1])
        raise SystemExit(told[0]) from None


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _Parser(prog="mlserve", description="Serve models as serverless functions.")
    parser.add_argument("--version", action="version", version=f"mlserve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _serve_parser(commands)
    _build_parser(commands)
    _client_parsers(commands)
    endpoints_cmd = commands.add_parser(
        "endpoints", help="model endpoint records (one per served model)"
    )
    actions = endpoints_cmd.add_subparsers(dest="action", required=True)
    store_help = "SQLAlchemy URL (default: MLSERVE_ENDPOINT_STORE or ./mlserve-data/endpoints.db)"
    endpoints_list = actions.add_parser("list", help="print the endpoint records as a table")
    endpoints_list.add_argument("--store", help=store_help)
    endpoints_list.add_argument("--project", help="only this project's endpoints")
    endpoints_list.set_defaults(handler=list_endpoints)
    endpoints_get = actions.add_parser("get", help="print one endpoint record as JSON")
    endpoints_get.add_argument("uid", help="the endpoint's uid (`mlserve endpoints list`)")
    endpoints_get.add_argument("--store", help=store_help)
    endpoints_get.set_defaults(handler=get_endpoint)
    endpoints_drift = actions.add_parser(
        "drift", help="the features-drift table of an endpoint's last window"
    )
    endpoints_drift.add_argument("uid", help="the endpoint's uid (`mlserve endpoints list`)")
    endpoints_drift.add_argument("--store", help=store_help)
    endpoints_drift.add_argument(
        "--html", required=True, metavar="FILE", help="write the table as a page to FILE"
    )
    endpoints_drift.set_defaults(handler=drift_page)
    _monitor_parser(commands)
    args = parser.parse_args(argv)
    args.argv = argv
    logging.basicConfig(
        level=getattr(args, "log_level", "info").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _run(args)


if __name__ == "__main__":
    main()
