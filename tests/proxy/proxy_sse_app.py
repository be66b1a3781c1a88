"""A real streaming HTTP server for the proxy's HTTP/SSE toxic tests (run by uvicorn)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

app = FastAPI()


@app.get("/hello")
async def hello() -> JSONResponse:
    return JSONResponse({"ok": True})


@app.post("/echo")
async def echo(request: Request) -> Response:
    return Response(await request.body(), media_type="application/octet-stream")


@app.get("/status/{code}")
async def status(code: int) -> Response:
    return Response(b"status", status_code=code)


@app.get("/sse")
async def sse(n: int = 10, interval_ms: int = 0) -> StreamingResponse:
    async def events() -> AsyncIterator[bytes]:
        for i in range(n):
            yield f"id: {i}\ndata: token-{i}\n\n".encode()
            if interval_ms:
                await asyncio.sleep(interval_ms / 1000)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
