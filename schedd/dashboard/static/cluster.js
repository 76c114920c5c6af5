// The Cluster page: the nodes (digests on demand), leader changes, workers, quotas, SLA misses and,
// for a principal holding `acl`, the audit trail (filtered and paged on the server); reloaded on the
// live stream and every 5 s (node status has no watch).
(function () {
  "use strict";
  var S = window.schedd, el = S.el, when = S.when, status = S.status, fetchJson = S.fetchJson, fill = S.fill,
      stateCell = S.stateCell;

  function link(href, text) { var a = el("a", text); a.href = href; return a; }
  function short(hash, index) { return hash ? hash.slice(0, 12) + "@" + index : "-"; }
  // An empty table says so in words, not with a bare header.
  function fillOr(tbody, rows, empty) { fill(tbody, rows.length ? rows : [[el("span", empty, "hint")]]); }

  // ------------------------------------------------------------ nodes and leaders

  function loadNodes() {
    var digest = document.getElementById("with-digest").checked;
    return fetchJson("/api/cluster" + (digest ? "?digest=1" : "")).then(function (c) {
      document.getElementById("summary").textContent = "leader " + (c.leader || "none") + ", term " + c.term +
        ", commit index " + c.commit_index + ", " + c.jobs + " jobs, feature level " + c.feature_level +
        " (answered by " + c.answered_by + ")";
      fill(document.querySelector("#nodes tbody"), c.nodes.map(function (n) {
        var history = n.history_digest ? short(n.history_digest, n.history_index) + " " + n.history_rows + " runs" +
                                         (n.history_gap ? " (copying " + n.history_gap + ")" : "") : "-";
        return [n.id, el("span", n.role, "role role-" + n.role), n.term, n.commit_index, n.applied_index, n.lag,
                n.version, n.feature_level, n.error ? n.grpc_address + " (" + n.error + ")" : n.grpc_address,
                el("code", short(n.state_digest, n.digest_index)), el("code", history)];
      }));
      var section = document.getElementById("shards-section");
      section.hidden = !c.shards.length;
      document.getElementById("shards-total").textContent = c.shards.length ? "(" + c.shards.length + ")" : "";
      fill(document.querySelector("#shards tbody"), c.shards.map(function (s) {
        return [s.shard, s.leader ? el("span", s.leader, "role role-leader") : el("span", "no leader", "tag"),
                s.replicas.join(", "), s.term, s.jobs, s.executions, s.lag];
      }));
      var ul = document.getElementById("warnings");
      ul.replaceChildren.apply(ul, c.warnings.map(function (w) { return el("li", w); }));
      fill(document.querySelector("#leaders tbody"), c.leader_changes.map(function (l) {
        return [l.term, l.node, when(l.since_ms), l.until_ms ? when(l.until_ms) : el("span", "leads now", "tag")];
      }));
    });
  }

  // ------------------------------------------------------------ workers, quotas, SLA misses

  function loadWorkers() {
    return fetchJson("/api/cluster/workers").then(function (w) {
      document.getElementById("workers-total").textContent = "(" + w.workers.length + ")";
      fillOr(document.querySelector("#workers tbody"), w.workers.map(function (x) {
        var running = el("span", x.running.length + " / " + x.slots);
        if (x.running.length) {
          running = el("span");
          running.appendChild(el("span", x.running.length + " / " + x.slots + ": "));
          x.running.forEach(function (id, i) {
            if (i) { running.appendChild(document.createTextNode(", ")); }
            running.appendChild(link("/runs/" + encodeURIComponent(id), id));
          });
        }
        var labels = Object.keys(x.labels).map(function (k) { return k + "=" + x.labels[k]; }).join(", ");
        return [el("span", x.name, "worker-name"), x.pool || "-", labels || "-", x.handlers.join(", ") || "-", x.slots,
                running, x.draining ? el("span", "draining", "tag") : "ready",
                when(Math.min(x.last_heartbeat_ms, Date.now()))];   // the leader's clock may run a little ahead
      }), "No workers connected.");
      fillOr(document.querySelector("#quotas tbody"), w.quotas.map(function (q) {
        return [q.key, q.limit || "none", q.running, q.limit ? Math.round(q.use * 100) + " %" : "-"];
      }), "No quotas set.");
    });
  }

  function loadSla() {
    return fetchJson("/api/cluster/sla").then(function (s) {
      document.getElementById("sla-scope").textContent = "(among the newest " + s.runs_looked_at + " runs)";
      fillOr(document.querySelector("#sla tbody"), s.misses.map(function (m) {
        var name = m.kind === "dag" ? link("/dags/" + encodeURIComponent(m.name), m.name + " (DAG)")
                                    : link("/jobs/" + encodeURIComponent(m.name), m.name);
        var run = m.kind === "dag" ? link("/dags/" + encodeURIComponent(m.name) + "?run=" + encodeURIComponent(m.id), m.id)
                                   : link("/runs/" + encodeURIComponent(m.id), m.id);
        return [when(m.time_ms), name, run, stateCell(m.state), el("span", m.message)];
      }), "No SLA missed.");
    });
  }

  // ------------------------------------------------------------ audit

  function audit() {
    var form = document.getElementById("audit-filters");
    if (!form) { return null; }
    var pages = [""], next = "";
    function load() {
      var q = new URLSearchParams();
      ["principal", "action", "outcome", "since", "until"].forEach(function (k) { q.set(k, form.elements[k].value.trim()); });
      q.set("before", pages[pages.length - 1]);
      return fetchJson("/api/cluster/audit?" + q.toString()).then(function (a) {
        next = a.next;
        document.getElementById("a-next").disabled = !next;
        document.getElementById("a-first").disabled = pages.length < 2;
        document.getElementById("a-page").textContent = "page " + pages.length + " (answered by " + a.answered_by + ")";
        fill(document.querySelector("#audit tbody"), a.records.map(function (r) {
          var detail = el("span", r.detail.length > 80 ? r.detail.slice(0, 79) + "…" : r.detail);
          detail.title = r.detail;
          return [r.seq, when(r.time_ms), el("span", r.principal, "principal"), r.source, r.action, r.target,
                  el("span", r.outcome, "outcome outcome-" + r.outcome), detail];
        }));
      });
    }
    function restart() { pages = [""]; load().catch(function (e) { status(e.message, true); }); }
    form.addEventListener("change", restart);
    form.addEventListener("submit", function (e) { e.preventDefault(); restart(); });
    ["principal", "action"].forEach(function (k) {
      form.elements[k].addEventListener("input", function () { clearTimeout(form.timer); form.timer = setTimeout(restart, 300); });
    });
    document.getElementById("a-next").addEventListener("click", function () { if (next) { pages.push(next); restart2(); } });
    document.getElementById("a-first").addEventListener("click", function () { pages = [""]; restart2(); });
    function restart2() { load().catch(function (e) { status(e.message, true); }); }
    return load;
  }

  function clusterPage() {
    var loadAudit = audit();
    function load() {
      var all = [loadNodes(), loadWorkers(), loadSla()];
      if (loadAudit) { all.push(loadAudit()); }
      return Promise.all(all).then(function () { status("updated " + new Date().toLocaleTimeString()); })
        .catch(function (e) { status(e.message, true); });
    }
    document.getElementById("with-digest").addEventListener("change", function () { loadNodes(); });
    S.follow(load, {poll: 5000});      // no watch reports the nodes' status
  }

  clusterPage();
})();
