"""An incremental HTTP/1.1 framer: enough to find message boundaries, not a server.

The proxy feeds it raw bytes and gets back ``Head``/``Body``/``End`` events; it
decodes chunked bodies so toxics can cut or drip on event boundaries, and the
relay re-encodes them. Anything it does not understand turns the connection
into a raw byte pipe (``Raw``), never an error the client would see.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import StrEnum

MAX_HEAD = 64 * 1024
_NO_BODY_STATUS = frozenset({204, 304})


class HttpProtocolError(ValueError):
    """The bytes are not HTTP/1.x we can frame."""


@dataclass(frozen=True, slots=True)
class Head:
    raw: bytes
    method: str  # requests
    target: str
    status: int  # responses
    headers: tuple[tuple[str, str], ...]
    chunked: bool

    def header(self, name: str) -> str:
        low = name.lower()
        for key, value in self.headers:
            if key == low:
                return value
        return ""

    @property
    def is_sse(self) -> bool:
        return self.header("content-type").split(";")[0].strip().lower() == "text/event-stream"


@dataclass(frozen=True, slots=True)
class Body:
    data: bytes
    chunked: bool = False


@dataclass(frozen=True, slots=True)
class End:
    trailers: bytes = b""  # raw trailer lines (chunked only), without the final CRLF
    chunked: bool = False


@dataclass(frozen=True, slots=True)
class Raw:
    data: bytes


Event = Head | Body | End | Raw


class _State(StrEnum):
    HEAD = "head"
    LENGTH = "length"
    CHUNK_SIZE = "chunk_size"
    CHUNK_DATA = "chunk_data"
    CHUNK_CRLF = "chunk_crlf"
    TRAILERS = "trailers"
    UNTIL_CLOSE = "until_close"
    RAW = "raw"


def parse_head(raw: bytes, *, response: bool) -> Head:
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes anything
        raise HttpProtocolError(str(exc)) from exc
    lines = text.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2:
        raise HttpProtocolError(f"bad start line {lines[0]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise HttpProtocolError(f"bad header line {line!r}")
        headers.append((key.strip().lower(), value.strip()))
    te = ",".join(v for k, v in headers if k == "transfer-encoding").lower()
    if response:
        if not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HttpProtocolError(f"bad status line {lines[0]!r}")
        return Head(raw, "", "", int(parts[1]), tuple(headers), "chunked" in te)
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpProtocolError(f"bad request line {lines[0]!r}")
    return Head(raw, parts[0], parts[1], 0, tuple(headers), "chunked" in te)


class Framer:
    """Incremental framer for one direction of one connection."""

    def __init__(self, *, response: bool) -> None:
        self.response = response
        self._buf = bytearray()
        self._state = _State.HEAD
        self._left = 0
        # Methods of requests whose responses are still to come (HEAD has no body).
        self.request_methods: deque[str] = deque()
        self.head: Head | None = None

    @property
    def raw(self) -> bool:
        return self._state is _State.RAW

    def fail(self) -> bytes:
        """Give up framing: the rest of the connection is raw bytes; return what was buffered."""
        self._state = _State.RAW
        data = bytes(self._buf)
        self._buf.clear()
        return data

    @property
    def at_boundary(self) -> bool:
        return self._state is _State.HEAD and not self._buf

    def feed(self, data: bytes) -> list[Event]:
        self._buf += data
        out: list[Event] = []
        while self._step(out):
            pass
        return out

    def eof(self) -> list[Event]:
        """The peer closed: a body delimited by the close ends here."""
        if self._state is _State.UNTIL_CLOSE:
            self._state = _State.HEAD
            return [End(b"")]
        return []

    def _step(self, out: list[Event]) -> bool:  # noqa: PLR0911 - one return per state
        state = self._state
        if state is _State.RAW or state is _State.UNTIL_CLOSE:
            if self._buf:
                data = bytes(self._buf)
                self._buf.clear()
                out.append(Raw(data) if state is _State.RAW else Body(data, False))
            return False
        if state is _State.HEAD:
            return self._step_head(out)
        if state is _State.LENGTH or state is _State.CHUNK_DATA:
            return self._step_data(out)
        if state is _State.CHUNK_SIZE:
            return self._step_chunk_size()
        if state is _State.CHUNK_CRLF:
            if len(self._buf) < 2:
                return False
            if self._buf[:2] != b"\r\n":
                raise HttpProtocolError("missing CRLF after chunk")
            del self._buf[:2]
            self._state = _State.CHUNK_SIZE
            return True
        return self._step_trailers(out)

    def _step_head(self, out: list[Event]) -> bool:
        # Tolerate stray CRLFs between messages (RFC 9112 §2.2).
        while self._buf[:2] == b"\r\n":
            del self._buf[:2]
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD:
                raise HttpProtocolError("head too large")
            return False
        raw = bytes(self._buf[: end + 4])
        del self._buf[: end + 4]
        head = parse_head(raw[:-4], response=self.response)
        head = Head(raw, head.method, head.target, head.status, head.headers, head.chunked)
        self.head = head
        out.append(head)
        self._begin_body(head, out)
        return True

    def _begin_body(self, head: Head, out: list[Event]) -> None:
        if self.response:
            if 100 <= head.status < 200:
                if head.status == 101:
                    self._state = _State.RAW
                out.append(End(b""))
                return  # interim: the request still waits for its final response
            method = self.request_methods.popleft() if self.request_methods else "GET"
            if method == "CONNECT" and 200 <= head.status < 300:
                out.append(End(b""))
                self._state = _State.RAW
                return
            if method == "HEAD" or head.status in _NO_BODY_STATUS:
                out.append(End(b""))
                return
        else:
            self.request_methods.append(head.method)
        length = head.header("content-length")
        if head.chunked:
            self._state = _State.CHUNK_SIZE
        elif length:
            if not length.isdigit():
                raise HttpProtocolError(f"bad content-length {length!r}")
            self._left = int(length)
            self._state = _State.LENGTH
            if self._left == 0:
                self._state = _State.HEAD
                out.append(End(b""))
        elif self.response:
            self._state = _State.UNTIL_CLOSE
        else:
            out.append(End(b""))

    def _step_data(self, out: list[Event]) -> bool:
        if not self._buf:
            return False
        take = min(self._left, len(self._buf))
        out.append(Body(bytes(self._buf[:take]), self._state is _State.CHUNK_DATA))
        del self._buf[:take]
        self._left -= take
        if self._left == 0:
            if self._state is _State.LENGTH:
                self._state = _State.HEAD
                out.append(End(b""))
            else:
                self._state = _State.CHUNK_CRLF
        return True

    def _step_chunk_size(self) -> bool:
        end = self._buf.find(b"\r\n")
        if end < 0:
            if len(self._buf) > 1024:
                raise HttpProtocolError("chunk size line too long")
            return False
        line = bytes(self._buf[:end]).split(b";")[0].strip()
        del self._buf[: end + 2]
        try:
            size = int(line, 16)
        except ValueError as exc:
            raise HttpProtocolError(f"bad chunk size {line!r}") from exc
        if size == 0:
            self._state = _State.TRAILERS
        else:
            self._left = size
            self._state = _State.CHUNK_DATA
        return True

    def _step_trailers(self, out: list[Event]) -> bool:
        if self._buf[:2] == b"\r\n":
            del self._buf[:2]
            self._state = _State.HEAD
            out.append(End(b"", True))
            return True
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD:
                raise HttpProtocolError("trailers too large")
            return False
        trailers = bytes(self._buf[: end + 2])
        del self._buf[: end + 4]
        self._state = _State.HEAD
        out.append(End(trailers, True))
        return True


def encode(event: Body | End) -> bytes:
    """Re-encode a body piece or a message end the way the peer framed it."""
    if isinstance(event, End):
        return b"0\r\n" + event.trailers + b"\r\n" if event.chunked else b""
    if not event.chunked or not event.data:
        return event.data
    return b"%x\r\n%s\r\n" % (len(event.data), event.data)


_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def error_response(status: int, *, retry_after: int, body: str, content_type: str) -> bytes:
    payload = body.encode() if body else b""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    if payload:
        lines.append(f"Content-Type: {content_type}")
    lines.append(f"Content-Length: {len(payload)}")
    if retry_after >= 0:
        lines.append(f"Retry-After: {retry_after}")
    lines.append("X-Faultday-Toxic: http_error")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def split_events(buf: bytearray) -> list[bytes]:
    """Pop complete SSE events (each with its blank-line terminator) off ``buf``."""
    events: list[bytes] = []
    while True:
        best = -1
        size = 0
        for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
            pos = buf.find(sep)
            if pos >= 0 and (best < 0 or pos < best):
                best, size = pos, len(sep)
        if best < 0:
            return events
        events.append(bytes(buf[: best + size]))
        del buf[: best + size]
