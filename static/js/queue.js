// The queue page, live: rows move to their new positions, changed cells are marked
// briefly, new workloads appear, admitted ones move to the holding list, finished ones
// leave. The server sends only what changed in this page's window (plus the queue's
// counts and the ids now in the window); the page refetches its window (a resync) on
// reconnect or when its window has a gap it cannot fill from the diffs.
(function () {
  "use strict";
  var root = document.getElementById("queue-live");
  var KQ = window.KQ;
  if (!root || !KQ) return;

  var queueId = parseInt(root.getAttribute("data-queue"), 10);
  var workloadUrl = root.getAttribute("data-workload-url");
  var partialUrl = root.getAttribute("data-partial-url");
  var announceEl = document.getElementById("queue-announce");
  // Why a row's p50 is earlier than rows ahead of it (kq.by_age_note: Workload.BY_AGE_NOTE).
  var BY_AGE_NOTE = root.getAttribute("data-by-age-note") || "";
  var WAITING = { Pending: 1, Backoff: 1 };
  var HOLDING = { Admitted: 1, Running: 1, Preempted: 1 };
  var BANDS = [["koord-prod", 9000, 9999], ["koord-mid", 7000, 7999], ["koord-batch", 5000, 5999], ["koord-free", 3000, 3999]];
  var reduceMotion = window.matchMedia && window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  var state, pendingTotal, holdingTotal, data = new Map(), socket = null;
  var resyncTimer = null, resyncing = false, held = [];
  var tally = { moved: 0, admitted: 0, added: 0, left: 0 }, announceTimer = null;

  function body(name) { return document.getElementById(name + "-rows"); }
  function template(name) { return document.getElementById(name + "-row-template"); }
  function rowOf(name, id) { return body(name).querySelector('tr[data-id="' + id + '"]'); }

  function readState(container) {
    var s = JSON.parse(container.querySelector("#queue-state").textContent);
    s.pending_rows.concat(s.holding_rows, s.finished_rows).forEach(function (r) { data.set(r.id, r); });
    return s;
  }

  function band(priority) {
    for (var i = 0; i < BANDS.length; i++) {
      if (priority >= BANDS[i][1] && priority <= BANDS[i][2]) return BANDS[i][0];
    }
    return "";
  }
  function setTime(cell, iso, mode) {
    cell.textContent = "";
    cell.appendChild(KQ.timeElement(iso, mode));
  }
  // A waiting row's ETA cell, as the server renders it (templatetags kq.eta_cell): the
  // time; else in the p90 cell aging's bound; else why there is none, in full on hover.
  function etaCell(cell, r, which) {
    var at = r["eta_" + which];
    if (at != null) {
      setTime(cell, at, "rel");
      if (which === "p50" && r.eta_by_age) {
        var a = document.createElement("small");
        a.className = "eta-by-age";
        a.title = BY_AGE_NOTE;
        a.textContent = "by age";
        cell.appendChild(document.createTextNode(" "));
        cell.appendChild(a);
      }
      return;
    }
    cell.textContent = "";
    if (which === "p90" && r.starts_by) {
      var b = document.createElement("span");
      b.className = "eta-bound";
      b.title = "Aging's bound: it starts by then at the latest, unless work joins its queue ahead of it or starts in its quota tree and ends after then";
      b.appendChild(document.createTextNode("at the latest "));
      b.appendChild(KQ.timeElement(r.starts_by, "rel"));
      cell.appendChild(b);
      return;
    }
    if (!r.eta_note) { setTime(cell, null, "rel"); return; }
    var s = document.createElement("span");
    s.className = "eta-none";
    s.title = r.eta_why || r.eta_note;
    s.textContent = r.eta_note;
    cell.appendChild(s);
  }
  function badge(phase) {
    var span = document.createElement("span");
    span.className = "phase phase-" + phase.toLowerCase();
    span.textContent = phase;
    return span;
  }

  // How each cell shows a row, and which wire fields it depends on.
  var CELLS = {
    position: [["position"], function (c, r) { c.textContent = r.position == null ? "—" : r.position; }],
    global_position: [["global_position"], function (c, r) { c.textContent = r.global_position == null ? "—" : r.global_position; }],
    name: [["name", "namespace"], function (c, r) {
      var a = c.querySelector("a");
      a.href = workloadUrl.replace(/\/0\/$/, "/" + r.id + "/");
      a.textContent = r.namespace + "/" + r.name;
    }],
    quota: [["quota"], function (c, r) { c.textContent = r.quota; }],
    priority: [["priority"], function (c, r) {
      c.textContent = r.priority;
      var b = band(r.priority);
      if (b) {
        var s = document.createElement("span");
        s.className = "band";
        s.textContent = b;
        c.appendChild(document.createTextNode(" "));
        c.appendChild(s);
      }
    }],
    queue_order_at: [["queue_order_at"], function (c, r) { setTime(c, r.queue_order_at, "age"); }],
    eta_p50: [["eta_p50", "eta_note", "eta_why", "eta_by_age"], function (c, r) { etaCell(c, r, "p50"); }],
    eta_p90: [["eta_p90", "eta_note", "eta_why", "starts_by"], function (c, r) { etaCell(c, r, "p90"); }],
    reason: [["reason", "phase"], function (c, r) {
      c.textContent = "";
      if (r.phase === "Backoff") { c.appendChild(badge("Backoff")); c.appendChild(document.createTextNode(" ")); }
      var s = document.createElement("span");
      s.className = "reason";
      s.textContent = r.reason || "";
      c.appendChild(s);
    }],
    phase: [["phase"], function (c, r) { c.textContent = ""; c.appendChild(badge(r.phase)); }],
    admitted_at: [["admitted_at"], function (c, r) { setTime(c, r.admitted_at, "rel"); }],
    started_at: [["started_at"], function (c, r) { setTime(c, r.started_at, "rel"); }],
    finished_at: [["finished_at"], function (c, r) { setTime(c, r.finished_at, "rel"); }],
  };

  function flash(el) {
    el.classList.remove("changed");
    void el.offsetWidth; // restart the animation
    el.classList.add("changed");
    setTimeout(function () { el.classList.remove("changed"); }, 2500);
  }

  function fill(tr, r, old) {
    tr.setAttribute("data-id", r.id);
    tr.setAttribute("data-position", r.position == null ? "" : r.position);
    tr.setAttribute("data-order", r.queue_order_at || "");
    tr.setAttribute("data-phase", r.phase);
    if (tr.hasAttribute("data-finished")) tr.setAttribute("data-finished", r.finished_at || "");
    tr.querySelectorAll("[data-field]").forEach(function (cell) {
      var spec = CELLS[cell.getAttribute("data-field")];
      if (!spec) return;
      var changed = !old || spec[0].some(function (f) { return old[f] !== r[f]; });
      if (!changed) return;
      spec[1](cell, r);
      if (old) flash(cell);
    });
  }

  // Insert or update a row of one list; returns true when it is new to that list.
  function upsert(list, r, atTop) {
    var tr = rowOf(list, r.id);
    var old = tr ? data.get(r.id) : null;
    var isNew = !tr;
    if (isNew) {
      tr = template(list).content.firstElementChild.cloneNode(true);
      fill(tr, r, null);
      tr.classList.add("entered");
      setTimeout(function () { tr.classList.remove("entered"); }, 2500);
      var b = body(list);
      if (atTop) b.insertBefore(tr, b.firstChild); else b.appendChild(tr);
    } else {
      if (old && old.position != null && r.position != null && old.position !== r.position) tally.moved += 1;
      fill(tr, r, old || {});
    }
    return isNew;
  }
  // Most recently finished first, whatever order a frame's changes came in.
  function sortFinished() {
    var b = body("finished");
    var rows = Array.prototype.slice.call(b.rows);
    function at(tr) { return Date.parse(tr.getAttribute("data-finished") || "") || 0; }
    var sorted = rows.slice().sort(function (x, y) { return at(y) - at(x); });
    if (sorted.some(function (tr, i) { return tr !== rows[i]; })) {
      sorted.forEach(function (tr) { b.appendChild(tr); });
    }
  }
  function drop(list, id) {
    var tr = rowOf(list, id);
    if (tr) tr.remove();
    return !!tr;
  }

  // A whole row of a waiting workload is in this page's window when it comes with the
  // window's ids (the server read the window); a stub is a waiting row outside it.
  function applyRow(r, windowed) {
    if (r.queue_id !== queueId) {
      drop("pending", r.id); drop("holding", r.id);
      return;
    }
    var full = "name" in r;
    var known = data.get(r.id);
    var merged = full ? r : Object.assign({}, known || {}, r);
    if (WAITING[r.phase]) {
      drop("holding", r.id);
      if (!full) drop("pending", r.id);
      else if (windowed || rowOf("pending", r.id)) {
        if (!known && r.position == null) tally.added += 1;
        upsert("pending", merged, false);
      }
    } else if (HOLDING[r.phase]) {
      if (drop("pending", r.id) && r.phase === "Admitted") tally.admitted += 1;
      if (full) {
        upsert("holding", merged, true);
        var held = body("holding").rows;
        while (held.length > state.holding_shown) held[held.length - 1].remove();
      }
    } else {
      if (drop("pending", r.id) | drop("holding", r.id)) tally.left += 1;
      if (full && !rowOf("finished", r.id)) {
        upsert("finished", merged, true);
        sortFinished();
        var rows = body("finished").rows;
        while (rows.length > 10) rows[rows.length - 1].remove();
      }
    }
    if (full || known) data.set(r.id, merged);
  }

  // The window's ids say which rows belong on the page: others leave, and an id we
  // have no row for is a gap only a refetch fills.
  function applyWindow(w) {
    pendingTotal = w.pending;
    holdingTotal = w.holding;
    var wanted = new Set(w.ids);
    Array.prototype.slice.call(body("pending").rows).forEach(function (tr) {
      if (!wanted.has(parseInt(tr.getAttribute("data-id"), 10))) tr.remove();
    });
    w.ids.forEach(function (id) { if (!rowOf("pending", id)) scheduleResync(); });
  }

  function key(tr) {
    var p = tr.getAttribute("data-position");
    return [p === "" ? Infinity : parseInt(p, 10), tr.getAttribute("data-order"), parseInt(tr.getAttribute("data-id"), 10)];
  }
  function compare(a, b) {
    var ka = key(a), kb = key(b);
    for (var i = 0; i < 3; i++) {
      if (ka[i] < kb[i]) return -1;
      if (ka[i] > kb[i]) return 1;
    }
    return 0;
  }

  // Put rows in admission order; rows that moved glide to their place (FLIP).
  function reorder() {
    var b = body("pending");
    var rows = Array.prototype.slice.call(b.rows);
    var sorted = rows.slice().sort(compare);
    var same = sorted.every(function (tr, i) { return tr === rows[i]; });
    if (!same) {
      var before = new Map();
      if (!reduceMotion) rows.forEach(function (tr) { before.set(tr, tr.getBoundingClientRect().top); });
      sorted.forEach(function (tr) { b.appendChild(tr); });
      if (!reduceMotion) {
        sorted.forEach(function (tr) {
          var top = before.get(tr);
          if (top === undefined) return;
          var delta = top - tr.getBoundingClientRect().top;
          if (!delta) return;
          tr.style.transition = "none";
          tr.style.transform = "translateY(" + delta + "px)";
          requestAnimationFrame(function () {
            tr.style.transition = "transform 350ms ease";
            tr.style.transform = "";
          });
        });
      }
    }
    while (b.rows.length > state.page_size) b.rows[b.rows.length - 1].remove();
    var expected = Math.max(0, Math.min(state.page_size, pendingTotal - (state.first - 1)));
    if (b.rows.length < expected) scheduleResync();
  }

  function refreshCounts() {
    root.querySelectorAll('[data-count="pending"]').forEach(function (el) { el.textContent = pendingTotal; });
    root.querySelectorAll('[data-count="holding"]').forEach(function (el) { el.textContent = holdingTotal; });
    document.getElementById("pending-empty").hidden = body("pending").rows.length > 0;
    document.getElementById("holding-empty").hidden = body("holding").rows.length > 0;
    var finishedEmpty = document.getElementById("finished-empty");
    if (finishedEmpty) finishedEmpty.hidden = body("finished").rows.length > 0;
  }

  function announce() {
    if (announceTimer || !announceEl) return;
    announceTimer = setTimeout(function () {
      announceTimer = null;
      var parts = [];
      if (tally.moved) parts.push(tally.moved + " moved");
      if (tally.admitted) parts.push(tally.admitted + " admitted");
      if (tally.added) parts.push(tally.added + " new");
      if (tally.left) parts.push(tally.left + " finished");
      tally = { moved: 0, admitted: 0, added: 0, left: 0 };
      if (parts.length) announceEl.textContent = "Queue updated: " + parts.join(", ") + ".";
    }, 5000);
  }

  // A `queues` message (an edit of this queue's settings) updates the page's header.
  function applySettings(message) {
    var header = document.getElementById("queue-settings");
    if (!header) return;
    if ((message.removed || []).indexOf(queueId) !== -1) {
      KQ.say("This queue was deleted.");
      return;
    }
    (message.queues || []).forEach(function (q) {
      if (q.id !== queueId) return;
      header.querySelectorAll("[data-setting]").forEach(function (el) {
        var key = el.getAttribute("data-setting");
        if (key in q && String(q[key]) !== el.textContent) { el.textContent = q[key]; flash(el); }
      });
      header.querySelector('[data-show="intelligent"]').hidden = q.policy !== "Intelligent";
      header.querySelector('[data-show="depth"]').hidden = !q.max_depth;
      KQ.say("The queue's settings changed.");
    });
  }

  function onMessage(message) {
    if (message.type === "queues") { applySettings(message); return; }
    if (message.type === "resync") { scheduleResync(); return; }
    if (message.type !== "workloads") return;
    if (resyncing) { held.push(message); return; }
    var win = (message.windows || []).filter(function (w) { return w.queue === queueId; })[0];
    message.changes.forEach(function (r) { applyRow(r, !!win); });
    (message.removed || []).forEach(function (id) {
      if (drop("pending", id) | drop("holding", id)) tally.left += 1;
    });
    if (win) applyWindow(win);
    reorder();
    refreshCounts();
    announce();
  }

  function scheduleResync() {
    if (resyncTimer) return;
    resyncTimer = setTimeout(function () { resyncTimer = null; resync(); }, 250);
  }

  // Refetch the window and merge it in place: changed cells are marked as for a diff.
  // Subscribing again first makes the server's next frame carry the whole window, so
  // whatever the two sides thought the other had, they agree again.
  function resync() {
    if (resyncing) { scheduleResync(); return; }
    resyncing = true;
    if (socket) socket.resubscribe();
    fetch(partialUrl, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var doc = new DOMParser().parseFromString("<div>" + html + "</div>", "text/html");
        var fresh = JSON.parse(doc.getElementById("queue-state").textContent);
        merge("pending", fresh.pending_rows, false);
        merge("holding", fresh.holding_rows, true);
        merge("finished", fresh.finished_rows, true);
        fresh.pending_rows.concat(fresh.holding_rows, fresh.finished_rows).forEach(function (r) { data.set(r.id, r); });
        state = fresh;
        pendingTotal = fresh.pending_total;
        holdingTotal = fresh.holding_total;
        var pagers = root.querySelectorAll(".pager"), newPagers = doc.querySelectorAll(".pager");
        pagers.forEach(function (p, i) { if (newPagers[i]) p.innerHTML = newPagers[i].innerHTML; });
      })
      .catch(function () { KQ.say("Could not refresh the queue; retrying on the next change."); })
      .finally(function () {
        resyncing = false;
        var pending = held;
        held = [];
        pending.forEach(onMessage);
        reorder();
        refreshCounts();
      });
  }

  function merge(list, rows, atTop) {
    var wanted = new Set(rows.map(function (r) { return r.id; }));
    Array.prototype.slice.call(body(list).rows).forEach(function (tr) {
      if (!wanted.has(parseInt(tr.getAttribute("data-id"), 10))) tr.remove();
    });
    (atTop ? rows.slice().reverse() : rows).forEach(function (r) { upsert(list, r, atTop); });
    if (atTop) {
      // keep the server's order (newest first)
      var b = body(list);
      rows.forEach(function (r) { var tr = rowOf(list, r.id); if (tr) b.appendChild(tr); });
    }
  }

  state = readState(root);
  pendingTotal = state.pending_total;
  holdingTotal = state.holding_total;
  socket = KQ.connect({
    path: "/ws/tenants/" + root.getAttribute("data-live-tenant") + "/",
    subscribe: function () {
      return { queues: [{ id: queueId, from: state.first, to: state.last }], workloads: [] };
    },
    onMessage: onMessage,
    onResync: resync,
  });
})();
