"""Draw docs/images/streaming.svg, the sequence of one streamed request
(docs/streaming.md): ``python -m tools.sequence`` (``make docs-images``).

A sequence diagram is lifelines and arrows between them; graphviz lays out graphs, not
sequences, so this writes the SVG itself from the list below.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "docs" / "images" / "streaming.svg"

LANES = ["client", "face (SSE, gRPC, Kafka)", "GraphServer", "model's generator"]
# (from lane, to lane, label, style): "call", "answer" (dashed), "close" (red, dashed),
# or a note across the lanes when both are None.
STEPS: list[tuple[int | None, int | None, str, str]] = [
    (0, 1, "POST /v2/models/m/infer_stream", "call"),
    (1, 2, "Event", "call"),
    (2, 3, "predict(request)", "call"),
    (3, 2, "chunk 1 (a failure before it: an ordinary 4xx/5xx)", "answer"),
    (2, 1, "Response(ChunkStream), 200", "answer"),
    (1, 0, "200 text/event-stream; data: chunk 1", "answer"),
    (3, 1, "chunk 2 (bounded queue: a slow reader pauses the model)", "answer"),
    (1, 0, "data: chunk 2", "answer"),
    (None, None, "... one event per chunk, each written when it is yielded ...", "note"),
    (3, 1, "end, or an error", "answer"),
    (1, 0, "end of stream, or event: error", "answer"),
    (0, 1, "disconnect", "close"),
    (1, 3, "aclose() (the client gone, or a timeout): the generator's finally runs", "close"),
]

WIDTH, TOP, ROW, MARGIN = 860, 70, 40, 90


def lane_x(lane: int) -> float:
    return MARGIN + lane * (WIDTH - 2 * MARGIN) / (len(LANES) - 1)


def svg() -> str:
    height = TOP + ROW * (len(STEPS) + 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" '
        'font-size="13">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
        'markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="context-stroke"/></marker></defs>',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    for lane, name in enumerate(LANES):
        x = lane_x(lane)
        parts.append(
            f'<line x1="{x}" y1="{TOP - 20}" x2="{x}" y2="{height - 10}" stroke="#999" '
            'stroke-dasharray="4 4"/>'
        )
        parts.append(
            f'<rect x="{x - 80}" y="14" width="160" height="30" rx="4" fill="#eef3fb" '
            'stroke="#4a6fa5"/>'
        )
        parts.append(f'<text x="{x}" y="34" text-anchor="middle">{escape(name)}</text>')
    for row, (start, end, label, style) in enumerate(STEPS):
        y = TOP + ROW * (row + 1)
        if start is None or end is None:
            parts.append(
                f'<text x="{WIDTH / 2}" y="{y}" text-anchor="middle" fill="#555" '
                f'font-style="italic">{escape(label)}</text>'
            )
            continue
        x1, x2 = lane_x(start), lane_x(end)
        colour = "#b03030" if style == "close" else "#222"
        dash = ' stroke-dasharray="6 4"' if style != "call" else ""
        parts.append(
            f'<line x1="{x1}" y1="{y}" x2="{x2}" y2="{y}" stroke="{colour}"{dash} '
            'marker-end="url(#arrow)"/>'
        )
        parts.append(
            f'<text x="{(x1 + x2) / 2}" y="{y - 6}" text-anchor="middle" fill="{colour}">'
            f"{escape(label)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    OUT.write_text(svg())
    print(f"wrote {OUT}")
