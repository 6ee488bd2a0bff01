"""Train the example classifier: softmax regression in NumPy on three seeded
Gaussian clusters of 4 features (an iris-like toy set). Writes models/flowers/model.npz,
and the training set's statistics beside it (feature_stats.json): the reference the
monitor measures drift against (docs/monitoring.md#drift)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
CENTERS = np.array([[5.0, 3.4, 1.5, 0.2], [5.9, 2.8, 4.3, 1.3], [6.6, 3.0, 5.6, 2.0]])


def make_data(rows_per_class: int = 200, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.normal(c, 0.35, size=(rows_per_class, 4)) for c in CENTERS])
    y = np.repeat(np.arange(len(CENTERS)), rows_per_class)
    return x, y


def train(
    x: np.ndarray, y: np.ndarray, steps: int = 3000, rate: float = 0.1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    mean, std = x.mean(axis=0), x.std(axis=0)
    z = (x - mean) / std
    weights = np.zeros((4, len(CENTERS)))
    bias = np.zeros(len(CENTERS))
    onehot = np.eye(len(CENTERS))[y]
    for _ in range(steps):
        logits = z @ weights + bias
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        grad = probs - onehot
        weights -= rate * z.T @ grad / len(z)
        bias -= rate * grad.mean(axis=0)
    return weights, bias, mean, std


if __name__ == "__main__":
    x, y = make_data()
    weights, bias, mean, std = train(x, y)
    accuracy = (np.argmax(((x - mean) / std) @ weights + bias, axis=1) == y).mean()
    import json

    import pandas as pd

    from mlserve.monitoring import feature_stats

    folder = Path(__file__).parent / "models" / "flowers"
    np.savez(folder / "model.npz", weights=weights, bias=bias, mean=mean, std=std)
    stats = feature_stats(pd.DataFrame(x, columns=FEATURES))
    (folder / "feature_stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(f"wrote {folder}, training accuracy {accuracy:.3f}")
