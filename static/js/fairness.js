/* Fairness charts, drawn with Chart.js (static/vendor/chartjs) from the JSON the page
   carries (portal/views/fairness.py). Readable without colour: each line has its own
   dash pattern and point shape (also in the legend), marks have their own shapes,
   the backfilled stretch is hatched, and the day's bars are hatched where the hour's
   are solid. Amounts are formatted by static/js/quantity.js, as the server formats
   them in the table beside each chart. */
(function () {
  "use strict";
  if (typeof Chart === "undefined") return;

  var INK = { entitlement: "#1f4e79", runtime: "#8a5a00", used: "#1b6e3a", decayed: "#4a5463",
              taken: "#a11d1d", given: "#1b6e3a", edit: "#1f4e79" };
  var fmt = (window.KQ && window.KQ.quantity) || function (r, v) { return String(v); };

  function readJSON(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function hatch(color) {
    var c = document.createElement("canvas");
    c.width = c.height = 8;
    var g = c.getContext("2d");
    g.strokeStyle = color;
    g.lineWidth = 1.5;
    g.beginPath(); g.moveTo(0, 8); g.lineTo(8, 0); g.moveTo(-2, 2); g.lineTo(2, -2); g.moveTo(6, 10); g.lineTo(10, 6);
    g.stroke();
    return g.createPattern(c, "repeat");
  }

  function clock(ms) {
    var d = new Date(ms);
    return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }

  function sparsePoints(n) {
    var every = Math.max(1, Math.round(n / 12));
    return function (ctx) { return ctx.dataIndex % every === 0 ? 3 : 0; };
  }

  // Hatches the stretch of history that was backfilled for the demo seed.
  var backfillShade = {
    id: "kqBackfill",
    beforeDatasetsDraw: function (chart, args, opts) {
      if (!opts || !opts.until) return;
      var x = chart.scales.x, area = chart.chartArea;
      var right = Math.min(x.getPixelForValue(opts.until), area.right);
      if (right <= area.left) return;
      var g = chart.ctx;
      g.save();
      g.fillStyle = hatch("rgba(74, 84, 99, 0.35)");
      g.fillRect(area.left, area.top, right - area.left, area.bottom - area.top);
      g.fillStyle = "#4a5463";
      g.font = "12px system-ui, sans-serif";
      g.fillText("backfilled (estimated)", area.left + 6, area.top + 14);
      g.restore();
    }
  };

  function lineChart(canvas, data) {
    var r = data.resource, t = data.t, n = t.length;
    function points(values) {
      return values.map(function (v, i) { return { x: t[i], y: v }; });
    }
    var top = 1;
    ["entitlement", "runtime", "used", "decayed"].forEach(function (k) {
      data[k].forEach(function (v) { if (v !== null && v > top) top = v; });
    });
    var markY = top * 1.08;
    function marks(kind) {
      return data.marks.filter(function (m) { return m.kind === kind; })
        .map(function (m) { return { x: m.t, y: markY, text: m.text }; });
    }
    var line = function (label, key, dash, style, width, stepped) {
      return { type: "line", label: label, data: points(data[key]), borderColor: INK[key], backgroundColor: INK[key],
               borderDash: dash, pointStyle: style, pointRadius: sparsePoints(n), borderWidth: width,
               stepped: stepped ? "before" : false, spanGaps: true, tension: 0 };
    };
    var mark = function (label, kind, style, rotation) {
      return { type: "scatter", label: label, data: marks(kind), pointStyle: style, rotation: rotation || 0,
               pointRadius: 7, pointHoverRadius: 9, borderColor: INK[kind], backgroundColor: INK[kind] };
    };
    var datasets = [
      line("Entitlement (min)", "entitlement", [], "rect", 2, true),
      line("Runtime quota", "runtime", [8, 4], "star", 2, true),
      line("Usage", "used", [], "circle", 3, false),
      line("Decayed usage", "decayed", [2, 3], "crossRot", 2, false),
      mark("Preemption taken", "taken", "triangle", 180),
      mark("Preemption given", "given", "triangle", 0),
      mark("Quota edit", "edit", "rectRot", 0)
    ].filter(function (d) { return d.type === "line" || d.data.length; });
    return new Chart(canvas, {
      data: { datasets: datasets },
      plugins: [backfillShade],
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: true,
        interaction: { mode: "nearest", intersect: false },
        scales: {
          x: { type: "linear", min: n ? t[0] : undefined, max: n ? t[n - 1] : undefined,
               ticks: { maxTicksLimit: 6, callback: function (v) { return clock(v); } } },
          y: { beginAtZero: true, suggestedMax: markY,
               ticks: { maxTicksLimit: 6, callback: function (v) { return fmt(r, v); } } }
        },
        plugins: {
          kqBackfill: { until: data.backfilled_until },
          legend: { labels: { usePointStyle: true, pointStyleWidth: 28 } },
          tooltip: { callbacks: {
            title: function (items) { return items.length ? clock(items[0].parsed.x) : ""; },
            label: function (item) {
              var raw = item.raw || {};
              if (raw.text) return item.dataset.label + ": " + raw.text;
              return item.dataset.label + ": " + fmt(r, item.parsed.y);
            }
          } }
        }
      }
    });
  }

  function compareChart(canvas, data) {
    return new Chart(canvas, {
      type: "bar",
      data: {
        labels: data.tenants,
        datasets: [
          { label: "Last hour (solid)", data: data.hour, backgroundColor: "#1f4e79", borderColor: "#1f4e79", borderWidth: 1 },
          { label: "Last day (hatched)", data: data.day, backgroundColor: hatch("#8a5a00"), borderColor: "#8a5a00", borderWidth: 2 }
        ]
      },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, indexAxis: "y",
        scales: { x: { beginAtZero: true, ticks: { callback: function (v) { return v + "%"; } } } },
        plugins: { tooltip: { callbacks: { label: function (item) {
          return item.dataset.label + ": " + (item.raw === null ? "no entitlement" : item.raw + "% of entitlement");
        } } } }
      }
    });
  }

  document.querySelectorAll("canvas[data-fairness-chart]").forEach(function (canvas) {
    var data = readJSON(canvas.getAttribute("data-fairness-chart"));
    if (data) canvas.kqChart = lineChart(canvas, data);
  });
  document.querySelectorAll("canvas[data-fairness-compare]").forEach(function (canvas) {
    var data = readJSON(canvas.getAttribute("data-fairness-compare"));
    if (data) canvas.kqChart = compareChart(canvas, data);
  });
})();
