// The dashboard's pages: each polls its JSON endpoint every POLL_MS and redraws its table, so
// it follows the cluster without a reload. A 401 means the session ended (the token expired or
// was deleted): back to the login page.
(function () {
  "use strict";
  var POLL_MS = 2000;
  var page = document.querySelector('meta[name="page"]').content;

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
    var cell = el("span", s >= 0 ? "in " + rel : rel + " ago");
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

  // ------------------------------------------------------------ Jobs

  function jobsPage() {
    var stack = [""];            // the `after` of each page visited so far
    var next = "";
    var form = document.getElementById("filters");
    var params = new URLSearchParams(window.location.search);
    ["text", "team", "state", "size"].forEach(function (k) {
      if (params.get(k)) { form.elements[k].value = params.get(k); }
    });

    function query() {
      var q = new URLSearchParams();
      q.set("text", form.elements.text.value.trim());
      q.set("team", form.elements.team.value.trim());
      q.set("state", form.elements.state.value);
      q.set("size", form.elements.size.value);
      return q;
    }

    function load() {
      var q = query();
      q.set("after", stack[stack.length - 1]);
      return fetchJson("/api/jobs?" + q.toString()).then(function (body) {
        next = body.next;
        document.getElementById("total").textContent = "(" + body.total + ")";
        document.getElementById("page").textContent = "page " + stack.length;
        document.getElementById("next").disabled = !next;
        document.getElementById("prev").disabled = stack.length < 2;
        document.getElementById("first").disabled = stack.length < 2;
        fill(document.querySelector("#jobs tbody"), body.jobs.map(function (j) {
          var name = el("span", j.name, "job-name");
          if (j.paused) { name.appendChild(el("span", "paused", "tag")); }
          return [name, j.team, (j.schedule || "on demand") + (j.timezone ? " (" + j.timezone + ")" : ""),
                  j.paused ? "-" : when(j.next_fire_ms), when(j.last_scheduled_ms), stateCell(j.last_state),
                  j.executions_total];
        }));
        status("updated " + new Date().toLocaleTimeString());
      }).catch(function (e) { status(e.message, true); });
    }

    function restart() {
      stack = [""];
      var q = query();
      window.history.replaceState(null, "", "/jobs?" + q.toString());
      load();
    }
    form.addEventListener("change", restart);
    form.addEventListener("submit", function (e) { e.preventDefault(); restart(); });
    ["text", "team"].forEach(function (k) {
      form.elements[k].addEventListener("input", function () { clearTimeout(form.timer); form.timer = setTimeout(restart, 300); });
    });
    document.getElementById("next").addEventListener("click", function () { if (next) { stack.push(next); load(); } });
    document.getElementById("prev").addEventListener("click", function () { if (stack.length > 1) { stack.pop(); load(); } });
    document.getElementById("first").addEventListener("click", function () { stack = [""]; load(); });
    load();
    setInterval(load, POLL_MS);
  }

  // ------------------------------------------------------------ Cluster

  function clusterPage() {
    function load() {
      return fetchJson("/api/cluster").then(function (c) {
        document.getElementById("summary").textContent = "leader " + (c.leader || "none") + ", term " + c.term +
          ", commit index " + c.commit_index + ", " + c.jobs + " jobs, feature level " + c.feature_level +
          " (answered by " + c.answered_by + ")";
        fill(document.querySelector("#nodes tbody"), c.nodes.map(function (n) {
          return [n.id, el("span", n.role, "role role-" + n.role), n.term, n.commit_index, n.applied_index, n.lag,
                  n.version, n.feature_level, n.error ? n.grpc_address + " (" + n.error + ")" : n.grpc_address];
        }));
        var ul = document.getElementById("warnings");
        ul.replaceChildren.apply(ul, c.warnings.map(function (w) { return el("li", w); }));
        status("updated " + new Date().toLocaleTimeString());
      }).catch(function (e) { status(e.message, true); });
    }
    load();
    setInterval(load, POLL_MS);
  }

  if (page === "jobs") { jobsPage(); } else if (page === "cluster") { clusterPage(); }
})();
