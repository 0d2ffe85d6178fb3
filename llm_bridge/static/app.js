// ecomjax demo: the person plays the agent. Plain JS, no build step, no external assets.
// Forms are generated from the tools' and answers' JSON schemas served by the server; their
// bounds (minimum/maximum, minLength/maxLength, minItems/maxItems, enums) are enforced here,
// so an out-of-range number is refused with a message instead of hard-failing the episode.
"use strict";

const $ = (id) => document.getElementById(id);
const demo = { info: null, obs: null, episodeId: null, pending: [], toolForm: null, answerForm: null, busy: false,
  sent: [], // sent: this episode's turns as sent
  health: null, // the last GET /health reply
  started: new Set(), stepped: false }; // families this page has reset, whether it played a turn
window.demo = demo; // inspectable (and used by the browser test)

const POLL_MS = 1000; // /health while the server warms up
const FIRST_USE = "the first episode of a family compiles it, which takes 10–35 s";

function setStatus(text, isError) {
  const el = $("status");
  el.textContent = text;
  el.className = "status" + (isError ? " error" : "");
}

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch (e) { data = null; }
  if (!res.ok) {
    const msg = data && data.detail ? data.detail : res.status + " " + res.statusText;
    throw new Error(msg);
  }
  return data;
}

function el(tag, attrs, children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children || []) {
    if (c === null || c === undefined || c === false) continue;
    e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return e;
}

// --- server readiness (GET /health) ----------------------------------------------------------

// The warm-up block of /health, or null when the server has none (then it is ready).
function warmup() {
  const w = demo.health && demo.health.warmup;
  return w && typeof w === "object" ? w : null;
}

// A family's warm-up state ("ready", "compiling", "pending", ...) while a warm-up runs or ran.
function familyState(f) {
  const w = warmup();
  return w && w.state !== "off" && w.families ? w.families[f] : undefined;
}

// Is this family known to be compiled (by the warm-up or by an episode on this page)?
function compiled(f) {
  const w = warmup();
  return demo.started.has(f) || familyState(f) === "ready" || !!(w && w.state === "done");
}

function stillWarming(h) {
  const w = h && h.warmup;
  return !!w && !h.ready && !["off", "done", "failed"].includes(w.state);
}

function readinessText(h) {
  const w = h && h.warmup;
  if (!w) return { text: "Ready", kind: "ok" };
  const secs = Math.round(Number(w.elapsed_s) || 0);
  const count = (w.done || 0) + "/" + (w.total || 0) + " families ready";
  if (w.state === "failed") {
    return { text: "Warm-up failed" + (w.error ? ": " + w.error : "") + " (" + count + "); the others compile on first use, 10–35 s each", kind: "error" };
  }
  if (w.state === "off") return { text: "Ready; no warm-up, so " + FIRST_USE, kind: "ok" };
  if (h.ready || w.state === "done") return { text: "Ready (" + (w.total || 0) + " families compiled)", kind: "ok" };
  return { text: "Compiling " + (w.current ? w.current + " " : "") + "(" + count + ", " + secs + " s)", kind: "busy" };
}

function showReadiness(h, err) {
  const box = $("readiness");
  if (err) {
    box.textContent = "Server unreachable: " + err.message;
    box.className = "readiness error";
    return;
  }
  const r = readinessText(h);
  box.textContent = r.text;
  box.className = "readiness " + r.kind;
  // The family menu says which families still compile.
  for (const opt of $("family").options) {
    const st = familyState(opt.value);
    const label = st && st !== "ready" && !demo.started.has(opt.value) ? " (" + st + ")" : "";
    opt.textContent = opt.value + label;
  }
}

async function pollHealth() {
  let h;
  try {
    h = await api("GET", "/health");
  } catch (e) {
    showReadiness(null, e);
    setTimeout(pollHealth, 5 * POLL_MS);
    return;
  }
  demo.health = h;
  showReadiness(h);
  if (stillWarming(h)) setTimeout(pollHealth, POLL_MS);
}

// Shows text(seconds) in the status line every second until the returned stop() is called.
function progress(text) {
  const t0 = Date.now();
  const tick = () => setStatus(text(Math.round((Date.now() - t0) / 1000)));
  tick();
  const timer = setInterval(tick, 1000);
  return () => clearInterval(timer);
}

// --- schema-driven forms ---------------------------------------------------------------------

function typesOf(schema) {
  if (!schema.type) return [];
  return Array.isArray(schema.type) ? schema.type : [schema.type];
}

function range(lo, hi) {
  if (lo !== undefined && hi !== undefined) return lo + "–" + hi;
  if (lo !== undefined) return "at least " + lo;
  if (hi !== undefined) return "at most " + hi;
  return "";
}

// Checks a number against the schema; returns an error message or "".
function numberError(name, v, schema, integer) {
  if (!Number.isFinite(v)) return name + " must be a number";
  if (integer && !Number.isInteger(v)) return name + " must be a whole number";
  const lo = schema.minimum, hi = schema.maximum;
  if ((lo !== undefined && v < lo) || (hi !== undefined && v > hi)) return name + " must be " + range(lo, hi) + " (got " + v + ")";
  return "";
}

function lengthError(name, s, schema) {
  const lo = schema.minLength, hi = schema.maxLength;
  if ((lo !== undefined && s.length < lo) || (hi !== undefined && s.length > hi)) {
    return name + " must have " + range(lo, hi) + " characters (has " + s.length + ")";
  }
  return "";
}

function itemsError(name, v, schema) {
  const lo = schema.minItems, hi = schema.maxItems;
  if ((lo !== undefined && v.length < lo) || (hi !== undefined && v.length > hi)) {
    return name + " takes " + range(lo, hi) + " items (got " + v.length + ")";
  }
  if (schema.uniqueItems && new Set(v).size !== v.length) return name + " lists an item twice";
  return "";
}

class FieldError extends Error {}

// Returns {node, read, reset}; read() -> value (undefined = omitted) or throws FieldError,
// which is also shown under the field until the person edits it.
function buildField(prefix, path, schema, required) {
  const id = prefix + "-" + path.replace(/\./g, "-");
  const name = path.split(".").pop();
  const label = el("span", {}, [name]);
  if (required) label.appendChild(el("span", { class: "req", text: " *" }));
  const types = typesOf(schema);
  const bounds = types.includes("integer") || types.includes("number") ? range(schema.minimum, schema.maximum)
    : types.includes("string") && !schema.enum ? (schema.maxLength ? "up to " + schema.maxLength + " characters" : "")
      : types.includes("array") ? (range(schema.minItems, schema.maxItems) ? range(schema.minItems, schema.maxItems) + " items" : "") : "";
  const help = [(schema.description || "").replace(/\.$/, ""), bounds,
    schema.default !== undefined ? "default " + JSON.stringify(schema.default) : ""].filter(Boolean).join("; ");
  const errBox = el("small", { id: id + "-error", class: "field-error", role: "alert", hidden: true });
  let input = null;
  const wrap = (inp, extra) => {
    input = inp;
    inp.setAttribute("aria-describedby", id + "-error");
    inp.addEventListener("input", () => clearError());
    inp.addEventListener("change", () => clearError());
    return el("label", { class: "field" }, [label, inp, el("small", { text: extra || help }), errBox]);
  };
  const clearError = () => {
    errBox.hidden = true;
    errBox.textContent = "";
    if (input) input.removeAttribute("aria-invalid");
  };
  const fail = (msg) => {
    errBox.textContent = msg;
    errBox.hidden = false;
    if (input) input.setAttribute("aria-invalid", "true");
    throw new FieldError(msg);
  };
  const need = (v) => {
    if (v === undefined && required) fail(path + " is required");
    return v;
  };
  const field = (node, read) => ({ node, read: () => { clearError(); return read(); }, clear: clearError });

  if (types.includes("object") && schema.properties) {
    const sub = buildForm(prefix, schema, path + ".");
    const title = name + (required ? " *" : "") + " (" + Object.keys(schema.properties).length + " fields)";
    const fs = el("details", { class: "group", open: required }, [el("summary", { text: title }), sub.node]);
    return { node: fs, clear: sub.clear, read: () => {
      const v = sub.read(); // throws with the nested fields marked
      if (!Object.keys(v).length && required) { fs.open = true; throw new FieldError(path + " is required"); }
      return Object.keys(v).length ? v : undefined;
    } };
  }
  if (schema.enum && types.length <= 1) {
    if (schema.enum.length === 1 && required) {
      const inp = el("select", { id, name: path, disabled: true, "data-fixed": "" },
        [el("option", { value: schema.enum[0], text: schema.enum[0] })]);
      return field(wrap(inp), () => schema.enum[0]);
    }
    const inp = el("select", { id, name: path, required }, [el("option", { value: "", text: "—" }),
      ...schema.enum.map((v) => el("option", { value: v, text: v }))]);
    return field(wrap(inp), () => need(inp.value === "" ? undefined : inp.value));
  }
  if (types.includes("array") && schema.items && schema.items.enum) {
    const inp = el("select", { id, name: path, multiple: true, size: 6 },
      schema.items.enum.map((v) => el("option", { value: v, text: v })));
    return field(wrap(inp, "Ctrl/Cmd-click for several. " + help), () => {
      const v = Array.from(inp.selectedOptions).map((o) => o.value);
      if (!v.length) return need(undefined);
      const err = itemsError(path, v, schema);
      return err ? fail(err) : v;
    });
  }
  if (types.includes("array") && schema.items && schema.items.type === "string") {
    const inp = el("input", { id, name: path, type: "text", placeholder: "comma-separated" });
    return field(wrap(inp, "Comma-separated. " + help), () => {
      if (inp.value.trim() === "") return need(required ? [] : undefined);
      const v = inp.value.split(/[\s,]+/).filter(Boolean);
      const err = itemsError(path, v, schema);
      return err ? fail(err) : v;
    });
  }
  if (types.length === 1 && (types[0] === "integer" || types[0] === "number")) {
    const integer = types[0] === "integer";
    const inp = el("input", { id, name: path, type: "number", step: integer ? "1" : "any", inputmode: integer ? "numeric" : "decimal",
      min: schema.minimum, max: schema.maximum, placeholder: schema.default, required });
    return field(wrap(inp), () => {
      if (inp.validity && inp.validity.badInput) fail(path + " must be a number");
      if (inp.value === "") return need(undefined);
      const v = Number(inp.value);
      const err = numberError(path, v, schema, integer);
      return err ? fail(err) : v;
    });
  }
  if (types.length === 1 && types[0] === "boolean") {
    const inp = el("select", { id, name: path }, [el("option", { value: "", text: "—" }),
      el("option", { value: "true", text: "true" }), el("option", { value: "false", text: "false" })]);
    return field(wrap(inp), () => need(inp.value === "" ? undefined : inp.value === "true"));
  }
  if (types.length === 1 && types[0] === "string" || (types.includes("string") && !types.includes("array"))) {
    const long = (schema.maxLength || 0) > 200;
    const attrs = { id, name: path, minlength: schema.minLength, maxlength: schema.maxLength, required };
    const inp = long ? el("textarea", { ...attrs, rows: 2 }) : el("input", { ...attrs, type: "text" });
    const numeric = types.includes("number");
    return field(wrap(inp), () => {
      const raw = inp.value.trim();
      if (raw === "") return need(undefined);
      if (numeric && /^-?\d+(\.\d+)?$/.test(raw)) return Number(raw);
      const err = lengthError(path, inp.value, schema);
      return err ? fail(err) : inp.value;
    });
  }
  // Anything richer (e.g. JOURNEY's subgoal_answers): raw JSON, checked by the server.
  const inp = el("textarea", { id, name: path, rows: 4, placeholder: "JSON" });
  return field(wrap(inp, "JSON. " + help), () => {
    const raw = inp.value.trim();
    if (raw === "") return need(undefined);
    try { return JSON.parse(raw); } catch (e) { return fail(path + ": not valid JSON"); }
  });
}

// read() checks every field (each shows its own error) and throws one Error naming them all.
function buildForm(prefix, schema, pathPrefix) {
  const node = el("div", {});
  const fields = [];
  const required = new Set(schema.required || []);
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    const f = buildField(prefix, (pathPrefix || "") + name, prop, required.has(name));
    node.appendChild(f.node);
    fields.push([name, f]);
  }
  return { node, clear: () => fields.forEach(([, f]) => f.clear()), read: () => {
    const out = {};
    const errors = [];
    for (const [name, f] of fields) {
      try {
        const v = f.read();
        if (v !== undefined) out[name] = v;
      } catch (e) {
        if (!(e instanceof FieldError)) throw e;
        errors.push(e.message);
      }
    }
    if (errors.length) throw new FieldError(errors.join("; "));
    return out;
  } };
}

// --- tools and answers -----------------------------------------------------------------------

function toolSchemas() {
  const tools = (demo.obs && demo.obs.tools) || demo.info.tools;
  return tools.filter((t) => t.function.name !== "submit_answer");
}

function showTool() {
  const name = $("tool-select").value;
  const tool = toolSchemas().find((t) => t.function.name === name);
  $("tool-desc").textContent = tool ? tool.function.description : "";
  const form = $("tool-form");
  form.innerHTML = "";
  demo.toolForm = tool ? buildForm("arg", tool.function.parameters, "") : null;
  if (demo.toolForm) form.appendChild(demo.toolForm.node);
  $("tool-error").hidden = true;
  setTurnControls();
}

function renderPending() {
  const ol = $("pending-calls");
  ol.innerHTML = "";
  demo.pending.forEach((c, i) => {
    const rm = el("button", { type: "button", title: "remove", "aria-label": "remove call " + (i + 1), text: "×" });
    rm.onclick = () => { demo.pending.splice(i, 1); renderPending(); };
    ol.appendChild(el("li", {}, [c.name + "(" + JSON.stringify(c.arguments) + ")", rm]));
  });
  const budget = demo.obs && demo.obs.tool_budget;
  $("budget-note").textContent = budget !== undefined && demo.obs && !demo.obs.done
    ? demo.pending.length + " of " + budget + " tool calls this turn" + (demo.pending.length > budget ? ": over the budget, the turn will hard-fail" : "")
    : "";
}

function addCall() {
  if (!demo.toolForm) return;
  const box = $("tool-error");
  try {
    const args = demo.toolForm.read();
    box.hidden = true;
    demo.pending.push({ name: $("tool-select").value, arguments: args });
    renderPending();
    setStatus("Call added; send the turn when ready.");
  } catch (e) {
    if (!(e instanceof FieldError)) throw e;
    box.textContent = "Not added: " + e.message + ".";
    box.hidden = false;
    setStatus("The call was not added: fix the marked field.", true);
  }
}

function showAnswerForm(env) {
  const form = $("answer-form");
  form.innerHTML = "";
  const schema = demo.info.answer_schemas[env];
  demo.answerForm = schema ? buildForm("ans", schema, "") : null;
  if (demo.answerForm) form.appendChild(demo.answerForm.node);
  $("answer-error").hidden = true;
  setTurnControls();
}

// The turn controls are live only while an episode runs and no request is in flight.
function setTurnControls() {
  const live = !!(demo.obs && !demo.obs.done) && !demo.busy;
  for (const id of ["send-turn", "add-call", "tool-select", "message", "include-answer"]) $(id).disabled = !live;
  for (const f of ["tool-form", "answer-form"]) {
    for (const c of $(f).querySelectorAll("input, select, textarea")) {
      if (!c.hasAttribute("data-fixed")) c.disabled = !live;
    }
  }
  $("reset-btn").disabled = demo.busy;
}

// --- tool results as a person reads them ------------------------------------------------------

const money = (v) => typeof v === "number" ? "$" + v.toFixed(2) : "—";
const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const scalar = (v) => v === null || ["string", "number", "boolean"].includes(typeof v);
const words = (k) => k.replace(/_/g, " ");
const plural = (n, one, many) => n + " " + (n === 1 ? one : many || one + "s");

function valueText(v) {
  if (v === null || v === undefined) return "—";
  if (Array.isArray(v)) return v.map(valueText).join(", ");
  if (isObj(v)) return Object.entries(v).map(([k, x]) => words(k) + " " + valueText(x)).join(", ");
  return String(v);
}

function productCard(p) {
  const stock = typeof p.stock_qty === "number"
    ? (p.stock_qty > 0 ? "In stock: " + p.stock_qty : "Out of stock") : null;
  const meta = [typeof p.rating === "number" ? "★ " + p.rating.toFixed(2) + (p.rating_count !== undefined ? " (" + p.rating_count + " ratings)" : "") : null,
    stock, typeof p.ship_days === "number" ? "ships in " + plural(p.ship_days, "day") : null].filter(Boolean);
  const attrs = isObj(p.attrs) ? Object.entries(p.attrs).map(([k, v]) => words(k) + ": " + v) : [];
  const where = [p.brand, p.store ? "sold by " + p.store : null, p.cat].filter(Boolean);
  const extra = [p.has_variants ? (p.variant_count !== undefined ? plural(p.variant_count, "variant") : "has variants") : null,
    p.score !== undefined ? "score " + p.score : null].filter(Boolean);
  return el("li", { class: "product-card", "data-product-id": p.product_id }, [
    el("div", { class: "pc-head" }, [el("span", { class: "pc-title", text: p.title }), el("span", { class: "pc-price", text: money(p.price) })]),
    meta.length ? el("div", { class: "pc-meta", text: meta.join(" · ") }) : null,
    where.length ? el("div", { class: "pc-sub", text: where.join(" · ") }) : null,
    attrs.length ? el("div", { class: "pc-sub", text: attrs.join(" · ") }) : null,
    p.desc ? el("p", { class: "pc-desc", text: p.desc }) : null,
    Array.isArray(p.features) && p.features.length ? el("ul", {}, p.features.map((f) => el("li", { text: String(f) }))) : null,
    el("div", { class: "pc-sub" }, [el("code", { class: "pc-id", text: p.product_id }), extra.length ? " · " + extra.join(" · ") : null]),
  ]);
}

function linesTable(lines, withLineId) {
  const priced = lines.some((l) => l.unit_price !== undefined);
  const head = ["Item", "Qty", priced ? "Unit price" : null, withLineId ? "Line" : null].filter(Boolean);
  return el("table", { class: "lines" }, [
    el("thead", {}, [el("tr", {}, head.map((h) => el("th", { scope: "col", text: h })))]),
    el("tbody", {}, lines.map((l) => el("tr", {}, [
      el("td", {}, [l.title || l.product_id, el("br"), el("code", { text: l.product_id + (l.variant_id ? " / " + l.variant_id : "") }),
        l.variant_description ? " (" + l.variant_description + ")" : null]),
      el("td", { text: String(l.qty) }),
      priced ? el("td", { text: money(l.unit_price) }) : null,
      withLineId ? el("td", {}, [el("code", { text: l.line_id })]) : null,
    ]))),
  ]);
}

function orderCard(o) {
  const dates = ["ordered " + o.order_date, o.delivered_date ? "delivered " + o.delivered_date : null,
    o.eta_date ? "expected " + o.eta_date : null, o.tracking_number ? "tracking " + o.tracking_number : null].filter(Boolean);
  const lines = o.items || o.lines || [];
  const count = o.item_count !== undefined ? o.item_count : lines.reduce((s, l) => s + (l.qty || 0), 0);
  return el("li", { class: "order-card", "data-order-id": o.order_id }, [
    el("div", { class: "oc-head" }, [el("b", { text: "Order " + o.order_id }), " ",
      el("span", { class: "badge status-" + String(o.status).toLowerCase(), text: o.status })]),
    el("div", { class: "pc-meta", text: dates.join(" · ") + " · " + plural(count, "item") }),
    linesTable(lines, true),
  ]);
}

function policyTopic(t) {
  const unit = t.unit ? " " + t.unit : "";
  return el("li", { class: "policy-topic" }, [
    el("div", { class: "pc-title", text: t.question || words(t.topic) }),
    el("div", { class: "pc-meta", text: "Default: " + valueText(t.default) + unit + (t.mode === "first" ? " · the first matching rule applies" : t.mode ? " · rule mode " + t.mode : "") }),
    el("ol", { class: "rules" }, (t.rules || []).map((r) => el("li", { text: r.text || r.title || valueText(r) }))),
  ]);
}

function definitionList(obj) {
  return el("dl", { class: "kv" }, Object.entries(obj).flatMap(([k, v]) => [el("dt", { text: words(k) }),
    el("dd", { text: typeof v === "number" && /price|fee/.test(k) ? money(v) : valueText(v) })]));
}

// A tool result's content as DOM, or null when its shape is unknown (the raw JSON then shows).
function renderResult(name, data) {
  if (isObj(data) && isObj(data.error)) {
    return el("p", { class: "tool-error-text", text: "Error " + data.error.code + ": " + data.error.message });
  }
  const list = Array.isArray(data) ? data : isObj(data) && Array.isArray(data.results) ? data.results : null;
  const every = (pred) => list && list.length > 0 && list.every((x) => isObj(x) && pred(x));
  if (list && list.length === 0) {
    const what = name === "order_list" ? "No orders in this window." : "No results.";
    return el("p", { text: what + (isObj(data) && data.total_matches !== undefined ? " (" + data.total_matches + " matches)" : "") });
  }
  const summary = (n, noun) => {
    if (!isObj(data) || data.total_matches === undefined) return el("p", { class: "pc-meta", text: plural(n, noun) });
    return el("p", { class: "pc-meta", text: plural(n, noun) + " shown of " + data.total_matches + " matches" });
  };
  if (every((x) => "product_id" in x && "title" in x && "price" in x)) {
    return el("div", {}, [summary(list.length, "product"), el("ul", { class: "cards" }, list.map(productCard))]);
  }
  if (isObj(data) && "product_id" in data && "title" in data && "price" in data) return el("ul", { class: "cards" }, [productCard(data)]);
  if (every((x) => "order_id" in x && ("items" in x || "lines" in x))) {
    return el("div", {}, [summary(list.length, "order"), el("ul", { class: "cards" }, list.map(orderCard))]);
  }
  if (isObj(data) && "order_id" in data && Array.isArray(data.lines)) return el("ul", { class: "cards" }, [orderCard(data)]);
  if (isObj(data) && Array.isArray(data.lines) && "total_price" in data) {
    return el("div", { class: "cart" }, [el("p", { class: "pc-meta", text: "Cart: " + plural(data.total_items, "item") + ", total " + money(data.total_price) }),
      data.lines.length ? linesTable(data.lines, true) : el("p", { text: "The cart is empty." })]);
  }
  if (every((x) => "topic" in x && Array.isArray(x.rules))) {
    return el("div", {}, [summary(list.length, "policy topic"), el("ul", { class: "cards" }, list.map(policyTopic))]);
  }
  if (every((x) => "variant_id" in x && "price" in x)) {
    return el("ul", { class: "plain" }, list.map((v) => el("li", {}, [el("code", { text: v.variant_id }), " " + (v.description || valueText(v.attrs)) + " · " + money(v.price) + " · " + (v.stock_qty > 0 ? "in stock: " + v.stock_qty : "out of stock")])));
  }
  if (every((x) => "cat" in x && "display_name" in x)) {
    return el("ul", { class: "plain" }, list.map((c) => el("li", {}, [c.display_name + " (" + c.count + ") ", el("code", { text: c.cat })])));
  }
  if (every((x) => "product_id" in x && "score" in x)) {
    const ol = el("ol", { class: "plain" }, list.map((r) => el("li", {}, [el("code", { text: r.product_id }), " score " + r.score])));
    return el("div", {}, [ol, data.unknown_ids && data.unknown_ids.length ? el("p", { text: "Unknown ids: " + data.unknown_ids.join(", ") }) : null]);
  }
  if (isObj(data) && Object.values(data).every((v) => scalar(v) || (Array.isArray(v) && v.every(scalar)) || (isObj(v) && Object.values(v).every(scalar)))) {
    return definitionList(data);
  }
  return null;
}

function rawJson(text) {
  let pretty = String(text);
  try { pretty = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* not JSON: as is */ }
  return el("details", { class: "raw-json" }, [el("summary", { text: "Raw JSON" }), el("pre", { text: pretty })]);
}

function toolBody(m) {
  let data;
  try { data = JSON.parse(m.content); } catch (e) { return [el("pre", { text: String(m.content) })]; }
  let view = null;
  try { view = renderResult(m.name, data); } catch (e) { view = null; }
  if (!view) return [el("pre", { class: "raw", text: JSON.stringify(data, null, 2) })]; // unknown shape
  return [el("div", { class: "tool-view" }, [view]), rawJson(m.content)];
}

function eventBody(m) {
  let data = null;
  try { data = JSON.parse(m.content); } catch (e) { return [document.createTextNode(String(m.content))]; }
  if (isObj(data) && data.type === "out_of_stock") {
    return [el("p", {}, ["Store notice: ", el("code", { text: data.product_id }), " is now out of stock."]), rawJson(m.content)];
  }
  return [el("pre", { text: JSON.stringify(data, null, 2) })];
}

function renderMessages(messages) {
  const box = $("messages");
  box.innerHTML = "";
  for (const m of messages) {
    const div = el("div", { class: "msg " + m.role });
    const who = m.role === "tool" ? "tool · " + m.name + (m.tool_call_id ? " · " + m.tool_call_id : "") : m.role;
    div.appendChild(el("span", { class: "role", text: who }));
    if (m.role === "system") {
      div.appendChild(el("details", {}, [el("summary", { text: "System prompt" }), el("pre", { text: m.content })]));
    } else if (m.role === "tool") {
      for (const n of toolBody(m)) div.appendChild(n);
    } else if (m.role === "event") {
      for (const n of eventBody(m)) div.appendChild(n);
    } else {
      if (m.content) div.appendChild(el("p", { class: "text", text: m.content }));
      for (const c of m.tool_calls || []) {
        div.appendChild(el("pre", { text: "→ " + c.function.name + " " + c.function.arguments }));
      }
    }
    box.appendChild(div);
  }
  box.parentElement.scrollTop = box.parentElement.scrollHeight;
}

// --- counters and the result -----------------------------------------------------------------

function renderCounters(obs) {
  const c = $("counters");
  c.innerHTML = "";
  const items = [["family", obs.env_id || "hidden"], ["turn", obs.turn]];
  if (obs.done) items.push(["episode", "over (" + words(obs.termination_reason || "done") + ")"]);
  else items.push(["turns left", obs.turns_left], ["tool calls / turn", obs.tool_budget]);
  if (obs.seed !== undefined) items.push(["seed", obs.seed]);
  for (const [k, v] of items) c.appendChild(el("span", { "data-counter": k }, [k + " ", el("b", { text: String(v) })]));
}

function renderOutcome(obs) {
  const box = $("result");
  if (!obs.done) { box.hidden = true; return; }
  box.hidden = false;
  const r = obs.reward;
  $("reward").innerHTML = "";
  $("reward").appendChild(el("span", { class: obs.is_correct ? "good" : "bad",
    text: "Reward " + r.toFixed(3) + (obs.is_correct ? " ✓ correct" : " ✗ not correct") + " · " + obs.termination_reason }));
  const t = $("breakdown");
  t.innerHTML = "";
  const b = obs.reward_breakdown || {};
  const rows = Object.entries(b).filter(([k]) => k !== "details").concat(Object.entries(b.details || {}));
  const fmt = (v) => v === null ? "—" : typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : String(v);
  for (const [k, v] of rows) t.appendChild(el("tr", {}, [el("td", { text: k }), el("td", { text: fmt(v) })]));
  const trace = obs.info && obs.info.trace;
  $("goal-box").hidden = false;
  box.parentElement.scrollTop = 0; // the result card sits at the top of the side panel
  $("goal").textContent = trace ? JSON.stringify(trace, null, 2)
    : "The server keeps the goal hidden (start it with --expose-goal to see it here).";
}

function showObservation(obs) {
  demo.obs = obs;
  renderMessages(obs.messages);
  renderCounters(obs);
  renderOutcome(obs);
  renderPending();
  setTurnControls();
  $("over-note").hidden = !obs.done;
}

// The parser's notes on the sent turn, in words. A range violation is one the environment
// itself judges (an invalid tool call: the whole turn is rejected).
function parseNotes(obs, action) {
  const p = obs.info && obs.info.parse;
  if (!p) return "";
  const notes = [];
  if (p.malformed) notes.push("the turn was malformed: " + p.malformed);
  for (const raw of p.errors || []) {
    let e = String(raw).replace(/\s*\(left to the device\)\s*$/, "");
    const m = /^call (\d+): range at \$\.arguments\.([\w.]+): (.*)$/.exec(e);
    if (m) {
      const call = action.tool_calls[Number(m[1])];
      const tool = call && toolSchemas().find((t) => t.function.name === call.name);
      const prop = tool && tool.function.parameters.properties[m[2]];
      const allowed = prop ? " (allowed " + range(prop.minimum, prop.maximum) + ")" : "";
      e = "call " + m[1] + (call ? " (" + call.name + ")" : "") + ": " + m[2] + " = " + m[3] + " is out of range" + allowed;
    }
    notes.push(e);
  }
  if (p.answer_error) notes.push("answer: " + p.answer_error);
  return notes.join("; ");
}

function outcomeText(obs, action) {
  const b = obs.reward_breakdown || {};
  const notes = parseNotes(obs, action);
  if (!obs.done) return "Turn played; " + plural(obs.turns_left, "turn") + " left." + (notes ? " Notes: " + notes + "." : "");
  let text = "Episode over: " + words(obs.termination_reason || "done");
  if (b.hard_fail_kind) text += " (" + words(b.hard_fail_kind) + "; the whole turn was rejected)";
  text += "." + (notes ? " Why: " + notes + "." : "") + " Start a new episode to play again.";
  return text;
}

// --- actions ---------------------------------------------------------------------------------

// The reset form's numbers, checked like the tool arguments.
function resetBody() {
  const d = $("difficulty"), s = $("seed");
  const dErr = d.value === "" ? "difficulty is required" : numberError("difficulty", Number(d.value), { minimum: 0, maximum: demo.info.d_max }, true);
  const sErr = s.value === "" ? "" : numberError("seed", Number(s.value), { minimum: 0, maximum: 4294967295 }, true);
  for (const [inp, err] of [[d, dErr], [s, sErr]]) {
    if (err) inp.setAttribute("aria-invalid", "true"); else inp.removeAttribute("aria-invalid");
  }
  if (dErr || sErr) throw new FieldError([dErr, sErr].filter(Boolean).join("; "));
  const body = { family: $("family").value, difficulty: Number(d.value), format: "json" };
  if (s.value !== "") body.seed = Number(s.value); // empty: the server picks one
  if (demo.episodeId) body.episode_id = demo.episodeId; // reuse our slot on the server
  return body;
}

function resetWaitText(family, secs) {
  const w = warmup();
  const st = familyState(family);
  if (w && w.state === "running" && st !== "ready" && !compiled(family)) {
    return "Waiting for " + family + " to compile (" + (st || "queued") + "; warm-up " + (w.done || 0) + "/" + (w.total || 0)
      + " families ready): the episode starts when it is done… " + secs + " s";
  }
  if (compiled(family)) return "Starting episode… " + secs + " s";
  return "Starting episode; " + FIRST_USE + "… " + secs + " s";
}

async function reset(ev) {
  if (ev) ev.preventDefault();
  if (demo.busy) return;
  let body;
  try { body = resetBody(); } catch (e) { setStatus("Not started: " + e.message + ".", true); return; }
  demo.busy = true;
  setTurnControls();
  const family = body.family;
  const stop = progress((secs) => resetWaitText(family, secs));
  try {
    const res = await api("POST", "/reset", body);
    stop();
    demo.started.add(family);
    demo.episodeId = res.observation.episode_id;
    demo.pending = [];
    demo.sent = [];
    $("message").value = "";
    $("include-answer").checked = false;
    demo.busy = false;
    showAnswerForm(res.observation.env_id || family);
    showObservation(res.observation);
    if (demo.toolForm) demo.toolForm.clear();
    showReadiness(demo.health);
    setStatus("Episode started. Read the customer's message, then call tools or answer.");
  } catch (e) { stop(); setStatus("Could not start the episode: " + e.message, true); }
  demo.busy = false;
  setTurnControls();
}

async function sendTurn() {
  if (demo.busy || !demo.episodeId || !demo.obs || demo.obs.done) return;
  let answer = null;
  const box = $("answer-error");
  box.hidden = true;
  try {
    if ($("include-answer").checked && demo.answerForm) answer = demo.answerForm.read();
  } catch (e) {
    if (!(e instanceof FieldError)) throw e;
    box.textContent = "Not sent: " + e.message + ".";
    box.hidden = false;
    setStatus("The turn was not sent: fix the marked answer field.", true);
    return;
  }
  const action = { format: "json", message: $("message").value, tool_calls: demo.pending, answer };
  // The server compiles its step function once (in the warm-up when there is one).
  const w = warmup();
  const firstStep = !demo.stepped && !(w && (w.state === "done" || demo.health.ready && w.state !== "off"));
  demo.busy = true;
  setTurnControls();
  const stop = progress((secs) => "Sending turn… " + secs + " s"
    + (firstStep && secs >= 2 ? " (if this is the server's first turn, it compiles the step function: up to about 30 s)" : ""));
  try {
    const res = await api("POST", "/step", { episode_id: demo.episodeId, action });
    stop();
    demo.stepped = true;
    demo.sent.push(JSON.stringify(action)); // as sent, key order included
    demo.pending = [];
    $("message").value = "";
    demo.busy = false;
    showObservation(res.observation);
    setStatus(outcomeText(res.observation, action), res.observation.done && !!(res.observation.reward_breakdown || {}).hard_fail_kind);
  } catch (e) { stop(); setStatus("The turn was not played: " + e.message, true); }
  demo.busy = false;
  setTurnControls();
}

async function init() {
  try {
    demo.info = await api("GET", "/info");
  } catch (e) { setStatus("Cannot reach the server: " + e.message, true); return; }
  const fam = $("family");
  for (const f of demo.info.families) fam.appendChild(el("option", { value: f, text: f }));
  $("difficulty").max = demo.info.d_max;
  $("difficulty").value = demo.info.default_difficulty;
  const sel = $("tool-select");
  for (const t of demo.info.tools) sel.appendChild(el("option", { value: t.function.name, text: t.function.name }));
  sel.onchange = showTool;
  showTool();
  fam.onchange = () => showAnswerForm(fam.value);
  showAnswerForm(fam.value);
  $("reset-form").onsubmit = reset;
  $("add-call").onclick = addCall;
  $("tool-form").onsubmit = (e) => { e.preventDefault(); addCall(); }; // Enter in a field adds the call
  $("answer-form").onsubmit = (e) => e.preventDefault();
  $("send-turn").onclick = sendTurn;
  for (const id of ["difficulty", "seed"]) $(id).addEventListener("input", () => $(id).removeAttribute("aria-invalid"));
  setTurnControls();
  await pollHealth();
  setStatus("Choose a family and start an episode.");
  demo.initialised = true;
}

demo.renderResult = renderResult; // for tests and the console
init();
