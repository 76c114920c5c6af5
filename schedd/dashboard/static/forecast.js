// The Forecast page (/forecast): the API's forecast (/api/forecast) of the chosen window, by
// team or pool: per group the busiest seconds against its slots (a meter, and the ratio in
// words, so colour is never the only signal) and the busiest minutes, with what makes each.
(function () {
  "use strict";
  var S = window.schedd, el = S.el, fill = S.fill;

  function utc(ms) { return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + "Z"; }
  function n(x) { return Number(x).toLocaleString("en"); }

  function leftText(left) {
    var parts = [];
    if (left.skipped) { parts.push(n(left.skipped) + " skipped"); }
    if (left.moved) { parts.push(n(left.moved) + " moved to the next allowed instant (run with it)"); }
    if (left.deferred) { parts.push(n(left.deferred) + " deferred to a blackout's end (counted then)"); }
    return parts.length ? "Calendars and blackouts: " + parts.join(", ") + "." : "";
  }

  function madeBy(p) {
    return p.made_by.slice(0, 3).map(function (c) {
      return n(c.jobs) + " x " + c.schedule + " (" + c.timezone + ": " + c.examples.join(", ") +
        (c.jobs > c.examples.length ? ", ..." : "") + ")";
    }).join("; ") || "-";
  }

  function against(p, slots) {
    var cell = el("span", null, "against");
    if (slots < 0) { cell.appendChild(el("span", "slots unknown", "muted")); return cell; }
    var meter = document.createElement("meter");
    meter.min = 0; meter.max = Math.max(slots, p.due); meter.value = p.due;
    meter.high = slots; meter.optimum = 0;
    meter.setAttribute("aria-label", n(p.due) + " runs due, " + n(slots) + " slots");
    cell.appendChild(meter);
    var words = slots === 0 ? "no slot serves it" : p.over ? p.ratio.toFixed(1) + "x the slots: over" : "within " + n(slots) + " slots";
    cell.appendChild(el("span", " " + words, p.over || slots === 0 ? "over" : "within"));
    return cell;
  }

  function group(g, by) {
    var box = el("section", null, "forecast-group");
    box.id = "group-" + (g.key || "all");
    var title = by === "team" ? "Team " + g.key : by === "pool" ? "Pool " + (g.key || "(none: any worker)") : "All jobs";
    box.appendChild(el("h2", title));
    var slots = g.slots < 0 ? "worker slots unknown" : n(g.slots) + " worker slots";
    box.appendChild(el("p", n(g.jobs) + " jobs, " + n(g.instants) + " runs due; " + slots +
      (g.quota ? "; quota " + g.quota_key + " " + n(g.quota) : ""), "summary"));
    var left = leftText(g.left);
    if (left) { box.appendChild(el("p", left, "hint")); }
    box.appendChild(el("h3", "Busiest seconds"));
    var secs = el("table", null, "peaks peak-seconds");
    secs.appendChild(head(["Second (UTC)", "Runs due", "Against the slots", "Made by"]));
    var tb = el("tbody");
    secs.appendChild(tb);
    fill(tb, g.seconds.map(function (p) { return [utc(p.at_ms), n(p.due), against(p, g.slots), madeBy(p)]; }));
    if (!g.seconds.length) { fill(tb, [["nothing due"]]); }
    box.appendChild(secs);
    box.appendChild(el("h3", "Busiest minutes"));
    var mins = el("table", null, "peaks peak-minutes");
    mins.appendChild(head(["Minute (UTC)", "Runs due", "Made by"]));
    var mb = el("tbody");
    mins.appendChild(mb);
    fill(mb, g.minutes.map(function (p) { return [utc(p.at_ms).slice(0, 16) + "Z", n(p.due), madeBy(p)]; }));
    box.appendChild(mins);
    return box;
  }

  function head(labels) {
    var thead = el("thead"), tr = el("tr");
    labels.forEach(function (l) { tr.appendChild(el("th", l)); });
    thead.appendChild(tr);
    return thead;
  }

  function load() {
    var q = new URLSearchParams();
    q.set("hours", document.getElementById("fc-hours").value);
    q.set("by", document.getElementById("fc-by").value);
    q.set("top", document.getElementById("fc-top").value);
    return S.fetchJson("/api/forecast?" + q.toString()).then(function (r) {
      document.getElementById("fc-summary").textContent = n(r.jobs) + " jobs, " + n(r.instants) + " runs due from " +
        utc(r.from_ms) + " to " + utc(r.to_ms) + (r.by ? ", by " + r.by : "");
      document.getElementById("fc-left").textContent = leftText(r.left);
      document.getElementById("fc-note").textContent = r.note ? "Note: " + r.note : "";
      var frag = document.createDocumentFragment();
      r.groups.forEach(function (g) { frag.appendChild(group(g, r.by)); });
      document.getElementById("fc-groups").replaceChildren(frag);
      S.status("updated " + new Date().toLocaleTimeString());
    }).catch(function (e) { S.status(e.message, true); });
  }

  document.getElementById("forecast-form").addEventListener("submit", function (e) { e.preventDefault(); load(); });
  load();
})();
