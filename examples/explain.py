"""Why did the model say so? A forest of the iris flowers, served with SHAP explanations
(docs/explain.md). It needs the ``sklearn`` and ``explain`` extras.

    python examples/explain.py          # explains one flower in-process, feature by feature
    mlserve serve examples/explain.py   # then, from another shell:
    curl -s 127.0.0.1:8080/v2/models/iris/explain -d '{"inputs": [[6.1, 2.8, 4.7, 1.2]]}'
    curl -s 127.0.0.1:8080/v1/models/iris:explain -d '{"instances": [[6.1, 2.8, 4.7, 1.2]]}'

The forest is trained at start (well under a second) into ``$MLSERVE_EXAMPLE_MODELS``,
or a temporary folder when that is not set.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import mlserve

SPECIES = ["setosa", "versicolor", "virginica"]


def train(folder: Path) -> Path:
    """A 50-tree forest on the iris measurements, saved as ``folder/iris/model.joblib``."""
    import joblib
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    measurements, species = load_iris(return_X_y=True, as_frame=True)
    forest = RandomForestClassifier(n_estimators=50, max_depth=4, random_state=0)
    forest.fit(measurements, species.map(dict(enumerate(SPECIES))))
    (folder / "iris").mkdir(parents=True, exist_ok=True)
    joblib.dump(forest, folder / "iris" / "model.joblib")
    return folder / "iris"


def serving_function() -> mlserve.ServingFunction:
    folder = Path(os.environ.get("MLSERVE_EXAMPLE_MODELS") or tempfile.mkdtemp(prefix="iris-"))
    fn = mlserve.new_function("explained-flowers")
    fn.add_model(
        "iris",
        model_path=str(train(folder)),
        class_name="mlserve.frameworks.sklearn.SKLearnModelServer",
        explain_max_rows=50,  # the limits of docs/explain.md#limits
        explain_timeout=10,
    )
    return fn


def main() -> None:
    server = serving_function().to_mock_server()
    flower = [6.1, 2.8, 4.7, 1.2]
    predicted = server.test("/v2/models/iris/infer", body={"inputs": [flower]})["outputs"]
    answer = server.test("/v2/models/iris/explain", body={"inputs": [flower]})["outputs"]
    print(f"the forest says {predicted[0]} ({answer['explainer']} explainer)")
    base = dict(zip(SPECIES, answer["base_values"], strict=True))
    for species in SPECIES:
        values = answer["shap_values"][species][0]
        pushes = ", ".join(
            f"{name} {value:+.3f}"
            for name, value in sorted(
                zip(answer["feature_names"], values, strict=True), key=lambda p: -abs(p[1])
            )
        )
        total = round(base[species] + sum(values), 3) + 0.0  # no "-0.000"
        print(f"{species:10} {base[species]:.3f} on average; {pushes} -> {total:.3f}")
    server.wait_for_completion()


if __name__ == "__main__":
    main()
