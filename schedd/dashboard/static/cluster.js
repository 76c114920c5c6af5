// The Cluster page: /api/cluster's nodes, reloaded on the live stream and every 5 s (node status
// has no watch).
(function () {
  "use strict";
  var S = window.schedd, el = S.el, when = S.when, status = S.status, fetchJson = S.fetchJson, fill = S.fill,
      stateCell = S.stateCell;

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
    S.follow(load, {poll: 5000});      // no watch reports the nodes' status
  }

  clusterPage();
})();
