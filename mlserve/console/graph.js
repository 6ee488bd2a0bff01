// The graph view: /console/api/graph (the structure fn.plot() draws) laid out in
// layers from left to right and drawn as SVG in the page; a click shows a node's
// class and parameters. No Graphviz, no library.

import { getJSON } from "./api.js";
import { h, notice, pretty, replace, s } from "./dom.js";

const W = 136;
const H = 46;
const ROUTE_H = 26;
const GAP_X = 52;
const GAP_Y = 36;
const PAD = 28;

function short(text, size = 20) {
  const value = String(text);
  return value.length > size ? `${value.slice(0, size - 1)}\u2026` : value;
}

function sizeOf(node, routes) {
  if (node.kind === "entry") return { w: 48, h: 48 };
  if (node.kind === "router") return { w: W + 20, h: H + 8 + routes.length * (ROUTE_H + 6) };
  return { w: W, h: H };
}

/** Positions {x, y, w, h} by node id: layers by longest path, ordered by barycentre. */
export function layout(graph) {
  const byId = new Map(graph.nodes.map((n) => [n.id, n]));
  const owner = (id) => {
    const node = byId.get(id);
    return node && node.parent && byId.has(node.parent) ? node.parent : id;
  };
  const top = graph.nodes.filter((n) => owner(n.id) === n.id);
  const routes = new Map(top.map((n) => [n.id, graph.nodes.filter((r) => r.parent === n.id && r.id !== n.id)]));
  const links = graph.edges
    .map((e) => [owner(e.from), owner(e.to)])
    .filter(([a, b]) => a !== b && byId.has(a) && byId.has(b));
  const layer = new Map(top.map((n) => [n.id, 0]));
  for (let round = 0; round < top.length; round++) {
    let changed = false;
    for (const [a, b] of links) {
      const next = Math.min(layer.get(a) + 1, top.length - 1);
      if (next > layer.get(b)) {
        layer.set(b, next);
        changed = true;
      }
    }
    if (!changed) break;
  }
  const columns = [];
  for (const node of top) (columns[layer.get(node.id)] ||= []).push(node);
  const order = new Map();
  const positions = new Map();
  let x = PAD;
  let height = 0;
  const stacks = [];
  columns.forEach((column = [], index) => {
    if (index > 0) {
      const rank = (n) => {
        const parents = links.filter(([, b]) => b === n.id).map(([a]) => order.get(a)).filter((v) => v !== undefined);
        return parents.length ? parents.reduce((p, q) => p + q, 0) / parents.length : Infinity;
      };
      column.sort((a, b) => rank(a) - rank(b));
    }
    column.forEach((n, i) => order.set(n.id, i));
    const sizes = column.map((n) => sizeOf(n, routes.get(n.id)));
    const width = Math.max(0, ...sizes.map((z) => z.w));
    const total = sizes.reduce((sum, z) => sum + z.h, 0) + GAP_Y * Math.max(column.length - 1, 0);
    stacks.push({ column, sizes, x, width, total });
    height = Math.max(height, total);
    x += width + GAP_X;
  });
  for (const { column, sizes, x: left, width, total } of stacks) {
    let y = PAD + (height - total) / 2;
    column.forEach((n, i) => {
      const { w, h: tall } = sizes[i];
      // a router's own box is a step's height; its routes hang below it, in its frame
      positions.set(n.id, { x: left + (width - w) / 2, y, w, h: Math.min(tall, n.kind === "router" ? H : tall), right: left + width });
      routes.get(n.id).forEach((r, k) => {
        positions.set(r.id, { x: left + (width - w) / 2 + 10, y: y + H + 8 + k * (ROUTE_H + 6), w: w - 20, h: ROUTE_H });
      });
      y += tall + GAP_Y;
    });
  }
  return { positions, routes, top, width: x - GAP_X + PAD, height: height + 2 * PAD };
}

function shapeOf(node, w, tall) {
  const label = s("text", { x: w / 2, y: tall / 2 + 5, "text-anchor": "middle", class: "label" }, short(node.label));
  switch (node.kind) {
    case "entry":
      return [s("circle", { cx: w / 2, cy: tall / 2, r: w / 2 - 2, class: "shape" }), s("text", { x: w / 2, y: tall / 2 + 4, "text-anchor": "middle", class: "label small" }, short(node.label, 7))];
    case "router":
      return [s("path", { d: `M0,${tall} V0 H46 L54,7 H${w} V${tall} Z`, class: "shape" }), s("text", { x: w / 2, y: tall / 2 + 8, "text-anchor": "middle", class: "label" }, short(node.label))];
    case "queue":
      return [
        s("path", { d: `M0,7 A${w / 2},7 0 0 0 ${w},7 V${tall - 7} A${w / 2},7 0 0 1 0,${tall - 7} Z`, class: "shape" }),
        s("ellipse", { cx: w / 2, cy: 7, rx: w / 2, ry: 7, class: "shape top" }),
        s("text", { x: w / 2, y: tall / 2 + 9, "text-anchor": "middle", class: "label" }, short(node.label)),
      ];
    case "error": {
      const c = 12;
      const points = [[c, 0], [w - c, 0], [w, c], [w, tall - c], [w - c, tall], [c, tall], [0, tall - c], [0, c]];
      return [s("polygon", { points: points.map((p) => p.join(",")).join(" "), class: "shape" }), label];
    }
    case "route":
      return [s("rect", { width: w, height: tall, rx: 12, class: "shape" }), s("text", { x: w / 2, y: tall / 2 + 4, "text-anchor": "middle", class: "label small" }, short(node.label, 22))];
    default: {
      const shapes = [s("rect", { width: w, height: tall, rx: 6, class: "shape" })];
      if (node.responder) shapes.push(s("rect", { x: 3, y: 3, width: w - 6, height: tall - 6, rx: 4, class: "inner" }));
      return [...shapes, label];
    }
  }
}

function nodeGroup(node, box) {
  return s(
    "g",
    {
      "data-node": node.id,
      class: ["node", `kind-${node.kind}`, node.responder ? "responder" : ""],
      transform: `translate(${box.x.toFixed(1)},${box.y.toFixed(1)})`,
      tabindex: "0",
      role: "button",
      "aria-label": `${node.label} (${node.kind}${node.class ? `, ${node.class}` : ""})`,
    },
    s("title", { text: `${node.label}${node.class ? ` (${node.class})` : ""}` }),
    shapeOf(node, box.w, box.h),
  );
}

function edgePath(a, b, kind, bottom) {
  if (kind === "error") {
    // out of the step, down to one line under the picture, along it, and up to the
    // handler: every error edge shares that line, clear of the next edges
    const [x1, y1] = [a.x + a.w, a.y + a.h - 8];
    const gap = a.right + 14; // in the gap after the step's column, clear of its neighbours
    const [x2, y2] = [b.x + b.w / 2, b.y + b.h];
    return `M${x1},${y1} H${gap} V${bottom} H${x2} V${y2}`;
  }
  const [x1, y1] = [a.x + a.w, a.y + a.h / 2];
  const [x2, y2] = [b.x, b.y + b.h / 2];
  if (x2 > x1) {
    const dx = Math.max((x2 - x1) / 2, 20);
    return `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
  }
  const low = Math.max(a.y + a.h, b.y + b.h) + 20;
  return `M${x1},${y1} C${x1 + 40},${low} ${x2 - 40},${low} ${x2},${y2}`;
}

function frames(graph, positions) {
  const groups = new Map();
  for (const node of graph.nodes) if (node.function && positions.has(node.id)) (groups.get(node.function) || groups.set(node.function, []).get(node.function)).push(positions.get(node.id));
  return [...groups].map(([name, boxes]) => {
    const x = Math.min(...boxes.map((b) => b.x)) - 10;
    const y = Math.min(...boxes.map((b) => b.y)) - 22;
    const right = Math.max(...boxes.map((b) => b.x + b.w)) + 10;
    const bottom = Math.max(...boxes.map((b) => b.y + b.h)) + 10;
    return s("g", { class: "frame" }, s("rect", { x, y, width: right - x, height: bottom - y, rx: 8 }), s("text", { x: x + 8, y: y + 14, class: "label small" }, `function ${short(name, 30)}`));
  });
}

/** The SVG picture of a graph. */
export function drawGraph(graph) {
  const { positions, routes, top, width, height } = layout(graph);
  const svg = s("svg", { "data-graph": "", class: "graph", viewBox: `0 0 ${width} ${height + 40}`, width, height: height + 40, role: "group", "aria-label": `Serving graph (${graph.topology})` });
  svg.append(
    s("defs", {}, ["next", "error", "output"].map((kind) => s("marker", { id: `arrow-${kind}`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse", class: `arrow ${kind}` }, s("path", { d: "M0,0 L10,5 L0,10 Z" })))),
    ...frames(graph, positions),
  );
  const bottom = Math.max(...[...positions.values()].map((b) => b.y + b.h)) + 20;
  const edges = s("g", { class: "edges" });
  const hanging = new Map(); // a router's box with its routes, where its error edge starts
  for (const node of top) {
    const hung = routes.get(node.id).map((r) => positions.get(r.id));
    const box = positions.get(node.id);
    if (hung.length) hanging.set(node.id, { ...box, h: Math.max(...hung.map((b) => b.y + b.h)) + 6 - box.y });
  }
  for (const edge of graph.edges) {
    if (edge.kind === "route") continue; // drawn as the routes inside their router's folder
    const a = edge.kind === "error" ? hanging.get(edge.from) || positions.get(edge.from) : positions.get(edge.from);
    const b = positions.get(edge.to);
    if (!a || !b) continue;
    const kind = ["error", "output"].includes(edge.kind) ? edge.kind : "next";
    edges.append(s("path", { d: edgePath(a, b, kind, bottom), class: ["edge", kind], "marker-end": `url(#arrow-${kind})`, "data-edge": `${edge.from}->${edge.to}` }));
  }
  svg.append(edges);
  for (const node of top) {
    const frame = hanging.get(node.id);
    if (frame) svg.append(s("rect", { class: "routes", x: frame.x, y: frame.y, width: frame.w, height: frame.h, rx: 4 }));
    svg.append(nodeGroup(node, positions.get(node.id)));
    for (const route of routes.get(node.id)) svg.append(nodeGroup(route, positions.get(route.id)));
  }
  return svg;
}

function details(node) {
  const rows = [
    ["kind", node.kind],
    ["class", node.class || "-"],
    ["function", node.function || "(this function)"],
    ["responder", node.responder ? "yes" : "no"],
  ];
  if (node.parent) rows.push(["router", node.parent]);
  const params = node.params && Object.keys(node.params).length ? pretty(node.params) : "(none)";
  return [
    h("h2", {}, node.label),
    h("dl", { class: "pairs" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, h("code", {}, v))])),
    h("h3", {}, "Parameters"),
    h("pre", { class: "code" }, params),
  ];
}

const LEGEND = [
  ["entry", "entry"],
  ["task", "step"],
  ["router", "router and its routes"],
  ["queue", "queue"],
  ["error", "error handler (dashed edges)"],
];

/** Render #/graph; returns its cleanup. */
export function renderGraph(main) {
  let stopped = false;
  const panel = h("aside", { "data-node-details": "", class: "panel details", "aria-live": "polite" }, h("p", { class: "muted" }, "Click a node to see its class and parameters."));
  const holder = h("div", { class: "graph-holder" }, h("p", { class: "muted" }, "Loading the graph..."));
  replace(
    main,
    h("div", { class: "view-head" }, h("h1", {}, "Graph"), h("ul", { class: "legend" }, LEGEND.map(([kind, text]) => h("li", { class: `kind-${kind}` }, text)))),
    h("div", { class: "graph-layout" }, holder, panel),
  );
  getJSON("/console/api/graph")
    .then((graph) => {
      if (stopped) return;
      if (!graph.nodes || graph.nodes.length === 0) {
        replace(holder, notice("This function has no graph steps."));
        return;
      }
      const byId = new Map(graph.nodes.map((n) => [n.id, n]));
      const svg = drawGraph(graph);
      const pick = (event) => {
        const group = event.target.closest("g[data-node]");
        if (!group || (event.type === "keydown" && event.key !== "Enter" && event.key !== " ")) return;
        event.preventDefault();
        event.stopPropagation();
        for (const g of svg.querySelectorAll("g.selected")) g.classList.remove("selected");
        group.classList.add("selected");
        replace(panel, details(byId.get(group.getAttribute("data-node"))));
      };
      svg.addEventListener("click", pick);
      svg.addEventListener("keydown", pick);
      replace(holder, h("p", { class: "muted" }, `Topology: ${graph.topology}`), svg);
    })
    .catch((error) => {
      if (!stopped) replace(holder, notice(`The graph could not be read: ${error.message}`, "error"));
    });
  return () => {
    stopped = true;
  };
}
