"""A small HTTP server for load tests: 200 on every GET; /admin/delay?ms=N sets a response delay.

/sse streams an OpenAI-style answer of two chunks and ``[DONE]``; /sse?cut=1 closes the
connection after the chunks, without ending the stream (an answer cut off).

It also serves Prometheus text on /metrics (requests served) so scrapes have something real.
"""

import json
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
        if url.path == "/sse":
            return self._sse(cut="cut" in parse_qs(url.query))
        return self._send(200, b'{"status":"ok"}', "application/json")

    def _sse(self, *, cut: bool) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for word in (" the", " answer"):
            chunk = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        if not cut:
            self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True

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
