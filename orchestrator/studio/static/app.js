// goondan studio: plain JavaScript, no build step. One page, hash routes (#/processes, ...),
// JSON from /api/*, live updates through server-sent events (/api/stream/*).
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const view = () => $("#view");
let info = { allowActions: false, swarm: "" };
let live = [];  // EventSources and timers of the current view, closed on navigation

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined) node.setAttribute(k, v);
  }
  for (const c of children.flat()) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
  return node;
}
const svgEl = (tag, attrs = {}) => {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
};
const clock = (at) => at ? new Date(at * 1000).toISOString().replace("T", " ").slice(0, 23) : "";
const ms = (v) => v === null || v === undefined ? "" : v >= 1000 ? (v / 1000).toFixed(2) + " s" : v.toFixed(1) + " ms";
const ago = (sec) => sec === null || sec === undefined ? "" :
  sec < 60 ? Math.round(sec) + "s" : sec < 3600 ? Math.round(sec / 60) + "m" : (sec / 3600).toFixed(1) + "h";

async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const res = await fetch(path, opts);
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data.error ? `${data.error.code}: ${data.error.message}` : res.statusText);
  return data;
}
function stream(path, handlers) {
  const source = new EventSource(path);
  for (const [name, fn] of Object.entries(handlers)) source.addEventListener(name, (e) => fn(JSON.parse(e.data)));
  live.push({ close: () => source.close() });
  return source;
}
function every(seconds, fn) {
  fn();
  const id = setInterval(fn, seconds * 1000);
  live.push({ close: () => clearInterval(id) });
}
function flash(where, error) { where.replaceChildren(el("span", { class: "error" }, String(error.message || error))); }
// What an action did, as a sentence (the CLI's words), not the control reply's JSON.
function sentence(result) {
  if (result && Array.isArray(result.restarted)) {
    if (!result.restarted.length) return "nothing was running to restart";
    return "restarted " + result.restarted.map((r) => `${r.process} → ${r.started}` +
      (r.killed ? " (killed: its turn did not end in the grace period)" : "")).join(", ");
  }
  if (result && Array.isArray(result.stopped)) return result.stopped.length ? "stopped " + result.stopped.join(", ") : "nothing was running";
  if (result && typeof result.input === "string") return "answered; the turn resumed and replied: " + result.input;
  if (result && result.resolved) return `answered call ${result.resolved}`;
  return "done";
}

// -- Processes ----------------------------------------------------------------------------

function processes() {
  const banner = el("div");
  const body = el("tbody");
  const table = el("table", { id: "processes" },
    el("thead", {}, el("tr", {}, ["process", "kind", "name", "instance", "state", "pid", "gen",
      "restarts", "last exit", "uptime", "USS MiB", "pending", ""].map((h) => el("th", {}, h)))), body);
  const message = el("div", { class: "muted", id: "action-result" });
  view().replaceChildren(el("h2", {}, "Processes"), banner, message, table);
  const render = (snap) => {
    banner.replaceChildren(snap.daemon ? "" : el("div", { class: "banner" }, "No daemon runs this swarm: start it with goondan run."));
    $("#daemon").textContent = snap.daemon ? `swarm ${snap.daemon.swarm} · daemon pid ${snap.daemon.pid}` : `swarm ${info.swarm} · no daemon`;
    const now = Date.now() / 1000;
    body.replaceChildren(...snap.processes.map((p) => {
      const exit = p.lastExit ? `${p.lastExit.reason || ""} ${p.lastExit.code ?? ""}${p.lastExit.signal ? " sig " + p.lastExit.signal : ""}` : "";
      const retry = p.retryInSeconds !== null && p.retryInSeconds !== undefined ? ` (retry in ${p.retryInSeconds}s)` : "";
      const actions = info.allowActions && p.kind === "agent" ? [
        el("button", { class: "restart", onclick: () => act("/api/processes/restart", { agent: p.name, instanceKey: p.instanceKey }) }, "restart"),
        " ",
        el("button", { class: "stop danger", onclick: () => act("/api/processes/stop", { agent: p.name, instanceKey: p.instanceKey }) }, "stop"),
      ] : [];
      return el("tr", { "data-id": `${p.kind}:${p.name}:${p.instanceKey}` },
        el("td", { class: "mono" }, p.id), el("td", {}, p.kind), el("td", {}, p.name),
        el("td", {}, p.kind === "agent" ? el("a", { href: `#/conversation?key=${encodeURIComponent(p.instanceKey)}&agent=${encodeURIComponent(p.name)}` }, p.instanceKey) : p.instanceKey),
        el("td", {}, el("span", { class: `status ${p.status}` }, p.status + retry)),
        el("td", { class: "num pid" }, p.pid ?? ""), el("td", { class: "num gen" }, p.generation),
        el("td", { class: "num restarts" }, p.restarts), el("td", { class: "exit" }, exit),
        el("td", { class: "num uptime" }, p.startedAt ? ago(now - p.startedAt) : ""),
        el("td", { class: "num uss" }, p.ussMiB ?? ""), el("td", { class: "num" }, p.pending || ""),
        el("td", {}, actions));
    }));
  };
  async function act(path, body) {
    message.textContent = "…";
    try { const r = await api(path, body); message.textContent = sentence(r.result); }
    catch (e) { flash(message, e); }
  }
  stream("/api/stream/processes", { processes: render });
}

// -- Swarm graph ---------------------------------------------------------------------------

function graph() {
  const holder = el("div");
  view().replaceChildren(el("h2", {}, "Swarm graph"),
    el("p", { class: "muted" }, "Who started whose turns (from the traces): counts and p50/p99 latency of the turns started."), holder);
  every(5, async () => {
    try { drawGraph(holder, await api("/api/graph")); } catch (e) { flash(holder, e); }
  });
}
function drawGraph(holder, g) {
  const W = 900, H = 460, columns = { cli: 90, connector: 90, agent: 560 };
  const byKind = { cli: [], connector: [], agent: [] };
  for (const n of g.nodes) (byKind[n.kind] || byKind.agent).push(n);
  const pos = {};
  const place = (list, x) => list.forEach((n, i) => { pos[n.id] = [x, (H / (list.length + 1)) * (i + 1)]; });
  place([...byKind.cli, ...byKind.connector], columns.cli);
  // agents in a circle on the right, so edges between agents stay visible
  byKind.agent.forEach((n, i, all) => {
    const a = (2 * Math.PI * i) / Math.max(all.length, 1) - Math.PI / 2, r = all.length > 1 ? 170 : 0;
    pos[n.id] = [columns.agent + r * Math.cos(a), H / 2 + r * Math.sin(a)];
  });
  const svg = svgEl("svg", { id: "graph", viewBox: `0 0 ${W} ${H}`, width: "100%" });
  const defs = svgEl("defs");
  const marker = svgEl("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 28, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto" });
  marker.append(svgEl("path", { d: "M0,0 L10,5 L0,10 z", fill: "#64748b" }));
  defs.append(marker); svg.append(defs);
  for (const e of g.edges) {
    const [x1, y1] = pos[e.source] || [0, 0], [x2, y2] = pos[e.target] || [0, 0];
    const group = svgEl("g", { class: "edge", "data-source": e.source, "data-target": e.target });
    group.append(svgEl("line", { x1, y1, x2, y2, stroke: "#94a3b8", "stroke-width": 1 + Math.log2(1 + e.count), "marker-end": "url(#arrow)" }));
    // along the line and beside it, not across it: turned to its angle (kept upright), moved
    // off its middle along the normal (an edge back the other way lands on the other side),
    // over a white halo where another line passes
    const len = Math.hypot(x2 - x1, y2 - y1) || 1, nx = (y1 - y2) / len, ny = (x2 - x1) / len;
    let angle = Math.atan2(y2 - y1, x2 - x1) * 180 / Math.PI;
    if (angle > 90) angle -= 180; else if (angle < -90) angle += 180;
    const lx = (x1 + x2) / 2 + nx * 14, ly = (y1 + y2) / 2 + ny * 14;
    const label = svgEl("text", { x: lx, y: ly, "text-anchor": "middle", "dominant-baseline": "middle",
      transform: `rotate(${angle.toFixed(1)} ${lx} ${ly})`, fill: "#334155", stroke: "#ffffff",
      "stroke-width": 4, "paint-order": "stroke", class: "edge-label" });
    label.textContent = `${e.count}× p50 ${ms(e.p50Ms)} p99 ${ms(e.p99Ms)}`;
    group.append(label); svg.append(group);
  }
  for (const n of g.nodes) {
    const [x, y] = pos[n.id];
    const group = svgEl("g", { class: `node ${n.kind}`, "data-id": n.id });
    const fill = n.kind === "agent" ? "#dbeafe" : n.kind === "connector" ? "#fef3c7" : "#e5e7eb";
    group.append(svgEl("circle", { cx: x, cy: y, r: 24, fill, stroke: "#475569" }));
    const t = svgEl("text", { x, y: y + 40, "text-anchor": "middle" });
    t.textContent = n.kind === "agent" ? n.name : `${n.kind} ${n.name}`;
    group.append(t); svg.append(group);
  }
  holder.replaceChildren(svg);
}

// -- Conversation ------------------------------------------------------------------------

async function conversation(params) {
  const keyInput = el("select", { id: "conv-key" });
  const list = el("div", { id: "conversation" });
  // a case of a kept eval run: its instances are in that run's own state
  const run = params.get("eval");
  const inRun = run ? `&eval=${encodeURIComponent(run)}` : "";
  const title = run ? el("h2", {}, "Conversation · eval run ", el("a", { href: `#/evals/${run}` }, run)) : el("h2", {}, "Conversation");
  view().replaceChildren(title, el("div", { class: "toolbar" }, "instance", keyInput), list);
  const rows = (await api(`/api/instances?${inRun.slice(1)}`)).instances;
  const choices = rows.map((r) => `${r.instanceKey}\u0000${r.agent}`);
  keyInput.append(el("option", { value: "" }, "choose an instance…"),
    ...rows.map((r, i) => el("option", { value: choices[i] }, `${r.instanceKey} · ${r.agent}`)));
  const current = params.get("key") !== null ? `${params.get("key")}\u0000${params.get("agent") || ""}` : "";
  keyInput.value = choices.includes(current) ? current : "";
  keyInput.addEventListener("change", () => {
    const [key, agent] = keyInput.value.split("\u0000");
    location.hash = `#/conversation?key=${encodeURIComponent(key)}&agent=${encodeURIComponent(agent)}${inRun}`;
  });
  if (params.get("key") === null) {  // open the instance that spoke last
    const recent = rows.filter((r) => r.updatedAt).sort((a, b) => b.updatedAt - a.updatedAt)[0];
    if (recent) location.replace(`#/conversation?key=${encodeURIComponent(recent.instanceKey)}&agent=${encodeURIComponent(recent.agent)}${inRun}`);
    return;
  }
  let turn = null;
  const q = `key=${encodeURIComponent(params.get("key"))}&agent=${encodeURIComponent(params.get("agent") || "")}${inRun}`;
  stream(`/api/stream/conversation?${q}`, {
    messages: (msgs) => {
      for (const m of msgs) {
        if (m.turnId && m.turnId !== turn) {
          turn = m.turnId;
          list.append(el("div", { class: "turn-head" }, `turn ${m.turnId} · `,
            m.traceId ? el("a", { class: "trace", href: `#/trace/${m.traceId}${run ? "?eval=" + encodeURIComponent(run) : ""}` }, `trace ${m.traceId.slice(0, 8)}`) : "no trace"));
        }
        list.append(message(m));
      }
      window.scrollTo(0, document.body.scrollHeight);
    },
  });
}
function message(m) {
  const body = [];
  if (m.role === "tool") body.push(el("div", { class: "call" }, `${m.toolName} [${(m.metadata || {}).status || "?"}]`));
  if (m.content) body.push(el("pre", {}, m.content));
  for (const c of m.toolCalls || []) body.push(el("div", { class: "call" }, `→ ${c.name} ${c.invalidArgs ?? JSON.stringify(c.args || {})}`));
  return el("div", { class: `msg ${m.role}`, "data-id": m.id },
    el("div", { class: "head" }, `${clock(m.createdAt)} · ${m.agent} · ${m.role}`), body);
}

// -- Trace -----------------------------------------------------------------------------

async function trace(params, id) {
  const input = el("input", { id: "trace-id", placeholder: "trace id (a prefix works)", size: 36, value: id || "" });
  const holder = el("div", { id: "trace" });
  view().replaceChildren(el("h2", {}, "Trace"),
    el("div", { class: "toolbar" }, input, el("button", { onclick: () => { location.hash = `#/trace/${input.value.trim()}`; } }, "show")), holder);
  if (!id) { holder.replaceChildren(el("p", { class: "muted" }, "Open a trace from a conversation or the logs, or paste its id.")); return; }
  const run = params.get("eval");
  try { drawTrace(holder, await api(`/api/trace/${encodeURIComponent(id)}${run ? "?eval=" + encodeURIComponent(run) : ""}`), run); } catch (e) { flash(holder, e); }
}
function drawTrace(holder, t, run) {
  const spans = t.spans;
  const t0 = Math.min(...spans.map((s) => s.start));
  const t1 = Math.max(...spans.map((s) => s.end ?? s.start));
  const total = Math.max(t1 - t0, 1e-6);
  const agents = [...new Set(spans.filter((s) => s.kind === "turn").map((s) => s.agent))];
  const rows = spans.map((s) => {
    const left = ((s.start - t0) / total) * 100, width = (((s.end ?? t1) - s.start) / total) * 100;
    const usage = s.usage ? ` · ${s.usage.inputTokens ?? 0}/${s.usage.outputTokens ?? 0} tok` : "";
    return el("div", { class: `span ${s.kind} ${s.status || ""}`, "data-agent": s.agent, "data-kind": s.kind },
      el("div", { class: "label", style: `padding-left:${0.4 + s.depth * 1.1}rem`, title: `${s.agent} ${s.instanceKey}` },
        s.kind === "turn" ? `${s.label} (${s.instanceKey})` : s.label),
      el("div", { class: "track" }, el("div", { class: "bar", style: `left:${left}%;width:${width}%` })),
      el("div", { class: "meta" }, `${ms(s.ms)}${usage}${s.error ? " · " + s.error : ""}`));
  });
  // an eval run's log lines are in its own state, not this daemon's: the CLI reads them
  const lines = run ? el("span", { class: "mono" }, `goondan logs --state-root <the run>/state --trace ${t.traceId}`)
    : el("a", { href: `#/logs?trace=${t.traceId}` }, "its log lines");
  holder.replaceChildren(
    el("p", { class: "muted" }, `trace ${t.traceId} · ${ms(total * 1000)} · agents: ${agents.join(", ")} · `, lines),
    el("div", { class: "wf" }, rows));
}

// -- Calls -----------------------------------------------------------------------------

function calls() {
  const holder = el("div", { id: "calls" });
  const message = el("div", { class: "muted", id: "action-result" });
  view().replaceChildren(el("h2", {}, "Pending calls"), message, holder);
  // resolve: `goondan calls resolve`; approve/deny: `goondan calls approve|deny` (same control requests)
  const answer = async (id, body, decision) => {
    message.textContent = "…";
    const path = `/api/calls/${encodeURIComponent(id)}` + (decision ? `/${decision}` : "");
    try { const r = await api(path, body); message.textContent = sentence(r.result); refresh(); }
    catch (e) { flash(message, e); }
  };
  // a row is built once per call and kept across refreshes: what a person types into its
  // result or message field survives the 2-second refresh
  const rows = new Map();
  const row = (c) => {
    const result = el("textarea", { class: "result", rows: 2, cols: 30, placeholder: '{"result": ...} as JSON' });
    const why = el("input", { class: "why", size: 16, placeholder: "message (optional)" });
    const said = () => (why.value.trim() ? { message: why.value.trim() } : {});
    const forms = !info.allowActions ? [el("span", { class: "muted" }, "read-only")] : c.approval ? [
      el("button", { class: "approve", onclick: () => answer(c.id, said(), "approve") }, "approve"), " ",
      el("button", { class: "deny danger", onclick: () => answer(c.id, said(), "deny") }, "deny"), " ", why,
    ] : [result, " ", el("button", { class: "resolve", onclick: () => {
      let value; try { value = JSON.parse(result.value || "null"); } catch (e) { flash(message, new Error("the result is not JSON")); return; }
      answer(c.id, { result: value });
    } }, "resolve")];
    const age = el("td", {});
    const tr = el("tr", { "data-id": c.id }, el("td", { class: "mono" }, c.id), el("td", {}, c.agent), el("td", {}, c.instanceKey),
      el("td", { class: "mono" }, c.method), el("td", { class: "mono" }, JSON.stringify(c.params)), age, el("td", {}, forms));
    return { tr, age };
  };
  const refresh = async () => {
    let data;
    try { data = await api("/api/calls"); } catch (e) { flash(holder, e); return; }
    const ids = new Set(data.calls.map((c) => c.id));
    for (const id of [...rows.keys()]) if (!ids.has(id)) rows.delete(id);
    if (!data.calls.length) { holder.replaceChildren(el("p", { class: "muted" }, "No call waits for a client.")); return; }
    const trs = data.calls.map((c) => {
      if (!rows.has(c.id)) rows.set(c.id, row(c));
      const r = rows.get(c.id);
      r.age.textContent = ago(c.ageSeconds);
      return r.tr;
    });
    let body = holder.querySelector("tbody");
    if (!body) {
      body = el("tbody", {});
      holder.replaceChildren(el("table", {}, el("thead", {}, el("tr", {}, ["id", "agent", "instance", "method", "params", "age", "answer"].map((h) => el("th", {}, h)))), body));
    }
    body.replaceChildren(...trs);  // moves the kept rows: their fields keep what was typed
  };
  every(2, refresh);
}

// -- Logs --------------------------------------------------------------------------------

async function logs(params) {
  const fields = ["agent", "instance", "trace", "since"];
  const inputs = Object.fromEntries(fields.map((f) => [f, el("input", { id: `log-${f}`, placeholder: f === "since" ? "since (10m, ISO time)" : f, value: params.get(f) || "", size: f === "trace" ? 34 : 14 })]));
  const out = el("div", { class: "logs", id: "logs" });
  const apply = () => { location.hash = "#/logs?" + new URLSearchParams(Object.entries(inputs).filter(([, i]) => i.value).map(([k, i]) => [k, i.value])); };
  view().replaceChildren(el("h2", {}, "Logs"), el("div", { class: "toolbar" }, Object.values(inputs), el("button", { onclick: apply }, "filter")), out);
  const q = new URLSearchParams(fields.filter((f) => params.get(f)).map((f) => [f, params.get(f)])).toString();
  const add = (lines) => {
    for (const l of lines) {
      const line = el("div", { class: "line" }, l.text);
      if (l.trace) line.append(" ", el("a", { href: `#/trace/${l.trace}` }, "trace"));
      out.append(line);
    }
    out.scrollTop = out.scrollHeight;
  };
  try { add((await api(`/api/logs?${q}`)).lines); } catch (e) { flash(out, e); return; }
  stream(`/api/stream/logs?${q}`, { lines: add });
}

// -- Charts ------------------------------------------------------------------------------

function charts() {
  const grid = el("div", { class: "charts" });
  view().replaceChildren(el("h2", {}, "Last hour"), grid);
  every(10, async () => {
    let c;
    try { c = await api("/api/charts"); } catch (e) { flash(grid, e); return; }
    grid.replaceChildren(
      chart("Turns per minute", c.minutes, [{ values: c.turns, color: "#2563eb" }], "bars"),
      chart("Turn latency p50 / p99 (ms)", c.minutes, [{ values: c.p50Ms, color: "#16a34a" }, { values: c.p99Ms, color: "#dc2626" }], "lines"),
      chart("Tokens per minute", c.minutes, [{ values: c.tokens, color: "#f59e0b" }], "bars"),
      errors(c.errors));
  });
}
function chart(title, minutes, series, kind) {
  const W = 420, H = 150, P = 28;
  const all = series.flatMap((s) => s.values.filter((v) => v !== null));
  const max = Math.max(1, ...all);
  const x = (i) => P + (i / (minutes.length - 1)) * (W - P - 6), y = (v) => H - 18 - (v / max) * (H - 30);
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, width: "100%", class: "chart-svg" });
  svg.append(svgEl("line", { x1: P, y1: H - 18, x2: W - 6, y2: H - 18, stroke: "#cbd5e1" }));
  const top = svgEl("text", { x: 2, y: 14, fill: "#64748b" }); top.textContent = String(Math.round(max)); svg.append(top);
  // the ends' labels anchored inward: "now" centred on the last minute was cut off the right
  for (const [i, label, anchor] of [[0, "-60m", "start"], [minutes.length - 1, "now", "end"]]) {
    const t = svgEl("text", { x: x(i), y: H - 4, "text-anchor": anchor, fill: "#64748b", class: "axis" }); t.textContent = label; svg.append(t);
  }
  for (const s of series) {
    if (kind === "bars") {
      const w = (W - P) / minutes.length - 1;
      s.values.forEach((v, i) => { if (v) svg.append(svgEl("rect", { x: x(i) - w / 2, y: y(v), width: w, height: H - 18 - y(v), fill: s.color })); });
    } else {
      const pts = s.values.map((v, i) => v === null ? null : `${x(i)},${y(v)}`).filter(Boolean);
      if (pts.length) svg.append(svgEl("polyline", { points: pts.join(" "), fill: "none", stroke: s.color, "stroke-width": 2 }));
    }
  }
  return el("div", { class: "chart" }, el("h3", {}, title), svg);
}
function errors(byCode) {
  const entries = Object.entries(byCode);
  const body = entries.length ? el("table", {}, el("tbody", {}, entries.map(([code, n]) => el("tr", {}, el("td", { class: "mono" }, code), el("td", { class: "num" }, n)))))
    : el("p", { class: "muted" }, "No errors in the last hour.");
  return el("div", { class: "chart", id: "errors" }, el("h3", {}, "Errors by code"), body);
}

// -- Evals -------------------------------------------------------------------------------

const rate = (v) => v === null || v === undefined ? "" : `${Math.round(v * 100)}%`;
const usd = (v) => v === null || v === undefined ? "" : `$${v.toFixed(6)}`;
function against(r) {
  if (!r.previous) return "first run";
  const parts = [];
  if (r.regressed.length) parts.push(`${r.regressed.length} regressed`);
  if (r.improved.length) parts.push(`${r.improved.length} improved`);
  return parts.length ? parts.join(", ") : "no change";
}
async function evals(params, id) {
  if (id) return evalRun(id);
  const holder = el("div", { id: "evals" });
  view().replaceChildren(el("h2", {}, "Evals"), holder);
  const runs = (await api("/api/evals")).runs;
  if (!runs.length) {
    holder.replaceChildren(el("p", { class: "muted" }, "No eval run is kept under this state root yet: each `goondan eval FILE` run is kept here."));
    return;
  }
  holder.replaceChildren(el("table", {},
    el("thead", {}, el("tr", {}, ["started", "eval", "swarm", "pass rate", "passed", "failed", "cost", "against the previous run"].map((h) => el("th", {}, h)))),
    el("tbody", {}, runs.map((r) => el("tr", { "data-id": r.id, class: r.summary.failed ? "failed" : "passed" },
      el("td", {}, el("a", { href: `#/evals/${r.id}` }, clock(r.startedAt))),
      el("td", { title: r.file || "" }, r.name || ""), el("td", {}, r.swarm || ""),
      el("td", { class: "num rate" }, rate(r.summary.passRate)), el("td", { class: "num" }, r.summary.passed ?? ""),
      el("td", { class: "num" }, r.summary.failed ?? ""), el("td", { class: "num" }, usd(r.summary.costUsd)),
      el("td", { class: "against" }, against(r)))))));
}
async function evalRun(id) {
  const r = await api(`/api/evals/${encodeURIComponent(id)}`);
  const inRun = r.attached ? "" : `&eval=${encodeURIComponent(id)}`;
  const changes = [...r.regressed.map((c) => ["regressed", c]), ...r.improved.map((c) => ["improved", c])];
  const diff = !r.previous ? el("p", { class: "muted" }, "The first kept run of this eval file.")
    : el("div", { id: "eval-diff" },
      el("p", {}, "Against the previous run ", el("a", { href: `#/evals/${r.previous}` }, r.previous), `: ${against(r)}`),
      changes.length ? el("ul", {}, changes.map(([kind, c]) => el("li", { class: kind }, `${kind}: ${c.case} (${rate(c.before)} → ${rate(c.now)})`))) : "");
  const rows = r.results.map((c) => el("tr", { class: c.passed ? "passed" : "failed", "data-case": c.case },
    el("td", {}, r.repeat > 1 ? `${c.case} #${c.repeat + 1}` : c.case),
    el("td", {}, c.passed ? "pass" : "FAIL"),
    el("td", {}, c.passed ? "" : `${c.evaluator}: ${c.why}`),
    el("td", { class: "num" }, c.tokens ?? ""), el("td", { class: "num" }, usd(c.costUsd)),
    el("td", { class: "num" }, ms(c.latencyMs)),
    el("td", {}, el("a", { class: "conversation", href: `#/conversation?key=${encodeURIComponent(c.instanceKey)}&agent=${inRun}` }, "conversation"),
      c.traceId ? [" · ", el("a", { class: "trace", href: `#/trace/${c.traceId}${inRun ? "?" + inRun.slice(1) : ""}` }, "trace")] : "")));
  view().replaceChildren(
    el("h2", {}, `Eval ${r.name || ""} · `, el("a", { href: "#/evals" }, "all runs")),
    el("p", { class: "muted" }, `run ${r.id} · ${clock(r.startedAt)} · swarm ${r.swarm} · pass rate ${rate(r.summary.passRate)} · ` +
      `${r.summary.passed} passed, ${r.summary.failed} failed${r.summary.costUsd !== null && r.summary.costUsd !== undefined ? " · " + usd(r.summary.costUsd) : ""}`),
    diff,
    el("table", { id: "eval-cases" },
      el("thead", {}, el("tr", {}, ["case", "result", "why", "tokens", "cost", "latency", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
}

// -- router ------------------------------------------------------------------------------

const routes = { processes, graph, conversation, trace, calls, logs, charts, evals };
async function route() {
  for (const item of live) item.close();
  live = [];
  const [path, query] = (location.hash.slice(2) || "processes").split("?");
  const [name, ...rest] = path.split("/");
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.getAttribute("href") === `#/${name}`);
  const show = routes[name] || processes;
  try { await show(new URLSearchParams(query || ""), decodeURIComponent(rest.join("/"))); }
  catch (e) { flash(view(), e); }
}
(async () => {
  try { info = await api("/api/info"); } catch (e) { flash(view(), e); return; }
  $("#daemon").textContent = info.daemon ? `swarm ${info.swarm} · daemon pid ${info.daemon.pid}` : `swarm ${info.swarm} · no daemon`;
  window.addEventListener("hashchange", route);
  route();
})();
