"""The ``mlserve`` command: ``mlserve serve <target>``.

A target kind is one entry of ``TARGETS``: a test on the target string and a
builder of the initialised ``GraphServer`` it serves.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import re
import runpy
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlserve.core.limits import add_limit_flags, server_limits

if TYPE_CHECKING:
    from mlserve.function import ServingFunction
    from mlserve.kafka import KafkaTrigger
    from mlserve.server.graph_server import GraphServer

    Commands = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["TARGETS", "build_server", "load_function", "main"]


def load_function(target: str, **repository_options: Any) -> ServingFunction:
    """The serving function in ``target``: an exported YAML/JSON, a Python file
    with ``serving_function()``, ``fn``, or a module-level function object, or a
    model repository folder (``repository_options``: model_config, poll_interval, cache_size)."""
    from mlserve.function import import_function

    path = Path(target)
    if path.is_dir():
        from mlserve.function.repository import function_from_repository

        return function_from_repository(path, **repository_options)
    if path.suffix in (".yaml", ".yml", ".json"):
        return import_function(target)
    if path.suffix == ".py":
        sys.path.insert(0, str(path.resolve().parent))
        # A module name of the function's own: its classes export by their short
        # names, and the file's code travels with the function (export, build:
        # docs/notebooks.md#try-deploy-export).
        module_name = "mlserve_fn_" + re.sub(r"\W", "_", path.stem)
        names = runpy.run_path(str(path), run_name=module_name)
        fn = _function_in(names)
        if fn is None:
            raise SystemExit(f"{target} defines no serving_function(), fn, or function object")
        if not fn.spec.source:
            fn.spec.source = path.read_text()
            fn._namespace = names
        return fn
    raise SystemExit(f"cannot serve {target}: give a .py file or an exported .yaml")


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
    options = {
        "model_config": args.model_config,
        "poll_interval": args.poll_interval,
        "cache_size": args.cache_size,
    }
    fn = load_function(args.target, **options)
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
    raise SystemExit(f"cannot serve {args.target}: give a .py file or an exported .yaml")


def serve(args: argparse.Namespace) -> None:
    from mlserve import runner
    from mlserve.function.lifeline import watch_parent
    from mlserve.server.shared import share_model_state

    watch_parent()  # a server of fn.deploy() ends with the process that deployed it
    if args.kafka:
        _check_kafka(args)
    if not args.reuse_port:  # workers share the ports their supervisor checked
        _check_ports(args.host, [args.port, args.grpc_port, args.tfs_grpc_port])
    if args.workers > 1:
        raise SystemExit(runner.supervise(runner.worker_command(args.argv), args.workers))
    if os.environ.get(runner.WORKER_ENV, "0") != "0":  # worker 0 tells, the others warn
        logging.getLogger().setLevel(logging.WARNING)
    limits = server_limits(args)  # bad values stop here, before any model loads
    server = build_server(args)
    server.limits = limits
    share_model_state(server)  # a worker of --workers N: loads/unloads reach all of them
    trigger = _start_kafka(args, server) if args.kafka else None
    grpc = f" and grpc://{args.host}:{args.grpc_port}" if args.grpc_port else ""
    if args.tfs_grpc_port:
        grpc += f" and TF Serving grpc://{args.host}:{args.tfs_grpc_port}"

    def announce() -> None:
        if os.environ.get(runner.WORKER_ENV, "0") == "0":
            print(f"mlserve: serving {args.target} on http://{args.host}:{args.port}{grpc}")
            sys.stdout.flush()

    from mlserve.core.settings import FaceSettings

    settings = FaceSettings.from_env(**face_options(args))
    mode = args.model_control_mode or os.environ.get("MLSERVE_MODEL_CONTROL_MODE") or "none"
    server.model_control = server.model_control or mode == "explicit"
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
        )
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise SystemExit(f"mlserve: {args.host}:{args.port} is in use by another process") from None
    if trigger is not None and trigger.error is not None:
        raise SystemExit(f"mlserve: the Kafka trigger failed: {trigger.error}")


def _start_kafka(args: argparse.Namespace, server: GraphServer) -> KafkaTrigger:
    """The Kafka face beside the HTTP one (which keeps /metrics and the health routes)."""
    from mlserve.kafka import KafkaTrigger, TriggerOptions, parse_source

    topic, brokers = parse_source(args.kafka)
    options = TriggerOptions(topic, brokers, args.group, args.output_topic, args.dead_letter_topic)
    # A consumer that failed ends the process (non-zero): its pod restarts, its partitions move.
    trigger = KafkaTrigger(server, options, lambda: os.kill(os.getpid(), signal.SIGTERM))
    trigger.start()  # stopped once the HTTP face drained (run_server's `drained`)
    print(f"mlserve: consuming {topic} from {brokers} as group {args.group}", flush=True)
    return trigger


def _check_kafka(args: argparse.Namespace) -> None:
    """Bad ``--kafka`` options end ``mlserve serve`` with one line, before any model loads."""
    from mlserve.kafka import parse_source

    try:
        parse_source(args.kafka)
    except ValueError as exc:
        raise SystemExit(f"mlserve: {exc}") from None
    if not args.group:
        raise SystemExit("mlserve: --kafka needs --group (the consumer group its members share)")


def _check_ports(host: str, ports: list[int | None]) -> None:
    """A port another process holds ends ``mlserve serve`` with one line, before any model loads."""
    from mlserve.core.sockets import port_is_free

    for port in ports:
        if port and not port_is_free(host, port):
            raise SystemExit(f"mlserve: port {port} on {host} is in use by another process")


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
        "hide_errors": args.hide_errors or None,
    }


def _security_arguments(cmd: argparse.ArgumentParser) -> None:
    """Security and limits of the network faces (docs/security.md; env: MLSERVE_*)."""
    group = cmd.add_argument_group("security and limits (docs/security.md)")
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
    add("--hide-errors", action="store_true", help="no exception text in responses")


def _serve_parser(commands: Commands) -> None:
    cmd = commands.add_parser("serve", help="serve a function over HTTP and gRPC")
    cmd.add_argument(
        "target", help="a Python file, an exported function YAML, or a model repository"
    )
    cmd.add_argument("--host", default="127.0.0.1")
    cmd.add_argument("--port", type=int, default=8080)
    cmd.add_argument("--grpc-port", type=int, default=None, help="also serve gRPC on this port")
    cmd.add_argument(
        "--tfs-grpc-port",
        type=int,
        default=None,
        help="also serve TF Serving's gRPC API alone on this port (its clients expect 8500)",
    )
    cmd.add_argument("--workers", type=int, default=1, help="processes sharing the ports")
    cmd.add_argument(
        "--http",
        choices=["mlserve", "asgi"],
        default="mlserve",
        help="HTTP face: mlserve's own HTTP/1.1 server, or the ASGI app under uvicorn",
    )
    cmd.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    cmd.add_argument("--model-config", help="YAML or TF Serving model_config_list")
    cmd.add_argument(
        "--poll-interval", type=float, default=1.0, help="seconds between repository polls (0: off)"
    )
    cmd.add_argument("--cache-size", type=int, help="at most N model versions loaded (LRU)")
    add_limit_flags(cmd)
    cmd.add_argument(
        "--kafka",
        metavar="TOPIC@BROKERS",
        help="also consume this topic (docs/deployment.md#kafka-consumer-groups)",
    )
    cmd.add_argument("--group", help="the Kafka consumer group (with --kafka)")
    cmd.add_argument("--output-topic", help="where results go, keyed as their input")
    cmd.add_argument(
        "--dead-letter-topic", help="where failed messages go (default: TOPIC-dead-letter)"
    )
    _security_arguments(cmd)
    cmd.set_defaults(handler=serve)


def build(args: argparse.Namespace) -> None:
    from mlserve.function.build import BuildOptions
    from mlserve.function.build import build as write_build

    fn = load_function(args.target, model_config=args.model_config)
    options = BuildOptions(
        image=args.image,
        port=args.port,
        grpc_port=args.grpc_port,
        replicas=args.replicas,
        max_replicas=args.max_replicas,
        cpu=args.cpu,
        memory=args.memory,
        auth_secret=args.auth_secret,
        drain_seconds=args.drain_seconds,
        mlserve_requirement=args.mlserve_requirement,
        requirements=args.requirement,
        kafka=args.kafka or "",
        group=args.group or "",
        output_topic=args.output_topic or "",
        dead_letter_topic=args.dead_letter_topic or "",
        lag_threshold=args.lag_threshold,
    )
    if options.kafka:
        try:
            options.kafka_source()
        except ValueError as exc:
            raise SystemExit(f"mlserve: {exc}") from None
    for path in write_build(fn, args.out, options):
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
    cmd.add_argument("--port", type=int, default=defaults.port)
    cmd.add_argument("--grpc-port", type=int, default=None, help="also serve V2 gRPC on this port")
    cmd.add_argument("--replicas", type=int, default=defaults.replicas, help="and HPA minimum")
    cmd.add_argument("--max-replicas", type=int, default=defaults.max_replicas, help="HPA maximum")
    cmd.add_argument("--cpu", default=defaults.cpu, help="CPU request per pod")
    cmd.add_argument("--memory", default=defaults.memory, help="memory request and limit per pod")
    cmd.add_argument(
        "--auth-secret", default="", help="Kubernetes Secret whose key 'token' is the auth token"
    )
    cmd.add_argument(
        "--drain-seconds", type=int, default=defaults.drain_seconds, help="SIGTERM drain time"
    )
    cmd.add_argument("--mlserve-requirement", default="", help="pip requirement of mlserve")
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


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="mlserve", description="Serve models as serverless functions."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _serve_parser(commands)
    _build_parser(commands)
    endpoints_cmd = commands.add_parser(
        "endpoints", help="model endpoint records (docs/monitoring.md#endpoint-records)"
    )
    endpoints_list = endpoints_cmd.add_subparsers(dest="action", required=True).add_parser(
        "list", help="print the endpoint records as a table"
    )
    endpoints_list.add_argument(
        "--store",
        help="SQLAlchemy URL (default: MLSERVE_ENDPOINT_STORE or ./mlserve-data/endpoints.db)",
    )
    endpoints_list.add_argument("--project", help="only this project's endpoints")
    endpoints_list.set_defaults(handler=list_endpoints)
    args = parser.parse_args(argv)
    args.argv = argv
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args.handler(args)


if __name__ == "__main__":
    main()
