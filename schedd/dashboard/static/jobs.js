// The Jobs page: /api/jobs (server-side paging and search), reloaded whenever the live stream
// says a job changed (schedd.follow).
(function () {
  "use strict";
  var S = window.schedd, el = S.el, when = S.when, status = S.status, fetchJson = S.fetchJson, fill = S.fill,
      stateCell = S.stateCell;

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
          var last = stateCell(j.last_state);
          if (j.last_execution_id) {        // its run's page (run.js)
            var a = el("a");
            a.href = "/runs/" + encodeURIComponent(j.last_execution_id);
            a.appendChild(last);
            last = a;
          }
          return [name, j.team, (j.schedule || "on demand") + (j.timezone ? " (" + j.timezone + ")" : ""),
                  j.paused ? "-" : when(j.next_fire_ms), when(j.last_scheduled_ms), last, j.executions_total];
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
    S.follow(load);
  }

  jobsPage();
})();
