// Calls to the server on this page's origin, with the tab's bearer token.
// A 401 from any call dispatches "mlserve:login" so the app shows its login form.

const TOKEN_KEY = "mlserve.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** The headers of an API call: the bearer token when one is set. */
export function authHeaders(extra = {}, bearer = token()) {
  return bearer ? { ...extra, Authorization: `Bearer ${bearer}` } : { ...extra };
}

/** Why a call failed: its status and the server's message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function messageOf(data, text, status) {
  if (data && typeof data === "object" && typeof data.error === "string") return data.error;
  if (data && typeof data === "object" && typeof data.detail === "string") return data.detail;
  return text.trim() || `HTTP ${status}`;
}

/**
 * One call: {status, ok, data (parsed JSON or null), text, ms, message}.
 * Network failures answer status 0. `login: false` keeps a 401 local (load/unload).
 */
export async function call(path, { method = "GET", body, json, headers = {}, bearer, login = true } = {}) {
  const init = { method, headers: authHeaders(headers, bearer === undefined ? token() : bearer), cache: "no-store" };
  if (json !== undefined) {
    init.body = typeof json === "string" ? json : JSON.stringify(json);
    init.headers["Content-Type"] = "application/json";
  } else if (body !== undefined) {
    init.body = body;
  }
  const start = performance.now();
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    const elapsed = performance.now() - start;
    return { status: 0, ok: false, data: null, text: "", ms: elapsed, message: `the server did not answer (${error.message})` };
  }
  const text = await response.text();
  const elapsed = performance.now() - start;
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (response.status === 401 && login) window.dispatchEvent(new CustomEvent("mlserve:login"));
  const message = response.ok ? "" : messageOf(data, text, response.status);
  return { status: response.status, ok: response.ok, data, text, ms: elapsed, message };
}

/** The JSON of a GET, or an ApiError. */
export async function getJSON(path) {
  const answer = await call(path);
  if (!answer.ok) throw new ApiError(answer.status, answer.message);
  return answer.data;
}

/** A path segment, escaped for a URL. */
export function seg(value) {
  return encodeURIComponent(String(value));
}
