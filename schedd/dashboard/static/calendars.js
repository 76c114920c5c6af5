// The Calendars page (/calendars): the calendars and blackouts the token may read
// (/api/calendars), each calendar with its next dates and the jobs that use it.
(function () {
  "use strict";
  var S = window.schedd, el = S.el, fill = S.fill;

  function list(items, render) {
    var ul = el("ul", null, "plain-list");
    items.forEach(function (i) { ul.appendChild(render(i)); });
    return items.length ? ul : el("span", "-", "muted");
  }

  function load() {
    return S.fetchJson("/api/calendars").then(function (body) {
      document.getElementById("calendars-count").textContent = "(" + body.calendars.length + ")";
      document.getElementById("blackouts-count").textContent = "(" + body.blackouts.length + ")";
      fill(document.querySelector("#calendars tbody"), body.calendars.map(function (c) {
        var name = el("span", null, "calendar-name");
        name.id = "calendar-" + c.name;
        name.appendChild(el("strong", c.name));
        if (c.description) { name.appendChild(el("div", c.description, "hint")); }
        var entries = el("span", c.kinds || "-");
        if (c.sources.length) { entries.appendChild(el("div", c.sources.join("; "), "hint")); }
        return [name, c.team, entries,
                list(c.next, function (d) { return el("li", d.date + " " + d.name); }),
                list(c.used_by, function (j) {
                  var li = el("li"), a = el("a", j);
                  a.href = "/jobs/" + encodeURIComponent(j);
                  li.appendChild(a);
                  return li;
                })];
      }));
      if (!body.calendars.length) { fill(document.querySelector("#calendars tbody"), [["no calendars you may read"]]); }
      fill(document.querySelector("#blackouts tbody"), body.blackouts.map(function (b) {
        return [el("strong", b.name), b.start, b.end, el("span", b.when, "tag blackout-" + b.when), b.selector,
                b.reason || "-"];
      }));
      if (!body.blackouts.length) { fill(document.querySelector("#blackouts tbody"), [["no blackouts you may read"]]); }
      if (window.location.hash) {
        var target = document.getElementById(decodeURIComponent(window.location.hash.slice(1)));
        if (target) { target.classList.add("target"); }
      }
      S.status("updated " + new Date().toLocaleTimeString());
    }).catch(function (e) { S.status(e.message, true); });
  }

  S.follow(load, {watch: "jobs"});
})();
