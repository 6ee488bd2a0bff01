// The try-it view: a request pre-filled from /console/api/sample, sent to the
// model's V2 route (or an image file to the TF Serving :predict route), or to its
// explain route with the SHAP values drawn (explain.js), and the same call as curl /
// requests / tritonclient / TF Serving snippets.

import { call, getJSON, seg, token } from "./api.js";
import { h, notice, pretty, replace } from "./dom.js";
import { explanationOf, explanationPanel } from "./explain.js";
import * as snippets from "./snippets.js";

function findModel(overview, name, version) {
  const models = overview.models.filter((m) => m.name === name);
  return models.find((m) => (version ? m.version === version : true)) || null;
}

function shown(answer) {
  if (!answer.ok && answer.message) return answer.message;
  if (answer.data !== null) return pretty(answer.data);
  return answer.text;
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false; // no clipboard permission (plain http, headless): the snippet is shown anyway
  }
}

/** Render the view for #/try/<name>[/<version>]; returns its (empty) cleanup. */
export function renderTry(main, ctx, name, version) {
  const model = findModel(ctx.overview, name, version);
  const title = version ? `${name} version ${version}` : name;
  const body = h("textarea", { "data-tryit-body": "", id: "tryit-body", rows: 14, spellcheck: "false", class: "code" });
  const send = h("button", { type: "button", "data-tryit-send": "" }, "Send");
  const explain = model && model.explains ? h("button", { type: "button", class: "secondary", "data-tryit-explain": "" }, "Explain") : null;
  const explained = h("section", { class: "panel", "data-tryit-explained": "", hidden: true }, h("h2", {}, "Explanation"));
  const status = h("span", { "data-tryit-status": "", class: "badge idle" }, "-");
  const time = h("span", { "data-tryit-time": "" }, "-");
  const response = h("pre", { "data-tryit-response": "", class: "code response", tabindex: "0", role: "region", "aria-label": "Response" }, "Send the request to see the answer.");
  const snippet = h("pre", { "data-snippet": "", class: "code snippet", tabindex: "0", role: "region", "aria-label": "Snippet" });
  const copyNote = h("span", { class: "muted", role: "status" });
  const file = model && model.image ? h("input", { type: "file", accept: "image/*", "data-tryit-file": "", id: "tryit-file" }) : null;
  let sample = null;

  const copies = h("div", { class: "copies" });
  replace(
    main,
    h("div", { class: "view-head" }, h("h1", {}, "Try ", h("code", {}, title)), h("a", { href: "#/models" }, "Back to models")),
    model ? null : notice(`No model named ${title} in the overview; the request may still be answered.`, "warn"),
    h(
      "div",
      { class: "tryit-grid" },
      h(
        "section",
        { class: "panel" },
        h("label", { for: "tryit-body" }, "Request body (V2 inference request, JSON)"),
        body,
        file ? h("div", { class: "file" }, h("label", { for: "tryit-file" }, "Or an image file (sent as multipart to the TF Serving :predict route)"), file) : null,
        h("div", { class: "send" }, send, explain, h("span", {}, "Status ", status), h("span", {}, "Time ", time, " ms")),
      ),
      h("section", { class: "panel" }, h("h2", {}, "Response"), response),
    ),
    explained,
    h("section", { class: "panel" }, h("h2", {}, "The same call as code"), copies, copyNote, snippet),
  );

  function parsed() {
    try {
      return { value: JSON.parse(body.value) };
    } catch (error) {
      return { error: `The request body is not valid JSON: ${error.message}` };
    }
  }

  function v2Path() {
    if (sample && sample.path) return sample.path;
    return version ? `/v2/models/${seg(name)}/versions/${seg(version)}/infer` : `/v2/models/${seg(name)}/infer`;
  }

  function predictPath() {
    if (sample && sample.tfserving && sample.tfserving.path) return sample.tfserving.path;
    return version ? `/v1/models/${seg(name)}/versions/${seg(version)}:predict` : `/v1/models/${seg(name)}:predict`;
  }

  function explainPath() {
    return v2Path().replace(/\/infer$/, "/explain");
  }

  function started() {
    send.disabled = true;
    if (explain) explain.disabled = true;
    status.className = "badge idle";
    status.textContent = "...";
    time.textContent = "-";
  }

  function finished(answer) {
    send.disabled = false;
    if (explain) explain.disabled = false;
    status.textContent = answer.status ? String(answer.status) : "no answer";
    status.className = `badge ${answer.ok ? "ok" : answer.status >= 500 || answer.status === 0 ? "bad" : "warn"}`;
    time.textContent = answer.ms.toFixed(1);
    response.textContent = shown(answer);
  }

  async function onExplain() {
    const request = parsed();
    if (request.error) {
      response.textContent = request.error;
      return;
    }
    started();
    const answer = await call(explainPath(), { method: "POST", json: body.value });
    finished(answer);
    const found = answer.ok ? explanationOf(answer.data) : null;
    explained.hidden = !answer.ok;
    replace(
      explained,
      h("h2", {}, "Explanation"),
      found ? explanationPanel(found) : notice("The answer holds no SHAP values to draw: see the response above.", "warn"),
    );
  }

  async function onSend() {
    started();
    let answer;
    const chosen = file && file.files && file.files[0];
    if (chosen) {
      const form = new FormData();
      form.append((model.inputs[0] && model.inputs[0].name) || "image", chosen, chosen.name);
      answer = await call(predictPath(), { method: "POST", body: form });
    } else {
      const request = parsed();
      if (request.error) {
        send.disabled = false;
        if (explain) explain.disabled = false;
        status.textContent = "-";
        response.textContent = request.error;
        return;
      }
      answer = await call(v2Path(), { method: "POST", json: body.value });
    }
    finished(answer);
  }

  function snippetFor(kind) {
    const origin = window.location.origin;
    const bearer = token();
    if (kind === "tfserving") return snippets.curl(origin + predictPath(), sample.tfserving.body, bearer);
    const request = parsed();
    if (request.error) return request.error;
    if (kind === "curl") return snippets.curl(origin + v2Path(), request.value, bearer);
    if (kind === "requests") return snippets.requests(origin + v2Path(), request.value, bearer);
    return snippets.tritonclient(origin, name, version, request.value, bearer);
  }

  async function onCopy(event) {
    const button = event.target.closest("button[data-copy]");
    if (!button) return;
    const text = snippetFor(button.getAttribute("data-copy"));
    snippet.textContent = text;
    copyNote.textContent = (await copyText(text)) ? `${button.textContent} copied to the clipboard.` : `${button.textContent}: select and copy the text below.`;
  }

  function showCopies() {
    const kinds = [
      ["curl", "curl"],
      ["requests", "Python requests"],
      ["tritonclient", "Python tritonclient"],
    ];
    if (sample && sample.tfserving) kinds.push(["tfserving", "TF Serving (curl)"]);
    replace(copies, kinds.map(([kind, label]) => h("button", { type: "button", class: "secondary", "data-copy": kind }, label)));
  }

  send.addEventListener("click", onSend);
  if (explain) explain.addEventListener("click", onExplain);
  copies.addEventListener("click", onCopy);
  showCopies();
  const samplePath = version ? `/console/api/sample/${seg(name)}/versions/${seg(version)}` : `/console/api/sample/${seg(name)}`;
  let stopped = false;
  getJSON(samplePath)
    .then((answer) => {
      if (stopped) return;
      sample = answer;
      body.value = pretty(answer.body);
      showCopies();
    })
    .catch((error) => {
      if (!stopped && error.status !== 401) main.insertBefore(notice(`No sample request: ${error.message}`, "warn"), main.children[1]);
    });
  return () => {
    stopped = true;
  };
}
