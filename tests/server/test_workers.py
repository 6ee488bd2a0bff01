"""``mlserve serve --workers N``: a worker that dies comes back, with the workers' model
state, while the others serve; readiness follows how many serve; a worker that cannot
start is given up; the stop stays clean."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from mlserve.monitoring.metrics import REGISTRY
from mlserve.runner import (
    FIRST_BACKOFF_SECONDS,
    MAX_BACKOFF_SECONDS,
    STABLE_SECONDS,
    START_FAILURES,
    restart_delay,
)
from mlserve.server.graph_server import GraphServer
from mlserve.server.shared import SharedRepository, StateRelay, SupervisorLink
from tests.frameworks.models import save_sklearn_regressor
from tests.netserver import ROOT, ServerProcess, start_server
from tests.repository.fixtures import wait_until
from tests.services import free_port

FN = "tests/kafka/fn.py"  # models double, where (answers its pid) and flaky
MODEL_CONTROL = {"MLSERVE_MODEL_CONTROL_MODE": "explicit"}  # load/unload allowed


def test_restart_delay_doubles_up_to_a_cap_and_starts_again_after_a_stable_run() -> None:
    delays, previous = [], 0.0
    for _ in range(10):  # deaths in a row, each right after its start
        previous = restart_delay(previous, lived=1.0)
        delays.append(previous)
    assert delays[:4] == [FIRST_BACKOFF_SECONDS * 2**n for n in range(4)]
    assert delays[-1] == MAX_BACKOFF_SECONDS and max(delays) == MAX_BACKOFF_SECONDS
    assert restart_delay(MAX_BACKOFF_SECONDS, lived=STABLE_SECONDS) == FIRST_BACKOFF_SECONDS


# ---- the relay, in this process: real servers of FN, real socket pairs ----------------


def _worker(relay: StateRelay) -> tuple[GraphServer, SupervisorLink]:
    """A mock server of FN joined to ``relay`` as a worker process joins it."""
    from tests.kafka.fn import fn

    server = fn.to_mock_server()
    link = SupervisorLink(relay.add_worker(), server.repository, on_gone=lambda: None)
    link.join()
    server.repository = SharedRepository(server.repository, link)  # type: ignore[arg-type]
    return server, link


def _serves(server: GraphServer, model: str) -> bool:
    answer = server.test(f"/v2/models/{model}/infer", body={"inputs": [1]}, silent=True)
    return isinstance(answer, dict)


def test_a_worker_that_joins_later_replays_the_loads_and_unloads() -> None:
    relay = StateRelay(workers=2, ready_min_workers=2).start()
    first, first_link = _worker(relay)
    second, second_link = _worker(relay)
    wait_until(lambda: first_link.unready == "0 of 2 workers serve (--ready-min-workers 2)")
    first_link.serving()
    wait_until(lambda: second_link.unready == "1 of 2 workers serve (--ready-min-workers 2)")
    second_link.serving()
    wait_until(lambda: first_link.unready is None and second_link.unready is None)

    assert first.repository is not None
    asyncio.run(first.repository.unload("flaky"))  # through one worker: both apply it
    asyncio.run(first.repository.unload("double"))
    asyncio.run(first.repository.load("double"))
    with pytest.raises(
        Exception, match="no such model in the repository"
    ):  # an error changes nothing
        asyncio.run(first.repository.load("nope"))
    for server in (first, second):
        assert not _serves(server, "flaky") and _serves(server, "double")

    restarted, restarted_link = _worker(relay)  # as a worker restarted after a death
    assert not _serves(restarted, "flaky") and _serves(restarted, "double")
    index = {row["name"]: row for row in restarted.repository.index()}  # type: ignore[union-attr]
    assert (index["flaky"]["state"], index["flaky"]["reason"]) == ("UNAVAILABLE", "unloaded")
    assert restarted.repository is not None
    asyncio.run(restarted.repository.load("flaky"))  # and it takes part from then on
    assert all(_serves(server, "flaky") for server in (first, second, restarted))
    for server in (first, second, restarted):
        server.wait_for_completion()


def test_a_load_with_a_config_override_reaches_every_worker_and_a_later_one() -> None:
    """Triton's ``load_model(name, config=...)`` through one worker: every worker, and one
    that starts later, serves the model with the override
    (docs/repository.md#loading-with-a-config-override)."""
    relay = StateRelay(workers=2).start()
    first, _ = _worker(relay)
    second, _ = _worker(relay)
    assert first.repository is not None
    asyncio.run(first.repository.load("double", {"max_batch_size": 16}))
    restarted, _ = _worker(relay)
    for server in (first, second, restarted):
        config = server.test("/v2/models/double/config", method="GET")
        assert config["max_batch_size"] == 16 and _serves(server, "double")
    asyncio.run(second.repository.load("double"))  # type: ignore[union-attr]
    for server in (first, second, restarted):  # a load without a config goes back
        assert server.test("/v2/models/double/config", method="GET")["max_batch_size"] == 0
        server.wait_for_completion()


def test_every_worker_hears_the_restart_count_and_how_many_serve() -> None:
    relay = StateRelay(workers=2, ready_min_workers=2).start()
    first, first_link = _worker(relay)
    leaving = relay.add_worker()  # a worker process as the relay sees it: its socket
    leaving.sendall(b'{"kind": "hello", "pid": 1}\n{"kind": "serving"}\n')
    first_link.serving()
    # both counted before it dies (a worker gone before its hello is answered never served)
    wait_until(lambda: relay.served_pids == {1, os.getpid()} and first_link.unready is None)
    leaving.close()  # it died
    wait_until(lambda: first_link.unready == "1 of 2 workers serve (--ready-min-workers 2)")
    before = _restarts_counted()
    relay.set_restarts(1)
    wait_until(lambda: _restarts_counted() == before + 1)
    first.wait_for_completion()


def _restarts_counted() -> float:
    return REGISTRY.get_sample_value("mlserve_worker_restarts_total") or 0.0


def test_a_worker_stops_when_its_supervisor_is_gone() -> None:
    supervisor, worker_end = socket.socketpair()
    gone = threading.Event()
    link = SupervisorLink(worker_end, None, on_gone=gone.set)
    hello = threading.Thread(target=link.join)
    hello.start()
    assert supervisor.recv(4096).startswith(b'{"kind": "hello"')
    supervisor.sendall(b'{"kind": "replay", "ops": []}\n')
    hello.join(10)
    assert not gone.is_set()
    link.serving()  # left unread: the close resets the link's connection
    supervisor.close()
    assert gone.wait(10)


# ---- real processes ----------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _repository(tmp_path: Path) -> tuple[Path, Path]:
    """Model ``where`` (its pid) in the config; ``house`` (scikit-learn) on disk only:
    served once loaded through the repository API."""
    base = tmp_path / "models"
    (base / "where" / "1").mkdir(parents=True)
    save_sklearn_regressor(base, "house", 1)
    config = tmp_path / "models.yaml"
    entry = {"name": "where", "class_name": "tests.kafka.fn.Where"}
    config.write_text(yaml.safe_dump({"models": [entry]}))
    return base, config


def _pid_and_house(server: ServerProcess) -> tuple[int, int]:
    """On one new connection (one worker): its pid, and the status of a ``house`` call."""
    with httpx.Client(base_url=server.url, timeout=60) as http:
        pid = http.post("/v2/models/where/infer", json={"inputs": [0]}).json()["outputs"][0]
        house = http.post("/v2/models/house/infer", json={"inputs": [[1.0, 2.0, 3.0]]})
    return pid, house.status_code


def _restart_count(server: ServerProcess) -> float:
    with httpx.Client(base_url=server.url, timeout=60) as http:
        text = http.get("/metrics").text
    found = re.search(r"^mlserve_worker_restarts_total (\S+)$", text, re.M)
    assert found is not None, text
    return float(found[1])


class _Load:
    """Clients calling ``where`` in a loop, each on its own connection, a new one every
    few calls. A call that fails on the wire is retried once on a new connection, as a
    load balancer does; ``broken`` names the worker each such connection had reached
    (None: it had no answer yet). ``failures``: calls that failed twice, or not 200."""

    def __init__(self, server: ServerProcess, clients: int = 3) -> None:
        self.server = server
        self.stop = threading.Event()
        self.failures: list[str] = []
        self.broken: list[int | None] = []
        self.pids: dict[int, int] = {}
        self.threads = [threading.Thread(target=self._run) for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def _call(self, http: httpx.Client) -> int | None:
        """The pid of the worker that answered (None: not a 200)."""
        answer = http.post("/v2/models/where/infer", json={"inputs": [0]})
        if answer.status_code != 200:
            self.failures.append(f"{answer.status_code} {answer.text}")
            return None
        pid: int = answer.json()["outputs"][0]
        self.pids[pid] = self.pids.get(pid, 0) + 1
        time.sleep(0.005)  # steady, and leaves the cores to a starting worker
        return pid

    def _run(self) -> None:
        while not self.stop.is_set():
            with httpx.Client(base_url=self.server.url, timeout=30) as http:
                reached = None
                for _ in range(10):
                    try:
                        reached = self._call(http)
                    except httpx.TransportError:
                        self.broken.append(reached)
                        try:
                            with httpx.Client(base_url=self.server.url, timeout=30) as retry:
                                self._call(retry)
                        except httpx.TransportError as exc:
                            self.failures.append(repr(exc))
                        break

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def test_a_killed_worker_comes_back_with_the_model_state_while_the_other_serves(
    tmp_path: Path,
) -> None:
    base, config = _repository(tmp_path)
    log = tmp_path / "stderr"
    with log.open("wb") as stderr:
        server = start_server(
            "--workers", "2", "--ready-min-workers", "2", "--model-config", str(config),
            "--poll-interval", "0", target=str(base), env=MODEL_CONTROL, stderr=stderr,
        )  # fmt: skip
        supervisor = server.proc.pid
        load: _Load | None = None
        try:
            wait_until(lambda: len({_pid_and_house(server)[0] for _ in range(8)}) == 2, 60)
            with httpx.Client(base_url=server.url, timeout=60) as http:
                assert http.post("/v2/repository/models/house/load").status_code == 200
            assert {_pid_and_house(server)[1] for _ in range(8)} == {200}  # on both workers

            load = _Load(server)
            wait_until(lambda: len(load.pids) == 2, 60)  # the load reaches both workers
            victim, survivor = _children(supervisor)

            def ready_is(status: int) -> bool:
                """A probe on a new connection (one the dying worker took breaks: no answer)."""
                try:
                    with httpx.Client(base_url=server.url, timeout=60) as http:
                        return http.get("/v2/health/ready").status_code == status
                except httpx.TransportError:
                    return False

            os.kill(victim, signal.SIGKILL)
            wait_until(lambda: ready_is(503), 30)  # only the survivor serves: below 2
            wait_until(lambda: ready_is(200), 60)  # the new worker serves
            workers = _children(supervisor)
            assert len(workers) == 2 and victim not in workers and survivor in workers
            (newcomer,) = set(workers) - {survivor}
            wait_until(lambda: load.pids.get(newcomer, 0) > 0, 60)  # it takes its share
            load.join()
            assert load.failures == []
            assert survivor not in load.broken  # only the killed worker's connections broke
            assert load.pids[survivor] > 0
            assert {_restart_count(server) for _ in range(8)} == {1.0}

            seen: dict[int, set[int]] = {}  # each worker serves house: the new one replayed it
            while set(seen) != {survivor, newcomer}:
                pid, status = _pid_and_house(server)
                seen.setdefault(pid, set()).add(status)
            assert seen == {survivor: {200}, newcomer: {200}}
        finally:
            if load is not None:
                load.join()
            code = server.stop()
    assert code == 0  # SIGTERM drains both workers, the restarted one included
    said = re.findall(r"^mlserve: worker \d.*$", log.read_text(), re.M)
    assert len(said) == 1, said
    assert re.fullmatch(
        r"mlserve: worker [01] died \(signal 9\); restarting in 0.5 s \(restart 1\)", said[0]
    )


def test_a_worker_that_cannot_start_is_given_up(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import mlserve\nfn = (\n")  # a syntax error: every start fails
    port = free_port()
    command = [sys.executable, "-m", "mlserve", "serve", str(broken), "--port", str(port)]
    done = subprocess.run(
        [*command, "--workers", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    gave_up = re.findall(
        r"^mlserve: worker \d failed (\d+) times.*\(exit (\d)\); giving up$", done.stderr, re.M
    )
    assert len(gave_up) == 1, done.stderr  # one line, and the other worker is stopped
    tries, status = map(int, gave_up[0])
    assert tries == START_FAILURES
    assert done.returncode == status and status in (1, 2)  # 2: a usage error
    assert "SyntaxError" in done.stderr  # the workers' own reason, above


@pytest.mark.parametrize("workers, ready", [("2", "3"), ("2", "0"), ("1", "2")])
def test_ready_min_workers_beyond_the_workers_is_one_line(workers: str, ready: str) -> None:
    port = free_port()
    command = [sys.executable, "-m", "mlserve", "serve", FN, "--port", str(port)]
    command += ["--workers", workers, "--ready-min-workers", ready]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    said = f"mlserve: --ready-min-workers {ready} must be from 1 to --workers ({workers})\n"
    assert (done.returncode, done.stderr) == (2, said)


def test_sigterm_while_a_restart_waits_exits_0() -> None:
    """A stop right after a worker died (its restart waiting, or the new worker still
    starting): the other drains, exit 0."""
    server = start_server("--workers", "2", target=FN)
    try:
        wait_until(lambda: len(_children(server.proc.pid)) == 2, 60)
        victim = _children(server.proc.pid)[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: victim not in _children(server.proc.pid), 30)
        server.proc.send_signal(signal.SIGTERM)  # within the 0.5 s back-off
        assert server.proc.wait(60) == 0
    finally:
        server.stop()


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie waiting for whoever adopted it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_the_workers_end_when_their_supervisor_is_killed() -> None:
    server = start_server("--workers", "2", target=FN)
    workers: list[int] = []
    try:
        wait_until(lambda: len(_children(server.proc.pid)) == 2, 60)
        workers += _children(server.proc.pid)
        server.proc.kill()
        server.proc.wait(10)
        wait_until(lambda: all(_gone(pid) for pid in workers), 60)
    finally:
        server.stop()
        for pid in workers:  # what this test left, when it fails
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
