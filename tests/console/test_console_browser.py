"""The web console in headless Chromium against real ``mlserve serve`` processes
(docs/console.md): every view shows what the API says, the try-it view sends real
requests, login keeps the token in the tab, names and records from data stay text, the
page asks nothing of another origin, and axe-core finds no serious accessibility fault.

Only the console's routes and DOM hooks are used (``data-*`` attributes), never its
layout. ``MLSERVE_SCREENSHOTS=1`` also saves the docs' pictures of the views
(``make docs-console-images``); CI never sets it.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from io import BytesIO
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import httpx
import pytest

from tests.console.fn import HOSTILE, SECRET
from tests.netserver import ROOT, ServerProcess, start_server

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page

FN = "tests/console/fn.py"
FLOW_FN = "tests/console/flow_fn.py"
TOKEN, ADMIN = "console-user-5c1e", "console-admin-9d04"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HOSTILE_TEXT = "<img src=y onerror=alert(2)>"  # a string input, kept in the model log
MARKER = 1.234567  # one request's value, found by the records filter
IMAGES = ROOT / "docs" / "images"
SCREENSHOTS = os.environ.get("MLSERVE_SCREENSHOTS") == "1"
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def main(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The models of tests/console/fn.py, monitored in windows of 2 s (which implies
    tracking: the model log and the endpoint records live in a folder of this test)."""
    data = tmp_path_factory.mktemp("console-data")
    server = start_server(
        "--monitor", "--monitor-window", "2", target=FN, env={"MLSERVE_DATA_DIR": str(data)}
    )
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def flow() -> Iterator[ServerProcess]:
    """A flow with a router, a queue to a child function and an error handler."""
    server = start_server(target=FLOW_FN)
    yield server
    assert server.stop() == 0


@pytest.fixture(scope="module")
def secured() -> Iterator[ServerProcess]:
    """Authentication on, explicit model control with an admin token, errors hidden."""
    server = start_server(
        "--auth-token",
        TOKEN,
        "--admin-token",
        ADMIN,
        "--model-control-mode",
        "explicit",
        "--hide-errors",
        target=FN,
    )
    yield server
    assert server.stop() == 0


@dataclass
class Watch:
    """What a page did besides rendering: its requests, console errors, uncaught
    exceptions and dialogs (an ``alert`` from an injected handler would be one)."""

    origin: str
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def on_dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_clean(self, refused: int | None = None) -> None:
        """Every request went to the server's own origin; nothing was logged as an
        error except, with ``refused``, the browser's note of such an HTTP status."""
        others = [url for url in self.requests if not url.startswith(self.origin + "/")]
        assert others == [], others
        expected = f"the server responded with a status of {refused}"
        errors = [e for e in self.errors if refused is None or expected not in e]
        assert errors == [], errors
        assert self.dialogs == []


def watch(page: Page, server: ServerProcess) -> Watch:
    seen = Watch(server.url)
    page.on("request", lambda request: seen.requests.append(request.url))
    page.on("console", seen.on_console)
    page.on("pageerror", lambda error: seen.errors.append(f"uncaught: {error}"))
    page.on("dialog", seen.on_dialog)
    page.set_viewport_size({"width": 1280, "height": 800})
    return seen


def open_view(page: Page, server: ServerProcess, route: str, view: str) -> None:
    page.goto(f"{server.url}/console{route}")
    page.wait_for_selector(f'main[data-view="{view}"]', timeout=WAIT_MS)


def go(page: Page, route: str, view: str) -> None:
    """Follow a hash route within the loaded page (no reload)."""
    page.evaluate("route => { window.location.hash = route; }", route)
    page.wait_for_selector(f'main[data-view="{view}"]', timeout=WAIT_MS)


def assert_accessible(page: Page) -> None:
    """axe-core (bundled by axe-playwright-python) finds no serious or critical
    violation in the page as it is now."""
    if importlib.util.find_spec("axe_playwright_python") is None:
        pytest.fail("axe-playwright-python is not installed: run `make install` (dev extra)")
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    grave = [
        f"{v['id']} ({v['impact']}): {[node['target'] for node in v['nodes']][:5]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert grave == [], grave


def screenshot(page: Page, name: str) -> None:
    """docs/images/console-<name>.png, 1280x800, when MLSERVE_SCREENSHOTS=1."""
    if not SCREENSHOTS:
        return
    target = IMAGES / f"console-{name}.png"
    page.screenshot(path=str(target))
    assert target.stat().st_size < 250_000, (target, target.stat().st_size)


def wait_until(check: Callable[[], Any], timeout: float = 20.0, every: float = 0.25) -> Any:
    """The first truthy answer of ``check`` (a plain sleep: the browser's own loop is
    not this thread's to run)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer or time.monotonic() > deadline:
            return answer
        time.sleep(every)


def key(entry: dict[str, Any]) -> str:
    return f"{entry['name']}:{entry['version']}"


def row(name: str, version: str = "") -> str:
    """The models table's row of a model (CSS attribute value quoted for any name)."""
    return f"tr[data-model={json.dumps(name + ':' + version)}]"


def model_path(name: str, version: str = "") -> str:
    path = f"/v2/models/{quote(name, safe='')}"
    return f"{path}/versions/{quote(version, safe='')}" if version else path


def flowers_rows(shift: float, n: int, seed: int) -> list[list[float]]:
    """Rows like the example's training set (examples/models/flowers/feature_stats.json),
    every measurement moved by ``shift`` standard deviations."""
    import numpy as np

    stats = json.loads((ROOT / "examples/models/flowers/feature_stats.json").read_text())
    rng = np.random.default_rng(seed)
    columns = [
        rng.normal(s["mean"] + shift * s["std"], s["std"] / 4, n)
        for s in (stats[f] for f in ("sepal_length", "sepal_width", "petal_length", "petal_width"))
    ]
    return np.round(np.stack(columns, axis=1), 3).tolist()


def peak(page: Page, selector: str) -> float:
    """How tall the shapes an SVG chart draws are: 0 for a flat line or no data."""
    return float(
        page.eval_on_selector(
            selector,
            "svg => Math.max(0, ...[...svg.querySelectorAll('path, polyline, polygon, rect')]"
            ".map(e => e.getBBox().height))",
        )
    )


def test_models_view_matches_the_api_and_its_charts_move(main: ServerProcess, page: Page) -> None:
    seen = watch(page, main)
    open_view(page, main, "#/models", "models")
    index = httpx.post(f"{main.url}/v2/repository/index").json()
    assert page.locator("tr[data-model]").count() == len(index) == 5
    for entry in index:
        tr = page.locator(row(entry["name"], entry["version"]))
        assert tr.count() == 1, key(entry)
        assert tr.locator('[data-field="state"]').inner_text().strip() == entry["state"]
        assert tr.locator(f"a[data-try={json.dumps(key(entry))}]").count() == 1
        for chart in ("rps", "errors", "p50", "p99"):
            assert tr.locator(f'svg[data-chart="{chart}"]').count() == 1
        if entry["state"] != "READY":
            assert "RuntimeError" in tr.locator('[data-field="reason"]').inner_text()
            continue
        meta = httpx.get(main.url + model_path(entry["name"], entry["version"])).json()
        platform = tr.locator('[data-field="platform"]').inner_text().strip()
        assert platform == meta["platform"] or (not meta["platform"] and platform in ("", "-"))
        for side in ("inputs", "outputs"):
            text = tr.locator(f'[data-field="{side}"]').inner_text()
            for tensor in meta[side]:
                assert tensor["name"] in text and tensor["datatype"] in text, (side, text)
                assert all(str(dim) in text for dim in tensor["shape"]), (side, text)
    assert (
        page.locator(row("broken")).locator('[data-field="reason"]').inner_text().count(SECRET) == 1
    )  # errors are not hidden on this server
    # The hostile name is text: no element, no handler run.
    assert page.locator(row(HOSTILE)).locator("th, td").first.inner_text().strip() == HOSTILE
    assert page.locator("main img").count() == 0
    assert_accessible(page)

    # Traffic shows up in the charts without a reload (the server samples every 5 s).
    chart = f'{row("flowers", "v2")} svg[data-chart="rps"]'
    page.evaluate("window.__kept = true")  # gone if the page reloads
    assert peak(page, chart) == 0  # no call yet
    rows = flowers_rows(0.0, 4, seed=1)
    with httpx.Client(base_url=main.url) as client:
        for _ in range(40):
            reply = client.post("/v2/models/flowers/versions/v2/infer", json={"inputs": rows})
            assert reply.status_code == 200
    assert wait_until(lambda: peak(page, chart) > 0, timeout=15)
    assert page.evaluate("window.__kept") is True
    screenshot(page, "models")
    history = httpx.get(f"{main.url}/console/api/history").json()
    assert max(history["series"]["flowers:v2"]["rps"]) > 0
    page.wait_for_timeout(200)
    seen.assert_clean()


def test_try_it_sends_the_sample_and_shows_errors(main: ServerProcess, page: Page) -> None:
    seen = watch(page, main)
    open_view(page, main, "#/try/flowers", "try")
    body = page.locator("textarea[data-tryit-body]")
    assert wait_until(lambda: body.input_value().strip())
    sample = httpx.get(f"{main.url}/console/api/sample/flowers").json()
    assert sample["path"] == "/v2/models/flowers/infer"
    assert json.loads(body.input_value()) == sample["body"]

    page.click("button[data-tryit-send]")
    status = page.locator("[data-tryit-status]")
    assert wait_until(lambda: status.inner_text().strip() == "200", timeout=10), status.inner_text()
    answer = json.loads(page.locator("pre[data-tryit-response]").inner_text())
    assert answer["model_name"] == "flowers" and answer["outputs"]
    assert re.search(r"\d", page.locator("[data-tryit-time]").inner_text())
    assert_accessible(page)
    screenshot(page, "try")

    # The copy buttons write the same call as code.
    overview = httpx.get(f"{main.url}/console/api/overview").json()
    flowers = next(m for m in overview["models"] if (m["name"], m["version"]) == ("flowers", ""))
    assert page.locator('button[data-copy="tfserving"]').count() == int(flowers["tfserving"])
    first_input = sample["body"]["inputs"][0]
    snippets = {"": ""}
    snippet = page.locator("pre[data-snippet]")
    for kind in ("curl", "requests", "tritonclient"):
        page.click(f'button[data-copy="{kind}"]')
        last = list(snippets.values())[-1]
        assert wait_until(lambda last=last: snippet.inner_text() not in ("", last), timeout=5)
        snippets[kind] = snippet.inner_text()
        assert "flowers" in snippets[kind], snippets[kind]
    for kind in ("curl", "requests"):
        assert sample["path"] in snippets[kind] and '"inputs"' in snippets[kind]
        assert first_input["name"] in snippets[kind], snippets[kind]
    assert "tritonclient" in snippets["tritonclient"]
    # Each snippet runs as its user would run it, and is answered.
    if shutil.which("curl"):
        ran = subprocess.run(
            ["bash", "-c", snippets["curl"]], capture_output=True, text=True, timeout=30
        )
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["model_name"] == "flowers", ran.stdout
    for kind in ("requests", "tritonclient"):
        ran = subprocess.run(
            [sys.executable, "-c", snippets[kind]], capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, (kind, ran.stderr)
        assert "flowers" in ran.stdout, (kind, ran.stdout)

    # A request the server refuses: its status and its own message.
    wrong = {"inputs": [{"name": "measurements", "datatype": "FP64", "shape": [1, 4], "data": [1]}]}
    expected = httpx.post(f"{main.url}/v2/models/flowers/infer", json=wrong)
    assert 400 <= expected.status_code < 500
    body.fill(json.dumps(wrong))
    page.click("button[data-tryit-send]")
    code = str(expected.status_code)
    assert wait_until(lambda: status.inner_text().strip() == code, timeout=10), status.inner_text()
    shown = page.locator("pre[data-tryit-response]").inner_text()
    assert expected.json()["error"] in shown, shown
    seen.assert_clean(refused=expected.status_code)


def test_try_it_uploads_an_image_and_names_stay_text(main: ServerProcess, page: Page) -> None:
    from PIL import Image

    seen = watch(page, main)
    overview = httpx.get(f"{main.url}/console/api/overview").json()
    image = {m["name"]: m["image"] for m in overview["models"]}
    assert image["pixels"] and not image["flowers"]
    open_view(page, main, "#/try/pixels", "try")
    upload = page.locator('input[type="file"][data-tryit-file]')
    assert upload.count() == 1
    picture = BytesIO()
    Image.new("RGB", (6, 4), (200, 10, 0)).save(picture, format="PNG")
    upload.set_input_files(
        {"name": "red.png", "mimeType": "image/png", "buffer": picture.getvalue()}
    )
    page.click("button[data-tryit-send]")
    status = page.locator("[data-tryit-status]")
    assert wait_until(lambda: status.inner_text().strip() == "200", timeout=10), status.inner_text()
    assert "200" in page.locator("pre[data-tryit-response]").inner_text()  # the red mean

    go(page, "#/try/" + quote(HOSTILE, safe=""), "try")
    body = page.locator("textarea[data-tryit-body]")
    assert wait_until(lambda: '"text"' in body.input_value())  # its sample, not pixels'
    request = json.loads(body.input_value())
    request["inputs"][0]["data"] = [HOSTILE_TEXT]
    request["inputs"][0]["shape"] = [1]
    body.fill(json.dumps(request))
    page.click("button[data-tryit-send]")
    assert wait_until(lambda: status.inner_text().strip() == "200", timeout=10), status.inner_text()
    assert HOSTILE in page.locator("main").inner_text()
    assert page.locator("main img").count() == 0

    # The router's graph: a node per route, the hostile one's id in an attribute.
    graph = httpx.get(f"{main.url}/console/api/graph").json()
    assert graph["topology"] == "router"
    go(page, "#/graph", "graph")
    page.wait_for_selector("svg[data-graph] g[data-node]", timeout=WAIT_MS)
    assert page.locator("svg[data-graph] g[data-node]").count() == len(graph["nodes"])
    ids = [node["id"] for node in graph["nodes"]]
    assert any(HOSTILE in node for node in ids), ids
    for node in ids:
        assert page.locator(f"g[data-node={json.dumps(node)}]").count() == 1, node
    assert page.locator("main img").count() == 0
    seen.assert_clean()


def test_graph_has_every_node_and_shows_its_class(flow: ServerProcess, page: Page) -> None:
    seen = watch(page, flow)
    graph = httpx.get(f"{flow.url}/console/api/graph").json()
    assert graph["topology"] == "flow"
    kinds = {node["kind"] for node in graph["nodes"]}
    assert {"entry", "task", "router", "route", "queue", "error"} <= kinds, kinds
    open_view(page, flow, "#/graph", "graph")
    page.wait_for_selector("svg[data-graph]", timeout=WAIT_MS)
    assert page.locator("svg[data-graph] g[data-node]").count() == len(graph["nodes"])
    details = page.locator("[data-node-details]")
    for node in graph["nodes"]:
        drawn = page.locator(f"g[data-node={json.dumps(node['id'])}]")
        assert drawn.count() == 1, node["id"]
        drawn.click()
        if node["class"]:
            wanted = node["class"]
            assert wait_until(lambda w=wanted: w in details.inner_text(), timeout=5), (
                node,
                details,
            )
    route = next(node for node in graph["nodes"] if node["kind"] == "route")
    assert route["params"]["value"] == 7
    page.locator(f"g[data-node={json.dumps(route['id'])}]").click()
    assert wait_until(lambda: "Const" in details.inner_text(), timeout=5)
    assert "value" in details.inner_text() and "7" in details.inner_text()
    assert_accessible(page)
    screenshot(page, "graph")
    seen.assert_clean()


def endpoints(server: ServerProcess) -> dict[str, dict[str, Any]]:
    """The endpoint records by model (``name:version``, ``latest`` for none)."""
    listed = httpx.get(f"{server.url}/api/v1/projects/default/model-endpoints").json()
    return {e["spec"]["model"]: e for e in listed["endpoints"]}


def test_monitoring_shows_the_drift_and_the_records(main: ServerProcess, page: Page) -> None:
    with httpx.Client(base_url=main.url) as client:
        data = {"name": "text", "datatype": "BYTES", "shape": [1], "data": [HOSTILE_TEXT]}
        replies = [
            client.post(model_path(HOSTILE) + "/infer", json={"inputs": [data]}),
            client.post("/v2/models/flowers/infer", json={"inputs": [[MARKER, 3.0, 1.4, 0.2]]}),
        ]
        shifted = flowers_rows(3.0, 300, seed=2)
        for start in range(0, len(shifted), 10):
            rows = shifted[start : start + 10]
            replies.append(client.post("/v2/models/flowers/infer", json={"inputs": rows}))
        assert [reply.status_code for reply in replies] == [200] * len(replies)

    def drifted() -> dict[str, Any] | None:
        record = endpoints(main).get("flowers:latest")
        return record if record and record["status"]["drift_status"] == "DRIFT_DETECTED" else None

    record = wait_until(drifted, timeout=30)
    assert record, endpoints(main).get("flowers:latest")
    uid = record["metadata"]["uid"]

    seen = watch(page, main)
    open_view(page, main, "#/monitoring", "monitoring")
    listed = page.locator(f'tr[data-endpoint="{uid}"]')
    listed.wait_for(timeout=WAIT_MS)
    drift = listed.locator('[data-field="drift_status"]').inner_text().lower()
    assert "drift" in drift and "detected" in drift, drift
    for name in ("requests", "errors", "latency"):
        assert listed.locator(f'[data-field="{name}"]').count() == 1
    assert page.locator("tr[data-endpoint]").count() == len(endpoints(main))
    assert_accessible(page)

    go(page, f"#/monitoring/{uid}", "monitoring")
    page.wait_for_selector("tr[data-feature]", timeout=WAIT_MS)
    record = endpoints(main)["flowers:latest"]  # the window shown may be a newer one
    features = list(record["spec"]["feature_stats"])
    assert page.locator("tr[data-feature]").count() == len(features) == 4
    measures = record["status"]["drift_measures"]
    for name in features:
        tr = page.locator(f'tr[data-feature="{name}"]')
        assert tr.locator("svg").count() == 2, name
        for measure in ("tvd", "hellinger", "kld"):
            assert tr.locator(f'[data-measure="{measure}"]').count() == 1
        for measure in ("tvd", "hellinger"):
            value = measures[name][measure]
            classes = (
                tr.locator(f'[data-measure="{measure}"]').get_attribute("class") or ""
            ).split()
            if value >= 0.7:
                assert "bad" in classes, (name, measure, value, classes)
            if value < 0.5:
                assert "ok" in classes, (name, measure, value, classes)
    assert any(m["tvd"] >= 0.7 for f, m in measures.items() if f in features)

    records = page.locator("table[data-records] tbody tr")
    assert wait_until(lambda: records.count() > 1, timeout=10)
    assert_accessible(page)
    screenshot(page, "monitoring")
    page.fill("input[data-records-filter]", str(MARKER))
    assert wait_until(lambda: records.count() == 1, timeout=5), records.count()
    assert str(MARKER) in records.first.inner_text()
    page.fill("input[data-records-filter]", "")
    assert wait_until(lambda: records.count() > 1, timeout=5)

    # A record holding HTML is shown as text.
    hostile_uid = endpoints(main)[f"{HOSTILE}:latest"]["metadata"]["uid"]
    go(page, f"#/monitoring/{hostile_uid}", "monitoring")
    table = page.locator("table[data-records]")
    assert wait_until(lambda: table.count() and HOSTILE_TEXT in table.inner_text(), timeout=10)
    assert page.locator("main img").count() == 0
    page.wait_for_timeout(200)
    seen.assert_clean()


def login(page: Page, token: str) -> None:
    page.fill('form[data-login] input[name="token"]', token)
    page.click("form[data-login] button[type=submit], form[data-login] button:not([type])")


def test_login_keeps_the_token_in_the_tab(
    secured: ServerProcess, page: Page, browser: Browser
) -> None:
    seen = watch(page, secured)
    answers: list[tuple[str, int]] = []
    page.on("response", lambda response: answers.append((response.url, response.status)))
    open_view(page, secured, "", "login")
    page.wait_for_selector("form[data-login]", timeout=WAIT_MS)
    assert page.locator("tr[data-model]").count() == 0
    data = [(url, code) for url, code in answers if "/console/static/" not in url]
    data = [
        (url, code) for url, code in data if urlsplit(url).path not in ("/console", "/console/")
    ]
    assert data and all(code == 401 for _, code in data), data
    assert_accessible(page)

    login(page, "not-the-token")
    page.wait_for_timeout(500)
    page.wait_for_selector("form[data-login]", timeout=WAIT_MS)
    assert page.locator("tr[data-model]").count() == 0

    login(page, TOKEN)
    page.wait_for_selector('main[data-view="models"] tr[data-model]', timeout=WAIT_MS)
    assert page.evaluate("Object.values(sessionStorage)").count(TOKEN) == 1
    assert TOKEN not in json.dumps(page.evaluate("Object.entries(localStorage)"))
    # errors are hidden on this server: the failed load's reason keeps its secret
    reason = page.locator(row("broken")).locator('[data-field="reason"]').inner_text()
    assert SECRET not in reason and "hunter2" not in reason
    assert "hunter2" not in page.locator("main").inner_text()
    assert_accessible(page)
    seen.assert_clean(refused=401)

    # What the page read is what the API gives this token, and nothing without one.
    assert httpx.get(f"{secured.url}/console").status_code == 200
    assert httpx.get(f"{secured.url}/console/api/overview").status_code == 401
    headers = {"Authorization": f"Bearer {TOKEN}"}
    server = httpx.get(f"{secured.url}/console/api/overview", headers=headers).json()["server"]
    assert (server["auth"], server["hide_errors"], server["model_control"]) == (
        True,
        True,
        "explicit",
    )

    page.click("button[data-logout]")
    page.wait_for_selector("form[data-login]", timeout=WAIT_MS)
    assert TOKEN not in json.dumps(page.evaluate("Object.entries(sessionStorage)"))

    other = browser.new_context()  # another tab: no token yet
    try:
        tab = other.new_page()
        open_view(tab, secured, "#/models", "login")
        assert tab.locator("form[data-login]").count() == 1
        assert tab.locator("tr[data-model]").count() == 0
    finally:
        other.close()


def test_load_and_unload_without_a_reload(secured: ServerProcess, page: Page) -> None:
    seen = watch(page, secured)
    open_view(page, secured, "#/models", "login")
    login(page, ADMIN)
    page.wait_for_selector(row("flowers", "v2"), timeout=WAIT_MS)
    assert page.locator('button[data-unload="flowers"]').count() >= 1
    assert page.locator('button[data-load="flowers"]').count() >= 1
    page.evaluate("window.__kept = true")  # gone if the page reloaded

    def state(version: str) -> str:
        return page.locator(row("flowers", version)).locator('[data-field="state"]').inner_text()

    page.locator('button[data-unload="flowers"]').first.click()
    result = page.locator("[data-control-result]")
    assert wait_until(lambda: "unload" in result.inner_text().lower(), timeout=10)
    assert wait_until(lambda: state("v2").strip() == "UNLOADED", timeout=10), state("v2")
    assert state("").strip() == "UNLOADED"  # every version of the name
    headers = {"Authorization": f"Bearer {TOKEN}"}
    ready = httpx.get(f"{secured.url}/v2/models/flowers/versions/v2/ready", headers=headers)
    assert ready.status_code != 200

    page.locator('button[data-load="flowers"]').first.click()
    assert wait_until(lambda: state("v2").strip() == "READY", timeout=10), state("v2")
    assert wait_until(lambda: state("").strip() == "READY", timeout=10), state("")
    assert page.evaluate("window.__kept") is True
    ready = httpx.get(f"{secured.url}/v2/models/flowers/versions/v2/ready", headers=headers)
    assert ready.status_code == 200
    assert_accessible(page)
    seen.assert_clean(refused=401)  # the first call, before the login


def raw_status(server: ServerProcess, path: str) -> int:
    """The status of a GET of ``path`` sent as it is (httpx would resolve its dots)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_console_headers_and_redirects(main: ServerProcess) -> None:
    for path in ("/console", "/console/", "/console/static/app.js", "/console/static/style.css"):
        reply = httpx.get(main.url + path)
        assert reply.status_code == 200, path
        assert reply.headers["content-security-policy"] == CSP, path
        assert reply.headers["x-content-type-options"] == "nosniff", path
    assert raw_status(main, "/console/static/nothing.js") == 404
    # Names that climb out of the folder: refused (the server's rule for every route
    # answers 400 before the console sees them).
    for path in (
        "/console/static/../static/app.js",
        "/console/static/../../server/console.py",
        "/console/static/..%2f..%2fserver%2fconsole.py",
        "/console/static/%2e%2e/%2e%2e/server/console.py",
    ):
        assert raw_status(main, path) in (400, 404), path
    browser = httpx.get(f"{main.url}/", headers={"Accept": "text/html,application/xhtml+xml"})
    assert browser.status_code in (302, 307)
    assert urlsplit(browser.headers["location"]).path == "/console"
    api = httpx.get(f"{main.url}/", headers={"Accept": "application/json"})
    assert api.status_code == 200 and api.json()["name"]
    # The data routes refuse bad questions with a 4xx, and the server serves on.
    for path in (
        "/console/api/records?model=flowers&n=0",
        "/console/api/records?model=flowers&n=501",
        "/console/api/records?n=5",
        "/console/api/sample/nothing",
    ):
        assert 400 <= httpx.get(main.url + path).status_code < 500, path
    assert httpx.get(f"{main.url}/console/api/sample/flowers/versions/v2").json()["path"] == (
        "/v2/models/flowers/versions/v2/infer"
    )


def test_no_console() -> None:
    server = start_server("--no-console", target=FLOW_FN)
    try:
        for path in ("/console", "/console/static/app.js", "/console/api/overview"):
            assert httpx.get(server.url + path).status_code == 404, path
        html = httpx.get(f"{server.url}/", headers={"Accept": "text/html"})
        assert html.status_code not in (301, 302, 303, 307, 308)
        assert "location" not in html.headers
    finally:
        assert server.stop() == 0


def test_workers_say_whose_numbers_they_show(page: Page) -> None:
    server = start_server("--workers", "2", target=FLOW_FN)
    try:
        seen = watch(page, server)
        open_view(page, server, "#/models", "models")
        note = page.locator("[data-worker]")
        note.wait_for(timeout=WAIT_MS)
        assert re.search(r"worker \d of 2\b", note.inner_text()), note.inner_text()
        seen.assert_clean()
    finally:
        assert server.stop() == 0


def test_first_load_is_small(main: ServerProcess, page: Page) -> None:
    responses: list[Any] = []
    page.on("response", lambda response: responses.append(response))
    open_view(page, main, "#/models", "models")
    page.wait_for_selector("tr[data-model]", timeout=WAIT_MS)
    page.wait_for_load_state("networkidle")
    sizes = {response.url: len(response.body()) for response in responses}
    assert sum(sizes.values()) <= 300_000, sizes
