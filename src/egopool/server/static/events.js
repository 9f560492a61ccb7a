// Reviewers' events on the episode page (docs/decisions.md P11-P19): labelled ranges [t0, t1) of the episode.
// Mark with the keyboard ("[" starts at the clock's frame, "]" ends after the clock's frame and opens the
// label form) or drag on the timeline; the ranges are drawn under the timeline (a click seeks to the start),
// listed below (edit, delete). Keys never act while a field has the focus; after a save, a cancel or a
// refusal no field keeps it (the verdicts' rule, P3). Labels and notes are text, never markup.
"use strict";
(function () {
  const data = JSON.parse(document.getElementById("episode-data").textContent);
  const P = window.egopoolPlayer;
  const $ = (id) => document.getElementById(id);
  const form = $("event-form"), list = document.querySelector("#event-list tbody"), msg = $("event-msg");
  if (!P || !list) return;
  const fps = P.fps, enc = encodeURIComponent(data.task);
  const listUrl = `/api/v1/events?task=${enc}&episode=${data.index}`;
  const addUrl = `/api/v1/tasks/${enc}/episodes/${data.index}/events`;
  let events = [];
  let start = null;     // t0 set by "[" and waiting for "]"
  let editing = null;   // the event the form edits (null: a new one)
  let busy = false;
  const timeline = $("timeline");
  function say(text, cls) { msg.textContent = text; msg.className = cls || ""; }
  function unfocus() { const a = document.activeElement; if (a && a !== document.body && a.blur) a.blur(); }
  function dur() { return P.duration() || data.duration || 0; }
  // frame i is [i / fps, (i + 1) / fps): exact, not rounded (a start rounded down would seek to frame i - 1)
  function frameStart(t) { return P.frameOf(t) / fps; }
  function frameEnd(t) { return Math.min(dur() || Infinity, (P.frameOf(t) + 1) / fps); }

  // ---- the lane under the timeline --------------------------------------------------------------
  let lane = null, ghost = null;
  if (timeline) {
    lane = document.createElement("div");
    lane.id = "event-lane";
    lane.title = "events: click one to go to its start; drag here or on the timeline to mark a new one";
    timeline.insertAdjacentElement("afterend", lane);
    ghost = document.createElement("div");
    ghost.id = "event-ghost";
    ghost.hidden = true;
    // the label form and its messages right under the range being marked (the videos stay in view)
    lane.insertAdjacentElement("afterend", msg);
    if (form) lane.insertAdjacentElement("afterend", form);
  }
  function place(el, a, b) {
    const d = dur() || 1;
    el.style.left = `${(a / d) * 100}%`;
    el.style.width = `max(3px, ${((b - a) / d) * 100}%)`;
  }
  function drawLane() {
    if (!lane) return;
    lane.textContent = "";
    const rows = [];  // greedy rows: overlapping events stack
    for (const ev of [...events].sort((x, y) => x.t0 - y.t0)) {
      let k = rows.findIndex((end) => end <= ev.t0);
      if (k < 0) { k = rows.length; rows.push(0); }
      rows[k] = ev.t1;
      const el = document.createElement("div");
      el.className = "event-range";
      el.dataset.id = String(ev.id);
      el.dataset.t0 = String(ev.t0);
      el.title = `${ev.label} (${ev.t0.toFixed(3)}–${ev.t1.toFixed(3)} s)${ev.note ? ": " + ev.note : ""}`;
      el.textContent = ev.label;
      el.style.top = `${k * 16}px`;
      place(el, ev.t0, ev.t1);
      el.addEventListener("click", (e) => { e.stopPropagation(); P.seek(ev.t0); });
      lane.appendChild(el);
    }
    lane.style.height = `${Math.max(1, rows.length) * 16 + 2}px`;
    if (ghost) lane.appendChild(ghost);
  }
  P.onRender.push((t) => {  // the pending start of "[" follows nothing: drawn once; the playhead on the lane
    if (!lane) return;
    let head = $("event-head");
    if (!head) { head = document.createElement("div"); head.id = "event-head"; lane.appendChild(head); }
    head.style.left = `${(t / (dur() || 1)) * 100}%`;
  });

  // ---- the list ------------------------------------------------------------------------------------
  function cell(tr, text) { const td = document.createElement("td"); td.textContent = text; tr.appendChild(td); return td; }
  function button(td, text, cls, fn) {
    const b = document.createElement("button");
    b.type = "button"; b.textContent = text; b.className = cls;
    b.addEventListener("click", () => { b.blur(); fn(); });
    td.appendChild(b);
  }
  function drawList() {
    list.textContent = "";
    for (const ev of [...events].sort((x, y) => x.t0 - y.t0 || x.id - y.id)) {
      const tr = document.createElement("tr");
      tr.dataset.id = String(ev.id);
      const from = cell(tr, `${ev.t0.toFixed(3)} s`);
      from.className = "seek"; from.title = "go there";
      from.addEventListener("click", () => P.seek(ev.t0));
      cell(tr, `${ev.t1.toFixed(3)} s`);
      cell(tr, ev.label).className = "event-label";
      cell(tr, ev.note).className = "event-note";
      cell(tr, ev.updated_by && ev.updated_by !== ev.token_id ? `${ev.token_id || "—"}, edited by ${ev.updated_by}`
        : (ev.token_id || "—"));
      const td = cell(tr, "");
      if (form) {
        button(td, "edit", "event-edit", () => openForm(ev.t0, ev.t1, ev));
        button(td, "delete", "event-delete bad", () => remove(ev));
      }
      list.appendChild(tr);
    }
    drawLane();
  }
  function load() {
    return fetch(listUrl, { credentials: "same-origin" }).then((r) => (r.ok ? r.json() : null)).then((doc) => {
      if (doc && Array.isArray(doc.events)) { events = doc.events; drawList(); }
    }).catch(() => undefined);
  }

  // ---- the form --------------------------------------------------------------------------------
  const labelBox = $("event-label"), noteBox = $("event-note"), t0Box = $("event-t0"), t1Box = $("event-t1");
  let range = [0, 0];  // exact; the boxes show 3 decimals and replace a bound only when the reviewer changed it
  const shown = (t) => t.toFixed(3);
  function bound(box, exact) {
    if (!box || box.value === shown(exact)) return exact;
    const v = parseFloat(box.value);
    return isFinite(v) ? v : exact;
  }
  function openForm(t0, t1, ev) {
    if (!form) return;
    editing = ev || null;
    range = [Math.min(t0, t1), Math.max(t0, t1)];
    $("event-range").textContent = editing ? `edit ${ev.label}` : "new event";
    if (t0Box) { t0Box.value = shown(range[0]); t1Box.value = shown(range[1]); }
    labelBox.value = ev ? ev.label : "";
    noteBox.value = ev ? ev.note : "";
    form.hidden = false;
    if (ghost && !ev) { place(ghost, range[0], range[1]); ghost.hidden = false; }
    labelBox.focus({ preventScroll: true });
    say("type a label (and a note), Enter saves, Esc cancels", "dim");
  }
  function closeForm(text, cls) {
    form.hidden = true; editing = null; start = null;
    if (ghost) ghost.hidden = true;
    unfocus();
    say(text || "", cls);
  }
  function send(method, url, body) {
    busy = true;
    return fetch(url, {
      method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Egopool-CSRF": data.csrf },
      body: JSON.stringify(body),
    }).then((r) => r.json().then((b) => ({ ok: r.ok, status: r.status, body: b })))
      .finally(() => { busy = false; });
  }
  function save() {
    if (busy) return;
    const label = labelBox.value.trim(), note = noteBox.value.trim();
    if (!label) { say("an event needs a label", "warn"); return; }
    const ev = editing, t0 = bound(t0Box, range[0]), t1 = bound(t1Box, range[1]);
    const req = ev ? send("PATCH", `/api/v1/events/${ev.id}`, { version: ev.version, t0, t1, label, note })
      : send("POST", addUrl, { episode: data.index, t0, t1, label, note });
    unfocus();  // whatever the answer: the next key is a shortcut again
    req.then(({ ok, status, body }) => {
      if (!ok && status !== 409) { say(body.message || `refused (HTTP ${status})`, "bad"); return; }  // fix, save again
      if (!ok) { closeForm(body.message, "bad"); load(); return; }  // edited elsewhere: the list shows it now
      closeForm(`${ev ? "saved" : "marked"} ${body.label} ${body.t0.toFixed(3)}–${body.t1.toFixed(3)} s`, "ok");
      load();
    }).catch((e) => closeForm(String(e), "bad"));
  }
  function remove(ev) {
    if (busy) return;
    send("DELETE", `/api/v1/events/${ev.id}`, { version: ev.version }).then(({ ok, status, body }) => {
      say(ok ? `deleted ${ev.label}` : (body.message || `refused (HTTP ${status})`), ok ? "dim" : "bad");
      load();
    }).catch((e) => say(String(e), "bad"));
  }
  if (form) {
    form.addEventListener("submit", (e) => { e.preventDefault(); save(); });
    $("event-cancel").addEventListener("click", () => closeForm("cancelled", "dim"));
    form.addEventListener("keydown", (e) => {
      if (e.key === "Escape") { e.preventDefault(); closeForm("cancelled", "dim"); }
    });
  }

  // ---- keys: "[" start, "]" end (the frames shown at both presses are inside the range) -----------
  document.addEventListener("keydown", (ev) => {
    if (!form || P.typing(ev.target) || P.typing(document.activeElement)) return;
    if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.repeat) return;
    if (ev.key === "Escape" && !form.hidden) {
      closeForm("cancelled", "dim");
    } else if (ev.key === "[") {
      ev.preventDefault();
      start = frameStart(P.time());
      say(`event starts at ${start.toFixed(3)} s; press ] at its last frame`, "dim");
      if (ghost) { place(ghost, start, frameEnd(P.time())); ghost.hidden = false; }
    } else if (ev.key === "]") {
      ev.preventDefault();
      if (start === null) { say("press [ at the event's first frame first", "warn"); return; }
      const t = P.time();
      const a = Math.min(start, frameStart(t)), b = Math.max(frameEnd(t), start + 1 / fps);
      openForm(a, Math.min(b, dur() || b));
    }
  });

  // ---- mouse: drag on the timeline or the lane marks a range; a plain click still seeks ----------
  let down = null, dragged = false;
  function timeAt(x) {
    const r = (timeline || lane).getBoundingClientRect();
    return Math.max(0, Math.min(1, (x - r.left) / r.width)) * dur();
  }
  function startDrag(e) {
    if (!form || e.button !== 0 || (e.target && e.target.classList && e.target.classList.contains("event-range"))) return;
    down = e.clientX; dragged = false;
  }
  for (const el of [timeline, lane]) if (el) el.addEventListener("mousedown", startDrag);
  window.addEventListener("mousemove", (e) => {
    if (down === null) return;
    if (Math.abs(e.clientX - down) >= 4) {
      dragged = true;
      const a = timeAt(down), b = timeAt(e.clientX);
      if (ghost) { place(ghost, Math.min(a, b), Math.max(a, b)); ghost.hidden = false; }
    }
  });
  window.addEventListener("mouseup", (e) => {
    if (down === null) return;
    const x0 = down;
    down = null;
    if (!dragged) return;
    const a = timeAt(Math.min(x0, e.clientX)), b = timeAt(Math.max(x0, e.clientX));
    const t0 = frameStart(a), t1 = frameEnd(b - 1e-6);
    if (t1 > t0) openForm(t0, t1);
  });
  // the click that ends a drag is not a seek (episode.js seeks on a click on the timeline)
  window.addEventListener("click", (e) => {
    if (dragged && (e.target === timeline || e.target === lane)) { e.stopPropagation(); e.preventDefault(); }
    dragged = false;
  }, true);

  load();
})();
