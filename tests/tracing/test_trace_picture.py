"""docs/images/trace.svg is what ``tools/trace_picture.py`` draws from the recorded spans
(``make docs-images``), so the picture in docs/observability.md cannot drift from them."""

from __future__ import annotations

import json

from tools import trace_picture


def test_the_committed_picture_is_drawn_from_the_recorded_spans() -> None:
    spans = json.loads(trace_picture.SPANS.read_text())
    assert trace_picture.OUT.read_text() == trace_picture.svg(spans)


def test_the_recorded_trace_crosses_two_processes_in_one_tree() -> None:
    spans = json.loads(trace_picture.SPANS.read_text())
    rows = trace_picture.tree_order(spans)
    assert len(rows) == len(spans)  # every span hangs in the one tree
    assert [depth for depth, _ in rows][0] == 0 and sum(d == 0 for d, _ in rows) == 1
    assert {span["service.name"] for span in spans} == {"front", "scorer"}
    client = next(span for depth, span in rows if span["kind"] == "client")
    server = next(s for s in spans if s["parent_span_id"] == client["span_id"])
    assert server["kind"] == "server" and server["service.name"] == "scorer"


def test_a_child_is_drawn_below_its_parent_and_siblings_by_start() -> None:
    spans = [
        {"span_id": "b", "parent_span_id": "a", "start_ns": 5},
        {"span_id": "a", "parent_span_id": None, "start_ns": 0},
        {"span_id": "c", "parent_span_id": "a", "start_ns": 2},
        {"span_id": "d", "parent_span_id": "c", "start_ns": 3},
    ]
    order = [(depth, span["span_id"]) for depth, span in trace_picture.tree_order(spans)]
    assert order == [(0, "a"), (1, "c"), (2, "d"), (1, "b")]
