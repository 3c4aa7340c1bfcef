#include "web/status_page.hpp"

namespace rekindle::web {

namespace {

constexpr std::string_view page = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rekindle</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2430; background: #f5f6f8; }
  header { background: #1d2430; color: #fff; padding: 10px 20px; display: flex; gap: 24px; align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  header .fig b { font-size: 16px; }
  main { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr)); gap: 14px; padding: 14px; }
  section { background: #fff; border-radius: 6px; padding: 10px 14px; box-shadow: 0 1px 2px #0002; overflow: auto; }
  h2 { font-size: 14px; margin: 0 0 8px; text-transform: uppercase; letter-spacing: .04em; color: #566; }
  table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
  th, td { text-align: left; padding: 2px 8px 2px 0; border-bottom: 1px solid #eee; white-space: nowrap; }
  .state-running, .up { color: #17803d; } .state-failed, .down, .quarantined { color: #b42318; }
  .state-rendezvous, .state-waiting_for_nodes, .state-paused, .recovering { color: #b54708; }
  #error { color: #b42318; padding: 0 20px; }
  .bar { display: inline-block; height: 12px; vertical-align: middle; }
  .p-detect { background: #7a5af8; } .p-respawn { background: #f79009; } .p-rendezvous { background: #2e90fa; } .p-restore { background: #12b76a; } .p-first-step { background: #98a2b3; }
  .legend span { margin-right: 10px; } .legend .bar { width: 10px; margin-right: 3px; }
  svg text { font-size: 11px; fill: #566; }
  #events td.detail { white-space: normal; }
</style>
</head>
<body data-state="loading">
<header>
  <h1 id="job">rekindle</h1>
  <span class="fig">state <b id="job-state">…</b></span>
  <span class="fig">epoch <b id="epoch">–</b></span>
  <span class="fig">step <b id="step">–</b></span>
  <span class="fig">world <b id="world">–</b></span>
  <span class="fig">loss <b id="loss">–</b></span>
  <span class="fig">tokens/s <b id="tokens">–</b></span>
  <span class="fig">restarts <b id="restarts">–</b></span>
  <span class="fig">updated <b id="updated">never</b></span>
</header>
<div id="error"></div>
<main>
  <section><h2>Loss</h2><svg id="loss-chart" viewBox="0 0 600 220" width="100%" height="220"></svg></section>
  <section><h2>Recoveries</h2>
    <div class="legend"><span><i class="bar p-detect"></i>detection</span><span><i class="bar p-respawn"></i>respawn</span>
      <span><i class="bar p-rendezvous"></i>rendezvous</span><span><i class="bar p-restore"></i>restore</span><span><i class="bar p-first-step"></i>first step</span></div>
    <table id="recoveries"><thead><tr><th>epoch</th><th>cause</th><th>restored</th><th>lost</th><th>phases</th><th>total</th></tr></thead><tbody></tbody></table>
  </section>
  <section><h2>Nodes</h2>
    <table id="nodes"><thead><tr><th>node</th><th>state</th><th>heartbeat</th><th>check</th></tr></thead><tbody></tbody></table>
  </section>
  <section><h2>Ranks</h2>
    <table id="ranks"><thead><tr><th>rank</th><th>node</th><th>state</th><th>step</th><th>step time</th><th>compute</th><th>comm</th><th>snapshot</th><th>restarts</th></tr></thead><tbody></tbody></table>
  </section>
  <section><h2>Checkpoints</h2><table id="checkpoints"><tbody></tbody></table></section>
  <section><h2>Events</h2>
    <table id="events"><thead><tr><th>time</th><th>epoch</th><th>kind</th><th>where</th><th>detail</th></tr></thead><tbody></tbody></table>
  </section>
</main>
<script>
"use strict";
const token = new URLSearchParams(location.search).get("token") || "";
const headers = token ? { "Authorization": "Bearer " + token } : {};
const $ = (id) => document.getElementById(id);
const fmt = (v, d = 3) => (v === null || v === undefined) ? "–" : (typeof v === "number" ? +v.toFixed(d) : v);
function cell(tr, text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td); return td; }
function fill(id, rows, make) {
  const body = $(id).tBodies[0];
  body.replaceChildren(...rows.map((r) => { const tr = document.createElement("tr"); make(tr, r); return tr; }));
}
function drawLoss(curve) {
  const svg = $("loss-chart"), W = 600, H = 220, L = 48, B = 20;
  svg.replaceChildren();
  if (!curve || curve.length === 0) return;
  const xs = curve.map((p) => p[0]), ys = curve.map((p) => p[1]).filter(Number.isFinite);
  if (ys.length === 0) return;
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1), y0 = Math.min(...ys), y1 = Math.max(...ys, y0 + 1e-9);
  const X = (x) => L + (x - x0) / (x1 - x0) * (W - L - 8), Y = (y) => 6 + (1 - (y - y0) / (y1 - y0)) * (H - B - 12);
  const ns = "http://www.w3.org/2000/svg";
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", curve.filter((p) => Number.isFinite(p[1])).map((p, i) => (i ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join(""));
  path.setAttribute("fill", "none"); path.setAttribute("stroke", "#2e90fa"); path.setAttribute("stroke-width", "1.5");
  path.id = "loss-path"; path.dataset.points = String(curve.length);
  svg.appendChild(path);
  for (const [v, y] of [[y1, Y(y1)], [y0, Y(y0)]]) { const t = document.createElementNS(ns, "text"); t.setAttribute("x", 2); t.setAttribute("y", y + 4); t.textContent = fmt(v, 3); svg.appendChild(t); }
  for (const [v, x] of [[x0, X(x0)], [x1, X(x1) - 30]]) { const t = document.createElementNS(ns, "text"); t.setAttribute("x", x); t.setAttribute("y", H - 4); t.textContent = "step " + v; svg.appendChild(t); }
}
function show(s, events) {
  document.body.dataset.state = s.state;
  document.body.dataset.epoch = String(s.epoch);
  document.body.dataset.recoveries = String(s.recoveries.length);
  $("job").textContent = s.job;
  const st = $("job-state"); st.textContent = s.state; st.className = "state-" + s.state;
  $("epoch").textContent = s.epoch;
  $("step").textContent = s.step + (s.total_steps ? " / " + s.total_steps : "");
  $("world").textContent = s.world;
  $("loss").textContent = fmt(s.loss, 4);
  $("tokens").textContent = fmt(s.tokens_per_s, 0);
  $("restarts").textContent = s.restarts;
  $("updated").textContent = new Date().toLocaleTimeString();
  drawLoss(s.loss_curve);
  const maxTotal = Math.max(1e-9, ...s.recoveries.map((r) => r.total_s || 0));
  fill("recoveries", s.recoveries.slice().reverse(), (tr, r) => {
    tr.dataset.done = String(r.done);
    cell(tr, r.epoch); cell(tr, r.cause); cell(tr, r.done ? r.restored_step + " (" + r.source + ")" : "…");
    cell(tr, r.done ? r.steps_lost : "–");
    const td = cell(tr, "", r.done ? "" : "recovering");
    if (!r.done) td.textContent = "recovering…";
    for (const [p, v] of [["detect", r.detect_s], ["respawn", r.respawn_s], ["rendezvous", r.rendezvous_s], ["restore", r.restore_s], ["first-step", r.first_step_s]]) {
      const b = document.createElement("i"); b.className = "bar p-" + p; b.title = p + " " + fmt(v) + " s";
      b.style.width = Math.max(0, 220 * (v || 0) / maxTotal).toFixed(1) + "px"; td.appendChild(b);
    }
    cell(tr, r.done ? fmt(r.total_s) + " s" : "–");
  });
  fill("nodes", s.nodes, (tr, n) => {
    cell(tr, n.name); cell(tr, n.up ? "up" : "down", n.up ? "up" : "down");
    cell(tr, n.heartbeat_age_s === null || n.heartbeat_age_s === undefined ? "–" : fmt(n.heartbeat_age_s, 1) + " s ago");
    cell(tr, n.check || "–", n.check === "quarantined" ? "quarantined" : "");
  });
  fill("ranks", s.ranks, (tr, r) => {
    cell(tr, r.rank); cell(tr, r.node); cell(tr, r.state, "state-" + r.state); cell(tr, r.step);
    cell(tr, fmt(r.step_time_s) + " s"); cell(tr, fmt(r.compute_time_s) + " s"); cell(tr, fmt(r.communication_time_s) + " s");
    cell(tr, fmt(r.snapshot_stall_s) + " s"); cell(tr, r.restarts);
  });
  const c = s.checkpoint;
  fill("checkpoints", [
    ["in memory, committed", s.committed_step], ["on disk, newest", c.last_step], ["being written", c.writing_step],
    ["last write took", c.persist_s === null || c.persist_s === undefined ? null : fmt(c.persist_s) + " s"],
    ["every", c.persist_every ? c.persist_every + " steps" : "off"], ["directory", c.directory], ["error", c.error]],
    (tr, [k, v]) => { cell(tr, k); cell(tr, v === null || v === undefined ? "–" : v); });
  fill("events", events.slice().reverse().slice(0, 100), (tr, e) => {
    cell(tr, new Date(e.unix_ms).toLocaleTimeString()); cell(tr, e.epoch); cell(tr, e.kind);
    cell(tr, [e.rank !== null && e.rank !== undefined ? "rank " + e.rank : "", e.node || ""].filter(Boolean).join(" on "));
    cell(tr, e.detail, "detail");
  });
}
async function refresh() {
  try {
    const [s, e] = await Promise.all(["/api/status", "/api/events"].map(async (u) => {
      const r = await fetch(u, { headers, cache: "no-store" });
      if (!r.ok) throw new Error(u + ": " + r.status + " " + (await r.text()));
      return r.json();
    }));
    show(s, e);
    $("error").textContent = "";
  } catch (err) {
    $("error").textContent = "cannot read the job's status: " + err.message;
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
)PAGE";

}  // namespace

std::string_view status_page_html() noexcept { return page; }

}  // namespace rekindle::web
