// The try-it view's explanation: a model's SHAP values for one row as a horizontal bar
// per feature (pushing the output up or down from the base value), one chart per
// class with a class picker (docs/explain.md#the-console).

import { h, num, replace, s } from "./dom.js";

const WIDTH = 640;
const LABELS = 190; // the feature names' column
const VALUES = 64; // room for a bar's value beside it
const ROW = 22;

function chunks(values, size) {
  const rows = [];
  for (let i = 0; i < values.length; i += size) rows.push(values.slice(i, i + size));
  return rows;
}

/** The base value of class `index` for row `row`: base_values is [classes] or [rows, classes]. */
function baseOf(base, baseShape, index, row) {
  if (!base.length) return null;
  if (baseShape.length === 2) return base[row * baseShape[1] + index] ?? null;
  return base[index] ?? base[0];
}

function fromTensors(data) {
  const tensors = data.outputs.filter((o) => o && (o.name === "shap_values" || String(o.name).startsWith("shap_values_")));
  if (!tensors.length) return null;
  const baseTensor = data.outputs.find((o) => o && o.name === "base_values");
  const base = baseTensor ? baseTensor.data.map(Number) : [];
  const baseShape = baseTensor ? baseTensor.shape : [];
  const params = data.parameters || {};
  const width = tensors[0].shape[tensors[0].shape.length - 1] || 1;
  const classes = tensors.map((t, index) => {
    const rows = chunks(t.data.map(Number), width);
    return {
      label: t.name === "shap_values" ? "" : t.name.slice("shap_values_".length),
      rows,
      bases: rows.map((_, row) => baseOf(base, baseShape, index, row)),
    };
  });
  return { features: params.feature_names, classes, explainer: params.explainer || "" };
}

function fromRows(outputs) {
  const values = outputs.shap_values;
  const base = Array.isArray(outputs.base_values) ? outputs.base_values : [outputs.base_values];
  const perRow = base.length > 0 && base.every(Array.isArray);
  const named = Array.isArray(values) ? [["", values]] : Object.entries(values || {});
  if (!named.length) return null;
  const classes = named.map(([label, rows], index) => ({
    label,
    rows: rows.map((row) => row.map(Number)),
    bases: rows.map((_, row) => Number((perRow ? base[row] : base)[index] ?? base[0])),
  }));
  return { features: outputs.feature_names, classes, explainer: outputs.explainer || "" };
}

/**
 * The explanation in an explain answer: {features, classes: [{label, rows, bases}],
 * explainer}, from the V2 tensor form or mlrun's row form; null for any other answer
 * (a model's own explain).
 */
export function explanationOf(data) {
  const outputs = data && data.outputs;
  let found = null;
  if (Array.isArray(outputs)) found = fromTensors(data);
  else if (outputs && typeof outputs === "object" && "shap_values" in outputs) found = fromRows(outputs);
  if (!found || !found.classes[0].rows.length) return null;
  const count = found.classes[0].rows[0].length;
  const names = Array.isArray(found.features) && found.features.length === count ? found.features : null;
  found.features = names ? names.map(String) : Array.from({ length: count }, (_, i) => `feature ${i}`);
  return found;
}

/** The bar chart of one row's values: features by decreasing size, a line at zero. */
export function barChart(features, values, label) {
  const order = features.map((_, i) => i).sort((a, b) => Math.abs(values[b]) - Math.abs(values[a]));
  const top = Math.max(...values.map(Math.abs), 1e-12);
  const room = WIDTH - LABELS - 2 * VALUES;
  const zero = LABELS + VALUES + room / 2;
  const scale = room / 2 / top;
  const height = order.length * ROW + 8;
  const svg = s("svg", {
    class: "explain-chart",
    "data-explain-chart": "",
    width: WIDTH,
    height,
    viewBox: `0 0 ${WIDTH} ${height}`,
    role: "img",
    "aria-label": label,
  });
  svg.append(s("title", { text: label }));
  order.forEach((feature, place) => {
    const value = values[feature];
    const y = place * ROW + 4;
    const length = Math.abs(value) * scale;
    const x = value < 0 ? zero - length : zero;
    const end = value < 0 ? x - 4 : x + length + 4;
    svg.append(
      s("text", { class: "feature", "data-feature": features[feature], x: LABELS - 6, y: y + 14, "text-anchor": "end", text: features[feature] }),
      s(
        "rect",
        { class: ["bar", value < 0 ? "neg" : "pos"], "data-value": value, x: x.toFixed(2), y, width: Math.max(length, 0.5).toFixed(2), height: ROW - 6 },
        s("title", { text: `${features[feature]}: ${value < 0 ? "" : "+"}${num(value)}` }),
      ),
      s("text", { class: "value", x: end.toFixed(2), y: y + 14, "text-anchor": value < 0 ? "end" : "start", text: `${value < 0 ? "" : "+"}${num(value)}` }),
    );
  });
  svg.append(s("line", { class: "zero", x1: zero, y1: 0, x2: zero, y2: height }));
  return svg;
}

/** The explanation panel: pickers for the class and the row, the chart, its sum. */
export function explanationPanel(found) {
  const panel = h("div", { class: "explanation", "data-explanation": "" });
  const classPick = h(
    "select",
    { id: "explain-class", "data-explain-class": "" },
    found.classes.map((c, i) => h("option", { value: i }, c.label || "output")),
  );
  const rowPick = h(
    "select",
    { id: "explain-row", "data-explain-row": "" },
    found.classes[0].rows.map((_, i) => h("option", { value: i }, `row ${i + 1}`)),
  );
  const holder = h("div", { class: "chart-holder" });
  const sum = h("p", { class: "muted", "data-explain-sum": "" });

  function draw() {
    const chosen = found.classes[Number(classPick.value) || 0];
    const row = Number(rowPick.value) || 0;
    const values = chosen.rows[row] || [];
    const base = chosen.bases[row];
    const what = chosen.label ? `class ${chosen.label}` : "the output";
    const total = values.reduce((a, b) => a + b, 0);
    replace(holder, barChart(found.features, values, `SHAP values of row ${row + 1} for ${what}`));
    sum.textContent =
      base === null || base === undefined || Number.isNaN(base)
        ? `The bars add up to ${num(total)}.`
        : `Base value ${num(base)} (the average output for ${what}) + the bars (${num(total)}) = ${num(base + total)}.`;
  }

  classPick.addEventListener("change", draw);
  rowPick.addEventListener("change", draw);
  replace(
    panel,
    h(
      "div",
      { class: "pickers" },
      found.classes.length > 1 ? [h("label", { for: "explain-class" }, "Class "), classPick] : null,
      found.classes[0].rows.length > 1 ? [h("label", { for: "explain-row" }, "Row "), rowPick] : null,
      found.explainer ? h("span", { class: "muted" }, `${found.explainer} explainer`) : null,
    ),
    h("p", { class: "legend-line" }, h("span", { class: "swatch pos" }), "pushes the output up", h("span", { class: "swatch neg" }), "pushes it down"),
    holder,
    sum,
  );
  draw();
  return panel;
}
