"""Draw docs/images/trace.svg, the waterfall of one real trace of a graph
(docs/observability.md#a-trace-of-a-graph): ``python -m tools.trace_picture``
(``make docs-images``) draws it from the recorded spans, docs/images/trace.json.

``--record`` first records them: it serves two functions traced to an OTLP receiver
(``tests/otlp_receiver.py``), a flow whose ``$remote`` step calls a router of a model
with pre- and post-processing in the second, sends one request, and keeps the spans of
its trace (the second request's: the first warms the connections up), as the
receiver decoded them. The picture is a row per span, in tree order,
a bar from its start to its end on one time axis, coloured by the process (service)
that sent it: what Jaeger's timeline shows.
"""

from __future__ import annotations

import argparse
import json
from html import escape
from pathlib import Path
from typing import Any

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
SPANS = IMAGES / "trace.json"
OUT = IMAGES / "trace.svg"

WIDTH, ROW, TOP, LABELS, RIGHT = 900, 26, 56, 330, 70
COLOURS = ["#4a6fa5", "#c0803a", "#4f8a5b", "#8a4f7d"]
KEEP = ("name", "kind", "span_id", "parent_span_id", "start_ns", "end_ns", "service.name")


def tree_order(spans: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """(depth, span), each span after its parent, siblings by start time."""
    ids = {span["span_id"] for span in spans}
    kids: dict[str | None, list[dict[str, Any]]] = {}
    for span in spans:
        parent = span["parent_span_id"] if span["parent_span_id"] in ids else None
        kids.setdefault(parent, []).append(span)
    ordered: list[tuple[int, dict[str, Any]]] = []

    def visit(parent: str | None, depth: int) -> None:
        for span in sorted(kids.get(parent, []), key=lambda s: s["start_ns"]):
            ordered.append((depth, span))
            visit(span["span_id"], depth + 1)

    visit(None, 0)
    return ordered


def svg(spans: list[dict[str, Any]]) -> str:
    """The waterfall of ``spans`` (one trace), as an SVG document."""
    rows = tree_order(spans)
    start = min(span["start_ns"] for span in spans)
    total = max(span["end_ns"] for span in spans) - start
    services = sorted({span["service.name"] for span in spans})
    colour = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(services)}
    scale = (WIDTH - LABELS - RIGHT) / total
    height = TOP + ROW * len(rows) + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" '
        'font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    for i, name in enumerate(services):  # the legend: one colour per process
        x = 10 + i * 200
        parts.append(f'<rect x="{x}" y="10" width="14" height="14" fill="{colour[name]}"/>')
        parts.append(f'<text x="{x + 20}" y="22">service.name={escape(name)}</text>')
    for tick in range(5):  # the time axis, in milliseconds
        x = LABELS + tick * (WIDTH - LABELS - RIGHT) / 4
        parts.append(
            f'<line x1="{x:.1f}" y1="{TOP - 12}" x2="{x:.1f}" y2="{height - 30}" stroke="#ddd"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{TOP - 16}" text-anchor="middle" fill="#666">'
            f"{total * tick / 4 / 1e6:.1f} ms</text>"
        )
    for row, (depth, span) in enumerate(rows):
        y = TOP + row * ROW
        x = LABELS + (span["start_ns"] - start) * scale
        width = max(2.0, (span["end_ns"] - span["start_ns"]) * scale)
        label = f"{span['name']} ({span['kind']})"
        parts.append(f'<text x="{10 + 14 * depth}" y="{y + 14}">{escape(label)}</text>')
        parts.append(
            f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{ROW - 8}" rx="2" '
            f'fill="{colour[span["service.name"]]}"/>'
        )
        took = (span["end_ns"] - span["start_ns"]) / 1e6
        parts.append(f'<text x="{x + width + 4:.1f}" y="{y + 14}" fill="#444">{took:.2f} ms</text>')
    parts.append(
        f'<text x="10" y="{height - 10}" fill="#666">One request to a flow whose $remote '
        "step calls a router in a second function: one trace, both processes.</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def record() -> list[dict[str, Any]]:
    """Serve the two functions traced, send one request, return its trace's spans."""
    import httpx

    from tests.netserver import start_server
    from tests.otlp_receiver import HttpReceiver

    receiver = HttpReceiver()
    fn = "tests/tracing/fn.py"
    second = start_server(
        "--otel-endpoint",
        receiver.endpoint,
        target=fn,
        env={"TRACE_FN": "router", "OTEL_SERVICE_NAME": "scorer"},
    )
    remote = f"{second.url}/v2/models/hooks/infer"
    front = start_server(
        "--otel-endpoint",
        receiver.endpoint,
        target=fn,
        env={"TRACE_FN": "flow", "REMOTE_URL": remote, "OTEL_SERVICE_NAME": "front"},
    )
    names = {"step prep", f"remote {remote}", "predict"}
    try:
        for _ in range(2):  # the first request warms the connections up; the second is drawn
            receiver.clear()
            answer = httpx.post(front.url, json={"inputs": [1, 2]}, timeout=30)
            answer.raise_for_status()
            spans = receiver.wait_trace(names, lambda span: span["service.name"] == "front")
    finally:
        front.stop()
        second.stop()
        receiver.stop()
    return [{key: span[key] for key in KEEP} for span in spans]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="record the spans from a real run")
    args = parser.parse_args(argv)
    if args.record:
        SPANS.write_text(json.dumps(record(), indent=1) + "\n")
    OUT.write_text(svg(json.loads(SPANS.read_text())))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
