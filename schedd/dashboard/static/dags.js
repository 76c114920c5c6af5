// The DAGs pages: the list (/dags) and a DAG's page (/dags/<name>): its graph (SVG drawn by the
// server), the grid of recent runs by task, and "clear a task and its downstream".
(function () {
  "use strict";
  var S = window.schedd, el = S.el, when = S.when, status = S.status, fetchJson = S.fetchJson, fill = S.fill,
      stateCell = S.stateCell;
  // A state's symbol and words, as the graph says them (dag_graph.STATES): never colour alone.
  var STATES = {"": ["○", "not run yet"], PENDING: ["○", "waiting"], SCHEDULED: ["◷", "scheduled"],
                RUNNING: ["▶", "running"], RETRY_WAIT: ["↻", "retry wait"], SUCCEEDED: ["✓", "succeeded"],
                FAILED: ["✗", "failed"], TIMED_OUT: ["⌛", "timed out"], LOST: ["?", "lost"],
                CANCELLED: ["⊘", "cancelled"], SKIPPED: ["↷", "skipped"], UPSTREAM_FAILED: ["⤫", "upstream failed"]};

  function said(state) { return STATES[state || ""] || ["•", String(state).toLowerCase()]; }

  function link(href, text, cls) { var a = el("a", text, cls); a.href = href; return a; }

  // ------------------------------------------------------------ the list

  function listPage() {
    function load() {
      return fetchJson("/api/dags").then(function (body) {
        document.getElementById("total").textContent = "(" + body.dags.length + ")";
        fill(document.querySelector("#dags tbody"), body.dags.map(function (d) {
          return [link("/dags/" + encodeURIComponent(d.name), d.name, "dag-name"), d.team,
                  (d.schedule || "on demand") + (d.timezone ? " (" + d.timezone + ")" : ""), d.tasks,
                  when(d.next_fire_ms),
                  d.last_run_id ? link("/dags/" + encodeURIComponent(d.name) + "?run=" + encodeURIComponent(d.last_run_id),
                                       d.last_run_id) : "-",
                  d.last_run_state ? stateCell(d.last_run_state) : "not run yet",
                  d.runs_total];
        }));
        status("updated " + new Date().toLocaleTimeString());
      }).catch(function (e) { status(e.message, true); });
    }
    S.follow(load);
  }

  // ------------------------------------------------------------ a DAG

  function dagPage() {
    var api = document.querySelector('meta[name="dag-api"]').content;
    var select = document.getElementById("run-select");
    var shownSvg = "", view = null;
    var shown = new URLSearchParams(window.location.search).get("run") || "";   // "": the newest run

    function show(runId) {           // the run the graph and the clear are of, kept in the address
      shown = runId;
      window.history.replaceState(null, "", window.location.pathname + (runId ? "?run=" + encodeURIComponent(runId) : ""));
      document.getElementById("clear-task").dataset.chosen = "";
      load();
    }

    function drawGraph(svgText) {
      if (svgText === shownSvg) { return; }
      shownSvg = svgText;
      var doc = new DOMParser().parseFromString(svgText, "image/svg+xml");
      var graph = document.getElementById("graph");
      graph.replaceChildren(document.importNode(doc.documentElement, true));
    }

    function drawRuns(v) {
      var options = [el("option", "newest")];
      options[0].value = "";
      v.runs.slice().reverse().forEach(function (r) {
        var o = el("option", r.run_id + " (" + said(r.state)[1] + ")");
        o.value = r.run_id;
        options.push(o);
      });
      select.replaceChildren.apply(select, options);
      select.value = shown;
      if (select.value !== shown) { select.value = ""; }    // a run pruned since: the newest is shown
    }

    function drawGrid(v) {
      var grid = document.getElementById("grid");
      if (!v.runs.length) {
        grid.replaceChildren(el("caption", "No runs yet: every task is not run yet."));
        return;
      }
      var head = el("tr");
      head.appendChild(el("th", "Task"));
      v.runs.forEach(function (r) {
        var th = el("th", null, "run-head");
        var s = said(r.state);
        var a = link("#", s[0] + " " + new Date(r.logical_ms).toISOString().slice(5, 16).replace("T", " "),
                     "run-pick state-" + r.state.toLowerCase());
        a.title = r.run_id + ": " + s[1] + (r.sla_missed ? " (SLA missed)" : "");
        a.dataset.run = r.run_id;
        a.addEventListener("click", function (e) { e.preventDefault(); show(r.run_id); });
        th.appendChild(a);
        if (r.run_id === v.run_id) { th.className += " shown"; }
        head.appendChild(th);
      });
      var rows = [el("thead"), el("tbody")];
      rows[0].appendChild(head);
      v.tasks.forEach(function (task) {
        var tr = el("tr");
        tr.appendChild(el("th", task, "task-name"));
        v.runs.forEach(function (r) {
          var t = r.tasks[task], td = el("td", null, "cell");
          td.dataset.task = task;
          td.dataset.run = r.run_id;
          if (!t) { td.appendChild(el("span", "–", "absent")); td.title = "not in this run"; }
          else {
            var s = said(t.state);
            var cell = t.execution_id ? link("/runs/" + encodeURIComponent(t.execution_id), s[0], "state state-" + t.state.toLowerCase())
                                      : el("span", s[0], "state state-" + (t.state || "none").toLowerCase());
            cell.title = task + " in " + r.run_id + ": " + s[1] + (t.attempts > 1 ? ", " + t.attempts + " attempts" : "") +
                         (t.reason ? " (" + t.reason + ")" : "");
            cell.setAttribute("aria-label", s[1]);
            td.dataset.state = s[1];
            td.appendChild(cell);
          }
          tr.appendChild(td);
        });
        rows[1].appendChild(tr);
      });
      grid.replaceChildren(rows[0], rows[1]);
    }

    function drawClear(v) {
      var panel = document.getElementById("clear-panel");
      panel.hidden = !(v.may_clear && v.run_id);
      if (panel.hidden) { return; }
      var pick = document.getElementById("clear-task"), keep = pick.value;
      var run = v.runs.filter(function (r) { return r.run_id === v.run_id; })[0];
      pick.replaceChildren.apply(pick, v.run_tasks.map(function (task) {
        var o = el("option", task + " (" + said(run && run.tasks[task] ? run.tasks[task].state : "")[1] + ")");
        o.value = task;
        return o;
      }));
      if (pick.dataset.chosen && v.run_tasks.indexOf(keep) >= 0) { pick.value = keep; }   // the person's choice stays
      else if (v.finished.length) {       // else a failed task first: what one usually clears
        var failed = v.finished.filter(function (t) { return run.tasks[t].state !== "SUCCEEDED"; });
        pick.value = (failed[0] || v.finished[0]);
      }
    }

    function load() {
      var q = shown ? "?run=" + encodeURIComponent(shown) : "";
      return fetchJson(api + q).then(function (v) {
        view = v;
        var d = v.dag;
        document.getElementById("dag-summary").textContent = "team " + d.team + " · " +
          (d.schedule ? "schedule " + d.schedule + (d.timezone ? " (" + d.timezone + ")" : "") : "on demand") +
          " · " + d.tasks + " tasks · " + d.runs_total + " runs" + (d.description ? " · " + d.description : "");
        document.getElementById("graph-run").textContent = v.run_id ? "(" + v.run_id + ": " + said(v.run_state)[1] + ")"
                                                                    : "(not run yet)";
        drawGraph(v.svg);
        drawRuns(v);
        drawGrid(v);
        drawClear(v);
        status("updated " + new Date().toLocaleTimeString());
      }).catch(function (e) { status(e.message, true); });
    }

    var legend = document.getElementById("legend");
    ["", "SCHEDULED", "RUNNING", "SUCCEEDED", "FAILED", "UPSTREAM_FAILED", "SKIPPED"].forEach(function (k) {
      legend.appendChild(el("span", said(k)[0] + " " + said(k)[1], "state state-" + (k || "none").toLowerCase()));
    });
    select.addEventListener("change", function () { show(select.value); });
    document.getElementById("clear-task").addEventListener("change", function (e) { e.target.dataset.chosen = "1"; });
    document.getElementById("clear-form").addEventListener("submit", function (e) {
      e.preventDefault();
      var task = document.getElementById("clear-task").value;
      var down = document.getElementById("clear-downstream").checked;
      var err = document.getElementById("clear-error"), done = document.getElementById("clear-done");
      if (!view || !task) { return; }
      var runId = view.run_id, q = new URLSearchParams({run: runId, task: task, downstream: down ? "1" : ""});
      err.textContent = "";
      done.textContent = "";
      // The server names the tasks the clear would run again; the person confirms them.
      fetchJson(api + "/clear?" + q.toString()).then(function (p) {
        var tasks = p.tasks;
        if (!window.confirm("Clear " + tasks.length + " task" + (tasks.length > 1 ? "s" : "") + " of run " + runId +
                            "? They run again: " + tasks.join(", "))) { return; }
        return S.post(api + "/clear", {run_id: runId, task: task, downstream: down}).then(function (r) {
          done.textContent = r.cleared || ("cleared " + tasks.join(", "));
          load();
        });
      }).catch(function (e2) { err.textContent = e2.message; });   // the API's refusal, as it is
    });
    S.follow(load);
  }

  if (document.querySelector('meta[name="dag-api"]')) { dagPage(); } else { listPage(); }
})();
