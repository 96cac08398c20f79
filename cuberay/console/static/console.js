// cuberay console: one page, its views chosen by the address's #fragment, every figure from the platform's
// JSON API (/api/v1/call/<method>, the controller's typed API), refreshed while the view is open. Text from the
// platform is always set as text (never parsed as HTML). No libraries: nothing to vendor, nothing fetched
// from elsewhere (the server's Content-Security-Policy allows this origin only).
"use strict";

const REFRESH_MS = 1000;            // how often an open view asks again (the "live" in live pages)
const PAGE_SIZE = 50;               // rows per page of the Queue and Jobs tables
const STATS_WINDOW_S = 60;          // a service's live figures are over this many seconds
const ACTIVE = ["QUEUED", "PREEMPTED", "ADMITTED", "RUNNING"];
const S = { session: null, view: null, timer: null, filters: {}, kinds: null, dashboard: null, seq: 0, notice: null };

// ------------------------------------------------------------------ talking to the platform

class ApiError extends Error {
  constructor(status, detail) {
    super(detail.message || `HTTP ${status}`);
    this.status = status; this.type = detail.type || "Error";
  }
}

async function http(method, path, body) {
  const headers = { "Content-Type": "application/json" };
  if (S.session) headers[S.session.csrf_header] = S.session.csrf;
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
                                  credentials: "same-origin", cache: "no-store" });
  let data = null;
  try { data = await res.json(); } catch (e) { data = {}; }
  if (!res.ok) throw new ApiError(res.status, (data && data.error) || {});
  return data;
}

// What each job kind is (a service? does it run trials?): asked once per sign-in; the views that need it await it.
function knownKinds() {
  if (!S.kinds) S.kinds = http("GET", "/api/v1/kinds").catch(() => ({}));
  return S.kinds;
}

async function call(method, kwargs) {
  const data = await http("POST", `/api/v1/call/${method}`, { args: [], kwargs: kwargs || {} });
  return data.result;
}

// ------------------------------------------------------------------ building the page (text only)

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "on") for (const [ev, fn] of Object.entries(value)) el.addEventListener(ev, fn);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

const state = (value) => h("span", { class: `state s-${value}` }, String(value).toLowerCase().replace("_", " "));
const jobLink = (id) => h("a", { href: `#/job/${encodeURIComponent(id)}` }, id);
const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "–");
const amount = (r, v) => (v === undefined || v === null ? "–" : /memory/.test(r) ? `${+(v / 2 ** 30).toFixed(1)} GiB` : num(v));
const num = (x) => (x === undefined || x === null ? "–" : Number.isInteger(x) ? String(x) : x.toFixed(1));
const table = (heads, rows) => h("table", {},
  h("thead", {}, h("tr", {}, heads.map((t) => h("th", { scope: "col", class: /^(#|GPUs|workers|age|CPU|GPU)$/.test(t) ? "num" : "" }, t)))),
  h("tbody", {}, rows));
const empty = (...text) => h("div", { class: "empty" }, ...text);
const notice = (good, text) => h("div", { class: `notice ${good ? "good" : "bad"}`, role: good ? "status" : "alert" }, text);

function ago(seconds) {
  if (seconds < 90) return `${Math.round(seconds)} s`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

// A small YAML writer for the spec (JSON-shaped data), so a job's page shows what its file looked like.
function yaml(value, indent = "") {
  const scalar = (v) => (v === null ? "null" : typeof v === "string"
    ? (/^[\w./:@()+-][\w ./:@()+,=-]*$/.test(v) && !/^(true|false|null|yes|no|[-\d.]+)$/i.test(v) ? v : JSON.stringify(v))
    : String(v));
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return value.map((v) => (v !== null && typeof v === "object"
      ? `${indent}- ${yaml(v, indent + "  ").trimStart()}` : `${indent}- ${scalar(v)}`)).join("\n");
  }
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    if (!keys.length) return "{}";
    return keys.map((k) => {
      const v = value[k];
      if (v !== null && typeof v === "object" && Object.keys(v).length) return `${indent}${k}:\n${yaml(v, indent + "  ")}`;
      return `${indent}${k}: ${v !== null && typeof v === "object" ? (Array.isArray(v) ? "[]" : "{}") : scalar(v)}`;
    }).join("\n");
  }
  return indent + scalar(value);
}

// ------------------------------------------------------------------ filters kept across refreshes

function control(label, name, options) {
  const value = S.filters[name] || "";
  const on = { input: (e) => { S.filters[name] = e.target.value; S.filters.page = 0; refresh(true); } };
  const input = options
    ? h("select", { name, on }, h("option", { value: "" }, "all"), options.map((o) => h("option", { value: o, selected: o === value }, o)))
    : h("input", { name, value, type: "search", on, placeholder: label });
  return h("label", {}, label, input);
}

function pager(total, offset) {
  const pages = Math.max(1, Math.ceil(total / PAGE_SIZE));
  const page = Math.min(Math.floor(offset / PAGE_SIZE), pages - 1);
  const go = (p) => () => { S.filters.page = p; refresh(true); };
  return { page, view: h("div", { class: "pager" },
    h("button", { disabled: page === 0, on: { click: go(page - 1) } }, "‹ previous"),
    h("span", {}, `page ${page + 1} of ${pages} · ${total} in all`),
    h("button", { disabled: page >= pages - 1, on: { click: go(page + 1) } }, "next ›")) };
}

// ------------------------------------------------------------------ views

async function overview() {
  const since = Date.now() / 1000 - 3600;
  const [tenants, nodes, counts] = await Promise.all([call("tenants"), call("nodes"), call("event_counts", { since })]);
  const cards = tenants.map((t) => {
    const names = [...new Set([...Object.keys(t.guaranteed), ...Object.keys(t.max || {}), ...Object.keys(t.in_use)])];
    const picked = new URLSearchParams(location.hash.split("?")[1] || "").get("tenant") === t.name;
    return h("section", { class: picked ? "card picked" : "card", id: `tenant-${t.name}`, "aria-label": `tenant ${t.name}` },
      h("h3", {}, t.name),
      h("div", { class: "muted" }, `${t.running} running · ${t.queued} waiting`),
      names.map((r) => quotaBar(r, t)));
  });
  const total = {}, free = {};
  for (const n of nodes) for (const [r, v] of Object.entries(n.capacity)) {
    total[r] = (total[r] || 0) + v; free[r] = (free[r] || 0) + (n.free[r] || 0);
  }
  const gib = amount;
  return [
    h("h1", {}, "Overview"),
    h("h2", {}, "Tenants"),
    h("p", { class: "legend" }, h("span", {}, h("i", { class: "swatch-use" }), "in use"),
      h("span", {}, h("i", { class: "swatch-borrow" }), "borrowed (over the guarantee)"),
      h("span", {}, h("i", { class: "swatch-guar" }), "| guaranteed"), h("span", {}, "bar's end: max")),
    tenants.length ? h("div", { class: "cards" }, cards) : empty("No tenants: the platform file names none."),
    h("h2", {}, "Cluster"),
    table(["resource", "allocated", "free", "total"], ["CPU", "GPU", "memory"].filter((r) => r in total).map((r) =>
      h("tr", {}, h("td", {}, r), h("td", { class: "num" }, gib(r, total[r] - free[r])), h("td", { class: "num" }, gib(r, free[r])),
        h("td", { class: "num" }, gib(r, total[r]))))),
    h("h2", {}, "The last hour"),
    h("p", {}, ["admitted", "preempted", "failed", "succeeded", "cancelled"].map((k) => `${k}: ${counts[k] || 0}`).join(" · ")),
  ];
}

function quotaBar(resource, t) {
  const g = t.guaranteed[resource] || 0, m = (t.max || {})[resource], u = t.in_use[resource] || 0;
  const b = t.borrowed[resource] || 0, scale = Math.max(m || 0, g, u, 1e-9);
  const bar = h("div", { class: "bar", role: "img",
    "aria-label": `${resource}: ${amount(resource, u)} in use, ${amount(resource, g)} guaranteed, max ${m === undefined ? "none" : amount(resource, m)}, ${amount(resource, b)} borrowed` });
  const use = h("div", { class: "use" }); use.style.width = `${(100 * (u - b)) / scale}%`;
  const borrow = h("div", { class: "borrow" }); borrow.style.left = `${(100 * (u - b)) / scale}%`; borrow.style.width = `${(100 * b) / scale}%`;
  const guar = h("div", { class: "guar" }); guar.style.left = `calc(${(100 * g) / scale}% - 1px)`;
  bar.append(use, borrow, guar);
  const idle = Math.max(0, g - u), f = (v) => amount(resource, v);
  return [h("div", {}, h("strong", {}, resource)), bar,
    h("div", { class: "barlabel" }, `in use ${f(u)} · guaranteed ${f(g)} · max ${m === undefined ? "none" : f(m)} · ` +
      `borrowed ${f(b)} · idle guarantee ${f(idle)} (lent when others need it)`)];
}

// One page of a paged call (queue_page, job_page): the page the filters ask for, or the last one there is.
async function paged(method, kwargs) {
  const ask = (page) => call(method, { ...kwargs, offset: page * PAGE_SIZE, limit: PAGE_SIZE });
  let data = await ask(S.filters.page || 0);
  if (data.total && data.offset >= data.total) data = await ask(Math.ceil(data.total / PAGE_SIZE) - 1);
  return data;
}

async function queue() {
  const f = S.filters;
  const [data, tenants] = await Promise.all([
    paged("queue_page", { tenant: f.tenant || null, user: f.user || null, state: f.state || null }), call("tenants")]);
  const users = data.users, ids = new Set(data.entries.map((e) => e.job_id));
  const { view } = pager(data.total, data.offset);
  const body = data.entries.map((e) => h("tr", { "data-job": e.job_id },
    h("td", { class: "num" }, e.position === null ? "–" : e.position),
    h("td", {}, e.job_id in users ? jobLink(e.job_id) : e.job_id), h("td", {}, e.tenant), h("td", {}, users[e.job_id] || "–"),
    h("td", {}, e.kind), h("td", {}, state(e.state)), h("td", { class: "num" }, num(e.gpus)), h("td", { class: "num" }, e.workers),
    h("td", { class: "num" }, ago(e.age_s)), h("td", { class: "reason" }, linkify(e.reason, ids, users, new Set(tenants.map((t) => t.name))))));
  const filtered = f.tenant || f.user || f.state;
  return [
    h("h1", {}, "Queue"),
    h("div", { class: "controls" }, control("tenant", "tenant", tenants.map((t) => t.name)),
      control("user (your tenants' jobs)", "user"), control("state", "state", ["waiting", "running"])),
    data.total ? [table(["#", "job", "tenant", "user", "kind", "state", "GPUs", "workers", "age", "why"], body), view]
      : filtered ? empty("No running or waiting job matches these filters.")
      : empty("Nothing is running or waiting. Submit a job: ", h("code", {}, "cuberay submit configs/jobs/task.yaml")),
  ];
}

// A reason names tenants and jobs: make those links (a job the viewer may not read stays a name).
function linkify(text, ids, readable, tenants) {
  const out = [];
  for (const part of String(text || "").split(/('[\w.-]+'|\b[\w.-]+-\d+\b)/)) {
    const bare = part.replace(/'/g, "");
    if (ids.has(bare) && bare in readable) out.push(jobLink(bare));
    else if (tenants.has(bare)) out.push("'", h("a", { href: `#/?tenant=${encodeURIComponent(bare)}`, title: `tenant ${bare}'s quota` }, bare), "'");
    else out.push(part);
  }
  return out;
}

async function jobs() {
  const f = S.filters, since = f.since ? Date.now() / 1000 - Number(f.since) * 3600 : null;
  const [data, tenants, kinds] = await Promise.all([paged("job_page", { tenant: f.tenant || null, user: f.user || null,
    kinds: f.kind ? [f.kind] : null, states: f.state ? [f.state] : null, name: f.name || null, since }), call("tenants"), knownKinds()]);
  const { view } = pager(data.total, data.offset);
  const body = data.records.map((r) => h("tr", {},
    h("td", {}, jobLink(r.id)), h("td", {}, r.tenant), h("td", {}, r.user), h("td", {}, r.kind), h("td", {}, state(r.state)),
    h("td", {}, when(r.submit_time)), h("td", {}, when(r.end_time)), h("td", { class: "reason" }, r.message || r.reason || "")));
  const filtered = f.tenant || f.user || f.kind || f.state || f.name || f.since;
  return [
    h("h1", {}, "Jobs"),
    h("div", { class: "controls" }, control("name or id", "name"), control("tenant", "tenant", tenants.map((t) => t.name)),
      control("user", "user"), control("kind", "kind", Object.keys(kinds)),
      control("state", "state", ["QUEUED", "PREEMPTED", "ADMITTED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"]),
      control("submitted in the last", "since", ["1", "6", "24", "168"])),
    data.total ? [table(["job", "tenant", "user", "kind", "state", "submitted", "ended", "outcome"], body), view]
      : empty(filtered ? "No job matches these filters." : "No jobs yet: ", filtered ? "" : h("code", {}, "cuberay submit configs/jobs/task.yaml")),
  ];
}

const LOGS = {};  // job id -> {attempt, offset, text}: the log is read on from where the last refresh stopped

async function job(id) {
  const [rec, events] = await Promise.all([call("status", { ref: id }), call("events", { job_id: id, limit: 500 })]);
  const [log, trials] = await Promise.all([logTail(rec), trialsSection(rec)]);
  if (!S.dashboard) S.dashboard = await call("dashboard_url").catch(() => "");
  const ray = rec.submission_id && S.dashboard ? h("a", { href: `${S.dashboard}/#/jobs/${encodeURIComponent(rec.submission_id)}`,
    target: "_blank", rel: "noopener" }, "this run in the Ray dashboard") : null;
  const nodes = (rec.allocation || []).map((a) => a.node_id.slice(0, 8));
  const cancel = ACTIVE.includes(rec.state)
    ? h("button", { class: "danger", id: "cancel", on: { click: () => act(() => call("cancel", { ref: id, why: "cancelled from the console" }),
      (r) => `Job ${r.id} is ${r.state.toLowerCase()}.`) } }, "Cancel job") : null;
  return [
    h("h1", {}, `${rec.id} `, state(rec.state)),
    h("div", { id: "outcome" }), cancel,
    h("div", { class: "row" },
      h("section", {}, h("h2", {}, "The job"), h("dl", { class: "facts" },
        ...fact("tenant", rec.tenant), ...fact("user", rec.user), ...fact("kind", rec.kind), ...fact("priority", rec.priority),
        ...fact("submitted", when(rec.submit_time)), ...fact("started", when(rec.start_time)), ...fact("ended", when(rec.end_time)),
        ...fact("attempts", rec.attempts), ...fact("GPUs", num(rec.gpus)),
        ...fact("nodes", nodes.length ? `${nodes.length} worker(s) on ${[...new Set(nodes)].join(", ")}` : "none held"),
        ...fact("checkpoint", rec.checkpoint_time ? `last at ${when(rec.checkpoint_time)}` : "none reported"),
        ...fact("why", rec.reason || "–"), ...fact("outcome", rec.message || "–"),
        ...fact("resource correction", rec.correction ? correction(rec.correction) : "none applied"),
        ...fact("Ray", ray || "not started yet"))),
      h("section", {}, h("h2", {}, "Timeline"), events.length
        ? h("ol", { class: "timeline" }, [...events].sort((a, b) => a.time - b.time).map((e) =>
          h("li", { "data-kind": e.kind }, h("strong", {}, e.kind), ` · ${when(e.time)} · `, e.message)))
        : empty("No events yet."))),
    trials,
    h("h2", {}, `Log${log.attempt ? ` (attempt ${log.attempt})` : ""}`),
    h("pre", { id: "log", "aria-live": "off" }, log.text || "(no output yet)"),
    h("h2", {}, "Spec"), h("pre", {}, yaml(rec.spec)),
  ];
}

function fact(name, value) { return [h("dt", {}, name), h("dd", {}, value)]; }

function correction(c) {
  return `${c.reason || ""} (requested ${JSON.stringify(c.requested)}, corrected to ${JSON.stringify(c.corrected)})`;
}

async function logTail(rec) {
  let seen = LOGS[rec.id] || { attempt: null, offset: 0, text: "" };
  for (let reads = 0; reads < 4; reads++) {  // a few chunks per refresh: a long log catches up without a stall
    const chunk = await call("logs", { ref: rec.id, attempt: seen.attempt, offset: seen.offset, limit: 262144 });
    if (seen.attempt !== null && chunk.latest_attempt > seen.attempt && !chunk.more) {
      seen = { attempt: chunk.latest_attempt, offset: 0, text: "" };  // a new attempt: follow it
      continue;
    }
    seen = { attempt: chunk.attempt, offset: chunk.next_offset, text: (seen.text + chunk.text).slice(-65536) };
    if (!chunk.more) break;
  }
  LOGS[rec.id] = seen;
  return seen;
}

async function nodesView() {
  const [nodes, running, active] = await Promise.all([call("nodes"), call("running"),
    call("queue_page", { state: "running", limit: 1000 })]);
  const byJob = Object.fromEntries(active.entries.map((e) => [e.job_id, e]));
  const held = {};  // node id -> [{job, gpus}]
  for (const [jobId, nodeIds] of Object.entries(running)) {
    const e = byJob[jobId], per = e && e.workers ? e.gpus / e.workers : 0;
    for (const n of nodeIds) (held[n] = held[n] || []).push({ job: jobId, tenant: e ? e.tenant : "?", gpus: per });
  }
  return [h("h1", {}, "Nodes"), nodes.length ? h("div", { class: "cards" }, nodes.map((n) => {
    const cards = n.capacity.GPU || 0, slots = [];
    let used = 0;
    for (const w of held[n.node_id] || []) for (let i = 0; i < Math.round(w.gpus) && used < cards; i++, used++)
      slots.push(h("div", { class: "slot held", title: `${w.job} (${w.tenant})` }, w.tenant.slice(0, 3)));
    while (slots.length < cards) slots.push(h("div", { class: "slot", title: "free" }, ""));
    const labels = Object.entries(n.labels).map(([k, v]) => `${k}=${v}`).join(", ");
    return h("section", { class: "card", "aria-label": `node ${n.node_id.slice(0, 8)}` },
      h("h3", {}, n.node_id.slice(0, 12)),
      h("div", {}, `CPU ${num(n.capacity.CPU - (n.free.CPU || 0))} of ${num(n.capacity.CPU || 0)} allocated · GPU ${num(cards - (n.free.GPU || 0))} of ${num(cards)}`),
      cards ? h("div", { class: "cardmap", role: "list", "aria-label": "GPU cards" }, slots) : h("div", { class: "muted" }, "no GPUs"),
      h("div", {}, [...new Set((held[n.node_id] || []).map((w) => w.job))].map((j) => [jobLink(j), " "])),
      h("div", { class: "muted" }, labels || "no labels"));
  })) : empty("No nodes are known yet.")];
}

async function pipelines() {
  const [stored, runs] = await Promise.all([call("pipeline_list"), call("pipeline_runs")]);
  if (!stored.length && !runs.length) return [h("h1", {}, "Pipelines"), empty("No pipelines yet: ", h("code", {}, "cuberay pipeline submit configs/pipelines/fan-out.yaml"))];
  return [h("h1", {}, "Pipelines"),
    h("h2", {}, "Stored"),
    table(["pipeline", "tenant", "version", "steps", "schedule (UTC)", "next ticks"],
      stored.map((p) => h("tr", { "data-pipeline": p.name }, h("td", {}, p.name), h("td", {}, p.tenant), h("td", { class: "num" }, p.version),
        h("td", {}, p.steps.join(", ")), h("td", {}, p.cron ? h("code", {}, p.cron) : "on request"),
        h("td", { class: "next-ticks" }, p.next_ticks.length ? p.next_ticks.map(when).join(" · ") : "–")))),
    h("h2", {}, "Runs"),
    runs.length ? table(["run", "pipeline", "tenant", "trigger", "execution date", "state", "message"],
      runs.map((r) => h("tr", {}, h("td", {}, h("a", { href: `#/run/${encodeURIComponent(r.id)}` }, r.id)), h("td", {}, r.pipeline),
        h("td", {}, r.tenant), h("td", {}, r.trigger), h("td", {}, when(r.execution_time)), h("td", {}, state(r.state)), h("td", {}, r.message))))
      : empty("No runs yet: a scheduled pipeline's first run comes at its first tick; ", h("code", {}, "cuberay pipeline run NAME"), " starts one now.")];
}

async function pipelineRun(id) {
  const [run, steps] = await call("pipeline_status", { ref: id });
  const live = run.state === "WAITING" || run.state === "RUNNING";
  return [h("h1", {}, `${run.id} `, state(run.state)), h("div", { id: "outcome" }),
    h("div", { class: "controls" },
      live ? h("button", { class: "danger", on: { click: () => act(() => call("pipeline_cancel", { ref: id }), (r) => `Run ${r.id} is ${r.state.toLowerCase()}.`) } }, "Cancel run") : null,
      h("button", { class: "primary", on: { click: () => act(() => call("pipeline_run", { name: run.pipeline, tenant: run.tenant }),
        (r) => `Started run ${r.id}.`) } }, "Run again")),
    h("p", { class: "muted" }, `${run.trigger} run · execution date ${when(run.execution_time)} · ${run.message || ""}`),
    dag(run.spec, steps),
    table(["step", "state", "attempt", "job", "message"], steps.map((s) => h("tr", { "data-step": s.name }, h("td", {}, s.name),
      h("td", {}, state(s.state)), h("td", { class: "num" }, s.attempt), h("td", {}, s.job_id ? jobLink(s.job_id) : "–"), h("td", {}, s.message))))];
}

// The pipeline's steps as a layered drawing: a step's column is one more than its deepest dependency's.
function dag(spec, steps) {
  const defs = (spec.spec || spec).steps || [], byName = Object.fromEntries(steps.map((s) => [s.name, s]));
  const depth = {};
  const level = (s) => depth[s.name] ??= 1 + Math.max(-1, ...(s.depends_on || []).map((d) => level(defs.find((x) => x.name === d) || { name: d })));
  defs.forEach(level);
  const cols = {}, pos = {}, W = 150, H = 36, GX = 60, GY = 20;
  for (const s of defs) { const c = depth[s.name]; cols[c] = (cols[c] || 0) + 1; pos[s.name] = { x: c * (W + GX) + 10, y: (cols[c] - 1) * (H + GY) + 10 }; }
  const width = (Math.max(0, ...Object.values(depth)) + 1) * (W + GX), height = Math.max(1, ...Object.values(cols)) * (H + GY) + 10;
  const pic = svg("svg", { class: "dag", width, height, role: "img", "aria-label": "the pipeline's steps and their dependencies" });
  const colour = { SUCCEEDED: "#116329", RUNNING: "#0b5cad", FAILED: "#a40e26", UPSTREAM_FAILED: "#a40e26", PENDING: "#6e40c9" };
  for (const s of defs) for (const d of s.depends_on || []) if (pos[d]) {
    pic.append(svg("line", { x1: pos[d].x + W, y1: pos[d].y + H / 2, x2: pos[s.name].x, y2: pos[s.name].y + H / 2, stroke: "#8c959f", "stroke-width": 2 }));
  }
  for (const s of defs) {
    const st = (byName[s.name] || {}).state || "PENDING", c = colour[st] || "#57606a";
    pic.append(svg("g", { "data-step": s.name, "data-state": st },
      svg("rect", { x: pos[s.name].x, y: pos[s.name].y, width: W, height: H, fill: "#fff", stroke: c }),
      svg("text", { x: pos[s.name].x + 8, y: pos[s.name].y + 15, fill: "#1b1f24" }, s.name),
      svg("text", { x: pos[s.name].x + 8, y: pos[s.name].y + 29, fill: c }, st.toLowerCase().replace("_", " "))));
  }
  return pic;
}

async function services() {
  const kinds = await knownKinds(), serviceKinds = Object.keys(kinds).filter((k) => kinds[k].service);
  const apps = serviceKinds.length ? (await call("job_page", { kinds: serviceKinds, limit: 100 })).records : [];
  if (!apps.length) return [h("h1", {}, "Services"), empty("No services yet: ", h("code", {}, "cuberay serve deploy configs/jobs/serve.yaml"))];
  const [histories, live] = await Promise.all([Promise.all(apps.map((a) => call("serve_history", { app: a.id, limit: 20 }))),
    Promise.all(apps.map((a) => (a.state === "RUNNING" ? call("serve_stats", { app: a.id, window_s: STATS_WINDOW_S }).catch(() => null) : null)))]);
  return [h("h1", {}, "Services"), h("div", { id: "outcome" }), apps.map((a, i) => {
    const changes = [...histories[i]].reverse(), latest = changes.length ? changes[0].weights : {};  // newest first
    const versions = (a.spec.spec || {}).versions || [], figures = (live[i] && live[i].versions) || {};
    const ms = (v) => (v === null || v === undefined ? "–" : `${num(v)} ms`);
    return h("section", { class: "card", "data-app": a.id }, h("h3", {}, jobLink(a.id), " ", state(a.state)),
      h("h4", {}, `Traffic split and the last ${STATS_WINDOW_S} s`),
      table(["version", "weight", "req/s", "errors", "p50", "p99", "requests"], (versions.length ? versions.map((v) => v.name) : Object.keys(latest)).map((v) => {
        const f = figures[v];
        return h("tr", { "data-version": v }, h("td", {}, v), h("td", { class: "num" }, `${num(latest[v] || 0)} %`),
          h("td", { class: "num rate" }, f ? f.rate_per_s.toFixed(2) : "–"), h("td", { class: "num errors" }, f ? `${(100 * f.error_rate).toFixed(1)} %` : "–"),
          h("td", { class: "num p50" }, f ? ms(f.p50_ms) : "–"), h("td", { class: "num p99" }, f ? ms(f.p99_ms) : "–"),
          h("td", { class: "num total" }, f ? f.requests : "–"));
      })),
      live[i] && live[i].note ? h("p", { class: "muted" }, live[i].note) : null,
      ACTIVE.includes(a.state) && changes.length > 1 ? h("button", { on: { click: () => act(() => call("serve_rollback", { job_id: a.id }),
        (w) => `Weights now ${JSON.stringify(w)}.`) } }, "Roll back the last change") : null,
      h("h4", {}, "Changes"), changes.length ? table(["when", "who", "action", "weights", "note"], changes.map((c) => h("tr", {},
        h("td", {}, when(c.time)), h("td", {}, c.user), h("td", {}, c.action), h("td", {}, JSON.stringify(c.weights)), h("td", {}, c.note))))
        : empty("Not deployed yet."));
  })];
}

// An action's outcome, kept for its view (redraws keep showing it) until the person goes to another page.
async function act(doIt, say) {
  const view = S.view;
  try {
    const result = await doIt();
    S.notice = { view, node: notice(true, say(result)) };
  } catch (err) {
    S.notice = { view, node: notice(false, `Refused: ${err.message}`) };
  }
  refresh(true);
}

// ------------------------------------------------------------------ routing, refreshing, signing in

const ROUTES = [
  [/^\/?$/, overview, "#/"], [/^\/queue$/, queue, "#/queue"], [/^\/jobs$/, jobs, "#/jobs"], [/^\/job\/(.+)$/, job, "#/jobs"],
  [/^\/nodes$/, nodesView, "#/nodes"], [/^\/pipelines$/, pipelines, "#/pipelines"], [/^\/run\/(.+)$/, pipelineRun, "#/pipelines"],
  [/^\/services$/, services, "#/services"], [/^\/tune$/, searches, "#/tune"],
];

function current() {
  const path = location.hash.replace(/^#/, "").split("?")[0] || "/";
  for (const [re, fn, nav] of ROUTES) { const m = path.match(re); if (m) return { key: path, fn, nav, args: m.slice(1).map(decodeURIComponent) }; }
  return { key: path, fn: async () => [h("h1", {}, "Not found"), empty("No such page: ", h("a", { href: "#/" }, "the overview"))], nav: "", args: [] };
}

async function refresh(force) {
  clearTimeout(S.timer);
  if (!S.session) return;
  const view = current(), seq = ++S.seq, main = document.getElementById("main");
  if (S.view !== view.key) { S.view = view.key; S.filters = {}; S.notice = null; main.replaceChildren(h("p", { class: "muted" }, "Loading…")); }
  for (const a of document.querySelectorAll("nav a")) {
    if (a.getAttribute("href") === view.nav) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  // A person choosing from a list or typing a filter keeps it: the timer's redraw waits until they are done.
  const busy = document.activeElement && main.contains(document.activeElement) && /^(SELECT|INPUT)$/.test(document.activeElement.tagName);
  if (!force && busy) { S.timer = setTimeout(refresh, REFRESH_MS); return; }
  try {
    const content = await view.fn(...view.args);
    if (seq !== S.seq) return;  // a newer refresh (another page, a filter) already drew
    const focused = document.activeElement && document.activeElement.name;
    main.replaceChildren(...[content].flat(3).filter(Boolean));
    const box = document.getElementById("outcome");
    if (box && S.notice && S.notice.view === S.view) box.replaceChildren(S.notice.node);
    if (focused) {
      const el = main.querySelector(`[name="${focused}"]`);
      if (el) { el.focus(); if (el.tagName === "INPUT") el.setSelectionRange(el.value.length, el.value.length); }
    }
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) { S.session = null; return signIn(); }
    if (seq !== S.seq) return;
    main.replaceChildren(h("h1", {}, "Could not load this page"), notice(false, err.message));
    // A refusal or an unknown name does not change by asking again every second: the person retries.
    if (err instanceof ApiError && (err.status === 403 || err.status === 404)) {
      main.append(h("p", {}, h("button", { on: { click: () => refresh(true) } }, "Try again")));
      return;
    }
  }
  if (seq === S.seq) S.timer = setTimeout(refresh, REFRESH_MS);
}

function signIn(message) {
  const main = document.getElementById("main");
  document.getElementById("who").textContent = "";
  const form = h("form", { class: "login", "aria-label": "sign in", on: { submit: async (e) => {
    e.preventDefault();
    const data = new FormData(form);
    try {
      S.session = await http("POST", "/api/v1/login", { token: data.get("token"), user: data.get("user") });
      start();
    } catch (err) { form.querySelector(".problem").replaceChildren(notice(false, err.message)); }
  } } },
  h("h1", {}, "Sign in to cuberay"),
  h("p", { class: "muted" }, "Paste the cluster's token (", h("code", {}, "cat ~/.ray/auth_token"), " on the machine that ran ",
    h("code", {}, "cuberay up"), ") and the user name you act as, the one your CLI uses."),
  h("div", { class: "problem" }, message ? notice(false, message) : null),
  h("label", { for: "token" }, "Cluster token"), h("input", { id: "token", name: "token", type: "password", required: true, autocomplete: "current-password" }),
  h("label", { for: "user" }, "User name"), h("input", { id: "user", name: "user", required: true, autocomplete: "username" }),
  h("p", {}, h("button", { class: "primary", type: "submit" }, "Sign in")));
  main.replaceChildren(form);
  form.querySelector("#token").focus();
}

async function start() {
  document.getElementById("who").replaceChildren(`signed in as ${S.session.user} `,
    h("button", { on: { click: async () => { await http("POST", "/api/v1/logout").catch(() => null); S.session = null; signIn(); } } }, "Sign out"));
  S.kinds = null;
  knownKinds();  // asked beside the first view's own calls, not before them: a first paint waits for one round trip less
  S.view = null;
  refresh(true);
}

window.addEventListener("hashchange", () => refresh(true));
window.addEventListener("DOMContentLoaded", async () => {
  const session = await http("GET", "/api/v1/session").catch(() => ({}));
  if (!session.user) return signIn();
  S.session = session;
  start();
});
