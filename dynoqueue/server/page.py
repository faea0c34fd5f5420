"""The dashboard page (HTML, CSS and a small script in one string; no build toolchain)."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>dynoqueue</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f5f6f8; }
  header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; gap: 16px;
           align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  header span { opacity: .75; font-size: 12px; }
  main { padding: 16px 20px; display: grid; gap: 16px; }
  section { background: #fff; border-radius: 6px; box-shadow: 0 1px 2px #0002; padding: 12px; }
  h2 { font-size: 15px; margin: 0 0 8px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { padding: 4px 8px; border-bottom: 1px solid #e4e6ea; text-align: right;
           white-space: nowrap; }
  th:first-child, td:first-child, th.text, td.text { text-align: left; }
  tr.queue { cursor: pointer; }
  tr.queue:hover, tr.selected { background: #eef3ff; }
  td.dead-count.nonzero { color: #b3261e; font-weight: 600; }
  .rate.up { color: #b35c00; } .rate.down { color: #1b7f3b; }
  .bars { display: grid; grid-template-columns: 110px 1fr 60px; gap: 4px 8px;
          align-items: center; }
  .bar { background: #4a6ee0; height: 14px; border-radius: 2px; min-width: 1px; }
  button { font: inherit; padding: 4px 10px; border-radius: 4px; border: 1px solid #4a6ee0;
           background: #4a6ee0; color: #fff; cursor: pointer; }
  button.secondary { background: #fff; color: #4a6ee0; }
  #status { font-size: 12px; }
  #error, #login-error { color: #b3261e; }
  #login { display: flex; gap: 8px; align-items: center; }
  #login input { font: inherit; padding: 3px 6px; }
  .empty { color: #777; font-style: italic; }
</style>
</head>
<body>
<header><h1>dynoqueue</h1><span id="status">loading…</span><span id="error"></span></header>
<main>
  <section id="login-section" hidden>
    <h2>This server needs its token</h2>
    <form id="login">
      <label for="token">Token</label>
      <input id="token" name="token" type="password" autocomplete="current-password" required>
      <button type="submit">Open</button> <span id="login-error"></span>
    </form>
  </section>
  <section>
    <h2>Queues</h2>
    <table id="queues">
      <thead><tr><th>queue</th><th>partitions</th><th>waiting</th><th>ready</th><th>delayed</th>
        <th>leased</th>
        <th>dead</th><th>oldest ready</th><th>waiting/s</th><th>leased/s</th><th>dead/s</th>
      </tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section id="detail" hidden>
    <h2>Queue <span id="detail-name"></span>: delayed messages by time until due</h2>
    <p><button id="pause-toggle">Pause</button> <span id="pause-state"></span></p>
    <div class="bars" id="buckets"></div>
    <table id="partitions">
      <thead><tr><th>partition</th><th>waiting</th><th>leased</th><th class="text">node</th>
        <th>slot</th></tr></thead>
      <tbody></tbody>
    </table>
    <p id="limits"></p>
    <table id="schedules">
      <thead><tr><th class="text">schedule</th><th class="text">when</th>
        <th class="text">time zone</th><th>next tick</th><th>last sent</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section id="dead-section" hidden>
    <h2>Dead letters of <span id="dead-name"></span> (<span id="dead-total">0</span>)</h2>
    <p><button id="redrive-selected" class="secondary">Redrive selected</button>
       <button id="redrive-all">Redrive all</button> <span id="redrive-result"></span></p>
    <table id="dead">
      <thead><tr><th></th><th class="text">id</th><th class="text">reason</th>
        <th>deliveries</th><th>died</th><th class="text">last error</th>
        <th class="text">payload</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
</main>
<script>
"use strict";
const REFRESH_MS = 2000;
const TOKEN_KEY = "dynoqueue-token";
let previous = null, selected = null;

// The token comes from the link (/#token=...: a fragment never reaches the server or its logs)
// or the login form; the tab keeps it in its session storage. The fragment is taken out of
// the address bar and the history at once.
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get("token")) {
  sessionStorage.setItem(TOKEN_KEY, fragment.get("token"));
  history.replaceState(null, "", location.pathname + location.search);
}

class Unauthorized extends Error {}

function headers() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? {"Authorization": "Bearer " + token} : {};
}

function showLogin() {
  const section = document.getElementById("login-section");
  const refused = sessionStorage.getItem(TOKEN_KEY) !== null;
  document.getElementById("login-error").textContent =
    refused ? "the server refused this token" : "";
  document.getElementById("status").textContent = "token needed";
  if (section.hidden) {
    section.hidden = false;
    document.getElementById("token").focus();
  }
}

async function api(path, options = {}) {
  const extra = options.headers || {};
  const reply = await fetch(path, {...options, headers: {...headers(), ...extra}});
  if (reply.status === 401) {
    showLogin();
    throw new Unauthorized("this server needs its token");
  }
  if (!reply.ok) throw new Error(path + ": HTTP " + reply.status + " " + await reply.text());
  return reply.json();
}

document.getElementById("login").addEventListener("submit", event => {
  event.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value);
  input.value = "";
  document.getElementById("login-section").hidden = true;
  refresh();
});

function cell(row, value, cls) {
  const td = row.insertCell();
  td.textContent = value;
  if (cls) td.className = cls;
  return td;
}

function age(ms) {
  if (!ms) return "-";
  if (ms < 1000) return ms + " ms";
  if (ms < 120000) return (ms / 1000).toFixed(1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}

function rate(now, before, name, seconds) {
  if (!before || seconds <= 0) return ["-", ""];
  const value = (now[name] - before[name]) / seconds;
  const cls = value > 0 ? "rate up" : value < 0 ? "rate down" : "rate";
  return [(value >= 0 ? "+" : "") + value.toFixed(1), cls];
}

async function refresh() {
  let data;
  try {
    data = await api("/api/queues");
    document.getElementById("error").textContent = "";
  } catch (err) {
    document.getElementById("error").textContent = err instanceof Unauthorized ? "" : String(err);
    return;
  }
  const at = performance.now();
  const before = previous ? Object.fromEntries(previous.data.queues.map(q => [q.queue, q])) : {};
  const seconds = previous ? (at - previous.at) / 1000 : 0;
  const body = document.querySelector("#queues tbody");
  body.replaceChildren();
  for (const q of data.queues) {
    const row = body.insertRow();
    row.className = "queue" + (q.queue === selected ? " selected" : "");
    row.dataset.queue = q.queue;
    cell(row, q.queue);
    cell(row, q.partitions, "partitions");
    for (const name of ["waiting", "ready", "delayed", "leased"]) cell(row, q[name], name);
    cell(row, q.dead, "dead-count" + (q.dead ? " nonzero" : ""));
    cell(row, age(q.oldest_ready_age_ms), "age");
    for (const name of ["waiting", "leased", "dead"]) {
      const [text, cls] = rate(q, before[q.queue], name, seconds);
      cell(row, text, cls);
    }
    row.addEventListener("click", () => select(q.queue));
  }
  if (!data.queues.length) {
    const row = body.insertRow();
    const td = cell(row, "no queues under prefix " + data.prefix, "empty");
    td.colSpan = 11;
  }
  previous = {data, at};
  document.getElementById("status").textContent =
    "prefix " + data.prefix + " · " + data.queues.length + " queues · updated " +
    new Date().toLocaleTimeString();
  if (selected) showDetail(data.queues.find(q => q.queue === selected));
}

function showDetail(q) {
  const section = document.getElementById("detail");
  if (!q) { section.hidden = true; return; }
  section.hidden = false;
  document.getElementById("detail-name").textContent = q.queue;
  const toggle = document.getElementById("pause-toggle");
  toggle.textContent = q.paused ? "Resume" : "Pause";
  toggle.dataset.paused = q.paused ? "1" : "";
  document.getElementById("pause-state").textContent = q.paused
    ? "paused: pops deliver nothing until it is resumed" : "running";
  const most = Math.max(1, ...q.buckets.map(b => b.count));
  const bars = document.getElementById("buckets");
  bars.replaceChildren();
  for (const b of q.buckets) {
    const label = document.createElement("span");
    label.textContent = b.label;
    const track = document.createElement("div");
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.dataset.range = b.range;
    bar.style.width = (100 * b.count / most) + "%";
    track.appendChild(bar);
    const count = document.createElement("span");
    count.textContent = b.count;
    count.className = "bucket-count";
    bars.append(label, track, count);
  }
  const parts = document.querySelector("#partitions tbody");
  parts.replaceChildren();
  for (const p of q.partition_stats) {
    const row = parts.insertRow();
    row.className = "partition";
    for (const value of [p.partition, p.waiting, p.leased]) cell(row, value);
    cell(row, p.node === null ? "-" : p.node, "text");
    cell(row, p.slot === null ? "-" : p.slot);
  }
  const limits = [];
  if (q.limits.max_in_flight) limits.push("at most " + q.limits.max_in_flight + " in flight");
  if (q.limits.rate_limit)
    limits.push("at most " + q.limits.rate_limit.count + " deliveries per " +
                q.limits.rate_limit.per_ms + " ms");
  document.getElementById("limits").textContent = limits.length
    ? "Limits: " + limits.join(", ") + "; pops held back: " + q.limited
    : "No limits.";
  const body = document.querySelector("#schedules tbody");
  body.replaceChildren();
  for (const x of q.schedules) {
    const row = body.insertRow();
    row.className = "schedule";
    cell(row, x.schedule, "text");
    cell(row, x.cron || ("every " + x.every_ms + " ms"), "text");
    cell(row, x.timezone, "text");
    cell(row, zoned(x.next_due_ms, x.timezone));
    cell(row, x.last_sent_ms === null ? "-" : zoned(x.last_sent_ms, x.timezone));
  }
  if (!q.schedules.length) cell(body.insertRow(), "no schedules", "empty").colSpan = 5;
}

// A time in the schedule's own zone, with the zone's name (CET, CEST, UTC...).
function zoned(ms, zone) {
  return new Date(ms).toLocaleString(undefined, {timeZone: zone, timeZoneName: "short"});
}

async function select(queue) {
  selected = queue;
  for (const row of document.querySelectorAll("tr.queue"))
    row.classList.toggle("selected", row.dataset.queue === queue);
  if (previous) showDetail(previous.data.queues.find(q => q.queue === queue));
  await loadDead();
}

async function loadDead() {
  if (!selected) return;
  const data = await api("/api/queues/" + encodeURIComponent(selected) + "/dead?n=100");
  document.getElementById("dead-section").hidden = false;
  document.getElementById("dead-name").textContent = data.queue;
  document.getElementById("dead-total").textContent = data.total;
  const body = document.querySelector("#dead tbody");
  body.replaceChildren();
  for (const d of data.dead) {
    const row = body.insertRow();
    row.dataset.id = d.id;
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = d.id;
    row.insertCell().appendChild(box);
    cell(row, d.id, "text");
    cell(row, d.reason, "text");
    cell(row, d.deliveries);
    cell(row, new Date(d.died_at_ms).toLocaleString());
    cell(row, d.last_error || "-", "text");
    cell(row, (d.payload || "").slice(0, 80), "text");
  }
  if (!data.dead.length) {
    const row = body.insertRow();
    const td = cell(row, "no dead letters", "empty");
    td.colSpan = 7;
  }
}

async function redrive(ids) {
  const data = await api("/api/queues/" + encodeURIComponent(selected) + "/redrive", {
    method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify(ids ? {ids} : {}),
  });
  document.getElementById("redrive-result").textContent = data.redriven + " redriven";
  await loadDead();
  await refresh();
}

document.getElementById("redrive-all").addEventListener("click", () => redrive(null));
document.getElementById("pause-toggle").addEventListener("click", async event => {
  const action = event.target.dataset.paused ? "resume" : "pause";
  await api("/api/queues/" + encodeURIComponent(selected) + "/" + action, {method: "POST"});
  await refresh();
});
document.getElementById("redrive-selected").addEventListener("click", () => {
  const ids = [...document.querySelectorAll("#dead input:checked")].map(b => b.value);
  if (ids.length) redrive(ids);
});
refresh();
setInterval(refresh, REFRESH_MS);
</script>
</body>
</html>
"""
