"""The features-drift page (mlserve.monitoring.drift_page), opened from a file in
headless Chromium."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from mlserve.monitoring.drift import DriftThresholds, drift_measures
from mlserve.monitoring.drift_page import drift_html
from mlserve.monitoring.endpoints import (
    EndpointMetadata,
    EndpointSpec,
    EndpointStatus,
    ModelEndpoint,
)
from mlserve.monitoring.statistics import feature_stats, inputs_statistics, pad_features_hist

BINS = 12
WINDOW = {
    "start": "2026-11-27T10:00:00+00:00",
    "end": "2026-11-27T10:10:00+00:00",
    "requests": 1500,
    "errors": 3,
    "late": 0,
    "latency_mean_us": 1250.0,
    "latency_p50_us": 900.0,
    "latency_p99_us": 5100.0,
}


def endpoint(
    reference: dict[str, Any] | None, window: dict[str, Any] | None, model: str = "scorer:v1"
) -> ModelEndpoint:
    """An endpoint whose reference and last window are these columns' statistics, and
    whose drift was measured as the monitor measures it."""
    spec = EndpointSpec(function_uri="shop/scoring", model=model)
    status = EndpointStatus()
    if reference is not None:
        spec.feature_stats = feature_stats(pd.DataFrame(reference), bins=BINS)
    if reference is not None and window is not None:
        padded = pad_features_hist(spec.feature_stats)
        status.current_stats = inputs_statistics(padded, pd.DataFrame(window))
        status.drift_measures = drift_measures(padded, status.current_stats)
        status.drift_status = DriftThresholds().status(status.drift_measures["general_drift"])
        status.window = dict(WINDOW)
    return ModelEndpoint(
        metadata=EndpointMetadata(project="shop", uid="0123abcd"), spec=spec, status=status
    )


def columns(shifts: dict[str, float], n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.normal(shift, 1.0, n) for name, shift in shifts.items()}


def three_features() -> ModelEndpoint:
    """``zeta`` drifts far (its window is shifted by 3 standard deviations)."""
    names = {"zeta": 0.0, "alpha": 0.0, "mid": 0.0}
    return endpoint(columns(names, 2000, 1), columns({**names, "zeta": 3.0}, 400, 2))


def open_page(page: Any, tmp_path: Path, html: str) -> list[str]:
    """Load ``html`` from a file; the URLs the page requested, besides itself."""
    file = tmp_path / "drift.html"
    file.write_text(html, encoding="utf-8")
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    page.goto(file.as_uri())
    return [url for url in requested if url != file.as_uri()]


def rgb(page: Any, selector: str, prop: str = "backgroundColor") -> tuple[int, ...]:
    value = page.eval_on_selector(selector, f"e => getComputedStyle(e).{prop}")
    return tuple(int(part) for part in re.findall(r"\d+", value)[:3])


def test_rows_charts_and_status(page: Any, tmp_path: Path) -> None:
    ep = three_features()
    others = open_page(page, tmp_path, drift_html(ep))
    assert others == []  # self-contained: nothing else loaded

    rows = page.locator("#features tbody tr.feature")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.feature)") == ["zeta", "alpha", "mid"]
    for name in ("zeta", "alpha", "mid"):
        charts = page.locator(f'tr[data-feature="{name}"] svg')
        assert charts.count() == 2
        for i in range(2):  # the reference padded as the window is: two outer bins more
            assert charts.nth(i).locator("rect.bar").count() == BINS + 2

    assert page.eval_on_selector('tr[data-feature="zeta"] td.drift', "e => e.dataset.status") == (
        "DRIFT_DETECTED"
    )
    red, green, blue = rgb(page, 'tr[data-feature="zeta"] td.drift')
    assert red > 150 and green < 80 and blue < 80
    for calm in ("alpha", "mid"):
        red, green, blue = rgb(page, f'tr[data-feature="{calm}"] td.drift')
        assert green > red and green > blue

    # The shifted window overflows the reference's range: its last (outer) bin holds
    # values, the reference's is empty.
    ref_last = page.locator('tr[data-feature="zeta"] svg.ref rect.bar').last
    cur_last = page.locator('tr[data-feature="zeta"] svg.cur rect.bar').last
    assert float(ref_last.get_attribute("height") or "") == 0
    assert float(cur_last.get_attribute("height") or "") > 0

    measures = ep.status.drift_measures["zeta"]
    assert page.locator('tr[data-feature="zeta"] td.tvd').inner_text() == f"{measures['tvd']:.4g}"
    assert page.locator('tr[data-feature="zeta"] td').count() == 7
    badge = page.locator("#general-status")
    assert ep.status.drift_status == "NO_DRIFT"  # one feature of three: the mean stays low
    assert badge.inner_text() == "no drift"
    assert badge.get_attribute("data-status") == "NO_DRIFT"
    red, green, blue = rgb(page, "#general-status")
    assert green > red and green > blue
    assert "scorer:v1" in page.locator("#endpoint").inner_text()
    assert "1,500 (3 errors, 0 late)" in page.locator("#window").inner_text()
    page.screenshot(path=str(tmp_path / "drift.png"), full_page=True)


def test_no_reference(page: Any, tmp_path: Path) -> None:
    open_page(page, tmp_path, drift_html(endpoint(None, None)))
    text = page.locator("body").inner_text()
    assert "no reference statistics" in text
    assert "No window of this endpoint has been monitored yet" in text
    assert page.locator("#features").count() == 0
    assert page.locator("#general-status").inner_text() == "not monitored"


def test_reference_without_window(page: Any, tmp_path: Path) -> None:
    ep = endpoint(columns({"a": 0.0, "b": 1.0}, 500, 3), None)
    open_page(page, tmp_path, drift_html(ep))
    assert "No window of this endpoint has been monitored yet" in page.inner_text("body")
    assert page.locator("tr.feature").count() == 2
    assert page.locator("svg.ref").count() == 2 and page.locator("svg.cur").count() == 0
    assert page.locator("td.drift").all_inner_texts() == ["-", "-"]


def test_names_are_escaped(page: Any, tmp_path: Path) -> None:
    name = "<script>alert(1)</script>"
    model = '"><img src=x onerror=alert(2)>'
    data = {name: np.arange(100.0), "ok": np.arange(100.0)}
    html = drift_html(endpoint(data, data, model=model))
    assert name not in html and model not in html

    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    open_page(page, tmp_path, html)
    assert dialogs == []
    assert page.locator("script").count() == 0 and page.locator("img").count() == 0
    assert page.locator("tbody th").first.inner_text() == name
    assert model in page.locator("#endpoint").inner_text()
    assert page.title() == f"Features drift: {model}"


def test_badge_follows_the_record() -> None:
    ep = three_features()
    ep.status.drift_status = "DRIFT_DETECTED"
    assert re.search(
        r'id="general-status" class="badge status-DRIFT_DETECTED".*?>drift detected<',
        drift_html(ep),
    )


def test_kld_inf_and_null() -> None:
    ep = three_features()
    ep.status.drift_measures["zeta"]["kld"] = math.inf
    ep.status.drift_measures["alpha"]["kld"] = None  # how JSON stores an infinite kld
    html = drift_html(ep)
    assert re.search(r'data-feature="zeta".*?<td class="kld">inf</td>', html)
    assert re.search(r'data-feature="alpha".*?<td class="kld">-</td>', html)


def test_thresholds_and_padded_reference() -> None:
    """Lower thresholds colour more features; a reference stored already padded (its
    outer edges null, as JSON writes infinities) is not padded twice."""
    ep = three_features()
    strict = drift_html(ep, DriftThresholds(potential=0.01, detected=0.02))
    assert strict.count('class="drift status-DRIFT_DETECTED"') == 3
    padded = pad_features_hist(ep.spec.feature_stats)
    for stats in padded.values():
        stats["hist"][1][0] = stats["hist"][1][-1] = None
    ep.spec.feature_stats = padded
    html = drift_html(ep)
    ref_chart = re.search(r'<svg class="hist ref".*?</svg>', html)
    assert ref_chart is not None and ref_chart.group().count('class="bar"') == BINS + 2
    assert "below " in ref_chart.group() and "above " in ref_chart.group()


def test_window_without_inputs() -> None:
    """A window was monitored, but nothing in it could be counted on the reference."""
    ep = three_features()
    ep.status.current_stats = {}
    html = drift_html(ep)
    assert "The last window had no inputs to compare with the reference." in html
    assert html.count('<span class="nodata">no data</span>') == 3


@pytest.mark.parametrize("window", [{}, {"start": "not a date", "requests": "?"}])
def test_odd_windows_render(window: dict[str, Any]) -> None:
    ep = three_features()
    ep.status.window = window
    ep.status.drift_status = "SOMETHING_NEW"
    html = drift_html(ep)
    assert html.endswith("</html>\n") and ">SOMETHING_NEW</span>" in html
