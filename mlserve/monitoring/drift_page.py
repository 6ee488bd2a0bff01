"""The features-drift page of an endpoint (docs/monitoring.md#the-drift-page): mlrun's
features-drift table as one self-contained HTML file.

mlrun draws its table with plotly; this page is plain HTML with inline CSS and inline
SVG bar charts, so it opens offline from a file, and it loads and runs nothing
(its Content-Security-Policy allows inline styles only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from mlserve.monitoring.drift import DriftThresholds
from mlserve.monitoring.endpoints import ModelEndpoint

__all__ = ["drift_html"]

_BIG = 1e300  # mlrun pads a histogram with +-sys.float_info.max edges
_CHART_WIDTH = 168
_CHART_HEIGHT = 44
_STATUS_WORDS = {
    "NO_DRIFT": "no drift",
    "POSSIBLE_DRIFT": "possible drift",
    "DRIFT_DETECTED": "drift detected",
}

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#24292f;
margin:24px;background:#fff}
h1{font-size:20px;margin:0 0 12px;display:flex;gap:12px;align-items:center}
.badge{font-size:13px;padding:3px 10px;border-radius:12px;font-weight:600}
.status-NO_DRIFT{background:#1a7f37;color:#fff}
.status-POSSIBLE_DRIFT{background:#d4a72c;color:#24292f}
.status-DRIFT_DETECTED{background:#cf222e;color:#fff}
.status-NONE{background:#eaeef2;color:#57606a}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:0 0 12px}
dt{color:#57606a}dd{margin:0;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.cards{display:flex;gap:32px;flex-wrap:wrap}
.notice{background:#fff8c5;border:1px solid #d4a72c;padding:8px 12px;border-radius:6px}
.legend{color:#57606a;font-size:12px}
.swatch{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px;vertical-align:-1px}
.swatch.ref{background:#0070c0}.swatch.cur{background:#d0006a}
svg.ref .bar{fill:#0070c0}svg.cur .bar{fill:#d0006a}
.outside{fill:#f0f0f0}
table{border-collapse:collapse;margin-top:8px}
th,td{padding:6px 10px;border-bottom:1px solid #eaeef2;text-align:right;vertical-align:middle}
thead th{font-size:12px;color:#57606a;font-weight:600;text-align:center}
tbody th{text-align:left;font-weight:600;max-width:220px;overflow-wrap:break-word}
td.chart{padding:4px 6px}
.range{display:flex;justify-content:space-between;font-size:10px;color:#57606a;
padding:0 12px}
td.drift{font-weight:600;border-radius:4px}
.stats{font-size:12px;color:#57606a;text-align:left;white-space:nowrap}
"""


def drift_html(endpoint: ModelEndpoint, thresholds: DriftThresholds | None = None) -> str:
    """The page of ``endpoint``'s last monitored window against its reference."""
    if thresholds is None:
        thresholds = DriftThresholds()
    model = endpoint.spec.model
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'\">",
        f"<title>Features drift: {escape(model)}</title><style>{_CSS}</style></head><body>",
        _header(endpoint, thresholds),
        _table(endpoint, thresholds),
        "</body></html>\n",
    ]
    return "".join(parts)


def _header(endpoint: ModelEndpoint, thresholds: DriftThresholds) -> str:
    status = endpoint.status
    general = _finite(status.drift_measures.get("general_drift"))
    code = status.drift_status or (thresholds.status(general) if general is not None else "")
    badge = escape(_STATUS_WORDS.get(code, code) or "not monitored")
    endpoint_rows = [
        ("model", endpoint.spec.model),
        ("uid", endpoint.metadata.uid),
        ("function", endpoint.spec.function_uri),
        ("project", endpoint.metadata.project),
    ]
    return (
        f'<header><h1>Features drift <span id="general-status" class="badge '
        f'status-{escape(code or "NONE")}" data-status="{escape(code)}">{badge}</span></h1>'
        f'<div class="cards"><dl id="endpoint">{_pairs(endpoint_rows, code_values=True)}</dl>'
        f'<dl id="window">{_pairs(_window_rows(status.window))}</dl>'
        f'<dl id="general">{_pairs(_general_rows(status.drift_measures))}</dl>'
        f"</div>{_notices(endpoint)}</header>"
    )


def _pairs(rows: Iterable[tuple[str, str]], code_values: bool = False) -> str:
    wrap = ("<code>", "</code>") if code_values else ("", "")
    return "".join(
        f"<dt>{escape(key)}</dt><dd>{wrap[0]}{escape(value)}{wrap[1]}</dd>" for key, value in rows
    )


def _window_rows(window: dict[str, Any]) -> list[tuple[str, str]]:
    if not window:
        return [("window", "none monitored yet")]
    start, end = window.get("start"), window.get("end")
    rows = [("window start", _when(start)), ("window end", _when(end))]
    errors, late = _int(window.get("errors")), _int(window.get("late"))
    rows.append(("requests", f"{_int(window.get('requests'))} ({errors} errors, {late} late)"))
    latencies = [f"{key} {_ms(window.get(f'latency_{key}_us'))}" for key in ("mean", "p50", "p99")]
    rows.append(("latency", " · ".join(latencies)))
    return rows


def _general_rows(measures: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        ("general drift", _num(measures.get("general_drift"))),
        ("tvd mean", _num(measures.get("tvd_mean"))),
        ("hellinger mean", _num(measures.get("hellinger_mean"))),
        ("kld mean", _num(measures.get("kld_mean"))),
    ]


def _notices(endpoint: ModelEndpoint) -> str:
    notes = []
    has_reference = bool(_histograms(endpoint.spec.feature_stats))
    if not has_reference:
        notes.append(
            "This model has no reference statistics (feature_stats): there is nothing to "
            "compare its inputs with, so no drift is computed."
        )
    if not endpoint.status.window:
        notes.append("No window of this endpoint has been monitored yet.")
    elif has_reference and not _histograms(endpoint.status.current_stats):
        notes.append("The last window had no inputs to compare with the reference.")
    return "".join(f'<p class="notice">{escape(note)}</p>' for note in notes)


def _table(endpoint: ModelEndpoint, thresholds: DriftThresholds) -> str:
    reference = _histograms(endpoint.spec.feature_stats)
    if not reference:
        return ""
    current = endpoint.status.current_stats
    measures = endpoint.status.drift_measures
    rows = "".join(
        _row(
            name,
            endpoint.spec.feature_stats[name],
            current.get(name),
            measures.get(name),
            thresholds,
        )
        for name in reference
    )
    return (
        '<p class="legend"><span class="swatch ref"></span>reference'
        '<span class="swatch cur"></span>current window (share of values per bin; grey: '
        "outside the reference's range). A feature's drift is the mean of its tvd and "
        f"hellinger: possible from {thresholds.potential:g}, detected from "
        f"{thresholds.detected:g}.</p>"
        '<table id="features"><thead><tr><th>feature</th><th>reference</th>'
        "<th>current</th><th>mean ± std<br>reference → current</th><th>tvd</th>"
        "<th>hellinger</th><th>kld</th><th>drift</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _row(
    name: str,
    ref_stats: dict[str, Any],
    cur_stats: Any,
    measures: Any,
    thresholds: DriftThresholds,
) -> str:
    ref_counts, ref_edges = _padded(*ref_stats["hist"])
    cur_hist = cur_stats.get("hist") if isinstance(cur_stats, dict) else None
    cur_counts, cur_edges = _padded(*cur_hist) if cur_hist else ([], [])
    ref_shares, cur_shares = _shares(ref_counts), _shares(cur_counts)
    top = max([*ref_shares, *cur_shares, 0.0]) or 1.0
    ref_chart = _chart(ref_shares, ref_edges, top, "ref", f"reference histogram of {name}")
    if cur_hist:
        cur_chart = _chart(cur_shares, cur_edges, top, "cur", f"current histogram of {name}")
    else:
        cur_chart = '<span class="nodata">no data</span>'
    m = measures if isinstance(measures, dict) else {}
    return (
        f'<tr class="feature" data-feature="{escape(name)}"><th scope="row">{escape(name)}</th>'
        f'<td class="chart ref-chart">{ref_chart}{_range(ref_edges)}</td>'
        f'<td class="chart cur-chart">{cur_chart}{_range(ref_edges)}</td>'
        f'<td class="stats">{_stats(ref_stats)}<br>{_stats(cur_stats)}</td>'
        f'<td class="tvd">{_num(m.get("tvd"))}</td>'
        f'<td class="hellinger">{_num(m.get("hellinger"))}</td>'
        f'<td class="kld">{_num(m.get("kld"))}</td>'
        f"{_drift_cell(m, thresholds)}</tr>"
    )


def _drift_cell(measures: dict[str, Any], thresholds: DriftThresholds) -> str:
    """The feature's drift as mlrun's table has it: the mean of tvd and hellinger."""
    tvd, hellinger = _finite(measures.get("tvd")), _finite(measures.get("hellinger"))
    if tvd is None or hellinger is None:
        return '<td class="drift status-NONE">-</td>'
    value = (tvd + hellinger) / 2
    status = thresholds.status(value)
    return (
        f'<td class="drift status-{status}" data-status="{status}" '
        f'title="{_STATUS_WORDS[status]}">{_num(value)}</td>'
    )


def _padded(
    counts: Sequence[float], edges: Sequence[float | None]
) -> tuple[list[float], list[float]]:
    """The histogram with the current window's two outer bins (below and above the
    reference's range), empty, so both histograms have the same bins; an already padded
    one is kept (its infinite edges may have been written as null)."""
    if not edges:
        return list(counts), []
    low = -math.inf if edges[0] is None else float(edges[0])
    high = math.inf if edges[-1] is None else float(edges[-1])
    inner = [float(edge) for edge in edges[1:-1] if edge is not None]
    if low <= -_BIG and high >= _BIG:
        return list(counts), [low, *inner, high]
    return [0.0, *counts, 0.0], [-math.inf, low, *inner, high, math.inf]


def _shares(counts: Sequence[float]) -> list[float]:
    total = float(sum(counts))
    return [float(c) / total if total > 0 else 0.0 for c in counts]


def _chart(shares: list[float], edges: list[float], top: float, kind: str, label: str) -> str:
    """A bar per bin, heights on the row's common scale; the outer bins shaded."""
    n = len(shares)
    width = _CHART_WIDTH / max(n, 1)
    parts = [
        f'<svg class="hist {kind}" width="{_CHART_WIDTH}" height="{_CHART_HEIGHT}" '
        f'viewBox="0 0 {_CHART_WIDTH} {_CHART_HEIGHT}" role="img" aria-label="{escape(label)}">'
    ]
    for i in (0, n - 1) if n > 2 else ():
        parts.append(
            f'<rect class="outside" x="{i * width:.2f}" y="0" width="{width:.2f}" '
            f'height="{_CHART_HEIGHT}"/>'
        )
    for i, share in enumerate(shares):
        height = share / top * (_CHART_HEIGHT - 2)
        parts.append(
            f'<rect class="bar" x="{i * width + 0.5:.2f}" y="{_CHART_HEIGHT - height:.2f}" '
            f'width="{max(width - 1, 0.5):.2f}" height="{height:.2f}">'
            f"<title>{escape(_bin_label(edges, i))}: {share:.1%}</title></rect>"
        )
    parts.append(
        f'<line x1="0" y1="{_CHART_HEIGHT - 0.5}" x2="{_CHART_WIDTH}" '
        f'y2="{_CHART_HEIGHT - 0.5}" stroke="#8c959f"/></svg>'
    )
    return "".join(parts)


def _bin_label(edges: list[float], i: int) -> str:
    if i + 1 >= len(edges):
        return f"bin {i + 1}"
    low, high = edges[i], edges[i + 1]
    if low <= -_BIG:
        return f"below {_num(high)}"
    if high >= _BIG:
        return f"above {_num(low)}"
    return f"{_num(low)} to {_num(high)}"


def _range(edges: list[float]) -> str:
    inner = [e for e in edges if -_BIG < e < _BIG]
    if not inner:
        return ""
    return f'<div class="range"><span>{_num(inner[0])}</span><span>{_num(inner[-1])}</span></div>'


def _stats(stats: Any) -> str:
    if not isinstance(stats, dict) or "mean" not in stats:
        return "-"
    return f"{_num(stats.get('mean'))} ± {_num(stats.get('std'))}"


def _histograms(stats: dict[str, Any]) -> list[str]:
    """The features of ``stats`` that have a histogram, in their order."""
    return [
        name
        for name, value in stats.items()
        if isinstance(value, dict)
        and isinstance(value.get("hist"), list | tuple)
        and len(value["hist"]) == 2
    ]


def _finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _num(value: Any) -> str:
    """A measure or statistic: 4 significant digits (whole above 10,000), ``inf`` for an
    infinite kld, ``-`` for none (an infinite kld is null in JSON)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "-"
    if math.isnan(number):
        return "-"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    if 1e4 <= abs(number) < 1e15:
        return f"{number:,.0f}"
    return f"{number:.4g}"


def _int(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "-"


def _ms(microseconds: Any) -> str:
    value = _finite(microseconds)
    return "-" if value is None else f"{value / 1000:.3g} ms"


def _when(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime) and value.utcoffset() is not None:
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    return "-"
