// Tiny DOM helpers. Every value shown from data goes through textContent or
// setAttribute, never parsed as HTML, so a hostile model name or record shows as text.

const SVG_NS = "http://www.w3.org/2000/svg";

function fill(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    else if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element: h("td", {class: "x", "data-field": "state"}, "text", otherNode). */
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element, built like h(). */
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** Replace all children of node. */
export function replace(node, ...children) {
  node.replaceChildren();
  return fill(node, {}, children);
}

/** A number for a table: 4 significant digits, whole above 10,000, "-" for none. */
export function num(value) {
  if (value === null || value === undefined || value === "") return "-";
  const n = Number(value);
  if (Number.isNaN(n)) return "-";
  if (!Number.isFinite(n)) return n > 0 ? "inf" : "-inf";
  if (Math.abs(n) >= 1e4 && Math.abs(n) < 1e15) return Math.round(n).toLocaleString("en-US");
  if (n === 0) return "0";
  return String(Number(n.toPrecision(4)));
}

/** Milliseconds from microseconds, 3 significant digits. */
export function ms(microseconds) {
  const n = Number(microseconds);
  if (microseconds === null || microseconds === undefined || !Number.isFinite(n)) return "-";
  return `${Number((n / 1000).toPrecision(3))} ms`;
}

/** A tensor's shape as [1, 4]. */
export function shape(dims) {
  return Array.isArray(dims) ? `[${dims.join(", ")}]` : "[]";
}

/** A notice paragraph. */
export function notice(text, kind = "info") {
  return h("p", { class: ["notice", kind], role: kind === "error" ? "alert" : "status" }, text);
}

/** JSON indented by two spaces, with arrays of numbers and strings kept on one line. */
export function pretty(value, indent = "") {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  const inner = `${indent}  `;
  if (Array.isArray(value)) {
    if (value.every((v) => v === null || typeof v !== "object")) return JSON.stringify(value).replaceAll(",", ", ");
    return `[\n${value.map((v) => inner + pretty(v, inner)).join(",\n")}\n${indent}]`;
  }
  const entries = Object.entries(value);
  if (!entries.length) return "{}";
  return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${pretty(v, inner)}`).join(",\n")}\n${indent}}`;
}
