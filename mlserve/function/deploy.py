"""Local deployment: ``fn.deploy()`` without a remote engine runs the function
in a background ``mlserve serve`` process on 127.0.0.1, and returns once the
server is ready and its models have loaded; ``fn.invoke()`` calls it;
``fn.stop()`` ends it.

The server is tied to the process that deployed it: it ends when that process
ends, however it ends (``prctl(PR_SET_PDEATHSIG)`` on Linux, and a watchdog
in the server for the parent's pid, see ``mlserve.function.lifeline``). One
function (project and name) has at most one local deployment per process:
deploying it again replaces the earlier one.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from mlserve.core.sockets import port_is_free
from mlserve.core.tls import TLS_ENV
from mlserve.function.lifeline import PARENT_PID_ENV, die_with_parent
from mlserve.protocol.tensors import dumps, loads
from mlserve.server.graph_server import ServingRequestError

__all__ = ["DeployError", "LocalDeployment"]

HOST = "127.0.0.1"
LOG_TAIL_LINES = 40
# Loopback calls never go through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# (project, name) -> the deployment of that function made by this process.
_DEPLOYED: dict[tuple[str, str], LocalDeployment] = {}


class DeployError(RuntimeError):
    """The function's server did not start, or its models did not load."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class LocalDeployment:
    """A function served by a background process; ``url`` is where, ``log_path``
    holds its output."""

    def __init__(self, fn: Any, port: int | None = None, timeout: float = 120.0) -> None:
        key = (fn.metadata.project, fn.metadata.name)
        earlier = _DEPLOYED.pop(key, None)
        if earlier is not None:
            earlier.stop()
        if port and not port_is_free(HOST, port):
            raise DeployError(f"port {port} on {HOST} is in use by another process")
        self.port = port or _free_port()
        self.url = f"http://{HOST}:{self.port}"
        self._workdir = tempfile.mkdtemp(prefix="mlserve-deploy-")
        self.log_path = os.path.join(self._workdir, "server.log")
        try:
            spec = fn.export(os.path.join(self._workdir, "function.yaml"))
        except BaseException:  # e.g. a class whose code cannot be found
            shutil.rmtree(self._workdir, ignore_errors=True)
            raise
        self.proc = self._start(spec)
        atexit.register(self.stop)
        try:
            self._wait(timeout)
        except BaseException:
            self.stop()
            raise
        _DEPLOYED[key] = self

    def _start(self, spec: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        env.pop("JPY_SESSION_NAME", None)  # the server is no notebook
        for _, variable in TLS_ENV.values():  # it answers plain HTTP on loopback
            env.pop(variable, None)
        env[PARENT_PID_ENV] = str(os.getpid())
        command = [sys.executable, "-m", "mlserve", "serve", spec, "--host", HOST]
        # PR_SET_PDEATHSIG follows the thread that forks: only the main thread lives
        # as long as the process; from another thread the server's watchdog alone ties it.
        tie = die_with_parent if threading.current_thread() is threading.main_thread() else None
        with open(self.log_path, "wb") as log:
            return subprocess.Popen(
                [*command, "--port", str(self.port)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its own process group: Ctrl-C in a terminal or a kernel interrupt
                # (a signal to the group) does not stop it; its parent's death does.
                start_new_session=True,
                preexec_fn=tie,  # noqa: PLW1509 - prctl only, no locks taken
            )

    def _wait(self, timeout: float) -> None:
        """Until ``/v2/health/ready`` is true; a model that failed to load, or the
        process ending, raises at once with the log's tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DeployError(
                    f"the function's server exited with {self.proc.returncode}:\n{self.logs()}"
                )
            try:
                with _OPENER.open(f"{self.url}/v2/health/ready", timeout=5):
                    return
            except urllib.error.HTTPError as error:
                error.close()
                self._raise_for_failed_models()
            except OSError:
                pass
            time.sleep(0.05)
        raise DeployError(f"the function's models were not ready within {timeout}s:\n{self.logs()}")

    def _raise_for_failed_models(self) -> None:
        try:
            entries = self.send("/v2/repository/index", {}, None, None)
        except (OSError, RuntimeError):
            return
        failed = [
            f"{entry['name']}: {entry['reason']}"
            for entry in entries
            if entry.get("state") == "UNAVAILABLE" and entry.get("reason") != "unloaded"
        ]
        if failed:
            raise DeployError("models failed to load (" + "; ".join(failed) + f"):\n{self.logs()}")

    def logs(self, tail: int | None = LOG_TAIL_LINES) -> str:
        """The server's output (its last ``tail`` lines; all with ``tail=None``)."""
        try:
            with open(self.log_path, errors="replace") as log:
                lines = log.readlines()
        except FileNotFoundError:
            return ""
        return "".join(lines[-tail:] if tail else lines)

    def send(
        self, path: str, body: object, method: str | None, headers: dict[str, str] | None
    ) -> Any:
        """``fn.invoke`` over HTTP: a JSON body in (bytes as they are), the parsed body out."""
        data = body if isinstance(body, bytes | None) else dumps(body)
        request = urllib.request.Request(
            f"{self.url}/{path.lstrip('/')}",
            data=data,
            method=method or ("POST" if data is not None else "GET"),
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        try:
            with _OPENER.open(request) as answer:
                return _parsed(answer.read(), answer.headers.get("content-type", ""))
        except urllib.error.HTTPError as error:
            body = _parsed(error.read(), error.headers.get("content-type", ""))
            raise ServingRequestError(error.code, body) from None

    def stop(self) -> None:
        """Drain and end the server process (SIGTERM, then kill after 30 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for key, deployment in list(_DEPLOYED.items()):
            if deployment is self:
                del _DEPLOYED[key]
        shutil.rmtree(self._workdir, ignore_errors=True)
        atexit.unregister(self.stop)


def _parsed(data: bytes, content_type: str) -> Any:
    if content_type.startswith("application/json"):
        return loads(data)
    return data.decode() if content_type.startswith("text/") else data
