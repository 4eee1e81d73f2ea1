// Renders the embedded figures and makes tables sortable and filterable. No network access.
(function () {
  function renderFigures() {
    document.querySelectorAll("script.figdata").forEach(function (el) {
      var fig = JSON.parse(el.textContent);
      Plotly.newPlot(el.dataset.target, fig.data, fig.layout, { responsive: true, displaylogo: false });
    });
  }
  function cellValue(td) {
    var t = td.textContent.trim(); var n = parseFloat(t.replace(/[x$,]/g, ""));
    return isNaN(n) || !/^[-+]?[\d.]/.test(t) ? t.toLowerCase() : n;
  }
  function makeSortable(table) {
    var heads = table.querySelectorAll("thead th"); var body = table.tBodies[0];
    heads.forEach(function (th, i) {
      th.addEventListener("click", function () {
        var asc = th.dataset.sort !== "asc"; heads.forEach(function (h) { delete h.dataset.sort; });
        th.dataset.sort = asc ? "asc" : "desc";
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a.cells[i]), y = cellValue(b.cells[i]);
          if (x === "—") return 1; if (y === "—") return -1;
          return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }
  function wireFilter() {
    var box = document.getElementById("filter"); var table = document.getElementById("points");
    if (!box || !table) return;
    box.addEventListener("input", function () {
      var q = box.value.toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
        r.style.display = r.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    if (window.Plotly) renderFigures();
    document.querySelectorAll("table.sortable").forEach(makeSortable);
    wireFilter();
  });
})();
