// The Job page (/jobs/<name>): the job (/api/jobs/<name>), its instants drawn by the server
// (/api/jobs/<name>/instants: an SVG with a lane per outcome, and the rows), its runs, and the
// actions the page shows (their POSTs carry the CSRF token; a refusal is shown as the API said it).
(function () {
  "use strict";
  var S = window.schedd, el = S.el, when = S.when, status = S.status, fetchJson = S.fetchJson, fill = S.fill,
      stateCell = S.stateCell;
  var name = document.querySelector('meta[name="job"]').content;
  var base = "/api/jobs/" + encodeURIComponent(name);
  var INSTANTS_PER_PAGE = 100;

  function utc(ms) { return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + "Z"; }

  function runLink(id, url) {
    if (!id) { return el("span", "-", "muted"); }
    var a = el("a", id);
    a.href = url;
    return a;
  }

  // ------------------------------------------------------------ the job and its next fires

  var raw = {json: "", yaml: "", shown: ""};

  function loadJob() {
    return fetchJson(base).then(function (j) {
      firstWindow(j);
      document.getElementById("words").textContent = j.words;
      document.getElementById("paused-tag").hidden = !j.paused;
      var pauseBtn = document.getElementById("pause"), resumeBtn = document.getElementById("resume");
      if (pauseBtn) { pauseBtn.hidden = j.paused; resumeBtn.hidden = !j.paused; }
      var dl = document.getElementById("spec"), frag = document.createDocumentFragment();
      j.readable.forEach(function (f) { frag.appendChild(el("dt", f.label)); frag.appendChild(el("dd", f.value)); });
      dl.replaceChildren(frag);
      raw.json = j.spec_json;
      raw.yaml = j.spec_yaml;
      if (raw.shown) { document.getElementById("raw").textContent = raw[raw.shown]; }
      document.getElementById("fires-zone").textContent = j.timezone;
      fill(document.querySelector("#fires tbody"), j.fires.map(function (f, i) {
        return [i + 1, f.local, f.utc, when(f.ms), f.dst ? el("span", f.dst, "dst-note") : "-",
                f.calendar ? el("span", f.calendar, "calendar-note") :
                  f.window ? el("span", f.window, "window-note") : "runs"];
      }));
      var cals = document.getElementById("job-calendars");
      cals.replaceChildren();
      j.calendars.forEach(function (c, i) {
        cals.appendChild(document.createTextNode(i ? ", " : "Calendars: "));
        var a = el("a", c.name + " (" + c.how + ")");
        a.href = "/calendars#calendar-" + encodeURIComponent(c.name);
        cals.appendChild(a);
      });
      if (!j.fires.length) {
        fill(document.querySelector("#fires tbody"), [[j.paused ? "paused: no fires" : "no coming fires (on demand, or a one-off already past)"]]);
      }
    });
  }

  function toggle(kind) {
    var pre = document.getElementById("raw");
    raw.shown = raw.shown === kind ? "" : kind;
    pre.hidden = !raw.shown;
    document.getElementById("spec").hidden = !!raw.shown;
    pre.textContent = raw.shown ? raw[raw.shown] : "";
    document.getElementById("raw-toggle").textContent = raw.shown === "json" ? "Readable" : "Show JSON";
    document.getElementById("yaml-toggle").textContent = raw.shown === "yaml" ? "Readable" : "Show YAML";
  }
  document.getElementById("raw-toggle").addEventListener("click", function () { toggle("json"); });
  document.getElementById("yaml-toggle").addEventListener("click", function () { toggle("yaml"); });

  // ------------------------------------------------------------ the timeline of instants

  var win = {hours: 24, to: 0, from: 0, rows: [], page: 0, labels: {}};    // to = 0: "now", following the clock

  function loadInstants() {
    var to = win.to || Date.now(), from = win.from || to - win.hours * 3600000;
    if (!win.from && win.floor && win.floor > from && win.floor < to) { from = win.floor; }   // not before the job
    return fetchJson(base + "/instants?from=" + from + "&to=" + to).then(function (body) {
      var doc = new DOMParser().parseFromString(body.svg, "image/svg+xml");
      var kept = focusedInstant("timeline");
      document.getElementById("timeline").replaceChildren(document.importNode(doc.documentElement, true));
      var mark = roving(kept && document.querySelector('#timeline .mark[data-t="' + kept + '"]'));
      if (kept && mark) { mark.focus(); }                    // a redraw does not take the keyboard's place
      var legend = document.getElementById("legend"), frag = document.createDocumentFragment();
      win.labels = {};
      body.legend.forEach(function (l) {
        win.labels[l.key] = l.label;
        var item = el("span", null, "legend-item");
        item.appendChild(el("span", l.letter, "run-mark lane-mark-" + l.key));
        item.appendChild(el("span", " " + l.label + " (" + l.count + ")"));
        frag.appendChild(item);
      });
      legend.replaceChildren(frag);
      document.getElementById("instant-count").textContent = "(" + body.rows.length + (body.next_from ? "+" : "") + ")";
      document.getElementById("window-text").textContent = new Date(body.from).toISOString().slice(0, 16) + "Z to " +
        new Date(body.to).toISOString().slice(0, 16) + "Z";
      var more = document.getElementById("more");
      more.hidden = !body.next_from;
      more.dataset.from = body.next_from || "";
      more.dataset.to = body.to;
      var newPage = win.rows.length !== body.rows.length;
      win.rows = body.rows.slice().reverse();           // the table: newest first
      if (newPage) { win.page = 0; }
      drawInstants();
    });
  }

  function drawInstants() {
    var pages = Math.max(1, Math.ceil(win.rows.length / INSTANTS_PER_PAGE));
    win.page = Math.min(win.page, pages - 1);
    var rows = win.rows.slice(win.page * INSTANTS_PER_PAGE, (win.page + 1) * INSTANTS_PER_PAGE);
    var kept = focusedInstant("instants");
    fill(document.querySelector("#instants tbody"), rows.map(function (r) {
      var mark = el("span", r.letter, "run-mark lane-mark-" + r.category);
      mark.title = win.labels[r.category] || r.category;
      var why = el("button", "Explain", "explain-button");
      why.type = "button";
      why.dataset.t = r.t;
      why.setAttribute("aria-label", "Explain the instant " + utc(r.t));
      return [mark, r.local, utc(r.t), el("span", r.disposition, "disposition disposition-" + r.category),
              r.detail || "", runLink(r.id, r.id ? "/runs/" + encodeURIComponent(r.id) : ""), why];
    }));
    var again = kept && document.querySelector('#instants button[data-t="' + kept + '"]');
    if (again) { again.focus(); }
    document.getElementById("inst-page").textContent = "page " + (win.page + 1) + " of " + pages;
    document.getElementById("inst-prev").disabled = win.page === 0;
    document.getElementById("inst-next").disabled = win.page >= pages - 1;
  }

  document.getElementById("inst-prev").addEventListener("click", function () { win.page -= 1; drawInstants(); });
  document.getElementById("inst-next").addEventListener("click", function () { win.page += 1; drawInstants(); });
  document.getElementById("window").addEventListener("change", function (e) {
    win.hours = Number(e.target.value); win.to = 0; win.from = 0; loadInstants();
  });
  document.getElementById("earlier").addEventListener("click", function () {
    var to = (win.to || Date.now()) - win.hours * 3600000;
    win.to = to; win.from = 0; loadInstants();
  });
  document.getElementById("later").addEventListener("click", function () {
    var to = (win.to || Date.now()) + win.hours * 3600000;
    win.to = to >= Date.now() ? 0 : to; win.from = 0; loadInstants();
  });
  document.getElementById("latest").addEventListener("click", function () { win.to = 0; win.from = 0; loadInstants(); });
  document.getElementById("more").addEventListener("click", function (e) {
    win.from = Number(e.target.dataset.from); win.to = Number(e.target.dataset.to); loadInstants();
  });

  // ------------------------------------------------------------ why an instant ran or did not

  // The API's Explain of one instant (`job explain --at T`; for one that ran, what `run explain`
  // says: the log index, the leader's term, each attempt's fencing token, the SLA verdict).
  function explain(t, from) {
    return fetchJson(base + "/explain?at=" + t).then(function (x) {
      var panel = document.getElementById("explain");
      document.getElementById("explain-title").textContent = x.instant + " (" + x.disposition + ")";
      document.getElementById("explain-summary").textContent = x.summary;
      var facts = document.getElementById("explain-facts"), frag = document.createDocumentFragment();
      [["Instant", x.id], ["Outcome", x.disposition], ["Read at", "log index " + x.index]].forEach(function (f) {
        frag.appendChild(el("dt", f[0])); frag.appendChild(el("dd", f[1]));
      });
      if (x.run_url) {
        frag.appendChild(el("dt", "Run"));
        var dd = el("dd"); dd.appendChild(runLink(x.id, x.run_url)); frag.appendChild(dd);
      }
      facts.replaceChildren(frag);
      fill(document.querySelector("#explain-findings tbody"), x.findings.map(function (f) {
        var values = Object.keys(f.details).map(function (k) { return k.replace(/_/g, " ") + ": " + f.details[k]; });
        return [f.at || "-", f.kind, f.text, values.join("; ") || "-"];
      }));
      panel.hidden = false;
      panel.dataset.t = t;
      panel.returnTo = from || null;
      panel.focus();
    }).catch(function (e) { status("explain: " + e.message, true); });
  }

  function explainTarget(e) {
    var target = e.target.closest ? e.target.closest("[data-t]") : null;
    return target && (target.classList.contains("mark") || target.classList.contains("explain-button")) ? target : null;
  }
  // The instant whose mark or button in `box` has the keyboard focus ("" if none): kept across a redraw.
  function focusedInstant(box) {
    var f = document.activeElement;
    return f && f.dataset && f.dataset.t && document.getElementById(box).contains(f) ? f.dataset.t : "";
  }

  // The timeline is one tab stop: its newest mark (or the one last used); the arrow keys move
  // between marks (in time order within a lane, then lane by lane), Home and End to the ends.
  function roving(current) {
    var marks = Array.from(document.querySelectorAll("#timeline .mark"));
    if (!marks.length) { return; }
    var at = current ? marks.indexOf(current) : -1;
    if (at < 0) { at = marks.length - 1; }
    marks.forEach(function (m, i) { m.setAttribute("tabindex", i === at ? "0" : "-1"); });
    return marks[at];
  }
  document.getElementById("timeline").addEventListener("keydown", function (e) {
    var marks = Array.from(document.querySelectorAll("#timeline .mark")), at = marks.indexOf(e.target);
    var to = {ArrowRight: at + 1, ArrowDown: at + 1, ArrowLeft: at - 1, ArrowUp: at - 1, Home: 0,
              End: marks.length - 1}[e.key];
    if (at < 0 || to === undefined) { return; }
    e.preventDefault();
    roving(marks[Math.max(0, Math.min(marks.length - 1, to))]).focus();
  });
  ["timeline", "instants"].forEach(function (id) {
    var box = document.getElementById(id);
    box.addEventListener("click", function (e) {
      var target = explainTarget(e);
      if (target) { explain(Number(target.dataset.t), target); }
    });
    box.addEventListener("keydown", function (e) {
      var target = explainTarget(e);
      if (target && target.tagName.toLowerCase() === "rect" && (e.key === "Enter" || e.key === " ")) {
        e.preventDefault();
        explain(Number(target.dataset.t), target);
      }
    });
  });
  document.getElementById("explain-close").addEventListener("click", function () {
    var panel = document.getElementById("explain");
    panel.hidden = true;
    if (panel.returnTo && document.body.contains(panel.returnTo)) { panel.returnTo.focus(); }
  });

  // ------------------------------------------------------------ runs

  var runs = {stack: [""], next: ""};

  function loadRuns() {
    var size = document.getElementById("runs-size").value;
    return fetchJson(base + "/runs?size=" + size + "&after=" + encodeURIComponent(runs.stack[runs.stack.length - 1]))
      .then(function (body) {
        runs.next = body.next;
        document.getElementById("runs-total").textContent = "(" + body.total + ")";
        document.getElementById("runs-next").disabled = !body.next;
        fill(document.querySelector("#runs tbody"), body.runs.map(function (r) {
          var params = Object.keys(r.params).map(function (k) { return k + "=" + r.params[k]; }).join(", ");
          var state = stateCell(r.state);
          if (r.reason) { state.title = r.reason; }
          return [runLink(r.id, r.url), state, r.scheduled, r.trigger,
                  r.duration_ms ? (r.duration_ms / 1000).toFixed(1) + " s" : "-", r.worker || "-", r.attempts,
                  params || "-"];
        }));
      });
  }
  document.getElementById("runs-next").addEventListener("click", function () {
    if (runs.next) { runs.stack.push(runs.next); loadRuns(); }
  });
  document.getElementById("runs-first").addEventListener("click", function () { runs.stack = [""]; loadRuns(); });
  document.getElementById("runs-size").addEventListener("change", function () { runs.stack = [""]; loadRuns(); });

  // ------------------------------------------------------------ actions

  function said(text, bad) {
    var p = document.getElementById("action-result");
    p.textContent = text;
    p.className = bad ? "action-result error" : "action-result";
  }

  function refused(e) {
    said("refused" + (e.status ? " (" + e.status + ")" : "") + ": " + e.message, true);
  }

  function act(path, body) {
    return S.post(base + path, body);
  }

  var triggerForm = document.getElementById("trigger-form");
  if (triggerForm) {
    document.getElementById("add-param").addEventListener("click", function () {
      var row = el("span", null, "param-row");
      var k = el("input"), v = el("input");
      k.placeholder = "name"; k.className = "param-name";
      v.placeholder = "value"; v.className = "param-value";
      row.appendChild(k); row.appendChild(document.createTextNode(" = ")); row.appendChild(v);
      document.getElementById("trigger-params").appendChild(row);
      k.focus();
    });
    triggerForm.addEventListener("submit", function (e) {
      e.preventDefault();
      var params = {};
      triggerForm.querySelectorAll("input[data-param]").forEach(function (i) { params[i.dataset.param] = i.value; });
      triggerForm.querySelectorAll(".param-row").forEach(function (row) {
        var k = row.querySelector(".param-name").value.trim();
        if (k) { params[k] = row.querySelector(".param-value").value; }
      });
      act("/trigger", {params: params}).then(function (r) {
        said("triggered: ");
        document.getElementById("action-result").appendChild(runLink(r.id, r.url));
        refresh(true);
      }).catch(refused);
    });
  }

  ["pause", "resume"].forEach(function (what) {
    var b = document.getElementById(what);
    if (!b) { return; }
    b.addEventListener("click", function () {
      act("/" + what, {}).then(function (r) { said(r.paused ? "paused" : "resumed"); refresh(); }).catch(refused);
    });
  });

  var backfillForm = document.getElementById("backfill-form");
  if (backfillForm) {
    var confirmBtn = document.getElementById("bf-confirm"), result = document.getElementById("bf-result");
    var range = function () {
      return {from: document.getElementById("bf-from").value, to: document.getElementById("bf-to").value};
    };
    backfillForm.addEventListener("input", function () { confirmBtn.hidden = true; result.textContent = ""; });
    backfillForm.addEventListener("submit", function (e) {
      e.preventDefault();
      var body = range();
      body.dry_run = true;
      act("/backfill", body).then(function (r) {
        result.textContent = r.instants + " instant" + (r.instants === 1 ? "" : "s") + " in the range" +
          (r.instants ? " (" + r.first + " to " + r.last + ")" : "") + ". Instants already recorded are not run again.";
        result.className = "";
        confirmBtn.hidden = !r.instants;
      }).catch(function (err) { result.textContent = "refused" + (err.status ? " (" + err.status + ")" : "") + ": " + err.message; result.className = "error"; });
    });
    confirmBtn.addEventListener("click", function () {
      var body = range();
      body.dry_run = false;
      act("/backfill", body).then(function (r) {
        confirmBtn.hidden = true;
        result.textContent = "backfilled: " + r.created + " new run" + (r.created === 1 ? "" : "s") + ", " +
          r.duplicates + " already recorded";
        result.className = "";
        refresh(true);
      }).catch(function (err) { result.textContent = "refused" + (err.status ? " (" + err.status + ")" : "") + ": " + err.message; result.className = "error"; });
    });
  }

  // ------------------------------------------------------------ keeping current

  // A long window is costly to read: it follows the cluster every 10 s rather than every tick.
  var instantsAt = 0;
  function maybeInstants(force) {
    if (!force && win.rows.length > 1000 && Date.now() - instantsAt < 10000) { return Promise.resolve(); }
    instantsAt = Date.now();
    return loadInstants();
  }

  // The first window: the smallest that holds the job's whole life, up to a day (a job created
  // an hour ago shows its instants spread out, not crowded at the right edge).
  var chosen = false;
  function firstWindow(j) {
    if (chosen) { return; }
    chosen = true;
    win.floor = j.created_ms ? j.created_ms - 30000 : 0;
    var select = document.getElementById("window"), age = (Date.now() - j.created_ms) / 3600000;
    var fit = Array.from(select.options).map(function (o) { return Number(o.value); })
      .filter(function (h) { return h >= age && h <= 24; })[0];
    if (fit) { select.value = String(fit); win.hours = fit; }
  }

  function refresh(force) {
    var job = loadJob();
    var instants = chosen ? maybeInstants(force === true) : job.then(function () { return maybeInstants(true); });
    return Promise.all([job, instants, loadRuns()]).then(function () {
      status("updated " + new Date().toLocaleTimeString());
    }).catch(function (e) { status(e.message, true); });
  }

  // A change of runs the page does not show (an old run outside the table's page and the
  // timeline's window) loads nothing; any other loads the page.
  function unseen(change) {
    if (change.added.length || change.removed.length) { return false; }
    var to = win.to || Date.now(), from = win.from || to - win.hours * 3600000;
    var ids = Array.from(document.querySelectorAll("#runs tbody a")).map(function (a) { return a.textContent; });
    return change.rows.every(function (r) {
      return ids.indexOf(r.id) < 0 && (r.scheduled_ms < from || r.scheduled_ms > to);
    });
  }

  S.follow(refresh, {watch: "runs", job: name, patch: unseen});      // this job's runs (and so its instants)
})();
