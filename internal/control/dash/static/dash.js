// The dashboard polls /v1/status and follows /v1/events; it only reads.
"use strict";

// samples: {t: ms, rate, staleness, reliable, transient}, seeded from
// the coordinator's history (GET /v1/history), then one per poll.
const samples = [];
const maxSamples = 3600;
let lastSeq = 0;

function text(id, v) { document.getElementById(id).textContent = v; }

function fmtNum(x) {
  if (x >= 1e6) return (x / 1e6).toFixed(2) + "M";
  if (x >= 1e3) return (x / 1e3).toFixed(1) + "k";
  return String(Math.round(x));
}

function fmtDur(ns) {
  if (!ns) return "–";
  if (ns < 10e9) return (ns / 1e9).toFixed(1) + "s";
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
    tr.dataset.class = n.class;
    const role = cell(tr, n.role);
    if (n.tier) {
      const t = document.createElement("span");
      t.className = "tier";
      t.textContent = " " + n.tier;
      role.appendChild(t);
    }
    cell(tr, n.id);
    cell(tr, n.class, "c-" + n.class);
    cell(tr, n.machine || "");
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

// renderLines draws each series of samples as a line in svg id, on one
// scale from 0, with a label of the latest values.
function renderLines(id, series, unit) {
  const svg = document.getElementById(id);
  const W = 400, H = 150, ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  if (samples.length < 2) return;
  const t0 = samples[0].t, t1 = samples[samples.length - 1].t;
  const ymax = Math.max(1, ...series.flatMap(([f]) => samples.map(f))) * 1.1;
  const label = [];
  for (const [f, color, name] of series) {
    const pts = samples.map(x => [(x.t - t0) / Math.max(1, t1 - t0) * W, H - f(x) / ymax * H]);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.map(p => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "2");
    line.setAttribute("vector-effect", "non-scaling-stroke");
    svg.appendChild(line);
    label.push((name ? name + " " : "") + fmtNum(f(samples[samples.length - 1])));
  }
  const caption = document.createElementNS(ns, "text");
  caption.setAttribute("x", "4");
  caption.setAttribute("y", "12");
  caption.setAttribute("font-size", "10");
  caption.textContent = label.join(", ") + " " + unit + " now; max " + fmtNum(ymax / 1.1) + ", last " + fmtDur((t1 - t0) * 1e6);
  svg.appendChild(caption);
}

// The test metrics the chart looks for, most telling first (as terrace
// plot does).
const testMetrics = ["test_auc", "test_rmse", "test_perplexity", "test_accuracy", "test_logloss"];

// renderTests draws each pass's test metric, from the job's results
// (whichever worker evaluated the pass), scaled from its least to its
// largest value so that small gains show.
function renderTests(results) {
  const svg = document.getElementById("testchart");
  const W = 400, H = 150, ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  const last = results.length ? results[results.length - 1].metrics || {} : {};
  const name = testMetrics.find(m => m in last);
  if (!name) return;
  text("testname", name + " by pass");
  const pts = results.filter(r => r.metrics && name in r.metrics).map(r => [r.pass, r.metrics[name]]);
  const x0 = Math.min(...pts.map(p => p[0])), x1 = Math.max(...pts.map(p => p[0]));
  const lo = Math.min(...pts.map(p => p[1])), hi = Math.max(...pts.map(p => p[1]));
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", pts.map(([x, y]) => ((x - x0) / Math.max(1, x1 - x0) * W).toFixed(1) + "," +
    (H - 10 - (y - lo) / Math.max(1e-9, hi - lo) * (H - 30)).toFixed(1)).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#2e7d32");
  line.setAttribute("stroke-width", "2");
  line.setAttribute("vector-effect", "non-scaling-stroke");
  svg.appendChild(line);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", "4");
  label.setAttribute("y", "12");
  label.setAttribute("font-size", "10");
  label.textContent = name + " " + pts[pts.length - 1][1].toFixed(4) + " after pass " + pts[pts.length - 1][0] +
    "; from " + lo.toFixed(4) + " to " + hi.toFixed(4);
  svg.appendChild(label);
}

function renderCharts() {
  renderLines("chart", [[x => x.rate, "#1565c0", ""]], "rows/s");
  renderLines("stalechart", [[x => x.staleness, "#6a1b9a", ""]], "clocks");
  renderLines("machchart", [[x => x.reliable, "#1565c0", "reliable"], [x => x.transient, "#ef6c00", "transient"]], "machines");
}

function addSample(x) {
  samples.push(x);
  while (samples.length > maxSamples) samples.shift();
}

function fmtDollars(x) {
  return "$" + (x >= 100 ? x.toFixed(0) : x >= 1 ? x.toFixed(2) : x.toFixed(4));
}

// renderCluster shows the stage and its reason, the machines by class,
// the cost and the staleness.
function renderCluster(s) {
  text("stage", s.switching ? s.stage + " (switching " + s.switching + ")" : s.stage);
  text("reason", s.stage_reason || "no tiers: every server on the ring");
  text("machines", s.machines.reliable + " reliable · " + s.machines.transient + " transient");
  text("staleness", s.job.staleness);
  // The examples account: rows trained more or fewer times than once
  // per pass, over the passes accounted (each pass's, with its evaluation).
  if (s.job.accounted) {
    text("account", fmtNum(s.job.repeated || 0) + " · " + fmtNum(s.job.skipped || 0));
    text("accounted", "in " + s.job.accounted + " passes");
  }
  if (s.dollars != null) {
    text("dollars", fmtDollars(s.dollars));
    text("perhour", fmtDollars(s.dollars_per_hour) + " an hour now");
  } else {
    text("dollars", "–");
    text("perhour", "prices not known (coordinator --price)");
  }
}

async function loadHistory() {
  try {
    const r = await fetch("/v1/history", { cache: "no-store" });
    if (!r.ok) return;
    for (const h of await r.json()) {
      addSample({ t: Date.parse(h.time), rate: h.rate, staleness: h.staleness,
        reliable: h.machines.reliable, transient: h.machines.transient });
    }
  } catch (e) {
    // The polls fill the charts from now on.
  }
}

async function pollStatus() {
  for (;;) {
    try {
      const r = await fetch("/v1/status", { cache: "no-store" });
      if (!r.ok) throw new Error(r.status);
      const s = await r.json();
      // Under etcd the epoch is a revision, which orders placements
      // without counting them: say how many there were, as status does.
      text("epoch", s.epochs && s.epochs !== s.epoch ? s.epoch + " (placement " + s.epochs + ")" : s.epoch);
      // Counted from 1, of the job's, as terrace status shows it (the
      // API's pass counts from 0, and is the job's length once it is done).
      const def = s.definition;
      text("pass", def && def.job ? (def.done || def.passes_done >= def.job.passes ? def.passes_done : s.job.pass + 1) + " / " + def.job.passes : "–");
      text("done", s.job.done + " / " + s.job.partitions);
      text("examples", fmtNum(s.job.examples));
      text("rate", fmtNum(s.job.rate));
      text("eta", fmtDur(s.job.eta));
      text("jobeta", fmtDur(s.job.job_eta));
      renderNodes(s.nodes || []);
      renderCluster(s);
      renderTests((s.definition && s.definition.results) || []);
      // A finished job's rate is its last minute's: nothing trains now.
      addSample({ t: Date.parse(s.time), rate: def && def.done ? 0 : s.job.rate, staleness: s.job.staleness,
        reliable: s.machines.reliable, transient: s.machines.transient });
      renderCharts();
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
loadHistory().then(pollStatus);
followEvents();
