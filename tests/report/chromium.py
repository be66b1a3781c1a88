"""Open pages in headless Chromium over DevTools: console errors, JS values, screenshots.

Uses Debian's ``chromium`` and ``websocket-client``; no browser download.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


@dataclass
class PageResult:
    console_errors: list[str] = field(default_factory=list)
    console_all: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)
    screenshot: bytes = b""


class _Cdp:
    def __init__(self, url: str, timeout: float) -> None:
        self.ws = websocket.create_connection(url, timeout=timeout, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        session: str | None = None,
        timeout: float = 20.0,
    ) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]
            self.events.append(reply)
        raise TimeoutError(method)

    def wait_event(self, method: str, timeout: float) -> dict[str, Any]:
        for ev in self.events:
            if ev.get("method") == method:
                return ev
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.1, deadline - time.monotonic()))
            ev = json.loads(self.ws.recv())
            self.events.append(ev)
            if ev.get("method") == method:
                return ev
        raise TimeoutError(method)


def _describe(ev: dict[str, Any]) -> tuple[bool, str]:
    """(is an error, text) for a console-ish DevTools event."""
    m, p = ev.get("method"), ev.get("params", {})
    if m == "Runtime.consoleAPICalled":
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
        return p.get("type") in ("error", "assert"), f"console.{p.get('type')}: {text}"
    if m == "Runtime.exceptionThrown":
        return True, f"exception: {p.get('exceptionDetails', {}).get('text', '')}"
    if m == "Log.entryAdded":
        e = p.get("entry", {})
        return e.get("level") == "error", f"log.{e.get('level')}: {e.get('text', '')}"
    return False, ""


def open_page(
    path: Path,
    *,
    expressions: dict[str, str] | None = None,
    width: int = 1280,
    timeout: float = 60.0,
    full_page: bool = True,
) -> PageResult:
    """Load ``path`` (file://), settle, evaluate ``expressions``, take a screenshot."""
    return open_pages(
        [path], expressions=expressions, width=width, timeout=timeout, full_page=full_page
    )[0]


def open_pages(
    paths: list[Path],
    *,
    expressions: dict[str, str] | None = None,
    width: int = 1280,
    timeout: float = 60.0,
    full_page: bool = True,
) -> list[PageResult]:
    """Like ``open_page`` for several pages, one browser, a fresh tab each."""
    if CHROMIUM is None:
        raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
    profile = tempfile.mkdtemp(prefix="faultday-chromium-")
    # Chromium's own temporary folders (org.chromium.Chromium.*) go under TMPDIR, and a
    # browser ended by a signal leaves them: keep them inside the profile, removed below.
    tmp = Path(profile) / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        url = _devtools_url(proc, timeout)
        cdp = _Cdp(url, timeout)
        try:
            return [
                _load(
                    cdp,
                    p,
                    expressions=expressions or {},
                    width=width,
                    timeout=timeout,
                    full_page=full_page,
                )
                for p in paths
            ]
        finally:
            cdp.ws.close()
    finally:
        _stop(proc)
        shutil.rmtree(profile, ignore_errors=True)


def _devtools_url(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        m = re.search(r"DevTools listening on (ws://\S+)", line)
        if m:
            return m.group(1)
    raise RuntimeError(f"chromium did not start: {''.join(seen[-10:])}")


def _load(
    cdp: _Cdp,
    path: Path,
    *,
    expressions: dict[str, str],
    width: int,
    timeout: float,
    full_page: bool,
) -> PageResult:
    target = cdp.call("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for method in ("Runtime.enable", "Log.enable", "Page.enable"):
        cdp.call(method, session=session)
    cdp.call(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 1500, "deviceScaleFactor": 1, "mobile": False},
        session=session,
    )
    cdp.events.clear()
    cdp.call("Page.navigate", {"url": path.resolve().as_uri()}, session=session)
    cdp.wait_event("Page.loadEventFired", timeout)
    time.sleep(0.5)  # late console messages (CSP reports, deferred errors)
    res = PageResult()
    for name, expr in expressions.items():
        r = cdp.call(
            "Runtime.evaluate", {"expression": expr, "returnByValue": True}, session=session
        )
        res.values[name] = r.get("result", {}).get("value")
    shot = cdp.call(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": full_page},
        session=session,
        timeout=timeout,
    )
    res.screenshot = base64.b64decode(shot["data"])
    for ev in cdp.events:
        is_err, text = _describe(ev)
        if text:
            res.console_all.append(text)
        if is_err:
            res.console_errors.append(text)
    cdp.call("Target.closeTarget", {"targetId": target})
    return res


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if proc.stderr is not None:
        proc.stderr.close()
