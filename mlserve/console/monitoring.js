// The monitoring view: endpoint records with their drift status, and per endpoint
// the reference and current histograms of each feature on the same padded edges
// (the drift page's maths: mlserve/monitoring/drift_page.py), its measures coloured
// by status, the last window's errors and latency, and the model's last records.

import { getJSON, seg } from "./api.js";
import { histogram, padded, shares } from "./charts.js";
import { h, ms, notice, num, replace } from "./dom.js";

const POSSIBLE = 0.5; // the drift thresholds (DriftThresholds' defaults)
const DETECTED = 0.7;
const STATUS = {
  NO_DRIFT: ["ok", "no drift"],
  POSSIBLE_DRIFT: ["warn", "possible drift"],
  DRIFT_DETECTED: ["bad", "drift detected"],
};

function level(value) {
  if (value === null || value === undefined) return Number.NaN;
  return Number(value);
}

/** ok / warn / bad for a measure (an infinite kld, written null, is bad). */
export function statusClass(value, infiniteWhenNull = false) {
  const n = value === null && infiniteWhenNull ? Infinity : level(value);
  if (Number.isNaN(n)) return "none";
  if (n >= DETECTED) return "bad";
  if (n >= POSSIBLE) return "warn";
  return "ok";
}

function badge(code) {
  const [cls, words] = STATUS[code] || ["idle", code || "not monitored"];
  return h("span", { class: ["badge", cls], "data-status": code || "" }, words);
}

function latency(window) {
  if (!window || (window.latency_p50_us === undefined && window.latency_p99_us === undefined)) return "-";
  return `p50 ${ms(window.latency_p50_us)} \u00b7 p99 ${ms(window.latency_p99_us)}`;
}

function when(value) {
  if (!value) return "-";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function histograms(stats) {
  return Object.keys(stats || {}).filter((name) => {
    const value = stats[name];
    return value && typeof value === "object" && Array.isArray(value.hist) && value.hist.length === 2;
  });
}

function noStore() {
  return notice("This server keeps no endpoint records: start it with --track (or --monitor) to see endpoints and their drift here.", "warn");
}

/** #/monitoring: the endpoints table. */
function renderList(main, ctx, guard) {
  const { server } = ctx.overview;
  const holder = h("div", {}, h("p", { class: "muted" }, "Loading the endpoints..."));
  replace(
    main,
    h("div", { class: "view-head" }, h("h1", {}, "Monitoring"), h("p", { class: "muted" }, `Project ${server.project}`)),
    server.monitor ? null : notice("No drift monitor runs in this server (start it with --monitor): the drift status stays empty.", "info"),
    holder,
  );
  if (!server.store) {
    replace(holder, noStore());
    return;
  }
  getJSON(`/api/v1/projects/${seg(server.project)}/model-endpoints`)
    .then((answer) => {
      if (guard.stopped) return;
      const endpoints = (answer && answer.endpoints) || [];
      if (!endpoints.length) {
        replace(holder, notice("No endpoint records yet: they appear once a tracked model is called."));
        return;
      }
      const head = ["model", "function", "class", "drift", "requests", "errors", "last window latency", "last request"];
      replace(
        holder,
        h(
          "table",
          { class: "endpoints" },
          h("caption", { class: "visually-hidden" }, "Model endpoints"),
          h("thead", {}, h("tr", {}, head.map((c) => h("th", { scope: "col" }, c)))),
          h(
            "tbody",
            {},
            endpoints.map((e) =>
              h(
                "tr",
                { "data-endpoint": e.metadata.uid },
                h("th", { scope: "row" }, h("a", { href: `#/monitoring/${seg(e.metadata.uid)}` }, e.spec.model)),
                h("td", {}, h("code", {}, e.spec.function_uri)),
                h("td", {}, e.spec.model_class || "-"),
                h("td", { "data-field": "drift_status" }, badge(e.status.drift_status)),
                h("td", { "data-field": "requests", class: "number" }, num((e.status.metrics || {}).requests || 0)),
                h("td", { "data-field": "errors", class: "number" }, num(e.status.error_count || 0)),
                h("td", { "data-field": "latency" }, latency(e.status.window)),
                h("td", {}, when(e.status.last_request)),
              ),
            ),
          ),
        ),
      );
    })
    .catch((error) => {
      if (!guard.stopped) replace(holder, notice(`The endpoints could not be read: ${error.message}`, "error"));
    });
}

function measureCell(measures, key) {
  const value = measures[key];
  const infinite = key === "kld";
  const cls = statusClass(value, infinite && key in measures);
  const text = value === null && infinite && key in measures ? "inf" : num(value);
  return h("td", { "data-measure": key, class: ["number", "measure", cls], "data-status": cls }, text);
}

function featureRow(name, refStats, curStats, measures) {
  const [refCounts, refEdges] = padded(refStats.hist[0] || [], refStats.hist[1] || []);
  const curHist = curStats && Array.isArray(curStats.hist) && curStats.hist.length === 2 ? curStats.hist : null;
  const [curCounts, curEdges] = curHist ? padded(curHist[0] || [], curHist[1] || []) : [[], []];
  const refShares = shares(refCounts);
  const curShares = shares(curCounts);
  const top = Math.max(...refShares, ...curShares, 0) || 1;
  const inner = refEdges.filter((e) => Number.isFinite(e));
  const range = inner.length ? h("div", { class: "range" }, h("span", {}, num(inner[0])), h("span", {}, num(inner[inner.length - 1]))) : null;
  const m = measures && typeof measures === "object" ? measures : {};
  const tvd = Number(m.tvd);
  const hellinger = Number(m.hellinger);
  const both = m.tvd !== null && m.hellinger !== null && Number.isFinite(tvd) && Number.isFinite(hellinger);
  const drift = both ? (tvd + hellinger) / 2 : null;
  const stats = (v) => (v && typeof v === "object" && "mean" in v ? `${num(v.mean)} \u00b1 ${num(v.std)}` : "-");
  return h(
    "tr",
    { "data-feature": name },
    h("th", { scope: "row" }, name),
    h("td", { class: "chart" }, histogram(refShares, refEdges, top, "ref", `reference histogram of ${name}`), range),
    h("td", { class: "chart" }, curHist ? histogram(curShares, curEdges, top, "cur", `current histogram of ${name}`) : h("span", { class: "muted" }, "no data"), range ? range.cloneNode(true) : null),
    h("td", { class: "stats" }, stats(refStats), h("br"), stats(curStats)),
    measureCell(m, "tvd"),
    measureCell(m, "hellinger"),
    measureCell(m, "kld"),
    h("td", { class: ["number", "measure", statusClass(drift)], "data-drift": "" }, num(drift)),
  );
}

function pairs(rows) {
  return h("dl", { class: "pairs" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function recordCell(value) {
  if (value === undefined) return "-";
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 160 ? `${text.slice(0, 159)}\u2026` : text;
}

function recordsPanel(model, guard) {
  const filter = h("input", { type: "search", "data-records-filter": "", id: "records-filter", placeholder: "text in a record", autocomplete: "off" });
  const table = h("table", { "data-records": "", class: "records" });
  const note = h("p", { class: "muted", role: "status" });
  let records = [];
  let timer = null;

  function show() {
    const needle = filter.value.trim().toLowerCase();
    const shown = needle ? records.filter((r) => JSON.stringify(r).toLowerCase().includes(needle)) : records;
    replace(
      table,
      h("caption", { class: "visually-hidden" }, `Last records of ${model}`),
      h("thead", {}, h("tr", {}, ["when", "op", "microsec", "request", "response", "error"].map((c) => h("th", { scope: "col" }, c)))),
      h(
        "tbody",
        {},
        shown.map((r) =>
          h(
            "tr",
            { "data-record": "" },
            h("td", { class: "when" }, recordCell(r.when)),
            h("td", {}, recordCell(r.op)),
            h("td", { class: "number" }, recordCell(r.microsec)),
            h("td", {}, h("code", {}, recordCell(r.request))),
            h("td", {}, h("code", {}, recordCell(r.resp))),
            h("td", { class: r.error ? "bad-text" : "" }, r.error ? recordCell(r.error) : ""),
          ),
        ),
      ),
    );
    note.textContent = `${shown.length} of ${records.length} records shown.`;
  }

  async function load() {
    const q = filter.value.trim();
    try {
      const answer = await getJSON(`/console/api/records?model=${seg(model)}&n=100${q ? `&q=${seg(q)}` : ""}`);
      if (guard.stopped) return;
      records = Array.isArray(answer.records) ? answer.records : [];
      show();
      if (answer.source === "none") note.textContent = "No records: tracking is off in this server (start it with --track).";
    } catch (error) {
      if (!guard.stopped) note.textContent = `The records could not be read: ${error.message}`;
    }
  }

  filter.addEventListener("input", () => {
    show();
    clearTimeout(timer);
    timer = setTimeout(load, 300);
  });
  load();
  return h(
    "section",
    { class: "panel" },
    h("h2", {}, "Last records of ", h("code", {}, model)),
    h("label", { for: "records-filter" }, "Filter"),
    filter,
    note,
    h("div", { class: "scroll" }, table),
  );
}

function modelOf(ctx, endpoint) {
  const known = ctx.overview.models.find((m) => m.endpoint_uid === endpoint.metadata.uid);
  if (known) return known.name;
  const spec = String(endpoint.spec.model || "");
  const colon = spec.lastIndexOf(":");
  return colon > 0 ? spec.slice(0, colon) : spec;
}

/** #/monitoring/<uid>: one endpoint's drift. */
function renderEndpoint(main, ctx, uid, guard) {
  const { server } = ctx.overview;
  const holder = h("div", {}, h("p", { class: "muted" }, "Loading the endpoint..."));
  replace(main, h("div", { class: "view-head" }, h("h1", {}, "Endpoint"), h("a", { href: "#/monitoring" }, "All endpoints")), holder);
  if (!server.store) {
    replace(holder, noStore());
    return;
  }
  getJSON(`/api/v1/projects/${seg(server.project)}/model-endpoints/${seg(uid)}`)
    .then((e) => {
      if (guard.stopped) return;
      const status = e.status || {};
      const window = status.window || {};
      const measures = status.drift_measures || {};
      const reference = histograms(e.spec.feature_stats);
      const parts = [
        h("h2", {}, h("code", {}, e.spec.model), " ", badge(status.drift_status)),
        h(
          "div",
          { class: "cards" },
          pairs([
            ["uid", h("code", {}, e.metadata.uid)],
            ["function", h("code", {}, e.spec.function_uri)],
            ["class", e.spec.model_class || "-"],
            ["requests", `${num((status.metrics || {}).requests || 0)} (${num(status.error_count || 0)} errors)`],
          ]),
          Object.keys(window).length
            ? pairs([
                ["window", `${when(window.start)} to ${when(window.end)}`],
                ["window requests", `${num(window.requests)} (${num(window.errors)} errors, ${num(window.late)} late)`],
                ["latency", `mean ${ms(window.latency_mean_us)} \u00b7 p50 ${ms(window.latency_p50_us)} \u00b7 p99 ${ms(window.latency_p99_us)}`],
              ])
            : null,
          pairs([
            ["general drift", num(measures.general_drift)],
            ["tvd mean", num(measures.tvd_mean)],
            ["hellinger mean", num(measures.hellinger_mean)],
            ["kld mean", num(measures.kld_mean)],
          ]),
        ),
      ];
      if (!server.monitor) parts.push(notice("No drift monitor runs in this server (start it with --monitor).", "info"));
      if (!reference.length) parts.push(notice("No reference yet: this model has no reference statistics (feature_stats), so there is nothing to compare its inputs with and no drift is computed.", "warn"));
      if (!Object.keys(window).length) parts.push(notice("No monitored window yet: the monitor has not closed a window of this endpoint.", "info"));
      if (reference.length) {
        parts.push(
          h(
            "p",
            { class: "legend-line" },
            h("span", { class: "swatch ref" }),
            "reference",
            h("span", { class: "swatch cur" }),
            `current window (share of values per bin; grey: outside the reference's range). A feature's drift is the mean of its tvd and hellinger: possible from ${POSSIBLE}, detected from ${DETECTED}.`,
          ),
          h(
            "div",
            { class: "scroll" },
            h(
              "table",
              { class: "features" },
              h("caption", { class: "visually-hidden" }, "Features: reference against the current window"),
              h("thead", {}, h("tr", {}, ["feature", "reference", "current", "mean \u00b1 std (reference, current)", "tvd", "hellinger", "kld", "drift"].map((c) => h("th", { scope: "col" }, c)))),
              h("tbody", {}, reference.map((name) => featureRow(name, e.spec.feature_stats[name], (status.current_stats || {})[name], measures[name]))),
            ),
          ),
        );
      }
      parts.push(recordsPanel(modelOf(ctx, e), guard));
      replace(holder, parts);
    })
    .catch((error) => {
      if (!guard.stopped) replace(holder, notice(`The endpoint could not be read: ${error.message}`, "error"));
    });
}

/** Render #/monitoring[/<uid>]; returns its cleanup. */
export function renderMonitoring(main, ctx, uid) {
  const guard = { stopped: false };
  if (uid) renderEndpoint(main, ctx, uid, guard);
  else renderList(main, ctx, guard);
  return () => {
    guard.stopped = true;
  };
}
