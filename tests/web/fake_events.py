"""A stand-in for `/v1/events` that the test controls: it sends only the notices it is told to.

The page's event stream is routed here, so a test can drop notifications on purpose.
"""

from __future__ import annotations

import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeEvents:
    """An SSE endpoint on 127.0.0.1 whose notifications come from `push`."""

    def __init__(self) -> None:
        self._listeners: list[queue.Queue[str | None]] = []
        self._lock = threading.Lock()
        self.connections = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                mailbox: queue.Queue[str | None] = queue.Queue()
                with outer._lock:
                    outer._listeners.append(mailbox)
                    outer.connections += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                try:
                    self.wfile.write(b": connected\n\n")
                    self.wfile.flush()
                    while (event := mailbox.get()) is not None:
                        self.wfile.write(event.encode())
                        self.wfile.flush()
                except OSError:
                    pass
                finally:
                    with outer._lock:
                        outer._listeners.remove(mailbox)

            def log_message(self, *_args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def push(self, conversation_id: str, seq: int, kind: str = "message") -> None:
        """Send one change notification to every connected page."""
        data = json.dumps({"conversation_id": conversation_id, "seq": seq, "kind": kind})
        with self._lock:
            for mailbox in self._listeners:
                mailbox.put(f"event: change\ndata: {data}\n\n")

    def close(self) -> None:
        with self._lock:
            for mailbox in self._listeners:
                mailbox.put(None)
        self._server.shutdown()
        self._server.server_close()
