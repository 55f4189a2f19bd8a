"""A database outage for one test only: a TCP proxy on 127.0.0.1 in front of the shared
PostgreSQL. `cut()` closes every connection through it and refuses new ones (as a restarting
server does), `restore()` listens again on the same port. The shared server itself is never
touched, so other tests running on this machine go on."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import make_url

UPSTREAM = ("127.0.0.1", 5432)


class PostgresProxy:
    """Forwards 127.0.0.1:<port> to PostgreSQL until cut."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self.port = 0
        self.connections = 0  # accepted since the start (a reconnect counts again)

    def url(self, database_url: str) -> str:
        """`database_url` (of the shared server) through this proxy."""
        return make_url(database_url).set(port=self.port).render_as_string(hide_password=False)

    def restore(self) -> None:
        """Listen (again) on the proxy's port."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Close every connection and stop listening: the database is unreachable."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._sockets = self._sockets, []
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(UPSTREAM)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
                self.connections += 1
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def postgres_proxy() -> Iterator[PostgresProxy]:
    """A proxy that is listening; cut when the test ends."""
    proxy = PostgresProxy()
    proxy.restore()
    try:
        yield proxy
    finally:
        proxy.cut()


def restore_after(proxy: PostgresProxy, seconds: float) -> threading.Timer:
    """Bring the database back in `seconds` (the outage's length), from another thread."""
    timer = threading.Timer(seconds, proxy.restore)
    timer.start()
    return timer
