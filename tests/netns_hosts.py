"""Test hosts in network namespaces of the tests' own: where a refused packet would have gone.

A test of a refusal must be built so that, if the refusal were broken, the packet would reach
a host of ours and never a real outside address. `test_host` makes a network namespace with a
veth pair to the host, gives the inside the addresses asked for (private, shared, link-local
or documentation ranges) with routes to them from the host, and runs a tiny HTTP server there
that records every connection it accepts. Needs root (`ip netns`), as the sandbox tests do.
"""

from __future__ import annotations

import itertools
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PORT = 8089
_made = itertools.count()

# Answers every connection with a small HTTP page and records which address it came to.
_SERVER = r"""
import socket, sys, threading
log = open(sys.argv[1], "a", buffering=1)
server = socket.create_server(("0.0.0.0", int(sys.argv[2])), backlog=64)
print("ready", flush=True)
def answer(conn):
    with conn:
        log.write(conn.getsockname()[0] + "\n")
        conn.settimeout(2)
        try:
            conn.recv(65536)
        except OSError:
            pass
        body = b"hello from the test host"
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
while True:
    conn, _ = server.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"""


def refused_ranges_sample() -> tuple[str, ...]:
    """One address (apart per test process) in each range a sandbox must not reach, beside
    the test host's own 10.x address: shared (CGNAT), link-local, and two private ones."""
    n = os.getpid() % 250 + 1
    return (f"100.64.{n}.2", f"169.254.{n}.2", f"172.{16 + n % 16}.{n}.2", f"192.168.{n}.2")


def outside_stand_in() -> str:
    """An address a sandbox may reach, routed to a test host: documentation range
    (TEST-NET-3), never used on the internet, so a broken route reaches no one."""
    return f"203.0.113.{os.getpid() % 250 + 1}"


@dataclass
class NetnsHost:
    """A running test host: its addresses (the first is on the veth's own subnet)."""

    namespace: str
    addresses: list[str]
    log: Path
    port: int = PORT

    def contacts(self) -> list[str]:
        """The addresses its server was reached on, one per connection, in order."""
        return self.log.read_text().split() if self.log.exists() else []


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextmanager
def host_in_netns(
    tmp_path: Path, extra: tuple[str, ...] = (), port: int = PORT
) -> Iterator[NetnsHost]:
    """A test host at 10.x.y.2 (its veth's subnet) and at each of `extra` (routed to it),
    serving on `port` (its namespace has ports of its own)."""
    number = next(_made)
    tag = f"{os.getpid() % 100000}{number}"
    namespace, outer, inner = f"nowl-test-{tag}", f"nwh{tag}", f"nwp{tag}"
    pid = os.getpid()
    prefix = f"10.{150 + pid % 100}.{(pid // 100 + number) % 250}"
    gateway, own = f"{prefix}.1", f"{prefix}.2"
    log = tmp_path / f"test-host-{tag}.log"
    server: subprocess.Popen[bytes] | None = None
    _ip("netns", "add", namespace)
    try:
        _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", namespace)
        _ip("addr", "add", f"{gateway}/24", "dev", outer)
        _ip("link", "set", outer, "up")
        inside = ("-n", namespace)
        _ip(*inside, "addr", "add", f"{own}/24", "dev", inner)
        for address in extra:
            _ip(*inside, "addr", "add", f"{address}/32", "dev", inner)
        _ip(*inside, "link", "set", inner, "up")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "route", "add", "default", "via", gateway, "dev", inner)
        for address in extra:
            _ip("route", "add", f"{address}/32", "dev", outer, "src", gateway)
        server = subprocess.Popen(
            ["ip", "netns", "exec", namespace, sys.executable, "-c", _SERVER, str(log), str(port)],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 10)
        assert ready and server.stdout.readline() == b"ready\n", "the test host did not start"
        yield NetnsHost(namespace, [own, *extra], log, port)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", outer], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, timeout=10)


# Run inside a sandbox: tries each `host:port` at once (a dropped one takes the timeout) and
# prints `<target> open <what it said>` or `<target> refused <why>`, one line each.
PROBE = r"""
import socket, sys, threading
def one(target):
    host, port = target.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=3) as conn:
            conn.sendall(b"GET / HTTP/1.0\r\n\r\n")
            print(target, "open", conn.recv(200).decode(errors="replace").split("\r\n\r\n")[-1],
                  flush=True)
    except OSError as error:
        print(target, "refused", error, flush=True)
threads = [threading.Thread(target=one, args=(t,)) for t in sys.argv[1:]]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""
