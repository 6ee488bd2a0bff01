"""examples/explain.py runs as its docstring says: as a script, and served by
``mlserve serve`` answering the V2 and KServe v1 explain routes (docs/explain.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from tests.netserver import ROOT, start_server

EXAMPLE = ROOT / "examples" / "explain.py"
FLOWER = [6.1, 2.8, 4.7, 1.2]


def test_the_script_explains_one_flower_feature_by_feature() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "the forest says versicolor (tree explainer)"
    totals = [float(line.rsplit("-> ", 1)[1]) for line in lines[1:]]
    assert len(totals) == 3 and abs(sum(totals) - 1) < 0.01  # each class's probability
    assert max(range(3), key=totals.__getitem__) == 1  # versicolor's is the largest


def test_served_it_answers_curl_on_both_explain_routes(tmp_path: Path) -> None:
    server = start_server(target=str(EXAMPLE), env={"MLSERVE_EXAMPLE_MODELS": str(tmp_path)})
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            v2 = http.post("/v2/models/iris/explain", json={"inputs": [FLOWER]}).json()
            v1 = http.post("/v1/models/iris:explain", json={"instances": [FLOWER]}).json()
            many = http.post("/v2/models/iris/explain", json={"inputs": [FLOWER] * 51})
    finally:
        server.stop()
    (explained,) = v1["explanations"]
    assert explained["feature_names"] == v2["outputs"]["feature_names"]
    assert explained["shap_values"]["versicolor"] == v2["outputs"]["shap_values"]["versicolor"][0]
    assert list(explained["base_values"]) == ["setosa", "versicolor", "virginica"]
    assert many.status_code == 413  # explain_max_rows=50
