// Live updates of a tenant page over the WebSocket: change cells in place, refetch the
// lists when rows arrive or leave, reconnect with backoff and resynchronise on reconnect.
(function () {
  "use strict";
  var root = document.querySelector("[data-live-tenant]");
  if (!root) return;
  var tenant = root.getAttribute("data-live-tenant");
  var status = document.getElementById("live-status");
  var delay = 500, refetchTimer = null, socket = null;

  function say(text) { if (status) status.textContent = text; }

  function refetch() {
    if (refetchTimer) return;
    refetchTimer = setTimeout(function () {
      refetchTimer = null;
      fetch(root.getAttribute("data-partial-url"), { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) { root.innerHTML = html; })
        .catch(function () { say("Could not refresh the lists; retrying on the next change."); });
    }, 150);
  }

  function mark(row) {
    row.classList.remove("changed");
    void row.offsetWidth; // restart the highlight
    row.classList.add("changed");
  }

  function apply(change) {
    var rows = root.querySelectorAll('tr[data-workload="' + change.id + '"]');
    if (!rows.length) { refetch(); return; }
    rows.forEach(function (row) {
      var list = row.closest("table").getAttribute("data-list");
      var waiting = change.phase === "Pending" || change.phase === "Backoff";
      var holding = change.phase === "Admitted" || change.phase === "Running" || change.phase === "Preempted";
      if ((list === "pending" && !waiting) || (list === "holding" && !holding) || list === "finished") { refetch(); return; }
      var phase = row.querySelector('[data-field="phase"]');
      if (phase) phase.innerHTML = '<span class="phase phase-' + change.phase.toLowerCase() + '"></span>';
      if (phase) phase.firstChild.textContent = change.phase;
      var pos = row.querySelector('[data-field="position"]');
      if (pos) pos.textContent = change.position == null ? "—" : String(change.position);
      var reason = row.querySelector('[data-field="reason"]');
      if (reason) reason.textContent = change.reason || "";
      mark(row);
    });
  }

  function connect() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/tenants/" + tenant + "/");
    socket.onopen = function () { delay = 500; say("Live: updates appear as the queue moves."); refetch(); };
    socket.onmessage = function (event) {
      var message = JSON.parse(event.data);
      if (message.type === "workloads") {
        message.changes.forEach(apply);
        if (message.removed && message.removed.length) refetch();
      }
    };
    socket.onclose = function (event) {
      if (event.code === 4403) { say("Live updates are not available for this tenant."); return; }
      say("Disconnected; reconnecting…");
      setTimeout(connect, delay);
      delay = Math.min(delay * 2, 15000);
    };
  }
  connect();
})();
