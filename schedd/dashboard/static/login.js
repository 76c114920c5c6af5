// The one-time link `schedctl dashboard` prints carries a login code in the fragment
// (/login#code=...), which browsers never send to the server: drop it from the address bar and
// the history, then post it with the form's CSRF value; the server redeems it once.
// An old link that carried the token itself (#token=...) is no longer accepted: it is dropped
// from the address bar too, and the page says how to get a one-time link.
// A link opened while this page is already shown (after a logout, say) only changes the
// fragment, which reloads nothing: `hashchange` takes it then.
(function () {
  "use strict";
  function take() {
    var hash = window.location.hash.replace(/^#/, "");
    if (!hash) { return; }
    var params = new URLSearchParams(hash);
    window.history.replaceState(null, "", window.location.pathname + window.location.search);
    var form = document.getElementById("login");
    var code = params.get("code");
    if (code) {
      var field = document.createElement("input");
      field.type = "hidden";
      field.name = "code";
      field.value = code;
      form.appendChild(field);
      form.submit();
      return;
    }
    if (params.get("token") && !document.getElementById("error")) {
      var note = document.createElement("p");
      note.className = "error";
      note.id = "error";
      note.textContent = "links that carry a token are no longer accepted: run schedctl dashboard " +
        "for a one-time link, or paste the token here";
      form.appendChild(note);
    }
  }
  window.addEventListener("hashchange", take);
  take();
})();
