// The one-time link `schedctl dashboard` prints carries the token in the fragment
// (/login#token=...), which browsers never send to the server: post it as the form would,
// after dropping it from the address bar and the history.
(function () {
  "use strict";
  var hash = window.location.hash.replace(/^#/, "");
  if (!hash) { return; }
  var token = new URLSearchParams(hash).get("token");
  window.history.replaceState(null, "", window.location.pathname + window.location.search);
  if (!token) { return; }
  document.getElementById("token").value = token;
  document.getElementById("login").submit();
})();
