"""Explanations: mlserve's explain route over HTTP against shap called in-process, the
floor (docs/explain.md).

    python -m benchmarks.explain [--repeat 5] [--calls 20] [--tree-rows 1 100]
                                 [--agnostic-rows 1 10]
    python -m benchmarks.explain --no-doc

Two models, trained here on synthetic data: an XGBoost classifier of 100 trees
(shap's exact ``TreeExplainer``) and a small scikit-learn MLP classifier (shap's
model-agnostic ``Permutation`` explainer over a background sample of 50 rows, 500
evaluations, on ``predict_proba``). Each is served by ``mlserve serve``
(benchmarks/servers/explain_models.py) and asked ``POST /v2/models/<m>/explain`` with
a V2 tensor request of ``--tree-rows`` / ``--agnostic-rows`` rows, one call at a time on
a kept-alive connection (the standard library's client: httpx's own Python costs some
0.3 ms a request, more than the server's), the answer parsed; the floor is the same shap
explainer, built once, making the same call mlserve makes (``TreeExplainer.shap_values``:
``explainer(rows)`` builds an ``Explanation`` around the same values, some 0.2 ms more a
call) in this process on the same rows. In alternating rounds (medians), the time per row
of each; KServe's built-in explainers are gone (kserve#3380), so shap itself is the floor.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    arguments,
    exit_on_sigterm,
    heading,
    progress,
    publish,
    running,
    save_raw,
    table_lines,
)

GOAL = 1.20  # mlserve's time per row, of shap's in-process, at most (each case's most rows)
FEATURES = 20
BACKGROUND = 50
MAX_EVALS = 500  # mlserve's default for the permutation explainer (shap's own default)
CASES = {
    "xgb": "XGBoost, 100 trees, depth 6 (tree explainer)",
    "mlp": "scikit-learn MLP 20-32-3 (permutation, 50 background rows, 500 evaluations)",
}
SERVER = "benchmarks/servers/explain_models.py"
THREADS = "1"


def train(folder: Path) -> dict[str, np.ndarray]:
    """The two models, saved under ``folder``; the rows they are explained on."""
    import joblib
    import xgboost as xgb
    from sklearn.neural_network import MLPClassifier

    rng = np.random.default_rng(0)
    features = rng.normal(size=(4000, FEATURES))
    labels = (features[:, 0] + features[:, 1] * features[:, 2] > 0).astype(int)
    (folder / "xgb").mkdir()
    forest = xgb.XGBClassifier(n_estimators=100, max_depth=6, random_state=0)
    forest.fit(features, labels).save_model(str(folder / "xgb" / "model.json"))
    (folder / "mlp").mkdir()
    classes = np.digitize(features[:, 0] + features[:, 3], [-0.5, 0.5])
    mlp = MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=0)
    joblib.dump(mlp.fit(features, classes), folder / "mlp" / "model.joblib")
    np.save(folder / "mlp" / "background.npy", features[:BACKGROUND])
    return {"rows": rng.normal(size=(1000, FEATURES))}


def floors(folder: Path) -> dict[str, Callable[[np.ndarray], Any]]:
    """shap's explainers of the two models, as a user calls them in-process."""
    import joblib
    import shap
    import xgboost as xgb

    from mlserve.frameworks.explainers import shap_readable_booster

    booster = xgb.Booster(model_file=str(folder / "xgb" / "model.json"))
    readable, _ = shap_readable_booster(booster)  # shap 0.48 cannot read XGBoost 3's base_score
    tree = shap.TreeExplainer(readable)
    mlp = joblib.load(folder / "mlp" / "model.joblib")
    background = np.load(folder / "mlp" / "background.npy")
    permutation = shap.explainers.Permutation(mlp.predict_proba, background, seed=0)

    def permuted(rows: np.ndarray) -> np.ndarray:
        np.random.seed(0)  # as mlserve does: the same rows get the same values
        return np.asarray(permutation(rows, max_evals=MAX_EVALS, silent=True).values)

    # shap_values, as mlserve calls it: tree(rows) would add an Explanation around the values
    return {"xgb": tree.shap_values, "mlp": permuted}


def body(rows: np.ndarray) -> bytes:
    tensor = {"name": "input-0", "datatype": "FP64", "shape": list(rows.shape)}
    return json.dumps({"inputs": [{**tensor, "data": rows.ravel().tolist()}]}).encode()


def timed(call: Callable[[], Any], calls: int) -> float:
    """The median seconds of ``calls`` calls (one more first, not counted)."""
    call()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-explain-") as tmp:
        folder = Path(tmp)
        data = train(folder)["rows"]
        shap_calls = floors(folder)

        def command(port: int, workdir: Path) -> list[str]:
            return [
                "env",
                f"MLSERVE_BENCH_MODELS={folder}",
                f"MLSERVE_DATA_DIR={workdir / 'data'}",
                sys.executable,
                "-m",
                "mlserve",
                "serve",
                SERVER,
                "--port",
                str(port),
                "--request-timeout",
                "600",
                "--keep-alive-timeout",  # the connection outlives shap's first (compiling) call
                "600",
            ]

        with (
            running(command, "explain") as (port, _, _),
            closing(http.client.HTTPConnection("127.0.0.1", port, timeout=600)) as connection,
        ):
            for round_ in range(args.repeat):
                progress(f"explain: round {round_ + 1}/{args.repeat}")
                for case in CASES:
                    for count in rows_of(case, args):
                        rows = data[:count]
                        sent = body(rows)
                        path = f"/v2/models/{case}/explain"

                        def served(path: str = path, sent: bytes = sent) -> Any:
                            return posted(connection, path, sent)

                        floor = timed(
                            lambda rows=rows, case=case: shap_calls[case](rows), args.calls
                        )
                        over_http = timed(served, args.calls)
                        check(served(), shap_calls[case](rows))
                        results.append(
                            {"case": case, "rows": count, "shap": floor, "mlserve": over_http}
                        )
                        progress(
                            f"explain: {case} {count:4} rows: shap {floor / count * 1e3:8.3f} "
                            f"ms/row, mlserve {over_http / count * 1e3:8.3f} ms/row"
                        )
    return results


def posted(connection: http.client.HTTPConnection, path: str, sent: bytes) -> Any:
    """The parsed answer to a JSON POST on the kept-alive connection."""
    connection.request("POST", path, body=sent, headers={"Content-Type": "application/json"})
    answer = connection.getresponse()
    data = answer.read()
    if answer.status != 200:
        raise RuntimeError(f"{path} answered {answer.status}: {data[:300]!r}")
    return json.loads(data)


def check(answer: dict[str, Any], values: np.ndarray) -> None:
    """mlserve answered shap's own values (per class, [rows, features] each)."""
    outputs = {o["name"]: np.asarray(o["data"]) for o in answer["outputs"]}
    columns = values if values.ndim == 3 else values[:, :, None]
    shap_names = sorted(name for name in outputs if name.startswith("shap_values"))
    for index, name in enumerate(shap_names if len(shap_names) > 1 else shap_names[:1]):
        expected = columns[:, :, index] if len(shap_names) > 1 else values.reshape(len(values), -1)
        if not np.allclose(outputs[name], expected.ravel(), atol=1e-6):
            raise RuntimeError(f"mlserve's {name} differ from shap's own")


def rows_of(case: str, args: argparse.Namespace) -> list[int]:
    """The request sizes of a case: the tree explainer's, or the model-agnostic one's."""
    return list(args.tree_rows if case == "xgb" else args.agnostic_rows)


def table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    command = f"python -m benchmarks.explain --repeat {args.repeat} --calls {args.calls}"
    command += " --tree-rows " + " ".join(map(str, args.tree_rows))
    command += " --agnostic-rows " + " ".join(map(str, args.agnostic_rows))
    lines = heading(
        "Explanations: mlserve's explain route against shap in-process",
        command,
        f". `mlserve serve {SERVER}`; `POST /v2/models/<m>/explain` with a V2 tensor request "
        f"of {FEATURES} features per row, one call at a time on a kept-alive connection "
        "(Python's http.client; the answer parsed), against the same shap explainer making "
        "the same call (`TreeExplainer.shap_values`, not `explainer(rows)`, which wraps the "
        "same values in an Explanation) in the benchmark's process on the same rows; "
        f"medians of {args.calls} calls in each of {args.repeat} alternating rounds; one "
        "BLAS and OpenMP thread in both processes. KServe no "
        "longer ships an explainer (kserve#3380): shap itself is the floor.",
    )
    body = []
    ratios: dict[tuple[str, int], float] = {}
    for case, label in CASES.items():
        for count in rows_of(case, args):
            group = [r for r in rows if r["case"] == case and r["rows"] == count]
            if not group:
                continue
            floor = statistics.median(r["shap"] for r in group) / count * 1e3
            served = statistics.median(r["mlserve"] for r in group) / count * 1e3
            ratios[(case, count)] = served / floor
            body.append([label, count, f"{floor:.4f}", f"{served:.4f}", f"{served / floor:.2f}"])
    lines += table_lines(
        ["model", "rows a request", "shap ms/row", "mlserve ms/row", "mlserve/shap"],
        body,
        labels=1,
    )
    goals = []
    for case in CASES:
        most = max(rows_of(case, args))
        if (case, most) in ratios:
            ratio = ratios[(case, most)]
            goals.append(
                f"- explain over HTTP, time per row of shap's in-process, {CASES[case]} at "
                f"{most} rows a request, at most {GOAL:.2f}: {ratio:.2f}, "
                f"{'met' if ratio <= GOAL else 'not met'}"
            )
    if goals:
        lines += ["", "Goals:", "", *goals]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = arguments(__doc__, repeat=5)
    parser.add_argument("--calls", type=int, default=20, help="timed calls of each point a round")
    parser.add_argument(
        "--tree-rows", type=int, nargs="+", default=[1, 100], help="rows an XGBoost request carries"
    )
    parser.add_argument(
        "--agnostic-rows", type=int, nargs="+", default=[1, 10], help="rows an MLP request carries"
    )
    args = parser.parse_args(argv)
    exit_on_sigterm()
    # one thread each for XGBoost's and BLAS's work, in the server as here: on a shared
    # machine their thread pools would measure the contention, not the explainers
    os.environ.update(OMP_NUM_THREADS=THREADS, OPENBLAS_NUM_THREADS=THREADS)
    from threadpoolctl import threadpool_limits  # numpy's BLAS may be loaded already

    with threadpool_limits(limits=int(THREADS)):
        rows = measure(args)
    save_raw("explain", {"args": vars(args), "rows": rows})
    publish("explain", table(rows, args), args)


if __name__ == "__main__":
    main()
