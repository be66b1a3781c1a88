"""One client for any Toxiproxy-API server: faultday's proxy or a real toxiproxy-server."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx
from pydantic import JsonValue

from faultday.errors import FaultdayError

DEFAULT_TIMEOUT = 5.0


class ProxyAPIError(FaultdayError):
    """The Toxiproxy API answered with an error (or not at all)."""

    def __init__(self, message: str, *, status: int = 0, unreachable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        # Nothing listens at the API address: a proxy server that is gone took its
        # toxics with it (no server keeps them on disk), which reverts can rely on.
        self.unreachable = unreachable


@dataclass(frozen=True, slots=True)
class ToxicInfo:
    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, JsonValue]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ToxicInfo:
        return cls(
            name=str(raw["name"]),
            type=str(raw["type"]),
            stream=str(raw.get("stream", "downstream")),
            toxicity=float(raw.get("toxicity", 1.0)),
            attributes=dict(raw.get("attributes") or {}),
        )


@dataclass(frozen=True, slots=True)
class ProxyInfo:
    name: str
    listen: str
    upstream: str
    enabled: bool
    toxics: tuple[ToxicInfo, ...]

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ProxyInfo:
        return cls(
            name=str(raw["name"]),
            listen=str(raw["listen"]),
            upstream=str(raw["upstream"]),
            enabled=bool(raw["enabled"]),
            toxics=tuple(ToxicInfo.from_json(t) for t in raw.get("toxics") or ()),
        )

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


class ToxiproxyClient:
    """Typed calls to Toxiproxy's HTTP API; every call has a timeout."""

    def __init__(self, api_url: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.api_url = api_url.rstrip("/")
        self._http = httpx.Client(base_url=self.api_url, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ToxiproxyClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, method: str, path: str, body: JsonValue = None) -> Any:
        try:
            resp = self._http.request(method, path, json=body)
        except httpx.ConnectError as exc:
            raise ProxyAPIError(f"{method} {self.api_url}{path}: {exc}", unreachable=True) from exc
        except httpx.HTTPError as exc:
            raise ProxyAPIError(f"{method} {self.api_url}{path}: {exc}") from exc
        if resp.status_code >= 400:
            try:
                message = str(resp.json().get("error", resp.text))
            except ValueError:
                message = resp.text
            raise ProxyAPIError(
                f"{method} {self.api_url}{path}: {resp.status_code} {message}",
                status=resp.status_code,
            )
        if resp.status_code == 204 or not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            return resp.text

    # ---- server ----------------------------------------------------------------------
    def version(self) -> str:
        out = self._call("GET", "/version")
        # Toxiproxy < 2.6 answers plain text; later versions JSON.
        return str(out.get("version", out)) if isinstance(out, dict) else str(out).strip()

    def reset(self) -> None:
        self._call("POST", "/reset")

    def proxies(self) -> dict[str, ProxyInfo]:
        raw = self._call("GET", "/proxies")
        return {name: ProxyInfo.from_json(p) for name, p in raw.items()}

    def populate(self, proxies: list[dict[str, JsonValue]]) -> list[ProxyInfo]:
        raw = self._call("POST", "/populate", list(proxies))
        items = raw.get("proxies", []) if isinstance(raw, dict) else raw
        return [ProxyInfo.from_json(p) for p in items]

    # ---- proxies -----------------------------------------------------------------------
    def create_proxy(
        self, name: str, *, upstream: str, listen: str = "127.0.0.1:0", enabled: bool = True
    ) -> ProxyInfo:
        body: JsonValue = {"name": name, "upstream": upstream, "listen": listen, "enabled": enabled}
        return ProxyInfo.from_json(self._call("POST", "/proxies", body))

    def proxy(self, name: str) -> ProxyInfo:
        return ProxyInfo.from_json(self._call("GET", f"/proxies/{name}"))

    def set_enabled(self, name: str, enabled: bool) -> ProxyInfo:
        return ProxyInfo.from_json(self._call("POST", f"/proxies/{name}", {"enabled": enabled}))

    def delete_proxy(self, name: str, *, missing_ok: bool = True) -> bool:
        """Delete a proxy; False when it was already gone (and ``missing_ok``)."""
        return self._delete(f"/proxies/{name}", missing_ok=missing_ok)

    # ---- toxics --------------------------------------------------------------------------
    def toxics(self, proxy: str) -> list[ToxicInfo]:
        return [ToxicInfo.from_json(t) for t in self._call("GET", f"/proxies/{proxy}/toxics")]

    def add_toxic(
        self,
        proxy: str,
        *,
        type: str,
        name: str = "",
        stream: str = "downstream",
        toxicity: float = 1.0,
        attributes: dict[str, JsonValue] | None = None,
    ) -> ToxicInfo:
        body: dict[str, JsonValue] = {
            "type": type,
            "stream": stream,
            "toxicity": toxicity,
            "attributes": dict(attributes or {}),
        }
        if name:
            body["name"] = name
        return ToxicInfo.from_json(self._call("POST", f"/proxies/{proxy}/toxics", body))

    def update_toxic(
        self,
        proxy: str,
        name: str,
        *,
        attributes: dict[str, JsonValue],
        toxicity: float | None = None,
    ) -> ToxicInfo:
        body: dict[str, JsonValue] = {"attributes": dict(attributes)}
        if toxicity is not None:
            body["toxicity"] = toxicity
        return ToxicInfo.from_json(self._call("POST", f"/proxies/{proxy}/toxics/{name}", body))

    def delete_toxic(self, proxy: str, name: str, *, missing_ok: bool = True) -> bool:
        """Remove a toxic; False when it (or its proxy) was already gone (and ``missing_ok``)."""
        return self._delete(f"/proxies/{proxy}/toxics/{name}", missing_ok=missing_ok)

    def _delete(self, path: str, *, missing_ok: bool) -> bool:
        try:
            self._call("DELETE", path)
        except ProxyAPIError as exc:
            if exc.status == 404 and missing_ok:
                return False
            raise
        return True

    # ---- faultday extensions ----------------------------------------------------------------
    def counters(self, proxy: str) -> dict[str, JsonValue]:
        """``GET /proxies/{name}/counters`` (faultday's proxy only; 404 elsewhere)."""
        out: dict[str, JsonValue] = self._call("GET", f"/proxies/{proxy}/counters")
        return out

    def metrics(self) -> str:
        try:
            resp = self._http.get("/metrics")
        except httpx.HTTPError as exc:
            raise ProxyAPIError(f"GET {self.api_url}/metrics: {exc}") from exc
        if resp.status_code != 200:
            raise ProxyAPIError(f"GET /metrics: {resp.status_code}", status=resp.status_code)
        return resp.text
