// Bulk review on the task page of `egopool serve` (docs/decisions.md P20): a checkbox on every episode row
// (shift-click selects the range from the last box clicked), "select all matching the filter" (every page,
// from .../selection), and accept / reject / flag for the selection. Every item carries its episode and the
// review version the page showed (the row's data-version; for rows of other pages, the version when they
// were selected): a stale one is refused by the server and listed here, the rest are recorded.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const bar = $("bulk");
  const body = document.querySelector("table[id^='episodes-'] tbody");
  if (!bar || !body) return;
  const head = document.querySelector("table[id^='episodes-'] thead tr");
  const selected = new Map();  // N -> version
  let matching = null;  // every [N, version] of the filter once "select all matching" was used
  let lastBox = null, busy = false;
  const pageAll = document.createElement("input");
  pageAll.type = "checkbox"; pageAll.id = "select-page"; pageAll.title = "select this page";
  head.cells[0].appendChild(pageAll);  // the thumbnail column holds the boxes: the columns stay as they are
  const boxes = () => Array.from(body.querySelectorAll("input.pick"));
  for (const row of body.rows) {
    const box = document.createElement("input");
    box.type = "checkbox"; box.className = "pick";
    box.dataset.n = row.getAttribute("data-episode-index");
    box.dataset.v = row.getAttribute("data-version") || "0";
    box.setAttribute("aria-label", "select episode " + box.dataset.n);
    row.cells[0].insertBefore(box, row.cells[0].firstChild);
  }
  function count() {
    const n = selected.size;
    // task.js reloads a page whose totals are partial: never while a selection or a bulk verdict is pending
    if (n || busy) document.body.dataset.selecting = "1"; else delete document.body.dataset.selecting;
    $("bulk-count").textContent = matching ? `all ${n} matching selected` : `${n} selected`;
    const shown = boxes();
    pageAll.checked = shown.length > 0 && shown.every((b) => b.checked);
  }
  function set(box, on) {
    box.checked = on;
    if (on) selected.set(+box.dataset.n, +box.dataset.v); else selected.delete(+box.dataset.n);
  }
  body.addEventListener("click", (ev) => {
    const box = ev.target;
    if (!(box instanceof HTMLInputElement) || !box.classList.contains("pick")) return;
    matching = null;
    if (ev.shiftKey && lastBox && lastBox !== box) {  // the range in the order shown (after a sort, too)
      const all = boxes(), a = all.indexOf(lastBox), b = all.indexOf(box);
      for (const x of all.slice(Math.min(a, b), Math.max(a, b) + 1)) set(x, box.checked);
    } else {
      set(box, box.checked);
    }
    lastBox = box;
    count();
  });
  pageAll.addEventListener("change", () => { matching = null; for (const b of boxes()) set(b, pageAll.checked); count(); });
  $("select-none").addEventListener("click", () => { matching = null; selected.clear(); for (const b of boxes()) b.checked = false; count(); });
  $("select-all").addEventListener("click", async () => {
    const msg = $("bulk-msg");
    msg.textContent = "selecting…";
    try {
      const pairs = [];
      let url = bar.dataset.selectionUrl;
      for (;;) {
        const r = await fetch(url, { credentials: "same-origin" });
        const doc = await r.json();
        if (!r.ok) throw new Error(doc.message || r.statusText);
        pairs.push(...doc.episodes);
        if (!doc.next_cursor) break;
        const u = new URL(bar.dataset.selectionUrl, location.href);
        u.searchParams.set("cursor", doc.next_cursor);
        url = u.toString();
      }
      selected.clear();
      // the rows on this page answer the version the page shows; the others, the one just read
      const shown = new Map(boxes().map((b) => [+b.dataset.n, +b.dataset.v]));
      for (const [n, v] of pairs) selected.set(n, shown.has(n) ? shown.get(n) : v);
      for (const b of boxes()) b.checked = selected.has(+b.dataset.n);
      matching = pairs.length;
      msg.textContent = "";
    } catch (e) {
      msg.textContent = "could not select: " + e.message;
    }
    count();
  });
  function rowOf(n) { return body.querySelector(`tr[data-episode-index="${n}"]`); }
  async function judge(verdict) {
    if (busy) return;
    const msg = $("bulk-msg"), reasonBox = $("bulk-reason");
    const reason = reasonBox.value.trim();
    if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
    if (!selected.size) { msg.textContent = "select episodes first"; return; }
    if (verdict !== "accept" && !reason) { msg.textContent = `a ${verdict} needs a reason`; reasonBox.focus(); return; }
    busy = true;
    count();
    const items = Array.from(selected, ([episode, version]) => ({ episode, version }));
    const max = +bar.dataset.max || 1000;
    const all = { recorded: [], stale: [], not_found: [] };
    let error = null;
    const atomic = $("bulk-all-or-none").checked;
    for (let i = 0; i < items.length && !error; i += max) {
      msg.textContent = `sending ${Math.min(i + max, items.length)} of ${items.length}…`;
      const r = await fetch(bar.dataset.bulkUrl, {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-Egopool-CSRF": bar.dataset.csrf },
        body: JSON.stringify({ verdict, reason, episodes: items.slice(i, i + max), all_or_none: atomic }),
      });
      const doc = await r.json().catch(() => ({ message: r.statusText }));
      if (!r.ok) { error = doc.message || r.statusText; break; }
      for (const k of Object.keys(all)) all[k].push(...doc[k]);
    }
    const state = { accept: "accepted", reject: "rejected", flag: "flagged" }[verdict];
    for (const rec of all.recorded) {
      selected.delete(rec.episode);
      const row = rowOf(rec.episode);
      if (!row) continue;
      row.setAttribute("data-version", rec.version);
      const box = row.querySelector("input.pick"); box.dataset.v = rec.version; box.checked = false;
      const cell = row.cells[row.cells.length - 1];
      cell.textContent = "";
      const span = document.createElement("span");
      span.className = { accepted: "ok", rejected: "bad", flagged: "warn" }[state];
      span.dataset.state = state; span.textContent = state;
      cell.appendChild(span);
      if (reason) { const d = document.createElement("span"); d.className = "dim"; d.textContent = " " + reason; cell.appendChild(d); }
      row.classList.remove("stale");
    }
    for (const s of all.stale) {
      const row = rowOf(s.episode);
      if (row) { row.classList.add("stale"); row.title = s.message; }
    }
    const bits = [`${all.recorded.length} ${state}`];
    if (all.stale.length) bits.push(`${all.stale.length} not recorded: reviewed again since you looked (episodes ${all.stale.map((s) => s.episode).join(", ")}); reload to see them`);
    if (all.not_found.length) bits.push(`${all.not_found.length} not pooled episodes (${all.not_found.join(", ")})`);
    if (error) bits.push("refused: " + error);
    msg.textContent = bits.join("; ");
    if (all.recorded.length) reasonBox.value = "";
    matching = null;
    busy = false;
    count();
  }
  $("bulk-accept").addEventListener("click", () => judge("accept"));
  $("bulk-reject").addEventListener("click", () => judge("reject"));
  $("bulk-flag").addEventListener("click", () => judge("flag"));
  $("bulk-reason").addEventListener("keydown", (ev) => { if (ev.key === "Escape") { ev.target.value = ""; ev.target.blur(); } });
  count();
})();
