// ecomjax demo: the person plays the agent. Plain JS, no build step, no external assets.
// Forms are generated from the tools' and answers' JSON schemas served by the server.
"use strict";

const $ = (id) => document.getElementById(id);
const demo = { info: null, obs: null, episodeId: null, pending: [], toolForm: null, answerForm: null, busy: false,
  sent: [] }; // sent: this episode's turns as sent
window.demo = demo; // inspectable (and used by the browser test)

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

// --- schema-driven forms ---------------------------------------------------------------------

function el(tag, attrs, children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children || []) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  return e;
}

function typesOf(schema) {
  if (!schema.type) return [];
  return Array.isArray(schema.type) ? schema.type : [schema.type];
}

// Returns {node, read}; read() -> {value} (undefined = omitted) or throws Error(message).
function buildField(prefix, path, schema, required) {
  const id = prefix + "-" + path.replace(/\./g, "-");
  const label = el("span", {}, [path.split(".").pop()]);
  if (required) label.appendChild(el("span", { class: "req", text: " *" }));
  const help = [(schema.description || "").replace(/\.$/, ""),
    schema.default !== undefined ? "default " + JSON.stringify(schema.default) : ""].filter(Boolean).join("; ");
  const wrap = (input, extra) => el("label", { class: "field" }, [label, input, el("small", { text: extra || help })]);
  const types = typesOf(schema);
  const need = (v) => {
    if (v === undefined && required) throw new Error(path + " is required");
    return v;
  };

  if (types.includes("object") && schema.properties) {
    const sub = buildForm(prefix, schema, path + ".");
    const title = path.split(".").pop() + (required ? " *" : "") + " (" + Object.keys(schema.properties).length + " fields)";
    const fs = el("details", { class: "group", open: required }, [el("summary", { text: title }), sub.node]);
    return { node: fs, read: () => { const v = sub.read(); return need(Object.keys(v).length ? v : undefined); } };
  }
  if (schema.enum && types.length <= 1) {
    if (schema.enum.length === 1 && required) {
      const input = el("select", { id, name: path, disabled: true }, [el("option", { value: schema.enum[0], text: schema.enum[0] })]);
      return { node: wrap(input), read: () => schema.enum[0] };
    }
    const input = el("select", { id, name: path }, [el("option", { value: "", text: "—" }),
      ...schema.enum.map((v) => el("option", { value: v, text: v }))]);
    return { node: wrap(input), read: () => need(input.value === "" ? undefined : input.value) };
  }
  if (types.includes("array") && schema.items && schema.items.enum) {
    const input = el("select", { id, name: path, multiple: true, size: 6 },
      schema.items.enum.map((v) => el("option", { value: v, text: v })));
    return { node: wrap(input, "Ctrl/Cmd-click for several. " + help), read: () => {
      const v = Array.from(input.selectedOptions).map((o) => o.value);
      return need(v.length ? v : undefined);
    } };
  }
  if (types.includes("array") && schema.items && schema.items.type === "string") {
    const input = el("input", { id, name: path, type: "text", placeholder: "comma-separated" });
    return { node: wrap(input, "Comma-separated. " + help), read: () => {
      const v = input.value.split(/[\s,]+/).filter(Boolean);
      return need(input.value.trim() === "" ? (required ? [] : undefined) : v);
    } };
  }
  if (types.length === 1 && (types[0] === "integer" || types[0] === "number")) {
    const input = el("input", { id, name: path, type: "number", step: types[0] === "integer" ? "1" : "any",
      min: schema.minimum, max: schema.maximum, placeholder: schema.default });
    return { node: wrap(input), read: () => need(input.value === "" ? undefined : Number(input.value)) };
  }
  if (types.length === 1 && types[0] === "boolean") {
    const input = el("select", { id, name: path }, [el("option", { value: "", text: "—" }),
      el("option", { value: "true", text: "true" }), el("option", { value: "false", text: "false" })]);
    return { node: wrap(input), read: () => need(input.value === "" ? undefined : input.value === "true") };
  }
  if (types.length === 1 && types[0] === "string" || (types.includes("string") && !types.includes("array"))) {
    const long = (schema.maxLength || 0) > 200;
    const input = long ? el("textarea", { id, name: path, rows: 2 }) : el("input", { id, name: path, type: "text" });
    const numeric = types.includes("number");
    return { node: wrap(input), read: () => {
      const raw = input.value.trim();
      if (raw === "") return need(undefined);
      return numeric && /^-?\d+(\.\d+)?$/.test(raw) ? Number(raw) : input.value;
    } };
  }
  // Anything richer (e.g. JOURNEY's subgoal_answers): raw JSON.
  const input = el("textarea", { id, name: path, rows: 4, placeholder: "JSON" });
  return { node: wrap(input, "JSON. " + help), read: () => {
    const raw = input.value.trim();
    if (raw === "") return need(undefined);
    try { return JSON.parse(raw); } catch (e) { throw new Error(path + ": not valid JSON"); }
  } };
}

function buildForm(prefix, schema, pathPrefix) {
  const node = el("div", {});
  const readers = [];
  const required = new Set(schema.required || []);
  for (const [name, prop] of Object.entries(schema.properties || {})) {
    const f = buildField(prefix, (pathPrefix || "") + name, prop, required.has(name));
    node.appendChild(f.node);
    readers.push([name, f.read]);
  }
  return { node, read: () => {
    const out = {};
    for (const [name, read] of readers) {
      const v = read();
      if (v !== undefined) out[name] = v;
    }
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
}

function renderPending() {
  const ol = $("pending-calls");
  ol.innerHTML = "";
  demo.pending.forEach((c, i) => {
    const rm = el("button", { type: "button", title: "remove", text: "×" });
    rm.onclick = () => { demo.pending.splice(i, 1); renderPending(); };
    ol.appendChild(el("li", {}, [c.name + "(" + JSON.stringify(c.arguments) + ")", rm]));
  });
}

function addCall() {
  if (!demo.toolForm) return;
  try {
    const args = demo.toolForm.read();
    demo.pending.push({ name: $("tool-select").value, arguments: args });
    renderPending();
    setStatus("Call added; send the turn when ready.");
  } catch (e) { setStatus(e.message, true); }
}

function showAnswerForm(env) {
  const form = $("answer-form");
  form.innerHTML = "";
  const schema = demo.info.answer_schemas[env];
  demo.answerForm = schema ? buildForm("ans", schema, "") : null;
  if (demo.answerForm) form.appendChild(demo.answerForm.node);
}

// --- transcript and results ------------------------------------------------------------------

function pretty(content) {
  try { return JSON.stringify(JSON.parse(content), null, 2); } catch (e) { return String(content); }
}

function renderMessages(messages) {
  const box = $("messages");
  box.innerHTML = "";
  for (const m of messages) {
    const div = el("div", { class: "msg " + m.role });
    div.appendChild(el("span", { class: "role", text: m.role === "tool" ? "tool · " + m.name : m.role }));
    if (m.role === "system") {
      div.appendChild(el("details", {}, [el("summary", { text: "System prompt" }), el("pre", { text: m.content })]));
    } else if (m.role === "tool") {
      div.appendChild(el("details", { open: true }, [el("summary", { text: m.tool_call_id }), el("pre", { text: pretty(m.content) })]));
    } else {
      if (m.content) div.appendChild(document.createTextNode(m.content));
      for (const c of m.tool_calls || []) {
        div.appendChild(el("pre", { text: "→ " + c.function.name + " " + c.function.arguments }));
      }
    }
    box.appendChild(div);
  }
  box.parentElement.scrollTop = box.parentElement.scrollHeight;
}

function renderCounters(obs) {
  const c = $("counters");
  c.innerHTML = "";
  const items = [["family", obs.env_id || "hidden"], ["turn", obs.turn], ["turns left", obs.turns_left],
    ["tool calls / turn", obs.tool_budget], ["episode", obs.episode_id.slice(0, 8)]];
  for (const [k, v] of items) c.appendChild(el("span", {}, [k + " ", el("b", { text: String(v) })]));
}

function renderResult(obs) {
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
  renderResult(obs);
  $("send-turn").disabled = obs.done;
  $("add-call").disabled = obs.done;
}

// --- actions ---------------------------------------------------------------------------------

async function reset(ev) {
  if (ev) ev.preventDefault();
  if (demo.busy) return;
  demo.busy = true;
  setStatus("Starting episode (the first one of a family compiles, which takes a few seconds)…");
  try {
    const body = { family: $("family").value, difficulty: Number($("difficulty").value), seed: Number($("seed").value),
      format: "json" };
    if (demo.episodeId) body.episode_id = demo.episodeId; // reuse our slot on the server
    const res = await api("POST", "/reset", body);
    demo.episodeId = res.observation.episode_id;
    demo.pending = [];
    demo.sent = [];
    renderPending();
    $("message").value = "";
    $("include-answer").checked = false;
    showAnswerForm(res.observation.env_id || $("family").value);
    showObservation(res.observation);
    setStatus("Episode started. Read the customer's message, then call tools or answer.");
  } catch (e) { setStatus(e.message, true); }
  demo.busy = false;
}

async function sendTurn() {
  if (demo.busy || !demo.episodeId) return;
  let answer = null;
  try {
    if ($("include-answer").checked && demo.answerForm) answer = demo.answerForm.read();
  } catch (e) { setStatus(e.message, true); return; }
  const action = { format: "json", message: $("message").value, tool_calls: demo.pending, answer };
  demo.busy = true;
  setStatus("Sending turn…");
  try {
    const res = await api("POST", "/step", { episode_id: demo.episodeId, action });
    demo.sent.push(JSON.stringify(action)); // as sent, key order included
    demo.pending = [];
    renderPending();
    $("message").value = "";
    showObservation(res.observation);
    const p = res.observation.info && res.observation.info.parse;
    const errs = p && p.errors && p.errors.length ? " Parser: " + p.errors.join("; ") : "";
    setStatus((res.done ? "Episode over: " + res.observation.termination_reason + "." : "Turn played.") + errs);
  } catch (e) { setStatus(e.message, true); }
  demo.busy = false;
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
  $("send-turn").onclick = sendTurn;
  $("send-turn").disabled = true;
  setStatus("Ready.");
}

init();
