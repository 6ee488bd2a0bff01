// The same call as code: curl, Python requests, tritonclient.http and TF Serving's
// REST form, for the exact body in the try-it form (with the token when set).

function shellQuote(text) {
  return `'${String(text).replaceAll("'", "'\\''")}'`;
}

/** A JSON value as a Python literal (None/True/False; strings as JSON escapes them). */
export function pyLiteral(value, indent = "") {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number") return Number.isFinite(value) ? JSON.stringify(value) : value > 0 ? 'float("inf")' : 'float("-inf")';
  if (typeof value === "string") return JSON.stringify(value);
  const inner = `${indent}    `;
  if (Array.isArray(value)) {
    if (value.every((v) => v === null || typeof v !== "object")) return `[${value.map((v) => pyLiteral(v)).join(", ")}]`;
    return `[\n${value.map((v) => `${inner}${pyLiteral(v, inner)},`).join("\n")}\n${indent}]`;
  }
  const entries = Object.entries(value);
  if (entries.length === 0) return "{}";
  return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${pyLiteral(v, inner)},`).join("\n")}\n${indent}}`;
}

const NUMPY = {
  BOOL: "np.bool_",
  UINT8: "np.uint8",
  UINT16: "np.uint16",
  UINT32: "np.uint32",
  UINT64: "np.uint64",
  INT8: "np.int8",
  INT16: "np.int16",
  INT32: "np.int32",
  INT64: "np.int64",
  FP16: "np.float16",
  FP32: "np.float32",
  FP64: "np.float64",
  BYTES: "np.object_",
};

export function curl(url, body, bearer) {
  const lines = [`curl -X POST ${shellQuote(url)}`, `  -H 'Content-Type: application/json'`];
  if (bearer) lines.push(`  -H ${shellQuote(`Authorization: Bearer ${bearer}`)}`);
  lines.push(`  -d ${shellQuote(JSON.stringify(body))}`);
  return lines.join(" \\\n");
}

export function requests(url, body, bearer) {
  const headers = bearer ? `\n    headers={"Authorization": ${JSON.stringify(`Bearer ${bearer}`)}},` : "";
  return [
    "import requests",
    "",
    `body = ${pyLiteral(body)}`,
    "response = requests.post(",
    `    ${JSON.stringify(url)},`,
    `    json=body,${headers}`,
    ")",
    "print(response.status_code, response.json())",
  ].join("\n");
}

export function tritonclient(origin, model, version, body, bearer) {
  const host = new URL(origin);
  const ssl = host.protocol === "https:" ? ", ssl=True" : "";
  const lines = ["import numpy as np", "import tritonclient.http as httpclient", "", `client = httpclient.InferenceServerClient(${JSON.stringify(host.host)}${ssl})`, "inputs = []"];
  for (const input of (body && Array.isArray(body.inputs) && body.inputs) || []) {
    const dtype = NUMPY[input.datatype] || "None";
    const shapeText = `[${(input.shape || []).join(", ")}]`;
    lines.push(
      `tensor = httpclient.InferInput(${JSON.stringify(input.name)}, ${shapeText}, ${JSON.stringify(input.datatype)})`,
      `tensor.set_data_from_numpy(np.array(${pyLiteral(input.data)}, dtype=${dtype}).reshape(${shapeText}))`,
      "inputs.append(tensor)",
    );
  }
  const args = [JSON.stringify(model), "inputs"];
  if (version) args.push(`model_version=${JSON.stringify(version)}`);
  if (bearer) args.push(`headers={"Authorization": ${JSON.stringify(`Bearer ${bearer}`)}}`);
  lines.push(`result = client.infer(${args.join(", ")})`, "print(result.get_response())");
  return lines.join("\n");
}
