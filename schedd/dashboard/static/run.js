// The Run page: the run and its attempts from /api/run (reloaded when this run changes:
// schedd.follow on the runs watch of its job, whose other runs' changes it lets pass), the latest attempt's output followed live from
// /api/run/log (server-sent events: the API's log stream), retry and cancel buttons.
(function () {
  "use strict";
  var S = window.schedd, el = S.el, when = S.when, status = S.status, fetchJson = S.fetchJson, fill = S.fill,
      stateCell = S.stateCell;
  var FINISHED = ["SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "SKIPPED", "UPSTREAM_FAILED", "LOST"];
  var REOPEN_MS = 5000;
  var MAX_LOG_CHARS = 2000000;     // the pane keeps the newest 2 MB; `schedctl run logs` has it all

  function meta(name) { var m = document.querySelector('meta[name="' + name + '"]'); return m ? m.content : ""; }

  function time(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC") : "-"; }

  function duration(a) {
    if (!a.started_ms) { return "-"; }
    var end = a.ended_ms || Date.now(), s = Math.max(0, (end - a.started_ms) / 1000);
    var t = s < 60 ? s.toFixed(1) + " s" : Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
    return a.ended_ms ? t : t + " so far";
  }

  function runPage() {
    var id = meta("run"), job = meta("job");
    var log = document.getElementById("log"), logState = document.getElementById("log-state");
    var source = null, logAttempt = 0, logFailed = 0, shown = null, logChars = 0;

    function append(text, cls) {
      log.appendChild(el("span", text, cls));
      logChars += text.length;
      while (logChars > MAX_LOG_CHARS && log.firstChild) {
        logChars -= log.firstChild.textContent.length;
        log.removeChild(log.firstChild);
        log.dataset.cut = "1";
      }
    }

    function field(dl, label, value) {
      if (value === undefined || value === null || value === "") { return; }
      dl.appendChild(el("dt", label));
      var dd = el("dd");
      if (value instanceof Node) { dd.appendChild(value); } else { dd.textContent = String(value); }
      dl.appendChild(dd);
    }

    function link(href, text) { var a = el("a", text); a.href = href; return a; }

    function showAttempts(r) {
      fill(document.querySelector("#attempts tbody"), r.attempts.map(function (a) {
        return [a.number, stateCell(a.state), a.worker || "-", a.fencing_token || "-", time(a.started_ms),
                time(a.ended_ms), duration(a), el("span", a.outcome || (a.ended_ms ? "-" : "running"), "outcome")];
      }));
    }

    function showRun(r) {
      shown = r;
      var dl = document.getElementById("fields");
      dl.replaceChildren();
      field(dl, "Job", link("/jobs/" + encodeURIComponent(r.job), r.job));
      field(dl, "State", stateCell(r.state));
      field(dl, "Scheduled", time(r.scheduled_ms));
      field(dl, "Trigger", r.trigger);
      field(dl, "Reason", r.reason);
      var params = Object.keys(r.params).map(function (k) { return k + "=" + r.params[k]; }).join(", ");
      field(dl, "Parameters", params || "none");
      if (r.dag) {
        field(dl, "DAG run", link("/dags/" + encodeURIComponent(r.dag.name), r.dag.run + " (task " + r.dag.task + ")"));
      }
      if (r.cancel_requested && FINISHED.indexOf(r.state) < 0) { field(dl, "Cancel", "requested"); }
      if (r.retry_at_ms) { field(dl, "Retry at", time(r.retry_at_ms)); }
      if (r.lane) { field(dl, "Lane", r.lane); }
      r.events.forEach(function (e) { field(dl, e.kind, time(e.time_ms) + ": " + e.message); });
      showAttempts(r);
      var tails = document.getElementById("tails");
      tails.replaceChildren.apply(tails, r.attempts.filter(function (a) { return a.output_tail || a.error; })
        .map(function (a) {
          var d = el("details"), s = el("summary", "Attempt " + a.number + ": output tail kept in the cluster");
          d.appendChild(s);
          if (a.error) { d.appendChild(el("p", a.error, "error")); }
          if (a.output_tail) { d.appendChild(el("pre", a.output_tail, "log tail")); }
          return d;
        }));
      var finished = FINISHED.indexOf(r.state) >= 0;
      document.getElementById("cancel").hidden = !(meta("may-cancel") && !finished);
      document.getElementById("retry").hidden = !(meta("may-retry") && finished);
    }

    function follow(attempt) {           // the attempt's output, from its start, until it ends
      if (source) { source.close(); }
      logAttempt = attempt;
      log.replaceChildren();
      logChars = 0;
      delete log.dataset.cut;
      logState.textContent = "(attempt " + attempt + ", following)";
      var q = new URLSearchParams({id: id, attempt: String(attempt)});
      source = new EventSource("/api/run/log?" + q.toString());
      source.addEventListener("log", function (e) {
        var c = JSON.parse(e.data), atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
        if (c.kind === "output") {
          append(c.text, c.stream === "stderr" ? "stderr" : null);
        } else if (c.kind === "dropped") {
          append("\n[" + c.dropped_bytes + " bytes dropped here]\n", "notice");
        } else if (c.kind === "notice") {
          append("[" + c.message + "]\n", "notice");
        } else if (c.kind === "end") {
          source.close();
          source = null;
          logState.textContent = "(attempt " + c.attempt + " on " + (c.worker || "?") + ": " + c.state +
            (log.dataset.cut ? "; the first part is cut here: schedctl run logs " + id + " has it all" : "") + ")";
          load();
        }
        if (atEnd) { log.scrollTop = log.scrollHeight; }
      });
      source.addEventListener("end", function (e) {
        source.close();
        source = null;
        logState.textContent = "(" + JSON.parse(e.data).error + ")";
        logFailed = Date.now();
        logAttempt = 0;
        load();
      });
      source.onerror = function () {
        if (source && source.readyState === EventSource.CLOSED) {    // refused: not retried by itself
          source = null;
          logState.textContent = "(the log cannot be followed now; the tail below is what the cluster kept)";
          logFailed = Date.now();
          logAttempt = 0;
        } else if (source) {              // a dropped connection: reopen from the start, not duplicated
          source.close();
          source = null;
          logFailed = Date.now();
          logAttempt = 0;
        }
      };
    }

    function load() {
      return fetchJson("/api/run?" + new URLSearchParams({id: id}).toString()).then(function (r) {
        showRun(r);
        var last = r.attempts[r.attempts.length - 1];
        if (!last) {
          logState.textContent = "(no attempt has started yet)";
        } else if (last.number !== logAttempt && !source && Date.now() - logFailed > REOPEN_MS) {
          follow(last.number);
        }
        status("updated " + new Date().toLocaleTimeString());
      }).catch(function (e) { status(e.message, true); });
    }

    function act(what) {
      var err = document.getElementById("action-error");
      err.textContent = "";
      S.post("/api/run/" + what, {id: id}).then(load).catch(function (e) { err.textContent = e.message; });
    }
    document.getElementById("cancel").addEventListener("click", function () { act("cancel"); });
    document.getElementById("retry").addEventListener("click", function () { act("retry"); });
    window.addEventListener("pagehide", function () { if (source) { source.close(); } });
    setInterval(function () {            // a running attempt's duration counts up between loads
      if (shown && shown.attempts.some(function (a) { return a.started_ms && !a.ended_ms; })) { showAttempts(shown); }
    }, 1000);
    function mine(change) {              // this run among the changed: load it again
      return change.removed.indexOf(id) >= 0 || change.rows.concat(change.added).some(function (r) { return r.id === id; });
    }
    S.follow(load, {watch: "runs", job: job, patch: function (change) { return !mine(change); }});
  }

  runPage();
})();
