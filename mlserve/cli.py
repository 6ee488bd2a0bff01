"""The ``mlserve`` command: ``mlserve serve <target>``."""

from __future__ import annotations

import argparse
import logging
import runpy
import sys
from pathlib import Path
from typing import Any

__all__ = ["load_function", "main"]


def load_function(target: str) -> Any:
    """The serving function in ``target``: an exported YAML/JSON, or a Python
    file with ``serving_function()``, ``fn``, or a module-level function object."""
    from mlserve.function import ServingFunction, import_function

    path = Path(target)
    if path.suffix in (".yaml", ".yml", ".json"):
        return import_function(target)
    if path.suffix == ".py":
        sys.path.insert(0, str(path.resolve().parent))
        names = runpy.run_path(str(path), run_name="__mlserve__")
        if callable(names.get("serving_function")):
            return names["serving_function"]()
        if isinstance(names.get("fn"), ServingFunction):
            return names["fn"]
        found = [v for v in names.values() if isinstance(v, ServingFunction)]
        if found:
            return found[0]
        raise SystemExit(f"{target} defines no serving_function(), fn, or function object")
    raise SystemExit(f"cannot serve {target}: give a .py file or an exported .yaml")


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from mlserve.http.app import create_app

    fn = load_function(args.target)
    server = fn.to_graph_server()
    server.init_states(namespace=fn.namespace)
    server.init_object(fn.namespace)
    print(f"mlserve: serving {fn.metadata.name} on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(create_app(server), host=args.host, port=args.port, log_level="warning",
                loop="uvloop", http="httptools", access_log=False)


def list_endpoints(args: argparse.Namespace) -> None:
    from mlserve.monitoring.api import list_endpoints as table

    print(table(args.store, args.project))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mlserve", description="Serve models as serverless functions.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="serve a function over HTTP")
    serve_cmd.add_argument("target", help="a Python file, an exported function YAML, or a model repository")
    serve_cmd.add_argument("--host", default="127.0.0.1")
    serve_cmd.add_argument("--port", type=int, default=8080)
    serve_cmd.set_defaults(handler=serve)
    endpoints_cmd = commands.add_parser("endpoints", help="model endpoint records (S9)")
    endpoints_list = endpoints_cmd.add_subparsers(dest="action", required=True).add_parser(
        "list", help="print the endpoint records as a table")
    endpoints_list.add_argument("--store", help="SQLAlchemy URL (default: MLSERVE_ENDPOINT_STORE or "
                                                "./mlserve-data/endpoints.db)")
    endpoints_list.add_argument("--project", help="only this project's endpoints")
    endpoints_list.set_defaults(handler=list_endpoints)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args.handler(args)


if __name__ == "__main__":
    main()
