// Small SVG charts: a model's sparkline over the last minutes and a feature's
// histogram (bars on the row's common scale, the two outer bins shaded).

import { num, s } from "./dom.js";

const SPARK_W = 100;
const SPARK_H = 26;

/** Draw (or redraw) a sparkline of values at times t into svg, over [from, to]. */
export function sparkline(svg, t, values, from, to, label) {
  svg.setAttribute("viewBox", `0 0 ${SPARK_W} ${SPARK_H}`);
  svg.setAttribute("width", SPARK_W);
  svg.setAttribute("height", SPARK_H);
  svg.setAttribute("role", "img");
  const points = [];
  const finite = values.filter((v) => Number.isFinite(v));
  const top = Math.max(...finite, 0) || 1;
  const span = Math.max(to - from, 1);
  for (let i = 0; i < Math.min(t.length, values.length); i++) {
    if (!Number.isFinite(values[i])) continue;
    const x = ((t[i] - from) / span) * SPARK_W;
    const y = SPARK_H - 2 - (values[i] / top) * (SPARK_H - 4);
    points.push(`${x.toFixed(1)},${y.toFixed(1)}`);
  }
  const last = finite.length ? finite[finite.length - 1] : null;
  const title = `${label}: ${last === null ? "no data" : num(last)} now, peak ${num(finite.length ? top : null)}`;
  svg.setAttribute("aria-label", title);
  svg.replaceChildren(
    s("title", { text: title }),
    s("line", { class: "axis", x1: 0, y1: SPARK_H - 0.5, x2: SPARK_W, y2: SPARK_H - 0.5 }),
    points.length > 1
      ? s("polyline", { class: "spark", points: points.join(" ") })
      : s("text", { class: "empty", x: SPARK_W / 2, y: SPARK_H / 2 + 4, "text-anchor": "middle", text: points.length ? num(last) : "no data" }),
  );
}

const BIG = 1e300; // mlrun pads a histogram with +-sys.float_info.max edges
const HIST_W = 168;
const HIST_H = 44;

/**
 * The histogram with two empty outer bins (below and above the reference's range),
 * so reference and current have the same bins; an already padded one is kept
 * (its infinite edges may have been written as null). Same maths as the drift page.
 */
export function padded(counts, edges) {
  if (!Array.isArray(edges) || edges.length === 0) return [Array.from(counts || [], Number), []];
  const low = edges[0] === null ? -Infinity : Number(edges[0]);
  const high = edges[edges.length - 1] === null ? Infinity : Number(edges[edges.length - 1]);
  const inner = edges.slice(1, -1).filter((e) => e !== null).map(Number);
  if (low <= -BIG && high >= BIG) return [counts.map(Number), [low, ...inner, high]];
  return [[0, ...counts.map(Number), 0], [-Infinity, low, ...inner, high, Infinity]];
}

/** Counts as shares of their total. */
export function shares(counts) {
  const total = counts.reduce((a, b) => a + b, 0);
  return counts.map((c) => (total > 0 ? c / total : 0));
}

function binLabel(edges, i) {
  if (i + 1 >= edges.length) return `bin ${i + 1}`;
  const [low, high] = [edges[i], edges[i + 1]];
  if (low <= -BIG) return `below ${num(high)}`;
  if (high >= BIG) return `above ${num(low)}`;
  return `${num(low)} to ${num(high)}`;
}

/** A bar per bin, heights on the common scale `top`; kind "ref" or "cur". */
export function histogram(values, edges, top, kind, label) {
  const n = values.length;
  const width = HIST_W / Math.max(n, 1);
  const svg = s("svg", {
    class: ["hist", kind],
    width: HIST_W,
    height: HIST_H,
    viewBox: `0 0 ${HIST_W} ${HIST_H}`,
    role: "img",
    "aria-label": label,
  });
  svg.append(s("title", { text: label }));
  if (n > 2) {
    for (const i of [0, n - 1]) svg.append(s("rect", { class: "outside", x: (i * width).toFixed(2), y: 0, width: width.toFixed(2), height: HIST_H }));
  }
  values.forEach((share, i) => {
    const height = (share / (top || 1)) * (HIST_H - 2);
    svg.append(
      s(
        "rect",
        { class: "bar", x: (i * width + 0.5).toFixed(2), y: (HIST_H - height).toFixed(2), width: Math.max(width - 1, 0.5).toFixed(2), height: height.toFixed(2) },
        s("title", { text: `${binLabel(edges, i)}: ${(share * 100).toFixed(1)}%` }),
      ),
    );
  });
  svg.append(s("line", { class: "axis", x1: 0, y1: HIST_H - 0.5, x2: HIST_W, y2: HIST_H - 0.5 }));
  return svg;
}
