"""``mlserve serve <repository folder>`` over real HTTP, in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.repository.fixtures import wait_until, write_version
from tests.services import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """model_config_list {
  config { name: 'm' base_path: 'm' model_platform: 'tests.repository.fixtures.LinearModel'
           version_labels { key: 'stable' value: 1 } }
}"""


def test_serve_a_repository_folder_with_a_model_config_list(tmp_path: Path) -> None:
    base = tmp_path / "models"
    write_version(base, "m", 1, bias=1)
    config = tmp_path / "models.config"
    config.write_text(CONFIG)
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "mlserve",
        "serve",
        str(base),
        "--port",
        str(port),
        "--model-config",
        str(config),
        "--poll-interval",
        "0.2",
    ]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for_port(port, proc=proc)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            assert client.get("/v2/health/ready").json() == {"ready": True}
            answer = client.post("/v2/models/m/infer", json={"inputs": [[1.0, 2.0]]}).json()
            assert (answer["model_version"], answer["outputs"]) == ("1", [4.0])
            write_version(base, "m", 2, bias=2)

            def serves_two() -> bool:
                reply = client.post("/v2/models/m/infer", json={"inputs": [[1.0, 2.0]]})
                assert reply.status_code == 200
                return bool(reply.json()["model_version"] == "2")

            wait_until(serves_two)
            missing = client.post("/v2/models/m/versions/1/infer", json={"inputs": [[1.0, 2.0]]})
            assert missing.status_code == 404
    finally:
        proc.terminate()
        proc.wait(10)
