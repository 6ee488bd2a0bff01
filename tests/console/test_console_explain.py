"""The try-it view's Explain button in headless Chromium against a real ``mlserve serve``
(docs/console.md#explain): the SHAP values of a scikit-learn forest drawn as a bar per
feature, one chart per class, and a model whose explain answers something else."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.console.test_console_browser import (
    WAIT_MS,
    assert_accessible,
    open_view,
    screenshot,
    wait_until,
    watch,
)
from tests.netserver import ServerProcess, start_server

if TYPE_CHECKING:
    from playwright.sync_api import Page

FEATURES = ["sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder: Path = tmp_path_factory.mktemp("iris")
    env = {"MLSERVE_TEST_MODEL_DIR": str(folder)}
    server = start_server(target="tests/console/explain_fn.py", env=env)
    yield server
    assert server.stop() == 0


def bars(page: Page) -> list[tuple[str, float]]:
    """The chart's (feature, value) pairs, in the order drawn."""
    names = page.locator("svg[data-explain-chart] text[data-feature]").evaluate_all(
        "texts => texts.map(t => t.textContent)"
    )
    values = page.locator("svg[data-explain-chart] rect.bar").evaluate_all(
        "rects => rects.map(r => Number(r.getAttribute('data-value')))"
    )
    return list(zip(names, values, strict=True))


def test_explain_draws_the_shap_values_per_feature_and_class(
    served: ServerProcess, page: Page
) -> None:
    seen = watch(page, served)
    overview = httpx.get(f"{served.url}/console/api/overview").json()
    assert {m["name"]: m["explains"] for m in overview["models"]} == {
        "iris": True,
        "flowers": True,
    }
    open_view(page, served, "#/try/iris", "try")
    body = page.locator("textarea[data-tryit-body]")
    assert wait_until(lambda: body.input_value().strip())
    request = {
        "inputs": [
            {"name": "input-0", "datatype": "FP64", "shape": [1, 4], "data": [6.1, 2.8, 4.7, 1.2]}
        ]
    }
    expected = httpx.post(f"{served.url}/v2/models/iris/explain", json=request).json()
    body.fill('{\n  "inputs": [\n    ' + json.dumps(request["inputs"][0]) + "\n  ]\n}")
    page.click("button[data-tryit-explain]")
    page.wait_for_selector("svg[data-explain-chart]", timeout=WAIT_MS)
    assert page.locator("[data-tryit-status]").inner_text().strip() == "200"
    shown = dict(bars(page))
    assert sorted(shown) == sorted(FEATURES)
    first = next(o for o in expected["outputs"] if o["name"] == "shap_values_0")
    assert shown == pytest.approx(dict(zip(FEATURES, first["data"], strict=True)))
    drawn = [abs(v) for _, v in bars(page)]
    assert drawn == sorted(drawn, reverse=True)  # the biggest push first
    assert page.locator("rect.bar.pos").count() + page.locator("rect.bar.neg").count() == 4
    base = next(o for o in expected["outputs"] if o["name"] == "base_values")["data"]
    assert f"Base value {base[0]:.4g}" in page.locator("[data-explain-sum]").inner_text()
    picker = page.locator("select[data-explain-class]")
    assert picker.locator("option").all_inner_texts() == ["0", "1", "2"]
    picker.select_option("2")
    last = next(o for o in expected["outputs"] if o["name"] == "shap_values_2")
    assert wait_until(
        lambda: dict(bars(page)) == pytest.approx(dict(zip(FEATURES, last["data"], strict=True))),
        timeout=5,
    )
    assert_accessible(page)
    page.locator("[data-tryit-explained]").scroll_into_view_if_needed()
    screenshot(page, "explain")
    seen.assert_clean()


def test_an_answer_without_shap_values_is_shown_not_drawn(
    served: ServerProcess, page: Page
) -> None:
    seen = watch(page, served)
    open_view(page, served, "#/try/flowers", "try")
    body = page.locator("textarea[data-tryit-body]")
    assert wait_until(lambda: body.input_value().strip())
    page.click("button[data-tryit-explain]")
    page.wait_for_selector("[data-tryit-explained] .notice", timeout=WAIT_MS)
    assert page.locator("svg[data-explain-chart]").count() == 0
    assert "setosa" in page.locator("pre[data-tryit-response]").inner_text()
    seen.assert_clean()
