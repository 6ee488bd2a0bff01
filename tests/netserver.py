"""A real ``python -m mlserve serve`` process on free ports, stopped by PID."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.services import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
FN = "tests/http/fn.py"


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    grpc_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_server(
    *args: str,
    target: str = FN,
    env: dict[str, str] | None = None,
    stderr: Any = None,
) -> ServerProcess:
    """Serve ``target`` with HTTP and gRPC on free ports; returns once both listen.
    ``env``: variables added to the server's environment; ``stderr``: where its log goes."""
    port, grpc_port = free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "mlserve",
        "serve",
        target,
        "--port",
        str(port),
        "--grpc-port",
        str(grpc_port),
        *args,
    ]
    environment = {**os.environ, **env} if env else None
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, env=environment
    )
    server = ServerProcess(proc, port, grpc_port)
    try:
        wait_for_port(port, timeout=60, proc=proc)
        wait_for_port(grpc_port, timeout=60, proc=proc)
    except BaseException:
        server.stop()
        raise
    return server


def served() -> Iterator[ServerProcess]:
    server = start_server()
    yield server
    server.stop()


_LOG_LINE = re.compile(r"^\S+ \S+ \w+ mlserve\.\w+: (?P<message>.*)$")


def log_messages(log: Path) -> list[str]:
    """A server's log messages, in order, without their time, level and logger."""
    found = [_LOG_LINE.match(line) for line in log.read_text().splitlines()]
    return [match["message"] for match in found if match is not None]


def log_position(said: list[str], pattern: str) -> int:
    """The index of the one message of ``said`` that matches ``pattern`` whole."""
    hits = [i for i, message in enumerate(said) if re.fullmatch(pattern, message)]
    assert len(hits) == 1, (pattern, said)
    return hits[0]
