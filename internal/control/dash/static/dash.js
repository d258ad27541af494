// The dashboard polls /v1/status and follows /v1/events; it only reads.
"use strict";

const rates = []; // [time ms, rows/s], the last 10 minutes
let lastSeq = 0;

function text(id, v) { document.getElementById(id).textContent = v; }

function fmtNum(x) {
  if (x >= 1e6) return (x / 1e6).toFixed(2) + "M";
  if (x >= 1e3) return (x / 1e3).toFixed(1) + "k";
  return String(Math.round(x));
}

function fmtDur(ns) {
  if (!ns) return "–";
  const s = Math.round(ns / 1e9);
  return s >= 60 ? Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s" : s + "s";
}

function cell(tr, v, cls) {
  const td = document.createElement("td");
  if (cls) td.className = cls;
  td.textContent = v;
  tr.appendChild(td);
  return td;
}

function renderNodes(nodes) {
  const tb = document.querySelector("#nodes tbody");
  tb.replaceChildren();
  for (const n of nodes) {
    const tr = document.createElement("tr");
    tr.dataset.node = n.id;
    tr.dataset.role = n.role;
    tr.dataset.state = n.state;
    cell(tr, n.role);
    cell(tr, n.id);
    cell(tr, n.addr || "");
    const st = cell(tr, "");
    const span = document.createElement("span");
    span.className = "state s-" + n.state;
    span.textContent = n.state;
    st.appendChild(span);
    const m = cell(tr, "");
    if (n.metrics) {
      const a = document.createElement("a");
      a.href = "http://" + n.metrics + "/metrics";
      a.textContent = n.metrics;
      m.appendChild(a);
    }
    cell(tr, n.holds || "", "holds");
    tb.appendChild(tr);
  }
}

function renderChart() {
  const svg = document.getElementById("chart");
  const W = 400, H = 150, ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  if (rates.length < 2) return;
  const t0 = rates[0][0], t1 = rates[rates.length - 1][0];
  const ymax = Math.max(1, ...rates.map(r => r[1])) * 1.1;
  const pts = rates.map(([t, y]) => [(t - t0) / Math.max(1, t1 - t0) * W, H - y / ymax * H]);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.map(p => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#1565c0");
  line.setAttribute("stroke-width", "2");
  line.setAttribute("vector-effect", "non-scaling-stroke");
  svg.appendChild(line);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", "4");
  label.setAttribute("y", "12");
  label.setAttribute("font-size", "10");
  label.textContent = "max " + fmtNum(ymax / 1.1) + " rows/s, last " + Math.round((t1 - t0) / 1000) + " s";
  svg.appendChild(label);
}

async function pollStatus() {
  for (;;) {
    try {
      const r = await fetch("/v1/status", { cache: "no-store" });
      if (!r.ok) throw new Error(r.status);
      const s = await r.json();
      text("epoch", s.epoch);
      text("pass", s.job.pass);
      text("done", s.job.done + " / " + s.job.partitions);
      text("examples", fmtNum(s.job.examples));
      text("rate", fmtNum(s.job.rate));
      text("eta", fmtDur(s.job.eta));
      renderNodes(s.nodes || []);
      const now = Date.now();
      rates.push([now, s.job.rate]);
      while (rates.length > 2 && now - rates[0][0] > 600000) rates.shift();
      renderChart();
      const c = document.getElementById("conn");
      c.textContent = "live · " + new Date(s.time).toLocaleTimeString() + (s.ready ? "" : " · forming");
      c.className = "conn";
    } catch (e) {
      const c = document.getElementById("conn");
      c.textContent = "coordinator unreachable (" + e.message + "); retrying";
      c.className = "conn bad";
    }
    await new Promise(res => setTimeout(res, 500));
  }
}

async function followEvents() {
  const tb = document.querySelector("#events tbody");
  for (;;) {
    try {
      const r = await fetch("/v1/events?follow=1&after=" + lastSeq, { cache: "no-store" });
      if (!r.ok) throw new Error(r.status);
      for (const e of await r.json()) {
        lastSeq = Math.max(lastSeq, e.seq);
        const tr = document.createElement("tr");
        tr.className = e.kind;
        cell(tr, new Date(e.time).toLocaleTimeString());
        cell(tr, e.epoch);
        cell(tr, e.kind);
        cell(tr, e.node || "");
        cell(tr, e.cause || "");
        tb.prepend(tr);
      }
      while (tb.children.length > 1000) tb.lastChild.remove();
    } catch (e) {
      await new Promise(res => setTimeout(res, 1000));
    }
  }
}

document.getElementById("grants").addEventListener("change", e => {
  document.getElementById("events").classList.toggle("grants", e.target.checked);
});
pollStatus();
followEvents();
