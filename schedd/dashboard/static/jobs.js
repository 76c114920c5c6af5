// The Jobs page: /api/jobs (server-side paging and search), reloaded whenever the live stream
// says a job changed (schedd.follow): each job links to its page, with its schedule in words,
// next run, last run (linking to its run page) and last 20 outcomes.
(function () {
  "use strict";
  var S = window.schedd, el = S.el, when = S.when, status = S.status, fetchJson = S.fetchJson, fill = S.fill,
      stateCell = S.stateCell;

  // ------------------------------------------------------------ Jobs

  // The schedule in words (the API's), the expression itself below it.
  function scheduleCell(j) {
    var cell = el("span", null, "schedule");
    cell.appendChild(el("span", j.words || j.schedule || "on demand", "words"));
    if (j.schedule) { cell.appendChild(el("code", j.schedule, "expr")); }
    return cell;
  }

  // The next run: its time (UTC) and in how long.
  function nextCell(ms) {
    if (!ms) { return el("span", "-", "muted"); }
    var cell = el("span", null, "next-run");
    cell.appendChild(el("span", new Date(ms).toISOString().replace("T", " ").slice(0, 16) + "Z", "abs"));
    cell.appendChild(when(ms));
    return cell;
  }

  var MARKS = {SUCCEEDED: ["S", "succeeded"], FAILED: ["F", "failed"], TIMED_OUT: ["F", "failed"], LOST: ["F", "failed"],
               UPSTREAM_FAILED: ["F", "failed"], RUNNING: ["R", "running"], SCHEDULED: ["R", "running"],
               RETRY_WAIT: ["R", "running"], SKIPPED: ["K", "skipped"], CANCELLED: ["C", "cancelled"]};

  // The last runs, oldest first: a letter per run, coloured, its state and time in the title,
  // each a link to its run page.
  function strip(recent) {
    var box = el("span", null, "strip");
    (recent || []).forEach(function (r) {
      var m = MARKS[r.state] || ["?", "other"];
      var a = el("a", m[0], "run-mark run-" + m[1]);
      a.href = "/runs/" + encodeURIComponent(r.id);
      a.title = r.state.toLowerCase() + ", scheduled " + new Date(r.ms).toISOString();
      box.appendChild(a);
    });
    if (!recent || !recent.length) { box.appendChild(el("span", "no runs yet", "muted")); }
    return box;
  }

  function jobsPage() {
    var stack = [""];            // the `after` of each page visited so far
    var next = "";
    var form = document.getElementById("filters");
    var params = new URLSearchParams(window.location.search);
    ["text", "team", "state", "pool", "size"].forEach(function (k) {
      if (params.get(k)) { form.elements[k].value = params.get(k); }
    });

    function query() {
      var q = new URLSearchParams();
      q.set("text", form.elements.text.value.trim());
      q.set("team", form.elements.team.value.trim());
      q.set("state", form.elements.state.value);
      q.set("pool", form.elements.pool.value.trim());
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
          var name = el("span", null, "job-name");
          var link = el("a", j.name);
          link.href = "/jobs/" + encodeURIComponent(j.name);
          name.appendChild(link);
          if (j.paused) { name.appendChild(el("span", "paused", "tag")); }
          var last = stateCell(j.last_state);
          if (j.last_execution_id) {        // its run's page (run.js)
            var a = el("a");
            a.href = "/runs/" + encodeURIComponent(j.last_execution_id);
            a.appendChild(last);
            last = a;
          }
          return [name, j.team, scheduleCell(j), j.paused ? el("span", "paused", "muted") : nextCell(j.next_fire_ms),
                  when(j.last_scheduled_ms), last, strip(j.recent), j.executions_total];
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
    ["text", "team", "pool"].forEach(function (k) {
      form.elements[k].addEventListener("input", function () { clearTimeout(form.timer); form.timer = setTimeout(restart, 300); });
    });
    document.getElementById("next").addEventListener("click", function () { if (next) { stack.push(next); load(); } });
    document.getElementById("prev").addEventListener("click", function () { if (stack.length > 1) { stack.pop(); load(); } });
    document.getElementById("first").addEventListener("click", function () { stack = [""]; load(); });
    S.follow(load);
  }

  jobsPage();
})();
