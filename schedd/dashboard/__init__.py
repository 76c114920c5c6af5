"""The web dashboard a node serves on its HTTP port, beside /metrics.

It holds no path of its own into the state: every page and JSON endpoint is answered by calling
this node's own gRPC API with the browser's token (`backend.Api`, over the node's private unix
socket, so audit records name the dashboard as the source), so authentication,
authorization, read filtering, forwarding to the leader and auditing are the API's, unchanged,
and a session ends as soon as its token stops authenticating (expired or deleted). The browser
holds only an opaque session cookie; the token stays in this node's memory (`sessions`).

- `sessions`: the session table (cookie id -> token, CSRF token), bounded, idle expiry.
- `login_codes`: one-time login codes (code -> token, one use, a minute, bounded), minted by the
  API for `schedctl dashboard`'s link and redeemed by the login page.
- `backend`: the gRPC calls the pages make, and their answers as plain JSON values.
- `app`: the aiohttp application: login, logout, static files, CSRF and headers, the pages.
- `shell`: what the pages share (session lookup, the page shell, JSON answers).
- `jobs`, `job`, `dags`, `cluster`, `run`: one module per page (its routes, HTML and JSON
  endpoints); `timeline`: the job page's ledger of instants drawn as SVG, `dag_graph`: a DAG's
  layout and SVG (both pure).
- `live`: the server-sent event streams that keep pages current (fed by the API's watches) and
  carry a run's log (the API's log stream), bounded per session and closed with the browser.
- `static/`: our scripts (common.js, one per page) and style.

`schedd.runtime.http` serves it with /metrics, over TLS with the node's certificate.
"""
