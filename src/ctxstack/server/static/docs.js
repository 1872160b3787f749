// A small offline API reference drawn from /openapi.json (no CDN: the service may run
// without internet access). Every value from the schema is set as text, never as HTML.

const el = (tag, className, text) => {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
};

function resolve(schema, spec, depth = 0) {
  if (!schema || depth > 8) return schema;
  if (schema.$ref) {
    const name = schema.$ref.split("/").pop();
    return { title: name, ...resolve(spec.components?.schemas?.[name], spec, depth + 1) };
  }
  const out = { ...schema };
  if (out.properties) {
    out.properties = Object.fromEntries(Object.entries(out.properties)
      .map(([k, v]) => [k, resolve(v, spec, depth + 1)]));
  }
  if (out.items) out.items = resolve(out.items, spec, depth + 1);
  for (const key of ["anyOf", "oneOf", "allOf"]) {
    if (out[key]) out[key] = out[key].map((s) => resolve(s, spec, depth + 1));
  }
  return out;
}

function schemaBlock(label, schema, spec) {
  const wrap = el("div", "docs-schema");
  wrap.append(el("div", "docs-label", label));
  wrap.append(el("pre", "", JSON.stringify(resolve(schema, spec), null, 2)));
  return wrap;
}

async function main() {
  const box = document.getElementById("endpoints");
  const spec = await (await fetch("openapi.json")).json();
  box.replaceChildren();
  for (const [path, ops] of Object.entries(spec.paths || {})) {
    for (const [method, op] of Object.entries(ops)) {
      const item = el("details", "docs-op");
      const summary = el("summary");
      summary.append(el("span", `docs-method ${method}`, method.toUpperCase()),
        el("code", "docs-path", path), el("span", "docs-summary", op.summary || ""));
      item.append(summary);
      if (op.description) item.append(el("p", "docs-desc", op.description));
      const params = (op.parameters || []).map((p) => `${p.name} (${p.in}${p.required ? ", required" : ""})`);
      if (params.length) item.append(el("p", "docs-desc", `Parameters: ${params.join(", ")}`));
      const body = op.requestBody?.content;
      if (body) {
        for (const [type, content] of Object.entries(body)) {
          item.append(schemaBlock(`Request body (${type})`, content.schema, spec));
        }
      }
      for (const [status, response] of Object.entries(op.responses || {})) {
        const content = response.content || {};
        const types = Object.keys(content);
        const schema = types.length ? content[types[0]].schema : null;
        const label = `${status} ${response.description || ""}${types.length ? ` (${types.join(", ")})` : ""}`;
        if (schema) item.append(schemaBlock(label, schema, spec));
        else item.append(el("div", "docs-label", label));
      }
      box.append(item);
    }
  }
}

main().catch((err) => {
  document.getElementById("endpoints").textContent = `Could not load /openapi.json: ${err}`;
});
