"""Draw docs/images/drift-page.png: the features-drift page of an example endpoint,
rendered in headless Chromium (tests/browser.py; needs `make system-deps`).

A credit-scoring model with a reference of 5,000 applicants and a 10-minute window of
600 requests from a new, richer segment of applicants: incomes more than doubled
(drift detected) and debt ratios rose (possible drift).

    python -m tools.drift_page_image
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from mlserve.monitoring.drift import DriftThresholds, drift_measures
from mlserve.monitoring.drift_page import drift_html
from mlserve.monitoring.endpoints import (
    EndpointMetadata,
    EndpointSpec,
    EndpointStatus,
    ModelEndpoint,
    endpoint_uid,
)
from mlserve.monitoring.statistics import feature_stats, inputs_statistics, pad_features_hist
from tests.browser import missing, open_browser

IMAGE = Path(__file__).resolve().parent.parent / "docs" / "images" / "drift-page.png"


def applicants(n: int, seed: int, income_rise: float, debt_shift: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "age": rng.normal(41, 12, n).clip(18, 90).round(),
            "income": rng.lognormal(np.log(52_000 * income_rise), 0.35, n).round(-2),
            "debt_ratio": rng.beta(2 + debt_shift, 5, n).round(3),
            "loan_amount": rng.lognormal(np.log(15_000), 0.6, n).round(-2),
        }
    )


def example() -> ModelEndpoint:
    reference = feature_stats(applicants(5000, 7, 1.0, 0.0))
    padded = pad_features_hist(reference)
    current = inputs_statistics(padded, applicants(600, 8, 2.4, 4.0))
    measures = drift_measures(padded, current)
    window = {
        "start": "2026-11-27T10:00:00+00:00",
        "end": "2026-11-27T10:10:00+00:00",
        "requests": 600,
        "errors": 2,
        "late": 0,
        "latency_mean_us": 1840.0,
        "latency_p50_us": 1210.0,
        "latency_p99_us": 7930.0,
        "predictions_per_second": 1.0,
    }
    return ModelEndpoint(
        metadata=EndpointMetadata(
            project="bank", uid=endpoint_uid("bank", "scoring", "", "credit", "v3")
        ),
        spec=EndpointSpec(function_uri="bank/scoring", model="credit:v3", feature_stats=reference),
        status=EndpointStatus(
            current_stats=current,
            drift_measures=measures,
            drift_status=DriftThresholds().status(measures["general_drift"]),
            window=window,
        ),
    )


def main() -> int:
    reason = missing()
    if reason:
        print(reason, file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as folder, open_browser() as browser:
        page_file = Path(folder) / "drift.html"
        page_file.write_text(drift_html(example()), encoding="utf-8")
        page = browser.new_page(viewport={"width": 1100, "height": 400})
        page.goto(page_file.as_uri())
        width = page.evaluate("document.documentElement.scrollWidth")
        page.set_viewport_size({"width": width, "height": 400})
        page.screenshot(path=str(IMAGE), full_page=True)
    print(f"wrote {IMAGE} ({IMAGE.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
