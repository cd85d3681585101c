// The status page's live updates (docs/status-page.md). The first paint is
// the server's HTML; this only keeps it current: on any /v1/events event it
// fetches the server-rendered <main> (?fragment=main) and swaps it in, at
// most one fetch at a time and coalesced over refreshDelay.
(function () {
  "use strict";
  var refreshDelay = 250;      // ms: events within this window make one fetch
  var safetyEvery = 15000;     // ms: refetch anyway (a crashed replica sends no event)
  var retryMax = 30000;        // ms: longest wait before reopening a failed stream
  var names = ["run", "replica", "lease", "lock", "audit", "resync", "reconnect"];
  var live = document.getElementById("live");
  var timer = null, inflight = false, again = false, es = null, retry = 1000;
  var base = { now: 0, at: 0 }; // database now of the snapshot, and when it was swapped in

  function setLive(text, cls) {
    live.textContent = text;
    live.className = "live " + cls;
  }

  function note(main) {
    base.now = Number(main.getAttribute("data-now")) || Date.now();
    base.at = Date.now();
    // Behind a load balancer the fragment may come from another replica.
    var by = document.getElementById("served-by"), id = main.getAttribute("data-served-by");
    if (by && id) by.textContent = id;
  }

  function fmt(d) {
    var s = Math.floor(d / 1000);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
    if (s < 172800) return Math.floor(s / 3600) + "h" + Math.floor(s / 60) % 60 + "m";
    return Math.floor(s / 86400) + "d" + Math.floor(s / 3600) % 24 + "h";
  }

  // tick advances relative times from the snapshot's database time, so a
  // skewed browser clock does not matter.
  function tick() {
    var now = base.now + (Date.now() - base.at);
    var els = document.querySelectorAll("time[data-rel]");
    for (var i = 0; i < els.length; i++) {
      var t = Date.parse(els[i].getAttribute("datetime"));
      if (isNaN(t)) continue;
      var d = now - t;
      els[i].textContent = d >= 1000 ? fmt(d) + " ago" : d <= -1000 ? "in " + fmt(-d) : "now";
    }
    var run = document.querySelectorAll("[data-since]");
    for (var j = 0; j < run.length; j++) {
      run[j].textContent = fmt(Math.max(0, now - Number(run[j].getAttribute("data-since"))));
    }
  }

  function seqs(root) {
    var out = {}, rows = root.querySelectorAll("tr[data-run]");
    for (var i = 0; i < rows.length; i++) out[rows[i].getAttribute("data-run")] = true;
    return out;
  }

  function load() {
    timer = null;
    inflight = true;
    // Relative URLs: the page works behind a proxy that serves it under a
    // path prefix.
    fetch("?fragment=main", { cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (r) {
        return r.text().then(function (body) {
          if (r.ok) return body;
          // Keep the last good content; say why it is stale.
          var tpl = document.createElement("template");
          tpl.innerHTML = body;
          var why = tpl.content.querySelector("#error p");
          throw new Error("HTTP " + r.status + (why ? ": " + why.textContent : ""));
        });
      })
      .then(function (body) {
        var old = document.getElementById("main");
        var tpl = document.createElement("template");
        tpl.innerHTML = body;
        var next = tpl.content.querySelector("main");
        if (!old || !next) throw new Error("no main element");
        var seen = seqs(old), rows = next.querySelectorAll("tr[data-run]");
        for (var i = 0; i < rows.length; i++) {
          if (!seen[rows[i].getAttribute("data-run")]) rows[i].classList.add("new");
        }
        old.replaceWith(next);
        note(next);
        tick();
        if (es && es.readyState === 1) setLive("live", "on");
      })
      .catch(function (e) {
        setLive("stale: " + e.message, "off");
      })
      .then(function () {
        inflight = false;
        if (again) { again = false; schedule(); }
      });
  }

  function schedule() {
    if (inflight) { again = true; return; }
    if (timer === null) timer = setTimeout(load, refreshDelay);
  }

  function connect() {
    if (!window.EventSource) { setLive("no live updates in this browser", "off"); return; }
    es = new EventSource("v1/events");
    es.onopen = function () {
      retry = 1000;
      setLive("live", "on");
      schedule(); // what happened between the page's snapshot and now
    };
    es.onerror = function () {
      if (es.readyState === 2) { // closed for good (an error status): reopen later
        setLive("disconnected; retrying", "off");
        es.close();
        setTimeout(connect, retry);
        retry = Math.min(retry * 2, retryMax);
      } else {
        setLive("reconnecting", "off"); // EventSource reconnects by itself
      }
    };
    for (var i = 0; i < names.length; i++) {
      es.addEventListener(names[i], function (ev) {
        // reconnect: the replica is draining and closes the stream next;
        // EventSource reconnects (through a load balancer, to another one).
        if (ev.type === "reconnect") setLive("reconnecting", "off");
        schedule();
      });
    }
  }

  note(document.getElementById("main"));
  setLive("connecting", "off");
  setInterval(tick, 1000);
  setInterval(function () { if (!document.hidden) schedule(); }, safetyEvery);
  connect();
})();
