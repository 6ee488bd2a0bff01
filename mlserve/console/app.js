// The console's entry module: the header, the login form and a hash router over
// the views (#/models, #/try/<name>[/<version>], #/graph, #/monitoring[/<uid>]).

import { ApiError, getJSON, setToken, token } from "./api.js";
import { h, notice, replace } from "./dom.js";
import { renderGraph } from "./graph.js";
import { renderModels } from "./models.js";
import { renderMonitoring } from "./monitoring.js";
import { renderTry } from "./tryit.js";

const main = document.querySelector("main");
const ctx = { overview: null };
let cleanup = () => {};
let showingLogin = false;

function parseRoute() {
  const parts = window.location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map((p) => {
    try {
      return decodeURIComponent(p);
    } catch {
      return p;
    }
  });
  const view = parts[0] || "models";
  return { view: ["models", "try", "graph", "monitoring"].includes(view) ? view : "models", args: parts.slice(1) };
}

function setView(name) {
  main.setAttribute("data-view", name);
  for (const link of document.querySelectorAll("a[data-nav]")) {
    const current = link.getAttribute("data-nav") === (name === "try" ? "models" : name);
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function showHeader(server) {
  document.querySelector("[data-server-name]").textContent = server.name || "mlserve";
  document.querySelector("[data-server-version]").textContent = server.version ? `v${server.version}` : "";
  const facts = [server.function && `function ${server.function}`, server.project && `project ${server.project}`, server.auth ? "auth on" : "auth off"];
  document.querySelector("[data-server-facts]").textContent = facts.filter(Boolean).join(" \u00b7 ");
  document.title = `${server.function || server.name || "mlserve"} - mlserve console`;
}

function showLogout() {
  document.querySelector("button[data-logout]").hidden = !token();
}

function showLogin(message) {
  cleanup();
  cleanup = () => {};
  showingLogin = true;
  setView("login");
  showLogout();
  const input = h("input", { type: "password", name: "token", id: "token", autocomplete: "current-password", required: true });
  const form = h(
    "form",
    { "data-login": "", class: "panel login" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "This server needs a token. It is kept for this browser tab only and sent as a bearer header."),
    message ? notice(message, "error") : null,
    h("label", { for: "token" }, "Token"),
    input,
    h("button", { type: "submit" }, "Sign in"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    showingLogin = false;
    route();
  });
  replace(main, form);
  input.focus();
}

async function route() {
  cleanup();
  cleanup = () => {};
  const { view, args } = parseRoute();
  setView(view);
  showLogout();
  if (view !== "try" || !ctx.overview) replace(main, h("p", { class: "muted" }, "Loading..."));
  try {
    if (view === "models" || !ctx.overview) {
      ctx.overview = await getJSON("/console/api/overview");
      showHeader(ctx.overview.server);
    }
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      if (!showingLogin) showLogin(token() ? "The token was refused." : "");
      return;
    }
    replace(main, notice(`The server could not be read: ${error.message}`, "error"));
    return;
  }
  if (parseRoute().view !== view) return; // the hash moved on while we waited
  showingLogin = false;
  if (view === "models") cleanup = renderModels(main, ctx);
  else if (view === "try") cleanup = renderTry(main, ctx, args[0] || "", args[1] || "");
  else if (view === "graph") cleanup = renderGraph(main, ctx);
  else cleanup = renderMonitoring(main, ctx, args[0] || "");
}

window.addEventListener("mlserve:login", () => {
  if (!showingLogin) showLogin(token() ? "The token was refused." : "");
});
window.addEventListener("hashchange", route);
document.querySelector("button[data-logout]").addEventListener("click", () => {
  setToken("");
  ctx.overview = null;
  route();
});
route();
