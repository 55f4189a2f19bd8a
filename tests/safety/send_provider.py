"""A local stand-in for an HTTP send provider (e-mail, messages, payments): it records every
request, answers `GET /sends/<key>` for keys it has, and can hold a response until released."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.server import free_port


class FakeSendProvider:
    """`POST /sends` (Idempotency-Key header) and `GET /sends/{key}` over real HTTP."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.lookups: list[str] = []
        self.hold = threading.Event()  # set: answer at once; clear: hold each POST's answer
        self.hold.set()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = FastAPI()

        @app.post("/sends")
        async def send(request: Request) -> JSONResponse:
            key = request.headers.get("Idempotency-Key", "")
            self.posts.append({"key": key, "body": await request.json()})
            while not self.hold.is_set():
                await asyncio.sleep(0.05)
            return JSONResponse({"id": f"snd-{len(self.posts)}"}, status_code=201)

        @app.get("/sends/{key}")
        async def lookup(key: str) -> JSONResponse:
            self.lookups.append(key)
            for n, post in enumerate(self.posts, start=1):
                if post["key"] == key:
                    return JSONResponse({"id": f"snd-{n}"})
            return JSONResponse({"error": "unknown"}, status_code=404)

        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> FakeSendProvider:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self.hold.set()
        self._server.should_exit = True
        self._thread.join(timeout=5)
