// cuberay console: searches (the kinds whose jobs run trials, as /api/v1/kinds says) — the Tune page, and the
// trials section of such a job's page: each trial's parameters, metric and state, and the best-so-far curve.
// Uses console.js's helpers (h, svg, table, state, jobLink, empty, num, call), loaded after this file.
"use strict";

const trialKinds = async () => { const all = await knownKinds(); return Object.keys(all).filter((k) => all[k].trials); };

async function searches() {
  const kinds = await trialKinds();
  const jobs = kinds.length ? (await call("job_page", { kinds, limit: 50 })).records : [];
  if (!jobs.length) return [h("h1", {}, "Tune jobs"), empty("No searches yet: ", h("code", {}, "cuberay submit configs/jobs/tune.yaml"))];
  const pages = await Promise.all(jobs.map((j) => call("trials", { ref: j.id })));
  return [h("h1", {}, "Tune jobs"), table(["job", "tenant", "state", "trials", "best", "progress"], jobs.map((j, i) => {
    const p = pages[i], best = bestSoFar(p);
    return h("tr", { "data-job": j.id }, h("td", {}, jobLink(j.id)), h("td", {}, j.tenant), h("td", {}, state(j.state)),
      h("td", { class: "num" }, p.trials.length), h("td", {}, best.length ? `${p.metric} ${fmt(best[best.length - 1].best)}` : "–"),
      h("td", {}, j.reason || j.message || "–"));
  }))];
}

// The trials section of a search's job page (an empty list when the job's kind runs none).
async function trialsSection(rec) {
  if (!((await knownKinds())[rec.kind] || {}).trials) return [];
  const p = await call("trials", { ref: rec.id });
  if (!p.trials.length) return [h("h2", {}, "Trials"), empty("No trials reported yet: they show as the search starts them.")];
  const keys = [...new Set(p.trials.flatMap((t) => Object.keys(t.config)))].sort();
  const best = bestSoFar(p), top = best.length ? best[best.length - 1].best : null;
  return [h("h2", {}, `Trials (${p.trials.length}, ${p.metric}, ${p.mode === "max" ? "higher" : "lower"} is better)`),
    curve(p, best),
    table(["#", "state", ...keys, p.metric, "reports", "error"], p.trials.map((t) =>
      h("tr", { "data-trial": t.index, class: t.value !== null && t.value === top ? "best" : "" },
        h("td", { class: "num" }, t.index), h("td", {}, state(t.state)), keys.map((k) => h("td", {}, fmt(t.config[k]))),
        h("td", { class: "num" }, fmt(t.value)), h("td", { class: "num" }, t.iterations), h("td", {}, t.error || ""))))];
}

// Trials in their order with a value, each with the best value up to it.
function bestSoFar(p) {
  const better = p.mode === "max" ? (a, b) => a > b : (a, b) => a < b;
  const out = [];
  for (const t of [...p.trials].sort((a, b) => a.index - b.index)) {
    if (t.value === null || t.value === undefined) continue;
    const prev = out.length ? out[out.length - 1].best : null;
    out.push({ index: t.index, value: t.value, best: prev === null || better(t.value, prev) ? t.value : prev });
  }
  return out;
}

// Each trial's value as a dot and the best so far as a step line, by trial number.
function curve(p, points) {
  const W = 560, H = 200, L = 56, B = 28, pad = 10;
  const pic = svg("svg", { class: "curve", width: W, height: H, role: "img",
    "aria-label": `each trial's ${p.metric} and the best so far` });
  if (!points.length) return pic;
  const xs = points.map((q) => q.index), ys = points.map((q) => q.value);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs) || 1], [y0, y1] = [Math.min(...ys), Math.max(...ys)];
  const X = (x) => L + ((x - x0) / (x1 - x0 || 1)) * (W - L - pad), Y = (y) => H - B - ((y - y0) / (y1 - y0 || 1)) * (H - B - pad);
  pic.append(svg("line", { x1: L, y1: H - B, x2: W - pad, y2: H - B, stroke: "#8c959f" }),
    svg("line", { x1: L, y1: pad, x2: L, y2: H - B, stroke: "#8c959f" }),
    svg("text", { x: L, y: H - 8, fill: "#57606a" }, "trial"), svg("text", { x: 4, y: pad + 10, fill: "#57606a" }, fmt(y1)),
    svg("text", { x: 4, y: H - B, fill: "#57606a" }, fmt(y0)));
  const steps = points.map((q, i) => (i ? `H${X(q.index).toFixed(1)} V${Y(q.best).toFixed(1)}`
    : `M${X(q.index).toFixed(1)} ${Y(q.best).toFixed(1)}`)).join(" ");
  pic.append(svg("path", { d: steps, fill: "none", stroke: "#a40e26", "stroke-width": 2, class: "best-line" }));
  for (const q of points) pic.append(svg("circle", { cx: X(q.index).toFixed(1), cy: Y(q.value).toFixed(1), r: 3.5, fill: "#0b5cad", "data-trial": q.index },
    svg("title", {}, `trial ${q.index}: ${fmt(q.value)}`)));
  return pic;
}

const fmt = (v) => (v === null || v === undefined ? "–" : typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : String(v));
