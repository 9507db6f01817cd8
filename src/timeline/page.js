"use strict";
// The timeline page: draws the rows and bars of the data embedded in the page as SVG. Text
// from the report only ever goes into the page as text (textContent, attribute values),
// never as markup.
(function () {
  var status = document.getElementById("status");
  var errors = 0;
  window.onerror = function (message) {
    errors += 1;
    status.setAttribute("data-errors", String(errors));
    status.textContent = "error: " + String(message);
  };
  var data = JSON.parse(document.getElementById("timeline-data").textContent);
  var OUTCOMES = data.outcomes, CAUSES = data.causes;
  var NS = "http://www.w3.org/2000/svg";
  var body = data.body, figures = data.figures;
  var LABEL_W = 220, ROW_H = 22, AXIS_H = 24, PLOT_W = 1000;
  var wall = Math.max(1, figures.wall_ms);
  var chart = document.getElementById("chart");
  var details = document.getElementById("details");
  var tip = document.getElementById("tip");

  function el(name, attrs, parent) {
    var node = document.createElementNS(NS, name);
    for (var k in attrs) node.setAttribute(k, String(attrs[k]));
    if (parent) parent.appendChild(node);
    return node;
  }
  function fmt(ms) {
    if (ms < 1000) return ms + " ms";
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
    if (ms < 3600000) return Math.floor(ms / 60000) + " min " + Math.floor((ms % 60000) / 1000) + " s";
    if (ms < 86400000) return Math.floor(ms / 3600000) + " h " + Math.floor((ms % 3600000) / 60000) + " min";
    return Math.floor(ms / 86400000) + " d " + Math.floor((ms % 86400000) / 3600000) + " h";
  }

  // Control characters, bidi embeddings, overrides, isolates and marks, and the line and
  // paragraph separators shown as \u{..}, as in the header.
  function visible(text) {
    return String(text).replace(/[\u0000-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\u206a-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\u{1bca0}-\u{1bca3}\u{1d173}-\u{1d17a}\u{e0000}-\u{e007f}]/gu, function (c) {
      return "\\u{" + c.codePointAt(0).toString(16) + "}";
    });
  }
  var rows = body.rows;
  var height = AXIS_H + rows.length * ROW_H + 4;
  var width = LABEL_W + PLOT_W + 10;
  var svg = el("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height, role: "img", "aria-label": "timeline of the run" }, chart);
  var labels = el("g", { "class": "labels" }, svg);
  rows.forEach(function (row, i) {
    var g = el("g", { "class": "row-" + row.kind }, labels);
    var y = AXIS_H + i * ROW_H;
    el("line", { "class": "grid", x1: 0, x2: width, y1: y + ROW_H, y2: y + ROW_H }, g);
    var t = el("text", { x: 4, y: y + ROW_H - 7, "data-row": i }, g);
    var label = visible(row.label);
    t.textContent = label.length > 30 ? label.slice(0, 29) + "\u2026" : label;
    var title = el("title", {}, t);
    title.textContent = label;
  });
  var clip = el("clipPath", { id: "plot-clip" }, el("defs", {}, svg));
  el("rect", { x: LABEL_W, y: 0, width: PLOT_W, height: height }, clip);
  var axis = el("g", { "class": "axis" }, svg);
  var viewport = el("g", { "clip-path": "url(#plot-clip)" }, svg);
  var plot = el("g", {}, viewport);
  var scale = PLOT_W / wall; // px per ms at zoom 1
  var zoom = 1, offset = 0; // offset: ms at the left edge

  var barNodes = [];
  var drawnBars = 0, drawnWaits = 0, drawnMarks = 0;
  function describeBar(b) {
    var job = body.jobs[b[5]] || {};
    var head;
    if (b[3] === 1) head = "waiting: " + CAUSES[b[4]] + " (" + fmt(b[2] - b[1]) + ")";
    else if (b[3] === 2) head = "never ran: " + OUTCOMES[b[4] % 10];
    else head = "try " + b[6] + ": " + OUTCOMES[b[4] % 10] + (b[4] >= 20 ? " (superseded)" : b[4] >= 10 ? " (retried)" : "") + " (" + fmt(b[2] - b[1]) + ")";
    var lines = [head, "from " + fmt(b[1]) + " to " + fmt(b[2])];
    Object.keys(job).forEach(function (k) {
      var v = job[k];
      if (v === null || k === "type") return;
      lines.push(visible(k) + ": " + visible(typeof v === "object" ? JSON.stringify(v) : String(v)));
    });
    return lines.join("\n");
  }
  function describeCell(c) {
    var what = c[2] === 0 ? "running, " + OUTCOMES[c[3]] : "waiting, " + CAUSES[c[3]];
    var from = c[1] * body.bucket_ms;
    return visible(rows[c[0]].label) + "\n" + what + ": " + fmt(c[4]) + "\nin " + fmt(from) + " to " + fmt(from + body.bucket_ms);
  }

  if (body.mode === "detail") {
    // Waits of one key share a strip: the job ahead in the lane is drawn last, on top, as its
    // own cause (cap, resource...) is why the jobs behind it wait too. Bars come in the order
    // the jobs ended, which is a key's lane order.
    var order = [];
    body.bars.forEach(function (b, i) { if (b[3] !== 1) order.push(i); });
    for (var w = body.bars.length - 1; w >= 0; w--) if (body.bars[w][3] === 1) order.push(w);
    order.forEach(function (i) {
      var b = body.bars[i];
      var y = AXIS_H + b[0] * ROW_H;
      var node;
      if (b[3] === 2) {
        node = el("line", { "class": "bar mark", x1: b[1] * scale, x2: b[1] * scale, y1: y + 3, y2: y + ROW_H - 3, stroke: "var(--" + OUTCOMES[b[4] % 10] + ")" }, plot);
        drawnMarks += 1;
      } else if (b[3] === 1) {
        node = el("rect", { "class": "bar wait", x: b[1] * scale, width: Math.max(0.5, (b[2] - b[1]) * scale), y: y + ROW_H - 8, height: 5, fill: "var(--" + CAUSES[b[4]] + ")" }, plot);
        drawnWaits += 1;
      } else {
        var cls = "bar run" + (b[4] >= 20 ? " superseded" : b[4] >= 10 ? " retried" : "");
        node = el("rect", { "class": cls, x: b[1] * scale, width: Math.max(0.5, (b[2] - b[1]) * scale), y: y + 3, height: ROW_H - 12, fill: "var(--" + OUTCOMES[b[4] % 10] + ")" }, plot);
        drawnBars += 1;
      }
      node.setAttribute("data-bar", String(i));
      barNodes[i] = node;
    });
  } else {
    var bw = body.bucket_ms * scale;
    body.cells.forEach(function (c, i) {
      var y = AXIS_H + c[0] * ROW_H;
      var share = Math.min(1, c[4] / (body.bucket_ms * body.capacity[c[0]]));
      var node;
      if (c[2] === 0) {
        node = el("rect", { "class": "bar run", x: c[1] * bw, width: bw, y: y + 3, height: ROW_H - 12, fill: "var(--" + OUTCOMES[c[3]] + ")", "fill-opacity": (0.25 + 0.75 * share).toFixed(2) }, plot);
        drawnBars += 1;
      } else {
        node = el("rect", { "class": "bar wait", x: c[1] * bw, width: bw, y: y + ROW_H - 8, height: 5, fill: "var(--" + CAUSES[c[3]] + ")", "fill-opacity": (0.25 + 0.75 * share).toFixed(2) }, plot);
        drawnWaits += 1;
      }
      node.setAttribute("data-bar", String(i));
      barNodes.push(node);
    });
  }
  function describe(i) {
    return body.mode === "detail" ? describeBar(body.bars[i]) : describeCell(body.cells[i]);
  }

  function drawAxis() {
    while (axis.firstChild) axis.removeChild(axis.firstChild);
    var span = wall / zoom;
    var step = Math.pow(10, Math.floor(Math.log10(Math.max(1, span / 8))));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= 10) { step *= m; return true; } return false; });
    for (var t = Math.ceil(offset / step) * step; t <= offset + span; t += step) {
      var x = LABEL_W + (t - offset) * scale * zoom;
      el("line", { "class": "grid", x1: x, x2: x, y1: AXIS_H - 4, y2: height }, axis);
      // The last label ends at its line, so that the chart's edge does not cut it.
      var nearEnd = x > LABEL_W + PLOT_W - 60;
      var label = el("text", { x: nearEnd ? x - 2 : x + 2, y: AXIS_H - 8, "text-anchor": nearEnd ? "end" : "start" }, axis);
      label.textContent = fmt(Math.round(t));
    }
  }
  function apply() {
    var span = wall / zoom;
    offset = Math.min(Math.max(0, offset), Math.max(0, wall - span));
    plot.setAttribute("transform", "translate(" + (LABEL_W - offset * scale * zoom) + ",0) scale(" + zoom + ",1)");
    drawAxis();
  }
  function zoomAt(factor, atMs) {
    var next = Math.min(Math.max(1, zoom * factor), 1e6);
    offset = atMs - (atMs - offset) * zoom / next;
    zoom = next;
    apply();
  }
  function msAt(clientX) {
    var box = svg.getBoundingClientRect();
    return offset + (clientX - box.left - LABEL_W) / (scale * zoom);
  }
  chart.addEventListener("wheel", function (e) {
    e.preventDefault();
    zoomAt(e.deltaY < 0 ? 1.25 : 0.8, msAt(e.clientX));
  }, { passive: false });
  var drag = null;
  chart.addEventListener("mousedown", function (e) { drag = { x: e.clientX, offset: offset }; });
  window.addEventListener("mouseup", function () { drag = null; });
  window.addEventListener("mousemove", function (e) {
    if (drag) {
      offset = drag.offset - (e.clientX - drag.x) / (scale * zoom);
      apply();
    }
  });
  var selected = -1;
  function select(i) {
    if (selected >= 0) barNodes[selected].classList.remove("selected");
    selected = i;
    if (i < 0) return;
    barNodes[i].classList.add("selected");
    details.textContent = describe(i);
  }
  plot.addEventListener("mousemove", function (e) {
    var i = e.target.getAttribute && e.target.getAttribute("data-bar");
    if (i === null || i === undefined) { tip.style.display = "none"; return; }
    tip.textContent = describe(Number(i));
    tip.style.display = "block";
    tip.style.left = Math.min(e.clientX + 12, window.innerWidth - 320) + "px";
    tip.style.top = (e.clientY + 12) + "px";
  });
  plot.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  plot.addEventListener("click", function (e) {
    var i = e.target.getAttribute("data-bar");
    if (i !== null) select(Number(i));
  });
  chart.addEventListener("keydown", function (e) {
    var span = wall / zoom, handled = true;
    if (e.key === "+" || e.key === "=") zoomAt(1.5, offset + span / 2);
    else if (e.key === "-") zoomAt(1 / 1.5, offset + span / 2);
    else if (e.key === "0") { zoom = 1; offset = 0; apply(); }
    else if (e.key === "ArrowLeft") { offset -= span / 10; apply(); }
    else if (e.key === "ArrowRight") { offset += span / 10; apply(); }
    else if ((e.key === "n" || e.key === "p") && barNodes.length) {
      select(((selected + (e.key === "n" ? 1 : -1)) + barNodes.length) % barNodes.length);
    } else if (e.key === "Escape") { select(-1); details.textContent = ""; }
    else handled = false;
    if (handled) e.preventDefault();
  });
  apply();
  status.setAttribute("data-rows", String(rows.length));
  status.setAttribute("data-bars", String(drawnBars));
  status.setAttribute("data-waits", String(drawnWaits));
  status.setAttribute("data-marks", String(drawnMarks));
  if (!errors) {
    status.setAttribute("data-state", "drawn");
    status.textContent = rows.length + " rows, " + drawnBars + " bars, " + drawnWaits + " waits drawn";
  }
})();
