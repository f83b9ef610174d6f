// Koord-Queue live updates: one WebSocket per page, reconnecting with backoff and
// resynchronising on reconnect; relative times kept fresh. Message schema: docs/events.md.
(function () {
  "use strict";
  var KQ = (window.KQ = window.KQ || {});
  var statusEl = document.getElementById("live-status");

  function say(text) {
    if (!statusEl) return;
    statusEl.hidden = false;
    statusEl.textContent = text;
  }
  KQ.say = say;

  function human(seconds) {
    seconds = Math.abs(seconds);
    if (seconds < 60) return Math.floor(seconds) + " s";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min";
    if (seconds < 86400) {
      var h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60);
      return m ? h + " h " + m + " min" : h + " h";
    }
    var d = Math.floor(seconds / 86400), hh = Math.floor((seconds % 86400) / 3600);
    return hh ? d + " d " + hh + " h" : d + " d";
  }

  // "in 3 min" / "3 min ago" (mode "rel") or "3 min" since then (mode "age").
  KQ.relative = function (iso, mode) {
    var when = Date.parse(iso);
    if (isNaN(when)) return "—";
    var delta = (when - Date.now()) / 1000;
    if (mode === "age") return human(-delta);
    if (Math.abs(delta) < 1) return "now";
    return delta > 0 ? "in " + human(delta) : human(delta) + " ago";
  };

  KQ.timeElement = function (iso, mode) {
    if (!iso) {
      var none = document.createElement("span");
      none.className = "muted";
      none.textContent = "—";
      return none;
    }
    var t = document.createElement("time");
    t.setAttribute("datetime", iso);
    t.setAttribute("data-rel", mode || "rel");
    t.title = new Date(iso).toLocaleString();
    t.textContent = KQ.relative(iso, mode);
    return t;
  };

  KQ.refreshTimes = function (root) {
    (root || document).querySelectorAll("time[data-rel]").forEach(function (t) {
      t.textContent = KQ.relative(t.getAttribute("datetime"), t.getAttribute("data-rel"));
    });
  };
  // Every relative time on the page is refreshed at once -- on a timer, and whenever a
  // live update renders new ones (below) -- so that no row reads "in 1 min" from a
  // render 14 s ago beside a fresh "in 59 s".
  setInterval(function () { KQ.refreshTimes(); }, 5000);

  // Open a socket at options.path; on every (re)connect send options.subscribe and call
  // options.onResync (not on the first connect of a page that was just rendered).
  KQ.connect = function (options) {
    var delay = 500, socket = null, pingTimer = null, pongTimer = null, connects = 0;
    var loadedAt = Date.now();

    function stopPing() {
      clearInterval(pingTimer);
      clearTimeout(pongTimer);
    }
    function startPing() {
      stopPing();
      pingTimer = setInterval(function () {
        if (!socket || socket.readyState !== WebSocket.OPEN) return;
        socket.send(JSON.stringify({ type: "ping" }));
        clearTimeout(pongTimer);
        pongTimer = setTimeout(function () { socket.close(); }, 10000);
      }, 25000);
    }
    function subscribe() {
      var sub = typeof options.subscribe === "function" ? options.subscribe() : options.subscribe;
      if (sub && socket && socket.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify(Object.assign({ type: "subscribe" }, sub)));
      }
    }
    function open() {
      var scheme = location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(scheme + location.host + options.path);
      socket.onmessage = function (event) {
        var message;
        try { message = JSON.parse(event.data); } catch (e) { return; }
        if (message.type === "hello") {
          delay = 500;
          connects += 1;
          subscribe();
          say("Live: this page updates as the queue moves.");
          document.documentElement.setAttribute("data-live", "on");
          var fresh = connects === 1 && Date.now() - loadedAt < 2000;
          if (options.onResync && !fresh) options.onResync();
          return;
        }
        if (message.type === "pong") { clearTimeout(pongTimer); return; }
        if (message.type === "subscribed" || message.type === "error") return;
        // Too much changed at once to send it: refetch what the page shows.
        if (message.type === "resync" && options.onResync) { options.onResync(); return; }
        options.onMessage(message);
        KQ.refreshTimes();
      };
      socket.onclose = function (event) {
        stopPing();
        document.documentElement.setAttribute("data-live", "off");
        if (event.code === 4403) {
          say("Live updates are not available for this page; reload to try again.");
          return;
        }
        var wait = Math.round(delay * (0.75 + Math.random() / 2));
        say("Disconnected; reconnecting in " + Math.max(1, Math.round(wait / 1000)) + " s…");
        setTimeout(open, wait);
        delay = Math.min(delay * 2, 15000);
      };
      startPing();
    }
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState !== "visible") return;
      if (socket && socket.readyState === WebSocket.OPEN && options.onResync) options.onResync();
    });
    open();
    // drop() closes the socket as a network failure would (tests use it; so can a console).
    var handle = {
      resubscribe: subscribe,
      drop: function () { if (socket) socket.close(4000, "dropped"); },
    };
    (KQ.sockets = KQ.sockets || []).push(handle);
    return handle;
  };

  // After a form round trip, move focus to what the server said: the errors, a
  // conflict, or the what-if preview (so keyboard and screen-reader users land there).
  var landing = document.getElementById("error-summary") || document.getElementById("conflict") ||
    document.getElementById("whatif-h");
  if (landing) landing.focus();

  // A refreshed fragment may carry one sentence for screen readers ([data-announce]:
  // a workload's position or phase); it is said politely when it changes.
  function announce(el, previous, quiet) {
    var holder = el.querySelector("[data-announce]");
    var text = holder ? holder.getAttribute("data-announce") : null;
    if (!quiet && text && text !== previous) say(text);
    return text;
  }

  // Pages whose numbers come from the server (overview, workload, cluster): refetch the
  // element's partial on activity, at most every two seconds.
  document.querySelectorAll("[data-live-refresh]").forEach(function (el) {
    var timer = null, last = 0, inflight = false;
    // data-live-types: refetch only on these messages (a members list ignores workloads).
    var types = (el.getAttribute("data-live-types") || "").split(/\s+/).filter(Boolean);
    var announced = announce(el, null, true);
    function refetch() {
      if (timer) return;
      var wait = Math.max(150, 2000 - (Date.now() - last));
      timer = setTimeout(function () {
        timer = null;
        if (inflight) { refetch(); return; }
        // Never swap the fragment under someone's hands: wait until focus leaves it.
        if (el.contains(document.activeElement) && document.activeElement !== document.body) {
          el.addEventListener("focusout", function again() {
            el.removeEventListener("focusout", again);
            setTimeout(refetch, 0);
          });
          return;
        }
        inflight = true;
        last = Date.now();
        fetch(el.getAttribute("data-live-refresh"), { credentials: "same-origin" })
          .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
          .then(function (html) {
            el.innerHTML = html;
            KQ.refreshTimes();
            announced = announce(el, announced);
          })
          .catch(function () { say("Could not refresh; retrying on the next change."); })
          .finally(function () { inflight = false; });
      }, wait);
    }
    var workload = el.getAttribute("data-workload");
    KQ.connect({
      path: el.hasAttribute("data-live-all")
        ? "/ws/all/"
        : "/ws/tenants/" + el.getAttribute("data-live-tenant") + "/",
      subscribe: workload
        ? { queues: [], workloads: [parseInt(workload, 10)] }
        : { summary: true },
      onMessage: function (message) {
        if (!types.length || types.indexOf(message.type) !== -1) refetch();
      },
      onResync: refetch,
    });
  });
})();
