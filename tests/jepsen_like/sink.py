"""The effect sink: ground truth of what job handlers did.

Handlers (the HTTP handler kind) POST their facts (job, scheduled_time, attempt, fencing_token)
to it. Per key (job, scheduled time) it accepts at most one effect, and refuses a token lower
than the highest it has seen for the key (a superseded attempt). Every arrival is recorded in the
history: `effect` (verdict accepted | duplicate | stale) at arrival, `effect_end` when answered
(a `hold` query parameter keeps the handler busy that long: long-running jobs).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse



def _ms(text: str) -> int:
    from datetime import datetime
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


class EffectSink:
    def __init__(self, record, host: str = "127.0.0.1") -> None:
        self.record = record
        self.host = host                 # the bridge's address when the workers run in a netns
        self.lock = threading.Lock()
        self.accepted: dict[tuple[str, int], int] = {}      # key -> accepted token
        self.highest: dict[tuple[str, int], int] = {}
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                arrived = time.time()
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                q = parse_qs(urlparse(self.path).query)
                hold = float(q.get("hold", ["0"])[0])
                verdict = sink.offer(body, arrived)
                if hold > 0 and verdict != "stale":
                    time.sleep(hold)
                sink.record("effect_end", job=body.get("job"), scheduled_ms=_ms(body["scheduled_time"]),
                            token=int(body.get("fencing_token", 0)), verdict=verdict)
                code = 409 if verdict == "stale" else 200
                data = json.dumps({"verdict": verdict}).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:          # the handler gave up (cancelled, its worker killed)
                    self.close_connection = True

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="sink", daemon=True)
        self.thread.start()

    def url(self, hold: float = 0) -> str:
        return f"http://{self.host}:{self.port}/effect" + (f"?hold={hold:g}" if hold else "")

    def offer(self, body: dict, arrived: float) -> str:
        key = (str(body.get("job")), _ms(body["scheduled_time"]))
        token = int(body.get("fencing_token", 0))
        with self.lock:
            high = self.highest.get(key, 0)
            if token < high:
                verdict = "stale"
            elif key in self.accepted:
                verdict = "duplicate"
            else:
                verdict = "accepted"
                self.accepted[key] = token
            self.highest[key] = max(high, token)
        self.record("effect", job=key[0], scheduled_ms=key[1], token=token,
                    attempt=int(body.get("attempt", 0)), verdict=verdict, arrived=arrived)
        return verdict

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
