"""``mlserve serve``: SIGTERM drains requests in flight; ``--workers`` share the port."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.netserver import FN, ROOT, start_server
from tests.services import free_port


def test_sigterm_drains_in_flight_requests_then_exits_0() -> None:
    server = start_server()
    answers: list[httpx.Response] = []
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            slow = threading.Thread(
                target=lambda: answers.append(
                    http.post("/v2/models/sleepy/infer", json={"inputs": [1.0]})
                )
            )
            slow.start()
            with httpx.Client(base_url=server.url, timeout=60) as probe:
                while not probe.get("/v2/models/sleepy/busy").json()["busy"]:
                    assert slow.is_alive()
                    time.sleep(0.01)
            server.proc.send_signal(signal.SIGTERM)
            slow.join(60)
        assert server.proc.wait(60) == 0
    finally:
        server.stop()
    assert [a.status_code for a in answers] == [200]
    assert answers[0].json()["outputs"] == ["slept"]


def test_workers_share_the_port() -> None:
    server = start_server("--workers", "2")
    pids: set[int] = set()
    try:
        deadline = time.monotonic() + 60  # the second worker may still be starting
        while time.monotonic() < deadline:  # a new connection each time: the kernel spreads them
            with httpx.Client(base_url=server.url, timeout=60) as http:
                answer = http.post("/v2/models/where/pid", json={})
                if answer.status_code == 200:
                    pids.add(answer.json()["pid"])
            if len(pids) == 2:
                break
        assert len(pids) == 2
        assert server.proc.pid not in pids  # the supervisor serves nothing itself
    finally:
        code = server.stop()
    assert code == 0


def test_sigterm_while_workers_start_exits_0() -> None:
    """A worker stopped before it serves has nothing to drain: not a failure."""
    port, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "mlserve", "serve", FN, "--port", str(port)]
    command += ["--grpc-port", str(grpc_port), "--workers", "2"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        while len(children.read_text().split()) < 2:
            time.sleep(0.01)
        time.sleep(0.2)  # the supervisor forwards signals from here on; the workers still import
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_busy_port_is_one_line_and_a_non_zero_exit() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        for extra in ([], ["--workers", "2"]):
            command = [sys.executable, "-m", "mlserve", "serve", FN, "--port", str(port), *extra]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
            assert done.returncode == 1
            expected = f"mlserve: port {port} on 127.0.0.1 is in use by another process\n"
            assert done.stderr == expected


def test_workers_announce_the_server_once() -> None:
    port = free_port()
    command = [sys.executable, "-m", "mlserve", "serve", FN, "--port", str(port), "--workers", "2"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        pids: set[int] = set()
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:  # both workers serve
            try:
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
                    pids.add(http.post("/v2/models/where/pid", json={}).json()["pid"])
            except httpx.TransportError:
                time.sleep(0.1)
        assert len(pids) == 2
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert out.count("mlserve: serving") == 1


@pytest.mark.parametrize(
    "options",
    [["--http", "mlserve"], ["--http", "asgi"], ["--workers", "2"]],
    ids=["mlserve", "asgi", "workers"],
)
def test_draining_is_logged_once_at_stop(options: list[str]) -> None:
    """One stop, one "draining" line: a second SIGTERM and a SIGINT during the drain
    delay (an impatient orchestrator, a Ctrl-C) and each worker of ``--workers`` add none."""
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    server = start_server(*options, "--drain-delay", "0.5", stderr=log)
    try:
        if "--workers" in options:  # both workers serve before the stop
            pids: set[int] = set()
            deadline = time.monotonic() + 60
            while len(pids) < 2 and time.monotonic() < deadline:
                with httpx.Client(base_url=server.url, timeout=60) as http:
                    pids.add(http.post("/v2/models/where/pid", json={}).json()["pid"])
            assert len(pids) == 2
        for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):
            server.proc.send_signal(sig)
            time.sleep(0.1)
        assert server.proc.wait(60) == 0
        log.seek(0)
        stderr = log.read().decode(errors="replace")
    finally:
        server.stop()
        log.close()
    assert stderr.count("draining") == 1, stderr
