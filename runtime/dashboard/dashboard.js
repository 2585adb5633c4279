// The dashboard's page: renders the job's state (GET /state, then each state the server pushes
// on /events) into tables, charts and a timeline. Every name from the job is written as text
// (textContent), never as markup; nothing is fetched from anywhere but this server.
"use strict";

const history = [];  // per state received: what the views do not keep over time
const HISTORY_MAX = 600;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

function table(view, into) {
  clear(into);
  if (!view) return false;
  const t = el("table");
  const head = el("tr");
  for (const c of view.columns) head.appendChild(el("th", c));
  t.appendChild(head);
  for (const row of view.rows) {
    const tr = el("tr");
    for (const cell of row) tr.appendChild(el("td", cell, cell === "lost" ? "lost" : ""));
    t.appendChild(tr);
  }
  into.appendChild(t);
  return true;
}

function column(view, name) {
  return view ? view.columns.indexOf(name) : -1;
}

// A line chart of (x, y) points as an SVG polyline; data-points says how many it has.
function chart(title, points, into) {
  const box = el("div", undefined, "chart");
  box.dataset.title = title;
  const W = 320, H = 120, P = 4;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.dataset.points = String(points.length);
  if (points.length > 0) {
    const xs = points.map(p => p[0]), ys = points.map(p => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    const sx = x => P + (W - 2 * P) * (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5);
    const sy = y => H - P - (H - 2 * P) * (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5);
    line.setAttribute("points", points.map(p => sx(p[0]) + "," + sy(p[1])).join(" "));
    const dot = document.createElementNS("http://www.w3.org/2000/svg", "circle");
    const [x, y] = points[points.length - 1];
    dot.setAttribute("cx", sx(x));
    dot.setAttribute("cy", sy(y));
    dot.setAttribute("r", 2.5);
    svg.appendChild(dot);
  }
  svg.appendChild(line);
  const last = points.length ? points[points.length - 1][1] : null;
  box.appendChild(el("div", title + (last === null ? "" : ": " + Number(last).toPrecision(4))));
  box.appendChild(svg);
  into.appendChild(box);
}

function numbers(view, xName, yName) {
  const xi = column(view, xName), yi = column(view, yName);
  if (xi < 0 || yi < 0) return [];
  return view.rows.map(r => [Number(r[xi]), Number(r[yi])])
      .filter(p => Number.isFinite(p[0]) && Number.isFinite(p[1]));
}

function curves(state, into) {
  clear(into);
  const curve = state.views.curve;
  if (curve) {
    chart("train loss", numbers(curve, "step", "train_loss"), into);
    chart("test accuracy", numbers(curve, "step", "test_accuracy"), into);
    chart("staleness", numbers(curve, "step", "staleness"), into);
    const steps = numbers(curve, "t_s", "step");
    const rate = [];
    for (let i = 1; i < steps.length; ++i) {
      const dt = steps[i][0] - steps[i - 1][0];
      if (dt > 0) rate.push([steps[i][0], (steps[i][1] - steps[i - 1][1]) / dt]);
    }
    chart("throughput (steps/s)", rate, into);
  }
  const t = history.map(h => h.t);
  const series = (name, key) => {
    const pts = history.filter(h => h[key] !== undefined).map(h => [h.t, h[key]]);
    if (pts.length) chart(name, pts, into);
  };
  series("bytes received by buckets (MB)", "bytes");
  series("allreduce (MB)", "allreduce_mb");
  series("allreduce time (s)", "allreduce_s");
  series("overlap (hidden fraction)", "hidden");
  series("generation", "generation");
  return curve !== undefined || t.length > 0;
}

function remember(state) {
  const h = { t: (state.at_unix_ms || Date.now()) / 1000 };
  const buckets = state.views.buckets;
  const bi = column(buckets, "bytes_in");
  if (bi >= 0) {
    const sum = buckets.rows.reduce((s, r) => s + (Number(r[bi]) || 0), 0);
    h.bytes = sum / 1e6;
  }
  const group = state.views.group;
  if (group && group.rows.length) {
    const r = group.rows[0];
    h.generation = Number(r[column(group, "generation")]);
    h.allreduce_mb = Number(r[column(group, "allreduce_mb")]);
    h.allreduce_s = Number(r[column(group, "allreduce_s")]);
    h.hidden = Number(r[column(group, "hidden")]);
  }
  history.push(h);
  if (history.length > HISTORY_MAX) history.shift();
}

// Staleness of worker w at bucket b: how far its clock entry trails the bucket's newest.
function heatmap(state, into) {
  clear(into);
  const buckets = state.views.buckets, workers = state.views.workers;
  const ci = column(buckets, "clock"), bi = column(buckets, "bucket");
  if (ci < 0 || !buckets.rows.length) return false;
  const names = workers ? workers.rows.map(r => r[column(workers, "name")]) : [];
  const clocks = buckets.rows.map(r => String(r[ci]).split(" ").map(Number));
  const width = Math.max(...clocks.map(c => c.length));
  const grid = el("div", undefined, "heat");
  grid.style.gridTemplateColumns = "repeat(" + (width + 1) + ", auto)";
  grid.appendChild(el("div", "bucket"));
  for (let w = 0; w < width; ++w) grid.appendChild(el("div", names[w] || "worker " + w));
  const top = Math.max(1, ...clocks.map(c => Math.max(...c) - Math.min(...c)));
  buckets.rows.forEach((row, k) => {
    grid.appendChild(el("div", row[bi]));
    const newest = Math.max(...clocks[k]);
    for (let w = 0; w < width; ++w) {
      const gap = clocks[k][w] === undefined ? null : newest - clocks[k][w];
      const cell = el("div", gap === null ? "-" : gap);
      if (gap !== null) cell.style.background = "hsl(" + (120 - 120 * gap / top) + ",70%,80%)";
      grid.appendChild(cell);
    }
  });
  into.appendChild(grid);
  return true;
}

function timeline(view, into) {
  clear(into);
  if (!view) return false;
  const t = column(view, "t_s"), e = column(view, "event"), w = column(view, "what");
  for (const r of view.rows) into.appendChild(el("li", r[t] + " s  " + r[e] + ": " + r[w], r[e]));
  return view.rows.length > 0;
}

function show(id, shown) {
  document.getElementById(id).classList.toggle("empty", !shown);
}

function render(state) {
  remember(state);
  const v = state.views || {};
  document.getElementById("mode").textContent = "mode " + (state.mode || "?");
  document.getElementById("updated").textContent =
      "updated " + new Date(state.at_unix_ms || Date.now()).toLocaleTimeString();
  show("workers-section", table(v.workers, document.getElementById("workers")));
  show("group-section", table(v.group, document.getElementById("group")));
  show("buckets-section", table(v.buckets, document.getElementById("buckets")));
  show("heatmap-section", heatmap(state, document.getElementById("heatmap")));
  show("tree-section", table(v.tree, document.getElementById("tree")));
  show("nodes-section", table(v.nodes, document.getElementById("nodes")));
  show("curves-section", curves(state, document.getElementById("curves")));
  show("timeline-section", timeline(v.timeline, document.getElementById("timeline")));
  document.body.dataset.states = String(history.length);
}

function status(text, cls) {
  const s = document.getElementById("status");
  s.textContent = text;
  s.className = "status " + cls;
}

// The state at once, then each new one as the server pushes it. The stream opens a second
// later: a headless browser taking a picture waits for open requests, and the first state is
// what it shows.
function start() {
  fetch("/state").then(r => r.json()).then(state => {
    render(state);
    status("loaded", "live");
  }).catch(() => status("no state", "lost"));
  setTimeout(listen, 1000);
}

function listen() {
  const events = new EventSource("/events");
  events.onopen = () => status("live", "live");
  events.onerror = () => status("reconnecting", "lost");
  events.onmessage = m => {
    try {
      render(JSON.parse(m.data));
    } catch (err) {
      status("bad state: " + err, "lost");
    }
  };
}

document.addEventListener("DOMContentLoaded", start);
