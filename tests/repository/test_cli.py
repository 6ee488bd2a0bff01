"""``mlserve serve <repository folder>`` over real HTTP, in a subprocess."""

from __future__ import annotations

import json
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


# Runs python with tensorflow-serving-api made unimportable (as when it is not installed).
NO_TF_SERVING = "import sys; sys.modules['tensorflow_serving'] = None; "

# What TF Serving's own configs hold, logging and the deprecated model_type included.
FULL_CONFIG = """# a comment first
model_config_list {
  config {
    name: 'a' base_path: '/models/a' model_platform: 'tensorflow' model_type: TENSORFLOW
    model_version_policy { specific { versions: 1 versions: 3 } }
    version_labels { key: 'stable' value: 1 }
    version_labels { key: 'canary' value: 3 }
    logging_config {
      log_collector_config { type: '' filename_prefix: '/tmp/a' }
      sampling_config { sampling_rate: 0.5 }
    }
  }
  config { name: 'b' base_path: 'b' model_platform: 'sklearn'
           model_version_policy { latest { num_versions: 2 } } }
  config { name: 'c' base_path: 'c' model_version_policy { all {} } }
  config { name: 'd' base_path: 'd' }
}
"""


def test_a_model_config_list_parses_without_tensorflow_serving(tmp_path: Path) -> None:
    config = tmp_path / "models.config"
    config.write_text(FULL_CONFIG)
    script = NO_TF_SERVING + (
        "import json; from mlserve.repository.config import load_config; "
        f"configs = load_config({str(config)!r}); "
        "print(json.dumps({n: [str(c.base_path), c.platform, c.version_policy.kind, "
        "list(c.version_policy.versions), c.version_policy.num_versions, c.labels] "
        "for n, c in configs.items()}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "a": ["/models/a", "tensorflow", "specific", [1, 3], 1, {"stable": 1, "canary": 3}],
        "b": [str(tmp_path / "b"), "sklearn", "latest", [], 2, {}],
        "c": [str(tmp_path / "c"), "", "all", [], 1, {}],
        "d": [str(tmp_path / "d"), "", "latest", [], 1, {}],
    }


def test_serve_a_model_config_list_without_tensorflow_serving(tmp_path: Path) -> None:
    base = tmp_path / "models"
    write_version(base, "m", 1, bias=1)
    config = tmp_path / "models.config"
    config.write_text(CONFIG)
    port = free_port()
    argv = ["mlserve", "serve", str(base), "--port", str(port), "--model-config", str(config)]
    script = NO_TF_SERVING + f"sys.argv = {argv!r}; from mlserve.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        wait_for_port(port, proc=proc)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            answer = client.post("/v2/models/m/infer", json={"inputs": [[1.0, 2.0]]}).json()
            assert (answer["model_version"], answer["outputs"]) == ("1", [4.0])
            stable = client.post(
                "/v1/models/m/labels/stable:predict", json={"instances": [[1.0, 2.0]]}
            )
            assert stable.status_code == 200, stable.text
    finally:
        proc.terminate()
        proc.wait(10)
