"""A Docker Engine API stand-in: no Docker daemon can run here, so the docker SDK talks to this.

A real HTTP server on 127.0.0.1 implementing the few endpoints the SDK calls for
the Docker driver (networks create/inspect/list/delete, containers
create/inspect/start/restart/pause/unpause/list/delete, images/create); every
call is recorded in order. Containers become "healthy" on start; they are found by id
or by name, as the engine does.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    query: dict[str, str]
    body: Any

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


class DockerStandIn:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls_: list[Call] = []
        self.containers: dict[str, dict[str, Any]] = {}
        self.networks: dict[str, dict[str, Any]] = {}
        self.images: set[str] = set()
        self.ports = itertools.count(40000)
        self.ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> DockerStandIn:
        standin = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_a: Any) -> None:
                return

            def _h(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                parts = urlsplit(self.path)
                path = re.sub(r"^/v[0-9.]+", "", parts.path)
                q = {k: v[0] for k, v in parse_qs(parts.query).items()}
                code, out = standin.handle(self.command, path, q, json.loads(raw) if raw else None)
                data = b"" if out is None else json.dumps(out).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _h

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"tcp://127.0.0.1:{self._server.server_address[1]}"

    def calls(self) -> list[str]:
        with self.lock:
            return [str(c) for c in self.calls_]

    def call_list(self) -> list[Call]:
        with self.lock:
            return list(self.calls_)

    def handle(  # noqa: PLR0911 - one return per route
        self, method: str, path: str, q: dict[str, str], body: Any
    ) -> tuple[int, Any]:
        with self.lock:
            self.calls_.append(Call(method, path, q, body))
            if method == "POST" and path == "/networks/create":
                nid = f"net{next(self.ids)}"
                self.networks[nid] = {
                    "Id": nid,
                    "Name": body["Name"],
                    "Labels": body.get("Labels") or {},
                }
                return 201, {"Id": nid}
            if method == "GET" and path == "/networks":
                return 200, [n for n in self.networks.values() if self._match(n["Labels"], q)]
            if m := re.fullmatch(r"/networks/([^/]+)", path):
                n = self.networks.get(m[1]) or next(
                    (x for x in self.networks.values() if x["Name"] == m[1]), None
                )
                if n is None:
                    return 404, {"message": "no such network"}
                if method == "DELETE":
                    del self.networks[n["Id"]]
                    return 204, None
                return 200, n
            if method == "POST" and path == "/images/create":
                self.images.add(f"{q['fromImage']}:{q.get('tag', 'latest')}")
                return 200, {"status": "pulled"}
            if method == "GET" and (m := re.fullmatch(r"/images/(.+)/json", path)):
                if m[1] not in self.images:
                    return 404, {"message": f"No such image: {m[1]}"}
                return 200, {"Id": f"sha256:{abs(hash(m[1])):x}", "RepoTags": [m[1]]}
            if method == "POST" and path == "/containers/create":
                if body["Image"] not in self.images:
                    return 404, {"message": f"No such image: {body['Image']}"}
                cid = f"c{next(self.ids):04d}"
                self.containers[cid] = {
                    "Id": cid,
                    "Name": "/" + q["name"],
                    "Config": body,
                    "RestartCount": 0,
                    "State": {"Status": "created", "Running": False},
                    "NetworkSettings": {"Ports": {}},
                }
                return 201, {"Id": cid, "Warnings": []}
            if method == "GET" and path == "/containers/json":
                return 200, [
                    {"Id": c["Id"], "Names": [c["Name"]], "Labels": c["Config"].get("Labels") or {}}
                    for c in self.containers.values()
                    if self._match(c["Config"].get("Labels") or {}, q)
                ]
            if m := re.fullmatch(r"/containers/([^/]+)(?:/(\w+))?", path):
                return self._container(method, m[1], m[2])
            return 404, {"message": f"no route {method} {path}"}

    def _container(self, method: str, ref: str, action: str | None) -> tuple[int, Any]:
        # Like the engine: a container is named by its id or by its name.
        c = self.containers.get(ref) or next(
            (x for x in self.containers.values() if x["Name"] == f"/{ref}"), None
        )
        if c is None:
            return 404, {"message": f"No such container: {ref}"}
        if method == "GET" and action == "json":
            return 200, c
        if method == "DELETE" and action is None:
            del self.containers[c["Id"]]
            return 204, None
        if action in ("start", "restart"):
            health = {"Status": "healthy"} if c["Config"].get("Healthcheck") else None
            c["State"] = {"Status": "running", "Running": True, "Pid": 4242, "Health": health}
            bindings = c["Config"].get("HostConfig", {}).get("PortBindings") or {}
            c["NetworkSettings"]["Ports"] = {
                p: [{"HostIp": "127.0.0.1", "HostPort": str(next(self.ports))}] for p in bindings
            }
            return 204, None
        if action in ("pause", "unpause"):
            c["State"]["Status"] = "paused" if action == "pause" else "running"
            return 204, None
        return 405, {"message": method}

    @staticmethod
    def _match(labels: dict[str, str], q: dict[str, str]) -> bool:
        flt = json.loads(q.get("filters") or "{}").get("label", [])
        for f in flt:
            k, _, v = f.partition("=")
            if labels.get(k) != v:
                return False
        return True
