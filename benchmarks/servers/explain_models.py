"""The models benchmarks/explain.py explains over HTTP: ``mlserve serve
benchmarks/servers/explain_models.py`` with ``$MLSERVE_BENCH_MODELS`` the folder it
trained them into (``xgb/model.json``; ``mlp/model.joblib`` beside its background.npy)."""

from __future__ import annotations

import os
from pathlib import Path

import mlserve


def serving_function() -> mlserve.ServingFunction:
    folder = Path(os.environ["MLSERVE_BENCH_MODELS"])
    fn = mlserve.new_function("bench-explain")
    limits = {"explain_max_rows": 1000, "explain_timeout": 600}
    fn.add_model(
        "xgb",
        model_path=str(folder / "xgb"),
        class_name="mlserve.frameworks.xgboost.XGBoostModelServer",
        **limits,
    )
    fn.add_model(
        "mlp",
        model_path=str(folder / "mlp"),
        class_name="mlserve.frameworks.sklearn.SKLearnModelServer",
        **limits,
    )
    return fn
