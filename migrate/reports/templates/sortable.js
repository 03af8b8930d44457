"use strict";
// click a column header to sort its table (numbers as numbers)
for (const table of document.querySelectorAll("table.sortable")) {
  table.querySelectorAll("th").forEach((th, col) => th.addEventListener("click", () => {
    const body = table.tBodies[0], rows = Array.from(body.rows), asc = th.dataset.dir !== "asc";
    const key = (r) => { const t = r.cells[col].textContent.replace(/[, %+]/g, ""); const n = parseFloat(t);
      return isNaN(n) ? r.cells[col].textContent : n; };
    rows.sort((a, b) => { const x = key(a), y = key(b); return (x > y ? 1 : x < y ? -1 : 0) * (asc ? 1 : -1); });
    th.dataset.dir = asc ? "asc" : "desc";
    rows.forEach((r) => body.appendChild(r));
  }));
}
document.documentElement.dataset.ready = "yes";
