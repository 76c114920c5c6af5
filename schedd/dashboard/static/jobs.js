// The Jobs page: /api/jobs (server-side paging and search), kept current by the live stream
// (schedd.follow): a row it shows is patched from the changed job the stream carries (its last
// runs merged into the row's strip), and the page loads again only when it must: a job added or
// removed (the count, the pages), a job that now falls on this page under its filters and order
// or leaves it. Each job links to its page, with its schedule in words, next run, last run
// (linking to its run page) and last 20 outcomes.
(function () {
  "use strict";
  var S = window.schedd, el = S.el, when = S.when, status = S.status, fetchJson = S.fetchJson,
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

  var RECENT = 20;

  // The row's last runs with those the stream reports (the runs the node still holds, the ones
  // that may change): each by id, the newest RECENT kept, oldest first.
  function merged(recent, news) {
    var byId = {};
    (recent || []).concat(news || []).forEach(function (r) { byId[r.id] = r; });
    var out = Object.keys(byId).map(function (k) { return byId[k]; });
    out.sort(function (a, b) { return a.ms - b.ms; });
    return out.slice(-RECENT);
  }

  function cells(j) {
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
  }

  function jobsPage() {
    var stack = [""];            // the `after` of each page visited so far
    var next = "";
    var shown = {};              // name -> {job, tr}: the rows on the page
    var names = [];              // their names, in order
    var filters = null;          // what the shown rows were listed with
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
      var q = listing();
      return fetchJson("/api/jobs?" + q.toString()).then(function (body) {
        next = body.next;
        filters = {text: q.get("text").toLowerCase(), team: q.get("team"), state: q.get("state"), pool: q.get("pool"),
                   after: q.get("after")};
        document.getElementById("total").textContent = "(" + body.total + ")";
        document.getElementById("page").textContent = "page " + stack.length;
        document.getElementById("next").disabled = !next;
        document.getElementById("prev").disabled = stack.length < 2;
        document.getElementById("first").disabled = stack.length < 2;
        var tbody = document.querySelector("#jobs tbody"), frag = document.createDocumentFragment();
        shown = {};
        names = body.jobs.map(function (j) {
          var tr = S.row(cells(j));
          shown[j.name] = {job: j, tr: tr};
          frag.appendChild(tr);
          return j.name;
        });
        tbody.replaceChildren(frag);
        status("updated " + new Date().toLocaleTimeString());
      }).catch(function (e) { status(e.message, true); });
    }

    // Whether the listing this page shows would hold `j` (ListJobs' filters: team, paused or
    // active, pool, name containing the text in any case).
    function wanted(j) {
      var f = filters;
      return (!f.team || j.team === f.team) && (!f.pool || j.pool === f.pool) &&
             (!f.state || (f.state === "paused") === !!j.paused) &&
             (!f.text || j.name.toLowerCase().indexOf(f.text) >= 0);
    }

    // Whether a job of that name sorts onto this page (after the page's start; before its last
    // row, unless it is the last page).
    function onPage(name) {
      return (!filters.after || name > filters.after) && (!next || !names.length || name <= names[names.length - 1]);
    }

    // A change from the stream: true when it is patched in, false when the page must load.
    function patch(change) {
      if (!filters) { return false; }
      if (change.removed.length || change.added.some(wanted)) { return false; }
      var i, j, row, tr;
      for (i = 0; i < change.rows.length; i++) {
        j = change.rows[i];
        row = shown[j.name];
        if (row ? !wanted(j) : wanted(j) && onPage(j.name)) { return false; }
      }
      for (i = 0; i < change.rows.length; i++) {
        j = change.rows[i];
        row = shown[j.name];
        if (!row) { continue; }           // not on this page: nothing to show
        j.recent = merged(row.job.recent, j.recent);
        tr = S.row(cells(j));
        row.tr.replaceWith(tr);
        shown[j.name] = {job: j, tr: tr};
      }
      status("updated " + new Date().toLocaleTimeString());
      return true;
    }

    function listing() {                // what the live stream follows: this page, as load() asks for it
      var q = query();
      q.set("after", stack[stack.length - 1]);
      return q;
    }

    var live = null;
    function show() {                   // another listing: load it, and follow it
      load();
      if (live) { live.reopen(); }
    }

    function restart() {
      stack = [""];
      var q = query();
      window.history.replaceState(null, "", "/jobs?" + q.toString());
      show();
    }
    form.addEventListener("change", restart);
    form.addEventListener("submit", function (e) { e.preventDefault(); restart(); });
    ["text", "team", "pool"].forEach(function (k) {
      form.elements[k].addEventListener("input", function () { clearTimeout(form.timer); form.timer = setTimeout(restart, 300); });
    });
    document.getElementById("next").addEventListener("click", function () { if (next) { stack.push(next); show(); } });
    document.getElementById("prev").addEventListener("click", function () { if (stack.length > 1) { stack.pop(); show(); } });
    document.getElementById("first").addEventListener("click", function () { stack = [""]; show(); });
    live = S.follow(load, {patch: patch, listing: listing});
  }

  jobsPage();
})();
