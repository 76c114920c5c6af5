// What every dashboard page script shares, as window.schedd: element helpers, relative times,
// the status line, and fetchJson (a 401 means the session ended: the token expired or was
// deleted, so back to the login page; any other refusal is thrown with the API's message).
(function () {
  "use strict";
  var FALLBACK_MS = 30000;      // a reload however quiet the stream (a change it cannot see, a lost event)
  var RETRY_MS = 30000;         // a stream refused (too many open): try again after this

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }

  function when(ms) {
    if (!ms) { return "-"; }
    var d = new Date(ms), now = Date.now(), s = Math.round((ms - now) / 1000), a = Math.abs(s), rel;
    if (a < 60) { rel = a + " s"; } else if (a < 3600) { rel = Math.round(a / 60) + " min"; }
    else if (a < 86400) { rel = Math.round(a / 3600) + " h"; } else { rel = Math.round(a / 86400) + " d"; }
    var cell = el("span", s > 0 ? "in " + rel : rel + " ago");
    cell.title = d.toISOString();
    return cell;
  }

  function status(text, bad) {
    var s = document.getElementById("status");
    s.textContent = text;
    s.className = bad ? "status error" : "status";
  }

  function fetchJson(url) {
    return fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}}).then(function (r) {
      if (r.status === 401) {
        window.location.assign("/login?next=" + encodeURIComponent(window.location.pathname + window.location.search));
        throw new Error("logged out");
      }
      return r.json().then(function (body) {
        if (!r.ok) { throw new Error(body.error || ("HTTP " + r.status)); }
        return body;
      });
    });
  }

  function row(cells) {
    var tr = el("tr");
    cells.forEach(function (c) {
      var td = el("td");
      if (c instanceof Node) { td.appendChild(c); } else { td.textContent = c === undefined ? "" : String(c); }
      tr.appendChild(td);
    });
    return tr;
  }

  function fill(tbody, rows) {
    var frag = document.createDocumentFragment();
    rows.forEach(function (cells) { frag.appendChild(row(cells)); });
    tbody.replaceChildren(frag);
  }

  function stateCell(state) {
    return el("span", state || "-", "state state-" + (state || "none").toLowerCase());
  }

  function post(url, body) {
    var csrf = document.querySelector('meta[name="csrf"]').content;
    return fetch(url, {method: "POST", credentials: "same-origin",
                       headers: {"Content-Type": "application/json", "Accept": "application/json", "X-CSRF-Token": csrf},
                       body: JSON.stringify(body || {})}).then(function (r) {
      if (r.status === 401) { window.location.assign("/login"); throw new Error("logged out"); }
      return r.json().then(function (b) {
        if (!r.ok) { var e = new Error(b.error || ("HTTP " + r.status)); e.status = r.status; e.code = b.code; throw e; }
        return b;
      }, function () { var e = new Error("HTTP " + r.status); e.status = r.status; throw e; });
    });
  }

  // Keep a page current: `load` (which returns a promise) now, then whenever the cluster may
  // have changed. The node tells: one EventSource on /api/events (the API's watch, with this
  // session's token, shared by the session's pages on the node) sends `ready` when it
  // (re)connects and `changed` (at most one per half second) with the rows that changed
  // ({rows, added, removed}: the page's own row JSON, the keys removed), or {reload} when the page
  // fell behind. `opts.patch(change)` applies a change to what the page shows and returns true,
  // or false when the page must load again (a row it shows was removed, a new one falls on it);
  // a page without `patch` loads on every `changed`. `opts.listing()` (the Jobs page) names the
  // listing the page shows, as its own query does, so the node's watch follows just that page;
  // `follow` returns {reopen}, for when the page shows another listing (filters, paging). `load` runs on `ready`, on a refused patch,
  // and every 30 s as a fallback; a change heard while a load is under way is patched after it
  // (its rows may be newer than the load's). `opts.watch` ("jobs", "runs") and `opts.job` choose
  // what the stream follows; `opts.poll` (ms) adds a poll for what no watch reports (the cluster
  // page's node status). Every page calls this instead of timing its own refreshes; `stats`
  // counts its loads and patches (what the tests and the bench read).
  var stats = {loads: 0, patches: 0};

  function follow(load, opts) {
    opts = opts || {};
    var source = null, busy = false, again = false, held = [];
    function run() {                  // one load at a time; a change heard meanwhile loads once more
      if (busy) { again = true; return; }
      busy = true;
      stats.loads += 1;
      Promise.resolve(load()).catch(function () {}).then(function () {
        busy = false;
        var changes = held;
        held = [];
        if (again) { again = false; run(); return; }
        changes.forEach(apply);
      });
    }
    function apply(change) {
      if (busy) { held.push(change); return; }
      if (change.reload || !opts.patch || !opts.patch(change)) { run(); return; }
      stats.patches += 1;
    }
    function changed(e) {
      var change;
      try { change = JSON.parse(e.data); } catch (err) { change = {reload: 1}; }
      if (typeof change !== "object" || change === null) { change = {reload: 1}; }
      change.rows = change.rows || [];
      change.added = change.added || [];
      change.removed = change.removed || [];
      apply(change);
    }
    function open() {
      var q = new URLSearchParams(opts.listing ? opts.listing() : {});
      q.set("watch", opts.watch || "jobs");
      if (opts.job) { q.set("job", opts.job); }
      source = new EventSource("/api/events?" + q.toString());
      source.addEventListener("changed", changed);
      source.addEventListener("ready", function () { held = []; run(); });
      source.addEventListener("end", function () { source.close(); run(); retry(); });
      source.onerror = function () {
        if (source.readyState === EventSource.CLOSED) {      // refused (401, 429, ...): not retried by itself
          run();
          retry();
        }
      };
    }
    var retrying = null;
    function retry() { clearTimeout(retrying); retrying = setTimeout(open, RETRY_MS); }
    function reopen() {                 // another listing: a stream for it (its `ready` loads the page)
      clearTimeout(retrying);
      if (source) { source.close(); }
      held = [];
      open();
    }
    run();
    open();
    setInterval(run, opts.poll || FALLBACK_MS);
    window.addEventListener("pagehide", function () { if (source) { source.close(); } });
    return {reopen: reopen};
  }

  window.schedd = {follow: follow, el: el, when: when, status: status, fetchJson: fetchJson, post: post,
                   fill: fill, row: row, stateCell: stateCell, stats: stats};
})();
