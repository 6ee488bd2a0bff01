// The models view: every model and version, its state and settings, and live
// numbers (requests/s, errors/s, p50/p99) polled from /console/api/history.

import { call, getJSON, seg } from "./api.js";
import { sparkline } from "./charts.js";
import { h, notice, num, replace, s, shape } from "./dom.js";

const CHARTS = [
  ["rps", "rps", "requests/s", ""],
  ["errors", "errors", "errors/s", ""],
  ["p50", "p50_ms", "p50", " ms"],
  ["p99", "p99_ms", "p99", " ms"],
];
const STATE_CLASS = { READY: "ok", LOADING: "warn", UNAVAILABLE: "bad", UNLOADED: "idle" };

export function modelKey(model) {
  return `${model.name}:${model.version}`;
}

function tensors(list) {
  if (!Array.isArray(list) || list.length === 0) return "-";
  return h("ul", { class: "tensors" }, list.map((t) => h("li", {}, h("code", {}, t.name), ` ${t.datatype} ${shape(t.shape)}`)));
}

function settings(value) {
  if (!value || typeof value !== "object") return "off";
  return Object.entries(value)
    .map(([k, v]) => `${k} ${typeof v === "object" ? JSON.stringify(v) : v}`)
    .join(", ");
}

function row(model, control) {
  const key = modelKey(model);
  const charts = h(
    "td",
    { class: "live" },
    h(
      "div",
      { class: "charts" },
      CHARTS.map(([chart, , label]) =>
        h(
          "div",
          { class: "mini" },
          h("span", { class: "what" }, label, " ", h("span", { class: "now", "data-now": chart }, "-")),
          s("svg", { "data-chart": chart, class: "spark", "aria-label": label, role: "img" }),
        ),
      ),
    ),
  );
  const tryHref = model.version ? `#/try/${seg(model.name)}/${seg(model.version)}` : `#/try/${seg(model.name)}`;
  const actions = [h("a", { href: tryHref, "data-try": key, class: "button" }, "Try it")];
  if (control) {
    actions.push(
      h("button", { type: "button", "data-load": model.name, class: "secondary", "aria-label": `Load ${model.name}` }, "Load"),
      h("button", { type: "button", "data-unload": model.name, class: "secondary", "aria-label": `Unload ${model.name}` }, "Unload"),
    );
  }
  return h(
    "tr",
    { "data-model": key },
    h("th", { scope: "row", class: "name" }, model.name),
    h(
      "td",
      { class: "version" },
      model.version || "-",
      model.kind && model.kind !== "model" ? h("span", { class: "kind" }, model.kind) : null,
    ),
    h(
      "td",
      { class: "state" },
      h("div", { "data-field": "state" }, h("span", { class: ["badge", STATE_CLASS[model.state] || "idle"] }, model.state || "-")),
      h("div", { "data-field": "reason", class: "reason" }, model.reason || ""),
    ),
    h("td", { "data-field": "platform" }, model.platform || "-"),
    h("td", { "data-field": "inputs" }, tensors(model.inputs)),
    h("td", { "data-field": "outputs" }, tensors(model.outputs)),
    h(
      "td",
      { class: "settings" },
      h("div", {}, h("span", { class: "muted" }, "batching "), h("span", { "data-field": "batching" }, settings(model.batching))),
      h("div", {}, h("span", { class: "muted" }, "concurrency "), h("span", { "data-field": "concurrency" }, settings(model.concurrency))),
    ),
    charts,
    h("td", { class: "actions" }, actions),
  );
}

function drawHistory(table, history) {
  const now = Number(history.now) || Date.now() / 1000;
  const from = now - 900;
  for (const tr of table.querySelectorAll("tr[data-model]")) {
    const series = (history.series || {})[tr.getAttribute("data-model")] || { t: [] };
    for (const [chart, field, label, unit] of CHARTS) {
      const values = (series[field] || []).map((v) => (v === null ? NaN : Number(v)));
      sparkline(tr.querySelector(`svg[data-chart="${chart}"]`), series.t || [], values, from, now, label);
      const last = values.filter(Number.isFinite).pop();
      tr.querySelector(`[data-now="${chart}"]`).textContent = last === undefined ? "-" : `${num(last)}${unit}`;
    }
  }
}

/** Render the view into main; returns the function that stops its polling. */
export function renderModels(main, ctx) {
  const { overview } = ctx;
  const control = overview.server.model_control === "explicit";
  const worker = overview.server.worker;
  const table = h("table", { class: "models" });
  const result = h("p", { "data-control-result": "", class: "control-result", role: "status", "aria-live": "polite" });
  const adminToken = h("input", { type: "password", name: "admin-token", "data-admin-token": "", autocomplete: "off", id: "admin-token" });
  const every = (overview.history && overview.history.every) || 5;

  function fillTable(models) {
    replace(
      table,
      h("caption", { class: "visually-hidden" }, "Models served by this function"),
      h(
        "thead",
        {},
        h("tr", {}, ["model", "version", "state", "platform", "inputs", "outputs", "settings", "last 15 minutes", "actions"].map((c) => h("th", { scope: "col" }, c))),
      ),
      h("tbody", {}, models.map((m) => row(m, control))),
    );
    if (lastHistory) drawHistory(table, lastHistory);
  }
  let lastHistory = null;
  fillTable(overview.models);

  replace(
    main,
    h("div", { class: "view-head" }, h("h1", {}, "Models"), h("p", { class: "muted" }, `Live numbers over the last ${Math.round(((overview.history && overview.history.seconds) || 900) / 60)} minutes, one point every ${every} s.`)),
    worker ? h("p", { class: "notice info", "data-worker": "" }, `Showing the numbers of worker ${worker.index + 1} of ${worker.count}: each worker process keeps its own statistics.`) : null,
    overview.models.length ? null : notice("This function serves no model yet."),
    control
      ? h(
          "div",
          { class: "control" },
          h("label", { for: "admin-token" }, "Admin token for load and unload (optional when your login token is one)"),
          adminToken,
          result,
        )
      : null,
    h("div", { class: "scroll" }, table),
  );

  let timer = null;
  let stopped = false;
  let running = false;

  function showOverview(fresh) {
    const changed = JSON.stringify(fresh.models) !== JSON.stringify(ctx.overview.models);
    ctx.overview = fresh;
    if (changed) fillTable(fresh.models);
  }

  async function refreshOverview() {
    try {
      const fresh = await getJSON("/console/api/overview");
      if (!stopped) showOverview(fresh);
    } catch {
      /* the next tick tries again; a 401 already showed the login form */
    }
  }

  // Each tick reads the history and the overview (states change when a model is
  // loaded, unloaded or fails); the table is rebuilt only when a model changed.
  async function tick() {
    timer = null;
    if (stopped || document.hidden || running) return;
    running = true;
    try {
      const [history, fresh] = await Promise.all([getJSON("/console/api/history"), getJSON("/console/api/overview")]);
      if (!stopped) {
        lastHistory = history;
        showOverview(fresh);
        drawHistory(table, history);
      }
    } catch {
      /* shown again on the next tick */
    }
    running = false;
    if (!stopped && !document.hidden) timer = setTimeout(tick, every * 1000);
  }

  function onVisibility() {
    if (!document.hidden && timer === null && !stopped && !running) tick();
  }

  async function onClick(event) {
    const button = event.target.closest("button[data-load], button[data-unload]");
    if (!button) return;
    const load = button.hasAttribute("data-load");
    const name = button.getAttribute(load ? "data-load" : "data-unload");
    const verb = load ? "load" : "unload";
    result.className = "control-result";
    result.textContent = `${load ? "Loading" : "Unloading"} ${name}...`;
    const bearer = adminToken.value.trim() || undefined;
    const answer = await call(`/v2/repository/models/${seg(name)}/${verb}`, { method: "POST", json: {}, bearer, login: false });
    if (stopped) return;
    if (answer.ok) {
      result.className = "control-result ok";
      result.textContent = `${name}: ${verb}ed (HTTP ${answer.status})`;
    } else {
      result.className = "control-result bad";
      const hint = answer.status === 401 || answer.status === 403 ? " (enter an admin token above)" : "";
      result.textContent = `${name}: ${verb} failed (HTTP ${answer.status}): ${answer.message}${hint}`;
    }
    await refreshOverview();
  }

  main.addEventListener("click", onClick);
  document.addEventListener("visibilitychange", onVisibility);
  tick();
  return () => {
    stopped = true;
    if (timer !== null) clearTimeout(timer);
    main.removeEventListener("click", onClick);
    document.removeEventListener("visibilitychange", onVisibility);
  };
}
