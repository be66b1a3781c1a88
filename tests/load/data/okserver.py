"""A small HTTP server for load tests: 200 on every GET; /admin/delay?ms=N sets a response delay.

It also serves Prometheus text on /metrics (requests served) so scrapes have something real.
"""

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

STATE = {"delay": 0.0, "served": 0}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/admin/delay":
            STATE["delay"] = float(parse_qs(url.query)["ms"][0]) / 1000
            return self._send(200, b"ok", "text/plain")
        if url.path == "/metrics":
            body = f"# TYPE ok_served counter\nok_served_total {STATE['served']}\n".encode()
            return self._send(200, body, "text/plain; version=0.0.4")
        time.sleep(STATE["delay"])
        with LOCK:
            STATE["served"] += 1
        return self._send(200, b'{"status":"ok"}', "application/json")

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
