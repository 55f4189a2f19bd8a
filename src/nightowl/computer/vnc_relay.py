"""The live view's relay inside the sandbox: a viewer's bytes to the display's x11vnc, which
listens on the sandbox's own loopback only."""

from __future__ import annotations

from nightowl.computer.bubblewrap import SYSTEM_PYTHON

# Runs inside the sandbox (system Python, standard library only): connects to the display's
# VNC port on the sandbox's loopback and relays bytes between it and the socket on stdin.
# x11vnc takes a second to listen on an idle machine, far longer on a busy one: the relay
# waits up to 30 s for it (the viewer shows "connecting" meanwhile) rather than giving up
# and making the viewer start over.
RELAY = """
import select, socket, sys, time
deadline = time.monotonic() + 30
while True:
    try:
        vnc = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(2)
        time.sleep(0.05)
vnc.settimeout(None)
viewer = socket.socket(fileno=0)
other = {viewer: vnc, vnc: viewer}
while True:
    for end in select.select(list(other), [], [])[0]:
        data = end.recv(65536)
        if not data:
            sys.exit(0)
        other[end].sendall(data)
"""


def relay_argv(vnc_port: int) -> list[str]:
    """The command that relays its stdin socket to the VNC port inside the sandbox."""
    return [SYSTEM_PYTHON, "-I", "-S", "-c", RELAY, str(vnc_port)]
