"""Local stand-ins for the Anthropic and OpenAI HTTP APIs: they record requests and answer
from a queue, so adapter tests exercise the real SDKs over real HTTP."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from tests.server import free_port


class FakeProvider:
    """An HTTP server answering `POST /v1/messages` and `POST /v1/chat/completions`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = FastAPI()

        async def answer(request: Request) -> JSONResponse:
            self.requests.append(await request.json())
            status, body = self.answers.pop(0) if self.answers else (500, {"error": "no answer"})
            return JSONResponse(body, status_code=status)

        app.post("/v1/messages")(answer)
        app.post("/v1/chat/completions")(answer)
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> FakeProvider:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)


def anthropic_reply(
    text: str = "", tool: tuple[str, dict[str, Any]] | None = None, **usage: int
) -> dict[str, Any]:
    """A Messages API response body."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    if tool:
        content.append({"type": "tool_use", "id": "toolu_1", "name": tool[0], "input": tool[1]})
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use" if tool else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.get("input_tokens", 10),
            "output_tokens": usage.get("output_tokens", 5),
            "cache_read_input_tokens": usage.get("cache_read", 0),
            "cache_creation_input_tokens": usage.get("cache_write", 0),
        },
    }


def openai_reply(
    text: str | None = None, tool: tuple[str, str] | None = None, cached: int = 0
) -> dict[str, Any]:
    """A Chat Completions response body (`tool` = (name, JSON arguments))."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool:
        message["tool_calls"] = [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": tool[0], "arguments": tool[1]},
            }
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 7,
            "total_tokens": 107,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }
