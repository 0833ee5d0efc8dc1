// The asyncflow status page: polls /status/api/cluster and draws it with plain SVG.
// Every value from the cluster goes into the page as text (textContent), never as markup.
"use strict";

const POLL_MS = 2000;
const SVG_NS = "http://www.w3.org/2000/svg";
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"];
let polls = 0;

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return "";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " us";
  if (s < 1) return (s * 1e3).toFixed(s < 0.01 ? 2 : 1) + " ms";
  return s.toFixed(2) + " s";
}

function ago(now, t) {
  if (!t) return "never";
  const s = Math.max(0, now - t);
  return s < 1 ? "just now" : s.toFixed(0) + " s ago";
}

function shortTask(task) {
  const m = /\/job:([^/]+)\/replica:\d+\/task:(\d+)/.exec(task || "");
  return m ? m[1] + ":" + m[2] : task;
}

function shortDevice(device) {
  const m = /\/job:([^/]+)\/replica:\d+\/task:(\d+)\/device:(.+)/.exec(device || "");
  return m ? m[1] + ":" + m[2] + " " + m[3] : device;
}

function fillTable(id, rows) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  for (const row of rows) {
    const tr = document.createElement("tr");
    for (const cell of row.cells) {
      const td = el("td", cell.text, cell.cls);
      tr.appendChild(td);
    }
    if (row.key) tr.dataset.task = row.key;
    body.appendChild(tr);
  }
}

function renderTasks(view) {
  const rows = view.tasks.map(row => {
    const s = row.status || {};
    const rates = (s.rates || {}).last_minute || {};
    const stats = s.stats || {};
    const state = row.up ? "up" : "down";
    return {key: row.task, cells: [
      {text: row.task}, {text: row.address}, {text: row.incarnation || ""},
      {text: row.up ? "up" : "down: " + (row.error || ""), cls: state},
      {text: ago(view.time, row.last_heartbeat)},
      {text: row.up ? stats.steps_run : "", cls: "num"},
      {text: row.up ? (rates.steps_per_s || 0).toFixed(2) : "", cls: "num"},
      {text: fmtSeconds(rates.p50_s), cls: "num"}, {text: fmtSeconds(rates.p99_s), cls: "num"},
      {text: row.up ? stats.steps_in_flight : "", cls: "num"},
      {text: row.up ? (s.graphs || []).length : "", cls: "num"},
      {text: s.rss_mib ? s.rss_mib.toFixed(0) + " MiB" : "", cls: "num"},
      {text: row.up && s.connections !== null ? s.connections : "", cls: "num"}]};
  });
  fillTable("tasks", rows);
  const down = view.tasks.filter(row => !row.up).length;
  document.getElementById("summary").textContent =
    view.tasks.length + " tasks, " + (view.tasks.length - down) + " up" +
    (down ? ", " + down + " down" : "");
  document.getElementById("summary").className = down ? "down" : "";
}

// A line plot of per-task series over the last five minutes.
function linePlot(id, now, lines, fmt) {
  const W = 600, H = 220, L = 56, R = 10, T = 10, B = 40;
  const box = document.getElementById(id);
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img"});
  const t0 = now - 300;
  let ymax = 0;
  for (const line of lines) for (const [, v] of line.points) ymax = Math.max(ymax, v);
  ymax = ymax > 0 ? ymax * 1.1 : 1;
  const x = t => L + (W - L - R) * (t - t0) / 300;
  const y = v => H - B - (H - T - B) * v / ymax;
  root.appendChild(svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis"}));
  root.appendChild(svg("line", {x1: L, y1: T, x2: L, y2: H - B, class: "axis"}));
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    root.appendChild(svg("text", {x: L - 4, y: y(v) + 3, "text-anchor": "end", class: "tick"},
                         fmt(v)));
  }
  for (let m = 5; m >= 0; m--) {
    root.appendChild(svg("text", {x: x(now - 60 * m), y: H - B + 13, "text-anchor": "middle",
                                  class: "tick"}, m ? `-${m} min` : "now"));
  }
  lines.forEach((line, i) => {
    const pts = line.points.filter(([t]) => t >= t0);
    if (!pts.length) return;
    const d = pts.map(([t, v], j) => (j ? "L" : "M") + x(t).toFixed(1) + " " + y(v).toFixed(1))
                 .join(" ");
    const path = svg("path", {d: d, fill: "none", stroke: line.color, "stroke-width": 1.8,
                              class: "series", "data-task": line.task});
    if (line.dash) path.setAttribute("stroke-dasharray", "4 3");
    path.appendChild(svg("title", {}, line.name));
    root.appendChild(path);
    for (const [t, v] of pts) {
      root.appendChild(svg("circle", {cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2,
                                      fill: line.color}));
    }
  });
  const legend = lines.filter(line => !line.dash);
  legend.forEach((line, i) => {
    const lx = L + 4 + i * 120;
    root.appendChild(svg("rect", {x: lx, y: H - 14, width: 10, height: 4, fill: line.color}));
    root.appendChild(svg("text", {x: lx + 14, y: H - 10, class: "legend"}, line.name));
  });
  box.replaceChildren(root);
}

function renderPlots(view) {
  const rate = [], latency = [];
  view.tasks.filter(row => row.up).forEach((row, i) => {
    const series = ((row.status.rates || {}).series || []);
    const color = COLORS[i % COLORS.length];
    const name = shortTask(row.task);
    const mid = p => p.t + (row.status.rates.bucket_s || 5) / 2;
    rate.push({name, task: row.task, color, points: series.map(p => [mid(p), p.steps_per_s])});
    const p50 = series.filter(p => p.p50_s !== null).map(p => [mid(p), p.p50_s]);
    const p99 = series.filter(p => p.p99_s !== null).map(p => [mid(p), p.p99_s]);
    latency.push({name, task: row.task, color, points: p50});
    latency.push({name: name + " p99", task: row.task, color, points: p99, dash: true});
  });
  linePlot("rate-plot", view.time, rate, v => v.toFixed(v < 10 ? 1 : 0));
  linePlot("latency-plot", view.time, latency, fmtSeconds);
}

function opColor(type) {
  if (type === "_Send") return "#d62728";
  if (type === "_Recv") return "#f3c1c1";  // mostly waiting for the value: drawn light
  let h = 0;
  for (const c of type) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return COLORS[h % COLORS.length];
}

// The last traced step as a task stream: one row per device, ops as bars, Send->Recv arrows.
function renderTimeline(view) {
  const box = document.getElementById("timeline");
  const tl = view.timeline;
  const label = document.getElementById("timeline-step");
  if (!tl) {
    label.textContent = "(none yet: run a step while this page is open)";
    box.replaceChildren(el("p", "no traced step yet", "muted"));
    return;
  }
  label.textContent = `step ${tl.step_id}, ${tl.ops.length} ops on ${tl.devices.length} ` +
    `devices of ${tl.tasks} tasks`;
  const ROW = 26, L = 170, R = 12, T = 8, W = 1100;
  const H = T + ROW * tl.devices.length + 28;
  const end = Math.max(1, ...tl.ops.map(op => op[4]));
  const x = us => L + (W - L - R) * us / end;
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img"});
  const defs = svg("defs");
  const marker = svg("marker", {id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5,
                                markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse"});
  marker.appendChild(svg("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#c62828"}));
  defs.appendChild(marker);
  root.appendChild(defs);
  tl.devices.forEach((device, i) => {
    const y = T + i * ROW;
    root.appendChild(svg("rect", {x: 0, y: y, width: W, height: ROW,
                                  fill: i % 2 ? "#ffffff" : "#f4f6f9"}));
    const text = svg("text", {x: 4, y: y + ROW / 2 + 4, class: "tick device"},
                     shortDevice(device));
    text.appendChild(svg("title", {}, device));
    root.appendChild(text);
  });
  const centers = [];
  tl.ops.forEach(([device, name, type, start, stop]) => {
    const y = T + device * ROW + 4;
    const width = Math.max(1.5, x(stop) - x(start));
    const rect = svg("rect", {x: x(start).toFixed(1), y: y, width: width.toFixed(1),
                              height: ROW - 8, fill: opColor(type), class: "op",
                              "data-op": name});
    rect.appendChild(svg("title", {}, `${name} (${type})\n${shortDevice(tl.devices[device])}` +
                                      `\n${start} us .. ${stop} us (${stop - start} us)`));
    root.appendChild(rect);
    centers.push([x(stop), y + (ROW - 8) / 2]);
  });
  for (const [send, recv] of tl.edges) {
    const [x1, y1] = centers[send], [x2, y2] = centers[recv];
    const path = svg("path", {d: `M ${x1.toFixed(1)} ${y1.toFixed(1)} L ${x2.toFixed(1)} ` +
                                 `${y2.toFixed(1)}`, class: "edge",
                              "marker-end": "url(#arrow)"});
    path.appendChild(svg("title", {}, tl.ops[send][1] + " -> " + tl.ops[recv][1]));
    root.appendChild(path);
  }
  const axisY = T + ROW * tl.devices.length;
  root.appendChild(svg("line", {x1: L, y1: axisY, x2: W - R, y2: axisY, class: "axis"}));
  for (let i = 0; i <= 5; i++) {
    const us = end * i / 5;
    root.appendChild(svg("text", {x: x(us), y: axisY + 14, "text-anchor": "middle",
                                  class: "tick"}, fmtSeconds(us / 1e6)));
  }
  box.replaceChildren(root);
}

// The timeline as Chrome trace events (what af.timeline.write makes), for Perfetto.
function chromeTrace(tl) {
  const events = tl.devices.map((device, pid) => ({ph: "M", name: "process_name", pid: pid,
                                                  tid: 0, args: {name: device}}));
  tl.ops.forEach(([pid, name, type, start, stop]) => events.push(
    {ph: "X", cat: "Op", name: name, pid: pid, tid: 0, ts: start, dur: stop - start,
     args: {name: name, op: type}}));
  tl.edges.forEach(([send, recv], id) => {
    const s = tl.ops[send], r = tl.ops[recv];
    const common = {cat: "DataFlow", name: s[1].replace(/\/_Send$/, ""), id: id};
    events.push(Object.assign({ph: "s", pid: s[0], tid: 0, ts: s[3]}, common));
    events.push(Object.assign({ph: "f", bp: "e", pid: r[0], tid: 0,
                               ts: Math.min(Math.max(r[3], s[3]), r[4])}, common));
  });
  return {traceEvents: events, displayTimeUnit: "ms"};
}

function renderTraceLink(view) {
  const link = document.getElementById("trace-download");
  if (!view.timeline) { link.hidden = true; return; }
  if (link.href) URL.revokeObjectURL(link.href);
  const blob = new Blob([JSON.stringify(chromeTrace(view.timeline))],
                        {type: "application/json"});
  link.href = URL.createObjectURL(blob);
  link.download = `step-${view.timeline.step_id}.trace.json`;
  link.hidden = false;
}

function renderDetails(view) {
  const edges = [], queues = [], graphs = [], errors = [];
  for (const row of view.tasks) {
    if (!row.up) continue;
    const s = row.status;
    for (const [peer, p] of Object.entries(s.peers || {})) {
      edges.push({cells: [{text: shortTask(peer)}, {text: shortTask(row.task)},
                          {text: fmtBytes(p.bytes_pulled), cls: "num"},
                          {text: p.pull_requests, cls: "num"}]});
    }
    for (const q of s.queues || []) {
      queues.push({cells: [{text: shortTask(row.task)}, {text: q.name}, {text: q.kind},
                           {text: q.size, cls: "num"}, {text: q.capacity, cls: "num"}]});
    }
    for (const g of s.graphs || []) {
      graphs.push({cells: [{text: shortTask(row.task)}, {text: g.handle},
                           {text: g.ops, cls: "num"}, {text: g.runs, cls: "num"},
                           {text: g.lease_left_s.toFixed(0) + " s", cls: "num"}]});
    }
    for (const e of s.errors || []) {
      errors.push({time: e.time, cells: [{text: new Date(e.time * 1000).toLocaleTimeString()},
        {text: shortTask(row.task)}, {text: String(e.step_id)}, {text: e.code},
        {text: e.op || ""}, {text: (e.derived ? "(follows another failure) " : "") + e.message,
                             cls: "message"}]});
    }
  }
  errors.sort((a, b) => b.time - a.time);
  fillTable("edges", edges);
  fillTable("queues", queues);
  fillTable("graphs", graphs);
  fillTable("errors", errors.slice(0, 20));
}

async function poll() {
  try {
    const response = await fetch("/status/api/cluster",
                                 {credentials: "same-origin", cache: "no-store"});
    if (response.status === 401) { window.location.reload(); return; }
    if (!response.ok) throw new Error("HTTP " + response.status);
    const view = await response.json();
    window.statusView = view;  // the last view, for the console (and the tests)
    renderTasks(view);
    renderPlots(view);
    renderTimeline(view);
    renderTraceLink(view);
    renderDetails(view);
    polls += 1;
    const updated = document.getElementById("updated");
    updated.textContent = "updated " + new Date(view.time * 1000).toLocaleTimeString();
    updated.dataset.polls = String(polls);
  } catch (err) {
    document.getElementById("updated").textContent = "update failed: " + err.message;
  }
  setTimeout(poll, POLL_MS);
}

document.addEventListener("DOMContentLoaded", poll);
