// The episode page of `egopool serve` (docs/decisions.md Q15): every camera on one transport,
// the signal plots with a playhead, the idle ranges on a timeline, review buttons and keys.
// Plain JavaScript served from the package, no build step; the plots are uPlot, vendored (decisions P1-P10).
//
// Sync: the first video is the master clock. The others play along natively and are steered
// toward it on every animation frame: a drift under a quarter frame is left alone, a drift
// under two frames is taken out by a playbackRate nudge (no stall), a larger one (a slow
// start, a stalled decoder) by a seek that aims ahead by the seek time measured last time.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("episode-data").textContent);
  const vids = Array.from(document.querySelectorAll("#videos video"));
  const master = vids[0];
  const fps = data.fps || 30;
  const frame = 1 / fps;
  const $ = (id) => document.getElementById(id);
  const playBtn = $("play"), seek = $("seek"), clock = $("clock"), timeline = $("timeline");
  const plots = [];  // {canvas, base, t0, t1, draw(t)}
  let signals = null;
  // frames of the episode: one per data row (Q2); the clock and the slider count 0 .. nframes - 1 (P5)
  const nframes = Math.max(1, data.frames || Math.round((data.duration || 0) * fps));
  let speed = 1, playing = false;
  const loopBox = $("loop"), speedSel = $("speed");

  // ---- transport -------------------------------------------------------------------------------
  const seekLead = new Map();  // video -> seconds its last catch-up seek took
  const seekStart = new Map();
  function duration() {
    const d = master && isFinite(master.duration) ? master.duration : data.duration;
    return d || 0;
  }
  function setAll(t) {
    t = Math.max(0, Math.min(t, duration() || t));
    for (const v of vids) v.currentTime = t;
    render();
  }
  function frameOf(t) { return Math.max(0, Math.min(nframes - 1, Math.floor(t * fps + 1e-6))); }
  function toFrame(i) {
    i = Math.max(0, Math.min(nframes - 1, i));
    setAll(i * frame + 0.001);  // a hair past the frame's start: never shows the frame before
  }
  function step(k) {
    if (!master) return;  // no camera stream: nothing to step
    pause();
    toFrame(frameOf(master.currentTime) + k);
  }
  function play() {
    if (!master) return;
    if (master.ended || master.currentTime >= duration() - frame / 2) setAll(0);
    const t = master.currentTime;
    for (const v of vids) { v.playbackRate = speed; if (Math.abs(v.currentTime - t) > frame / 4) v.currentTime = t; }
    Promise.all(vids.map((v) => v.play().catch(() => undefined))).then(() => requestAnimationFrame(tick));
    playBtn.textContent = "Pause";
    playing = true;
  }
  function pause() {
    if (!master) return;
    for (const v of vids) { v.pause(); v.playbackRate = speed; }
    const t = master.currentTime;
    for (const v of vids.slice(1)) v.currentTime = t;  // paused videos show the master's frame
    playBtn.textContent = "Play";
    playing = false;
    render();
  }
  function toggle() { if (master && master.paused) play(); else pause(); }

  function steer() {
    const t = master.currentTime;
    for (const v of vids.slice(1)) {
      if (v.seeking) continue;
      if (v.ended && !master.ended) { v.currentTime = t; continue; }
      const d = v.currentTime - t;
      if (Math.abs(d) > 2 * frame * Math.max(1, speed) || (v.paused && !master.paused)) {
        const lead = Math.min(seekLead.get(v) || 0, 0.5);
        seekStart.set(v, performance.now());
        v.playbackRate = speed;
        v.currentTime = Math.min(t + lead * speed, duration());
        if (v.paused) v.play().catch(() => undefined);
      } else if (Math.abs(d) > frame / 4) {
        v.playbackRate = speed * Math.max(0.5, Math.min(1.5, 1 - d * 4 / speed));
      } else if (v.playbackRate !== speed) {
        v.playbackRate = speed;
      }
    }
  }
  for (const v of vids.slice(1)) {
    v.addEventListener("seeked", () => {
      const s = seekStart.get(v);
      if (s !== undefined) { seekLead.set(v, (performance.now() - s) / 1000); seekStart.delete(v); }
    });
  }
  function tick() {
    if (!master || master.paused) { render(); return; }
    if (loopBox && loopBox.checked && (master.ended || master.currentTime >= duration() - frame / 2)) {
      for (const v of vids) v.currentTime = 0;  // loop: every stream back to frame 0 together
    } else {
      steer();
    }
    render();
    if (master.ended) { pause(); return; }
    requestAnimationFrame(tick);
  }

  // ---- drawing ---------------------------------------------------------------------------------
  function fitCanvas(c) {
    const w = Math.max(100, Math.round(c.clientWidth * (window.devicePixelRatio || 1)));
    const h = Math.max(10, Math.round(c.clientHeight * (window.devicePixelRatio || 1)));
    if (c.width !== w || c.height !== h) { c.width = w; c.height = h; return true; }
    return false;
  }
  function drawTimeline(t) {
    if (!timeline) return;
    fitCanvas(timeline);
    const g = timeline.getContext("2d"), d = duration() || 1, w = timeline.width, h = timeline.height;
    g.clearRect(0, 0, w, h);
    g.fillStyle = "rgba(230,140,0,0.55)";
    for (const [a, b] of data.idle) g.fillRect((a / d) * w, 0, Math.max(2, ((b - a) / d) * w), h);
    // one lane per mark kind (P7): gaps, frozen frames, dark/bright frames, blurred frames
    const lanes = ["gap", "frozen", "exposure", "blur"].filter((k) => (data.marks || {})[k]);
    const lh = h / Math.max(1, lanes.length);
    lanes.forEach((k, n) => {
      g.fillStyle = MARK_COLORS[k];
      for (const [a, b] of data.marks[k]) g.fillRect((a / d) * w, n * lh, Math.max(2, ((b - a) / d) * w), lh);
    });
    g.fillStyle = "#c00";
    g.fillRect((t / d) * w - 1, 0, 2, h);
  }
  const MARK_COLORS = { gap: "#d62728", frozen: "#7f7f7f", exposure: "#222", blur: "#9467bd" };
  function render() {
    const t = master ? master.currentTime : 0;  // no camera stream: the plots still draw (at 0 s)
    const i = frameOf(t);
    if (seek) { seek.max = String(nframes - 1); if (document.activeElement !== seek) seek.value = String(i); }
    if (clock) { clock.textContent = `${t.toFixed(3)} s · frame ${i} / ${nframes - 1}`; clock.dataset.frame = String(i); }
    drawTimeline(t);
    for (const p of plots) p.draw(t);
    for (const f of onRender) f(t);
  }
  const onRender = [];  // static/events.js draws its ranges here (P13)

  // The range label of a plot: enough decimals that the span shows 3 significant digits
  // (22408.3 … 22419.1, 0 … 100), so a varying series never reads "2.24e+4 … 2.24e+4".
  function fmtRange(lo, hi) {
    const span = hi - lo;
    if (!(span > 0)) return `${+lo.toPrecision(6)} (constant)`;
    const dec = Math.max(0, Math.min(20, 2 - Math.floor(Math.log10(span))));
    return `${lo.toFixed(dec)} … ${hi.toFixed(dec)}`;
  }
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
  // One uPlot chart per group and unit (P10): time axis in s, one value axis with its unit, a legend
  // with the value under the cursor, drag to zoom (double-click resets), click to seek, the playhead
  // as a line over the plot. uPlot draws at devicePixelRatio (crisp on HiDPI).
  const COLORS20 = [...COLORS, "#bcbd22", "#7f7f7f", "#aec7e8", "#ff9896", "#98df8a", "#c5b0d5", "#ffbb78", "#9edae5"];
  function linePlot(title, ts, series) {
    const box = document.createElement("div");
    box.className = "plot";
    $("plots").appendChild(box);
    let lo = Infinity, hi = -Infinity;
    for (const s of series) for (const v of s.values) if (v !== null && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    const range = isFinite(lo) ? fmtRange(lo, hi) : fmtRange(0, 1);
    const unit = series[0] && series[0].unit;
    const width = Math.max(280, box.clientWidth || $("plots").clientWidth || 600);
    const opts = {
      title, width, height: 180,
      scales: { x: { time: false } },
      axes: [{ label: "time [s]", size: 40, labelSize: 16 },
             { label: unit ? `[${unit}]` : "value", size: 64, labelSize: 16 }],
      series: [{ label: "t [s]", value: (u, v) => (v === null || v === undefined ? "—" : v.toFixed(3)) },
               ...series.map((s, k) => ({ label: s.name, stroke: COLORS20[k % COLORS20.length], width: 1.25,
                                          spanGaps: false, points: { show: false },
                                          value: (u, v) => (v === null || v === undefined ? "—" : (+v.toPrecision(5)).toString()) }))],
      cursor: { drag: { x: true, y: false, setScale: true } },
      legend: { live: true },
      hooks: { drawClear: [(u) => { u.ctx.save(); u.ctx.fillStyle = "#fff"; u.ctx.fillRect(0, 0, u.ctx.canvas.width, u.ctx.canvas.height); u.ctx.restore(); }],
               draw: [(u) => {  // idle ranges under the lines
                 const g = u.ctx; g.save(); g.fillStyle = "rgba(230,140,0,0.18)";
                 for (const [a, b] of data.idle) {
                   const x0 = u.valToPos(a, "x", true), x1 = u.valToPos(b, "x", true);
                   g.fillRect(x0, u.bbox.top, Math.max(1, x1 - x0), u.bbox.height);
                 }
                 g.restore();
               }],
               setScale: [(u, key) => {  // the time range shown (drag zooms, double-click resets), for tests too
                 if (key === "x") { u.root.parentNode.dataset.xmin = u.scales.x.min; u.root.parentNode.dataset.xmax = u.scales.x.max; }
               }] },
    };
    const u = new uPlot(opts, [ts, ...series.map((s) => s.values)], box);
    const c = u.ctx.canvas;
    c.dataset.group = title; c.dataset.range = range;
    box.dataset.group = title;
    box.dataset.axes = opts.axes.map((x) => x.label).join(" | ");
    const head = document.createElement("div");
    head.className = "playhead";
    u.over.appendChild(head);
    let downAt = null;
    u.over.addEventListener("mousedown", (ev) => { downAt = ev.clientX; });
    u.over.addEventListener("mouseup", (ev) => {
      if (downAt !== null && Math.abs(ev.clientX - downAt) < 3 && master) {  // a click, not a drag-zoom
        const t = u.posToVal(ev.clientX - u.over.getBoundingClientRect().left, "x");
        pause();
        toFrame(Math.floor(t * fps + 1e-6));
      }
      downAt = null;
    });
    plots.push({ canvas: c, chart: u, draw(t) {
      const x = u.valToPos(t, "x");
      head.style.display = x >= 0 && x <= u.over.clientWidth ? "block" : "none";
      head.style.left = `${x}px`;
    } });
  }
  function topView(tr, ts) {
    const c = document.createElement("canvas");
    c.setAttribute("data-group", "trajectory " + tr.column);
    c.className = "top";
    $("plots").appendChild(c);
    fitCanvas(c);
    const base = document.createElement("canvas");
    base.width = c.width; base.height = c.height;
    const g = base.getContext("2d"), w = base.width, h = base.height, pad = 16;
    const xs = tr.x.filter((v) => v !== null), ys = tr.y.filter((v) => v !== null);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    const span = Math.max(x1 - x0, y1 - y0) || 1;
    const cx = (x0 + x1) / 2, cy = (y0 + y1) / 2;  // centred, one scale for both axes (a true top view)
    const X = (x) => w / 2 + ((x - cx) / span) * (w - 2 * pad), Y = (y) => h / 2 - ((y - cy) / span) * (h - 2 * pad);
    g.fillStyle = "#fff"; g.fillRect(0, 0, w, h);
    g.strokeStyle = "#1f77b4"; g.beginPath();
    let pen = false;
    tr.x.forEach((x, i) => {
      const y = tr.y[i];
      if (x === null || y === null) { pen = false; return; }
      if (pen) g.lineTo(X(x), Y(y)); else { g.moveTo(X(x), Y(y)); pen = true; }
    });
    g.stroke();
    // start (green) and end (red) marks, a scale bar in metres, text at the screen's pixel ratio (P10)
    const dpr = window.devicePixelRatio || 1;
    const firstI = tr.x.findIndex((v, i) => v !== null && tr.y[i] !== null);
    let lastI = -1;
    tr.x.forEach((v, i) => { if (v !== null && tr.y[i] !== null) lastI = i; });
    for (const [i, col, label] of [[firstI, "#2ca02c", "start"], [lastI, "#d62728", "end"]]) {
      if (i < 0) continue;
      g.fillStyle = col; g.beginPath(); g.arc(X(tr.x[i]), Y(tr.y[i]), 4 * dpr, 0, 2 * Math.PI); g.fill();
      g.font = `${11 * dpr}px system-ui, sans-serif`;
      g.fillText(label, X(tr.x[i]) + 6 * dpr, Y(tr.y[i]) - 6 * dpr);
    }
    const metres = span;  // the span drawn across the box
    const nice = Math.pow(10, Math.floor(Math.log10(metres / 2)));
    const bar = [5, 2, 1].map((k) => k * nice).find((m) => m <= metres / 2) || nice;
    const px = (bar / span) * (w - 2 * pad);
    g.fillStyle = "#333";
    g.fillRect(pad, h - pad - 3 * dpr, px, 2 * dpr);
    g.font = `${11 * dpr}px system-ui, sans-serif`;
    g.fillText(bar >= 1 ? `${+bar.toPrecision(3)} m` : `${+(bar * 100).toPrecision(3)} cm`, pad, h - pad - 6 * dpr);
    g.fillStyle = "#555"; g.font = `${12 * dpr}px system-ui, sans-serif`;
    g.fillText(`${tr.column} (top view, x → right, y ↑ forward; ${tr.frame || "as stored"})`, 4 * dpr, 14 * dpr);
    plots.push({ canvas: c, draw(t) {
      const cg = c.getContext("2d");
      cg.drawImage(base, 0, 0);
      let i = 0;
      while (i + 1 < ts.length && ts[i + 1] <= t) i++;
      if (tr.x[i] !== null && tr.y[i] !== null) {
        cg.fillStyle = "#c00"; cg.beginPath(); cg.arc(X(tr.x[i]), Y(tr.y[i]), 5, 0, 2 * Math.PI); cg.fill();
      }
    } });
  }
  function loadSignals() {
    if (!data.signals) return;
    fetch(data.signals, { credentials: "same-origin" }).then((r) => (r.ok ? r.json() : null)).then((doc) => {
      if (!doc || !Array.isArray(doc.t)) return;
      signals = doc;
      if (!(doc.series || []).length && !(doc.trajectories || []).length) return;  // keep "no signals"
      $("plots").textContent = "";
      const groups = new Map();
      for (const s of doc.series || []) {  // one plot per group and unit: one y scale each
        const k = (s.group || s.name) + (s.unit ? ` [${s.unit}]` : "");
        if (!groups.has(k)) groups.set(k, []);
        groups.get(k).push(s);
      }
      for (const [name, ss] of groups) linePlot(name, doc.t, ss);
      for (const tr of doc.trajectories || []) topView(tr, doc.t);
      render();
    }).catch(() => undefined);
  }

  // ---- review (docs/decisions.md P1-P4) -------------------------------------------------------
  // A verdict names its episode and the review version it answers; the server refuses a stale one.
  // After a verdict (sent, refused or failed) no field keeps the focus, so the next key is a shortcut.
  // While a verdict is in flight no other verdict is sent; a navigation (j / k / auto-advance) waits
  // for it, and once the page is leaving no verdict key acts (it would judge the episode being left).
  let pending = null;   // a reject / flag waiting for its reason
  let busy = false;     // a verdict in flight
  let leaving = null;   // the URL this page is going to (set by j / k / auto-advance)
  const reasonBox = $("reason"), auto = $("auto-advance");
  function say(text, cls) { const m = $("review-msg"); if (m) { m.textContent = text; m.className = cls || ""; } }
  function unfocus() { const a = document.activeElement; if (a && a !== document.body && a.blur) a.blur(); }
  function go(url) {
    if (!url || leaving) return;
    leaving = url;
    if (!busy) location.href = url;
  }
  function showState(cur) {
    const cell = $("review-state");
    cell.textContent = "";
    const s = document.createElement("span");
    if (!cur) { s.className = "dim"; s.textContent = "unreviewed"; cell.appendChild(s); return; }
    s.className = { accepted: "ok", rejected: "bad", flagged: "warn" }[cur.state] || "dim";
    s.dataset.state = cur.state; s.textContent = cur.state;
    cell.appendChild(s);
    if (cur.reason) { const d = document.createElement("span"); d.className = "dim"; d.textContent = " " + cur.reason; cell.appendChild(d); }
  }
  function addHistory(body) {
    const tb = document.querySelector("#reviews tbody");
    if (!tb) return;
    const tr = document.createElement("tr");
    const when = new Date(body.at * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
    for (const v of [when, body.state, body.reason, body.token_id || "—"]) {
      const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    }
    tb.insertBefore(tr, tb.firstChild);
  }
  function review(verdict) {
    if (!data.can_review || !$("review") || busy || leaving) return;
    const reason = verdict === "undo" ? "" : reasonBox.value.trim();
    if ((verdict === "reject" || verdict === "flag") && !reason) {
      pending = verdict;
      reasonBox.focus();
      say(`type why, then Enter to ${verdict} (Esc cancels)`, "warn");
      return;
    }
    pending = null;
    busy = true;
    reasonBox.value = "";
    unfocus();
    say(`sending ${verdict} …`, "dim");
    fetch(data.review_url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Egopool-CSRF": data.csrf },
      body: JSON.stringify({ episode: data.index, version: data.version, verdict, reason }),
    }).then((r) => r.json().then((body) => ({ ok: r.ok, status: r.status, body }))).then(({ ok, status, body }) => {
      if (!ok) {
        say(body.message || `refused (HTTP ${status})`, "bad");
        return;
      }
      data.version = body.version;
      showState(body.current);
      addHistory(body);
      say(verdict === "undo" ? `undone: now ${body.current ? body.current.state : "unreviewed"}` : body.state,
          { accepted: "ok", rejected: "bad", flagged: "warn" }[body.state] || "dim");
      if (verdict !== "undo" && auto && auto.checked && !leaving) {
        if (data.next_unreviewed) leaving = data.next_unreviewed;
        else say(`${body.state}; no unreviewed episode after this one`, "dim");
      }
    }).catch((e) => say(String(e), "bad")).finally(() => {
      busy = false;
      unfocus();
      if (leaving) location.href = leaving;
    });
  }
  for (const v of ["accept", "reject", "flag", "undo"]) {
    const b = $(v);
    if (b) b.addEventListener("click", () => { b.blur(); review(v); });
  }
  if (auto) {
    auto.checked = localStorage.getItem("egopool-auto-advance") === "1";
    auto.addEventListener("change", () => { localStorage.setItem("egopool-auto-advance", auto.checked ? "1" : "0"); auto.blur(); });
  }
  if (reasonBox) {
    reasonBox.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") {
        ev.preventDefault();
        if (pending) review(pending);
        else say("press r (reject) or f (flag) to send a reason", "warn");
      } else if (ev.key === "Escape") {
        ev.preventDefault();
        pending = null; reasonBox.value = ""; reasonBox.blur(); say("");
      }
    });
  }

  // ---- keys ------------------------------------------------------------------------------------
  const TYPED = new Set(["text", "search", "number", "date", "email", "url", "password", "tel", "datetime-local"]);
  function typing(el) {
    if (!el) return false;
    const tag = el.tagName;
    return (tag === "INPUT" && TYPED.has(el.type)) || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }
  document.addEventListener("keydown", (ev) => {
    if (typing(ev.target) || typing(document.activeElement)) return;  // typing never fires a shortcut
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const k = ev.key;
    if (k === " " || k === "Spacebar") { ev.preventDefault(); toggle(); }
    else if (k === "ArrowLeft") { ev.preventDefault(); step(-1); }
    else if (k === "ArrowRight") { ev.preventDefault(); step(1); }
    else if (k === "a" || k === "r" || k === "f" || k === "u") {
      ev.preventDefault();  // r / f focus the reason field: the key must not be typed into it
      if (ev.repeat) return;  // a held key is one verdict
      review({ a: "accept", r: "reject", f: "flag", u: "undo" }[k]);
    }
    else if (k === "j") go(data.next);
    else if (k === "k") go(data.prev);
  });

  if (master) {
    playBtn.addEventListener("click", toggle);
    $("step-back").addEventListener("click", () => step(-1));
    $("step-fwd").addEventListener("click", () => step(1));
    seek.addEventListener("input", () => toFrame(parseInt(seek.value, 10)));
    seek.addEventListener("change", () => seek.blur());  // the arrow keys step frames, not the slider
    master.addEventListener("loadedmetadata", render);
    master.addEventListener("seeked", render);
    // a paused video may report "ended" after a seek into its last frame: only a playing one stops here
    master.addEventListener("ended", () => {
      if (!playing) return;
      if (loopBox && loopBox.checked) { for (const v of vids) v.currentTime = 0; play(); }  // the browser paused it
      else pause();
    });
    if (speedSel) speedSel.addEventListener("change", () => {
      speed = parseFloat(speedSel.value) || 1;
      for (const v of vids) v.playbackRate = speed;
      speedSel.blur();
    });
    if (loopBox) loopBox.addEventListener("change", () => loopBox.blur());
    // a click on the timeline goes to that frame (the marks are where the quality facts point)
    if (timeline) timeline.addEventListener("click", (ev) => {
      const r = timeline.getBoundingClientRect();
      pause();
      toFrame(Math.floor(((ev.clientX - r.left) / r.width) * nframes));
    });
    depthHover();
    let resizing = null;
    window.addEventListener("resize", () => {  // charts follow the page width
      clearTimeout(resizing);
      resizing = setTimeout(() => {
        for (const p of plots) if (p.chart) p.chart.setSize({ width: Math.max(280, p.chart.root.parentNode.clientWidth), height: 180 });
        render();
      }, 150);
    });
    render();
  }
  loadSignals();
  // the player as static/events.js sees it (P13): the clock, a seek that pauses, the typing rule
  window.egopoolPlayer = { time: () => (master ? master.currentTime : 0), duration, fps, nframes, frameOf,
                           seek: (t) => { if (master) { pause(); toFrame(frameOf(t)); } }, typing, onRender };

  // ---- depth under the pointer: the proxy's turbo colour mapped back to mm (Q2, P9) -------------
  function turboRGB(x) {
    const r = 0.13572138 + x * (4.61539260 + x * (-42.66032258 + x * (132.13108234 + x * (-152.94239396 + x * 59.28637943))));
    const g = 0.09140261 + x * (2.19418839 + x * (4.84296658 + x * (-14.18503333 + x * (4.27729857 + x * 2.82956604))));
    const b = 0.10667330 + x * (12.64194608 + x * (-60.58204836 + x * (110.36276771 + x * (-89.90310912 + x * 27.34824973))));
    return [r, g, b].map((c) => Math.round(Math.max(0, Math.min(1, c)) * 255));
  }
  function depthHover() {
    const lut = Array.from({ length: 256 }, (_, k) => turboRGB(k / 255));
    const [lo, hi] = data.depth_range || [200, 6000];
    for (const bar of document.querySelectorAll(".depthbar")) {
      const v = $(bar.dataset.video), out = bar.querySelector(".depthval");
      if (!v || !out) continue;
      const c = document.createElement("canvas");
      v.addEventListener("mousemove", (ev) => {
        if (!v.videoWidth) return;
        const r = v.getBoundingClientRect();
        c.width = v.videoWidth; c.height = v.videoHeight;
        const g = c.getContext("2d", { willReadFrequently: true });
        g.drawImage(v, 0, 0);
        const x = Math.floor(((ev.clientX - r.left) / r.width) * c.width), y = Math.floor(((ev.clientY - r.top) / r.height) * c.height);
        const p = g.getImageData(Math.max(0, Math.min(c.width - 1, x)), Math.max(0, Math.min(c.height - 1, y)), 1, 1).data;
        if (p[0] + p[1] + p[2] < 40) { out.textContent = "no depth"; return; }
        let best = 0, bd = Infinity;
        lut.forEach((q, k) => { const dd = (q[0] - p[0]) ** 2 + (q[1] - p[1]) ** 2 + (q[2] - p[2]) ** 2; if (dd < bd) { bd = dd; best = k; } });
        const mm = lo + (best / 255) * (hi - lo);
        out.textContent = `≈ ${Math.round(mm)} mm`;  // ±1 LUT step (23 mm) plus the proxy's compression
      });
    }
  }
  // previews still being built: reload when they may be ready, unless the reviewer is busy here
  if (data.building) {
    const again = () => {
      if (busy || pending || leaving || typing(document.activeElement)) { setTimeout(again, 5000); return; }
      location.reload();
    };
    setTimeout(again, 10000);
  }
})();
