"""`nightowl chat`: a terminal client over the HTTP API with the same sync rules as the web app.

Each message gets a client id before the first attempt and keeps it across retries; the
client follows change notifications, fetches what is new after the last seq it has, and
catches up by itself after a lost connection or a server restart. It shows the same message
kinds as the web app, as text: attachments (with their download address), buttons and drafts
(answered with `/answer`, `/send` and `/discard`), and what the agent is doing.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TextIO

import httpx

RETRY_DELAYS = (0.5, 1, 2, 4, 8)


class ChatError(Exception):
    """The server refused a request; the message says why."""


class TerminalChat:
    """Sends lines as messages and prints the conversation as it grows."""

    def __init__(
        self,
        base_url: str,
        token: str,
        conversation_id: str | None = None,
        out: TextIO = sys.stdout,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(10.0, read=30.0),
        )
        self._out = out
        self._base_url = base_url.rstrip("/")
        self._last_seq = 0
        self._activity = ""
        self.messages: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.conversation_id = conversation_id or self._start_conversation()

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._http.request(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise ChatError(f"{response.status_code}: {message}")
        return response.json()

    def _start_conversation(self) -> str:
        created = self._request("POST", "/v1/conversations", json={"kind": "direct"})
        return str(created["id"])

    def _post_with_retries(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        # One client id for every attempt: the server keeps the first and returns it again.
        body = {"client_id": f"cli-{uuid.uuid4().hex}", **body}
        for attempt, delay in enumerate((*RETRY_DELAYS, None)):
            try:
                sent: dict[str, Any] = self._request("POST", path, json=body)
                return sent
            except httpx.TransportError:
                if delay is None:
                    raise
                self._print(f"(send failed, retrying {attempt + 1}/{len(RETRY_DELAYS)} …)")
                time.sleep(delay)
        raise AssertionError("unreachable")

    def send(self, text: str) -> dict[str, Any]:
        """Send one message; network failures are retried with the same client id."""
        return self._post_with_retries(
            f"/v1/conversations/{self.conversation_id}/messages", {"text": text}
        )

    def answer(self, seq: int, answer: dict[str, Any]) -> dict[str, Any]:
        """Answer the question shown as message `seq` (retried like a message)."""
        question = self.messages.get(seq)
        if question is None or not question.get("controls"):
            raise ChatError(f"message [{seq}] asks nothing; answer a message with choices")
        path = f"/v1/conversations/{self.conversation_id}/messages/{question['id']}/answer"
        return self._post_with_retries(path, answer)

    def command(self, line: str) -> None:
        """Run `/answer SEQ N`, `/send SEQ [text]` or `/discard SEQ`."""
        parts = line.split(maxsplit=2)
        name = parts[0]
        if name not in ("/answer", "/send", "/discard") or len(parts) < 2:
            raise ChatError("commands: /answer SEQ N · /send SEQ [edited text] · /discard SEQ")
        try:
            seq = int(parts[1])
        except ValueError:
            raise ChatError(f"{parts[1]!r} is not a message number like 12") from None
        if name == "/answer":
            buttons = (self.messages.get(seq, {}).get("controls") or {}).get("buttons") or []
            if len(parts) < 3 or not parts[2].isdigit() or not 1 <= int(parts[2]) <= len(buttons):
                raise ChatError(
                    f"pick a choice by its number, 1 to {len(buttons)}: /answer {seq} 1"
                )
            self.answer(seq, {"value": buttons[int(parts[2]) - 1]["value"]})
        elif name == "/send":
            self.answer(seq, {"action": "send", **({"text": parts[2]} if len(parts) > 2 else {})})
        else:
            self.answer(seq, {"action": "discard"})

    def catch_up(self) -> None:
        """Fetch and print every message after the last one shown."""
        with self._lock:
            while True:
                page = self._request(
                    "GET",
                    f"/v1/conversations/{self.conversation_id}/messages",
                    params={"after": self._last_seq},
                )
                for message in page["messages"]:
                    self.messages[message["seq"]] = message
                    self._print(render(message, self._base_url))
                    self._last_seq = message["seq"]
                if self._last_seq >= page["last_seq"] or not page["messages"]:
                    return

    def follow(self, on_error: Callable[[Exception], None] | None = None) -> None:
        """Follow change notifications until `close()`; reconnect and catch up on every drop."""
        delay_index = 0
        while not self._stop.is_set():
            try:
                self.catch_up()
                with self._http.stream("GET", "/v1/events", timeout=None) as stream:
                    delay_index = 0
                    self.catch_up()  # whatever landed while we connected
                    for line in stream.iter_lines():
                        if self._stop.is_set():
                            return
                        if not line.startswith("data:"):
                            continue
                        change = json.loads(line[5:])
                        if change.get("conversation_id") != self.conversation_id:
                            continue
                        if change.get("kind") == "activity":
                            self.show_activity()
                        else:
                            self.catch_up()
            except (httpx.TransportError, ChatError) as error:
                if on_error is not None:
                    on_error(error)
            if self._stop.wait(RETRY_DELAYS[min(delay_index, len(RETRY_DELAYS) - 1)]):
                return
            delay_index += 1

    def show_activity(self) -> None:
        """Print what the agent is doing when that changes (never its private text)."""
        activity = self._request("GET", f"/v1/conversations/{self.conversation_id}")["activity"]
        if activity and activity != self._activity:
            self._print(f"(nightowl is {activity}…)")
        self._activity = activity

    def _print(self, line: str) -> None:
        print(line, file=self._out, flush=True)

    def close(self) -> None:
        """Stop following and release the connection."""
        self._stop.set()
        self._http.close()


def render(message: dict[str, Any], base_url: str = "") -> str:
    """One message as terminal text, with its files and choices."""
    who = {"user": "you" if message.get("trust") == "owner" else "them", "agent": "nightowl"}.get(
        message["role"], message["role"]
    )
    if message.get("trust") == "untrusted":
        who += " (untrusted)"
    flag = "(!) " if message.get("important") else ""
    seq = message["seq"]
    lines = [f"[{seq}] {who}: {flag}{message['body']}"]
    for attached in message.get("files") or []:
        lines.append(
            f"    file: {attached['name']} ({attached['size']} bytes) {base_url}{attached['url']}"
        )
    controls = message.get("controls")
    if controls:
        if controls.get("buttons"):
            choices = "  ".join(
                f"[{n}] {b['label']}" for n, b in enumerate(controls["buttons"], start=1)
            )
            lines.append(f"    {choices}")
            how = f"answer with /answer {seq} N"
        else:
            lines.extend(f"    | {line}" for line in str(controls.get("draft", "")).splitlines())
            how = f"/send {seq} to send it, /send {seq} <new text> to change it, /discard {seq}"
        state = controls.get("state")
        lines.append(f"    ({how})" if state == "open" else f"    ({state})")
    return "\n".join(lines)


def run_chat(base_url: str, token: str, conversation_id: str | None) -> int:
    """The interactive loop: stdin lines are sent; the conversation prints as it changes."""
    chat = TerminalChat(base_url, token, conversation_id)
    print(f"conversation {chat.conversation_id} — type a message, Ctrl-D to leave", flush=True)
    follower = threading.Thread(target=chat.follow, daemon=True)
    follower.start()
    try:
        for line in sys.stdin:
            text = line.rstrip("\n")
            if not text.strip():
                continue
            try:
                if text.startswith("/"):
                    chat.command(text.strip())
                else:
                    chat.send(text)
            except (ChatError, httpx.TransportError) as error:
                print(f"(not sent: {error})", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        chat.close()
    return 0
