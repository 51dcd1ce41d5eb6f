// The KV-event scrubber: draws one step of a recorded trace, vLLM's block pool beside SGLang's radix tree,
// into the figure element `root`, and wires the slider, the buttons and play/pause. Embedded inline in
// each figure by servelab/book/kv_event_figure.py (nothing is fetched); the trace and every visible word
// come from the JSON block inside `root`. The drawn elements carry data-state, so a test can count them.
function servelabKvFigure(root) {
  "use strict";
  var NS = "http://www.w3.org/2000/svg";
  var data = JSON.parse(root.querySelector("script.slkv-data").textContent);
  var steps = data.steps, L = data.labels;
  var CELL_W = 46, CELL_H = 34, GAP_X = 8, GAP_Y = 18, PAD = 4;  // block pool, in SVG units (px at 1:1)
  var NODE_W = 100, NODE_H = 30, EDGE = 14, ROW = 38;  // radix tree, drawn left to right
  function guess(text) {  // the width of `text` at 11 px where the browser cannot measure it (a hidden output)
    return text.split("").reduce(function (w, c) { return w + (c > "\u2e80" ? 11 : 6.5); }, 0);
  }
  var ROOT_W = 14 + guess(L.root);
  var arrowId = root.id + "-arrow";

  function part(role) { return root.querySelector('[data-role="' + role + '"]'); }
  function fill(template, values) {
    return template.replace(/\{(\w+)\}/g, function (m, k) { return k in values ? String(values[k]) : m; });
  }
  function el(tag, attrs, parent, text) {
    var e = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function clip(text, width) {  // shorten a drawn text until it fits `width`, ending it with an ellipsis
    var full = text.textContent, n = full.length;
    function wide() { return (text.getComputedTextLength() || guess(text.textContent)) > width; }
    while (n > 1 && wide()) text.textContent = full.slice(0, --n) + "\u2026";
  }
  function size(svg, w, h) {
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    svg.setAttribute("width", w);
    svg.setAttribute("height", h);
  }
  function clear(svg) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var marker = el("marker", {id: arrowId, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 6,
                               markerHeight: 6, orient: "auto-start-reverse"}, el("defs", {}, svg));
    el("path", {d: "M0,0 L10,5 L0,10 z", "class": "slkv-arrowhead"}, marker);
  }
  // Hovering an item outlines it and every item above it (its prefix): parent blocks, ancestor nodes.
  function hoverChain(svg, items) {
    Object.keys(items).forEach(function (key) {
      var g = items[key].g;
      g.addEventListener("mouseenter", function () {
        for (var k = key; k !== undefined && k !== null && items[k]; k = items[k].up) {
          items[k].g.classList.add("slkv-hl");
          if (items[k].link) items[k].link.classList.add("slkv-hl");
        }
      });
      g.addEventListener("mouseleave", function () {
        svg.querySelectorAll(".slkv-hl").forEach(function (e) { e.classList.remove("slkv-hl"); });
      });
    });
  }

  // --- vLLM: the pool of blocks, in block-id order; an arrow from each hashed block to its parent block.
  var blockIds = [], maxTokens = 1;
  steps.forEach(function (s) {
    s.vllm.blocks.forEach(function (b) {
      if (blockIds.indexOf(b.id) < 0) blockIds.push(b.id);
      maxTokens = Math.max(maxTokens, b.tokens);
    });
  });
  blockIds.sort(function (a, b) { return a - b; });
  var n = Math.max(1, blockIds.length), cols = n <= 36 ? Math.ceil(n / Math.ceil(n / 6)) : Math.ceil(Math.sqrt(n));
  var slot = {};
  blockIds.forEach(function (id, i) {
    slot[id] = {x: PAD + (i % cols) * (CELL_W + GAP_X), y: GAP_Y + Math.floor(i / cols) * (CELL_H + GAP_Y)};
  });
  var poolW = 2 * PAD + cols * CELL_W + (cols - 1) * GAP_X;
  var poolH = GAP_Y + Math.ceil(blockIds.length / cols) * (CELL_H + GAP_Y) - GAP_Y + PAD;

  function chainPath(a, b) {  // from block slot a (child) to block slot b (parent)
    if (a.y === b.y) {  // same row: an arch through the gap above the row
      var x0 = a.x + 10, x1 = b.x + CELL_W - 10, lift = Math.min(GAP_Y - 3, 6 + Math.abs(x1 - x0) / 12);
      return "M" + x0 + "," + a.y + " C" + x0 + "," + (a.y - lift) + " " + x1 + "," + (b.y - lift) + " " + x1 + "," + b.y;
    }
    var up = b.y < a.y, ax = a.x + CELL_W / 2, bx = b.x + CELL_W / 2;
    var ay = up ? a.y : a.y + CELL_H, by = up ? b.y + CELL_H : b.y, bend = (by - ay) / 2;
    return "M" + ax + "," + ay + " C" + ax + "," + (ay + bend) + " " + bx + "," + (by - bend) + " " + bx + "," + by;
  }

  function drawPool(svg, blocks) {
    clear(svg);
    size(svg, poolW, panelH);
    var byHash = {}, items = {};
    blocks.forEach(function (b) { if (b.hash) byHash[b.hash] = b; });
    var cells = el("g", {}, svg), links = el("g", {}, svg);
    blocks.forEach(function (b) {
      var p = slot[b.id], key = "b" + b.id, parent = b.parent && byHash[b.parent];
      var g = el("g", {"class": "slkv-block slkv-" + b.state, "data-state": b.state, "data-id": b.id}, cells);
      el("rect", {x: p.x, y: p.y, width: CELL_W, height: CELL_H, rx: 3}, g);
      el("text", {x: p.x + 3, y: p.y + 9, "class": "slkv-id"}, g, "#" + b.id);
      if (b.hash) el("text", {x: p.x + CELL_W / 2, y: p.y + 24, "class": "slkv-hash"}, g, b.hash.slice(0, 6));
      else if (b.state !== "free") {  // a partly filled block, not hashed (yet): how full it is
        el("text", {x: p.x + CELL_W / 2, y: p.y + 24, "class": "slkv-fill"}, g, b.tokens + "/" + maxTokens);
      }
      var tip = L.block + " " + b.id + " \u00b7 " + L[b.state] + " \u00b7 " + b.tokens + " " + L.tokens;
      if (b.hash) tip += "\n" + L.hash + " " + b.hash + (b.parent ? "\n" + L.parent + " " + b.parent : "");
      el("title", {}, g, tip);
      items[key] = {g: g, up: parent ? "b" + parent.id : null};
      if (parent && slot[parent.id]) {
        items[key].link = el("path", {d: chainPath(p, slot[parent.id]), "class": "slkv-chain",
                                      "marker-end": "url(#" + arrowId + ")"}, links);
      }
    });
    hoverChain(svg, items);
  }

  // --- SGLang: the radix tree, root at the left; a leaf per row, a parent level with the middle of its children.
  function layout(nodes) {
    var kids = {}, byId = {}, rootId = "root", pos = {}, row = 0, depth = 0;
    nodes.forEach(function (n) { byId[n.id] = n; kids[n.id] = []; });
    var tops = nodes.filter(function (n) { return n.parent === null || !(n.parent in byId); });
    if (tops.length === 1 && tops[0].parent === null && tops[0].tokens === 0) rootId = tops[0].id;
    kids[rootId] = kids[rootId] || [];
    nodes.forEach(function (n) {
      if (n.id === rootId) return;
      kids[n.parent !== null && n.parent in byId ? n.parent : rootId].push(n.id);
    });
    function place(id, d) {
      depth = Math.max(depth, d);
      var ys = kids[id].sort(function (a, b) { return a - b; }).map(function (k) { return place(k, d + 1); });
      var y = ys.length ? (ys[0] + ys[ys.length - 1]) / 2 : row++;
      pos[id] = {d: d, y: y};
      return y;
    }
    place(rootId, 0);
    return {pos: pos, rootId: rootId, byId: byId, rows: Math.max(row, 1), depth: depth};
  }
  var layouts = steps.map(function (s) { return layout(s.sglang.nodes); });
  var treeW = ROOT_W + 2 * PAD + Math.max.apply(null, layouts.map(function (t) { return t.depth; })) * (EDGE + NODE_W);
  var treeH = 2 * PAD + Math.max.apply(null, layouts.map(function (t) { return t.rows; })) * ROW - (ROW - NODE_H);

  var panelH = Math.max(poolH, treeH);  // both panels equally tall, so their event lists line up
  function drawTree(svg, t) {
    clear(svg);
    size(svg, treeW, panelH);
    var items = {}, edges = el("g", {}, svg), boxes = el("g", {}, svg);
    function box(id) {
      var p = t.pos[id], x = p.d === 0 ? PAD : PAD + ROOT_W + EDGE + (p.d - 1) * (NODE_W + EDGE);
      return {x: x, y: PAD + p.y * ROW, w: p.d === 0 ? ROOT_W : NODE_W};
    }
    Object.keys(t.pos).forEach(function (key) {
      var n = t.byId[key], b = box(key), g;
      if (key === String(t.rootId)) {
        g = el("g", {"class": "slkv-node slkv-root", "data-state": "root"}, boxes);
        el("rect", {x: b.x, y: b.y, width: b.w, height: NODE_H, rx: 4}, g);
        el("text", {x: b.x + b.w / 2, y: b.y + NODE_H / 2 + 4, "class": "slkv-label"}, g, L.root);
        items[key] = {g: g, up: null};
        return;
      }
      var up = n.parent !== null && n.parent in t.byId ? String(n.parent) : String(t.rootId), a = box(up);
      var x0 = a.x + a.w, y0 = a.y + NODE_H / 2, y1 = b.y + NODE_H / 2, mid = x0 + EDGE / 2;
      var link = el("path", {d: "M" + x0 + "," + y0 + " C" + mid + "," + y0 + " " + mid + "," + y1 + " " + b.x + "," + y1,
                             "class": "slkv-edge slkv-" + n.state}, edges);
      g = el("g", {"class": "slkv-node slkv-" + n.state, "data-state": n.state, "data-id": n.id}, boxes);
      el("rect", {x: b.x, y: b.y, width: b.w, height: NODE_H, rx: 4}, g);
      clip(el("text", {x: b.x + 5, y: b.y + 12, "class": "slkv-label slkv-left"}, g, n.label), NODE_W - 8);
      el("text", {x: b.x + 5, y: b.y + 25, "class": "slkv-tokens slkv-left"}, g, n.tokens + " " + L.tokens);
      el("title", {}, g, n.label + "\n" + n.tokens + " " + L.tokens + " \u00b7 " + L[n.state]);
      items[key] = {g: g, up: up, link: link};
    });
    hoverChain(svg, items);
  }

  function drawEvents(list, events) {
    list.textContent = "";
    if (!events.length) {
      var none = document.createElement("li");
      none.className = "slkv-none";
      none.textContent = L.no_events;
      list.appendChild(none);
    }
    events.forEach(function (text) {
      var li = document.createElement("li");
      li.className = "slkv-event slkv-" + text.split(" ")[0];
      li.textContent = text;
      list.appendChild(li);
    });
  }

  function summary(target, items, states) {
    var counts = {};
    items.forEach(function (i) { counts[i.state] = (counts[i.state] || 0) + 1; });
    target.textContent = states.map(function (s) { return L[s] + ": " + (counts[s] || 0); }).join(" \u00b7 ");
  }

  function caption(s) {
    var phrase = {start: L.phase_start, admitted: L.phase_admitted, finished: L.phase_finished}[s.phase];
    return phrase && (s.phase === "start" || s.request !== null) ? fill(phrase, {request: s.request}) : s.caption;
  }

  var slider = part("slider"), play = part("play"), timer = null, current = 0;
  function show(k) {
    current = Math.max(0, Math.min(steps.length - 1, k));
    var s = steps[current];
    slider.value = current;
    part("counter").textContent = fill(L.step_of, {step: current + 1, steps: steps.length});
    part("caption").textContent = caption(s);
    drawPool(part("vllm-svg"), s.vllm.blocks);
    drawTree(part("sglang-svg"), layouts[current]);
    drawEvents(part("vllm-events"), s.vllm.events);
    drawEvents(part("sglang-events"), s.sglang.events);
    summary(part("vllm-summary"), s.vllm.blocks, ["used", "cached", "free"]);
    summary(part("sglang-summary"), s.sglang.nodes.filter(function (n) { return n.id !== layouts[current].rootId; }),
            ["locked", "cached", "evicted"]);
    part("prev").disabled = current === 0;
    part("next").disabled = current === steps.length - 1;
    root.setAttribute("data-step", current);
  }
  function stop() {
    if (timer !== null) clearInterval(timer);
    timer = null;
    play.textContent = "\u25b6 " + L.play;
  }
  function tick() {
    if (current >= steps.length - 1) stop(); else show(current + 1);
  }
  slider.max = steps.length - 1;
  // side by side, each as wide as its drawing needs (one above the other where the page is narrow)
  part("vllm-svg").parentNode.style.flexGrow = poolW;
  part("sglang-svg").parentNode.style.flexGrow = treeW;
  slider.addEventListener("input", function () { stop(); show(Number(slider.value)); });
  part("prev").addEventListener("click", function () { stop(); show(current - 1); });
  part("next").addEventListener("click", function () { stop(); show(current + 1); });
  play.addEventListener("click", function () {
    if (timer !== null) { stop(); return; }
    if (current >= steps.length - 1) show(0);
    play.textContent = "\u275a\u275a " + L.pause;
    timer = setInterval(tick, 1100);
  });
  root.setAttribute("data-frames", steps.length);
  root.querySelectorAll("[data-role=nojs]").forEach(function (e) { e.hidden = true; });
  root.querySelectorAll("[data-role=controls] button, [data-role=slider]").forEach(function (e) { e.disabled = false; });
  show(0);
}
