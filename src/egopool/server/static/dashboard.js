// The task dashboard of `egopool serve` (docs/decisions.md P21): per-day and per-host review states as
// stacked bars, hours as bars, each quality fact as a histogram; drawn by the vendored uPlot from the
// figures embedded in the page (#dashboard-data). Legends show each series' own count, not the stack.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("dashboard-data").textContent);
  const STATES = [["accepted", "#2ca02c"], ["rejected", "#d62728"], ["flagged", "#ff7f0e"], ["unreviewed", "#9e9e9e"]];
  const width = (el) => Math.max(300, Math.min(1100, (el.parentNode.clientWidth || 800) - 4));
  const white = (u) => { u.ctx.save(); u.ctx.fillStyle = "#fff"; u.ctx.fillRect(0, 0, u.ctx.canvas.width, u.ctx.canvas.height); u.ctx.restore(); };
  const bars = (frac) => uPlot.paths.bars({ size: [frac, 80], align: 0 });
  function mark(el, u, kind, n) { el.dataset.kind = kind; el.dataset.points = n; u.ctx.canvas.dataset.kind = kind; }

  // stacked review states: series drawn back to front (the total first), legends read the raw counts
  function stacked(el, title, xs, rows, xAxis) {
    const raw = STATES.map(([k]) => rows.map((r) => r[k]));
    const cum = raw.map((_, i) => rows.map((r, j) => raw.slice(i).reduce((s, col) => s + col[j], 0)));
    const series = [{ label: xAxis.label, value: xAxis.legend }];
    STATES.forEach(([name, color], i) => series.push({
      label: name, fill: color, stroke: color, width: 0, paths: bars(0.7), points: { show: false },
      value: (u, v, si, idx) => (idx === null || idx === undefined ? "—" : String(raw[i][idx])) }));
    const u = new uPlot({
      title, width: width(el), height: 240, series,
      scales: { x: xAxis.scale, y: { range: (u, lo, hi) => [0, Math.max(1, hi) * 1.08] } },
      axes: [xAxis.axis, { label: "episodes", size: 66, labelSize: 16 }],
      legend: { live: true }, cursor: { drag: { x: false, y: false } },
      hooks: { drawClear: [white] },
    }, [xs, ...cum], el);
    mark(el, u, "stacked", xs.length);
    return u;
  }
  function simpleBars(el, title, xs, ys, xAxis, yLabel, color) {
    const u = new uPlot({
      title, width: width(el), height: 200,
      series: [{ label: xAxis.label, value: xAxis.legend },
               { label: yLabel, fill: color, stroke: color, width: 0, paths: bars(0.7), points: { show: false },
                 value: (u, v) => (v === null || v === undefined ? "—" : (+v.toPrecision(4)).toString()) }],
      scales: { x: xAxis.scale, y: { range: (u, lo, hi) => [0, Math.max(hi, 1e-9) * 1.08] } },
      axes: [xAxis.axis, { label: yLabel, size: 56, labelSize: 16 }],
      legend: { live: true }, cursor: { drag: { x: false, y: false } },
      hooks: { drawClear: [white] },
    }, [xs, ys], el);
    mark(el, u, "bars", xs.length);
    return u;
  }
  const DAY = 86400;
  const days = data.days, xsDays = days.map((d) => d.day + DAY / 2);
  // at least a week wide, so that one day is a bar and not the whole axis
  const span = Math.max(7 * DAY, (xsDays.length ? xsDays[xsDays.length - 1] - xsDays[0] : 0) + DAY);
  const mid = xsDays.length ? (xsDays[0] + xsDays[xsDays.length - 1]) / 2 : 0;
  const dayAxis = {
    label: "day (UTC)", scale: { time: true, auto: false, range: () => [mid - span / 2, mid + span / 2 - DAY / 100] },
    // day ticks only (a week, a month … apart when many), written as UTC dates
    axis: { label: "day of import (UTC)", size: 48, labelSize: 16,
            incrs: [1, 2, 7, 14, 30, 61, 91, 182, 365].map((d) => d * DAY),
            splits: (u, ax, lo, hi, incr) => { const out = []; for (let t = Math.ceil(lo / DAY) * DAY; t <= hi; t += incr) out.push(t); return out; },
            values: (u, splits) => splits.map((v) => new Date(v * 1000).toISOString().slice(0, 10)) },
    legend: (u, v) => (v === null || v === undefined ? "—" : new Date(v * 1000).toISOString().slice(0, 10)),
  };
  // hours, or minutes while every bar is under an hour
  const hourly = [...days.map((d) => d.hours), ...data.hosts.map((h) => h.hours)];
  const minutes = hourly.length > 0 && Math.max(...hourly) < 1;
  const time = (h) => (minutes ? h * 60 : h), timeUnit = minutes ? "minutes" : "hours";
  if (days.length) {
    stacked(document.getElementById("chart-days"), "episodes per day by review state", xsDays, days, dayAxis);
    simpleBars(document.getElementById("chart-days-hours"), `${timeUnit} recorded per day`, xsDays,
               days.map((d) => time(d.hours)), dayAxis, timeUnit, "#1f77b4");
  }
  const hosts = data.hosts, idx = hosts.map((_, i) => i);
  const hostAxis = {
    label: "host", scale: { time: false, auto: false, range: () => [-0.5, Math.max(hosts.length, 1) - 0.5] },
    axis: { label: "host", size: 48, labelSize: 16, splits: () => idx,
            values: (u, splits) => splits.map((i) => (hosts[i] ? hosts[i].host : "")) },
    legend: (u, v) => (v === null || v === undefined || !hosts[v] ? "—" : hosts[v].host),
  };
  if (hosts.length) {
    stacked(document.getElementById("chart-hosts"), "episodes per host by review state", idx, hosts, hostAxis);
    simpleBars(document.getElementById("chart-hosts-hours"), `${timeUnit} recorded per host`, idx,
               hosts.map((h) => time(h.hours)), hostAxis, timeUnit, "#1f77b4");
  }
  for (const [name, f] of Object.entries(data.facts)) {
    const el = document.getElementById("hist-" + name);
    if (!el) continue;
    if (!f.counts.length) {
      const p = document.createElement("p"); p.className = "dim"; p.textContent = "no episode has this fact yet";
      el.appendChild(p); el.dataset.kind = "empty"; continue;
    }
    const w = f.edges[1] - f.edges[0], mids = f.edges.slice(0, -1).map((e) => e + w / 2);
    const u = new uPlot({
      width: Math.max(280, Math.min(520, (el.parentNode.clientWidth || 600) - 4)), height: 180,
      series: [{ label: `${f.label} [${f.unit}]`, value: (u, v) => (v === null || v === undefined ? "—" : `${(+(v - w / 2).toPrecision(4))} … ${(+(v + w / 2).toPrecision(4))}`) },
               { label: "episodes", fill: "#7f9fd0", stroke: "#3b6bb5", width: 1, paths: bars(1), points: { show: false } }],
      scales: { x: { time: false, auto: false, range: () => [f.edges[0], f.edges[f.edges.length - 1]] },
                y: { range: (u, lo, hi) => [0, Math.max(1, hi) * 1.08] } },
      axes: [{ label: `${f.label} [${f.unit}]`, size: 44, labelSize: 16,
               ...(f.whole ? { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 1e5, 1e6] } : {}) },
             { label: "episodes", size: 66, labelSize: 16 }],
      legend: { live: true }, cursor: { drag: { x: false, y: false } },
      hooks: { drawClear: [white] },
    }, [mids, f.counts], el);
    mark(el, u, "histogram", f.counts.length);
  }
  document.body.dataset.ready = "1";
})();
