// What every dashboard page script shares, as window.schedd: element helpers, relative times,
// the status line, and fetchJson (a 401 means the session ended: the token expired or was
// deleted, so back to the login page; any other refusal is thrown with the API's message).
(function () {
  "use strict";
  var POLL_MS = 2000;

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

  function fill(tbody, rows) {
    var frag = document.createDocumentFragment();
    rows.forEach(function (cells) {
      var tr = el("tr");
      cells.forEach(function (c) {
        var td = el("td");
        if (c instanceof Node) { td.appendChild(c); } else { td.textContent = c === undefined ? "" : String(c); }
        tr.appendChild(td);
      });
      frag.appendChild(tr);
    });
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

  // Keep a page current: `load` (which returns a promise) now, then again whenever the cluster
  // may have changed. Every page calls this instead of timing its own refreshes.
  function follow(load) {
    load();
    setInterval(load, POLL_MS);
  }

  window.schedd = {POLL_MS: POLL_MS, follow: follow, el: el, when: when, status: status, fetchJson: fetchJson, post: post,
                   fill: fill, stateCell: stateCell};
})();
