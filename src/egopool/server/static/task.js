// The index and task pages of `egopool serve` (docs/decisions.md P8, P9): sort the episodes shown by a
// fact (the rows carry their facts as data-* attributes), and reload while previews are still being
// built (the totals say "partial") unless a field has the focus.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const sel = $("sort"), desc = $("sort-desc");
  const body = document.querySelector("table[id^='episodes-'] tbody");
  function sortRows() {
    if (!sel || !body) return;
    const key = sel.value.replace(/_/g, "-"), sign = desc && desc.checked ? -1 : 1;
    const rows = Array.from(body.rows);
    const val = (r) => { const v = r.getAttribute("data-" + key); return v === null ? NaN : parseFloat(v); };
    rows.sort((a, b) => {
      const x = val(a), y = val(b);
      if (isNaN(x) !== isNaN(y)) return isNaN(x) ? 1 : -1;  // episodes without the fact last, either way
      if (isNaN(x)) return 0;
      const n = (r) => parseFloat(r.getAttribute("data-episode-index"));
      return sign * (x - y) || n(a) - n(b);
    });
    for (const r of rows) body.appendChild(r);
    const u = new URL(location.href);
    u.hash = `sort=${sel.value}${desc && desc.checked ? ":desc" : ""}`;
    history.replaceState(null, "", u);
  }
  if (sel) {
    const m = /sort=([a-z_]+)(:desc)?/.exec(location.hash);
    if (m && Array.from(sel.options).some((o) => o.value === m[1])) { sel.value = m[1]; if (desc) desc.checked = !!m[2]; }
    sel.addEventListener("change", sortRows);
    if (desc) desc.addEventListener("change", sortRows);
    if (m) sortRows();
  }
  if (document.querySelector(".partial")) {
    const again = () => {
      const a = document.activeElement;
      if (a && a !== document.body && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName)) { setTimeout(again, 5000); return; }
      if (document.body.dataset.selecting) { setTimeout(again, 5000); return; }  // a bulk selection (bulk.js, P20)
      location.reload();
    };
    setTimeout(again, 5000);
  }
})();
